//! The audit records as OpenTelemetry log records over OTLP/HTTP (feature `otel`,
//! `server.otlp.logs`).
//!
//! Each audit line becomes one log record: its body is the line itself (the same JSON as in
//! `audit_log`, so a collector can parse it like the file), its attributes repeat the fields
//! operators filter on (`enforce.request_id`, `enforce.status`, `enforce.model`,
//! `enforce.profile`, `enforce.key`, `enforce.chat_id`, `enforce.reason`), and its severity
//! follows the status: INFO when the answer met its contract, WARN when it did not or the
//! request was refused, ERROR when a validator could not give a verdict.

use super::client::RuntimeClient;
use crate::error::ServerError;
use opentelemetry::logs::{AnyValue, LogRecord as _, Logger as _, LoggerProvider as _, Severity};
use opentelemetry::InstrumentationScope;
use opentelemetry_otlp::{LogExporter, Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::logs::{SdkLogger, SdkLoggerProvider};
use opentelemetry_sdk::Resource;
use serde::Deserialize;
use std::collections::HashMap;
use std::time::{Duration, SystemTime};

/// The log exporter of the audit: a batch log processor on its own thread, posting protobuf
/// to the receiver. Cloned into the audit log, which emits every line it is given.
#[derive(Clone)]
pub(crate) struct AuditLogs {
    provider: SdkLoggerProvider,
    logger: SdkLogger,
}

/// The fields of an audit line that become attributes: both record shapes (an enforcement,
/// a `refused` request) have them or leave them out.
#[derive(Deserialize)]
struct Fields {
    request_id: Option<String>,
    status: Option<String>,
    model: Option<String>,
    profile: Option<String>,
    key: Option<String>,
    chat_id: Option<String>,
    reason: Option<String>,
}

impl AuditLogs {
    /// Starts the exporter posting to `url` with the traces' HTTP client and headers.
    pub(super) fn start(
        url: &str,
        client: RuntimeClient,
        headers: HashMap<String, String>,
        resource: Resource,
        scope: InstrumentationScope,
        timeout: Duration,
    ) -> Result<Self, ServerError> {
        let exporter = LogExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_endpoint(url)
            .with_timeout(timeout)
            .with_headers(headers)
            .build()
            .map_err(|e| {
                ServerError::Tracing(format!("cannot build the OTLP log exporter ({url}): {e}"))
            })?;
        let provider = SdkLoggerProvider::builder()
            .with_batch_exporter(exporter)
            .with_resource(resource)
            .build();
        let logger = provider.logger_with_scope(scope);
        Ok(AuditLogs { provider, logger })
    }

    /// Queues one audit line as a log record (exported in batches, off the request path).
    pub fn emit(&self, line: &str) {
        let mut record = self.logger.create_log_record();
        record.set_event_name("enforce.audit");
        record.set_timestamp(SystemTime::now());
        record.set_body(AnyValue::String(line.to_string().into()));
        // A line the proxy wrote always parses; were it not to, the body still carries it.
        if let Ok(fields) = serde_json::from_str::<Fields>(line) {
            let severity = severity(fields.status.as_deref());
            record.set_severity_number(severity);
            record.set_severity_text(severity.name());
            for (key, value) in [
                ("enforce.request_id", fields.request_id),
                ("enforce.status", fields.status),
                ("enforce.model", fields.model),
                ("enforce.profile", fields.profile),
                ("enforce.key", fields.key),
                ("enforce.chat_id", fields.chat_id),
                ("enforce.reason", fields.reason),
            ] {
                if let Some(value) = value {
                    record.add_attribute(key, value);
                }
            }
        }
        self.logger.emit(record);
    }

    /// Exports what is queued and stops. Blocks, as [`Telemetry::shutdown`](super::Telemetry).
    pub fn shutdown(&self) {
        if let Err(e) = self.provider.shutdown() {
            tracing::warn!(error = %e, "OpenTelemetry log export did not shut down cleanly");
        }
    }
}

/// INFO for an answer that met its contract, ERROR for a validator without a verdict, WARN
/// for the rest (unresolved, aborted, refused).
fn severity(status: Option<&str>) -> Severity {
    match status {
        Some("passed" | "repaired") => Severity::Info,
        Some("unavailable") => Severity::Error,
        _ => Severity::Warn,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severity_follows_the_status() {
        assert_eq!(severity(Some("passed")), Severity::Info);
        assert_eq!(severity(Some("repaired")), Severity::Info);
        assert_eq!(severity(Some("unresolved")), Severity::Warn);
        assert_eq!(severity(Some("aborted")), Severity::Warn);
        assert_eq!(severity(Some("refused")), Severity::Warn);
        assert_eq!(severity(Some("unavailable")), Severity::Error);
        assert_eq!(severity(None), Severity::Warn);
    }
}
