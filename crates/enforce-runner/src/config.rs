//! Runner configuration as it appears in config files: [`RunnerConfig`].

use crate::error::ConfigError;
use crate::{ClaudeConfig, ClaudeRunner, CommandConfig, CommandRunner, OpenAiConfig, OpenAiRunner};
use enforce_core::Runner;
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
