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
//!
//! With `--output-format stream-json` (which, like the real CLI, needs `--verbose`) it prints
//! one JSON object per line: `system/init` (with the session id), then — with
//! `--include-partial-messages` — `stream_event` lines carrying the Anthropic events
//! (`message_start`, `content_block_start`, one `content_block_delta`/`text_delta` per chunk,
//! `content_block_stop`, `message_delta`, `message_stop`), then `assistant` and `result`. A
//! `success` step streams its text in chunks of `chunk_chars` characters (default 8), waiting
//! `delay_ms` milliseconds (default 0) before each. SIGINT while it streams works as in the real
//! CLI: it stops at once, prints a `result` with `subtype: error_during_execution` and
//! `is_error: true`, and exits 1; it appends `{"pid", "chunks_sent"}` to `<record>.interrupted`.

use serde_json::{json, Value};
use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
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
    if output_format(&args) == Some("stream-json") && !args.iter().any(|a| a == "--verbose") {
        eprintln!("Error: When using --print, --output-format=stream-json requires --verbose");
        return ExitCode::from(1);
    }
    let step = match next_step() {
        Ok(step) => step,
        Err(e) => {
            eprintln!("fake-claude: bad script: {e}");
            return ExitCode::from(3);
        }
    };
    let kind = text_of(&step, "kind", "success");

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
            let stderr = text_of(&step, "stderr", "error: unknown option");
            eprintln!("{stderr}");
            ExitCode::from(code(&step, 2))
        }
        "garbage" => {
            let out = text_of(&step, "stdout", "this is not json");
            print(out);
            ExitCode::from(code(&step, 0))
        }
        "error" => {
            let subtype = text_of(&step, "subtype", "error_during_execution");
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
        _ if output_format(&args) == Some("stream-json") => {
            let text = text_of(&step, "result", "echo: {{stdin}}").replace("{{stdin}}", &stdin);
            stream(&step, &args, &session, &text)
        }
        _ => {
            let text = text_of(&step, "result", "echo: {{stdin}}").replace("{{stdin}}", &stdin);
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

fn output_format(args: &[String]) -> Option<&str> {
    args.iter()
        .position(|a| a == "--output-format")
        .and_then(|i| args.get(i + 1))
        .map(String::as_str)
}

/// Set by the SIGINT handler while a stream runs.
static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

#[allow(unsafe_code)]
fn catch_sigint() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(
            libc::SIGINT,
            on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t,
        );
    }
}

/// Waits `ms` milliseconds in small steps; `false` as soon as SIGINT arrived.
fn pause(ms: u64) -> bool {
    let until = std::time::Instant::now() + Duration::from_millis(ms);
    while std::time::Instant::now() < until {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    !INTERRUPTED.load(Ordering::SeqCst)
}

/// The stream-json output of a successful answer, chunk by chunk, stopping at SIGINT.
fn stream(step: &Value, args: &[String], session: &str, text: &str) -> ExitCode {
    catch_sigint();
    let partial = args.iter().any(|a| a == "--include-partial-messages");
    let chunk_chars = step
        .get("chunk_chars")
        .and_then(Value::as_u64)
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(8)
        .max(1);
    let delay = step.get("delay_ms").and_then(Value::as_u64).unwrap_or(0);
    let event = |e: Value| {
        print(&json!({"type": "stream_event", "event": e, "session_id": session}).to_string())
    };
    print(&json!({"type": "system", "subtype": "init", "session_id": session}).to_string());
    if partial {
        event(
            json!({"type": "message_start", "message": {"id": "msg_fake", "model": "fake",
            "content": [], "usage": {"input_tokens": 3, "output_tokens": 1}}}),
        );
        event(json!({"type": "content_block_start", "index": 0,
            "content_block": {"type": "text", "text": ""}}));
    }
    let chars: Vec<char> = text.chars().collect();
    let mut sent = 0;
    for chunk in chars.chunks(chunk_chars) {
        if !pause(delay) {
            return interrupted(session, sent);
        }
        if partial {
            let piece: String = chunk.iter().collect();
            event(json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": piece}}));
        }
        sent += 1;
    }
    if INTERRUPTED.load(Ordering::SeqCst) {
        return interrupted(session, sent);
    }
    let output_tokens = u64::try_from(sent).unwrap_or(u64::MAX);
    if partial {
        event(json!({"type": "content_block_stop", "index": 0}));
        event(
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": output_tokens}}),
        );
        event(json!({"type": "message_stop"}));
    }
    print(
        &json!({"type": "assistant", "session_id": session,
        "message": {"content": [{"type": "text", "text": text}]}})
        .to_string(),
    );
    let cost = step.get("cost").and_then(Value::as_f64).unwrap_or(0.001);
    print(
        &json!({"type": "result", "subtype": "success", "is_error": false,
        "duration_ms": 25, "num_turns": 1, "result": text, "session_id": session,
        "total_cost_usd": cost,
        "usage": {"input_tokens": 3, "output_tokens": output_tokens}})
        .to_string(),
    );
    ExitCode::SUCCESS
}

/// What the real CLI does on SIGINT mid-answer: an error result, then exit.
fn interrupted(session: &str, chunks_sent: usize) -> ExitCode {
    print(
        &json!({"type": "result", "subtype": "error_during_execution", "is_error": true,
        "duration_ms": 12, "num_turns": 1, "session_id": session, "total_cost_usd": 0.0005,
        "usage": {"input_tokens": 3, "output_tokens": chunks_sent},
        "errors": ["Request was aborted."]})
        .to_string(),
    );
    if let Some(record) = std::env::var_os("FAKE_CLAUDE_RECORD") {
        let mut path = record;
        path.push(".interrupted");
        let line = json!({"pid": std::process::id(), "chunks_sent": chunks_sent});
        let written = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = written {
            eprintln!("fake-claude: cannot record the interruption: {e}");
        }
    }
    ExitCode::from(1)
}

/// The script step's string `key`, else `default`.
fn text_of<'a>(step: &'a Value, key: &str, default: &'a str) -> &'a str {
    step.get(key).and_then(Value::as_str).unwrap_or(default)
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
