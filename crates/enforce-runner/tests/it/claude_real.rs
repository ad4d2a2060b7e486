//! The real Claude Code CLI (npm `@anthropic-ai/claude-code`, 2.1.x) against a mock Anthropic
//! Messages API: a paced first answer is cut at a forbidden term (SIGINT to the CLI), and the
//! re-ask resumes the session with feedback naming the code, and passes.
//!
//! The CLI is installed into the target directory with npm the first time; without npm the test
//! says "skipped: npm not found" and passes, and so it does, naming the registry, when npm's
//! registry cannot be reached (a machine without network).

use enforce_core::{Context, Enforcer, Policy, Request, Status};
use enforce_runner::{ClaudeConfig, ClaudeRunner};
use enforce_testkit::mock_anthropic::last_user_text;
use enforce_testkit::MockAnthropic;
use enforce_validators::terms::{Term, Terms};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// The CLI version line the test was written against.
const PACKAGE: &str = "@anthropic-ai/claude-code@2.1";

/// The installed CLI, installing it when npm is there; `None` (after saying so) without npm.
fn claude_cli() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENFORCE_CLAUDE_BIN") {
        return Some(PathBuf::from(path));
    }
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("claude-code");
    let bin = dir.join("node_modules").join(".bin").join("claude");
    if bin.exists() {
        return Some(bin);
    }
    if Command::new("npm").arg("--version").output().is_err() {
        eprintln!(
            "skipped: npm not found (the real Claude Code CLI test installs {PACKAGE} with it)"
        );
        return None;
    }
    if let Err(why) = npm_registry_reachable() {
        eprintln!("skipped: {why} (the real Claude Code CLI test installs {PACKAGE} from it)");
        return None;
    }
    std::fs::create_dir_all(&dir).expect("install directory");
    // Without a package.json at the prefix npm 11 writes one itself, and once, on a fresh
    // target directory, failed reading it back empty (EJSONPARSE in saveIdealTree): start
    // from one of ours, so that npm only adds the dependency to it.
    let manifest = dir.join("package.json");
    if !manifest.exists() {
        std::fs::write(&manifest, "{\"private\": true}\n").expect("package.json");
    }
    let status = Command::new("npm")
        .args([
            "install",
            "--no-audit",
            "--no-fund",
            "--loglevel=error",
            "--prefix",
        ])
        .arg(&dir)
        .arg(PACKAGE)
        .status()
        .expect("npm runs");
    assert!(status.success(), "npm install {PACKAGE} failed");
    assert!(bin.exists(), "npm installed no {}", bin.display());
    Some(bin)
}

/// Whether a TCP connection to npm's configured registry opens within a few seconds, so that a
/// machine without network skips the test instead of failing in `npm install`.
fn npm_registry_reachable() -> Result<(), String> {
    use std::net::{TcpStream, ToSocketAddrs};
    let out = Command::new("npm")
        .args(["config", "get", "registry"])
        .output()
        .map_err(|e| format!("npm config get registry failed: {e}"))?;
    let url = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (default_port, rest) = match url.split_once("://") {
        Some(("http", rest)) => (80, rest),
        Some((_, rest)) => (443, rest),
        None => (443, url.as_str()),
    };
    let authority = rest.split('/').next().unwrap_or_default();
    let address = if authority.contains(':') {
        authority.to_string()
    } else {
        format!("{authority}:{default_port}")
    };
    let unreachable =
        |e: &dyn std::fmt::Display| format!("the npm registry {url} is unreachable ({e})");
    let addrs = address.to_socket_addrs().map_err(|e| unreachable(&e))?;
    let mut last = String::from("no address");
    for addr in addrs {
        match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(_) => return Ok(()),
            Err(e) => last = e.to_string(),
        }
    }
    Err(unreachable(&last))
}

const BAD: &str = "This is guaranteed to work. Here is a long explanation of why it always works, in every case, written slowly so the cut comes long before the end.";
const GOOD: &str = "This should work in most cases.";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_cli_is_cut_at_a_forbidden_term_and_passes_after_a_resumed_re_ask() {
    let Some(cli) = claude_cli() else { return };
    // 40 deltas 100 ms apart: four seconds in full, the term in the first few.
    let mock = MockAnthropic::start([BAD, GOOD], 40, Duration::from_millis(100))
        .await
        .expect("mock Anthropic API");
    let home = tempfile::tempdir().expect("home");
    let mut config = ClaudeConfig {
        binary: cli,
        working_dir: Some(home.path().to_path_buf()),
        timeout_secs: 120.0,
        ..ClaudeConfig::default()
    };
    for (key, value) in [
        ("HOME", home.path().to_string_lossy().to_string()),
        ("ANTHROPIC_API_KEY", "sk-ant-test".to_string()),
        ("ANTHROPIC_BASE_URL", mock.url()),
        ("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1".to_string()),
        ("DISABLE_AUTOUPDATER", "1".to_string()),
        ("DISABLE_TELEMETRY", "1".to_string()),
        ("DISABLE_ERROR_REPORTING", "1".to_string()),
    ] {
        config.env.insert(key.to_string(), value);
    }
    let runner = ClaudeRunner::new(config).expect("runner");
    let terms = Terms::builder("wording")
        .forbid(Term::new("guaranteed").code("FORBIDDEN_TERM"))
        .build()
        .expect("terms");
    let enforcer =
        Enforcer::new(vec![Box::new(terms)]).with_policy(Policy::builder().max_retries(2).build());
    let outcome = enforcer
        .run(&runner, &Request::prompt("Will it work?"), &Context::new())
        .await;

    assert_eq!(outcome.status, Status::Passed, "{}", outcome.to_json_line());
    assert_eq!(outcome.response.as_deref().map(str::trim), Some(GOOD));
    let cut = outcome.attempts[0]
        .cut
        .as_ref()
        .expect("the first attempt was cut");
    assert_eq!(cut.codes, ["FORBIDDEN_TERM"]);
    assert!(
        cut.bytes < BAD.len(),
        "cut after {} of {} bytes",
        cut.bytes,
        BAD.len()
    );
    assert!(
        mock.abandoned_streams() >= 1,
        "the CLI kept reading the first answer"
    );
    // The re-ask resumed the same session and named the code.
    let turns = mock.main_turns();
    assert_eq!(turns.len(), 2, "main turns: {turns:?}");
    let feedback = last_user_text(&turns[1]);
    assert!(feedback.contains("FORBIDDEN_TERM"), "{feedback}");
    assert_eq!(
        outcome.attempts[1].session_id, outcome.attempts[0].session_id,
        "the re-ask continues the first session"
    );
}
