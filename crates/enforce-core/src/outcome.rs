//! What the loop returns: [`Outcome`], its [`Status`] and the audit of every [`Attempt`].

use crate::validator::UnavailableValidator;
use crate::{
    input::InputCheck, policy::BudgetKind, policy::Reask, runner::FinishReason, runner::ToolCall,
    Issue, RunnerError, Usage,
};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

/// The final verdict. The strings are stable: the CLI, the proxy and dashboards use them.
///
/// Deliberately exhaustive (unlike [`StopReason`]): every consumer has to decide what each
/// verdict means (an exit code, an HTTP status, deliver or not), so a new verdict must not slip
/// through a `_` arm; it would be a breaking change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A response passed every validator (warnings allowed).
    Passed,
    /// Deterministic repairs made the last response pass.
    Repaired,
    /// Errors remain after re-asks and repairs.
    Unresolved,
    /// A required validator could not give a verdict (fail-closed).
    Unavailable,
    /// The loop stopped early: a hard-abort error that repairs could not fix, a runner
    /// failure, or a stop from outside (deadline, panic).
    Aborted,
}

impl Status {
    /// The stable lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Passed => "passed",
            Status::Repaired => "repaired",
            Status::Unresolved => "unresolved",
            Status::Unavailable => "unavailable",
            Status::Aborted => "aborted",
        }
    }

    /// `true` for `passed` and `repaired`: the response meets the contract.
    pub fn is_success(self) -> bool {
        matches!(self, Status::Passed | Status::Repaired)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why the loop stopped asking. A stop that has details carries them: the runner's error, the
/// validator that gave no verdict, the budget that ran out.
///
/// On its own it serializes as its audit tag (`{"reason": "runner_failed"}`,
/// `{"reason": "budget", "budget": "tokens"}`): the proxy sends that to clients. In the audit
/// record the details sit beside it, in `runner_error` and `unavailable` (see [`Outcome`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
#[non_exhaustive]
pub enum StopReason {
    /// The last response had no errors.
    Clean,
    /// `max_retries` re-asks were spent.
    RetriesExhausted,
    /// An error was not repairable: asking again could not help.
    HardAbort,
    /// The last attempt had the same error codes as the one before.
    NoProgress,
    /// A budget ran out.
    Budget {
        /// Which one.
        budget: BudgetKind,
    },
    /// The runner failed.
    RunnerFailed {
        /// How it failed.
        #[serde(skip)]
        error: RunnerError,
    },
    /// A fail-closed validator was unavailable.
    ValidatorUnavailable {
        /// Which validator, and why.
        #[serde(skip)]
        unavailable: UnavailableValidator,
    },
    /// A runner-free check: there was nobody to ask.
    CheckOnly,
    /// The caller's deadline for the whole request passed while the loop ran (e.g. the proxy's
    /// `request_timeout`); the attempts made until then are kept.
    DeadlineExceeded,
    /// The input stage rejected the request: no model was asked (the outcome's `input` says
    /// why).
    InputRejected,
    /// The enforcement panicked (in a runner, a validator or the loop); the attempts made until
    /// then are kept.
    Panicked,
    /// The client went away before the loop ended (e.g. the proxy's client closed its
    /// connection); the attempts made until then are kept.
    ClientDisconnected,
}

impl StopReason {
    /// The runner's failure, for [`StopReason::RunnerFailed`].
    pub fn runner_error(&self) -> Option<&RunnerError> {
        match self {
            StopReason::RunnerFailed { error } => Some(error),
            _ => None,
        }
    }

    /// The validator that gave no verdict, for [`StopReason::ValidatorUnavailable`].
    pub fn unavailable(&self) -> Option<&UnavailableValidator> {
        match self {
            StopReason::ValidatorUnavailable { unavailable } => Some(unavailable),
            _ => None,
        }
    }
}

/// The stop reason as the audit record spells it, read back: the tag without the details.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
enum StopTag {
    Clean,
    RetriesExhausted,
    HardAbort,
    NoProgress,
    Budget { budget: BudgetKind },
    RunnerFailed,
    ValidatorUnavailable,
    CheckOnly,
    DeadlineExceeded,
    Panicked,
    InputRejected,
    ClientDisconnected,
}

/// The audit of one attempt: one response and what the validators said about it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attempt {
    /// 1-based attempt number.
    pub number: u32,
    /// Length of the response in bytes.
    pub response_bytes: usize,
    /// FNV-1a 64-bit digest of the response, hex: tells responses apart without storing them.
    pub response_digest: String,
    /// Every issue found (errors and warnings).
    pub issues: Vec<Issue>,
    /// Time the runner took for this attempt, in microseconds (0 for a runner-free check).
    pub runner_us: u64,
    /// Time the validators took, in microseconds.
    pub validation_us: u64,
    /// Token usage the runner reported.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Cost the runner reported, in US dollars.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// The runner session the reply belongs to.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Validators whose repair changed this response, in the order applied.
    #[serde(default)]
    pub repairs: Vec<String>,
    /// Set when the answer was cut short while it streamed (early abort): `response_bytes`,
    /// `usage` and `cost_usd` then count what was generated before the cut, and `issues` are
    /// the definite errors that caused it. Absent from the record otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut: Option<Cut>,
    /// Why the model stopped, when the runner said (`length`: the answer hit the token limit
    /// and is truncated). Absent when unknown, and for a cut answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// `true` when `usage` is enforce's own estimate, not the runner's count: an answer cut
    /// short before the runner reported its usage counts one output token per streamed text
    /// delta and one input token per four bytes of the messages sent. Absent when `false`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// Set when the runner failed on this attempt (timeout, upstream error, broken stream):
    /// the attempt has no response and counts as a failed attempt; the loop goes on while
    /// attempts remain. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_error: Option<RunnerError>,
    /// The seed this attempt drew with: the runner's own when it reported one, else the
    /// `seed` its request carried (every re-ask carries a new one). Absent when unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// The strategy (the rung of the policy's `reask` ladder) that asked this attempt. Absent
    /// for the first ask and for a re-ask after a truncated answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reask: Option<Reask>,
    /// The token limit a re-ask after a truncated answer gave (more than the answer had),
    /// with its instruction to answer shorter. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub more_room: Option<u64>,
    /// Set when the attempt asked for a free answer before the formatted one
    /// (reason-then-format): that first call's figures. The attempt's `usage`, `cost_usd` and
    /// `runner_us` include them; its response is the second call's. Absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub free_answer: Option<FreeAnswer>,
    /// The escalation model that answered this attempt (rung `escalate`). Absent when the
    /// main runner answered, also for an `escalate` rung without an escalation model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalated_to: Option<String>,
    /// Why `reask: auto` took this attempt's strategy (`reask`): the rates it compared, or
    /// that it fell back to the ladder. Absent for an attempt no chooser was asked about.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reask_choice: Option<ChoiceReason>,
}

/// Why a re-ask of `reask: auto` took its strategy, as the audit records it
/// (`attempts[].reask_choice`). The strategy itself is the attempt's `reask`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChoiceReason {
    /// How the strategy was chosen.
    pub by: ChosenBy,
    /// The error codes of the answer the re-ask is about, sorted: the statistics read.
    pub codes: Vec<String>,
    /// The strategies compared, in the order considered; empty for a fallback.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub compared: Vec<Compared>,
}

/// How `reask: auto` chose a strategy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ChosenBy {
    /// The best of rates drawn from each strategy's posterior (exploration on).
    Sampled,
    /// The best posterior mean (exploration off).
    Mean,
    /// The fallback ladder's rung: no strategy had enough re-asks measured for these codes.
    NoData,
    /// The fallback ladder's rung: the enforcer has no chooser (no statistics).
    NoChooser,
}

impl ChosenBy {
    /// `true` when the ladder chose, not the statistics.
    pub fn is_fallback(self) -> bool {
        matches!(self, ChosenBy::NoData | ChosenBy::NoChooser)
    }
}

/// One strategy as `reask: auto` weighed it for a re-ask.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compared {
    /// The strategy.
    pub strategy: Reask,
    /// Re-asks with it measured about answers with these codes (summed over the codes).
    pub attempts: u64,
    /// Of those, re-asks whose answer had no error.
    pub valid: u64,
    /// The posterior mean of its rate of valid answers: `(valid + 1) / (attempts + 2)`.
    pub mean: f64,
    /// The rate drawn from its posterior, when exploring and it was in the draw.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled: Option<f64>,
    /// Mean tokens (input + output) such a re-ask spent; absent when none reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<f64>,
    /// What was compared: valid answers per 1,000 tokens (the sampled rate, else the mean),
    /// or the rate alone when a strategy compared has no token counts.
    pub score: f64,
}

/// The free answer of a reason-then-format attempt, which is not validated.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct FreeAnswer {
    /// Length of the free answer in bytes.
    pub response_bytes: usize,
    /// Time the runner took for it, in microseconds.
    pub runner_us: u64,
    /// Token usage the runner reported for it.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Cost the runner reported for it, in US dollars.
    #[serde(default)]
    pub cost_usd: Option<f64>,
}

/// Why and where an attempt was cut short.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cut {
    /// Bytes of the answer received when it was cut.
    pub bytes: usize,
    /// The codes of the definite errors that cut it, sorted, without repeats.
    pub codes: Vec<String>,
}

/// The result of one enforcement, serializable as one JSON audit record.
///
/// The record's shape is a public contract: besides the fields below it has `runner_error` and
/// `unavailable` (each `null` unless the stop reason carries it), in the order of
/// [`to_json_line`](Outcome::to_json_line).
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// The verdict.
    pub status: Status,
    /// Why the loop stopped asking, with the runner's error or the unavailable validator.
    pub stop_reason: StopReason,
    /// The final response: the passing or repaired text, the fallback, or the last response as
    /// it came (check `status` before passing it on). `None` when no response was received.
    pub response: Option<String>,
    /// The tools the final reply calls (empty for a text answer and for the fallback).
    pub tool_calls: Vec<ToolCall>,
    /// Errors remaining in `response` (empty when it passed).
    pub issues: Vec<Issue>,
    /// Warnings about `response`.
    pub warnings: Vec<Issue>,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// What the input stage found and did, for a profile with input validators (`input` in
    /// the record, absent otherwise).
    pub input: Option<InputCheck>,
    /// `true` when `response` is the policy's fallback text.
    pub fallback_used: bool,
    /// The last runner session id, so a later turn can continue it.
    pub session_id: Option<String>,
    /// Token usage summed over attempts (`None` when the runner reported none).
    pub usage: Option<Usage>,
    /// Cost summed over attempts (`None` when the runner reported none).
    pub cost_usd: Option<f64>,
    /// Wall time of the whole enforcement, in microseconds.
    pub total_us: u64,
    /// Of that, time spent waiting on the runner, in microseconds; the rest is enforce's own
    /// overhead.
    pub runner_us: u64,
    /// The literal status of each validator that gave no verdict (the one the stop reason
    /// names, or one of [`unchecked_validators`](Outcome::unchecked_validators)) and has one
    /// of its own ([`Validator::unavailable_status`](crate::Validator::unavailable_status)), by
    /// validator name. Absent from the record when empty.
    pub unavailable_statuses: BTreeMap<String, String>,
}

/// The audit record, written from an outcome and read back into one: the stop reason's details
/// sit beside its tag. Field order and names are the public contract.
/// `S` is the stop reason: the outcome's own when written, its tag when read back.
#[derive(Serialize, Deserialize)]
struct OutcomeRecord<'a, S> {
    status: Status,
    stop_reason: S,
    response: Option<Cow<'a, str>>,
    #[serde(default, skip_serializing_if = "<[ToolCall]>::is_empty")]
    tool_calls: Cow<'a, [ToolCall]>,
    issues: Cow<'a, [Issue]>,
    warnings: Cow<'a, [Issue]>,
    attempts: Cow<'a, [Attempt]>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    input: Option<Cow<'a, InputCheck>>,
    #[serde(default)]
    fallback_used: bool,
    #[serde(default)]
    runner_error: Option<Cow<'a, RunnerError>>,
    #[serde(default)]
    unavailable: Option<Cow<'a, UnavailableValidator>>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    unavailable_statuses: Cow<'a, BTreeMap<String, String>>,
    #[serde(default)]
    session_id: Option<Cow<'a, str>>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    cost_usd: Option<f64>,
    total_us: u64,
    runner_us: u64,
}

/// An audit record whose stop reason and details disagree.
#[derive(Debug, thiserror::Error)]
enum InconsistentRecord {
    #[error("stop_reason `runner_failed` needs `runner_error`")]
    MissingRunnerError,
    #[error("stop_reason `validator_unavailable` needs `unavailable`")]
    MissingUnavailable,
    #[error("`runner_error` is set, but stop_reason is not `runner_failed`")]
    StrayRunnerError,
    #[error("`unavailable` is set, but stop_reason is not `validator_unavailable`")]
    StrayUnavailable,
}

impl OutcomeRecord<'_, StopTag> {
    fn into_outcome(self) -> Result<Outcome, InconsistentRecord> {
        let r = self;
        let stop_reason = match (r.stop_reason, r.runner_error, r.unavailable) {
            (StopTag::RunnerFailed, Some(error), None) => StopReason::RunnerFailed {
                error: error.into_owned(),
            },
            (StopTag::RunnerFailed, None, _) => return Err(InconsistentRecord::MissingRunnerError),
            (StopTag::ValidatorUnavailable, None, Some(unavailable)) => {
                StopReason::ValidatorUnavailable {
                    unavailable: unavailable.into_owned(),
                }
            }
            (StopTag::ValidatorUnavailable, _, None) => {
                return Err(InconsistentRecord::MissingUnavailable)
            }
            (_, Some(_), _) => return Err(InconsistentRecord::StrayRunnerError),
            (_, _, Some(_)) => return Err(InconsistentRecord::StrayUnavailable),
            (StopTag::Clean, None, None) => StopReason::Clean,
            (StopTag::RetriesExhausted, None, None) => StopReason::RetriesExhausted,
            (StopTag::HardAbort, None, None) => StopReason::HardAbort,
            (StopTag::NoProgress, None, None) => StopReason::NoProgress,
            (StopTag::Budget { budget }, None, None) => StopReason::Budget { budget },
            (StopTag::CheckOnly, None, None) => StopReason::CheckOnly,
            (StopTag::DeadlineExceeded, None, None) => StopReason::DeadlineExceeded,
            (StopTag::Panicked, None, None) => StopReason::Panicked,
            (StopTag::ClientDisconnected, None, None) => StopReason::ClientDisconnected,
            (StopTag::InputRejected, None, None) => StopReason::InputRejected,
        };
        Ok(Outcome {
            status: r.status,
            stop_reason,
            response: r.response.map(Cow::into_owned),
            tool_calls: r.tool_calls.into_owned(),
            issues: r.issues.into_owned(),
            warnings: r.warnings.into_owned(),
            attempts: r.attempts.into_owned(),
            input: r.input.map(Cow::into_owned),
            fallback_used: r.fallback_used,
            session_id: r.session_id.map(Cow::into_owned),
            usage: r.usage,
            cost_usd: r.cost_usd,
            total_us: r.total_us,
            runner_us: r.runner_us,
            unavailable_statuses: r.unavailable_statuses.into_owned(),
        })
    }
}

impl<'de> Deserialize<'de> for Outcome {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        OutcomeRecord::<StopTag>::deserialize(deserializer)?
            .into_outcome()
            .map_err(D::Error::custom)
    }
}

impl Serialize for Outcome {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        OutcomeRecord {
            status: self.status,
            stop_reason: &self.stop_reason,
            response: self.response.as_deref().map(Cow::Borrowed),
            tool_calls: Cow::Borrowed(&self.tool_calls),
            issues: Cow::Borrowed(&self.issues),
            warnings: Cow::Borrowed(&self.warnings),
            attempts: Cow::Borrowed(&self.attempts),
            input: self.input.as_ref().map(Cow::Borrowed),
            fallback_used: self.fallback_used,
            runner_error: self.stop_reason.runner_error().map(Cow::Borrowed),
            unavailable: self.stop_reason.unavailable().map(Cow::Borrowed),
            unavailable_statuses: Cow::Borrowed(&self.unavailable_statuses),
            session_id: self.session_id.as_deref().map(Cow::Borrowed),
            usage: self.usage,
            cost_usd: self.cost_usd,
            total_us: self.total_us,
            runner_us: self.runner_us,
        }
        .serialize(serializer)
    }
}

impl Outcome {
    /// The outcome of an enforcement that was stopped from outside before it finished (a
    /// deadline, a panic): `aborted` with `stop_reason`, no response, and the `attempts`
    /// recorded until then (see [`Event::Recorded`](crate::Event::Recorded)), whose usage,
    /// cost and runner time are summed. `total` is the wall time until the stop.
    pub fn interrupted(stop_reason: StopReason, attempts: Vec<Attempt>, total: Duration) -> Self {
        let mut usage: Option<Usage> = None;
        let mut cost_usd: Option<f64> = None;
        let mut runner_us: u64 = 0;
        for attempt in &attempts {
            if let Some(u) = attempt.usage {
                usage.get_or_insert_with(Usage::default).add(u);
            }
            if let Some(c) = attempt.cost_usd {
                *cost_usd.get_or_insert(0.0) += c;
            }
            runner_us = runner_us.saturating_add(attempt.runner_us);
        }
        let session_id = attempts.iter().rev().find_map(|a| a.session_id.clone());
        Outcome {
            status: Status::Aborted,
            stop_reason,
            response: None,
            tool_calls: Vec::new(),
            issues: Vec::new(),
            warnings: Vec::new(),
            attempts,
            input: None,
            fallback_used: false,
            session_id,
            usage,
            cost_usd,
            total_us: u64::try_from(total.as_micros()).unwrap_or(u64::MAX),
            runner_us,
            unavailable_statuses: BTreeMap::new(),
        }
    }

    /// The runner's failure, when the loop stopped because of it.
    pub fn runner_error(&self) -> Option<&RunnerError> {
        self.stop_reason.runner_error()
    }

    /// The validator that gave no verdict, when status is `unavailable`.
    pub fn unavailable(&self) -> Option<&UnavailableValidator> {
        self.stop_reason.unavailable()
    }

    /// The error codes remaining, in order.
    pub fn codes(&self) -> Vec<&str> {
        self.issues.iter().map(|i| i.code.as_str()).collect()
    }

    /// One line for people and logs: status, attempts, remaining codes.
    pub fn summary(&self) -> String {
        let mut line = format!("{} after {} attempt(s)", self.status, self.attempts.len());
        if !self.issues.is_empty() {
            line.push_str(": ");
            line.push_str(&self.codes().join(", "));
        }
        if !self.warnings.is_empty() {
            let codes: Vec<&str> = self.warnings.iter().map(|i| i.code.as_str()).collect();
            line.push_str(&format!(" (warnings: {})", codes.join(", ")));
        }
        if let Some(err) = self.runner_error() {
            line.push_str(&format!(" (runner: {err})"));
        }
        if let Some(u) = self.unavailable() {
            line.push_str(&format!(" ({} unavailable: {})", u.validator, u.reason));
        }
        line
    }

    /// The literal status `validator` reports for giving no verdict, when it has one (see
    /// [`unavailable_statuses`](Outcome::unavailable_statuses)).
    pub fn unavailable_status(&self, validator: &str) -> Option<&str> {
        self.unavailable_statuses.get(validator).map(String::as_str)
    }

    /// The validators that did not check the response (their `VALIDATOR_UNAVAILABLE` or
    /// `VALIDATOR_DISABLED` warnings), in order: a `passed` outcome with any of them was not
    /// fully validated.
    pub fn unchecked_validators(&self) -> Vec<&str> {
        self.warnings
            .iter()
            .filter(|w| is_unchecked_warning(w))
            .map(|w| w.validator.as_str())
            .collect()
    }

    /// The outcome's record as one line of JSON: what an audit line holds after its header
    /// (see [`AuditRecord`](crate::AuditRecord), which writers of audit logs use).
    pub fn to_json_line(&self) -> String {
        // An Outcome holds only strings, numbers and enums: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// `true` for the warning of a validator that did not check the response.
pub(crate) fn is_unchecked_warning(warning: &Issue) -> bool {
    warning.code == crate::validator::VALIDATOR_UNAVAILABLE
        || warning.code == crate::validator::VALIDATOR_DISABLED
}

/// FNV-1a 64-bit digest of `text`, as 16 lower-case hex digits: `Attempt::response_digest`,
/// and the proxy's answer digests and chat directory names. Stored digests must stay
/// findable, so the function never changes.
pub fn fnv1a_hex(text: &str) -> String {
    format!("{:016x}", fnv1a(text))
}

/// FNV-1a 64-bit digest of `text`.
pub(crate) fn fnv1a(text: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    /// FNV-1a's published vectors, and 16 lower-case hex digits with leading zeros as
    /// `format!("{:016x}")` writes them.
    #[test]
    fn digests_are_fnv1a_in_sixteen_hex_digits() {
        assert_eq!(super::fnv1a_hex(""), "cbf29ce484222325");
        assert_eq!(super::fnv1a_hex("a"), "af63dc4c8601ec8c");
        assert_eq!(super::fnv1a_hex("foobar"), "85944171f73967e8");
        for text in [
            "",
            "x",
            "{\"name\": \"Ada\"}",
            "é ünïcode",
            &"long ".repeat(100),
        ] {
            let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
            for &b in text.as_bytes() {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
            assert_eq!(super::fnv1a_hex(text), format!("{hash:016x}"), "{text}");
        }
        // A hash with leading zero nibbles keeps them.
        let small = (0u32..)
            .map(|n| n.to_string())
            .find(|t| super::fnv1a_hex(t).starts_with('0'))
            .expect("some text hashes to a leading zero");
        assert_eq!(super::fnv1a_hex(&small).len(), 16);
    }
}
