//! What the loop returns: [`Outcome`], its [`Status`] and the audit of every [`Attempt`].

use crate::{BudgetKind, Issue, RunnerError, Usage};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The final verdict. The strings are stable: the CLI, the proxy and dashboards use them.
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
    /// The loop stopped early: a hard-abort error that repairs could not fix, or a runner
    /// failure.
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

/// Why the loop stopped asking.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
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
    RunnerFailed,
    /// A fail-closed validator was unavailable.
    ValidatorUnavailable,
    /// A runner-free check: there was nobody to ask.
    CheckOnly,
}

/// A validator that gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnavailableValidator {
    /// The validator's name.
    pub validator: String,
    /// Why it gave no verdict.
    pub reason: String,
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
}

/// The result of one enforcement, serializable as one JSON audit record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outcome {
    /// The verdict.
    pub status: Status,
    /// Why the loop stopped asking.
    pub stop_reason: StopReason,
    /// The final response: the passing or repaired text, the fallback, or the last response as
    /// it came (check `status` before passing it on). `None` when no response was received.
    pub response: Option<String>,
    /// Errors remaining in `response` (empty when it passed).
    pub issues: Vec<Issue>,
    /// Warnings about `response`.
    pub warnings: Vec<Issue>,
    /// Every attempt, in order.
    pub attempts: Vec<Attempt>,
    /// `true` when `response` is the policy's fallback text.
    #[serde(default)]
    pub fallback_used: bool,
    /// The runner's failure, when `stop_reason` is `runner_failed`.
    #[serde(default)]
    pub runner_error: Option<RunnerError>,
    /// The validator that gave no verdict, when status is `unavailable`.
    #[serde(default)]
    pub unavailable: Option<UnavailableValidator>,
    /// The last runner session id, so a later turn can continue it.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Token usage summed over attempts (`None` when the runner reported none).
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Cost summed over attempts (`None` when the runner reported none).
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// Wall time of the whole enforcement, in microseconds.
    pub total_us: u64,
    /// Of that, time spent waiting on the runner, in microseconds; the rest is enforce's own
    /// overhead.
    pub runner_us: u64,
}

impl Outcome {
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
        if let Some(err) = &self.runner_error {
            line.push_str(&format!(" (runner: {err})"));
        }
        if let Some(u) = &self.unavailable {
            line.push_str(&format!(" ({} unavailable: {})", u.validator, u.reason));
        }
        line
    }

    /// The audit record as one line of JSON.
    pub fn to_json_line(&self) -> String {
        // An Outcome holds only strings, numbers and enums: serialization cannot fail.
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// FNV-1a 64-bit digest of `text`, as 16 hex digits.
pub fn digest(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}
