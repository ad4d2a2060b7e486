//! The runner flags shared by `enforce run` and `enforce eval` (flattened into both), and how
//! they turn, with the configuration's `runner:` section, into a [`RunnerConfig`]: one place,
//! so the two commands never drift.

use clap::{Args, ValueEnum};
use enforce_runner::{
    AnthropicConfig, ClaudeConfig, CommandConfig, LocalConfig, OpenAiConfig, RunnerConfig,
};
use serde_json::{Map, Value};
use std::path::PathBuf;

/// Which kind of runner to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RunnerKind {
    /// The Claude Code CLI (`claude -p`).
    Claude,
    /// An OpenAI-compatible server (OpenAI, Ollama, vLLM, llama.cpp).
    Openai,
    /// The Anthropic Messages API (key from `ANTHROPIC_API_KEY`; `--base-url` without `/v1`
    /// for a compatible server).
    Anthropic,
    /// Any command: prompt on stdin, reply on stdout.
    Command,
    /// A GGUF model in this process through llama.cpp (`--model PATH.gguf`; a build with
    /// `--features local`).
    Local,
}

/// The runner flags.
#[derive(Debug, Clone, Args)]
pub struct RunnerOptions {
    /// Runner kind; overrides the configuration's `runner.type` (its other settings are kept
    /// when the kind matches).
    #[arg(long, value_enum)]
    pub runner: Option<RunnerKind>,
    /// Claude runner: the CLI to run.
    #[arg(long, env = "ENFORCE_CLAUDE_BIN")]
    pub claude_bin: Option<PathBuf>,
    /// OpenAI runner: base URL up to `/v1`; Anthropic runner: base URL without `/v1`
    /// [default: https://api.anthropic.com].
    #[arg(long, env = "ENFORCE_BASE_URL")]
    pub base_url: Option<String>,
    /// Model name (Claude `--model`, the OpenAI or Anthropic upstream model), or the local runner's GGUF
    /// file (a path ending in `.gguf` picks the local runner when `--runner` is not given).
    #[arg(long, env = "ENFORCE_MODEL")]
    pub model: Option<String>,
    /// Local runner: CPU threads per generation [default: 1].
    #[arg(long)]
    pub threads: Option<u32>,
    /// OpenAI and Anthropic runners: environment variable holding the API key.
    #[arg(long)]
    pub api_key_env: Option<String>,
    /// Command runner: the command line, run with `sh -c`.
    #[arg(long = "command")]
    pub command_line: Option<String>,
    /// Runner timeout per call, in seconds.
    #[arg(long)]
    pub timeout: Option<f64>,
    /// The model the re-ask strategy `escalate` asks: a model name or a GGUF file, run with
    /// the same runner flags as `--model` [default: the profile's `escalate_to`, a `models:`
    /// entry].
    #[arg(long, value_name = "MODEL")]
    pub escalate_model: Option<String>,
}

impl RunnerOptions {
    /// The runner configuration: the file's, switched to `--runner` if asked, with the flags
    /// laid over it. The error is a usage message.
    pub fn runner_config(&self, from_file: Option<RunnerConfig>) -> Result<RunnerConfig, String> {
        // The runner types are spelled as the `--runner` values are.
        let of_file = |c: &RunnerConfig| RunnerKind::from_str(c.kind(), false).ok();
        let kind = match self.runner.or(from_file.as_ref().and_then(of_file)) {
            Some(kind) => kind,
            // Without a word on the runner, guess from the flags given.
            None if self.command_line.is_some() => RunnerKind::Command,
            None if self.base_url.is_some() => RunnerKind::Openai,
            None if self.model.as_deref().is_some_and(|m| m.ends_with(".gguf")) => {
                RunnerKind::Local
            }
            None => RunnerKind::Claude,
        };
        let mut config = match from_file.filter(|c| of_file(c) == Some(kind)) {
            Some(c) => c,
            None => match kind {
                RunnerKind::Claude => RunnerConfig::Claude(ClaudeConfig::default()),
                RunnerKind::Openai => RunnerConfig::OpenAi(OpenAiConfig::default()),
                RunnerKind::Anthropic => RunnerConfig::Anthropic(AnthropicConfig::default()),
                RunnerKind::Command => RunnerConfig::Command(CommandConfig::default()),
                RunnerKind::Local => RunnerConfig::Local(LocalConfig::default()),
            },
        };
        match &mut config {
            RunnerConfig::Claude(c) => {
                if let Some(bin) = &self.claude_bin {
                    c.binary = bin.clone();
                }
                if let Some(model) = &self.model {
                    c.model = Some(model.clone());
                }
                if let Some(t) = self.timeout {
                    c.timeout_secs = t;
                }
            }
            RunnerConfig::OpenAi(c) => self.http_flags(
                "openai",
                &mut c.base_url,
                &mut c.model,
                &mut c.api_key_env,
                &mut c.timeout_secs,
            )?,
            RunnerConfig::Anthropic(c) => self.http_flags(
                "anthropic",
                &mut c.base_url,
                &mut c.model,
                &mut c.api_key_env,
                &mut c.timeout_secs,
            )?,
            RunnerConfig::Command(c) => {
                if let Some(line) = &self.command_line {
                    c.program = PathBuf::from("sh");
                    c.args = vec!["-c".into(), line.clone()];
                }
                if let Some(t) = self.timeout {
                    c.timeout_secs = t;
                }
                if c.program.as_os_str().is_empty() {
                    return Err(
                        "the command runner needs a command: --command 'CMD' or `runner.program`"
                            .into(),
                    );
                }
            }
            RunnerConfig::Local(c) => {
                if let Some(model) = &self.model {
                    c.model = PathBuf::from(model);
                }
                c.threads = self.threads.unwrap_or(c.threads);
                if c.model.as_os_str().is_empty() {
                    return Err(
                        "the local runner needs a model file: --model PATH.gguf or `runner.model`"
                            .into(),
                    );
                }
            }
        }
        Ok(config)
    }

    /// The escalation model of `--escalate-model`: its name and a runner configured as the
    /// main one, with that model. `None` without the flag.
    pub fn escalation(
        &self,
        from_file: Option<RunnerConfig>,
    ) -> Result<Option<(String, RunnerConfig)>, String> {
        let Some(model) = &self.escalate_model else {
            return Ok(None);
        };
        let options = RunnerOptions {
            model: Some(model.clone()),
            ..self.clone()
        };
        let config = options
            .runner_config(from_file)
            .map_err(|e| format!("--escalate-model: {e}"))?;
        Ok(Some((model.clone(), config)))
    }

    /// The flags of the HTTP runners laid over their settings; the model is required.
    fn http_flags(
        &self,
        kind: &str,
        base_url: &mut String,
        model: &mut String,
        api_key_env: &mut Option<String>,
        timeout_secs: &mut f64,
    ) -> Result<(), String> {
        if let Some(url) = &self.base_url {
            base_url.clone_from(url);
        }
        if let Some(m) = &self.model {
            model.clone_from(m);
        }
        if let Some(var) = &self.api_key_env {
            *api_key_env = Some(var.clone());
        }
        if let Some(t) = self.timeout {
            *timeout_secs = t;
        }
        if model.trim().is_empty() {
            return Err(format!(
                "the {kind} runner needs a model: --model NAME or `runner.model`"
            ));
        }
        Ok(())
    }
}

/// The sampling flags, sent with a request as its `params` (`seed`, `temperature`,
/// `max_tokens`), which a runner reads over its configured values.
#[derive(Debug, Clone, Default, Args, serde::Serialize)]
pub struct SamplingOptions {
    /// Sampling seed: with a seeded model the same seed gives the same answer (`enforce eval`:
    /// the first seed, request i (case × repeat) gets SEED + i; default 0).
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Sampling temperature.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Most tokens per answer.
    #[arg(long)]
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

impl SamplingOptions {
    /// The request parameters of the flags given.
    pub fn params(&self) -> Map<String, Value> {
        match serde_json::to_value(self) {
            Ok(Value::Object(params)) => params,
            _ => Map::new(),
        }
    }
}

/// The model a runner configuration asks, when it names one (the audit record's `model`).
pub fn model_of(config: &RunnerConfig) -> Option<&str> {
    match config {
        RunnerConfig::Claude(c) => c.model.as_deref(),
        RunnerConfig::OpenAi(c) => Some(c.model.as_str()),
        RunnerConfig::Anthropic(c) => Some(c.model.as_str()),
        RunnerConfig::Local(c) => c.model.file_name().and_then(|name| name.to_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        runner: RunnerOptions,
    }

    fn options(args: &[&str]) -> RunnerOptions {
        Cli::parse_from(std::iter::once("x").chain(args.iter().copied())).runner
    }

    /// Every `--runner` value is spelled as its runner's `type:`, so a file's runner of that
    /// type keeps its settings when the flag names it.
    #[test]
    fn a_file_runner_of_the_flag_s_kind_keeps_its_settings() {
        for kind in RunnerKind::value_variants() {
            let name = kind.to_possible_value().map(|v| v.get_name().to_string());
            let file = options(&[
                "--runner",
                name.as_deref().unwrap_or_default(),
                "--model",
                "m.gguf",
                "--command",
                "true",
            ])
            .runner_config(None)
            .unwrap();
            let kept = options(&["--runner", name.as_deref().unwrap_or_default()])
                .runner_config(Some(file.clone()))
                .unwrap();
            assert_eq!(kept, file, "{name:?}");
        }
    }

    #[test]
    fn sampling_flags_become_request_params() {
        #[derive(Parser)]
        struct Sampling {
            #[command(flatten)]
            sampling: SamplingOptions,
        }
        let parse = |args: &[&str]| {
            Sampling::parse_from(std::iter::once("x").chain(args.iter().copied()))
                .sampling
                .params()
        };
        assert!(parse(&[]).is_empty());
        let params = parse(&["--seed", "7", "--temperature", "0.7", "--max-tokens", "256"]);
        assert_eq!(
            Value::Object(params),
            serde_json::json!({"seed": 7, "temperature": 0.7, "max_tokens": 256})
        );
    }

    #[test]
    fn the_kind_is_guessed_from_the_flags_and_the_file_keeps_its_settings() {
        let config = options(&["--command", "cat"])
            .runner_config(None)
            .expect("ok");
        assert_eq!(config.kind(), "command");
        let config = options(&["--base-url", "http://x/v1", "--model", "m"])
            .runner_config(None)
            .expect("ok");
        assert_eq!(config.kind(), "openai");
        assert_eq!(model_of(&config), Some("m"));
        let err = options(&["--runner", "openai"])
            .runner_config(None)
            .expect_err("no model");
        assert!(err.contains("--model"), "{err}");
        let from_file = RunnerConfig::OpenAi(OpenAiConfig {
            model: "from-file".into(),
            ..OpenAiConfig::default()
        });
        let config = options(&[]).runner_config(Some(from_file)).expect("ok");
        assert_eq!(model_of(&config), Some("from-file"));
    }

    #[test]
    fn the_anthropic_runner_takes_the_flags_and_needs_a_model() {
        let config = options(&[
            "--runner",
            "anthropic",
            "--model",
            "claude-x",
            "--base-url",
            "http://127.0.0.1:9",
            "--api-key-env",
            "MY_KEY",
        ])
        .runner_config(None)
        .expect("ok");
        let RunnerConfig::Anthropic(c) = &config else {
            panic!("{config:?}")
        };
        assert_eq!(
            (c.base_url.as_str(), c.api_key_env.as_deref()),
            ("http://127.0.0.1:9", Some("MY_KEY"))
        );
        assert_eq!(model_of(&config), Some("claude-x"));
        let err = options(&["--runner", "anthropic"])
            .runner_config(None)
            .expect_err("no model");
        assert!(err.contains("anthropic runner needs a model"), "{err}");
    }
}
