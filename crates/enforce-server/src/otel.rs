//! OpenTelemetry traces: [`Telemetry`] (the OTLP/HTTP exporter) and [`RequestTrace`] (the
//! spans of one request); and [`AuditLogs`], the audit records as OpenTelemetry log records.
//! With the `otel` feature off all three are empty types that cannot be made, so every
//! `Option` of them is `None` and the request path carries no tracing code.
//!
//! Spans of one request (names and attributes are documented in the crate README):
//!
//! ```text
//! chat_completion                      (server; enforce.status, totals)
//! ├── chat {model}                     (client; attempt 1: gen_ai.* usage, enforce.cost_usd)
//! │   ├── validate {validator}         (enforce.issue_codes)
//! │   └── validate {validator}
//! └── chat {model}                     (attempt 2, its validators, repairs of the last attempt)
//! ```

#[cfg(feature = "otel")]
mod client;
#[cfg(feature = "otel")]
mod export;
#[cfg(feature = "otel")]
mod logs;
#[cfg(feature = "otel")]
pub(crate) use export::{RequestTrace, Telemetry};
#[cfg(feature = "otel")]
pub(crate) use logs::AuditLogs;

#[cfg(not(feature = "otel"))]
pub(crate) use off::{AuditLogs, RequestTrace, Telemetry};

/// What the request span says about its request.
#[cfg_attr(not(feature = "otel"), allow(dead_code))]
pub(crate) struct RequestInfo<'a> {
    /// The route the request came in on (`/v1/chat/completions`, `/v1/responses`, ...).
    pub route: &'static str,
    /// The API surface's name (`chat`, `responses`, `messages`).
    pub surface: &'static str,
    /// The public model id.
    pub model: &'a str,
    /// The model the runner asks, when known.
    pub upstream_model: Option<&'a str>,
    /// The completion id sent to the client.
    pub request_id: &'a str,
    pub chat_id: Option<&'a str>,
    /// The profile enforced (the model's, a route's or `X-Enforce-Profile`'s), as the audit.
    pub profile: Option<&'a str>,
    pub stream: bool,
    /// The name of the key the request presented, as the audit's `key`.
    pub key: Option<&'a str>,
    /// The audit's `request_limits`.
    pub request_limits: Option<&'a serde_json::Value>,
}

#[cfg(not(feature = "otel"))]
mod off {
    //! Without the `otel` feature: types without values.

    use super::RequestInfo;
    use crate::config::OtlpConfig;
    use crate::error::ServerError;
    use axum::http::HeaderMap;
    use enforce_core::{Event, Outcome, Reply, RunnerError};
    use std::sync::Arc;

    /// Never made: tracing was not built in.
    pub(crate) enum Telemetry {}

    /// Never made: tracing was not built in.
    pub(crate) enum RequestTrace {}

    /// Never made: tracing was not built in.
    #[derive(Clone)]
    pub(crate) enum AuditLogs {}

    impl AuditLogs {
        pub fn emit(&self, _: &str) {
            match *self {}
        }
    }

    impl Telemetry {
        pub fn start(_: &OtlpConfig) -> Result<Self, ServerError> {
            Err(ServerError::TracingNotBuilt)
        }
        pub fn shutdown(&self) {
            match *self {}
        }
        pub fn audit_logs(&self) -> Option<AuditLogs> {
            match *self {}
        }
        pub fn request(&self, _: &HeaderMap, _: RequestInfo<'_>) -> Arc<RequestTrace> {
            match *self {}
        }
    }

    impl RequestTrace {
        pub fn on_event(&self, _: &Event<'_>) {
            match *self {}
        }
        pub fn on_reply(&self, _: Result<&Reply, &RunnerError>) {
            match *self {}
        }
        pub fn finish(&self, _: &str, _: Option<&Outcome>) {
            match *self {}
        }
    }
}
