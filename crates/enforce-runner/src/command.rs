//! The command runner: any program, the prompt on stdin, the reply on stdout.

use crate::error::{duration_from_secs, ConfigError};
use crate::process::{exit_failure, run_process, ProcessSpec};
use crate::prompt::{inline_system, render_prompt};
use enforce_core::{
    async_trait, stateless_follow_up_messages, Message, Reply, Request, Runner, RunnerError,
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
/// use enforce_core::{Request, Runner};
/// use enforce_runner::{CommandConfig, CommandRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = CommandRunner::new(CommandConfig {
///     program: "ollama".into(),
///     args: vec!["run".into(), "llama3.2".into()],
///     ..CommandConfig::default()
/// })?;
/// let reply = runner.ask(&Request::prompt("Say hi")).await?;
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
        let timeout = duration_from_secs("timeout_secs", config.timeout_secs)?;
        let kill_grace = duration_from_secs("kill_grace_secs", config.kill_grace_secs)?;
        Ok(CommandRunner {
            config,
            timeout,
            kill_grace,
        })
    }

    async fn call(&self, messages: &[Message]) -> Result<Reply, RunnerError> {
        let spec = ProcessSpec {
            program: self.config.program.clone(),
            args: self.config.args.iter().map(OsString::from).collect(),
            env: self.config.env.clone(),
            working_dir: self.config.working_dir.clone(),
            stdin: inline_system(render_prompt(messages)),
            timeout: self.timeout,
            kill_grace: self.kill_grace,
        };
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

#[async_trait]
impl Runner for CommandRunner {
    async fn ask(&self, request: &Request) -> Result<Reply, RunnerError> {
        self.call(&request.messages).await
    }

    async fn follow_up(
        &self,
        request: &Request,
        previous: &Reply,
        feedback: &str,
    ) -> Result<Reply, RunnerError> {
        self.call(&stateless_follow_up_messages(request, previous, feedback))
            .await
    }
}
