//! What the real-client tests share: the clients themselves, installed once per test run under
//! the target directory (one Python venv for every Python client, one npm prefix for the
//! JavaScript ones, pinned versions), an upstream that answers by the question, a contract
//! such an answer can break, and the runner of a client script that prints one JSON line per
//! case.

use enforce_core::Ask;
use enforce_core::{
    async_trait, runner::ToolCall, Context, Enforcer, Issue, Policy, Reply, ReplyStream, Request,
    Role, Runner, StreamEvent, Usage, Validation, Validator,
};
use enforce_server::{
    FailureResponse, Model, ModelOptions, Server, ServerConfig, StreamMode, Upstream,
};
use futures_util::StreamExt;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

/// The Python clients, pinned: one venv for all of them.
const PYTHON_CLIENTS: &[&str] = &[
    "anthropic==2.14.0",
    "openai==3.57.0",
    "openai-agents==0.24.0",
    "langchain-openai==1.7.4",
];

/// The installer of the Python clients, from PyPI into their venv.
const UV: &str = "uv==0.13.9";

/// The JavaScript clients, pinned: one npm prefix for all of them.
const JS_CLIENTS: &[&str] = &["ai@7.0.173", "@ai-sdk/openai@4.0.118", "zod@4.6.7"];

/// A passing answer.
pub const HELLO: &str = "Hello from enforce.";
/// The answer after the weather tool's result came back.
pub const AFTER_TOOL: &str = "It is 12 C in Oslo.";
/// A structured answer that meets `{name: string, age: integer}`.
pub const PERSON: &str = r#"{"name": "Ada", "age": 36}"#;
/// The code of the issue a "Break" answer raises.
pub const BROKEN_CODE: &str = "FORBIDDEN_WORD";

fn target_dir() -> PathBuf {
    option_env!("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target"))
}

fn run(command: &mut Command, what: &str) -> Result<(), String> {
    let output = command
        .output()
        .map_err(|e| format!("{what} could not start: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{what} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        ))
    }
}

/// A marker file naming what was installed: a changed pin list reinstalls.
fn installed(dir: &Path, pins: &[&str]) -> bool {
    std::fs::read_to_string(dir.join(".enforce-pins")).is_ok_and(|s| s == pins.join("\n"))
}

fn mark_installed(dir: &Path, pins: &[&str]) -> Result<(), String> {
    std::fs::write(dir.join(".enforce-pins"), pins.join("\n")).map_err(|e| e.to_string())
}

/// The shared venv's python with every Python client, installed on first use (tests that
/// need it at the same time wait for one install); `Err` says why it cannot be had.
pub fn python_clients() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Mutex<Option<Result<PathBuf, String>>>> = OnceLock::new();
    let mut slot = PYTHON.get_or_init(|| Mutex::new(None)).lock().unwrap();
    slot.get_or_insert_with(|| {
        let venv = target_dir().join("py-clients");
        let python = venv.join("bin/python");
        if python.exists() && installed(&venv, PYTHON_CLIENTS) {
            return Ok(python);
        }
        if Command::new("python3").arg("--version").output().is_err() {
            return Err("python3 not found".into());
        }
        // `--clear`: what an interrupted install left is not trusted.
        run(
            Command::new("python3")
                .args(["-m", "venv", "--clear"])
                .arg(&venv),
            "python3 -m venv",
        )?;
        // uv installs these in about a sixth of pip's time (measured: 11 s against 65 s);
        // pip without byte-compiling stays the way when uv cannot be had.
        let pip = |args: &[&str]| {
            let mut command = Command::new(venv.join("bin/pip"));
            command
                .args(["install", "-q", "--disable-pip-version-check"])
                .args(args);
            command
        };
        let with_uv = run(&mut pip(&[UV]), "pip install uv").and_then(|()| {
            run(
                Command::new(venv.join("bin/uv"))
                    .args(["pip", "install", "-q", "--python"])
                    .arg(&python)
                    .args(PYTHON_CLIENTS),
                "uv pip install",
            )
        });
        if with_uv.is_err() {
            let mut args = vec!["--no-compile"];
            args.extend(PYTHON_CLIENTS);
            run(&mut pip(&args), "pip install (PyPI unreachable?)")?;
        }
        mark_installed(&venv, PYTHON_CLIENTS)?;
        Ok(python)
    })
    .clone()
}

/// The npm prefix with every JavaScript client, installed on first use; `Err` says why it
/// cannot be had (no node or npm, or the registry out of reach).
pub fn js_clients() -> Result<PathBuf, String> {
    static PREFIX: OnceLock<Mutex<Option<Result<PathBuf, String>>>> = OnceLock::new();
    let mut slot = PREFIX.get_or_init(|| Mutex::new(None)).lock().unwrap();
    slot.get_or_insert_with(|| {
        let prefix = target_dir().join("js-clients");
        if prefix.join("node_modules").exists() && installed(&prefix, JS_CLIENTS) {
            return Ok(prefix);
        }
        for tool in ["node", "npm"] {
            if Command::new(tool).arg("--version").output().is_err() {
                return Err(format!("{tool} not found"));
            }
        }
        // What an interrupted install left is not trusted.
        let _ = std::fs::remove_dir_all(&prefix);
        std::fs::create_dir_all(&prefix).map_err(|e| e.to_string())?;
        // The scripts are ES modules; a package.json keeps npm from looking further up.
        std::fs::write(
            prefix.join("package.json"),
            r#"{"private": true, "type": "module"}"#,
        )
        .map_err(|e| e.to_string())?;
        run(
            Command::new("npm")
                .current_dir(&prefix)
                .args([
                    "install",
                    "--silent",
                    "--no-audit",
                    "--no-fund",
                    "--save-exact",
                ])
                .args(JS_CLIENTS),
            "npm install (registry unreachable?)",
        )?;
        mark_installed(&prefix, JS_CLIENTS)?;
        Ok(prefix)
    })
    .clone()
}

/// Fails an answer that says "BROKEN": the contract a "Break" question's answer breaks.
struct NoBrokenWord;

#[async_trait]
impl Validator for NoBrokenWord {
    fn name(&self) -> &str {
        "no_broken_word"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("BROKEN") {
            vec![Issue::error(
                "no_broken_word",
                BROKEN_CODE,
                "The answer says BROKEN.",
            )]
        } else {
            vec![]
        })
    }
}

/// The upstream, answering by the question: the weather tool's call when tools are offered
/// and "weather" is asked (and a sentence once its result came back), a call of the tool that
/// `tool_choice` names with JSON arguments, JSON when a format is asked for (missing `age`
/// for a "Break" question, in both), else a sentence ("BROKEN" for "Break", and for "Mend"
/// until it is asked again). It records every question it was asked, so a
/// test can count a case's calls.
#[derive(Default)]
pub struct ByQuestion {
    asked: Arc<Mutex<Vec<String>>>,
    /// How long a streamed reply waits after its first word (see [`paced`](Self::paced)).
    pace: Duration,
}

impl ByQuestion {
    /// The same upstream (one record of questions) streaming its replies with a pause after
    /// the first word: a draft model's first draft then reaches the client before the
    /// verdict, so its stream has begun when a failure comes (the failure is in the stream,
    /// not a plain 422 before the first byte), however fast the rest is.
    pub fn paced(&self, pace: Duration) -> ByQuestion {
        ByQuestion {
            asked: self.asked.clone(),
            pace,
        }
    }

    /// How often a question containing `tag` reached the upstream.
    pub fn calls(&self, tag: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|q| q.contains(tag))
            .count()
    }

    /// Asserts that each case named by a tag reached the upstream twice (one ask and one
    /// re-ask): no client asked again for an unresolved answer.
    pub fn assert_not_retried(&self, tags: &[&str]) {
        for tag in tags {
            assert_eq!(self.calls(tag), 2, "{tag}: asked again by the client?");
        }
    }

    fn reply(&self, request: &Request, again: bool) -> Reply {
        let question = request.last_user_text().unwrap_or("").to_string();
        let broken = question.contains("Break") || (question.contains("Mend") && !again);
        let after_tool = request
            .messages
            .last()
            .is_some_and(|m| m.role == Role::Tool);
        self.asked.lock().unwrap().push(question.clone());
        let person = if broken { r#"{"name": "Ada"}"# } else { PERSON };
        let forced_tool = request
            .params
            .get("tool_choice")
            .and_then(|c| c.pointer("/function/name"))
            .and_then(|n| n.as_str());
        let reply = if after_tool {
            Reply::text(AFTER_TOOL)
        } else if question.contains("weather") && request.params.contains_key("tools") {
            Reply {
                tool_calls: vec![ToolCall::new(
                    "call_weather_1",
                    "get_weather",
                    r#"{"city":"Oslo"}"#,
                )],
                ..Reply::default()
            }
        } else if let Some(name) = forced_tool {
            Reply {
                tool_calls: vec![ToolCall::new("call_forced_1", name, person)],
                ..Reply::default()
            }
        } else if request.params.contains_key("response_format") {
            Reply::text(person)
        } else if broken {
            Reply::text("This answer is BROKEN.")
        } else {
            Reply::text(HELLO)
        };
        Reply {
            usage: Some(Usage {
                input_tokens: 11,
                output_tokens: 7,
            }),
            ..reply
        }
    }
}

/// A reply as a model streams it: its text in words, then the whole reply.
/// A reply as a model streams it: its text in words, then the whole reply; `pace` after the
/// first word.
fn streamed(reply: Reply, pace: Duration) -> ReplyStream<'static> {
    let mut events: Vec<_> = reply
        .text
        .split_inclusive(' ')
        .map(|word| Ok(StreamEvent::Text(word.to_string())))
        .collect();
    events.push(Ok(StreamEvent::Done(reply)));
    let rest = events.split_off(1);
    let pause = futures_util::stream::once(async move {
        if !pace.is_zero() {
            tokio::time::sleep(pace).await;
        }
    });
    ReplyStream::new(
        futures_util::stream::iter(events)
            .chain(pause.flat_map(move |()| futures_util::stream::iter(rest.clone()))),
    )
}

impl Runner for ByQuestion {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let reply = self.reply(ask.request, ask.follow_up.is_some());
        if ask.stream {
            return streamed(reply, self.pace);
        }
        ReplyStream::whole(std::future::ready(Ok(reply)))
    }
}

/// Two models on one upstream, both with the no-"BROKEN" contract, one re-ask and an
/// unresolved answer as an error: `m` holds a stream until its answer passed, `draft` shows
/// every attempt as it comes, as reasoning (its upstream paced, 50 ms after a reply's first
/// word).
pub fn server(upstream: Arc<ByQuestion>) -> Server {
    forwarding_server(upstream, None)
}

/// [`server`], `m` forwarding the endpoints enforce does not enforce to `passthrough`.
pub fn forwarding_server(upstream: Arc<ByQuestion>, passthrough: Option<Upstream>) -> Server {
    let paced: Arc<ByQuestion> = Arc::new(upstream.paced(Duration::from_millis(50)));
    let model = |id: &str, runner: Arc<ByQuestion>, stream_mode: StreamMode| {
        let enforcer = Enforcer::new(vec![Box::new(NoBrokenWord)])
            .with_policy(Policy::builder().max_retries(1).build());
        Model::new(id, runner, Arc::new(enforcer)).with_options(ModelOptions {
            on_unresolved: FailureResponse::Error,
            stream_mode,
            ..ModelOptions::default()
        })
    };
    let m = model("m", upstream, StreamMode::Hold);
    let m = match passthrough {
        Some(passthrough) => m.with_passthrough(passthrough),
        None => m,
    };
    Server::builder(ServerConfig::default())
        .model(m)
        .model(model("draft", paced, StreamMode::Draft))
        .build()
        .unwrap()
}

/// The cases a client script printed, one JSON object per line, by their `case` name.
pub struct Cases {
    lines: Vec<Value>,
    stdout: String,
}

impl Cases {
    /// Runs `command` to its end; panics with its output when it failed.
    pub async fn run(mut command: Command) -> Cases {
        let output = tokio::task::spawn_blocking(move || command.output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
        // Shown with a failing test: every case, not only the one asserted first.
        eprintln!("{stdout}");
        assert!(
            output.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let lines = stdout
            .lines()
            .filter(|l| l.starts_with('{'))
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        Cases { lines, stdout }
    }

    /// The case named `name`.
    pub fn get(&self, name: &str) -> &Value {
        self.lines
            .iter()
            .find(|c| c["case"] == name)
            .unwrap_or_else(|| panic!("no case {name} in {}", self.stdout))
    }

    /// The case named `name`, which must have succeeded.
    pub fn ok(&self, name: &str) -> &Value {
        let case = self.get(name);
        assert_eq!(case["ok"], true, "{name}: {case}");
        case
    }

    /// The case named `name`, which must have failed with the error type `error` and a
    /// message that carries `needle`.
    pub fn failed(&self, name: &str, error: &str, needle: &str) -> &Value {
        self.failed_as_one_of(name, &[error], needle)
    }

    /// [`failed`](Self::failed), with one of several error types: a held stream whose verdict
    /// is known before its first byte may be refused with a plain 422 instead of failing in
    /// the stream, and the SDKs raise each their own way.
    pub fn failed_as_one_of(&self, name: &str, errors: &[&str], needle: &str) -> &Value {
        let case = self.get(name);
        assert_eq!(case["ok"], false, "{name}: {case}");
        let error = case["error"].as_str().unwrap_or("");
        assert!(
            errors.contains(&error),
            "{name}: not one of {errors:?}: {case}"
        );
        let message = case["message"].as_str().unwrap_or("");
        assert!(message.contains(needle), "{name}: {case}");
        case
    }
}

/// The strings of a JSON array joined: streamed deltas as the answer they make.
pub fn joined(pieces: &Value) -> String {
    pieces
        .as_array()
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Which installed clients a script runs with.
#[derive(Debug, Clone, Copy)]
pub enum Clients {
    /// `python SCRIPT ARGS...` in the venv of [`python_clients`].
    Python,
    /// `node SCRIPT PREFIX ARGS...` with the npm prefix of [`js_clients`].
    JavaScript,
}

/// Runs the client script `script` (a file next to this one) with `args`, the clients
/// installed first (once per test run); `None`, after saying "skipped", when they cannot be.
pub async fn run_script(clients: Clients, script: &str, args: &[&str]) -> Option<Cases> {
    let install = match clients {
        Clients::Python => python_clients,
        Clients::JavaScript => js_clients,
    };
    let installed = or_skip(tokio::task::spawn_blocking(install).await.unwrap())?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/it")
        .join(script);
    let mut command = match clients {
        Clients::Python => Command::new(&installed),
        Clients::JavaScript => Command::new("node"),
    };
    command.arg(&script);
    if let Clients::JavaScript = clients {
        command.arg(&installed);
    }
    command.args(args);
    Some(Cases::run(command).await)
}

/// `Some(value)` of a `Result` from an installer, or prints why the test is skipped.
fn or_skip<T>(installed: Result<T, String>) -> Option<T> {
    match installed {
        Ok(value) => Some(value),
        Err(why) => {
            eprintln!("skipped: {why}");
            None
        }
    }
}
