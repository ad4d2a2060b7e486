//! OpenTelemetry export settings (traces, and the audit as logs): the `server.otlp:` section
//! ([`OtlpSection`]) and what it resolves to with the standard `OTEL_*` variables
//! ([`OtlpConfig`]).

use super::SectionError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Environment variable with the base URL of an OTLP/HTTP receiver (`/v1/traces` is appended).
pub const OTLP_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
/// Environment variable with the full URL spans are posted to (used as it is).
pub const OTLP_TRACES_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
/// Environment variable with the full URL log records are posted to (used as it is), when
/// `server.otlp.logs` is on.
pub const OTLP_LOGS_ENDPOINT_ENV: &str = "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT";
/// Environment variable naming the service in exported spans.
pub const OTEL_SERVICE_NAME_ENV: &str = "OTEL_SERVICE_NAME";
/// Environment variable that turns OpenTelemetry off when `true`.
pub const OTEL_SDK_DISABLED_ENV: &str = "OTEL_SDK_DISABLED";
/// `service.name` of exported spans when neither the file nor `OTEL_SERVICE_NAME` names one.
pub const DEFAULT_SERVICE_NAME: &str = "enforce";
/// Where spans go when tracing is on and no endpoint is given (the OTLP/HTTP default).
pub const DEFAULT_OTLP_TRACES_URL: &str = "http://localhost:4318/v1/traces";
/// Where log records go when `server.otlp.logs` is on and no endpoint is given.
pub const DEFAULT_OTLP_LOGS_URL: &str = "http://localhost:4318/v1/logs";
const TRACES_PATH: &str = "/v1/traces";
const LOGS_PATH: &str = "/v1/logs";

/// Export of OpenTelemetry traces over OTLP/HTTP (protobuf), resolved from `server.otlp` and
/// the standard `OTEL_*` variables. Headers from `OTEL_EXPORTER_OTLP_HEADERS` (and
/// `OTEL_EXPORTER_OTLP_TRACES_HEADERS`) are added by the exporter at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    /// The URL spans are posted to, e.g. `http://localhost:4318/v1/traces`.
    pub traces_url: String,
    /// Extra HTTP headers sent with each export.
    pub headers: BTreeMap<String, String>,
    /// `service.name` of the spans and log records.
    pub service_name: String,
    /// The URL audit records are posted to as OpenTelemetry log records, e.g.
    /// `http://localhost:4318/v1/logs`; `None` sends none.
    pub logs_url: Option<String>,
}

impl Default for OtlpConfig {
    fn default() -> Self {
        OtlpConfig {
            traces_url: DEFAULT_OTLP_TRACES_URL.to_string(),
            headers: BTreeMap::new(),
            service_name: DEFAULT_SERVICE_NAME.to_string(),
            logs_url: None,
        }
    }
}

impl OtlpConfig {
    /// Export to the receiver at `endpoint` (a base URL such as `http://localhost:4318`;
    /// `/v1/traces` is appended unless the path already ends with it).
    pub fn to_endpoint(endpoint: &str) -> Result<Self, SectionError> {
        Ok(OtlpConfig {
            traces_url: signal_url(endpoint, Some(TRACES_PATH)).map_err(bad("otlp.endpoint"))?,
            ..OtlpConfig::default()
        })
    }

    /// Also sends each audit record as a log record to the same receiver as the spans
    /// (`/v1/logs` beside their `/v1/traces`).
    pub fn with_audit_logs(mut self) -> Self {
        let base = self
            .traces_url
            .strip_suffix(TRACES_PATH)
            .unwrap_or(&self.traces_url);
        self.logs_url = Some(format!("{base}{LOGS_PATH}"));
        self
    }

    /// Resolves the export from the `server.otlp` section (if any) and variables read through
    /// `var`: the file wins, the variables fill what it leaves out. Tracing is on when the
    /// section is present or `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`
    /// is set, and off whenever `OTEL_SDK_DISABLED=true`.
    pub fn resolve(
        section: Option<&OtlpSection>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Option<Self>, SectionError> {
        let var = |name: &str| var(name).filter(|v| !v.trim().is_empty());
        if var(OTEL_SDK_DISABLED_ENV).is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let traces_env = var(OTLP_TRACES_ENDPOINT_ENV);
        let base_env = var(OTLP_ENDPOINT_ENV);
        if section.is_none() && traces_env.is_none() && base_env.is_none() {
            return Ok(None);
        }
        let traces_url = match (
            section.and_then(|s| s.endpoint.as_deref()),
            traces_env,
            base_env.as_deref(),
        ) {
            (Some(endpoint), _, _) => {
                signal_url(endpoint, Some(TRACES_PATH)).map_err(bad("otlp.endpoint"))?
            }
            (None, Some(url), _) => {
                signal_url(&url, None).map_err(bad(FROM_TRACES_ENDPOINT_ENV))?
            }
            (None, None, Some(base)) => {
                signal_url(base, Some(TRACES_PATH)).map_err(bad(FROM_ENDPOINT_ENV))?
            }
            (None, None, None) => DEFAULT_OTLP_TRACES_URL.to_string(),
        };
        let logs_url = match section.filter(|s| s.logs) {
            None => None,
            Some(section) => Some(logs_url(section, var(OTLP_LOGS_ENDPOINT_ENV), base_env)?),
        };
        let service_name = section
            .and_then(|s| s.service_name.clone())
            .or_else(|| var(OTEL_SERVICE_NAME_ENV))
            .unwrap_or_else(|| DEFAULT_SERVICE_NAME.to_string());
        Ok(Some(OtlpConfig {
            traces_url,
            headers: section.map(|s| s.headers.clone()).unwrap_or_default(),
            service_name,
            logs_url,
        }))
    }
}

/// Where log records go: beside the file's endpoint, else the logs variable as it is, else
/// beside the base variable, else the OTLP/HTTP default.
fn logs_url(
    section: &OtlpSection,
    logs_env: Option<String>,
    base_env: Option<String>,
) -> Result<String, SectionError> {
    Ok(match (section.endpoint.as_deref(), logs_env, base_env) {
        (Some(endpoint), _, _) => {
            let base = endpoint.trim().trim_end_matches('/');
            let base = base.strip_suffix(TRACES_PATH).unwrap_or(base);
            signal_url(base, Some(LOGS_PATH)).map_err(bad("otlp.endpoint"))?
        }
        (None, Some(url), _) => signal_url(&url, None).map_err(bad(FROM_LOGS_ENDPOINT_ENV))?,
        (None, None, Some(base)) => {
            signal_url(&base, Some(LOGS_PATH)).map_err(bad(FROM_ENDPOINT_ENV))?
        }
        (None, None, None) => DEFAULT_OTLP_LOGS_URL.to_string(),
    })
}

/// Names the key of a bad URL in a [`SectionError`].
fn bad(field: &'static str) -> impl Fn(String) -> SectionError {
    move |message| SectionError {
        field: field.into(),
        message,
    }
}

/// [`SectionError::field`] of a bad URL in the variables.
const FROM_TRACES_ENDPOINT_ENV: &str = "otlp.endpoint (from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)";
const FROM_ENDPOINT_ENV: &str = "otlp.endpoint (from OTEL_EXPORTER_OTLP_ENDPOINT)";
const FROM_LOGS_ENDPOINT_ENV: &str = "otlp.endpoint (from OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)";

/// Checks an OTLP/HTTP URL and, for a base URL, appends the signal's `path` (`/v1/traces`,
/// `/v1/logs`) unless it already ends with it.
fn signal_url(url: &str, path: Option<&str>) -> Result<String, String> {
    let example = "such as http://localhost:4318";
    let uri: axum::http::Uri = url
        .trim()
        .parse()
        .map_err(|e| format!("`{url}` is not a URL ({e}); give one {example}"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!(
            "`{url}` is not an http:// or https:// URL with a host; give one {example}"
        ));
    }
    if uri.query().is_some() {
        return Err(format!("`{url}` has a query; give a plain URL {example}"));
    }
    let url = url.trim().trim_end_matches('/');
    Ok(match path {
        Some(path) if !url.ends_with(path) => format!("{url}{path}"),
        _ => url.to_string(),
    })
}

/// The `server.otlp:` section: OpenTelemetry traces (and, with `logs`, the audit records as
/// log records) over OTLP/HTTP.
///
/// ```yaml
/// server:
///   otlp:
///     endpoint: http://localhost:4318   # spans go to http://localhost:4318/v1/traces
///     headers: { x-api-key: change-me }
///     service_name: enforce-proxy
///     logs: true                        # audit records to http://localhost:4318/v1/logs
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OtlpSection {
    /// Base URL of the OTLP/HTTP receiver (a collector, Jaeger, Tempo, ...), e.g.
    /// `http://localhost:4318`; spans are posted to `{endpoint}/v1/traces`. Default:
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, else `OTEL_EXPORTER_OTLP_ENDPOINT`, else
    /// `http://localhost:4318`.
    pub endpoint: Option<String>,
    /// HTTP headers sent with each export (e.g. a hosted collector's key);
    /// `OTEL_EXPORTER_OTLP_HEADERS` adds to them.
    pub headers: BTreeMap<String, String>,
    /// `service.name` of the spans. Default: `OTEL_SERVICE_NAME`, else `enforce`.
    pub service_name: Option<String>,
    /// Also send every audit record (one per request, as written to `audit_log`) as an
    /// OpenTelemetry log record, to `{endpoint}/v1/logs`; without `endpoint`, to
    /// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, else `{OTEL_EXPORTER_OTLP_ENDPOINT}/v1/logs`, else
    /// `http://localhost:4318/v1/logs`. Default false.
    pub logs: bool,
}

#[cfg(test)]
mod tests {
    use super::super::tests::vars;
    use super::super::ServerSection;
    use super::*;

    #[test]
    fn otlp_is_off_unless_configured_or_a_variable_points_somewhere() {
        assert_eq!(OtlpConfig::resolve(None, vars(&[])), Ok(None));
        assert_eq!(
            OtlpConfig::resolve(None, vars(&[(OTEL_SERVICE_NAME_ENV, "x")])),
            Ok(None)
        );
        let on = OtlpConfig::resolve(None, vars(&[(OTLP_ENDPOINT_ENV, "http://collector:4318/")]))
            .unwrap()
            .unwrap();
        assert_eq!(on.traces_url, "http://collector:4318/v1/traces");
        assert_eq!(on.service_name, DEFAULT_SERVICE_NAME);
        let disabled = vars(&[
            (OTLP_ENDPOINT_ENV, "http://collector:4318"),
            (OTEL_SDK_DISABLED_ENV, "TRUE"),
        ]);
        assert_eq!(OtlpConfig::resolve(None, disabled), Ok(None));
    }

    #[test]
    fn otlp_file_wins_and_variables_fill_in() {
        let env = vars(&[
            (OTLP_ENDPOINT_ENV, "http://base:4318"),
            (OTLP_TRACES_ENDPOINT_ENV, "http://traces:4318/custom/path"),
            (OTEL_SERVICE_NAME_ENV, "from-env"),
        ]);
        let empty = OtlpSection::default();
        let c = OtlpConfig::resolve(Some(&empty), &env).unwrap().unwrap();
        // The signal's own variable is used as it is; the base one gets /v1/traces.
        assert_eq!(c.traces_url, "http://traces:4318/custom/path");
        assert_eq!(c.service_name, "from-env");
        let section: OtlpSection = serde_json::from_str(
            r#"{"endpoint": "https://otel.example:4318", "service_name": "proxy",
                "headers": {"x-api-key": "k"}}"#,
        )
        .unwrap();
        let c = OtlpConfig::resolve(Some(&section), &env).unwrap().unwrap();
        assert_eq!(c.traces_url, "https://otel.example:4318/v1/traces");
        assert_eq!(c.service_name, "proxy");
        assert_eq!(c.headers.get("x-api-key").map(String::as_str), Some("k"));
        let c = OtlpConfig::resolve(None, vars(&[(OTLP_ENDPOINT_ENV, "http://b:1/v1/traces")]));
        assert_eq!(c.unwrap().unwrap().traces_url, "http://b:1/v1/traces");
    }

    #[test]
    fn audit_logs_are_off_unless_asked_and_go_beside_the_traces() {
        let base = vars(&[(OTLP_ENDPOINT_ENV, "http://base:4318")]);
        let on = OtlpConfig::resolve(None, &base).unwrap().unwrap();
        assert_eq!(on.logs_url, None);
        let logs = OtlpSection {
            logs: true,
            ..OtlpSection::default()
        };
        let c = OtlpConfig::resolve(Some(&logs), &base).unwrap().unwrap();
        assert_eq!(c.logs_url.as_deref(), Some("http://base:4318/v1/logs"));
        let c = OtlpConfig::resolve(Some(&logs), vars(&[]))
            .unwrap()
            .unwrap();
        assert_eq!(c.logs_url.as_deref(), Some(DEFAULT_OTLP_LOGS_URL));
        let own = vars(&[
            (OTLP_ENDPOINT_ENV, "http://base:4318"),
            (OTLP_LOGS_ENDPOINT_ENV, "http://logs:4318/custom"),
        ]);
        let c = OtlpConfig::resolve(Some(&logs), own).unwrap().unwrap();
        assert_eq!(c.logs_url.as_deref(), Some("http://logs:4318/custom"));
        for endpoint in ["http://file:4318/", "http://file:4318/v1/traces"] {
            let file = OtlpSection {
                endpoint: Some(endpoint.into()),
                ..logs.clone()
            };
            let c = OtlpConfig::resolve(Some(&file), &base).unwrap().unwrap();
            assert_eq!(c.logs_url.as_deref(), Some("http://file:4318/v1/logs"));
            assert_eq!(c.traces_url, "http://file:4318/v1/traces");
        }
        let c = OtlpConfig::to_endpoint("http://r:1")
            .unwrap()
            .with_audit_logs();
        assert_eq!(c.logs_url.as_deref(), Some("http://r:1/v1/logs"));
        let err = OtlpConfig::resolve(Some(&logs), vars(&[(OTLP_LOGS_ENDPOINT_ENV, "logs")]))
            .unwrap_err();
        assert!(err
            .to_string()
            .starts_with("server.otlp.endpoint (from OTEL_EXPORTER_OTLP_LOGS_ENDPOINT)"));
    }

    #[test]
    fn otlp_endpoint_errors_name_the_key_and_the_fix() {
        for bad in [
            "localhost:4318",
            "ftp://host:4318",
            "http://",
            "not a url",
            "http://h:1/?a=b",
        ] {
            let section: ServerSection =
                serde_json::from_value(serde_json::json!({"otlp": {"endpoint": bad}})).unwrap();
            let err = section.to_config().unwrap_err();
            assert_eq!(err.field, "otlp.endpoint", "{bad}");
            assert!(err.message.contains("http://localhost:4318"), "{err}");
        }
        let err = OtlpConfig::resolve(None, vars(&[(OTLP_TRACES_ENDPOINT_ENV, "collector")]))
            .unwrap_err();
        assert!(err.to_string().starts_with(
            "server.otlp.endpoint (from OTEL_EXPORTER_OTLP_TRACES_ENDPOINT): `collector`"
        ));
        let ok: ServerSection =
            serde_json::from_str(r#"{"otlp": {"endpoint": "http://127.0.0.1:4318"}}"#).unwrap();
        let otlp = ok.to_config().unwrap().otlp.unwrap();
        assert_eq!(otlp.traces_url, "http://127.0.0.1:4318/v1/traces");
        assert_eq!(ServerSection::default().to_config().unwrap().otlp, None);
    }
}
