//! The state of one enforcement while it runs ([`Run`]): streamed attempts and their cut,
//! validation, repairs, the checked fallback and the outcome.

use super::{error_codes, split_issues, Enforcer, FALLBACK_INVALID};
use crate::outcome::{fnv1a_hex, is_unchecked_warning};
use crate::time::micros;
use crate::validator::{repair_leaves, validate_leaves, Found, Leaf, LeafRun, Verdict};
use crate::{
    input::InputCheck, outcome::FreeAnswer, policy::AnswerFormat, policy::RepairWhen,
    runner::ToolCall, Attempt, Context, Event, Issue, Observer, Outcome, PartialCheck, Reply,
    ReplyStream, RunnerError, Status, StopReason, StreamEvent, Usage,
};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Accumulated usage and cost over attempts.
#[derive(Default)]
pub(super) struct Spent {
    pub(super) usage: Option<Usage>,
    pub(super) cost_usd: Option<f64>,
    pub(super) runner: Duration,
}

impl Spent {
    pub(super) fn add(&mut self, reply: &Reply, runner_time: Duration) {
        if let Some(u) = reply.usage {
            self.usage.get_or_insert_with(Usage::default).add(u);
        }
        if let Some(c) = reply.cost_usd {
            *self.cost_usd.get_or_insert(0.0) += c;
        }
        self.runner += runner_time;
    }
}

/// What one streamed attempt brought.
pub(super) enum Received {
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
pub(super) struct Run<'a> {
    enforcer: &'a Enforcer,
    /// The enforcer's validators with groups opened up, in order.
    pub(super) leaves: Vec<Leaf<'a>>,
    context: &'a Context,
    pub(super) observer: &'a dyn Observer,
    /// The observer wants an event per validator run (asked once, not per run).
    validator_runs: bool,
    /// The observer shows answers as they arrive.
    pub(super) show_deltas: bool,
    pub(super) started: Instant,
    pub(super) spent: Spent,
    attempts: Vec<Attempt>,
    use_fallback: bool,
    /// The input stage's record, for the outcome.
    pub(super) input: Option<InputCheck>,
    /// Every answer received whole that a re-ask followed, with its attempt number: the
    /// repairs at the end try them too, newest first.
    pub(super) reasked: Vec<(u32, Reply, Found)>,
    /// How the current attempt asked, for its audit.
    pub(super) asked: Asked,
    /// Re-asks made by a rung of the policy's ladder so far.
    pub(super) rungs_used: usize,
    /// Warnings about the run itself (not an answer's), for the outcome.
    pub(super) notes: Vec<Issue>,
}

/// How an attempt asked: what its audit records besides the answer.
#[derive(Debug, Clone, Default)]
pub(super) struct Asked {
    /// The `seed` its request carried.
    pub(super) seed: Option<u64>,
    /// The rung that asked it (none for a first ask or a re-ask after truncation).
    pub(super) reask: Option<crate::policy::Reask>,
    /// The token limit a re-ask after truncation gave.
    pub(super) more_room: Option<u64>,
    /// The free answer a reason-then-format attempt asked for first.
    pub(super) free_answer: Option<FreeAnswer>,
    /// The escalation model was asked.
    pub(super) escalated: bool,
    /// Why `reask: auto` took the strategy.
    pub(super) choice: Option<crate::outcome::ChoiceReason>,
}

impl<'a> Run<'a> {
    pub(super) fn new(
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
            asked: Asked::default(),
            rungs_used: 0,
            notes: Vec::new(),
        }
    }

    /// Runs every validator on `reply` (the response of `attempt`, or its repair); the policy
    /// decides for those without a fail mode.
    pub(super) async fn validate(&self, reply: &Reply, attempt: u32, repaired: bool) -> Verdict {
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
    pub(super) fn partial_checks(&self) -> Vec<(Leaf<'a>, Box<dyn PartialCheck + 'a>)> {
        self.leaves
            .iter()
            .filter_map(|leaf| Some((*leaf, leaf.validator.partial_check(self.context)?)))
            .collect()
    }

    /// Reads one streamed answer to its end, or, with `checks`, until a partial check finds
    /// an error a re-ask is meant to fix: then the stream is dropped (which cancels the
    /// generation) and the part received comes back with those errors. Also returns the time
    /// spent in partial checks.
    pub(super) async fn receive(
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
        while let Some(event) = stream.next_event().await {
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

    pub(super) fn next_number(&self) -> u32 {
        u32::try_from(self.attempts.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1)
    }

    pub(super) fn record(
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
    pub(super) fn attempt(
        number: u32,
        reply: &Reply,
        issues: Vec<Issue>,
        runner_time: Duration,
        validation_time: Duration,
    ) -> Attempt {
        Attempt {
            number,
            response_bytes: reply.text.len(),
            response_digest: fnv1a_hex(&reply.text),
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
            seed: reply.seed,
            reask: None,
            more_room: None,
            free_answer: None,
            escalated_to: None,
            reask_choice: None,
        }
    }

    /// Adds `attempt` to the audit and tells the observer.
    pub(super) fn push_attempt(&mut self, mut attempt: Attempt) {
        attempt.seed = attempt.seed.or(self.asked.seed);
        attempt.reask = self.asked.reask;
        attempt.more_room = self.asked.more_room;
        attempt.reask_choice = self.asked.choice.clone();
        if let Some(free) = self.asked.free_answer {
            // Both calls of a reason-then-format attempt are its cost.
            if let Some(usage) = free.usage {
                attempt.usage.get_or_insert_with(Usage::default).add(usage);
            }
            if let Some(cost) = free.cost_usd {
                *attempt.cost_usd.get_or_insert(0.0) += cost;
            }
            attempt.runner_us = attempt.runner_us.saturating_add(free.runner_us);
            attempt.free_answer = Some(free);
        }
        if self.asked.escalated {
            attempt.escalated_to = self.enforcer.escalation.as_ref().map(|e| e.model.clone());
        }
        self.attempts.push(attempt);
        if let Some(attempt) = self.attempts.last() {
            self.observer.on_event(&Event::Recorded { attempt });
        }
    }

    /// After the last attempt (number `number`): pass, or repair and re-validate, or give up.
    pub(super) async fn conclude(
        mut self,
        reason: StopReason,
        number: u32,
        reply: Reply,
        mut found: Found,
        try_repair: bool,
    ) -> Outcome {
        if matches!(reason, StopReason::Clean) {
            return self.passed(reason, reply, found.issues);
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
    pub(super) async fn conclude_on(mut self, reason: StopReason) -> Outcome {
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
    pub(super) async fn repaired(
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
    pub(super) async fn still_missing(&self, partial: &Reply, cut: &[Issue]) -> Vec<Issue> {
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

    /// The outcome of an answer that passed: no fallback to check, nothing to await. The
    /// loop's common end, kept out of [`finish`](Self::finish)'s future so that the loop's
    /// own future (moved whole on every request) does not hold one.
    pub(super) fn passed(self, reason: StopReason, reply: Reply, issues: Vec<Issue>) -> Outcome {
        self.outcome(Status::Passed, reason, Some((reply, issues)), None)
    }

    /// Builds the outcome; substitutes the fallback text when the status is a failure and
    /// the fallback passes validation.
    pub(super) async fn finish(
        self,
        status: Status,
        stop_reason: StopReason,
        last: Option<(Reply, Vec<Issue>)>,
    ) -> Outcome {
        let template = (self.use_fallback
            && matches!(status, Status::Unresolved | Status::Aborted))
        .then(|| self.enforcer.policy.fallback_for(self.context))
        .flatten();
        let fallback = match template {
            // Boxed: only a failure with a fallback pays for its checks' future.
            Some(template) => Some(Box::pin(self.checked_fallback(template)).await),
            None => None,
        };
        self.outcome(status, stop_reason, last, fallback)
    }

    /// The outcome, with the fallback's text when it was checked and passed (`Ok`), or the
    /// warning why it was not used (`Err`).
    fn outcome(
        self,
        status: Status,
        stop_reason: StopReason,
        last: Option<(Reply, Vec<Issue>)>,
        fallback: Option<Result<String, Issue>>,
    ) -> Outcome {
        let (mut response, mut tool_calls, all_issues): (_, Vec<ToolCall>, _) = match last {
            Some((reply, issues)) => (Some(reply.text), reply.tool_calls, issues),
            None => (None, Vec::new(), Vec::new()),
        };
        let (issues, mut warnings) = split_issues(all_issues);
        warnings.extend(self.notes.iter().cloned());
        let mut fallback_used = false;
        match fallback {
            Some(Ok(text)) => {
                response = Some(text);
                tool_calls.clear();
                fallback_used = true;
            }
            // The last response stays, with its status: a broken fallback is never passed
            // off as the answer.
            Some(Err(rejected)) => warnings.push(rejected),
            None => {}
        }
        let session_id = self
            .attempts
            .iter()
            .rev()
            .find_map(|a| a.session_id.clone());
        self.observer.on_event(&Event::Finished { status });
        let unavailable_statuses = self.unavailable_statuses(&stop_reason, &warnings);
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
            unavailable_statuses,
        }
    }

    /// The literal statuses of the validators (output or input) that gave no verdict and have
    /// one of their own, by name.
    fn unavailable_statuses(
        &self,
        stop_reason: &StopReason,
        warnings: &[Issue],
    ) -> BTreeMap<String, String> {
        let mut unchecked = stop_reason
            .unavailable()
            .map(|u| u.validator.as_str())
            .into_iter()
            .chain(
                warnings
                    .iter()
                    .filter(|w| is_unchecked_warning(w))
                    .map(|w| w.validator.as_str()),
            )
            .peekable();
        let mut statuses = BTreeMap::new();
        // Every validator gave its verdict on almost every run: the input stage's leaves are
        // only opened up when one did not.
        if unchecked.peek().is_none() {
            return statuses;
        }
        let input_leaves = self.enforcer.input().map(|stage| stage.leaves());
        let all_leaves: Vec<&Leaf<'_>> = self
            .leaves
            .iter()
            .chain(input_leaves.iter().flatten())
            .collect();
        for name in unchecked {
            let status = all_leaves
                .iter()
                .filter(|leaf| leaf.validator.name() == name)
                .find_map(|leaf| leaf.validator.unavailable_status());
            if let Some(status) = status {
                statuses.insert(name.to_string(), status.to_string());
            }
        }
        statuses
    }
}
