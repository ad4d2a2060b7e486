//! The command runner: any program, the prompt on stdin, the reply on stdout.
//!
//! Streamed (the loop's way of asking), stdout is the stream: what the program prints arrives
//! as it prints it, so the loop can cut a failing answer short (the program then gets SIGINT,
//! SIGKILL after `kill_grace_secs`).

use crate::error::{duration_from_secs, timeout_from_secs, ConfigError};
use crate::process::{exit_failure, process_events, run_process, ProcessSpec, StreamingProcess};
use crate::prompt::{inline_system, render_prompt};
use enforce_core::{
    runner::ToolFeedback, Ask, Message, Reply, ReplyStream, Runner, RunnerError, StreamEvent,
};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// How the command is run.
///
/// ```
/// use enforce_runner::CommandConfig;
///
/// let c: CommandConfig = serde_json::from_str(
///     r#"{"program": "ollama", "args": ["run", "llama3.2"], "timeout_secs": 90}"#).unwrap();
/// assert_eq!(c.args, ["run", "llama3.2"]);
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CommandConfig {
    /// The program: a path, or a name looked up on `PATH`.
    pub program: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// The directory it runs in; default the current one.
    pub working_dir: Option<PathBuf>,
    /// Longest one call may take, in seconds (default 120).
    pub timeout_secs: f64,
    /// After the timeout, seconds between SIGINT and SIGKILL (default 2).
    pub kill_grace_secs: f64,
}

impl Default for CommandConfig {
    fn default() -> Self {
        CommandConfig {
            program: PathBuf::new(),
            args: Vec::new(),
            env: BTreeMap::new(),
            working_dir: None,
            timeout_secs: 120.0,
            kill_grace_secs: 2.0,
        }
    }
}

/// Runs a program once per ask with the prompt on stdin; its stdout (trailing whitespace
/// trimmed) is the reply, a non-zero exit an error carrying stderr's tail. Stateless: a
/// follow-up sends the conversation, the previous answer and the feedback as one transcript.
///
/// ```no_run
/// use enforce_core::{Ask, Request, Runner};
/// use enforce_runner::{CommandConfig, CommandRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = CommandRunner::new(CommandConfig {
///     program: "ollama".into(),
///     args: vec!["run".into(), "llama3.2".into()],
///     ..CommandConfig::default()
/// })?;
/// let reply = runner.ask(Ask::new(&Request::prompt("Say hi"))).reply().await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct CommandRunner {
    config: CommandConfig,
    timeout: Duration,
    kill_grace: Duration,
}

impl CommandRunner {
    /// A runner with this configuration; fails on an empty program or a bad timeout.
    pub fn new(config: CommandConfig) -> Result<Self, ConfigError> {
        if config.program.as_os_str().is_empty() {
            return Err(ConfigError::Missing { field: "program" });
        }
        let timeout = timeout_from_secs("timeout_secs", config.timeout_secs)?;
        let kill_grace = duration_from_secs("kill_grace_secs", config.kill_grace_secs)?;
        Ok(CommandRunner {
            config,
            timeout,
            kill_grace,
        })
    }

    fn spec(&self, messages: &[Message]) -> ProcessSpec {
        ProcessSpec {
            program: self.config.program.clone(),
            args: self.config.args.iter().map(OsString::from).collect(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            stdin: inline_system(render_prompt(messages)),
            timeout: self.timeout,
            kill_grace: self.kill_grace,
        }
    }

    async fn call(&self, messages: &[Message]) -> Result<Reply, RunnerError> {
        let spec = self.spec(messages);
        let started = Instant::now();
        let output = run_process(&spec).await?;
        if !output.status.success() {
            return Err(exit_failure(
                &self.config.program.display().to_string(),
                &output,
            ));
        }
        Ok(Reply {
            text: output.stdout.trim_end().to_string(),
            duration: Some(started.elapsed()),
            ..Reply::default()
        })
    }
}

impl Runner for CommandRunner {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let messages = ask.messages(ToolFeedback::ToolMessages);
        if ask.stream {
            return self.stream(&messages);
        }
        ReplyStream::whole(async move { self.call(&messages).await })
    }
}

/// Bytes read from stdout per delta, at most.
const CHUNK_BYTES: usize = 8 * 1024;

/// A streamed call's state: the process, what it printed, and an incomplete UTF-8 sequence
/// carried to the next read.
struct Printing {
    process: StreamingProcess,
    program: String,
    text: String,
    carry: Vec<u8>,
    started: Instant,
}

impl CommandRunner {
    fn stream<'a>(&self, messages: &[Message]) -> ReplyStream<'a> {
        let started = Instant::now();
        let state = StreamingProcess::spawn(&self.spec(messages)).map(|process| Printing {
            process,
            program: self.config.program.display().to_string(),
            text: String::new(),
            carry: Vec::new(),
            started,
        });
        process_events(state, |mut state| async move {
            let item = next_printed(&mut state).await;
            (item, state)
        })
    }
}

/// The next piece of stdout as text, or (at the end) the whole reply.
async fn next_printed(state: &mut Printing) -> Result<StreamEvent, RunnerError> {
    let mut buf = vec![0u8; CHUNK_BYTES];
    loop {
        let n = state.process.next_chunk(&mut buf).await?;
        if n == 0 {
            let output = state.process.finish().await?;
            if !output.status.success() {
                return Err(exit_failure(&state.program, &output));
            }
            if !state.carry.is_empty() {
                state.text.push_str(&String::from_utf8_lossy(&state.carry));
            }
            return Ok(StreamEvent::Done(Reply {
                text: state.text.trim_end().to_string(),
                duration: Some(state.started.elapsed()),
                ..Reply::default()
            }));
        }
        state.carry.extend_from_slice(&buf[..n]);
        // Hand over the longest valid UTF-8 prefix; keep a character cut by the read.
        let valid = match std::str::from_utf8(&state.carry) {
            Ok(_) => state.carry.len(),
            Err(e) if e.error_len().is_none() => e.valid_up_to(),
            // Invalid bytes (not a cut character): replaced, as a whole-reply read does.
            Err(_) => state.carry.len(),
        };
        let piece = String::from_utf8_lossy(&state.carry[..valid]).into_owned();
        state.carry.drain(..valid);
        if !piece.is_empty() {
            state.text.push_str(&piece);
            return Ok(StreamEvent::Text(piece));
        }
    }
}
