//! End-to-end tests of `enforce demo` and `enforce run` against the fake Claude CLI and the
//! mock OpenAI-compatible server.

use crate::text;
use enforce_testkit::{
    ErrorShape, FakeClaude, MockOpenAi, MockReply, MockScript, ScratchDir, Then,
};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::{Command, Output};

const ENFORCE: &str = env!("CARGO_BIN_EXE_enforce");

fn enforce(args: &[&str], env: &BTreeMap<String, String>) -> Output {
    Command::new(ENFORCE)
        .args(args)
        .envs(env)
        .env_remove("ENFORCE_CONFIG")
        .env_remove("ENFORCE_MODEL")
        .env_remove("ENFORCE_BASE_URL")
        .env_remove("ENFORCE_CLAUDE_BIN")
        .output()
        .expect("the enforce binary runs")
}

/// Runs the binary off the async runtime, so the mock server keeps serving meanwhile.
async fn enforce_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        enforce(&args, &BTreeMap::new())
    })
    .await
    .expect("the blocking task finishes")
}

/// `enforce run --config CONFIG --profile PROFILE [--audit AUDIT] PROMPT`, off the runtime.
async fn run_profile(
    config: &std::path::Path,
    profile: &str,
    audit: Option<&std::path::Path>,
    prompt: &str,
) -> Output {
    let mut args = vec![
        "run".to_string(),
        "--config".into(),
        config.display().to_string(),
        "--profile".into(),
        profile.into(),
    ];
    if let Some(audit) = audit {
        args.extend(["--audit".to_string(), audit.display().to_string()]);
    }
    args.push(prompt.into());
    enforce_async(args).await
}

fn audit_records(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("each audit line is JSON"))
        .collect()
}

#[test]
fn demo_shows_issues_feedback_repair_and_outcome() {
    let out = enforce(&["demo"], &BTreeMap::new());
    let stdout = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}\n{}",
        text(&out.stderr)
    );
    let first = stdout.find("attempt 1/2").expect("attempt 1 shown");
    let second = stdout.find("attempt 2/2").expect("attempt 2 shown");
    assert!(first < second);
    let attempt1 = &stdout[first..second];
    assert!(attempt1.contains("MISSING_ADR_SECTION"), "{attempt1}");
    assert!(attempt1.contains("MISSING_STEP_MARKER"), "{attempt1}");
    assert!(
        attempt1.contains("feedback sent to the model"),
        "{attempt1}"
    );
    let rest = &stdout[second..];
    assert!(!rest.contains("MISSING_ADR_SECTION"), "{rest}");
    assert!(rest.contains("MISSING_STEP_MARKER"), "{rest}");
    assert!(rest.contains("repair: `step_marker`"), "{rest}");
    assert!(
        rest.contains("outcome: repaired after 2 attempt(s)"),
        "{rest}"
    );
    let final_response = &rest[rest.find("final response").unwrap()..];
    assert!(final_response.contains("<!-- STEP:"), "{final_response}");
}

#[test]
fn demo_json_prints_the_audit_record() {
    let out = enforce(&["demo", "--json"], &BTreeMap::new());
    let stdout = text(&out.stdout);
    let last: Value = serde_json::from_str(stdout.lines().last().unwrap()).unwrap();
    assert_eq!(last["status"], "repaired");
    assert_eq!(last["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(last["profile"], "adr");
    assert!(last["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')));
}

#[test]
fn run_with_claude_resumes_the_session_and_passes() {
    let fake = FakeClaude::new(json!([
        {"result": "Here is the answer.", "session_id": "sess-42", "cost": 0.01},
        {"result": "Here is the answer.\n<!-- STEP: done -->"},
    ]))
    .unwrap();
    let audit = fake.dir().join("audit.jsonl");
    let out = enforce(
        &[
            "run",
            "--runner",
            "claude",
            "--claude-bin",
            fake.binary().to_str().unwrap(),
            "--profile",
            "chat",
            "--audit",
            audit.to_str().unwrap(),
            "Answer the question.",
        ],
        &fake.env(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        text(&out.stdout),
        "Here is the answer.\n<!-- STEP: done -->\n"
    );
    assert!(stderr.contains("passed after 2 attempt(s)"), "{stderr}");
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "one summary line: {stderr}"
    );

    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].stdin, "Answer the question.");
    assert_eq!(calls[1].resume_id(), Some("sess-42"));
    assert!(
        calls[1].stdin.contains("MISSING_STEP_MARKER"),
        "{}",
        calls[1].stdin
    );

    let records = audit_records(&audit);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["status"], "passed");
    assert_eq!(records[0]["profile"], "chat");
    assert_eq!(records[0]["runner"], "claude");
    assert_eq!(records[0]["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(records[0]["session_id"], "sess-42");
}

#[test]
fn run_with_a_failing_claude_exits_4() {
    let fake = FakeClaude::new(
        json!([{"kind": "error", "subtype": "error_during_execution",
        "errors": ["OAuth token has expired"]}]),
    )
    .unwrap();
    let audit = fake.dir().join("audit.jsonl");
    let out = enforce(
        &[
            "run",
            "--claude-bin",
            fake.binary().to_str().unwrap(),
            "--audit",
            audit.to_str().unwrap(),
            "q",
        ],
        &fake.env(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("OAuth token has expired"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(audit_records(&audit)[0]["status"], "aborted");
}

#[test]
fn run_with_a_missing_claude_exits_4_naming_it() {
    let out = enforce(
        &["run", "--claude-bin", "/nonexistent/claude-cli", "q"],
        &BTreeMap::new(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("/nonexistent/claude-cli"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_openai_reasks_statelessly_and_passes() {
    let mock = MockOpenAi::start(MockScript::new().then(Then::FailFirst {
        invalid: "The answer, unmarked.".into(),
        valid: "The answer.\n<!-- STEP: done -->".into(),
        marker: "MISSING_STEP_MARKER".into(),
    }))
    .await
    .unwrap();
    let out = enforce_async(vec![
        "run".into(),
        "--runner".into(),
        "openai".into(),
        "--base-url".into(),
        mock.url(),
        "--model".into(),
        "llama3.2".into(),
        "--system".into(),
        "Be brief.".into(),
        "What now?".into(),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(text(&out.stdout), "The answer.\n<!-- STEP: done -->\n");
    let sent = mock.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["model"], "llama3.2");
    let second = sent[1].messages();
    assert_eq!(second.len(), 4, "{second:?}");
    assert_eq!(
        second[2],
        ("assistant".into(), "The answer, unmarked.".into())
    );
    assert!(second[3].1.contains("MISSING_STEP_MARKER"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_a_failing_server_exits_4() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::error(
        ErrorShape::OpenAi,
        401,
        "Incorrect API key provided",
    )))
    .await
    .unwrap();
    let out = enforce_async(vec![
        "run".into(),
        "--base-url".into(),
        mock.url(),
        "--model".into(),
        "m".into(),
        "q".into(),
    ])
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("Incorrect API key provided"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_from_a_config_file_can_end_unresolved() {
    let mock = MockOpenAi::start(
        MockScript::new().reply(MockReply::text("Sure! Here you go: name = Ada")),
    )
    .await
    .unwrap();
    let dir = ScratchDir::new("enforce-run").unwrap();
    let config = dir.path().join("enforce.yaml");
    std::fs::write(
        &config,
        format!(
            "runner:\n  type: openai\n  base_url: {}\n  model: m\n  retry:\n    max_retries: 0\n\
             profiles:\n  data:\n    validators: [json]\n    max_retries: 1\n",
            mock.url()
        ),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let out = run_profile(&config, "data", Some(&audit), "Give me the user as JSON.").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("INVALID_JSON"), "{stderr}");
    assert!(out.stdout.is_empty(), "an unresolved answer is not printed");
    assert_eq!(mock.chat_requests().len(), 2);
    let records = audit_records(&audit);
    assert_eq!(records[0]["status"], "unresolved");
    assert_eq!(records[0]["profile"], "data");
}

#[test]
fn usage_and_config_errors_exit_2() {
    let none = BTreeMap::new();
    let out = enforce(&["run", "--profile", "nope", "q"], &none);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no profile named `nope`"));

    let dir = ScratchDir::new("enforce-run").unwrap();
    let config = dir.path().join("bad.yaml");
    std::fs::write(&config, "runner:\n  type: telepathy\n").unwrap();
    let out = enforce(&["run", "--config", config.to_str().unwrap(), "q"], &none);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("bad.yaml"),
        "{}",
        text(&out.stderr)
    );

    let out = enforce(&["run", "--runner", "openai", "q"], &none);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("needs a model"));

    let out = enforce(&["run", "   "], &none);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn run_reads_the_prompt_from_stdin() {
    use std::io::Write;
    let mut child = Command::new(ENFORCE)
        .args([
            "run",
            "--command",
            "cat; echo; echo '<!-- STEP: done -->'",
            "-",
        ])
        .env_remove("ENFORCE_CONFIG")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"from stdin")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "from stdin\n<!-- STEP: done -->\n");
}

#[test]
fn an_unavailable_required_validator_exits_3() {
    let dir = ScratchDir::new("enforce-run").unwrap();
    let config = dir.path().join("enforce.yaml");
    std::fs::write(
        &config,
        "validators:\n  lint:\n    type: external\n    command: [/nonexistent/linter]\n    \
         fail_mode: closed\nprofiles:\n  linted:\n    validators: [lint]\n",
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let out = enforce(
        &[
            "run",
            "--config",
            config.to_str().unwrap(),
            "--profile",
            "linted",
            "--command",
            "echo fine",
            "--audit",
            audit.to_str().unwrap(),
            "q",
        ],
        &BTreeMap::new(),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("unavailable"), "{stderr}");
    assert!(out.stdout.is_empty());
    assert_eq!(audit_records(&audit)[0]["status"], "unavailable");
}

#[test]
fn run_session_continues_the_claude_session_across_invocations() {
    let fake = FakeClaude::new(json!([
        {"result": "What do you need?\n<!-- STEP: what -->", "session_id": "sess-7"},
        {"result": "Why?\n<!-- STEP: why -->", "session_id": "sess-7"},
    ]))
    .unwrap();
    let mut env = fake.env();
    let sessions = fake.dir().join("sessions");
    env.insert("ENFORCE_SESSION_DIR".into(), sessions.display().to_string());
    let bin = fake.binary().to_str().unwrap().to_string();
    for prompt in ["I need a cache.", "For speed."] {
        let out = enforce(
            &[
                "run",
                "--runner",
                "claude",
                "--claude-bin",
                &bin,
                "--session",
                "adr-1",
                prompt,
            ],
            &env,
        );
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].resume_id(), None);
    // The second invocation resumed the first one's session and sent only its own prompt.
    assert_eq!(calls[1].resume_id(), Some("sess-7"));
    assert_eq!(calls[1].stdin, "For speed.");
    let stored: Value =
        serde_json::from_slice(&std::fs::read(sessions.join("adr-1.json")).unwrap()).unwrap();
    assert_eq!(stored["runner_session_id"], "sess-7");
    assert_eq!(stored["messages"].as_array().unwrap().len(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_session_sends_a_stateless_runner_the_history() {
    let mock = MockOpenAi::start(MockScript::new()).await.unwrap();
    mock.push(MockReply::text("What do you need?\n<!-- STEP: what -->"));
    mock.push(MockReply::text("Why?\n<!-- STEP: why -->"));
    let dir = ScratchDir::new("run-session").unwrap();
    let sessions = dir.path().join("sessions");
    for prompt in ["I need a cache.", "For speed."] {
        let args: Vec<String> = [
            "run",
            "--runner",
            "openai",
            "--base-url",
            &mock.url(),
            "--model",
            "m",
            "--session",
            "chat-9",
            prompt,
        ]
        .map(String::from)
        .into();
        let sessions = sessions.clone();
        let out = tokio::task::spawn_blocking(move || {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let env = BTreeMap::from([(
                "ENFORCE_SESSION_DIR".to_string(),
                sessions.display().to_string(),
            )]);
            enforce(&args, &env)
        })
        .await
        .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let sent = mock.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].messages().len(), 1);
    let second = sent[1].messages();
    assert_eq!(
        second,
        vec![
            ("user".into(), "I need a cache.".into()),
            (
                "assistant".into(),
                "What do you need?\n<!-- STEP: what -->".into()
            ),
            ("user".into(), "For speed.".into()),
        ]
    );
    // A bad id is a usage error before any model call.
    let out = enforce(&["run", "--session", "../x", "q"], &BTreeMap::new());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
}

/// `reask: auto` in `enforce run`: the statistics of the runner's model say a resample fixes
/// a missing step marker and feedback does not, so the re-ask is a fresh ask, and the audit
/// says why. (`repair: last`: by default `auto` would append the marker, a repair, and ask
/// no more.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_reask_auto_takes_the_strategy_the_statistics_favour() {
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("No marker."),
        MockReply::text("Done.\n<!-- STEP: done -->"),
    ]))
    .await
    .unwrap();
    let dir = ScratchDir::new("enforce-run-auto").unwrap();
    let row = |strategy: &str, valid: u32| {
        json!({"model": "m", "profile": "p", "code": "MISSING_STEP_MARKER",
               "strategy": strategy, "attempts": 20, "valid": valid,
               "tokens": 2000, "tokens_counted": 20})
    };
    let stats = json!({"version": 1, "rows": [row("feedback", 1), row("resample", 19)]});
    std::fs::write(dir.path().join("stats.json"), stats.to_string()).unwrap();
    let config = dir.path().join("enforce.yaml");
    std::fs::write(
        &config,
        format!(
            "runner:\n  type: openai\n  base_url: {}\n  model: m\n\
             profiles:\n  p:\n    validators: [step_marker]\n    reask: auto\n    \
             repair: last\n    reask_auto: {{stats: stats.json, explore: false}}\n",
            mock.url()
        ),
    )
    .unwrap();
    let audit = dir.path().join("audit.jsonl");
    let out = run_profile(&config, "p", Some(&audit), "What now?").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let sent = mock.chat_requests();
    assert_eq!(sent.len(), 2);
    // A resample: the question alone, no failed answer and no feedback.
    assert_eq!(sent[1].messages(), sent[0].messages());
    let records = audit_records(&audit);
    let second = &records[0]["attempts"][1];
    assert_eq!(second["reask"], "resample", "{second}");
    assert_eq!(second["reask_choice"]["by"], "mean", "{second}");
    assert_eq!(second["reask_choice"]["compared"][1]["valid"], 19);

    // A statistics file that is missing is an error naming it, before any model call.
    std::fs::remove_file(dir.path().join("stats.json")).unwrap();
    let out = run_profile(&config, "p", None, "What now?").await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("stats.json"), "{stderr}");
    assert_eq!(mock.chat_requests().len(), 2);
}
