//! The command-line model: the flags that define a served model without a config file
//! (`--upstream-url`, `--upstream-model`, `--runner`, `--profile`, `--model-id`, ...), shared by
//! `enforce serve` (which serves it) and `enforce config explain` (which explains it). Both turn
//! the flags into the same `models:` entry ([`ModelFlags::entry`]), so a flag means one thing.

use crate::config::ServedModelConfig;
use clap::ValueEnum;
use enforce_runner::{AnthropicConfig, ClaudeConfig, OpenAiConfig, RunnerConfig};
use enforce_server::{FailureResponse, StreamMode};
use std::path::PathBuf;

/// Which runner a command-line model uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ServeRunner {
    /// An OpenAI-compatible server at `--upstream-url` (OpenAI, Ollama, vLLM, llama.cpp).
    Openai,
    /// The Claude Code CLI (`claude -p`), sessions continued with `--resume`.
    Claude,
    /// The Anthropic Messages API: `--upstream-model` names the model, `--upstream-url` is a
    /// compatible server's base URL without `/v1` [default: https://api.anthropic.com], the key
    /// is `--upstream-key`, else `ANTHROPIC_API_KEY`.
    Anthropic,
}

/// What a streaming client sees while the answer is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StreamModeArg {
    /// Nothing unchecked: keep-alives (and status events) until the answer passed.
    Hold,
    /// Attempts live as `reasoning_content`, the checked answer as `content`.
    Draft,
}

impl From<StreamModeArg> for StreamMode {
    fn from(v: StreamModeArg) -> Self {
        match v {
            StreamModeArg::Hold => StreamMode::Hold,
            StreamModeArg::Draft => StreamMode::Draft,
        }
    }
}

/// What a failed enforcement becomes (for streaming and non-streaming clients).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnFailure {
    /// A normal completion carrying the status (`X-Enforce-Status`, `enforcement`).
    Return,
    /// An OpenAI error (422 unresolved, 503 unavailable).
    Error,
}

impl From<OnFailure> for FailureResponse {
    fn from(v: OnFailure) -> Self {
        match v {
            OnFailure::Return => FailureResponse::Return,
            OnFailure::Error => FailureResponse::Error,
        }
    }
}

/// The flags of the command-line model.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModelFlags {
    /// Runner of the command-line model [default: openai when --upstream-url is given].
    #[arg(long, value_enum)]
    pub runner: Option<ServeRunner>,
    /// Base URL of the OpenAI-compatible upstream, up to `/v1` (with `--runner anthropic`:
    /// the server without `/v1`).
    #[arg(long, env = "ENFORCE_UPSTREAM_URL")]
    pub upstream_url: Option<String>,
    /// Upstream model name (Claude `--model` with `--runner claude`) [default: the first model
    /// the upstream lists at /models].
    #[arg(long, env = "ENFORCE_UPSTREAM_MODEL")]
    pub upstream_model: Option<String>,
    /// API key for the upstream.
    #[arg(long, env = "ENFORCE_UPSTREAM_KEY", hide_env_values = true)]
    pub upstream_key: Option<String>,
    /// Claude runner: the CLI to run.
    #[arg(long, env = "ENFORCE_CLAUDE_BIN")]
    pub claude_bin: Option<PathBuf>,
    /// Upstream timeout per call, in seconds.
    #[arg(long)]
    pub upstream_timeout: Option<f64>,
    /// Profile of the command-line model [default: the configuration's default, else chat].
    #[arg(long, short = 'p')]
    pub profile: Option<String>,
    /// Public model id of the command-line model [default: --upstream-model, else the profile].
    #[arg(long)]
    pub model_id: Option<String>,
    /// An answer that stays unresolved (streamed or not): return it with its status, or an error
    /// [default: error with --stream-mode draft (a chat UI shows the error), else return].
    #[arg(long, value_enum)]
    pub on_unresolved: Option<OnFailure>,
    /// An answer whose validator was unavailable (streamed or not): return it, or an error
    /// [default: return].
    #[arg(long, value_enum)]
    pub on_unavailable: Option<OnFailure>,
    /// Send Open WebUI status events in streams ("Re-asking (2/3): ...").
    #[arg(long)]
    pub status_events: bool,
    /// Do not check tool calls against the request's `tools` (UNKNOWN_TOOL,
    /// INVALID_TOOL_ARGUMENTS); by default they are checked and re-asked like any other error.
    #[arg(long)]
    pub no_tool_checks: bool,
    /// Remove the `<!-- STEP: x -->` marker from answers (chat UIs show it as text); the step is
    /// still recorded, and put back on the turns the client sends back.
    #[arg(long)]
    pub hide_step_marker: bool,
    /// What a streaming client sees while the answer is checked: `hold` shows nothing
    /// unchecked; `draft` streams each attempt live as reasoning (a "Thinking…" block in Open
    /// WebUI) and only the checked answer as the message [default: hold].
    #[arg(long, value_enum)]
    pub stream_mode: Option<StreamModeArg>,
}

impl ModelFlags {
    /// The runner kind the flags ask for; `None`: they define no model.
    fn kind(&self) -> Option<ServeRunner> {
        match (self.runner, &self.upstream_url) {
            (Some(kind), _) => Some(kind),
            (None, Some(_)) => Some(ServeRunner::Openai),
            (None, None) => None,
        }
    }

    /// The upstream's model name: `--upstream-model`, else (for an OpenAI-compatible upstream)
    /// the first model it lists at `/models`, asked once.
    pub async fn upstream_model(&self) -> Result<Option<String>, String> {
        if self.upstream_model.is_some() || self.kind() != Some(ServeRunner::Openai) {
            return Ok(self.upstream_model.clone());
        }
        match &self.upstream_url {
            Some(url) => discover_model(url, self.upstream_key.as_deref())
                .await
                .map(Some),
            None => Ok(None),
        }
    }

    /// The command-line model as a `models:` entry (`None` when the flags define none);
    /// `upstream_model` is [`upstream_model`](Self::upstream_model)'s answer and
    /// `default_profile` the configuration's default profile.
    pub fn entry(
        &self,
        upstream_model: Option<String>,
        default_profile: &str,
    ) -> Result<Option<ServedModelConfig>, String> {
        let Some(kind) = self.kind() else {
            return Ok(None);
        };
        let runner = match kind {
            ServeRunner::Openai => {
                let base_url = self
                    .upstream_url
                    .clone()
                    .ok_or("--runner openai needs --upstream-url")?;
                let model = upstream_model
                    .clone()
                    .ok_or("--upstream-url needs --upstream-model (the upstream's model name)")?;
                let mut c = OpenAiConfig {
                    base_url,
                    model,
                    api_key: self.upstream_key.clone(),
                    ..OpenAiConfig::default()
                };
                if let Some(t) = self.upstream_timeout {
                    c.timeout_secs = t;
                }
                RunnerConfig::OpenAi(c)
            }
            ServeRunner::Anthropic => {
                let model = upstream_model.clone().ok_or(
                    "--runner anthropic needs --upstream-model (the Anthropic model name, e.g. claude-sonnet-4-5)",
                )?;
                let mut c = AnthropicConfig {
                    model,
                    api_key: self.upstream_key.clone(),
                    ..AnthropicConfig::default()
                };
                if let Some(url) = &self.upstream_url {
                    c.base_url.clone_from(url);
                }
                if let Some(t) = self.upstream_timeout {
                    c.timeout_secs = t;
                }
                RunnerConfig::Anthropic(c)
            }
            ServeRunner::Claude => {
                let mut c = ClaudeConfig {
                    model: upstream_model.clone(),
                    ..ClaudeConfig::default()
                };
                if let Some(bin) = &self.claude_bin {
                    c.binary = bin.clone();
                }
                if let Some(t) = self.upstream_timeout {
                    c.timeout_secs = t;
                }
                RunnerConfig::Claude(c)
            }
        };
        let id = self
            .model_id
            .clone()
            .or(upstream_model)
            .or_else(|| self.profile.clone())
            .unwrap_or_else(|| default_profile.to_string());
        Ok(Some(ServedModelConfig {
            id,
            runner: Some(runner),
            profile: self.profile.clone(),
            on_unresolved: self.on_unresolved.map(FailureResponse::from),
            on_unavailable: self
                .on_unavailable
                .map_or(FailureResponse::Return, FailureResponse::from),
            status_events: self.status_events,
            check_tool_calls: !self.no_tool_checks,
            hide_step_marker: self.hide_step_marker,
            stream_mode: self.stream_mode.map_or(StreamMode::Hold, StreamMode::from),
            routes: Vec::new(),
            // `server.allow_request_limits` decides, as for a `models:` entry without the key.
            allow_request_limits: None,
            classify: None,
            cache: None,
        }))
    }

    /// The flag that set `key` of the command-line model's entry (`profile` → `--profile`),
    /// `None` when no flag did (the value is a default), for `enforce config explain`.
    pub fn flag_of(&self, key: &str) -> Option<&'static str> {
        let (given, flag) = match key {
            "runner" if self.runner.is_some() => (true, "--runner"),
            "runner" => (self.upstream_url.is_some(), "--upstream-url"),
            "runner.timeout_secs" => (self.upstream_timeout.is_some(), "--upstream-timeout"),
            "profile" => (self.profile.is_some(), "--profile"),
            "on_unresolved" => (self.on_unresolved.is_some(), "--on-unresolved"),
            "on_unavailable" => (self.on_unavailable.is_some(), "--on-unavailable"),
            "status_events" => (self.status_events, "--status-events"),
            "check_tool_calls" => (self.no_tool_checks, "--no-tool-checks"),
            "hide_step_marker" => (self.hide_step_marker, "--hide-step-marker"),
            "stream_mode" => (self.stream_mode.is_some(), "--stream-mode"),
            _ => (false, ""),
        };
        given.then_some(flag)
    }
}

/// The first model the upstream lists at `{base_url}/models` (llama.cpp and single-model servers
/// need no name; this finds the one they serve).
async fn discover_model(base_url: &str, key: Option<&str>) -> Result<String, String> {
    let url = format!("{}/models", base_url.trim_end_matches('/'));
    let hint = "give --upstream-model NAME";
    let client = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
    let mut request = client.get(&url);
    if let Some(key) = key {
        request = request.bearer_auth(key);
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot list the upstream's models at {url} ({e}); {hint}"))?;
    if !response.status().is_success() {
        return Err(format!(
            "the upstream answered {} to {url}; {hint}",
            response.status()
        ));
    }
    let list: serde_json::Value = response
        .json()
        .await
        .map_err(|e| format!("the upstream's model list at {url} is not JSON ({e}); {hint}"))?;
    list.get("data")
        .and_then(|d| d.get(0))
        .and_then(|m| m.get("id"))
        .and_then(serde_json::Value::as_str)
        .map(str::to_string)
        .ok_or_else(|| format!("the upstream lists no model at {url}; {hint}"))
}
