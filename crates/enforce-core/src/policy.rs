//! How hard the loop tries: [`Policy`] and [`Budget`].

use crate::{FailMode, Feedback};
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

/// The rules of the loop.
#[derive(Debug, Clone)]
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
    /// filled from the request context.
    pub fallback: Option<String>,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_retries: 2,
            feedback: Feedback::default(),
            budget: Budget::default(),
            on_unavailable: FailMode::Closed,
            fallback: None,
        }
    }
}
