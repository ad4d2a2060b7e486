//! The OTLP/HTTP exporter and the spans of a request (feature `otel`).

use super::client::RuntimeClient;
use super::logs::AuditLogs;
use super::RequestInfo;
use crate::config::OtlpConfig;
use crate::error::ServerError;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use enforce_core::{Event, Issue, Outcome, Reply, RunnerError};
use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer as _, TracerProvider as _,
};
use opentelemetry::{Array, Context, InstrumentationScope, KeyValue, StringValue, Value};
use opentelemetry_otlp::{Protocol, SpanExporter, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

/// One export may take this long (the OTLP default).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// The exporter: a batch span processor on its own thread, posting protobuf to the receiver;
/// and, when `server.otlp.logs` is on, the audit's log exporter beside it.
pub(crate) struct Telemetry {
    provider: SdkTracerProvider,
    tracer: SdkTracer,
    propagator: TraceContextPropagator,
    audit_logs: Option<AuditLogs>,
}

impl Telemetry {
    /// Starts the exporter. Must run inside the tokio runtime that will serve: exports are
    /// sent from it.
    pub fn start(config: &OtlpConfig) -> Result<Self, ServerError> {
        let failed = |what: &str, e: &dyn std::fmt::Display| {
            ServerError::Tracing(format!("{what} ({}): {e}", config.traces_url))
        };
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|e| failed("tracing needs the server built inside a tokio runtime", &e))?;
        let mut headers = HashMap::new();
        for (name, value) in &config.headers {
            // The exporter would drop a bad header silently; say which one it is instead.
            HeaderName::try_from(name.as_str())
                .map_err(|e| failed(&format!("server.otlp.headers: bad name `{name}`"), &e))?;
            HeaderValue::try_from(value.as_str())
                .map_err(|e| failed(&format!("server.otlp.headers: bad value of `{name}`"), &e))?;
            headers.insert(name.clone(), value.clone());
        }
        let client = reqwest::Client::builder()
            .timeout(EXPORT_TIMEOUT)
            .build()
            .map_err(|e| failed("cannot build the HTTP client", &e))?;
        let client = RuntimeClient { client, runtime };
        let resource = Resource::builder()
            .with_service_name(config.service_name.clone())
            .build();
        let audit_logs = match &config.logs_url {
            Some(url) => Some(AuditLogs::start(
                url,
                client.clone(),
                headers.clone(),
                resource.clone(),
                scope(),
                EXPORT_TIMEOUT,
            )?),
            None => None,
        };
        let exporter = SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(config.traces_url.clone())
            .with_timeout(EXPORT_TIMEOUT)
            .with_headers(headers)
            .build()
            .map_err(|e| failed("cannot build the OTLP exporter", &e))?;
        let provider = SdkTracerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let tracer = provider.tracer_with_scope(scope());
        Ok(Telemetry {
            provider,
            tracer,
            propagator: TraceContextPropagator::new(),
            audit_logs,
        })
    }

    /// The audit's log exporter, when `server.otlp.logs` is on.
    pub fn audit_logs(&self) -> Option<AuditLogs> {
        self.audit_logs.clone()
    }

    /// Exports what is queued and stops. Blocks: call it off the runtime's threads
    /// (`spawn_blocking`), since the export itself runs on the runtime.
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "OpenTelemetry export did not shut down cleanly");
        }
        if let Some(logs) = &self.audit_logs {
            logs.shutdown();
        }
    }

    /// Opens the span of one request; a W3C `traceparent` header makes it a child of the
    /// caller's span.
    pub fn request(&self, headers: &HeaderMap, info: RequestInfo<'_>) -> Arc<RequestTrace> {
        let parent = self
            .propagator
            .extract(&opentelemetry_http::HeaderExtractor(headers));
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("http.route", info.route),
            KeyValue::new("enforce.surface", info.surface),
            KeyValue::new("enforce.model", info.model.to_string()),
            KeyValue::new("enforce.request_id", info.request_id.to_string()),
            KeyValue::new("enforce.stream", info.stream),
        ];
        if let Some(chat) = info.chat_id {
            attributes.push(KeyValue::new("enforce.chat_id", chat.to_string()));
        }
        if let Some(profile) = info.profile {
            attributes.push(KeyValue::new("enforce.profile", profile.to_string()));
        }
        if let Some(key) = info.key {
            attributes.push(KeyValue::new("enforce.key", key.to_string()));
        }
        // The applied values of the limits the request set, as the audit's `request_limits`.
        for (limit, name) in [
            ("max_retries", "enforce.request.max_retries"),
            ("token_budget", "enforce.request.token_budget"),
        ] {
            let applied = info
                .request_limits
                .and_then(|l| l.get(limit))
                .and_then(|l| l.get("applied"))
                .and_then(serde_json::Value::as_i64);
            if let Some(applied) = applied {
                attributes.push(KeyValue::new(name, applied));
            }
        }
        let span = self
            .tracer
            .span_builder("chat_completion")
            .with_kind(SpanKind::Server)
            .with_attributes(attributes)
            .start_with_context(&self.tracer, &parent);
        Arc::new(RequestTrace {
            tracer: self.tracer.clone(),
            request: parent.with_span(span),
            model: info.upstream_model.unwrap_or(info.model).to_string(),
            state: Mutex::new(State::default()),
        })
    }
}

/// The instrumentation scope of the spans and log records: this crate and its version.
fn scope() -> InstrumentationScope {
    InstrumentationScope::builder("enforce-server")
        .with_version(env!("CARGO_PKG_VERSION"))
        .build()
}

/// The spans of one request. The loop's observer and the runner wrapper feed it from the
/// enforcement task; the turn finishes it.
pub(crate) struct RequestTrace {
    tracer: SdkTracer,
    /// Holds the request span.
    request: Context,
    /// `gen_ai.request.model` of the attempts.
    model: String,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The open attempt span.
    attempt: Option<Context>,
    /// The request span has ended.
    finished: bool,
}

impl RequestTrace {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere must not stop the tracing of other requests' spans.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Turns a loop event into spans.
    pub fn on_event(&self, event: &Event<'_>) {
        match *event {
            Event::Asking {
                attempt,
                max_attempts,
            } => {
                let mut state = self.state();
                if let Some(previous) = state.attempt.take() {
                    previous.span().end();
                }
                let span = self
                    .tracer
                    .span_builder(format!("chat {}", self.model))
                    .with_kind(SpanKind::Client)
                    .with_attributes([
                        KeyValue::new("gen_ai.operation.name", "chat"),
                        KeyValue::new("gen_ai.request.model", self.model.clone()),
                        KeyValue::new("enforce.attempt", i64::from(attempt)),
                        KeyValue::new("enforce.max_attempts", i64::from(max_attempts)),
                        KeyValue::new("enforce.follow_up", attempt > 1),
                    ])
                    .start_with_context(&self.tracer, &self.request);
                state.attempt = Some(self.request.with_span(span));
            }
            Event::ValidatorRan {
                attempt,
                validator,
                issues,
                unavailable,
                elapsed,
                repaired,
            } => {
                let state = self.state();
                let Some(parent) = &state.attempt else { return };
                let now = SystemTime::now();
                let mut attributes = vec![
                    KeyValue::new("enforce.validator", validator.to_string()),
                    KeyValue::new("enforce.attempt", i64::from(attempt)),
                    KeyValue::new("enforce.issue_codes", codes(issues)),
                    KeyValue::new("enforce.issue_count", issues.len() as i64),
                    KeyValue::new("enforce.repaired", repaired),
                ];
                if let Some(reason) = unavailable {
                    attributes.push(KeyValue::new("enforce.unavailable", reason.to_string()));
                }
                let mut span = self
                    .tracer
                    .span_builder(format!("validate {validator}"))
                    .with_kind(SpanKind::Internal)
                    .with_start_time(now.checked_sub(elapsed).unwrap_or(now))
                    .with_attributes(attributes)
                    .start_with_context(&self.tracer, parent);
                if let Some(reason) = unavailable {
                    span.set_status(Status::error(reason.to_string()));
                }
                span.end_with_timestamp(now);
            }
            Event::Validated { issues, .. } => {
                if let Some(attempt) = &self.state().attempt {
                    let span = attempt.span();
                    span.set_attribute(KeyValue::new("enforce.issue_codes", codes(issues)));
                    let verdict = if issues.iter().any(Issue::is_error) {
                        "rejected"
                    } else {
                        "passed"
                    };
                    span.set_attribute(KeyValue::new("enforce.attempt.status", verdict));
                }
            }
            Event::Cut { bytes, issues, .. } => {
                if let Some(attempt) = &self.state().attempt {
                    let span = attempt.span();
                    span.set_attributes([
                        KeyValue::new("enforce.issue_codes", codes(issues)),
                        KeyValue::new("enforce.attempt.status", "cut"),
                        KeyValue::new("enforce.cut_bytes", bytes as i64),
                    ]);
                }
            }
            Event::Repaired { validator } => {
                if let Some(attempt) = &self.state().attempt {
                    attempt.span().add_event(
                        "repair",
                        vec![KeyValue::new("enforce.validator", validator.to_string())],
                    );
                }
            }
            Event::Finished { status } => {
                if let Some(attempt) = self.state().attempt.take() {
                    if status == enforce_core::Status::Unavailable {
                        let span = attempt.span();
                        span.set_attribute(KeyValue::new("enforce.attempt.status", "unavailable"));
                        span.set_status(Status::error("a validator gave no verdict"));
                    }
                    attempt.span().end();
                }
            }
            _ => {}
        }
    }

    /// Records the runner's answer on the open attempt: GenAI usage, cost, or the failure.
    pub fn on_reply(&self, result: Result<&Reply, &RunnerError>) {
        let state = self.state();
        let Some(attempt) = &state.attempt else {
            return;
        };
        let span = attempt.span();
        match result {
            Ok(reply) => {
                span.set_attribute(KeyValue::new(
                    "enforce.response_bytes",
                    reply.text.len() as i64,
                ));
                if let Some(usage) = reply.usage {
                    span.set_attributes(usage_attributes(usage));
                }
                if let Some(cost) = reply.cost_usd {
                    span.set_attribute(KeyValue::new("enforce.cost_usd", cost));
                }
            }
            Err(error) => {
                span.set_attribute(KeyValue::new("enforce.attempt.status", "runner_error"));
                span.set_attribute(KeyValue::new("error.type", tag(error, "kind")));
                span.set_status(Status::error(error.to_string()));
            }
        }
    }

    /// Ends the request span with the verdict (`status` is the audit's status, or
    /// `deadline` / `internal_error` when the loop did not finish).
    pub fn finish(&self, status: &str, outcome: Option<&Outcome>) {
        let mut state = self.state();
        if state.finished {
            return;
        }
        state.finished = true;
        if let Some(attempt) = state.attempt.take() {
            // The loop was cut off (deadline, crash) in the middle of this attempt.
            attempt
                .span()
                .set_attribute(KeyValue::new("enforce.attempt.status", "cut_off"));
            attempt.span().end();
        }
        let span = self.request.span();
        span.set_attribute(KeyValue::new("enforce.status", status.to_string()));
        if let Some(outcome) = outcome {
            span.set_attributes([
                KeyValue::new("enforce.attempts", outcome.attempts.len() as i64),
                KeyValue::new("enforce.issue_codes", codes(&outcome.issues)),
                KeyValue::new("enforce.fallback_used", outcome.fallback_used),
                KeyValue::new("enforce.stop_reason", tag(&outcome.stop_reason, "reason")),
            ]);
            if let Some(usage) = outcome.usage {
                span.set_attributes(usage_attributes(usage));
            }
            if let Some(cost) = outcome.cost_usd {
                span.set_attribute(KeyValue::new("enforce.cost_usd", cost));
            }
            if let Some(error) = outcome.runner_error() {
                span.set_status(Status::error(error.to_string()));
            }
        }
        if matches!(status, "deadline" | "internal_error" | "unavailable") {
            span.set_status(Status::error(status.to_string()));
        }
        span.end();
    }
}

impl Drop for RequestTrace {
    /// A request dropped before it finished (the client went away) still ends its spans.
    fn drop(&mut self) {
        self.finish(crate::metrics::CLIENT_DISCONNECTED, None);
    }
}

fn usage_attributes(usage: enforce_core::Usage) -> [KeyValue; 2] {
    let tokens = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    [
        KeyValue::new("gen_ai.usage.input_tokens", tokens(usage.input_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", tokens(usage.output_tokens)),
    ]
}

/// The issue codes in order of appearance, each once.
fn codes(issues: &[Issue]) -> Value {
    let mut codes: Vec<StringValue> = Vec::new();
    for issue in issues {
        if !codes.iter().any(|c| c.as_str() == issue.code) {
            codes.push(issue.code.clone().into());
        }
    }
    Value::Array(Array::String(codes))
}

/// The tag a core value is audited with (`{"kind": "timeout", ...}` gives `timeout`).
fn tag(value: &impl serde::Serialize, field: &str) -> String {
    serde_json::to_value(value)
        .ok()
        .and_then(|v| v.get(field)?.as_str().map(str::to_string))
        .unwrap_or_default()
}
