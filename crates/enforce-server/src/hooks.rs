//! What the embedding program plugs into the server: the step extractor of passed answers and
//! the hook run before each `/metrics` scrape. A leaf module: the state and the builder use it.

use crate::metrics::Metrics;
use std::sync::Arc;

/// Reads the step of a passed answer (e.g. `why` from `<!-- STEP: why -->`) for the chat's
/// step history. The binary wires the `step_marker` validator's extraction here.
pub type StepExtractor = Arc<dyn Fn(&str) -> Option<StepMark> + Send + Sync>;

/// A step marker found in an answer: the step, and where the marker sits, so it can be hidden
/// from the client (`hide_step_marker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepMark {
    /// The step (e.g. `why`).
    pub step: String,
    /// The byte range of the whole marker in the answer.
    pub range: std::ops::Range<usize>,
}

/// Called before each `/metrics` scrape to set gauges the server cannot see itself, e.g. the
/// circuit-breaker states of external validators.
pub type ScrapeHook = Arc<dyn Fn(&Metrics) + Send + Sync>;
