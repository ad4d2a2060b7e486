//! What the server is given: [`ServerConfig`], one [`Model`] per public model id, and the
//! per-model [`ModelOptions`].

use enforce_core::{Enforcer, Runner};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Environment variable holding comma-separated bearer keys, read by
/// [`ServerConfig::with_env_api_keys`].
pub const API_KEYS_ENV: &str = "ENFORCE_API_KEYS";

/// How a failed enforcement (unresolved, aborted by a validator, or a validator unavailable)
/// reaches a non-streaming client.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureResponse {
    /// A normal `chat.completion` holding the last answer, its status in the `enforcement`
    /// object and the `X-Enforce-Status` header.
    #[default]
    Return,
    /// An OpenAI error: 422 for an unresolved answer, 503 for an unavailable validator.
    Error,
}

/// What a streaming client sees while the loop works.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StreamMode {
    /// Nothing before the answer has passed (keep-alives and status events only): no
    /// unchecked text is ever shown.
    #[default]
    Hold,
    /// Every attempt streams live as `delta.reasoning_content` (chat UIs show it as a
    /// collapsible "Thinking…" block); only the checked answer is sent as `delta.content`.
    Draft,
}

/// Per-model behaviour of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOptions {
    /// What a client gets when a required validator gave no verdict: the answer with its status
    /// (`return`), or an error. Streams too: the answer goes out with `enforcement.status`.
    pub on_unavailable: FailureResponse,
    /// What a client gets when the answer stayed unresolved (or was aborted by a hard-abort
    /// issue).
    pub on_unresolved: FailureResponse,
    /// Send Open WebUI status events (`{"event":{"type":"status",...}}`) in streams. Generic
    /// OpenAI clients do not understand them, so they are opt-in.
    pub status_events: bool,
    /// Check the tool calls of every answer against the `tools` its request declares
    /// (`UNKNOWN_TOOL`, `INVALID_TOOL_ARGUMENTS`) and re-ask when they fail (default on).
    pub check_tool_calls: bool,
    /// Remove the `<!-- STEP: x -->` marker from what the client receives (chat UIs render it as
    /// text). The step is still recorded, and the marker is put back on assistant turns the
    /// client sends back, so the model keeps seeing its own markers.
    pub hide_step_marker: bool,
    /// What a streaming client sees while the loop works: `hold` (default) or `draft`.
    pub stream_mode: StreamMode,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            on_unavailable: FailureResponse::default(),
            on_unresolved: FailureResponse::default(),
            status_events: false,
            check_tool_calls: true,
            hide_step_marker: false,
            stream_mode: StreamMode::Hold,
        }
    }
}

/// One public model: the id clients send in `model`, the runner that asks the real model and the
/// enforcer that checks its answers.
#[derive(Clone)]
pub struct Model {
    /// The public model id (listed by `/v1/models`).
    pub id: String,
    /// The name of the profile its enforcer enforces, reported in `X-Enforce-Profile` and the
    /// audit (empty when unnamed).
    pub profile: String,
    /// Asks the upstream model.
    pub runner: Arc<dyn Runner>,
    /// Validates, re-asks and repairs.
    pub enforcer: Arc<Enforcer>,
    /// How failures and streams are presented.
    pub options: ModelOptions,
    /// The kind of runner (`claude`, `openai`, `command`), for the audit log.
    pub runner_kind: Option<String>,
}

impl Model {
    /// A model with default options.
    pub fn new(id: impl Into<String>, runner: Arc<dyn Runner>, enforcer: Arc<Enforcer>) -> Self {
        Model {
            id: id.into(),
            profile: String::new(),
            runner,
            enforcer,
            options: ModelOptions::default(),
            runner_kind: None,
        }
    }

    /// Names the profile, builder style.
    pub fn with_profile(mut self, name: impl Into<String>) -> Self {
        self.profile = name.into();
        self
    }

    /// Names the kind of runner (`claude`, `openai`, `command`) for the audit, builder style.
    pub fn with_runner_kind(mut self, kind: impl Into<String>) -> Self {
        self.runner_kind = Some(kind.into());
        self
    }

    /// Replaces the options, builder style.
    pub fn with_options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("id", &self.id)
            .field("profile", &self.profile)
            .field("validators", &self.enforcer.validators().len())
            .field("options", &self.options)
            .field("profile", &self.profile)
            .field("runner_kind", &self.runner_kind)
            .finish_non_exhaustive()
    }
}

/// When the audit log is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// Leave it to the operating system (lines are still written, and flushed at shutdown).
    #[default]
    Never,
    /// After every line: no record is lost on a crash, at the cost of one fsync per request.
    Always,
    /// At most once per interval, when lines were written since the last sync.
    Interval(Duration),
}

/// Server-wide settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted bearer keys; empty means no authentication.
    pub api_keys: Vec<String>,
    /// Largest accepted request body in bytes (default 10 MB).
    pub max_body_bytes: usize,
    /// Largest JSON of facts a request may carry, per source (`enforce.context` in the body,
    /// the `X-Enforce-Context` header), in bytes (default 16 KiB).
    pub max_context_bytes: usize,
    /// Most enforcements running at once; beyond it requests get 429 with `Retry-After`
    /// (default 64).
    pub max_concurrent: usize,
    /// Seconds sent in `Retry-After` with a 429 (default 1).
    pub retry_after_secs: u64,
    /// Deadline of one request's enforcement, all attempts included (default 300 s).
    pub request_timeout: Duration,
    /// Interval of `: keepalive` comments while a stream waits for a validated answer
    /// (default 5 s). Comments are also sent at every re-ask.
    pub keepalive_interval: Duration,
    /// Directory holding one sub-directory per chat with its `status.json`; `None` keeps
    /// sessions in memory only.
    pub session_dir: Option<PathBuf>,
    /// File the audit log (one JSON line per enforcement) is appended to; `None` disables it.
    pub audit_log: Option<PathBuf>,
    /// When the audit log is synced to disk.
    pub audit_fsync: FsyncPolicy,
    /// How long a graceful shutdown waits for in-flight requests (default 30 s).
    pub shutdown_grace: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_keys: Vec::new(),
            max_body_bytes: 10 * 1024 * 1024,
            max_context_bytes: 16 * 1024,
            max_concurrent: 64,
            retry_after_secs: 1,
            request_timeout: Duration::from_secs(300),
            keepalive_interval: Duration::from_secs(5),
            session_dir: None,
            audit_log: None,
            audit_fsync: FsyncPolicy::Never,
            shutdown_grace: Duration::from_secs(30),
        }
    }
}

impl ServerConfig {
    /// Adds the keys from [`API_KEYS_ENV`] (comma-separated, blanks ignored) to `api_keys`.
    pub fn with_env_api_keys(mut self) -> Self {
        if let Ok(value) = std::env::var(API_KEYS_ENV) {
            self.api_keys.extend(parse_key_list(&value));
        }
        self
    }
}

/// The `server:` section of a config file; every field optional. Durations in seconds.
///
/// ```
/// let section: enforce_server::ServerSection = serde_json::from_str(
///     r#"{"listen": "127.0.0.1:9000", "max_concurrent": 8, "audit_fsync": "interval",
///         "audit_fsync_interval_secs": 2, "session_dir": "sessions"}"#).unwrap();
/// let config = section.to_config().unwrap();
/// assert_eq!(config.max_concurrent, 8);
/// assert_eq!(section.listen.as_deref(), Some("127.0.0.1:9000"));
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address to listen on (the command line's `--listen` wins).
    pub listen: Option<String>,
    /// Accepted bearer keys (added to `ENFORCE_API_KEYS`).
    pub api_keys: Vec<String>,
    /// Largest request body in bytes.
    pub max_body_bytes: Option<usize>,
    /// Largest JSON of facts per request source (`enforce.context`, `X-Enforce-Context`).
    pub max_context_bytes: Option<usize>,
    /// Most enforcements at once.
    pub max_concurrent: Option<usize>,
    /// `Retry-After` seconds with a 429.
    pub retry_after_secs: Option<u64>,
    /// Deadline of one request.
    pub request_timeout_secs: Option<f64>,
    /// Interval of `: keepalive` comments.
    pub keepalive_secs: Option<f64>,
    /// Directory of per-chat `status.json` files.
    pub session_dir: Option<PathBuf>,
    /// Audit log file.
    pub audit_log: Option<PathBuf>,
    /// `never`, `always` or `interval`.
    #[cfg_attr(
        feature = "config-schema",
        schemars(extend("enum" = ["never", "always", "interval", null]))
    )]
    pub audit_fsync: Option<String>,
    /// Interval for `audit_fsync: interval` (default 1 s).
    pub audit_fsync_interval_secs: Option<f64>,
    /// Longest wait for in-flight requests at shutdown.
    pub shutdown_grace_secs: Option<f64>,
}

/// A `server:` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server.{field}: {message}")]
pub struct SectionError {
    /// The field.
    pub field: &'static str,
    /// What is wrong.
    pub message: String,
}

fn seconds(field: &'static str, value: Option<f64>) -> Result<Option<Duration>, SectionError> {
    value
        .map(|v| {
            Duration::try_from_secs_f64(v).map_err(|_| SectionError {
                field,
                message: format!("must be a non-negative number of seconds, got {v}"),
            })
        })
        .transpose()
}

impl ServerSection {
    /// The settings, on top of the defaults.
    pub fn to_config(&self) -> Result<ServerConfig, SectionError> {
        let mut c = ServerConfig {
            api_keys: self.api_keys.clone(),
            session_dir: self.session_dir.clone(),
            audit_log: self.audit_log.clone(),
            ..ServerConfig::default()
        };
        if let Some(v) = self.max_body_bytes {
            c.max_body_bytes = v;
        }
        if let Some(v) = self.max_context_bytes {
            c.max_context_bytes = v;
        }
        if let Some(v) = self.max_concurrent {
            if v == 0 {
                return Err(SectionError {
                    field: "max_concurrent",
                    message: "must be at least 1".into(),
                });
            }
            c.max_concurrent = v;
        }
        if let Some(v) = self.retry_after_secs {
            c.retry_after_secs = v;
        }
        if let Some(d) = seconds("request_timeout_secs", self.request_timeout_secs)? {
            c.request_timeout = d;
        }
        if let Some(d) = seconds("keepalive_secs", self.keepalive_secs)? {
            if d.is_zero() {
                return Err(SectionError {
                    field: "keepalive_secs",
                    message: "must be more than 0".into(),
                });
            }
            c.keepalive_interval = d;
        }
        if let Some(d) = seconds("shutdown_grace_secs", self.shutdown_grace_secs)? {
            c.shutdown_grace = d;
        }
        c.audit_fsync = self.fsync_policy()?;
        Ok(c)
    }

    /// `audit_fsync` (with `audit_fsync_interval_secs`, default 1 s) as a policy; `never`
    /// when not given. `enforce run --audit` reads it too, so both writers sync alike.
    pub fn fsync_policy(&self) -> Result<FsyncPolicy, SectionError> {
        let every = seconds("audit_fsync_interval_secs", self.audit_fsync_interval_secs)?
            .unwrap_or(Duration::from_secs(1));
        match self.audit_fsync.as_deref() {
            None | Some("never") => Ok(FsyncPolicy::Never),
            Some("always") => Ok(FsyncPolicy::Always),
            Some("interval") => Ok(FsyncPolicy::Interval(every)),
            Some(other) => Err(SectionError {
                field: "audit_fsync",
                message: format!("must be never, always or interval, got `{other}`"),
            }),
        }
    }
}

/// Splits a comma-separated key list, trimming blanks and dropping empty entries.
pub fn parse_key_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_list_ignores_blanks() {
        assert_eq!(parse_key_list(" a, ,b ,"), vec!["a", "b"]);
    }

    #[test]
    fn section_rejects_bad_values() {
        let bad: ServerSection = serde_json::from_str(r#"{"audit_fsync":"sometimes"}"#).unwrap();
        assert_eq!(bad.to_config().unwrap_err().field, "audit_fsync");
        let bad: ServerSection = serde_json::from_str(r#"{"request_timeout_secs":-1}"#).unwrap();
        assert!(bad.to_config().is_err());
        assert!(serde_json::from_str::<ServerSection>(r#"{"nope":1}"#).is_err());
        let ok = ServerSection::default().to_config().unwrap();
        assert_eq!(ok.max_body_bytes, 10 * 1024 * 1024);
    }

    #[test]
    fn options_parse_from_config_words() {
        let o: ModelOptions =
            serde_json::from_str(r#"{"on_unresolved":"error","status_events":true}"#).unwrap();
        assert_eq!(o.on_unresolved, FailureResponse::Error);
        assert_eq!(o.on_unavailable, FailureResponse::Return);
        assert!(o.status_events);
    }
}
