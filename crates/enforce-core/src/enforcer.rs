//! The enforcement loop: [`Enforcer`].

use crate::issue::error_codes;
use crate::strategy::ReaskChooser;
use crate::validator::{push_leaves, Leaf, Verdict};
use crate::{
    input::InputStage, policy::BudgetKind, Budget, Context, Event, Issue, Observer, Outcome,
    Policy, Reply, Request, Runner, Status, StopReason, Validator,
};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod auto;
mod run;
mod steps;
use run::{Run, Spent};

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
    escalation: Option<Escalation>,
    chooser: Option<Arc<dyn ReaskChooser>>,
}

/// The model the rung [`Reask::Escalate`](crate::policy::Reask::Escalate) asks instead of the
/// main runner: its name for the audit, and its runner.
#[derive(Debug, Clone)]
pub struct Escalation {
    /// The model's name, as the audit records it (`attempts[].escalated_to`).
    pub model: String,
    /// The runner that asks it.
    pub runner: Arc<dyn Runner>,
}

/// Code of the warning an outcome carries when the rung `escalate` asked and the enforcer has
/// no escalation model: the re-ask went to the main runner, with feedback.
pub const ESCALATION_NO_TARGET: &str = "ESCALATION_NO_TARGET";

/// Code of the warning an outcome carries when the rung `constrained` asked and the request
/// had no decoding constraint to send (the contract gives none, or the runner cannot take
/// one): the re-ask was a plain resample.
pub const CONSTRAINT_UNAVAILABLE: &str = "CONSTRAINT_UNAVAILABLE";

/// Code of the warning an outcome carries when the policy says `reask: auto` and the
/// enforcer has no chooser ([`Enforcer::with_chooser`]): the re-asks took the fallback ladder.
pub const REASK_AUTO_NO_CHOOSER: &str = "REASK_AUTO_NO_CHOOSER";

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
        .and_then(|seed| crate::runner::advance_seed(seed, u64::from(step)));
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
            escalation: None,
            chooser: None,
        }
    }

    /// Sends the re-asks of the rung [`Reask::Escalate`](crate::policy::Reask::Escalate) to
    /// `runner`, recorded in the audit as `model`.
    pub fn with_escalation(mut self, model: impl Into<String>, runner: Arc<dyn Runner>) -> Self {
        self.escalation = Some(Escalation {
            model: model.into(),
            runner,
        });
        self
    }

    /// Lets `chooser` pick the strategy of each re-ask when the policy says `reask: auto`
    /// ([`Policy::reask_auto`]); see [`strategy`](crate::strategy).
    pub fn with_chooser(mut self, chooser: Arc<dyn ReaskChooser>) -> Self {
        self.chooser = Some(chooser);
        self
    }

    /// The chooser of `reask: auto`, if one was given.
    pub fn chooser(&self) -> Option<&Arc<dyn ReaskChooser>> {
        self.chooser.as_ref()
    }

    /// The escalation model, if the rung `escalate` has one.
    pub fn escalation(&self) -> Option<&Escalation> {
        self.escalation.as_ref()
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
            escalation: self.escalation.clone(),
            chooser: self.chooser.clone(),
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
        let admitted = self.admit(request, context, request_validators).await;
        let request = admitted.request.as_ref().unwrap_or(request);
        let context = admitted.view.as_ref().unwrap_or(context);
        let mut run = Run::new(self, context, observer, true);
        if let Some(check) = &admitted.input {
            observer.on_event(&Event::InputChecked { check });
        }
        run.input = admitted.input;
        if let Some(reason) = admitted.stopped {
            let status = match reason {
                StopReason::InputRejected => Status::Aborted,
                _ => Status::Unavailable,
            };
            return Box::pin(run.finish(status, reason, None)).await;
        }
        self.ask_until_done(runner, request, request_validators, run)
            .await
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
