//! Runner configuration as it appears in config files: [`RunnerConfig`].

use crate::{ClaudeConfig, ClaudeRunner, CommandConfig, CommandRunner, OpenAiConfig, OpenAiRunner};
use enforce_core::Runner;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// A runner configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// A duration is negative, not a number, or too large.
    #[error("`{field}` must be a non-negative number of seconds, got {value}")]
    InvalidDuration {
        /// The config field.
        field: &'static str,
        /// The value as written.
        value: String,
    },
    /// A required field is empty.
    #[error("`{field}` must not be empty")]
    Missing {
        /// The config field.
        field: &'static str,
    },
    /// The base URL is not an `http://` or `https://` URL.
    #[error("`base_url` must start with http:// or https://, got `{0}`")]
    InvalidBaseUrl(String),
    /// `https://` was asked for but the crate was built without the `rustls` feature.
    #[error(
        "`base_url` {0} needs HTTPS, but enforce-runner was built without the `rustls` feature"
    )]
    TlsUnavailable(String),
    /// The variable named by `api_key_env` is not set.
    #[error("the API key variable `{0}` is not set")]
    MissingApiKeyEnv(String),
    /// The HTTP client could not be built.
    #[error("cannot build the HTTP client: {0}")]
    HttpClient(String),
}

/// A duration in seconds from a config file, checked.
pub(crate) fn duration_from_secs(field: &'static str, secs: f64) -> Result<Duration, ConfigError> {
    Duration::try_from_secs_f64(secs).map_err(|_| ConfigError::InvalidDuration {
        field,
        value: secs.to_string(),
    })
}

/// Which runner to build, and how; tagged by `type` in config files.
///
/// ```
/// use enforce_runner::RunnerConfig;
///
/// let yaml_as_json = r#"{"type": "openai", "base_url": "http://127.0.0.1:11434/v1",
///                        "model": "llama3.2"}"#;
/// let config: RunnerConfig = serde_json::from_str(yaml_as_json).unwrap();
/// assert_eq!(config.kind(), "openai");
/// let runner = config.build().unwrap();
/// # let _ = runner;
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum RunnerConfig {
    /// The Claude Code CLI.
    Claude(ClaudeConfig),
    /// An OpenAI-compatible HTTP server (OpenAI, Ollama, vLLM, llama.cpp, ...).
    #[serde(rename = "openai")]
    OpenAi(OpenAiConfig),
    /// Any command: prompt on stdin, reply on stdout.
    Command(CommandConfig),
}

impl RunnerConfig {
    /// `claude`, `openai` or `command`.
    pub fn kind(&self) -> &'static str {
        match self {
            RunnerConfig::Claude(_) => "claude",
            RunnerConfig::OpenAi(_) => "openai",
            RunnerConfig::Command(_) => "command",
        }
    }

    /// Builds the runner.
    pub fn build(&self) -> Result<Box<dyn Runner>, ConfigError> {
        Ok(match self {
            RunnerConfig::Claude(c) => Box::new(ClaudeRunner::new(c.clone())?),
            RunnerConfig::OpenAi(c) => Box::new(OpenAiRunner::new(c.clone())?),
            RunnerConfig::Command(c) => Box::new(CommandRunner::new(c.clone())?),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_parses_and_builds() {
        for (text, kind) in [
            (r#"{"type":"claude","model":"sonnet"}"#, "claude"),
            (
                r#"{"type":"openai","base_url":"http://127.0.0.1:1/v1","model":"m"}"#,
                "openai",
            ),
            (r#"{"type":"command","program":"cat"}"#, "command"),
        ] {
            let c: RunnerConfig = serde_json::from_str(text).unwrap();
            assert_eq!(c.kind(), kind);
            assert!(c.build().is_ok(), "{kind}");
        }
    }

    #[test]
    fn bad_values_are_config_errors() {
        let c: RunnerConfig =
            serde_json::from_str(r#"{"type":"claude","timeout_secs":-1}"#).unwrap();
        assert!(matches!(
            c.build().err(),
            Some(ConfigError::InvalidDuration { .. })
        ));
        let c: RunnerConfig = serde_json::from_str(r#"{"type":"command","program":""}"#).unwrap();
        assert!(matches!(c.build().err(), Some(ConfigError::Missing { .. })));
        let c: RunnerConfig =
            serde_json::from_str(r#"{"type":"openai","base_url":"ftp://x","model":"m"}"#).unwrap();
        assert!(matches!(
            c.build().err(),
            Some(ConfigError::InvalidBaseUrl(_))
        ));
        assert!(serde_json::from_str::<RunnerConfig>(r#"{"type":"claude","nope":1}"#).is_err());
    }
}
