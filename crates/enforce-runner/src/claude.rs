//! The Claude Code CLI runner: `claude -p --output-format json`, prompt on stdin, follow-ups
//! resume the session with `--resume <session_id>`.
//!
//! Streamed (the loop's way of asking): `--output-format stream-json --verbose
//! --include-partial-messages`; the text arrives in `stream_event` lines
//! (`content_block_delta`/`text_delta`), the session id in the first line (`system/init`), the
//! answer, cost and usage in the final `result`. Dropping the stream interrupts the CLI: SIGINT
//! to its process group, SIGKILL after `kill_grace_secs`. (The real CLI then prints a `result`
//! with `subtype: error_during_execution` and stores the interrupted turn without the partial
//! answer, so the feedback after a cut quotes what was wrong.)

use crate::error::{duration_from_secs, timeout_from_secs, ConfigError};
use crate::process::{
    exit_failure, process_events, run_process, tail, ProcessSpec, StreamingProcess,
};
use crate::prompt::render_prompt;
use enforce_core::{
    runner::FinishReason, Ask, Reply, ReplyStream, Request, Runner, RunnerError, StreamEvent, Usage,
};
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
    /// After the timeout or a cut, how long the CLI gets between SIGINT and SIGKILL, in
    /// seconds (default 2).
    pub kill_grace_secs: f64,
    /// Stream answers (`--output-format stream-json --verbose --include-partial-messages`), so
    /// a failing answer can be cut short (default `true`). `false` for CLI versions without
    /// stream-json: every answer is read whole.
    pub stream: bool,
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
            stream: true,
        }
    }
}

/// Asks the Claude Code CLI. A follow-up continues the previous reply's session with
/// `--resume <id>` and sends only the feedback; the session id is always taken from the latest
/// result, since some CLI versions hand back a new one on resume.
///
/// ```no_run
/// use enforce_core::{Ask, Request, Runner};
/// use enforce_runner::{ClaudeConfig, ClaudeRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = ClaudeRunner::new(ClaudeConfig::default())?;
/// let request = Request::prompt("Write an ADR");
/// let first = runner.ask(Ask::new(&request)).reply().await?;
/// let feedback = "Add the section ## Kontext";
/// let second = runner.ask(Ask::follow_up(&request, &first, feedback)).reply().await?;
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
        let timeout = timeout_from_secs("timeout_secs", config.timeout_secs)?;
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
        self.args_with(&["json"], system, resume)
    }

    /// The arguments for one streamed call: `-p --output-format stream-json --verbose
    /// --include-partial-messages`, then as [`args`](Self::args).
    pub fn stream_args(&self, system: Option<&str>, resume: Option<&str>) -> Vec<String> {
        self.args_with(
            &["stream-json", "--verbose", "--include-partial-messages"],
            system,
            resume,
        )
    }

    fn args_with(
        &self,
        format: &[&str],
        system: Option<&str>,
        resume: Option<&str>,
    ) -> Vec<String> {
        let c = &self.config;
        let mut args: Vec<String> = vec!["-p".into(), "--output-format".into()];
        args.extend(format.iter().map(|a| a.to_string()));
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

    fn spec(&self, args: Vec<String>, prompt: String) -> ProcessSpec {
        ProcessSpec {
            program: self.config.binary.clone(),
            args: args.into_iter().map(OsString::from).collect(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            stdin: prompt,
            timeout: self.timeout,
            kill_grace: self.kill_grace,
        }
    }

    /// What one call sends: the system text, the session to resume and the prompt. A
    /// follow-up with a session sends the feedback alone; without one, the conversation, the
    /// last answer and the feedback.
    fn what_to_send(
        request: &Request,
        follow_up: Option<(&Reply, &str)>,
    ) -> (Option<String>, Option<String>, String) {
        let rendered = render_prompt(&request.messages);
        match follow_up {
            Some((previous, feedback)) => match &previous.session_id {
                Some(id) => (rendered.system, Some(id.clone()), feedback.to_string()),
                None => {
                    let messages = enforce_core::runner::stateless_follow_up_messages(
                        request, previous, feedback,
                    );
                    let rendered = render_prompt(&messages);
                    (rendered.system, None, rendered.prompt)
                }
            },
            // Continuing an earlier conversation: the session holds the turns before.
            None => match &request.session_id {
                Some(id) => (
                    rendered.system,
                    Some(id.clone()),
                    request.last_user_text().unwrap_or_default().to_string(),
                ),
                None => (rendered.system, None, rendered.prompt),
            },
        }
    }

    async fn call(
        &self,
        system: Option<&str>,
        resume: Option<&str>,
        prompt: String,
    ) -> Result<Reply, RunnerError> {
        let spec = self.spec(self.args(system, resume), prompt);
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

impl Runner for ClaudeRunner {
    /// A streamed call (`stream-json`), or the whole-reply call when the ask or the
    /// configuration does not stream.
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let follow_up = ask.follow_up.map(|f| (f.previous, f.feedback));
        let (system, resume, prompt) = Self::what_to_send(ask.request, follow_up);
        if !(ask.stream && self.config.stream) {
            return ReplyStream::whole(async move {
                self.call(system.as_deref(), resume.as_deref(), prompt)
                    .await
            });
        }
        let spec = self.spec(
            self.stream_args(system.as_deref(), resume.as_deref()),
            prompt,
        );
        let program = self.config.binary.display().to_string();
        stream_json(spec, program)
    }
}

/// One line of `--output-format stream-json`, as far as enforce uses it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamLine {
    /// `system/init`: the session.
    Session(String),
    /// A `text_delta` of a `content_block_delta` stream event.
    Text(String),
    /// Usage the API reported so far (`message_start`, `message_delta`).
    Usage {
        /// Input tokens (with cache reads and writes), when this event carries them.
        input_tokens: Option<u64>,
        /// Output tokens, when this event carries them.
        output_tokens: Option<u64>,
        /// Why the model stopped (`message_delta`'s `delta.stop_reason`: `end_turn`,
        /// `max_tokens`, `tool_use`...), when this event says.
        stop_reason: Option<String>,
    },
    /// The final `result`.
    Result(ClaudeResult),
    /// Anything else (`assistant`, `user`, `system/status`, other events): ignored.
    Other,
}

/// Reads one line of `claude -p --output-format stream-json --verbose
/// --include-partial-messages`; `None` when it is not JSON.
///
/// ```
/// use enforce_runner::{parse_stream_line, StreamLine};
///
/// let line = r#"{"type":"stream_event","event":{"type":"content_block_delta","index":0,
///                "delta":{"type":"text_delta","text":"Hel"}}}"#;
/// assert_eq!(parse_stream_line(line), Some(StreamLine::Text("Hel".into())));
/// ```
pub fn parse_stream_line(line: &str) -> Option<StreamLine> {
    let v: Value = serde_json::from_str(line.trim()).ok()?;
    let kind = v.get("type").and_then(Value::as_str).unwrap_or_default();
    Some(match kind {
        "result" => StreamLine::Result(from_object(&v)),
        "system" if v.get("subtype").and_then(Value::as_str) == Some("init") => {
            match v.get("session_id").and_then(Value::as_str) {
                Some(id) => StreamLine::Session(id.to_string()),
                None => StreamLine::Other,
            }
        }
        "stream_event" => {
            let event = v.get("event").unwrap_or(&Value::Null);
            match event
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or_default()
            {
                "content_block_delta" => {
                    let delta = event.get("delta").unwrap_or(&Value::Null);
                    match (
                        delta.get("type").and_then(Value::as_str),
                        delta.get("text").and_then(Value::as_str),
                    ) {
                        (Some("text_delta"), Some(text)) => StreamLine::Text(text.to_string()),
                        _ => StreamLine::Other,
                    }
                }
                "message_start" => match event.pointer("/message/usage") {
                    Some(u) if u.is_object() => StreamLine::Usage {
                        input_tokens: Some(input_tokens(u)),
                        output_tokens: u.get("output_tokens").and_then(Value::as_u64),
                        stop_reason: None,
                    },
                    _ => StreamLine::Other,
                },
                "message_delta" => {
                    let output_tokens = event
                        .pointer("/usage/output_tokens")
                        .and_then(Value::as_u64);
                    let stop_reason = event
                        .pointer("/delta/stop_reason")
                        .and_then(Value::as_str)
                        .map(str::to_string);
                    if output_tokens.is_none() && stop_reason.is_none() {
                        StreamLine::Other
                    } else {
                        StreamLine::Usage {
                            input_tokens: None,
                            output_tokens,
                            stop_reason,
                        }
                    }
                }
                _ => StreamLine::Other,
            }
        }
        _ => StreamLine::Other,
    })
}

/// What a streamed call has seen so far.
struct StreamState {
    process: StreamingProcess,
    program: String,
    line: Vec<u8>,
    usage: Usage,
    /// The API's last `stop_reason`: the CLI's result does not carry one.
    stop_reason: Option<String>,
    started: Instant,
}

/// The stream of one `stream-json` call: deltas as the CLI prints them, then the reply from
/// its `result`. Dropping it drops the process, which interrupts the CLI.
fn stream_json<'a>(spec: ProcessSpec, program: String) -> ReplyStream<'a> {
    let started = Instant::now();
    let state = StreamingProcess::spawn(&spec).map(|process| StreamState {
        process,
        program,
        line: Vec::new(),
        usage: Usage::default(),
        stop_reason: None,
        started,
    });
    process_events(state, |mut state| async move {
        let item = next_stream_item(&mut state).await;
        (item, state)
    })
}

/// Reads lines until one means something to the loop.
async fn next_stream_item(state: &mut StreamState) -> Result<StreamEvent, RunnerError> {
    loop {
        if !state.process.next_line(&mut state.line).await? {
            return Err(end_without_result(state).await);
        }
        let line = String::from_utf8_lossy(&state.line);
        match parse_stream_line(&line) {
            Some(StreamLine::Text(text)) => return Ok(StreamEvent::Text(text)),
            Some(StreamLine::Session(id)) => return Ok(StreamEvent::Session(id)),
            Some(StreamLine::Usage {
                input_tokens,
                output_tokens,
                stop_reason,
            }) => {
                if stop_reason.is_some() {
                    state.stop_reason = stop_reason;
                }
                if let Some(n) = input_tokens {
                    state.usage.input_tokens = n;
                }
                if let Some(n) = output_tokens {
                    state.usage.output_tokens = n;
                }
                return Ok(StreamEvent::Spent {
                    usage: Some(state.usage),
                    cost_usd: None,
                });
            }
            Some(StreamLine::Result(result)) => {
                let mut reply = result.into_reply()?;
                if reply.duration.is_none() {
                    reply.duration = Some(state.started.elapsed());
                }
                if reply.finish_reason.is_none() {
                    reply.finish_reason = state.stop_reason.as_deref().map(FinishReason::parse);
                }
                return Ok(StreamEvent::Done(reply));
            }
            _ => {}
        }
    }
}

/// stdout ended without a `result`: the exit status and stderr say why.
async fn end_without_result(state: &mut StreamState) -> RunnerError {
    let program = state.program.clone();
    match state.process.finish().await {
        Ok(output) if !output.status.success() => exit_failure(&program, &output),
        Ok(_) => RunnerError::Protocol {
            message: format!("`{program}` printed no result object"),
        },
        Err(error) => error,
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
    /// `stop_reason`, where the CLI's result carries one.
    pub stop_reason: Option<String>,
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
            finish_reason: self.stop_reason.as_deref().map(FinishReason::parse),
            ..Reply::default()
        })
    }
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// Input tokens of a usage object: cache reads and writes count, since all of them were sent.
fn input_tokens(u: &Value) -> u64 {
    u64_field(u, "input_tokens")
        .saturating_add(u64_field(u, "cache_creation_input_tokens"))
        .saturating_add(u64_field(u, "cache_read_input_tokens"))
}

fn from_object(v: &Value) -> ClaudeResult {
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        input_tokens: input_tokens(u),
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
        stop_reason: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(str::to_string),
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
    #[test]
    fn message_delta_carries_the_stop_reason_and_a_truncated_answer_reads_as_length() {
        let line = r#"{"type":"stream_event","event":{"type":"message_delta",
            "delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":256}}}"#;
        assert_eq!(
            super::parse_stream_line(&line.replace('\n', " ")),
            Some(super::StreamLine::Usage {
                input_tokens: None,
                output_tokens: Some(256),
                stop_reason: Some("max_tokens".into()),
            })
        );
        let result = super::from_object(&serde_json::json!({
            "type": "result", "result": "cut", "stop_reason": "max_tokens"
        }));
        let reply = result.into_reply().expect("a reply");
        assert_eq!(
            reply.finish_reason,
            Some(enforce_core::runner::FinishReason::Length)
        );
    }

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
