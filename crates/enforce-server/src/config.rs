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

/// Per-model behaviour of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOptions {
    /// What a non-streaming client gets when a required validator gave no verdict.
    pub on_unavailable: FailureResponse,
    /// What a non-streaming client gets when the answer stayed unresolved (or was aborted by a
    /// hard-abort issue).
    pub on_unresolved: FailureResponse,
    /// Send Open WebUI status events (`{"event":{"type":"status",...}}`) in streams. Generic
    /// OpenAI clients do not understand them, so they are opt-in.
    pub status_events: bool,
}

/// One public model: the id clients send in `model`, the runner that asks the real model and the
/// enforcer that checks its answers.
#[derive(Clone)]
pub struct Model {
    /// The public model id (listed by `/v1/models`).
    pub id: String,
    /// Asks the upstream model.
    pub runner: Arc<dyn Runner>,
    /// Validates, re-asks and repairs.
    pub enforcer: Arc<Enforcer>,
    /// How failures and streams are presented.
    pub options: ModelOptions,
}

impl Model {
    /// A model with default options.
    pub fn new(id: impl Into<String>, runner: Arc<dyn Runner>, enforcer: Arc<Enforcer>) -> Self {
        Model {
            id: id.into(),
            runner,
            enforcer,
            options: ModelOptions::default(),
        }
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
            .field("validators", &self.enforcer.validators().len())
            .field("options", &self.options)
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
    fn options_parse_from_config_words() {
        let o: ModelOptions =
            serde_json::from_str(r#"{"on_unresolved":"error","status_events":true}"#).unwrap();
        assert_eq!(o.on_unresolved, FailureResponse::Error);
        assert_eq!(o.on_unavailable, FailureResponse::Return);
        assert!(o.status_events);
    }
}
