//! Streamed answers from the Claude CLI (`fake-claude`'s stream-json) and from commands, cut
//! short by the loop's early abort.

use crate::common::NoAcme;
use enforce_core::Ask;
use enforce_core::{
    Context, Enforcer, Policy, Reply, Request, Runner, RunnerError, Status, StreamEvent,
};
use enforce_runner::{
    parse_stream_line, ClaudeConfig, ClaudeRunner, CommandConfig, CommandRunner, StreamLine,
};
use enforce_testkit::FakeClaude;
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

fn claude(fake: &FakeClaude, timeout_secs: f64) -> ClaudeRunner {
    ClaudeRunner::new(ClaudeConfig {
        binary: fake.binary().to_path_buf(),
        env: fake.env(),
        timeout_secs,
        kill_grace_secs: 1.0,
        ..ClaudeConfig::default()
    })
    .unwrap()
}

const LONG: &str = "We recommend Acme, the supplier we trust, for reasons we would go on to list \
                    at length, one after the other, for quite a while longer than anyone needs.";

/// Everything a stream yields, errors included.
async fn collect(runner: &dyn Runner, request: &Request) -> Vec<Result<StreamEvent, RunnerError>> {
    runner.ask(Ask::new(request).streamed()).collect().await
}

#[tokio::test]
async fn claude_streams_deltas_then_the_reply_from_the_result() {
    let fake = FakeClaude::new(
        json!([{"kind": "success", "result": "Hello, streamed world.",
        "session_id": "sess-s", "chunk_chars": 5, "cost": 0.02}]),
    )
    .unwrap();
    let items = collect(&claude(&fake, 10.0), &Request::prompt("Hi")).await;
    let events: Vec<StreamEvent> = items.into_iter().map(Result::unwrap).collect();
    assert_eq!(events[0], StreamEvent::Session("sess-s".into()));
    let text: String = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(text, "Hello, streamed world.");
    let deltas = events
        .iter()
        .filter(|e| matches!(e, StreamEvent::Text(_)))
        .count();
    assert_eq!(deltas, 5, "one delta per chunk of 5 characters");
    let Some(StreamEvent::Done(reply)) = events.last() else {
        panic!("ends with the reply: {events:?}")
    };
    assert_eq!(reply.text, "Hello, streamed world.");
    assert_eq!(reply.session_id.as_deref(), Some("sess-s"));
    assert_eq!(reply.cost_usd, Some(0.02));
    assert_eq!(reply.usage.unwrap().output_tokens, 5);
    // The API's `stop_reason` (the result object has none) is the reply's finish reason.
    assert_eq!(
        reply.finish_reason,
        Some(enforce_core::runner::FinishReason::Stop)
    );
    let call = &fake.calls()[0];
    assert_eq!(
        &call.args[..5],
        [
            "-p",
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-partial-messages"
        ]
    );
}

#[tokio::test]
async fn a_cut_interrupts_the_cli_and_the_reask_resumes_its_session() {
    let fake = FakeClaude::new(json!([
        {"kind": "success", "result": LONG, "session_id": "sess-cut", "chunk_chars": 4,
         "delay_ms": 15},
        {"kind": "success", "result": "We recommend a local supplier.", "chunk_chars": 4},
    ]))
    .unwrap();
    let enforcer = Enforcer::new(vec![Box::new(NoAcme)])
        .with_policy(Policy::builder().partial_check_bytes(4).build());
    let started = Instant::now();
    let outcome = enforcer
        .run(
            &claude(&fake, 30.0),
            &Request::prompt("Recommend one."),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let cut = outcome.attempts[0]
        .cut
        .as_ref()
        .expect("the first answer was cut");
    assert_eq!(cut.codes, ["FORBIDDEN_TERM"]);
    assert!(cut.bytes < LONG.len() / 2, "{cut:?}");
    // 40 chunks at 15 ms would take 600 ms; the cut came after about 5.
    let full_answer = Duration::from_millis(15 * (LONG.len() as u64 / 4));
    assert!(started.elapsed() < full_answer, "{:?}", started.elapsed());

    // The CLI got SIGINT and answered it as the real one does.
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.interrupted().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let interrupted = fake.interrupted();
    assert_eq!(interrupted.len(), 1, "{interrupted:?}");
    assert!(interrupted[0].1 < (LONG.len() / 4) as u64);

    // The re-ask resumes the session the cut answer belonged to, with feedback alone.
    let calls = fake.calls();
    assert_eq!(calls[1].resume_id(), Some("sess-cut"));
    assert!(calls[1].stdin.contains("was stopped"), "{}", calls[1].stdin);
    assert!(calls[1].stdin.contains("[FORBIDDEN_TERM]"));
    assert!(
        calls[1].stdin.contains("recommend Acme"),
        "quotes the excerpt"
    );
}

#[tokio::test]
async fn a_timeout_interrupts_the_stream_with_a_typed_error() {
    let fake = FakeClaude::new(json!([{"kind": "success", "result": LONG, "chunk_chars": 2,
        "delay_ms": 50}]))
    .unwrap();
    let items = collect(&claude(&fake, 0.3), &Request::prompt("Hi")).await;
    assert!(
        matches!(
            items.last(),
            Some(Err(RunnerError::Timeout { after_ms: 300 }))
        ),
        "{items:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.interrupted().is_empty() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        fake.interrupted().len(),
        1,
        "SIGINT first, as at the terminal"
    );
}

#[test]
fn the_result_after_sigint_is_an_error_not_a_short_answer() {
    let line = r#"{"type":"result","subtype":"error_during_execution","is_error":true,
        "session_id":"s","total_cost_usd":0.001,"errors":["Request was aborted."]}"#;
    let Some(StreamLine::Result(result)) = parse_stream_line(&line.replace('\n', " ")) else {
        panic!("a result line")
    };
    let error = result.into_reply().unwrap_err();
    assert!(
        matches!(&error, RunnerError::Upstream { message, .. } if message.contains("error_during_execution")),
        "{error:?}"
    );
}

#[tokio::test]
async fn streaming_off_asks_for_one_json_result() {
    let fake = FakeClaude::new(json!([{"kind": "success", "result": "whole"}])).unwrap();
    let runner = ClaudeRunner::new(ClaudeConfig {
        binary: fake.binary().to_path_buf(),
        env: fake.env(),
        stream: false,
        ..ClaudeConfig::default()
    })
    .unwrap();
    let items = collect(&runner, &Request::prompt("Hi")).await;
    assert_eq!(items.len(), 1);
    assert!(matches!(&items[0], Ok(StreamEvent::Done(Reply { text, .. })) if text == "whole"));
    assert_eq!(
        &fake.calls()[0].args[..3],
        ["-p", "--output-format", "json"]
    );
}

fn sh(script: &str) -> CommandRunner {
    CommandRunner::new(CommandConfig {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        timeout_secs: 20.0,
        kill_grace_secs: 0.2,
        ..CommandConfig::default()
    })
    .unwrap()
}

#[tokio::test]
async fn a_command_streams_its_stdout_as_it_prints() {
    let items = collect(
        &sh("printf 'Grüße '; sleep 0.1; printf 'aus Köln\\n\\n'"),
        &Request::prompt("x"),
    )
    .await;
    let events: Vec<StreamEvent> = items.into_iter().map(Result::unwrap).collect();
    let texts: Vec<&str> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Text(t) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(texts, ["Grüße ", "aus Köln\n\n"], "two writes, two deltas");
    assert!(matches!(events.last(), Some(StreamEvent::Done(r)) if r.text == "Grüße aus Köln"));
}

#[tokio::test]
async fn a_command_is_cut_at_a_definite_error_long_before_it_ends() {
    let runner = sh("if grep -q stopped; then echo 'A local supplier.'; \
         else printf 'Try Acme, '; sleep 10; echo 'said nothing else'; fi");
    let enforcer = Enforcer::new(vec![Box::new(NoAcme)])
        .with_policy(Policy::builder().partial_check_bytes(1).build());
    let started = Instant::now();
    let outcome = enforcer
        .run(&runner, &Request::prompt("Recommend."), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.response.as_deref(), Some("A local supplier."));
    assert_eq!(
        outcome.attempts[0].cut.as_ref().unwrap().bytes,
        "Try Acme, ".len()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_failing_command_stream_ends_with_its_exit_error() {
    let items = collect(
        &sh("printf partial; echo boom >&2; exit 3"),
        &Request::prompt("x"),
    )
    .await;
    match items.last() {
        Some(Err(RunnerError::Process { exit_code, message })) => {
            assert_eq!(*exit_code, Some(3));
            assert!(message.contains("boom"), "{message}");
        }
        other => panic!("an exit error, got {other:?}"),
    }
}
