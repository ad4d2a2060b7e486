//! How hard the loop tries: [`Policy`] and [`Budget`].

use crate::{feedback::Feedback, FailMode, Issue};
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Limits on one enforcement, checked before every re-ask. `None` means no limit.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Budget {
    /// Most attempts (first ask included), on top of `max_retries`.
    pub max_attempts: Option<u32>,
    /// Most tokens (input + output, summed over attempts) the runner may report.
    pub max_tokens: Option<u64>,
    /// Most cost in US dollars, summed over attempts.
    pub max_cost_usd: Option<f64>,
    /// Most wall time from the first ask, in milliseconds.
    pub max_wall_ms: Option<u64>,
}

impl Budget {
    /// The wall-time limit as a `Duration`.
    pub fn max_wall(&self) -> Option<Duration> {
        self.max_wall_ms.map(Duration::from_millis)
    }
}

/// Which budget ran out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum BudgetKind {
    /// `max_attempts`.
    Attempts,
    /// `max_tokens`.
    Tokens,
    /// `max_cost_usd`.
    Cost,
    /// `max_wall_ms`.
    WallTime,
}

/// What a profile's answers are: decides how values from the request context are written
/// into the fallback template ([`Context::render_json`](crate::Context::render_json) for
/// JSON), so that the fallback keeps the answers' syntax.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum AnswerFormat {
    /// Plain text: values are written as they are.
    #[default]
    Text,
    /// JSON: values are JSON-escaped inside strings and written as JSON elsewhere.
    Json,
}

/// The rules of the loop.
///
/// Build one with [`Policy::builder`] (or start from `Policy::default()` and set fields): new
/// rules get a default, so code that builds a policy keeps compiling when they arrive.
///
/// ```
/// use enforce_core::{Budget, FailMode, Policy};
///
/// let policy = Policy::builder()
///     .max_retries(1)
///     .budget(Budget { max_tokens: Some(10_000), ..Budget::default() })
///     .on_unavailable(FailMode::Open)
///     .fallback("Sorry, {{name}}, no valid answer this time.")
///     .build();
/// assert_eq!(policy.max_retries, 1);
/// assert_eq!(Policy::builder().build().max_retries, Policy::default().max_retries);
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Policy {
    /// Re-asks after the first attempt (default 2).
    pub max_retries: u32,
    /// Builds the feedback sent with a re-ask.
    pub feedback: Feedback,
    /// Limits checked before every re-ask.
    pub budget: Budget,
    /// What an unavailable validator means, unless it says itself (default: fail closed).
    pub on_unavailable: FailMode,
    /// Text returned when a response stays unresolved or aborted; `{{key}}` placeholders are
    /// filled from the request context (as [`answer_format`](Self::answer_format) says). It
    /// is validated like an answer before it is used: a fallback with errors is not returned
    /// (the outcome carries a `FALLBACK_INVALID` warning instead).
    pub fallback: Option<String>,
    /// What the answers are, for filling the fallback template (default: text).
    pub answer_format: AnswerFormat,
    /// Cut an answer short while it streams when a validator's partial check finds an error
    /// no continuation can remove, and re-ask at once (default `true`). Only when a re-ask
    /// can follow; warnings, hard aborts and errors a repair fixes never cut.
    pub early_abort: bool,
    /// How many new bytes of a streamed answer arrive between two partial checks (default
    /// [`Policy::DEFAULT_PARTIAL_CHECK_BYTES`]; 0 counts as 1).
    pub partial_check_bytes: usize,
    /// How each re-ask asks: one rung per re-ask, the last repeating (default
    /// [`Reask::Feedback`] alone). With [`reask_auto`](Self::reask_auto), the fallback.
    pub reask: Ladder,
    /// `reask: auto`: each re-ask takes the strategy the enforcer's chooser picks (default
    /// `None`: the ladder alone).
    pub reask_auto: Option<AutoReask>,
    /// End the loop when an attempt makes no progress on the last rung of
    /// [`reask`](Self::reask) (default `true`; before the last rung, the next re-ask climbs).
    /// `false` never ends it for want of progress: the last rung repeats until the retries or
    /// a budget run out, as the seed documents' loop makes every attempt.
    pub stop_on_no_progress: bool,
    /// When the deterministic repairs run (default [`RepairWhen::Last`]).
    pub repair: RepairWhen,
    /// Issue codes whose repair runs first even when [`repair`](Policy::repair) is `Last`:
    /// an attempt whose every error has one of these codes, and which a repair makes clean,
    /// is the answer without a re-ask (a cosmetic error, like a fence around JSON, is not
    /// worth a model call; a missing field still is).
    pub repair_first_codes: Vec<String>,
    /// Fallback templates per kind of request: the template under the value of one context
    /// fact (e.g. `block_type`); `fallback` is the default when the fact is absent or has no
    /// template of its own.
    pub fallback_by: Option<FallbackBy>,
    /// Re-asks allowed per issue code, below [`max_retries`](Policy::max_retries): an attempt
    /// whose errors include such a code is not re-asked once that many re-asks were made
    /// (e.g. `INVALID_JSON: 1`: one regeneration of an answer that is no JSON, then the
    /// fallback).
    pub max_retries_for: std::collections::BTreeMap<String, u32>,
    /// How the first attempt asks (default [`FirstAttempt::Direct`]).
    pub first_attempt: FirstAttempt,
}

/// Fallback templates chosen by the value of a request fact (see [`Policy::fallback_by`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FallbackBy {
    /// The context key whose value picks the template (e.g. `block_type`).
    pub fact: String,
    /// Template per value of the fact.
    pub templates: std::collections::BTreeMap<String, String>,
}

impl Policy {
    /// The fallback template for a run with `context`: the one for the value of
    /// [`fallback_by`](Policy::fallback_by)'s fact, else [`fallback`](Policy::fallback).
    pub fn fallback_for(&self, context: &crate::Context) -> Option<&str> {
        self.fallback_by
            .as_ref()
            .and_then(|by| {
                let value = context.get_text(&by.fact)?;
                by.templates.get(&value)
            })
            .or(self.fallback.as_ref())
            .map(String::as_str)
    }
}

/// How the loop asks again after a failed attempt.
///
/// Which one pays depends on the model and the contract: a small model may ignore feedback
/// that a large one follows, and then drawing a fresh answer does better. `enforce eval`
/// measures it, and `reask: auto` ([`Policy::reask_auto`]) chooses by that measurement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Reask {
    /// The conversation, the failed answer and feedback naming every error.
    #[default]
    Feedback,
    /// The original request again, as if the first attempt had not happened (like every
    /// re-ask, with the seed advanced: see [`Request::seed_offset`](crate::Request::seed_offset)).
    Resample,
    /// The original request with the feedback appended, without the failed answer.
    FeedbackFresh,
    /// Two calls: the original request with the decoding constraint left out and an
    /// instruction to answer in plain words first, then a follow-up that gives that free
    /// answer (and the feedback) and asks for it in the contract's format, with the
    /// constraint. Only the second answer is validated; both calls count in the attempt's
    /// usage and the budget. For small models whose accuracy suffers from the format
    /// instruction itself.
    ReasonThenFormat,
    /// Like [`Feedback`](Reask::Feedback), asked of the escalation model
    /// ([`Enforcer::with_escalation`](crate::Enforcer::with_escalation)); without one, asked
    /// of the main runner, and the outcome warns `ESCALATION_NO_TARGET`.
    Escalate,
    /// Like [`Resample`](Reask::Resample), with the decoding constraint the caller added to
    /// the request ([`Request::constraint_params`](crate::Request::constraint_params)). A
    /// ladder with this rung sends the constraint only on its attempts: the first attempt and
    /// the other rungs answer freely, because constraining a small model's every answer can
    /// cost it content it gets right unconstrained. Without a constraint in the request the
    /// rung is a plain resample, and the outcome warns `CONSTRAINT_UNAVAILABLE`.
    Constrained,
}

impl Reask {
    /// Every strategy, in the order `reask: auto` considers them after the fallback's rung.
    pub const ALL: [Reask; 6] = [
        Reask::Feedback,
        Reask::Resample,
        Reask::FeedbackFresh,
        Reask::ReasonThenFormat,
        Reask::Escalate,
        Reask::Constrained,
    ];

    /// The strategy's name, as configuration files and the audit write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Reask::Feedback => "feedback",
            Reask::Resample => "resample",
            Reask::FeedbackFresh => "feedback_fresh",
            Reask::ReasonThenFormat => "reason_then_format",
            Reask::Escalate => "escalate",
            Reask::Constrained => "constrained",
        }
    }
}

/// `reask: auto`: each re-ask takes the strategy the enforcer's chooser picks
/// ([`Enforcer::with_chooser`](crate::Enforcer::with_chooser)) from measured statistics, and
/// [`Policy::reask`] is the fallback ladder for answers the statistics say nothing about.
/// Without a chooser every re-ask takes the ladder's rung and the outcome warns
/// `REASK_AUTO_NO_CHOOSER`. A truncated answer still gets more room, not a strategy.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct AutoReask {
    /// The strategies the chooser may take (default: all). Each is a candidate only when it
    /// applies to the request: `constrained` when the request carries a decoding constraint,
    /// `escalate` when the enforcer has an escalation model. With `constrained` among them
    /// the request's constraint goes only with that strategy's re-asks, as a ladder with the
    /// rung does; without it (e.g. `decode: constrained`, where every attempt is constrained
    /// by rule) the constraint goes with every ask.
    pub strategies: Vec<Reask>,
}

impl Default for AutoReask {
    fn default() -> Self {
        AutoReask {
            strategies: Reask::ALL.to_vec(),
        }
    }
}

impl AutoReask {
    /// The fallback ladder of `reask: auto` unless one is configured: `[constrained,
    /// resample, feedback]`, the ladder enforce's real-model benchmark measured within one
    /// case of the best single strategy on every model and contract (the format fixed by
    /// constrained decoding where there is a constraint, fresh draws, feedback last). When
    /// every attempt is decoded under the constraint already (`every_attempt_constrained`),
    /// without the `constrained` rung, which would be a plain resample.
    ///
    /// ```
    /// use enforce_core::policy::{AutoReask, Reask};
    /// let rungs = [Reask::Constrained, Reask::Resample, Reask::Feedback];
    /// assert_eq!(AutoReask::default_fallback(false).rungs(), rungs);
    /// assert_eq!(AutoReask::default_fallback(true).rungs(), &rungs[1..]);
    /// ```
    pub fn default_fallback(every_attempt_constrained: bool) -> Ladder {
        let mut rungs = vec![Reask::Constrained, Reask::Resample, Reask::Feedback];
        if every_attempt_constrained {
            rungs.retain(|r| *r != Reask::Constrained);
        }
        Ladder { rungs }
    }

    /// `reask: auto` choosing among `strategies` only.
    pub fn among(strategies: impl IntoIterator<Item = Reask>) -> Self {
        AutoReask {
            strategies: strategies.into_iter().collect(),
        }
    }

    /// The strategies a chooser may take for a re-ask whose fallback rung is `rung`: that rung
    /// first, then the others of [`strategies`](Self::strategies) that apply: `constrained`
    /// when the request carries a decoding `constraint`, `escalate` when there is an
    /// escalation model.
    ///
    /// ```
    /// use enforce_core::policy::{AutoReask, Reask};
    /// let auto = AutoReask::default();
    /// assert_eq!(
    ///     auto.candidates(Reask::Resample, false, false),
    ///     [Reask::Resample, Reask::Feedback, Reask::FeedbackFresh, Reask::ReasonThenFormat]
    /// );
    /// assert!(auto.candidates(Reask::Feedback, true, true).contains(&Reask::Constrained));
    /// ```
    pub fn candidates(&self, rung: Reask, constraint: bool, escalation: bool) -> Vec<Reask> {
        let applies = |strategy: &&Reask| match strategy {
            Reask::Constrained => constraint,
            Reask::Escalate => escalation,
            _ => true,
        };
        let mut candidates = vec![rung];
        for strategy in self.strategies.iter().filter(applies) {
            if !candidates.contains(strategy) {
                candidates.push(*strategy);
            }
        }
        candidates
    }
}

/// How the first attempt asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum FirstAttempt {
    /// The request as it is (with the decoding constraint, if any).
    #[default]
    Direct,
    /// As the rung [`Reask::ReasonThenFormat`] asks: a free answer first, then the same
    /// answer in the contract's format.
    ReasonThenFormat,
}

/// The strategies of the re-asks, one rung per re-ask: re-ask 1 uses the first, re-ask 2 the
/// second, and the last repeats. Never empty.
///
/// In a configuration file, one strategy or a list: `reask: feedback` or
/// `reask: [feedback, resample]`.
///
/// ```
/// use enforce_core::{policy::Ladder, policy::Reask};
///
/// let ladder = Ladder::new(vec![Reask::Feedback, Reask::Resample]).unwrap();
/// assert_eq!(ladder.rung(0), Reask::Feedback);
/// assert_eq!(ladder.rung(1), Reask::Resample);
/// assert_eq!(ladder.rung(5), Reask::Resample, "the last rung repeats");
/// assert_eq!(Ladder::from(Reask::Resample).rungs(), &[Reask::Resample]);
/// assert!(Ladder::new(vec![]).is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(into = "OneOrMany")]
pub struct Ladder {
    rungs: Vec<Reask>,
}

impl Ladder {
    /// A ladder of `rungs`, in order; `None` when there are none.
    pub fn new(rungs: Vec<Reask>) -> Option<Ladder> {
        (!rungs.is_empty()).then_some(Ladder { rungs })
    }

    /// The strategy of rung `index` (counted from 0); past the end, the last rung.
    pub fn rung(&self, index: usize) -> Reask {
        self.rungs
            .get(index)
            .or(self.rungs.last())
            .copied()
            .unwrap_or_default()
    }

    /// Every rung, in order.
    pub fn rungs(&self) -> &[Reask] {
        &self.rungs
    }
}

impl From<Reask> for Ladder {
    fn from(reask: Reask) -> Self {
        Ladder { rungs: vec![reask] }
    }
}

impl Default for Ladder {
    fn default() -> Self {
        Ladder::from(Reask::default())
    }
}

/// A ladder as a configuration file writes it: one strategy or a list.
#[derive(serde::Serialize)]
#[serde(untagged)]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
enum OneOrMany {
    One(Reask),
    Many(Vec<Reask>),
}

// By hand rather than untagged: an unknown strategy is named in the error, with the valid
// ones, where the file has it.
impl<'de> Deserialize<'de> for Ladder {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, IntoDeserializer, SeqAccess, Visitor};
        struct Rungs;
        impl<'de> Visitor<'de> for Rungs {
            type Value = Ladder;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a re-ask strategy (feedback, resample, feedback_fresh, reason_then_format, escalate, constrained) or a list of them",
                )
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<Ladder, E> {
                Reask::deserialize(value.into_deserializer()).map(Ladder::from)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Ladder, A::Error> {
                let mut rungs = Vec::new();
                while let Some(rung) = seq.next_element::<Reask>()? {
                    rungs.push(rung);
                }
                Ladder::new(rungs).ok_or_else(|| {
                    de::Error::custom("a `reask` ladder needs at least one strategy")
                })
            }
        }
        deserializer.deserialize_any(Rungs)
    }
}

impl From<Ladder> for OneOrMany {
    fn from(ladder: Ladder) -> Self {
        match ladder.rungs.as_slice() {
            [one] => OneOrMany::One(*one),
            _ => OneOrMany::Many(ladder.rungs),
        }
    }
}

#[cfg(feature = "config-schema")]
impl schemars::JsonSchema for Ladder {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Ladder".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        OneOrMany::json_schema(generator)
    }
}

/// When the loop applies the validators' deterministic repairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum RepairWhen {
    /// After the re-asks are spent (or a stop rule ends them).
    #[default]
    Last,
    /// Before spending a re-ask: when every error of an attempt is one a repair fixes and the
    /// repaired text is clean, it is the answer (`repaired`) and no re-ask is made.
    First,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_retries: 2,
            feedback: Feedback::default(),
            budget: Budget::default(),
            on_unavailable: FailMode::Closed,
            fallback: None,
            answer_format: AnswerFormat::Text,
            early_abort: true,
            partial_check_bytes: Policy::DEFAULT_PARTIAL_CHECK_BYTES,
            reask: Ladder::from(Reask::Feedback),
            reask_auto: None,
            stop_on_no_progress: true,
            repair: RepairWhen::Last,
            repair_first_codes: Vec::new(),
            fallback_by: None,
            max_retries_for: std::collections::BTreeMap::new(),
            first_attempt: FirstAttempt::Direct,
        }
    }
}

impl Policy {
    /// Whether the repairs run before a re-ask of an attempt with these issues: always with
    /// [`RepairWhen::First`], else when every error has a code of
    /// [`repair_first_codes`](Policy::repair_first_codes).
    pub fn repairs_first(&self, issues: &[Issue]) -> bool {
        match self.repair {
            RepairWhen::First => true,
            _ => {
                let mut errors = issues.iter().filter(|i| i.is_error()).peekable();
                errors.peek().is_some() && errors.all(|i| self.repair_first_codes.contains(&i.code))
            }
        }
    }

    /// The re-asks allowed after an attempt with `issues`: [`max_retries`](Policy::max_retries),
    /// or less when one of its errors has a code of
    /// [`max_retries_for`](Policy::max_retries_for). The loop stops once the attempt's
    /// number exceeds it.
    pub fn retries_allowed(&self, issues: &[Issue]) -> u32 {
        issues
            .iter()
            .filter(|i| i.is_error())
            .filter_map(|i| self.max_retries_for.get(&i.code))
            .fold(self.max_retries, |allowed, &for_code| allowed.min(for_code))
    }

    /// The default of [`partial_check_bytes`](Policy::partial_check_bytes): about eight
    /// tokens, so a failure is caught within a fraction of a second of generation while the
    /// checks stay a small cost per chunk.
    pub const DEFAULT_PARTIAL_CHECK_BYTES: usize = 32;

    /// A builder starting from the defaults.
    pub fn builder() -> PolicyBuilder {
        PolicyBuilder::default()
    }
}

/// Builds a [`Policy`]; every rule not set keeps its default.
#[derive(Debug, Clone, Default)]
#[must_use = "a builder does nothing until `build` is called"]
pub struct PolicyBuilder {
    policy: Policy,
}

impl PolicyBuilder {
    /// Re-asks after the first attempt.
    pub fn max_retries(mut self, max_retries: u32) -> Self {
        self.policy.max_retries = max_retries;
        self
    }

    /// The feedback sent with a re-ask.
    pub fn feedback(mut self, feedback: Feedback) -> Self {
        self.policy.feedback = feedback;
        self
    }

    /// Limits checked before every re-ask.
    pub fn budget(mut self, budget: Budget) -> Self {
        self.policy.budget = budget;
        self
    }

    /// What an unavailable validator means, unless it says itself.
    pub fn on_unavailable(mut self, mode: FailMode) -> Self {
        self.policy.on_unavailable = mode;
        self
    }

    /// The fallback template for unresolved and aborted runs.
    pub fn fallback(mut self, template: impl Into<String>) -> Self {
        self.policy.fallback = Some(template.into());
        self
    }

    /// What the answers are, for filling the fallback template.
    pub fn answer_format(mut self, format: AnswerFormat) -> Self {
        self.policy.answer_format = format;
        self
    }

    /// Whether a streamed answer is cut short at a definite error.
    pub fn early_abort(mut self, yes: bool) -> Self {
        self.policy.early_abort = yes;
        self
    }

    /// New bytes between two partial checks of a streamed answer.
    pub fn partial_check_bytes(mut self, bytes: usize) -> Self {
        self.policy.partial_check_bytes = bytes;
        self
    }

    /// How each re-ask asks: one strategy, or a [`Ladder`] of them.
    pub fn reask(mut self, reask: impl Into<Ladder>) -> Self {
        self.policy.reask = reask.into();
        self
    }

    /// `reask: auto`: each re-ask takes the chooser's strategy, the ladder of
    /// [`reask`](Self::reask) being the fallback.
    pub fn reask_auto(mut self, auto: AutoReask) -> Self {
        self.policy.reask_auto = Some(auto);
        self
    }

    /// Whether an attempt that makes no progress ends the loop at once.
    pub fn stop_on_no_progress(mut self, yes: bool) -> Self {
        self.policy.stop_on_no_progress = yes;
        self
    }

    /// When the deterministic repairs run.
    pub fn repair(mut self, when: RepairWhen) -> Self {
        self.policy.repair = when;
        self
    }

    /// Issue codes whose repair runs before a re-ask whatever [`repair`](Self::repair) says.
    pub fn repair_first_codes<S: Into<String>>(
        mut self,
        codes: impl IntoIterator<Item = S>,
    ) -> Self {
        self.policy.repair_first_codes = codes.into_iter().map(Into::into).collect();
        self
    }

    /// Re-asks allowed for answers with an error of `code` (see
    /// [`Policy::max_retries_for`]).
    pub fn max_retries_for(mut self, code: impl Into<String>, retries: u32) -> Self {
        self.policy.max_retries_for.insert(code.into(), retries);
        self
    }

    /// How the first attempt asks.
    pub fn first_attempt(mut self, first: FirstAttempt) -> Self {
        self.policy.first_attempt = first;
        self
    }

    /// The policy.
    pub fn build(self) -> Policy {
        self.policy
    }
}
