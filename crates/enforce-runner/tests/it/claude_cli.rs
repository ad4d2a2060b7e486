//! The Claude CLI runner against `fake-claude`, which prints the documented result formats.

use enforce_core::Ask;
use enforce_core::{Context, Enforcer, Issue, Reply, Request, Runner, RunnerError, Status};
use enforce_runner::{ClaudeConfig, ClaudeRunner};
use enforce_testkit::{process_is_gone, FakeClaude};
use serde_json::json;
use std::time::{Duration, Instant};

fn runner(fake: &FakeClaude, timeout_secs: f64) -> ClaudeRunner {
    ClaudeRunner::new(ClaudeConfig {
        binary: fake.binary().to_path_buf(),
        env: fake.env(),
        model: Some("sonnet".into()),
        permission_mode: Some("dontAsk".into()),
        max_turns: Some(2),
        allowed_tools: vec!["Read".into()],
        timeout_secs,
        kill_grace_secs: 0.3,
        ..ClaudeConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn success_parses_text_session_cost_and_usage() {
    let fake = FakeClaude::new(json!([{"kind": "success", "result": "Hello there",
        "session_id": "sess-1", "cost": 0.25,
        "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 100}}]))
    .unwrap();
    let request = Request {
        messages: vec![
            enforce_core::Message::system("Answer briefly."),
            enforce_core::Message::user("Say hello"),
        ],
        ..Request::default()
    };
    let reply = runner(&fake, 10.0)
        .ask(Ask::new(&request))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "Hello there");
    assert_eq!(reply.session_id.as_deref(), Some("sess-1"));
    assert_eq!(reply.cost_usd, Some(0.25));
    let usage = reply.usage.unwrap();
    assert_eq!((usage.input_tokens, usage.output_tokens), (110, 4));

    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.stdin, "Say hello");
    assert_eq!(&call.args[..3], ["-p", "--output-format", "json"]);
    assert_eq!(call.value_of("--model"), Some("sonnet"));
    assert_eq!(call.value_of("--permission-mode"), Some("dontAsk"));
    assert_eq!(call.value_of("--max-turns"), Some("2"));
    assert_eq!(call.value_of("--allowedTools"), Some("Read"));
    assert_eq!(
        call.value_of("--append-system-prompt"),
        Some("Answer briefly.")
    );
    assert_eq!(call.resume_id(), None);
}

#[tokio::test]
async fn older_cost_field_is_read() {
    let fake =
        FakeClaude::new(json!([{"result": "x", "cost": 0.5, "old_cost_field": true}])).unwrap();
    let reply = runner(&fake, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.cost_usd, Some(0.5));
}

#[tokio::test]
async fn follow_up_resumes_the_session_with_only_the_feedback() {
    // The CLI hands back a new id on resume: the next follow-up must use that one.
    let fake = FakeClaude::new(json!([
        {"result": "draft 1", "session_id": "sess-A"},
        {"result": "draft 2", "session_id": "sess-B"},
        {"result": "draft 3"},
    ]))
    .unwrap();
    let r = runner(&fake, 10.0);
    let request = Request::prompt("Write an ADR");
    let first = r.ask(Ask::new(&request)).reply().await.unwrap();
    let second = r
        .ask(Ask::follow_up(
            &request,
            &first,
            "Add the section ## Kontext",
        ))
        .reply()
        .await
        .unwrap();
    assert_eq!(second.session_id.as_deref(), Some("sess-B"));
    let third = r
        .ask(Ask::follow_up(&request, &second, "Add the step marker"))
        .reply()
        .await
        .unwrap();
    assert_eq!(third.text, "draft 3");
    assert_eq!(third.session_id.as_deref(), Some("sess-B"));

    let calls = fake.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].resume_id(), None);
    assert_eq!(calls[1].resume_id(), Some("sess-A"));
    assert_eq!(calls[1].stdin, "Add the section ## Kontext");
    assert_eq!(calls[2].resume_id(), Some("sess-B"));
    assert_eq!(calls[2].stdin, "Add the step marker");
}

#[tokio::test]
async fn follow_up_without_session_sends_one_earlier_answer() {
    let fake = FakeClaude::new(json!([{"result": "fixed"}])).unwrap();
    let r = runner(&fake, 10.0);
    let request = Request::prompt("Q");
    let previous = Reply::text("old answer");
    r.ask(Ask::follow_up(&request, &previous, "fix it"))
        .reply()
        .await
        .unwrap();
    let call = &fake.calls()[0];
    assert_eq!(call.resume_id(), None);
    assert_eq!(
        call.stdin,
        "User:\nQ\n\nAssistant:\nold answer\n\nUser:\nfix it"
    );
}

#[tokio::test]
async fn the_loop_resumes_the_session_and_sends_the_feedback() {
    struct NeedsOk;
    #[enforce_core::async_trait]
    impl enforce_core::Validator for NeedsOk {
        fn name(&self) -> &str {
            "needs_ok"
        }
        async fn validate(&self, response: &str, _: &Context) -> enforce_core::Validation {
            Ok(if response.contains("OK") {
                vec![]
            } else {
                vec![Issue::error("needs_ok", "MISSING_OK", "No OK.").with_hint("Write OK.")]
            })
        }
    }
    let fake = FakeClaude::new(json!([
        {"result": "nope", "session_id": "s-9"},
        {"result": "now OK"},
    ]))
    .unwrap();
    let r = runner(&fake, 10.0);
    let outcome = Enforcer::new(vec![Box::new(NeedsOk)])
        .run(&r, &Request::prompt("Say OK"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.attempts.len(), 2);
    let calls = fake.calls();
    assert_eq!(calls[1].resume_id(), Some("s-9"));
    assert!(calls[1].stdin.contains("MISSING_OK"), "{}", calls[1].stdin);
}

#[tokio::test]
async fn array_form_uses_the_last_result() {
    let fake = FakeClaude::new(json!([{"kind": "array", "result": "from array",
        "session_id": "arr-1"}]))
    .unwrap();
    let reply = runner(&fake, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "from array");
    assert_eq!(reply.session_id.as_deref(), Some("arr-1"));
}

#[tokio::test]
async fn is_error_result_is_a_typed_error_with_the_message() {
    let fake = FakeClaude::new(json!([{"kind": "error", "subtype": "error_max_turns",
        "errors": ["Reached maximum number of turns (2)"]}]))
    .unwrap();
    match runner(&fake, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
    {
        Err(RunnerError::Upstream { status, message }) => {
            assert_eq!(status, None);
            assert!(message.contains("error_max_turns"), "{message}");
            assert!(
                message.contains("Reached maximum number of turns"),
                "{message}"
            );
        }
        other => panic!("expected an upstream error, got {other:?}"),
    }
}

#[tokio::test]
async fn non_zero_exit_without_result_carries_stderr_tail() {
    let fake = FakeClaude::new(json!([{"kind": "exit", "code": 7,
        "stderr": "error: unknown option '--frobnicate'"}]))
    .unwrap();
    match runner(&fake, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
    {
        Err(RunnerError::Process { message, exit_code }) => {
            assert_eq!(exit_code, Some(7));
            assert!(
                message.contains("unknown option '--frobnicate'"),
                "{message}"
            );
        }
        other => panic!("expected a process error, got {other:?}"),
    }
}

#[tokio::test]
async fn garbage_is_a_protocol_error() {
    let fake =
        FakeClaude::new(json!([{"kind": "garbage", "stdout": "Welcome to Claude!"}])).unwrap();
    match runner(&fake, 10.0)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await
    {
        Err(RunnerError::Protocol { message }) => {
            assert!(message.contains("Welcome to Claude!"), "{message}")
        }
        other => panic!("expected a protocol error, got {other:?}"),
    }
}

#[tokio::test]
async fn missing_binary_names_it() {
    let r = ClaudeRunner::new(ClaudeConfig {
        binary: "/nonexistent/dir/claude-xyz".into(),
        ..ClaudeConfig::default()
    })
    .unwrap();
    match r.ask(Ask::new(&Request::prompt("q"))).reply().await {
        Err(RunnerError::Process { message, exit_code }) => {
            assert_eq!(exit_code, None);
            assert!(message.contains("/nonexistent/dir/claude-xyz"), "{message}");
            assert!(message.contains("no such program"), "{message}");
        }
        other => panic!("expected a process error, got {other:?}"),
    }
}

async fn assert_hang_is_killed(ignore_interrupt: bool) {
    let fake = FakeClaude::new(json!([{"kind": "hang", "child": true,
        "ignore_interrupt": ignore_interrupt}]))
    .unwrap();
    let started = Instant::now();
    let result = runner(&fake, 0.5)
        .ask(Ask::new(&Request::prompt("q")))
        .reply()
        .await;
    assert_eq!(result, Err(RunnerError::Timeout { after_ms: 500 }));
    assert!(started.elapsed() < Duration::from_secs(5));

    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    let child = calls[0].child_pid.expect("the fake started a child");
    let pids = [calls[0].pid, child];
    // The grandchild is reaped by whoever inherited it: give that a moment.
    let deadline = Instant::now() + Duration::from_secs(3);
    while !pids.iter().all(|&p| process_is_gone(p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pid in pids {
        assert!(process_is_gone(pid), "process {pid} outlived the call");
    }
}

#[tokio::test]
async fn hang_is_interrupted_and_no_child_is_left() {
    assert_hang_is_killed(false).await;
}

#[tokio::test]
async fn hang_that_ignores_sigint_is_killed_with_its_child() {
    assert_hang_is_killed(true).await;
}

#[tokio::test]
async fn ask_with_a_session_id_continues_it_with_the_last_user_message() {
    let fake = FakeClaude::new(json!([{"result": "turn 2"}])).unwrap();
    let request = Request {
        messages: vec![
            enforce_core::Message::user("turn 1"),
            enforce_core::Message::assistant("answer 1"),
            enforce_core::Message::user("and now?"),
        ],
        session_id: Some("chat-7".into()),
        ..Request::default()
    };
    let reply = runner(&fake, 10.0)
        .ask(Ask::new(&request))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.session_id.as_deref(), Some("chat-7"));
    let call = &fake.calls()[0];
    assert_eq!(call.resume_id(), Some("chat-7"));
    assert_eq!(call.stdin, "and now?");
}

#[tokio::test]
async fn a_cancelled_call_leaves_no_process() {
    let fake = FakeClaude::new(json!([{"kind": "hang", "child": true}])).unwrap();
    let r = runner(&fake, 60.0);
    let request = Request::prompt("q");
    // Drop the call half-way, as a server does when its client goes away.
    let cancelled = tokio::time::timeout(
        Duration::from_millis(500),
        r.ask(Ask::new(&request)).reply(),
    )
    .await;
    assert!(cancelled.is_err());
    let calls = fake.calls();
    assert_eq!(calls.len(), 1);
    let pids = [calls[0].pid, calls[0].child_pid.expect("child started")];
    let deadline = Instant::now() + Duration::from_secs(3);
    while !pids.iter().all(|&p| process_is_gone(p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for pid in pids {
        assert!(
            process_is_gone(pid),
            "process {pid} outlived the cancelled call"
        );
    }
}
