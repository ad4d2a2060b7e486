//! The enforcement loop: [`Enforcer`].

use crate::input::{request_context, Staged};
use crate::runner::WholeReply;
use crate::validator::{push_leaves, Found, Leaf, Verdict};
use crate::{
    Budget, BudgetKind, Context, Cut, Event, FinishReason, InputStage, Issue, Message, Observer,
    Outcome, Policy, Reask, Reply, Request, Runner, Status, StopReason, Usage, Validator,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod run;
use run::{Received, Run, Spent};

/// Code of the warning recorded when the policy's fallback text failed validation (or could
/// not be validated) and was therefore not used.
pub const FALLBACK_INVALID: &str = "FALLBACK_INVALID";

/// What [`Enforcer::check`] does about errors in the text it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Check {
    /// Report the issues; the text stays as it is.
    #[default]
    Report,
    /// Apply the repairs of the validators that raised errors, then validate the result again.
    Repair,
}

/// Runs validators over responses, re-asks with feedback, repairs, and reports an [`Outcome`].
///
/// Cheap to share: wrap it in an `Arc` and call it from many tasks at once; it holds no
/// per-request state.
#[derive(Debug)]
pub struct Enforcer {
    // Shared, so that a per-request narrowing ([`Enforcer::narrowed`]) copies no validator.
    validators: Arc<[Box<dyn Validator>]>,
    policy: Policy,
    input: Option<Arc<InputStage>>,
}

fn error_codes(issues: &[Issue]) -> Vec<&str> {
    let mut codes: Vec<&str> = issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| i.code.as_str())
        .collect();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// The errors of `issues` as (code, line, message), sorted, without repeats: two attempts
/// with the same set made no progress (the same code at another place, or with another
/// message, is a change).
fn error_set(issues: &[Issue]) -> Vec<(&str, Option<u32>, &str)> {
    let mut errors: Vec<_> = issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| (i.code.as_str(), i.line, i.message.as_str()))
        .collect();
    errors.sort_unstable();
    errors.dedup();
    errors
}

/// Bytes of the messages' contents: what an estimate of input tokens counts.
fn message_bytes(request: &Request) -> usize {
    request
        .messages
        .iter()
        .map(|m| m.content.len())
        .fold(0, usize::saturating_add)
}

/// Code of the issue raised when the runner says the answer hit its token limit
/// (`finish_reason: length`).
pub const TRUNCATED: &str = "TRUNCATED";

/// The name truncation issues carry in place of a validator's.
pub const FINISH_REASON: &str = "finish_reason";

/// The issue of an answer cut at the token limit: an error, listed first, when the answer
/// fails anyway (so the re-ask asks for a shorter answer instead of only blaming the
/// symptom), a warning when it passes every validator.
fn truncated(fails: bool) -> Issue {
    let issue = Issue::error(
        FINISH_REASON,
        TRUNCATED,
        "The answer was cut at the token limit (finish_reason: length).",
    )
    .with_hint("cut at the token limit: answer shorter");
    if fails {
        issue
    } else {
        issue.with_severity(crate::Severity::Warning)
    }
}

/// `request` as attempt `number` sends it: a numeric `seed` in its parameters advanced by
/// one per attempt before it, and the same offset for a runner's own configured seed.
fn reseeded(request: &Request, number: u32) -> Request {
    let step = number.saturating_sub(1);
    let mut again = request.clone();
    again.seed_offset = u64::from(step);
    let seed = again
        .params
        .get("seed")
        .and_then(|seed| crate::advance_seed(seed, u64::from(step)));
    if let Some(seed) = seed {
        again.params.insert("seed".to_string(), seed);
    }
    again
}

/// The numeric `seed` `request` carries, as a runner reads it (a negative one by its bits).
fn seed_of(request: &Request) -> Option<u64> {
    let seed = request.params.get("seed")?;
    seed.as_u64().or_else(|| seed.as_i64().map(|s| s as u64))
}

fn split_issues(issues: Vec<Issue>) -> (Vec<Issue>, Vec<Issue>) {
    issues.into_iter().partition(Issue::is_error)
}

impl Enforcer {
    /// An enforcer running `validators` in order, with the default [`Policy`].
    pub fn new(validators: Vec<Box<dyn Validator>>) -> Self {
        Enforcer {
            validators: validators.into(),
            policy: Policy::default(),
            input: None,
        }
    }

    /// Checks every request with `stage` before the first model call.
    pub fn with_input(mut self, stage: InputStage) -> Self {
        self.input = Some(Arc::new(stage));
        self
    }

    /// The input stage, if requests are checked before the model call.
    pub fn input(&self) -> Option<&InputStage> {
        self.input.as_deref()
    }

    /// Replaces the policy.
    pub fn with_policy(mut self, policy: Policy) -> Self {
        self.policy = policy;
        self
    }

    /// This enforcer with limits that are at most `max_retries` re-asks and `budget`: each
    /// limit given is lowered to it, never raised above the policy's own (a `None` keeps the
    /// policy's value). For a caller that narrows one run, e.g. a proxy honouring a client's
    /// request for fewer re-asks; the validators and input stage are shared, not rebuilt.
    ///
    /// ```
    /// use enforce_core::{Budget, Enforcer, Policy};
    ///
    /// let profile = Enforcer::new(vec![]).with_policy(
    ///     Policy::builder().max_retries(3).budget(Budget { max_tokens: Some(500), ..Budget::default() }).build(),
    /// );
    /// let one = profile.narrowed(Some(1), &Budget { max_tokens: Some(9_000), ..Budget::default() });
    /// assert_eq!(one.policy().max_retries, 1);
    /// assert_eq!(one.policy().budget.max_tokens, Some(500)); // never raised
    /// assert_eq!(profile.narrowed(Some(7), &Budget::default()).policy().max_retries, 3);
    /// ```
    pub fn narrowed(&self, max_retries: Option<u32>, budget: &Budget) -> Enforcer {
        fn lower<T: PartialOrd + Copy>(own: Option<T>, asked: Option<T>) -> Option<T> {
            match (own, asked) {
                (Some(own), Some(asked)) if asked < own => Some(asked),
                (Some(own), _) => Some(own),
                (None, asked) => asked,
            }
        }
        let mut policy = self.policy.clone();
        if let Some(n) = max_retries {
            policy.max_retries = policy.max_retries.min(n);
        }
        let own = self.policy.budget;
        policy.budget = Budget {
            max_attempts: lower(own.max_attempts, budget.max_attempts),
            max_tokens: lower(own.max_tokens, budget.max_tokens),
            max_cost_usd: lower(own.max_cost_usd, budget.max_cost_usd),
            max_wall_ms: lower(own.max_wall_ms, budget.max_wall_ms),
        };
        Enforcer {
            validators: Arc::clone(&self.validators),
            policy,
            input: self.input.clone(),
        }
    }

    /// The policy in use.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The validators, in the order they run.
    pub fn validators(&self) -> &[Box<dyn Validator>] {
        &self.validators
    }

    /// `true` when the deterministic repair of the validator that raised `issue` (found by
    /// the issue's validator name, groups opened up) fixes it: what
    /// [`Validator::repair_fixes`] says. Unlike [`Issue::repairable`] ("asking again may fix
    /// it"), this is the claim that no re-ask is needed.
    pub fn repair_fixes(&self, issue: &Issue) -> bool {
        self.leaves().iter().any(|leaf| {
            leaf.validator.name() == issue.validator && leaf.validator.repair_fixes(issue)
        })
    }

    /// Most attempts one enforcement may make (first ask included).
    pub fn max_attempts(&self) -> u32 {
        let by_retries = self.policy.max_retries.saturating_add(1);
        match self.policy.budget.max_attempts {
            Some(cap) => by_retries.min(cap.max(1)),
            None => by_retries,
        }
    }

    /// The validators the loop runs one by one: groups opened up into their members.
    fn leaves(&self) -> Vec<Leaf<'_>> {
        let mut leaves = Vec::with_capacity(self.validators.len());
        for validator in self.validators.iter() {
            push_leaves(validator.as_ref(), None, &mut leaves);
        }
        leaves
    }

    /// Which budget, if any, forbids another attempt.
    fn budget_spent(&self, attempts: u32, spent: &Spent, started: Instant) -> Option<BudgetKind> {
        let b = &self.policy.budget;
        if b.max_attempts.is_some_and(|max| attempts >= max) {
            return Some(BudgetKind::Attempts);
        }
        if let (Some(max), Some(used)) = (b.max_tokens, spent.usage) {
            if used.total() >= max {
                return Some(BudgetKind::Tokens);
            }
        }
        if let (Some(max), Some(cost)) = (b.max_cost_usd, spent.cost_usd) {
            if cost >= max {
                return Some(BudgetKind::Cost);
            }
        }
        if b.max_wall().is_some_and(|max| started.elapsed() >= max) {
            return Some(BudgetKind::WallTime);
        }
        None
    }

    /// Runs the loop with `runner`: ask, validate, re-ask with feedback, repair.
    pub async fn run(&self, runner: &dyn Runner, request: &Request, context: &Context) -> Outcome {
        self.run_observed(runner, request, context, &()).await
    }

    /// [`run`](Self::run), reporting progress to `observer`.
    pub async fn run_observed(
        &self,
        runner: &dyn Runner,
        request: &Request,
        context: &Context,
        observer: &dyn Observer,
    ) -> Outcome {
        self.run_with(
            runner,
            request,
            context,
            observer,
            &Vec::<Box<dyn Validator>>::new(),
        )
        .await
    }

    /// [`run_observed`](Self::run_observed) with validators that belong to this request only
    /// (e.g. checks of the tool calls against the tools the request declares). They run before
    /// the enforcer's own and count exactly like them.
    pub async fn run_with(
        &self,
        runner: &dyn Runner,
        request: &Request,
        context: &Context,
        observer: &dyn Observer,
        request_validators: &dyn Validator,
    ) -> Outcome {
        // The input stage, and the request as the validators that read it see it: only
        // built when a profile asks for it, so a profile without either pays one branch.
        let staged = match &self.input {
            Some(stage) => Some(
                stage
                    .run(request, context, self.policy.on_unavailable)
                    .await,
            ),
            None => None,
        };
        let (staged_request, view, input, stopped) = match staged {
            None => {
                let reads_request = request_validators.reads_request()
                    || self.validators.iter().any(|v| v.reads_request());
                let view = reads_request.then(|| request_context(request, context, None));
                (None, view, None, None)
            }
            Some(Staged::Proceed {
                request,
                context,
                record,
            }) => (request, Some(context), Some(record), None),
            Some(Staged::Rejected { record }) => {
                (None, None, Some(record), Some(StopReason::InputRejected))
            }
            Some(Staged::Unavailable {
                record,
                unavailable,
            }) => (
                None,
                None,
                Some(record),
                Some(StopReason::ValidatorUnavailable { unavailable }),
            ),
        };
        let request = staged_request.as_ref().unwrap_or(request);
        let context = view.as_ref().unwrap_or(context);
        let mut run = Run::new(self, context, observer, true);
        if let Some(check) = &input {
            observer.on_event(&Event::InputChecked { check });
        }
        run.input = input;
        if let Some(reason) = stopped {
            let status = match reason {
                StopReason::InputRejected => Status::Aborted,
                _ => Status::Unavailable,
            };
            return Box::pin(run.finish(status, reason, None)).await;
        }
        run.leaves = {
            let mut leaves = Vec::with_capacity(run.leaves.len() + 1);
            push_leaves(request_validators, None, &mut leaves);
            leaves.append(&mut run.leaves);
            leaves
        };
        let max_attempts = self.max_attempts();
        // The loop's ends other than a clean pass are boxed: this future is moved whole on
        // every request, and inline they made it several kilobytes larger.
        // The reply being improved, its issues, and the feedback about them.
        let mut previous: Option<(Reply, Found, String)> = None;

        loop {
            let number = run.next_number();
            observer.on_event(&Event::Asking {
                attempt: number,
                max_attempts,
            });
            // Cutting is worth it only when a re-ask can follow and some validator can decide
            // on a prefix; without that (and without anyone watching the deltas) the whole
            // answer is asked for, as a stream would only cost. So the last allowed attempt
            // always runs to its end.
            let checks = if self.policy.early_abort && number < max_attempts {
                run.partial_checks()
            } else {
                Vec::new()
            };
            // Every re-ask draws anew: a seeded model would repeat a failed answer.
            let reseeded = (number > 1).then(|| reseeded(request, number));
            let asking = reseeded.as_ref().unwrap_or(request);
            run.asked_seed = seed_of(asking);
            // A re-ask by resampling or with fresh feedback is a new first ask.
            let fresh = previous
                .as_ref()
                .and_then(|(_, _, feedback)| self.reask_request(asking, feedback));
            let sent_bytes = match (&fresh, &previous) {
                (Some(fresh), _) => message_bytes(fresh),
                (None, Some((last, _, feedback))) => message_bytes(asking)
                    .saturating_add(last.text.len())
                    .saturating_add(feedback.len()),
                (None, None) => message_bytes(request),
            };
            let asked = Instant::now();
            let streamed = !checks.is_empty() || run.show_deltas;
            let stream = match (&fresh, &previous, streamed) {
                (Some(fresh), _, true) => runner.ask_streamed(fresh),
                (Some(fresh), _, false) => WholeReply::stream(runner.ask(fresh)),
                (None, Some((last, _, feedback)), true) => {
                    runner.follow_up_streamed(asking, last, feedback)
                }
                (None, Some((last, _, feedback)), false) => {
                    WholeReply::stream(runner.follow_up(asking, last, feedback))
                }
                (None, None, true) => runner.ask_streamed(request),
                (None, None, false) => WholeReply::stream(runner.ask(request)),
            };
            let (received, checking) = run.receive(stream, number, checks).await;
            let runner_time = asked.elapsed().saturating_sub(checking);
            let (reply, mut found, cut) = match received {
                Ok(Received::Whole(reply)) => {
                    run.spent.add(&reply, runner_time);
                    let validating = Instant::now();
                    let verdict = run.validate(&reply, number, false).await;
                    let validation_time = validating.elapsed().saturating_add(checking);
                    let mut found = match verdict {
                        Verdict::Found(found) => found,
                        Verdict::Unavailable(unavailable) => {
                            run.record(number, &reply, Vec::new(), runner_time, validation_time);
                            return Box::pin(run.finish(
                                Status::Unavailable,
                                StopReason::ValidatorUnavailable { unavailable },
                                Some((reply, Vec::new())),
                            ))
                            .await;
                        }
                    };
                    if reply.finish_reason == Some(FinishReason::Length) {
                        let fails = found.issues.iter().any(Issue::is_error);
                        found.insert_first(truncated(fails));
                    }
                    observer.on_event(&Event::Validated {
                        attempt: number,
                        response: &reply.text,
                        issues: &found.issues,
                    });
                    run.record(
                        number,
                        &reply,
                        found.issues.clone(),
                        runner_time,
                        validation_time,
                    );
                    (reply, found, false)
                }
                Ok(Received::Cut {
                    mut reply,
                    issues,
                    deltas,
                }) => {
                    // The usage report of a stream comes at its end, which a cut never
                    // reaches: count what was received instead.
                    let estimated = reply.usage.is_none();
                    if estimated {
                        reply.usage = Some(Usage {
                            input_tokens: u64::try_from(sent_bytes.div_ceil(4)).unwrap_or(u64::MAX),
                            output_tokens: deltas,
                        });
                    }
                    run.spent.add(&reply, runner_time);
                    observer.on_event(&Event::Cut {
                        attempt: number,
                        bytes: reply.text.len(),
                        issues: &issues,
                    });
                    let mut attempt =
                        Run::attempt(number, &reply, issues.clone(), runner_time, checking);
                    attempt.usage_estimated = estimated;
                    attempt.cut = Some(Cut {
                        bytes: reply.text.len(),
                        codes: error_codes(&issues)
                            .into_iter()
                            .map(str::to_string)
                            .collect(),
                    });
                    run.push_attempt(attempt);
                    // A cut answer is never repaired: the issues belong to no leaf's repair.
                    (reply, Found::unattributed(issues), true)
                }
                Err(error) => {
                    run.spent.runner += runner_time;
                    let mut attempt =
                        Run::attempt(number, &Reply::default(), Vec::new(), runner_time, checking);
                    attempt.runner_error = Some(error.clone());
                    run.push_attempt(attempt);
                    // During a re-ask, a failure another call may not meet is a failed
                    // attempt: ask again (about the same previous answer) while attempts and
                    // budgets allow. A failed first ask ends the loop as it always did: the
                    // runner's own retries were spent on it, and retrying a failing upstream
                    // from here too would multiply the load on it.
                    let budget = self.budget_spent(number, &run.spent, run.started);
                    let reasking = previous.is_some();
                    if reasking && error.is_transient() && number < max_attempts && budget.is_none()
                    {
                        continue;
                    }
                    let reason = StopReason::RunnerFailed { error };
                    return Box::pin(run.conclude_on(reason)).await;
                }
            };

            let errors = error_set(&found.issues);
            let stop = if errors.is_empty() {
                Some(StopReason::Clean)
            } else if found.issues.iter().any(|i| i.is_error() && !i.repairable) {
                Some(StopReason::HardAbort)
            } else if number > self.policy.max_retries {
                Some(StopReason::RetriesExhausted)
            } else if !cut
                && self.policy.reask != Reask::Resample
                && previous
                    .as_ref()
                    .is_some_and(|(_, prev, _)| error_set(&prev.issues) == errors)
            {
                // Only a whole answer can show that asking again changes nothing: a cut one
                // stopped before its other errors were written. Resampled answers are
                // independent draws: the same error twice says nothing about the next.
                Some(StopReason::NoProgress)
            } else {
                self.budget_spent(number, &run.spent, run.started)
                    .map(|budget| StopReason::Budget { budget })
            };

            if let Some(reason) = stop {
                if cut {
                    // The part received is never the answer: the last whole one is.
                    return Box::pin(run.conclude_on(reason)).await;
                }
                if matches!(reason, StopReason::Clean) {
                    return run.passed(reason, reply, found.issues);
                }
                return Box::pin(run.conclude(reason, number, reply, found, true)).await;
            }
            if !cut && self.policy.repairs_first(&found.issues) {
                if let Some(repaired) = run.repaired(number, &reply, &mut found).await {
                    return Box::pin(run.finish(
                        Status::Repaired,
                        StopReason::Clean,
                        Some(repaired),
                    ))
                    .await;
                }
            }

            let issues = &found.issues;
            let feedback = if cut {
                let missing = run.still_missing(&reply, issues).await;
                self.policy
                    .feedback
                    .build_after_cut(issues, &missing, &reply.text)
            } else {
                self.policy.feedback.build(issues)
            };
            observer.on_event(&Event::Retrying {
                attempt: number.saturating_add(1),
                max_attempts,
                issues,
                feedback: &feedback,
            });
            if !cut {
                run.reasked.push((number, reply.clone(), found.clone()));
            }
            previous = Some((reply, found, feedback));
        }
    }

    /// The request of a re-ask that starts afresh ([`Reask::Resample`] and
    /// [`Reask::FeedbackFresh`]) from `asking` (the request with this attempt's seed); `None`
    /// for [`Reask::Feedback`], a follow-up.
    fn reask_request(&self, asking: &Request, feedback: &str) -> Option<Request> {
        match self.policy.reask {
            Reask::Feedback => None,
            Reask::Resample => Some(asking.clone()),
            Reask::FeedbackFresh => {
                let mut again = asking.clone();
                again.messages.push(Message::user(feedback));
                Some(again)
            }
        }
    }

    /// Checks `text` without a runner: validates it and, with [`Check::Repair`], applies the
    /// repairs.
    ///
    /// The outcome has one attempt; status is `passed`, `repaired` (only with
    /// [`Check::Repair`]), `unresolved`, `aborted` (a hard-abort error remains) or
    /// `unavailable`. The policy's fallback is never substituted: a check reports on the text it
    /// was given.
    pub async fn check(&self, text: &str, context: &Context, mode: Check) -> Outcome {
        let mut run = Run::new(self, context, &(), false);
        let reply = Reply::text(text);
        let verdict = run.validate(&reply, 1, false).await;
        let validation_time = run.started.elapsed();
        match verdict {
            Verdict::Unavailable(unavailable) => {
                run.record(1, &reply, Vec::new(), Duration::ZERO, validation_time);
                run.finish(
                    Status::Unavailable,
                    StopReason::ValidatorUnavailable { unavailable },
                    Some((reply, Vec::new())),
                )
                .await
            }
            Verdict::Found(found) => {
                let issues = &found.issues;
                run.record(1, &reply, issues.clone(), Duration::ZERO, validation_time);
                let reason = if error_codes(issues).is_empty() {
                    StopReason::Clean
                } else if issues.iter().any(|i| i.is_error() && !i.repairable) {
                    StopReason::HardAbort
                } else {
                    StopReason::CheckOnly
                };
                run.conclude(reason, 1, reply, found, mode == Check::Repair)
                    .await
            }
        }
    }
}
