//! The enforcement loop: [`Enforcer`].

use crate::input::{request_context, Staged};
use crate::outcome::digest;
use crate::runner::{next_event, WholeReply};
use crate::time::micros;
use crate::validator::{
    push_leaves, repair_leaves, validate_leaves, Found, Leaf, LeafRun, Verdict,
};
use crate::{
    AnswerFormat, Attempt, Budget, BudgetKind, Context, Cut, Event, FinishReason, InputCheck,
    InputStage, Issue, Message, Observer, Outcome, PartialCheck, Policy, Reask, RepairWhen, Reply,
    ReplyStream, Request, Runner, RunnerError, Status, StopReason, StreamEvent, ToolCall, Usage,
    Validator,
};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

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

/// Accumulated usage and cost over attempts.
#[derive(Default)]
struct Spent {
    usage: Option<Usage>,
    cost_usd: Option<f64>,
    runner: Duration,
}

impl Spent {
    fn add(&mut self, reply: &Reply, runner_time: Duration) {
        if let Some(u) = reply.usage {
            self.usage.get_or_insert_with(Usage::default).add(u);
        }
        if let Some(c) = reply.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
        self.runner += runner_time;
    }
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
            return run.finish(status, reason, None).await;
        }
        run.leaves = {
            let mut leaves = Vec::with_capacity(run.leaves.len() + 1);
            push_leaves(request_validators, None, &mut leaves);
            leaves.append(&mut run.leaves);
            leaves
        };
        let max_attempts = self.max_attempts();
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
            // A re-ask by resampling or with fresh feedback is a new first ask.
            let fresh = previous
                .as_ref()
                .and_then(|(_, _, feedback)| self.reask_request(request, number, feedback));
            let sent_bytes = match (&fresh, &previous) {
                (Some(fresh), _) => message_bytes(fresh),
                (None, Some((last, _, feedback))) => message_bytes(request)
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
                    runner.follow_up_streamed(request, last, feedback)
                }
                (None, Some((last, _, feedback)), false) => {
                    WholeReply::stream(runner.follow_up(request, last, feedback))
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
                            return run
                                .finish(
                                    Status::Unavailable,
                                    StopReason::ValidatorUnavailable { unavailable },
                                    Some((reply, Vec::new())),
                                )
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
                    return run.conclude_on(reason).await;
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
                    return run.conclude_on(reason).await;
                }
                return run.conclude(reason, number, reply, found, true).await;
            }
            if !cut && self.policy.repairs_first(&found.issues) {
                if let Some(repaired) = run.repaired(number, &reply, &mut found).await {
                    return run
                        .finish(Status::Repaired, StopReason::Clean, Some(repaired))
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
    /// [`Reask::FeedbackFresh`]); `None` for [`Reask::Feedback`], a follow-up.
    fn reask_request(&self, request: &Request, number: u32, feedback: &str) -> Option<Request> {
        match self.policy.reask {
            Reask::Feedback => None,
            Reask::Resample => {
                let mut again = request.clone();
                // A seeded model would draw the same answer again: advance the seed.
                let step = number.saturating_sub(1);
                let seed = match again.params.get("seed") {
                    Some(Value::Number(n)) => match (n.as_u64(), n.as_i64()) {
                        (Some(u), _) => Some(Value::from(u.wrapping_add(u64::from(step)))),
                        (None, Some(i)) => Some(Value::from(i.wrapping_add(i64::from(step)))),
                        _ => None,
                    },
                    _ => None,
                };
                if let Some(seed) = seed {
                    again.params.insert("seed".to_string(), seed);
                }
                Some(again)
            }
            Reask::FeedbackFresh => {
                let mut again = request.clone();
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

/// What one streamed attempt brought.
enum Received {
    /// The whole reply.
    Whole(Reply),
    /// The answer cut short: the part received (session, usage and cost as last reported),
    /// the definite errors that cut it, and how many text deltas came.
    Cut {
        reply: Reply,
        issues: Vec<Issue>,
        deltas: u64,
    },
}

/// Runs every partial check on `partial` and returns the errors a re-ask is meant to fix:
/// errors that are not hard aborts and that the validator's own repair does not fix.
async fn cutting_issues(
    checks: &mut [(Leaf<'_>, Box<dyn PartialCheck + '_>)],
    partial: &str,
) -> Vec<Issue> {
    let mut cutting = Vec::new();
    for (leaf, check) in checks.iter_mut() {
        let name = leaf.validator.name();
        for issue in check.check(partial).await {
            let issue = issue.or_validator(name);
            if issue.is_error() && issue.repairable && !leaf.validator.repair_fixes(&issue) {
                cutting.push(issue);
            }
        }
    }
    cutting
}

/// The state of one enforcement while it runs.
struct Run<'a> {
    enforcer: &'a Enforcer,
    /// The enforcer's validators with groups opened up, in order.
    leaves: Vec<Leaf<'a>>,
    context: &'a Context,
    observer: &'a dyn Observer,
    /// The observer wants an event per validator run (asked once, not per run).
    validator_runs: bool,
    /// The observer shows answers as they arrive.
    show_deltas: bool,
    started: Instant,
    spent: Spent,
    attempts: Vec<Attempt>,
    use_fallback: bool,
    /// The input stage's record, for the outcome.
    input: Option<InputCheck>,
    /// Every answer received whole that a re-ask followed, with its attempt number: the
    /// repairs at the end try them too, newest first.
    reasked: Vec<(u32, Reply, Found)>,
}

impl<'a> Run<'a> {
    fn new(
        enforcer: &'a Enforcer,
        context: &'a Context,
        observer: &'a dyn Observer,
        use_fallback: bool,
    ) -> Self {
        Run {
            enforcer,
            leaves: enforcer.leaves(),
            context,
            observer,
            validator_runs: observer.wants_validator_runs(),
            show_deltas: observer.wants_deltas(),
            started: Instant::now(),
            spent: Spent::default(),
            attempts: Vec::new(),
            use_fallback,
            input: None,
            reasked: Vec::new(),
        }
    }

    /// Runs every validator on `reply` (the response of `attempt`, or its repair); the policy
    /// decides for those without a fail mode.
    async fn validate(&self, reply: &Reply, attempt: u32, repaired: bool) -> Verdict {
        let default = self.enforcer.policy.on_unavailable;
        let observer = self.observer;
        let mut report = |run: LeafRun<'_>| {
            observer.on_event(&Event::ValidatorRan {
                attempt,
                validator: run.validator,
                issues: run.issues,
                unavailable: run.unavailable,
                elapsed: run.elapsed,
                repaired,
            });
        };
        let on_ran: Option<&mut (dyn FnMut(LeafRun<'_>) + Send)> = if self.validator_runs {
            Some(&mut report)
        } else {
            None
        };
        validate_leaves(&self.leaves, reply, self.context, default, on_ran).await
    }

    /// The partial checks of one attempt: one per validator that can decide on a prefix.
    fn partial_checks(&self) -> Vec<(Leaf<'a>, Box<dyn PartialCheck + 'a>)> {
        self.leaves
            .iter()
            .filter_map(|leaf| Some((*leaf, leaf.validator.partial_check(self.context)?)))
            .collect()
    }

    /// Reads one streamed answer to its end, or, with `checks`, until a partial check finds
    /// an error a re-ask is meant to fix: then the stream is dropped (which cancels the
    /// generation) and the part received comes back with those errors. Also returns the time
    /// spent in partial checks.
    async fn receive(
        &self,
        mut stream: ReplyStream<'_>,
        attempt: u32,
        mut checks: Vec<(Leaf<'a>, Box<dyn PartialCheck + 'a>)>,
    ) -> (Result<Received, RunnerError>, Duration) {
        let mut checking = Duration::ZERO;
        let every = self.enforcer.policy.partial_check_bytes.max(1);
        // The answer so far, rebuilt from the deltas only to check it or to keep it after a cut.
        let mut partial = Reply::default();
        let mut checked = 0;
        let mut deltas: u64 = 0;
        while let Some(event) = next_event(&mut stream).await {
            match event {
                Err(error) => return (Err(error), checking),
                Ok(StreamEvent::Done(reply)) => return (Ok(Received::Whole(reply)), checking),
                Ok(StreamEvent::Text(delta)) => {
                    self.observer.on_event(&Event::Streamed {
                        attempt,
                        text: &delta,
                    });
                    if checks.is_empty() {
                        continue;
                    }
                    deltas = deltas.saturating_add(1);
                    partial.text.push_str(&delta);
                    if partial.text.len() - checked < every {
                        continue;
                    }
                    checked = partial.text.len();
                    let started = Instant::now();
                    let cutting = cutting_issues(&mut checks, &partial.text).await;
                    checking += started.elapsed();
                    if !cutting.is_empty() {
                        drop(stream);
                        return (
                            Ok(Received::Cut {
                                reply: partial,
                                issues: cutting,
                                deltas,
                            }),
                            checking,
                        );
                    }
                }
                Ok(StreamEvent::Reasoning(text)) => {
                    self.observer.on_event(&Event::Reasoning {
                        attempt,
                        text: &text,
                    });
                }
                Ok(StreamEvent::Session(id)) => partial.session_id = Some(id),
                Ok(StreamEvent::Spent { usage, cost_usd }) => {
                    partial.usage = usage.or(partial.usage);
                    partial.cost_usd = cost_usd.or(partial.cost_usd);
                }
            }
        }
        let error = RunnerError::Protocol {
            message: "the answer stream ended without a reply".to_string(),
        };
        (Err(error), checking)
    }

    /// Applies the repairs of every validator that raised an error, in validator order.
    /// Returns the repaired text and the names of the validators whose repair changed it.
    fn repair(&self, text: &str, found: &Found) -> (String, Vec<String>) {
        repair_leaves(&self.leaves, text, self.context, found, |validator| {
            self.observer.on_event(&Event::Repaired { validator });
        })
    }

    fn next_number(&self) -> u32 {
        u32::try_from(self.attempts.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    fn record(
        &mut self,
        number: u32,
        reply: &Reply,
        issues: Vec<Issue>,
        runner_time: Duration,
        validation_time: Duration,
    ) {
        let attempt = Self::attempt(number, reply, issues, runner_time, validation_time);
        self.push_attempt(attempt);
    }

    /// The audit of one attempt (no repairs, not cut).
    fn attempt(
        number: u32,
        reply: &Reply,
        issues: Vec<Issue>,
        runner_time: Duration,
        validation_time: Duration,
    ) -> Attempt {
        Attempt {
            number,
            response_bytes: reply.text.len(),
            response_digest: digest(&reply.text),
            issues,
            runner_us: micros(runner_time),
            validation_us: micros(validation_time),
            usage: reply.usage,
            cost_usd: reply.cost_usd,
            session_id: reply.session_id.clone(),
            repairs: Vec::new(),
            cut: None,
            finish_reason: reply.finish_reason.clone(),
            usage_estimated: false,
            runner_error: None,
        }
    }

    /// Adds `attempt` to the audit and tells the observer.
    fn push_attempt(&mut self, attempt: Attempt) {
        self.attempts.push(attempt);
        if let Some(attempt) = self.attempts.last() {
            self.observer.on_event(&Event::Recorded { attempt });
        }
    }

    /// After the last attempt (number `number`): pass, or repair and re-validate, or give up.
    async fn conclude(
        mut self,
        reason: StopReason,
        number: u32,
        reply: Reply,
        mut found: Found,
        try_repair: bool,
    ) -> Outcome {
        if matches!(reason, StopReason::Clean) {
            return self
                .finish(Status::Passed, reason, Some((reply, found.issues)))
                .await;
        }
        if try_repair {
            if let Some(repaired) = self.repaired(number, &reply, &mut found).await {
                return self.finish(Status::Repaired, reason, Some(repaired)).await;
            }
            // Asking again must never end worse than not asking: when the last answer cannot
            // be repaired, an earlier one that a repair makes clean is the answer (with
            // `repair: first` they were tried already).
            if self.enforcer.policy.repair == RepairWhen::Last {
                let earlier = std::mem::take(&mut self.reasked);
                for (n, r, mut f) in earlier.into_iter().rev() {
                    if n == number {
                        continue;
                    }
                    if let Some(repaired) = self.repaired(n, &r, &mut f).await {
                        return self.finish(Status::Repaired, reason, Some(repaired)).await;
                    }
                }
            }
        }
        let status = if matches!(
            reason,
            StopReason::HardAbort | StopReason::RunnerFailed { .. }
        ) {
            Status::Aborted
        } else {
            Status::Unresolved
        };
        self.finish(status, reason, Some((reply, found.issues)))
            .await
    }

    /// Stops right after an attempt that brought no whole answer (cut short, or the runner
    /// failed): concludes on the last answer received whole (the newest re-asked one), or,
    /// without one, gives up with no response. A part received is never passed on as an
    /// answer.
    async fn conclude_on(mut self, reason: StopReason) -> Outcome {
        match self.reasked.pop() {
            Some((number, reply, found)) => self.conclude(reason, number, reply, found, true).await,
            None => {
                let status = if matches!(reason, StopReason::RunnerFailed { .. }) {
                    Status::Aborted
                } else {
                    Status::Unresolved
                };
                self.finish(status, reason, None).await
            }
        }
    }

    /// Applies the repairs of the validators that raised errors on `reply` (attempt
    /// `number`) and validates the result: the repaired reply and its issues when it is
    /// clean. Records the repairs on the attempt either way; the half-repaired text of a
    /// repair that did not make it clean is never passed on.
    async fn repaired(
        &mut self,
        number: u32,
        reply: &Reply,
        found: &mut Found,
    ) -> Option<(Reply, Vec<Issue>)> {
        let (repaired, applied) = self.repair(&reply.text, found);
        if applied.is_empty() {
            return None;
        }
        if let Some(attempt) = self.attempts.iter_mut().rev().find(|a| a.number == number) {
            attempt.repairs = applied;
        }
        // Repairs change the text only; the tool calls stay as they were.
        let repaired = Reply {
            text: repaired,
            tool_calls: reply.tool_calls.clone(),
            ..Reply::default()
        };
        let Verdict::Found(after) = self.validate(&repaired, number, true).await else {
            return None;
        };
        error_codes(&after.issues)
            .is_empty()
            .then_some((repaired, after.issues))
    }

    /// What a full check of `partial` (an answer cut short) finds besides the errors that cut
    /// it (`cut`): a required section or field not written yet. Errors of the codes that cut
    /// it are left out (a broken prefix also fails its full check, for the same reason).
    async fn still_missing(&self, partial: &Reply, cut: &[Issue]) -> Vec<Issue> {
        let default = self.enforcer.policy.on_unavailable;
        let Verdict::Found(found) =
            validate_leaves(&self.leaves, partial, self.context, default, None).await
        else {
            return Vec::new();
        };
        let cut_codes = error_codes(cut);
        found
            .issues
            .into_iter()
            .filter(|i| i.is_error() && !cut_codes.contains(&i.code.as_str()))
            .collect()
    }

    /// The fallback `template` filled from the context, if it passes every validator; else
    /// the `FALLBACK_INVALID` warning saying why it was not used.
    async fn checked_fallback(&self, template: &str) -> Result<String, Issue> {
        let text = match self.enforcer.policy.answer_format {
            AnswerFormat::Json => self.context.render_json(template),
            _ => self.context.render(template),
        };
        let rejected = |why: String| {
            Issue::warning(
                "fallback",
                FALLBACK_INVALID,
                format!("The fallback text was not used: {why}."),
            )
            .with_hint("Fix the profile's fallback template so that it passes its own validators.")
            .hard_abort()
        };
        // Checks of the request's facts alone are what sent the run here; they do not judge
        // the fallback (see `Validator::reads_response`).
        let judges: Vec<Leaf<'_>> = self
            .leaves
            .iter()
            .filter(|leaf| leaf.validator.reads_response())
            .copied()
            .collect();
        let default = self.enforcer.policy.on_unavailable;
        let reply = Reply::text(text.clone());
        // Not an attempt's check: no `ValidatorRan` for it.
        match validate_leaves(&judges, &reply, self.context, default, None).await {
            Verdict::Found(found) => {
                let errors: Vec<String> = found
                    .issues
                    .iter()
                    .filter(|i| i.is_error())
                    .map(|i| format!("{} ({})", i.code, i.message))
                    .collect();
                if errors.is_empty() {
                    Ok(text)
                } else {
                    Err(rejected(format!(
                        "it fails validation: {}",
                        errors.join("; ")
                    )))
                }
            }
            Verdict::Unavailable(u) => Err(rejected(format!(
                "it could not be validated ({} unavailable: {})",
                u.validator, u.reason
            ))),
        }
    }

    /// Builds the outcome; substitutes the fallback text when the status is a failure and
    /// the fallback passes validation.
    async fn finish(
        self,
        status: Status,
        stop_reason: StopReason,
        last: Option<(Reply, Vec<Issue>)>,
    ) -> Outcome {
        let (mut response, mut tool_calls, all_issues): (_, Vec<ToolCall>, _) = match last {
            Some((reply, issues)) => (Some(reply.text), reply.tool_calls, issues),
            None => (None, Vec::new(), Vec::new()),
        };
        let (issues, mut warnings) = split_issues(all_issues);
        let mut fallback_used = false;
        if self.use_fallback && matches!(status, Status::Unresolved | Status::Aborted) {
            if let Some(template) = self.enforcer.policy.fallback_for(self.context) {
                match self.checked_fallback(template).await {
                    Ok(text) => {
                        response = Some(text);
                        tool_calls.clear();
                        fallback_used = true;
                    }
                    // The last response stays, with its status: a broken fallback is never
                    // passed off as the answer.
                    Err(rejected) => warnings.push(rejected),
                }
            }
        }
        let session_id = self
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.session_id.clone());
        self.observer.on_event(&Event::Finished { status });
        Outcome {
            status,
            stop_reason,
            response,
            tool_calls,
            issues,
            warnings,
            attempts: self.attempts,
            input: self.input,
            fallback_used,
            session_id,
            usage: self.spent.usage,
            cost_usd: self.spent.cost_usd,
            total_us: micros(self.started.elapsed()),
            runner_us: micros(self.spent.runner),
        }
    }
}
