//! `fake-claude`: a stand-in for `claude -p --output-format json`, for tests.
//!
//! It reads the prompt on stdin and prints what the real CLI prints, following a script:
//!
//! - `FAKE_CLAUDE_SCRIPT`: a JSON file holding an array of steps, one per call (the last step
//!   repeats). The call count lives in `<script>.count`. Without a script every call succeeds
//!   with `echo: <stdin>`.
//! - `FAKE_CLAUDE_RECORD`: a file to which every call appends one JSON line
//!   `{"args": [...], "stdin": "...", "pid": N, "child_pid": N?}`.
//!
//! A step is an object with `kind`:
//!
//! | kind | prints |
//! |---|---|
//! | `success` (default) | one result object; `result` (`{{stdin}}` is replaced by the prompt), `session_id`, `cost` (as `total_cost_usd`, or `cost_usd` with `"old_cost_field": true`), `usage` |
//! | `array` | the `--verbose` array form: init, assistant, then the result |
//! | `error` | the error arm on stdout: `is_error: true`, `subtype`, `errors`, exit 1 |
//! | `garbage` | `stdout` as given (default `this is not json`), exit `code` (default 0) |
//! | `exit` | nothing on stdout, `stderr` on stderr, exit `code` (default 2) |
//! | `hang` | never answers; with `"child": true` it first starts a child that also hangs; with `"ignore_interrupt": true` both ignore SIGINT so only SIGKILL stops them |
//!
//! The session id defaults to the one given with `--resume`, else `fake-session-1`.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

fn main() -> ExitCode {
    if std::env::var_os("FAKE_CLAUDE_HANG_CHILD").is_some() {
        hang();
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut stdin = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut stdin) {
        eprintln!("fake-claude: cannot read stdin: {e}");
        return ExitCode::from(3);
    }
    if !args.iter().any(|a| a == "-p" || a == "--print") {
        eprintln!("fake-claude: only print mode (-p) is supported");
        return ExitCode::from(2);
    }
    let step = match next_step() {
        Ok(step) => step,
        Err(e) => {
            eprintln!("fake-claude: bad script: {e}");
            return ExitCode::from(3);
        }
    };
    let kind = step
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("success");

    let mut child_pid = None;
    if kind == "hang" {
        if step.get("ignore_interrupt").and_then(Value::as_bool) == Some(true) {
            ignore_sigint();
        }
        if step.get("child").and_then(Value::as_bool) == Some(true) {
            match std::env::current_exe().and_then(|exe| {
                std::process::Command::new(exe)
                    .env("FAKE_CLAUDE_HANG_CHILD", "1")
                    .stdin(std::process::Stdio::null())
                    .spawn()
            }) {
                Ok(child) => child_pid = Some(child.id()),
                Err(e) => eprintln!("fake-claude: cannot start child: {e}"),
            }
        }
    }
    if let Err(e) = record(&args, &stdin, child_pid) {
        eprintln!("fake-claude: cannot record the call: {e}");
        return ExitCode::from(3);
    }

    let resumed = args
        .iter()
        .position(|a| a == "--resume")
        .and_then(|i| args.get(i + 1))
        .cloned();
    let session = step
        .get("session_id")
        .and_then(Value::as_str)
        .map(str::to_string)
        .or(resumed)
        .unwrap_or_else(|| "fake-session-1".to_string());

    match kind {
        "hang" => hang(),
        "exit" => {
            let stderr = step
                .get("stderr")
                .and_then(Value::as_str)
                .unwrap_or("error: unknown option");
            eprintln!("{stderr}");
            ExitCode::from(code(&step, 2))
        }
        "garbage" => {
            let out = step
                .get("stdout")
                .and_then(Value::as_str)
                .unwrap_or("this is not json");
            print(out);
            ExitCode::from(code(&step, 0))
        }
        "error" => {
            let subtype = step
                .get("subtype")
                .and_then(Value::as_str)
                .unwrap_or("error_during_execution");
            let errors = step
                .get("errors")
                .cloned()
                .unwrap_or_else(|| json!(["something went wrong"]));
            let out = json!({
                "type": "result", "subtype": subtype, "is_error": true,
                "duration_ms": 12, "num_turns": 1, "session_id": session,
                "total_cost_usd": 0.0, "errors": errors,
            });
            print(&out.to_string());
            ExitCode::from(code(&step, 1))
        }
        _ => {
            let text = step
                .get("result")
                .and_then(Value::as_str)
                .unwrap_or("echo: {{stdin}}")
                .replace("{{stdin}}", &stdin);
            let cost = step.get("cost").and_then(Value::as_f64).unwrap_or(0.001);
            let usage = step
                .get("usage")
                .cloned()
                .unwrap_or_else(|| json!({"input_tokens": 3, "output_tokens": 6}));
            let mut result = json!({
                "type": "result", "subtype": "success", "is_error": false,
                "duration_ms": 25, "num_turns": 1, "result": text,
                "session_id": session, "usage": usage,
            });
            let cost_field = if step.get("old_cost_field").and_then(Value::as_bool) == Some(true) {
                "cost_usd"
            } else {
                "total_cost_usd"
            };
            result[cost_field] = json!(cost);
            if kind == "array" {
                let all = json!([
                    {"type": "system", "subtype": "init", "session_id": session},
                    {"type": "assistant", "message": {"content": [{"type": "text", "text": "thinking"}]}},
                    result,
                ]);
                print(&all.to_string());
            } else {
                print(&result.to_string());
            }
            ExitCode::SUCCESS
        }
    }
}

fn code(step: &Value, default: u8) -> u8 {
    step.get("code")
        .and_then(Value::as_u64)
        .and_then(|c| u8::try_from(c).ok())
        .unwrap_or(default)
}

fn print(text: &str) {
    let mut out = std::io::stdout().lock();
    // A closed stdout is the caller's choice; nothing to report to.
    let _ignored = writeln!(out, "{text}").and_then(|()| out.flush());
}

fn hang() -> ! {
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

#[allow(unsafe_code)]
fn ignore_sigint() {
    // SAFETY: installs the SIG_IGN disposition; no handler code runs.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
    }
}

/// The step for this call, advancing the counter next to the script.
fn next_step() -> Result<Value, String> {
    let Some(script) = std::env::var_os("FAKE_CLAUDE_SCRIPT").map(PathBuf::from) else {
        return Ok(json!({"kind": "success"}));
    };
    let text =
        std::fs::read_to_string(&script).map_err(|e| format!("{}: {e}", script.display()))?;
    let steps: Vec<Value> = serde_json::from_str(&text).map_err(|e| e.to_string())?;
    let mut counter = script.clone().into_os_string();
    counter.push(".count");
    let counter = PathBuf::from(counter);
    let done: usize = std::fs::read_to_string(&counter)
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    std::fs::write(&counter, (done + 1).to_string()).map_err(|e| e.to_string())?;
    steps
        .get(done)
        .or_else(|| steps.last())
        .cloned()
        .ok_or_else(|| "the script has no steps".to_string())
}

fn record(args: &[String], stdin: &str, child_pid: Option<u32>) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("FAKE_CLAUDE_RECORD") else {
        return Ok(());
    };
    let line = json!({
        "args": args, "stdin": stdin, "pid": std::process::id(), "child_pid": child_pid,
    });
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    writeln!(file, "{line}")
}
