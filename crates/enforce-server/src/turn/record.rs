//! A finished turn's bookkeeping: its metrics, log line, trace, audit line and session step.

use super::Turn;
use crate::config::FsyncPolicy;
use crate::metrics::{
    ModelSeries, FALLBACKS, INPUT_CHECKS, ISSUES, REPAIRS, ROUTES, RUNNER_FAILURES,
};
use crate::session::{HiddenMarker, TurnRecord};
use enforce_core::{AuditRecord, Outcome, Status, StopReason};
use std::sync::atomic::Ordering;
use std::time::Duration;

/// The step recorded for a turn that delivered no checked answer with a marker (unresolved,
/// an error to the client, aborted, cut short).
pub(crate) const UNKNOWN_STEP: &str = "unknown";

impl Turn {
    /// Counts a finished request and writes its audit line. With `audit_fsync: always` it waits
    /// until the line is on disk, so an answer is never acknowledged before it is audited.
    /// `status` is the metrics label (`deadline` and `internal_error` for outcomes cut short,
    /// whose overhead is not observed: the attempt in flight has no runner time).
    pub(super) async fn record(
        &self,
        status: &str,
        outcome: &Outcome,
        total: Duration,
        step: Option<&str>,
    ) {
        let (Some(line), Some(audit)) =
            (self.account(status, outcome, total, step), &self.app.audit)
        else {
            return;
        };
        if audit.policy() == FsyncPolicy::Always {
            // A failed write is logged and counted by the writer; the client still gets its
            // answer (the audit must not take the service down).
            // Boxed: every request's future would otherwise carry this write's state.
            Box::pin(audit.append_durable(line)).await;
        } else {
            audit.append(line);
        }
    }

    /// Counts a finished request (metrics, log, trace) and marks it recorded; its audit line,
    /// when there is an audit log.
    pub(super) fn account(
        &self,
        status: &str,
        outcome: &Outcome,
        total: Duration,
        step: Option<&str>,
    ) -> Option<String> {
        self.recorded.store(true, Ordering::Relaxed);
        tracing::info!(
            model = self.model.id.as_str(),
            status,
            request_id = %self.id.id,
            attempts = outcome.attempts.len(),
            // Debug-formatted: plugin and pattern codes are not ours and could hold newlines.
            codes = ?outcome.codes().join(","),
            total_ms = total.as_millis() as u64,
            "chat completion finished"
        );
        if let Some(trace) = &self.trace {
            trace.finish(status, Some(outcome));
        }
        self.account_fallback(outcome);
        self.count(status, outcome, total);
        self.learn(outcome);
        self.app.audit.as_ref().map(|_| {
            let cache = self.cache.audit();
            AuditRecord::new(&self.id.id, outcome)
                .model(self.model.id.as_str())
                .profile(Some(self.model.profile.as_str()).filter(|p| !p.is_empty()))
                .chat_id(self.chat_id.as_deref())
                .key(self.key_name())
                .runner(self.model.runner_kind.as_deref())
                .route(self.route.as_ref())
                .request_limits(self.request_limits.as_ref())
                // The step belongs to a chat's history: only for requests of a chat.
                .step(step.filter(|_| self.chat_id.is_some()))
                .cache(cache.as_ref())
                .to_json_line()
        })
    }

    /// Tells the enforcer's `reask: auto` chooser the outcome, which adds its re-asks to the
    /// live statistics the next choices read.
    fn learn(&self, outcome: &Outcome) {
        if self.cache.is_hit() {
            return;
        }
        if let Some(chooser) = self.model.enforcer.chooser() {
            chooser.record(outcome);
        }
    }

    /// The profile enforced: the one routed to, else the model's.
    fn profile(&self) -> &str {
        self.route
            .as_ref()
            .and_then(|r| r.get("profile"))
            .and_then(|p| p.as_str())
            .unwrap_or(self.model.profile.as_str())
    }

    /// Counts and logs a fallback applied or rejected, and what a fallback or a repair stood
    /// in for.
    fn account_fallback(&self, outcome: &Outcome) {
        let (model, profile) = (self.model.id.as_str(), self.profile());
        let fallback_rejected = outcome
            .warnings
            .iter()
            .find(|w| w.code == enforce_core::enforcer::FALLBACK_INVALID);
        if outcome.fallback_used || fallback_rejected.is_some() {
            let applied = if outcome.fallback_used {
                "applied"
            } else {
                "rejected"
            };
            self.app.metrics.count(
                &FALLBACKS,
                &[("model", model), ("profile", profile), ("outcome", applied)],
                1,
            );
        }
        // A template fallback stands in for the last attempt's errors; a deterministic repair
        // (the step marker, the file list) for those of the attempt it repaired.
        let stood_in_for = if outcome.fallback_used {
            Some(("template", outcome.attempts.last()))
        } else if outcome.status == Status::Repaired {
            let repaired = outcome
                .attempts
                .iter()
                .rev()
                .find(|a| !a.repairs.is_empty());
            Some(("repair", repaired))
        } else {
            None
        };
        if let Some((kind, attempt)) = stood_in_for {
            let codes: Vec<String> = attempt
                .map(|a| {
                    a.issues
                        .iter()
                        .filter(|i| i.is_error())
                        .map(|i| i.code.escape_debug().to_string())
                        .collect()
                })
                .unwrap_or_default();
            tracing::info!(
                model,
                profile,
                request_id = %self.id.id,
                kind,
                "applied fallback for issues: {}",
                codes.join(", ")
            );
        }
        if let Some(rejected) = fallback_rejected {
            tracing::warn!(
                model,
                request_id = %self.id.id,
                // Debug-formatted: the message quotes validator messages.
                reason = ?rejected.message,
                "fallback failed validation and was not sent"
            );
        }
    }

    /// The request's metrics: its model's series, issues, repairs, runner failures, input
    /// checks and route.
    fn count(&self, status: &str, outcome: &Outcome, total: Duration) {
        let (app, model) = (&self.app, self.model.id.as_str());
        let m = &app.metrics;
        // The model's own series, found once (a model outside the configuration gets its
        // series looked up in the registry instead).
        let made;
        let series = match app.series.get(model) {
            Some(series) => series,
            None => {
                made = ModelSeries::new(app.metrics.clone(), model);
                &made
            }
        };
        series.count_request(status);
        series.duration().observe(total.as_secs_f64());
        series.attempts().inc_by(outcome.attempts.len() as u64);
        for attempt in &outcome.attempts {
            series
                .upstream_latency()
                .observe(attempt.runner_us as f64 / 1e6);
            for issue in &attempt.issues {
                let labels = [
                    ("model", model),
                    ("validator", issue.validator.as_str()),
                    ("code", issue.code.as_str()),
                    ("severity", issue.severity.as_str()),
                ];
                m.count(&ISSUES, &labels, 1);
            }
            for validator in &attempt.repairs {
                m.count(&REPAIRS, &[("model", model), ("validator", validator)], 1);
            }
        }
        if outcome.runner_error().is_some() {
            m.count(&RUNNER_FAILURES, &[("model", model)], 1);
        }
        if let Some(input) = &outcome.input {
            let labels = [("model", model), ("action", input.action.as_str())];
            m.count(&INPUT_CHECKS, &labels, 1);
        }
        if let Some(route) = &self.route {
            let field = |key: &str| route.get(key).and_then(|v| v.as_str()).unwrap_or_default();
            let labels = [
                ("model", model),
                ("route", field("name")),
                ("profile", field("profile")),
                ("by", field("by")),
            ];
            m.count(&ROUTES, &labels, 1);
        }
        let cut_short = matches!(
            outcome.stop_reason,
            StopReason::DeadlineExceeded | StopReason::Panicked | StopReason::ClientDisconnected
        );
        if !cut_short {
            let overhead = outcome.total_us.saturating_sub(outcome.runner_us);
            series.overhead().observe(overhead as f64 / 1e6);
        }
    }

    /// The step a turn without a checked answer records: `unknown` where steps are tracked
    /// (a step extractor is configured), else none.
    pub(super) fn unknown_step(&self) -> Option<&'static str> {
        self.app.step_extractor.as_ref().map(|_| UNKNOWN_STEP)
    }

    /// Records the turn in its chat's session (when the request belongs to a chat).
    pub(super) async fn record_session(
        &self,
        outcome: &Outcome,
        step: Option<String>,
        hidden: Option<HiddenMarker>,
    ) {
        let Some(chat_id) = &self.chat_id else {
            return;
        };
        let turn = TurnRecord {
            model: &self.model.id,
            status: outcome.status.as_str(),
            runner_session_id: outcome.session_id.as_deref(),
            step,
            hidden,
        };
        // Boxed: only a request of a chat pays for the store's future, in size as in time.
        if let Err(e) = Box::pin(self.app.sessions.record_turn(chat_id, turn)).await {
            tracing::error!(chat_id, error = %e, "could not persist session");
        }
    }
}
