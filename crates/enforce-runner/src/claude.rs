//! The Claude Code CLI runner: `claude -p --output-format json`, prompt on stdin, follow-ups
//! resume the session with `--resume <session_id>`.

use crate::error::{duration_from_secs, ConfigError};
use crate::process::{exit_failure, run_process, tail, ProcessSpec};
use crate::prompt::render_prompt;
use enforce_core::{async_trait, Reply, Request, Runner, RunnerError, Usage};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the Claude Code CLI is run. Every field is optional in a config file.
///
/// ```
/// use enforce_runner::ClaudeConfig;
///
/// let config: ClaudeConfig = serde_json::from_str(
///     r#"{"binary": "/usr/local/bin/claude", "model": "sonnet", "max_turns": 3,
///         "permission_mode": "dontAsk", "timeout_secs": 120}"#).unwrap();
/// assert_eq!(config.max_turns, Some(3));
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ClaudeConfig {
    /// The CLI to run: a path, or a name looked up on `PATH` (default `claude`).
    pub binary: PathBuf,
    /// `--model`.
    pub model: Option<String>,
    /// `--append-system-prompt`; system messages of the request are appended to it.
    pub append_system_prompt: Option<String>,
    /// `--allowedTools`, one entry each.
    pub allowed_tools: Vec<String>,
    /// `--disallowedTools`, one entry each.
    pub disallowed_tools: Vec<String>,
    /// `--permission-mode` (e.g. `dontAsk` for locked-down runs).
    pub permission_mode: Option<String>,
    /// `--max-turns`.
    pub max_turns: Option<u32>,
    /// `--max-budget-usd`.
    pub max_budget_usd: Option<f64>,
    /// The directory the CLI runs in (its project); default the current one.
    pub working_dir: Option<PathBuf>,
    /// Further arguments, placed after the ones above.
    pub extra_args: Vec<String>,
    /// Extra environment variables for the CLI.
    pub env: BTreeMap<String, String>,
    /// Longest one call may take, in seconds (default 300).
    pub timeout_secs: f64,
    /// After the timeout, how long the CLI gets between SIGINT and SIGKILL, in seconds
    /// (default 2).
    pub kill_grace_secs: f64,
}

impl Default for ClaudeConfig {
    fn default() -> Self {
        ClaudeConfig {
            binary: PathBuf::from("claude"),
            model: None,
            append_system_prompt: None,
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            permission_mode: None,
            max_turns: None,
            max_budget_usd: None,
            working_dir: None,
            extra_args: Vec::new(),
            env: BTreeMap::new(),
            timeout_secs: 300.0,
            kill_grace_secs: 2.0,
        }
    }
}

/// Asks the Claude Code CLI. A follow-up continues the previous reply's session with
/// `--resume <id>` and sends only the feedback; the session id is always taken from the latest
/// result, since some CLI versions hand back a new one on resume.
///
/// ```no_run
/// use enforce_core::{Request, Runner};
/// use enforce_runner::{ClaudeConfig, ClaudeRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = ClaudeRunner::new(ClaudeConfig::default())?;
/// let first = runner.ask(&Request::prompt("Write an ADR")).await?;
/// let second = runner.follow_up(&Request::prompt("Write an ADR"), &first,
///                               "Add the section ## Kontext").await?;
/// # let _ = second; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct ClaudeRunner {
    config: ClaudeConfig,
    timeout: Duration,
    kill_grace: Duration,
}

impl ClaudeRunner {
    /// A runner with this configuration; fails on a negative or non-finite timeout.
    pub fn new(config: ClaudeConfig) -> Result<Self, ConfigError> {
        let timeout = duration_from_secs("timeout_secs", config.timeout_secs)?;
        let kill_grace = duration_from_secs("kill_grace_secs", config.kill_grace_secs)?;
        Ok(ClaudeRunner {
            config,
            timeout,
            kill_grace,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &ClaudeConfig {
        &self.config
    }

    /// The arguments for one call: `-p --output-format json`, the options, and `--resume <id>`
    /// when continuing a session.
    pub fn args(&self, system: Option<&str>, resume: Option<&str>) -> Vec<String> {
        let c = &self.config;
        let mut args: Vec<String> = vec!["-p".into(), "--output-format".into(), "json".into()];
        if let Some(id) = resume {
            args.push("--resume".into());
            args.push(id.to_string());
        }
        if let Some(model) = &c.model {
            args.push("--model".into());
            args.push(model.clone());
        }
        let appended: Vec<&str> = c
            .append_system_prompt
            .as_deref()
            .into_iter()
            .chain(system)
            .filter(|s| !s.trim().is_empty())
            .collect();
        if !appended.is_empty() {
            args.push("--append-system-prompt".into());
            args.push(appended.join("\n\n"));
        }
        for tool in &c.allowed_tools {
            args.push("--allowedTools".into());
            args.push(tool.clone());
        }
        for tool in &c.disallowed_tools {
            args.push("--disallowedTools".into());
            args.push(tool.clone());
        }
        if let Some(mode) = &c.permission_mode {
            args.push("--permission-mode".into());
            args.push(mode.clone());
        }
        if let Some(turns) = c.max_turns {
            args.push("--max-turns".into());
            args.push(turns.to_string());
        }
        if let Some(budget) = c.max_budget_usd {
            args.push("--max-budget-usd".into());
            args.push(budget.to_string());
        }
        args.extend(c.extra_args.iter().cloned());
        args
    }

    async fn call(
        &self,
        system: Option<&str>,
        resume: Option<&str>,
        prompt: String,
    ) -> Result<Reply, RunnerError> {
        let spec = ProcessSpec {
            program: self.config.binary.clone(),
            args: self
                .args(system, resume)
                .into_iter()
                .map(OsString::from)
                .collect(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            stdin: prompt,
            timeout: self.timeout,
            kill_grace: self.kill_grace,
        };
        let started = Instant::now();
        let output = run_process(&spec).await?;
        let program = self.config.binary.display().to_string();
        match parse_result(&output.stdout) {
            Ok(result) => {
                let mut reply = result.into_reply()?;
                if reply.duration.is_none() {
                    reply.duration = Some(started.elapsed());
                }
                Ok(reply)
            }
            // No result: a failed exit explains more than the unparsable output.
            Err(_) if !output.status.success() => Err(exit_failure(&program, &output)),
            Err(message) => Err(RunnerError::Protocol {
                message: format!("`{program}` printed no result object: {message}"),
            }),
        }
    }
}

#[async_trait]
impl Runner for ClaudeRunner {
    async fn ask(&self, request: &Request) -> Result<Reply, RunnerError> {
        let rendered = render_prompt(&request.messages);
        match &request.session_id {
            // Continuing an earlier conversation: the session holds the turns before.
            Some(id) => {
                let text = request.last_user_text().unwrap_or_default().to_string();
                self.call(rendered.system.as_deref(), Some(id), text).await
            }
            None => {
                self.call(rendered.system.as_deref(), None, rendered.prompt)
                    .await
            }
        }
    }

    async fn follow_up(
        &self,
        request: &Request,
        previous: &Reply,
        feedback: &str,
    ) -> Result<Reply, RunnerError> {
        let rendered = render_prompt(&request.messages);
        match previous.session_id.as_deref() {
            Some(id) => {
                self.call(rendered.system.as_deref(), Some(id), feedback.to_string())
                    .await
            }
            // No session to continue: send the conversation, the last answer and the feedback.
            None => {
                let messages =
                    enforce_core::stateless_follow_up_messages(request, previous, feedback);
                let rendered = render_prompt(&messages);
                self.call(rendered.system.as_deref(), None, rendered.prompt)
                    .await
            }
        }
    }
}

/// The fields of the CLI's `result` object that enforce uses.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaudeResult {
    /// `subtype`: `success` or one of the `error_*` kinds.
    pub subtype: Option<String>,
    /// `is_error`.
    pub is_error: bool,
    /// `result`: the answer text (absent in the error arm).
    pub result: Option<String>,
    /// `session_id`.
    pub session_id: Option<String>,
    /// `total_cost_usd`, or the older `cost_usd`.
    pub cost_usd: Option<f64>,
    /// `usage`: input tokens include cache reads and writes, since all of them were sent.
    pub usage: Option<Usage>,
    /// `duration_ms`.
    pub duration: Option<Duration>,
    /// `errors`, as text.
    pub errors: Vec<String>,
}

impl ClaudeResult {
    /// The reply, or the typed error an `is_error` result stands for.
    pub fn into_reply(self) -> Result<Reply, RunnerError> {
        let error_subtype = self
            .subtype
            .as_deref()
            .filter(|s| s.starts_with("error"))
            .map(str::to_string);
        if self.is_error || error_subtype.is_some() {
            let kind = error_subtype.unwrap_or_else(|| "error".to_string());
            let mut details = self.errors.clone();
            if let Some(text) = self.result.as_deref().filter(|t| !t.trim().is_empty()) {
                details.push(text.trim().to_string());
            }
            let message = if details.is_empty() {
                format!("claude reported {kind}")
            } else {
                format!("claude reported {kind}: {}", details.join("; "))
            };
            return Err(RunnerError::Upstream {
                status: None,
                message,
            });
        }
        let Some(text) = self.result else {
            return Err(RunnerError::Protocol {
                message: "claude result has no `result` text".to_string(),
            });
        };
        Ok(Reply {
            text,
            session_id: self.session_id,
            usage: self.usage,
            cost_usd: self.cost_usd,
            duration: self.duration,
            ..Reply::default()
        })
    }
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn from_object(v: &Value) -> ClaudeResult {
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        input_tokens: u64_field(u, "input_tokens")
            .saturating_add(u64_field(u, "cache_creation_input_tokens"))
            .saturating_add(u64_field(u, "cache_read_input_tokens")),
        output_tokens: u64_field(u, "output_tokens"),
    });
    let errors = match v.get("errors") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|e| match e {
                Value::String(s) => s.clone(),
                Value::Object(o) => o
                    .get("message")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .unwrap_or_else(|| e.to_string()),
                other => other.to_string(),
            })
            .collect(),
        Some(Value::String(s)) => vec![s.clone()],
        _ => Vec::new(),
    };
    ClaudeResult {
        subtype: v.get("subtype").and_then(Value::as_str).map(str::to_string),
        is_error: v.get("is_error").and_then(Value::as_bool).unwrap_or(false),
        result: v.get("result").and_then(Value::as_str).map(str::to_string),
        session_id: v
            .get("session_id")
            .and_then(Value::as_str)
            .map(str::to_string),
        cost_usd: v
            .get("total_cost_usd")
            .and_then(Value::as_f64)
            .or_else(|| v.get("cost_usd").and_then(Value::as_f64)),
        usage,
        duration: v
            .get("duration_ms")
            .and_then(Value::as_u64)
            .map(Duration::from_millis),
        errors,
    }
}

fn is_result(v: &Value) -> bool {
    v.get("type").and_then(Value::as_str) == Some("result")
}

/// Finds the result in what `claude -p --output-format json` printed: one result object, or
/// (with `--verbose`) an array of messages whose last `result` element counts. Falls back to the
/// last line holding a result, in case the CLI printed something before it.
///
/// ```
/// use enforce_runner::parse_result;
///
/// let out = r#"{"type":"result","subtype":"success","is_error":false,"result":"Hi",
///               "session_id":"abc","total_cost_usd":0.01}"#;
/// let r = parse_result(out).unwrap();
/// assert_eq!(r.result.as_deref(), Some("Hi"));
/// assert_eq!(r.session_id.as_deref(), Some("abc"));
/// ```
pub fn parse_result(stdout: &str) -> Result<ClaudeResult, String> {
    let trimmed = stdout.trim();
    if trimmed.is_empty() {
        return Err("stdout was empty".to_string());
    }
    let pick = |v: &Value| -> Option<ClaudeResult> {
        match v {
            Value::Array(items) => items.iter().rev().find(|i| is_result(i)).map(from_object),
            Value::Object(_) if is_result(v) => Some(from_object(v)),
            _ => None,
        }
    };
    if let Ok(v) = serde_json::from_str::<Value>(trimmed) {
        return pick(&v).ok_or_else(|| "the JSON holds no object of type `result`".to_string());
    }
    for line in trimmed.lines().rev() {
        if let Ok(v) = serde_json::from_str::<Value>(line.trim()) {
            if let Some(found) = pick(&v) {
                return Ok(found);
            }
        }
    }
    Err(format!("not JSON: {}", tail(trimmed, 200)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn single_object_with_usage_and_cost() {
        let r = parse_result(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"ok",
                "session_id":"s1","duration_ms":1998,"total_cost_usd":0.008,
                "usage":{"input_tokens":3,"output_tokens":6,"cache_read_input_tokens":10}}"#,
        )
        .unwrap();
        let reply = r.into_reply().unwrap();
        assert_eq!(reply.text, "ok");
        assert_eq!(reply.session_id.as_deref(), Some("s1"));
        assert_eq!(reply.cost_usd, Some(0.008));
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 13,
                output_tokens: 6
            })
        );
        assert_eq!(reply.duration, Some(Duration::from_millis(1998)));
    }

    #[test]
    fn older_cost_field() {
        let r = parse_result(r#"{"type":"result","result":"x","cost_usd":0.5}"#).unwrap();
        assert_eq!(r.cost_usd, Some(0.5));
    }

    #[test]
    fn array_form_takes_last_result() {
        let r = parse_result(
            r#"[{"type":"system","subtype":"init"},
                {"type":"result","result":"first","session_id":"a"},
                {"type":"assistant"},
                {"type":"result","result":"last","session_id":"b"}]"#,
        )
        .unwrap();
        assert_eq!(r.result.as_deref(), Some("last"));
        assert_eq!(r.session_id.as_deref(), Some("b"));
    }

    #[test]
    fn error_arm_is_typed() {
        let r = parse_result(
            r#"{"type":"result","subtype":"error_max_turns","is_error":true,
                "errors":["Reached max turns (1)"],"session_id":"s"}"#,
        )
        .unwrap();
        match r.into_reply() {
            Err(RunnerError::Upstream { status, message }) => {
                assert_eq!(status, None);
                assert!(message.contains("error_max_turns"), "{message}");
                assert!(message.contains("Reached max turns"), "{message}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    #[test]
    fn garbage_and_empty_are_errors() {
        assert!(parse_result("").is_err());
        assert!(parse_result("hello").is_err());
        assert!(parse_result(r#"{"type":"assistant"}"#).is_err());
        assert!(parse_result("[1,2]").is_err());
    }
}
