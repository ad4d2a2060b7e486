//! Runner configuration as it appears in config files: [`RunnerConfig`].

use crate::error::ConfigError;
use crate::{
    AnthropicConfig, AnthropicRunner, ClaudeConfig, ClaudeRunner, CommandConfig, CommandRunner,
    OpenAiConfig, OpenAiRunner,
};
use enforce_core::Runner;
use enforce_runner_local::LocalConfig;
use serde::{Deserialize, Serialize};

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
    /// The Anthropic Messages API (or a server compatible with it).
    Anthropic(AnthropicConfig),
    /// Any command: prompt on stdin, reply on stdout.
    Command(CommandConfig),
    /// A GGUF model run in this process through llama.cpp (needs a build with the feature
    /// `local`).
    Local(LocalConfig),
}

impl RunnerConfig {
    /// `claude`, `openai`, `anthropic`, `command` or `local`.
    pub fn kind(&self) -> &'static str {
        match self {
            RunnerConfig::Claude(_) => "claude",
            RunnerConfig::OpenAi(_) => "openai",
            RunnerConfig::Anthropic(_) => "anthropic",
            RunnerConfig::Command(_) => "command",
            RunnerConfig::Local(_) => "local",
        }
    }

    /// Builds the runner.
    pub fn build(&self) -> Result<Box<dyn Runner>, ConfigError> {
        Ok(match self {
            RunnerConfig::Claude(c) => Box::new(ClaudeRunner::new(c.clone())?),
            RunnerConfig::OpenAi(c) => Box::new(OpenAiRunner::new(c.clone())?),
            RunnerConfig::Anthropic(c) => Box::new(AnthropicRunner::new(c.clone())?),
            RunnerConfig::Command(c) => Box::new(CommandRunner::new(c.clone())?),
            RunnerConfig::Local(c) => local_runner(c)?,
        })
    }
}

/// The local runner, in a build that has it.
#[cfg(feature = "local")]
fn local_runner(config: &LocalConfig) -> Result<Box<dyn Runner>, ConfigError> {
    Ok(Box::new(enforce_runner_local::LocalRunner::new(
        config.clone(),
    )?))
}

/// Without the feature `local` there is no llama.cpp to run it with: the error says how to
/// build it.
#[cfg(not(feature = "local"))]
fn local_runner(_: &LocalConfig) -> Result<Box<dyn Runner>, ConfigError> {
    Err(enforce_runner_local::LocalConfigError::NotBuilt.into())
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
            (
                r#"{"type":"anthropic","base_url":"http://127.0.0.1:1","model":"m","api_key":"k"}"#,
                "anthropic",
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

    #[test]
    fn zero_timeouts_and_limits_are_refused_naming_the_field() {
        for (text, field) in [
            (r#"{"type":"claude","timeout_secs":0}"#, "timeout_secs"),
            (
                r#"{"type":"command","program":"cat","timeout_secs":0}"#,
                "timeout_secs",
            ),
            (
                r#"{"type":"openai","base_url":"http://127.0.0.1:1/v1","model":"m","timeout_secs":0}"#,
                "timeout_secs",
            ),
            (
                r#"{"type":"openai","base_url":"http://127.0.0.1:1/v1","model":"m","connect_timeout_secs":0}"#,
                "connect_timeout_secs",
            ),
            (
                r#"{"type":"openai","base_url":"http://127.0.0.1:1/v1","model":"m","max_response_bytes":0}"#,
                "max_response_bytes",
            ),
            (
                r#"{"type":"anthropic","base_url":"http://127.0.0.1:1","model":"m","api_key":"k","max_response_bytes":0}"#,
                "max_response_bytes",
            ),
        ] {
            let c: RunnerConfig = serde_json::from_str(text).unwrap();
            let Err(error) = c.build() else {
                panic!("{text} must be refused")
            };
            assert_eq!(error, ConfigError::Zero { field }, "{text}");
            assert_eq!(error.field(), Some(field));
        }
    }

    /// `type: local` always parses; it builds (without touching the model file) only with the
    /// feature `local`, and otherwise says how to get it. Bad settings are config errors.
    #[test]
    fn the_local_kind_parses_in_every_build() {
        let c: RunnerConfig =
            serde_json::from_str(r#"{"type":"local","model":"/nonexistent/m.gguf","threads":2}"#)
                .unwrap();
        assert_eq!(c.kind(), "local");
        let built = c.build();
        #[cfg(feature = "local")]
        assert!(built.is_ok(), "{:?}", built.err());
        #[cfg(not(feature = "local"))]
        {
            let Err(err) = built else {
                panic!("no local runner in this build")
            };
            let err = err.to_string();
            assert!(err.contains("--features local"), "{err}");
        }
        let c: RunnerConfig = serde_json::from_str(r#"{"type":"local","model":""}"#).unwrap();
        #[cfg(feature = "local")]
        assert!(matches!(
            c.build().err(),
            Some(ConfigError::Local(
                enforce_runner_local::LocalConfigError::MissingModel
            ))
        ));
        #[cfg(not(feature = "local"))]
        assert!(c.build().is_err());
        assert!(serde_json::from_str::<RunnerConfig>(r#"{"type":"local","modle":"m"}"#).is_err());
    }
}
