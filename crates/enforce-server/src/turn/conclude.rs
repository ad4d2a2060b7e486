//! What a turn makes of its loop's end: the text to deliver or the error to send, after its
//! bookkeeping.

use super::{Ended, Turn};
use crate::config::{FailureResponse, Model};
use crate::error::ApiError;
use crate::session::{answer_digest, HiddenMarker};
use crate::verdict;
use axum::http::StatusCode;
use enforce_core::{Attempt, Outcome, Status, StopReason};
use serde_json::Value;
use std::time::Duration;

impl Turn {
    /// Bookkeeping once the loop ended: metrics, audit, session. Returns the text to deliver
    /// or the error to send.
    pub async fn conclude(&self, ended: Ended) -> Result<(String, Box<Outcome>), ApiError> {
        let total = self.started.elapsed();
        let outcome = match ended {
            Ended::Outcome(outcome) => outcome,
            Ended::Deadline(attempts) => {
                let error = ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "enforcement_error",
                    "deadline_exceeded",
                    format!(
                        "No checked answer was ready within this proxy's limit of {} s, so nothing was shown. Please try again, perhaps asking for a shorter answer.",
                        self.app.config.request_timeout.as_secs_f64()
                    ),
                );
                let reason = StopReason::DeadlineExceeded;
                return Err(self
                    .cut_short(reason, "deadline", attempts, total, error)
                    .await);
            }
            Ended::Crashed(attempts) => {
                let error = ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal_error",
                    "The proxy failed while checking the answer, so nothing was shown. Please try again; if it keeps happening, tell the administrator.",
                );
                let reason = StopReason::Panicked;
                return Err(self
                    .cut_short(reason, "internal_error", attempts, total, error)
                    .await);
            }
        };
        let deliverable = deliverable(&outcome, delivery_for(&self.model));
        warn_unvalidated(&outcome, deliverable.is_some());
        let (step, marker) = self.step_of(&outcome, deliverable.as_deref());
        self.record(outcome.status.as_str(), &outcome, total, step.as_deref())
            .await;
        let mut hidden = None;
        let deliverable = match (deliverable, marker) {
            (Some(text), Some(range)) if self.model.options.hide_step_marker => {
                let (shown, marker) = without_marker(&text, range);
                hidden = Some(HiddenMarker {
                    marker,
                    answer_digest: answer_digest(&shown),
                });
                Some(shown)
            }
            (deliverable, _) => deliverable,
        };
        self.record_session(&outcome, step, hidden).await;
        let answer = self.answer_or_error(deliverable, outcome);
        if let Ok((_, outcome)) = &answer {
            self.cache.keep(outcome).await;
        }
        answer
    }

    /// Records a loop cut short (`reason`, counted as `status`) with the attempts made until
    /// then; `error` is what the client is told.
    async fn cut_short(
        &self,
        reason: StopReason,
        status: &str,
        attempts: Vec<Attempt>,
        total: Duration,
        error: ApiError,
    ) -> ApiError {
        let outcome = Outcome::interrupted(reason, attempts, total);
        self.record(status, &outcome, total, self.unknown_step())
            .await;
        self.record_session(&outcome, self.unknown_step().map(String::from), None)
            .await;
        error
    }

    /// The step the turn records, and where the step marker is in the deliverable text (cut
    /// from what the client sees when the model hides it).
    fn step_of(
        &self,
        outcome: &Outcome,
        deliverable: Option<&str>,
    ) -> (Option<String>, Option<std::ops::Range<usize>>) {
        let checked = outcome.status.is_success() && !outcome.fallback_used;
        // Looked for only where it is used: a chat's history (and its audit line), or hiding.
        let wanted = self.chat_id.is_some() || self.model.options.hide_step_marker;
        let mark = match (deliverable, checked && wanted) {
            (Some(text), true) => self.app.step_extractor.as_ref().and_then(|f| f(text)),
            _ => None,
        };
        // A turn without a checked answer still takes a place in the step history: `unknown`,
        // so the next turn's `previous_step` says the flow lost track instead of repeating a
        // step the user never saw confirmed. So does a checked answer without a marker (a
        // profile that does not require one): the model forgot to say where the flow is.
        match mark {
            Some(m) => (Some(m.step), Some(m.range)),
            None if !checked || wanted => (self.unknown_step().map(String::from), None),
            None => (None, None),
        }
    }

    /// The text to deliver, or the error that stands instead of it.
    fn answer_or_error(
        &self,
        deliverable: Option<String>,
        outcome: Box<Outcome>,
    ) -> Result<(String, Box<Outcome>), ApiError> {
        match deliverable {
            // An empty answer looks like a dropped connection to every client: say so instead.
            Some(text) if text.trim().is_empty() && outcome.tool_calls.is_empty() => {
                let mut error = ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_error",
                    "empty_answer",
                    "The model returned an empty answer. Please try again or rephrase your request.",
                );
                let mut enforcement = verdict::enforcement_json(&outcome);
                self.add_route(&mut enforcement);
                // The loop's own status stays in the object for the record, but nothing that
                // reached the client was validated: no `X-Enforce-Status` claims it was.
                enforcement["validated"] = Value::Bool(false);
                error.enforcement = Some(Box::new(enforcement));
                Err(error)
            }
            Some(text) => Ok((text, outcome)),
            None => {
                let mut error = verdict::outcome_failure(&outcome);
                if let Some(enforcement) = error.enforcement.as_deref_mut() {
                    self.add_route(enforcement);
                }
                Err(error)
            }
        }
    }
}

/// Logs an answer delivered though it did not pass its checks, or though some did not run.
fn warn_unvalidated(outcome: &Outcome, delivered: bool) {
    if delivered && !outcome.status.is_success() && !outcome.fallback_used {
        tracing::warn!(
            status = outcome.status.as_str(),
            codes = ?outcome.codes().join(","),
            "returning unvalidated: the answer did not pass its checks"
        );
    } else if delivered && !outcome.unchecked_validators().is_empty() {
        tracing::warn!(
            validators = ?outcome.unchecked_validators(),
            "returning unvalidated: some checks did not run"
        );
    }
}

/// `text` without the marker at `range` (and the blank space it leaves at the end), and the
/// marker.
fn without_marker(text: &str, range: std::ops::Range<usize>) -> (String, String) {
    let (Some(before), Some(marker), Some(after)) = (
        text.get(..range.start),
        text.get(range.clone()),
        text.get(range.end..),
    ) else {
        return (text.to_string(), String::new());
    };
    let mut shown = before.trim_end().to_string();
    let after = after.trim_end();
    if !after.trim().is_empty() {
        shown.push_str(if before.trim().is_empty() { "" } else { "\n\n" });
        shown.push_str(after.trim_start());
    }
    (shown, marker.to_string())
}

/// The per-model choices for an answer that did not pass. Streams follow them too: the answer is
/// held back until the loop ends either way, so a stream can deliver it with its status as a
/// completion does.
#[derive(Clone, Copy)]
struct Delivery {
    on_unresolved: FailureResponse,
    on_unavailable: FailureResponse,
}

fn delivery_for(model: &Model) -> Delivery {
    Delivery {
        on_unresolved: model.options.on_unresolved,
        on_unavailable: model.options.on_unavailable,
    }
}

/// The text to send, if the outcome may be delivered.
fn deliverable(outcome: &Outcome, delivery: Delivery) -> Option<String> {
    let text = outcome.response.clone()?;
    if outcome.status.is_success() || outcome.fallback_used {
        return Some(text);
    }
    if outcome.runner_error().is_some() {
        return None;
    }
    let mode = match outcome.status {
        Status::Unavailable => delivery.on_unavailable,
        _ => delivery.on_unresolved,
    };
    (mode == FailureResponse::Return).then_some(text)
}
