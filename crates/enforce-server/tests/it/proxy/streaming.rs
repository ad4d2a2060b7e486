//! Streamed chat completions through the proxy: chunks, usage, held-back failures, keep-alives
//! and status events.

use super::{simple, unresolved, BAD, GOOD};
use crate::common::*;
use enforce_core::{Reply, RunnerError, ScriptedRunner};
use enforce_server::{FailureResponse, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn stream_passes_with_chunks_finish_and_done() {
    let (h, _) = simple(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.openai_result().unwrap(), GOOD);
    let chunks = parsed.chunks();
    let ids: Vec<&Value> = chunks.iter().map(|c| &c["id"]).collect();
    assert!(ids.windows(2).all(|w| w[0] == w[1]), "one id per stream");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let last = chunks.last().unwrap();
    assert_eq!(last["choices"][0]["finish_reason"], "stop");
    assert_eq!(last["enforcement"]["status"], "passed");
    assert!(
        chunks.iter().all(|c| c.get("usage").is_none()),
        "no usage unless asked"
    );
    assert!(parsed.status_events().is_empty());
}

#[tokio::test]
async fn usage_chunk_only_when_asked() {
    let runner = Arc::new(ScriptedRunner::new([Ok(Reply {
        usage: Some(enforce_core::Usage {
            input_tokens: 7,
            output_tokens: 3,
        }),
        ..Reply::text(GOOD)
    })]));
    let server = marker_server(runner);
    let h = Harness::start(server).await;
    let mut body = user_body(true);
    body["stream_options"] = json!({"include_usage": true});
    let (_, parsed) = read_stream(h.chat(body).await).await;
    let last = parsed.events.last().unwrap();
    assert_eq!(last["choices"], json!([]));
    assert_eq!(last["usage"]["prompt_tokens"], 7);
    assert_eq!(last["usage"]["completion_tokens"], 3);
    assert_eq!(last["usage"]["total_tokens"], 10);
    assert!(parsed.error().is_none(), "a usage chunk is not an error");
    assert_eq!(parsed.openai_result().unwrap(), GOOD);
}

#[tokio::test]
async fn stream_holds_back_failing_content_and_sends_one_error_chunk() {
    // on_unresolved: error: nothing unchecked reaches the screen, only one error chunk (in a
    // stream that started before the verdict; see early_errors.rs for one that did not).
    let server = server_with(
        streams_start_at_once(ServerConfig::default()),
        Arc::new(late(ScriptedRunner::texts([
            "FAILING-1",
            "FAILING-2",
            "FAILING-3",
        ]))),
        marker_enforcer(false),
        unresolved(FailureResponse::Error),
    );
    let h = Harness::start(server).await;
    let (raw, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert!(!raw.contains("FAILING"), "failing content leaked: {raw}");
    let error = parsed.error().expect("an error chunk");
    let message = error["message"].as_str().unwrap();
    assert!(message.contains("not shown"), "{message}");
    assert!(message.ends_with(MARKER_ERROR_LIST), "{message}");
    let errors = parsed
        .events
        .iter()
        .filter(|e| e.get("error").is_some())
        .count();
    assert_eq!(errors, 1);
    assert!(parsed.chunks().is_empty(), "no content chunk at all");
    assert!(parsed.done_last);
    assert!(parsed.openai_result().is_err());
}

#[tokio::test]
async fn stream_returns_an_unresolved_answer_with_its_status_when_told_to() {
    // on_unresolved: return: the last answer, held back until the loop ended, then delivered
    // with its status on the final chunk, as a completion would be.
    let (h, _) = simple(
        vec!["FAILING-1", "FAILING-2", "FAILING-3"],
        marker_enforcer(false),
        unresolved(FailureResponse::Return),
    )
    .await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert!(parsed.error().is_none());
    let content = parsed.openai_result().unwrap();
    assert!(content.starts_with("FAILING-"), "{content}");
    let finish = parsed
        .chunks()
        .into_iter()
        .find(|c| c.get("enforcement").is_some())
        .expect("the finish chunk carries the enforcement object");
    assert_eq!(finish["enforcement"]["status"], "unresolved");
    assert_eq!(finish["enforcement"]["validated"], false);
    assert_eq!(
        finish["enforcement"]["issues"][0]["code"],
        "MISSING_STEP_MARKER"
    );
}

#[tokio::test]
async fn stream_repaired_and_reasked_content_arrives() {
    let (h, _) = simple(
        vec![BAD, "bad", "worse"],
        marker_enforcer_retries(true, 2),
        ModelOptions::default(),
    )
    .await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    let text = parsed.openai_result().unwrap();
    // No progress after the first re-ask: the second answer is repaired.
    assert_eq!(text, "bad\n<!-- STEP: done -->");
    let (h, _) = simple(
        vec![BAD, GOOD],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.openai_result().unwrap(), GOOD);
}

#[tokio::test]
async fn stream_upstream_failures_become_error_chunks() {
    let cases = [
        RunnerError::Upstream {
            status: Some(500),
            message: "boom".into(),
        },
        RunnerError::Timeout { after_ms: 10 },
        RunnerError::Protocol {
            message: "the upstream stream was cut".into(),
        },
    ];
    for error in cases {
        // Fails on the re-ask, after a first answer that did not pass.
        let runner = Arc::new(ScriptedRunner::new([Ok(Reply::text(BAD)), Err(error)]));
        let server = marker_server(runner);
        let h = Harness::start(server).await;
        let (raw, parsed) = read_stream(h.chat(user_body(true)).await).await;
        assert!(!raw.contains(BAD));
        let error = parsed.error().expect("error chunk");
        assert!(error["message"].as_str().unwrap().contains("re-asking"));
        assert!(parsed.done_last);
        assert!(parsed.openai_result().is_err());
    }
}

#[tokio::test]
async fn stream_panicking_runner_ends_in_an_error_chunk() {
    let server = server_with(
        ServerConfig::default(),
        Arc::new(Panicking),
        marker_enforcer(false),
        ModelOptions {
            status_events: true,
            ..ModelOptions::default()
        },
    );
    let h = Harness::start(server).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.error().unwrap()["code"], "internal_error");
    assert!(parsed.done_last);
    let statuses = parsed.status_events();
    assert_eq!(statuses.last().unwrap()["event"]["data"]["done"], true);
}

#[tokio::test]
async fn keepalive_comments_while_the_runner_works_and_reasks() {
    // A timer of one hour: every comment after the first is driven by a re-ask event.
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([BAD, GOOD]),
        delay: Duration::from_millis(50),
    });
    let config = ServerConfig {
        keepalive_interval: Duration::from_secs(3600),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(
        parsed.comments, 1,
        "one for the re-ask, none from the timer yet"
    );
    assert_eq!(parsed.openai_result().unwrap(), GOOD);

    // A short timer: comments keep coming while one slow attempt runs.
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD]),
        delay: Duration::from_millis(400),
    });
    let config = ServerConfig {
        keepalive_interval: Duration::from_millis(50),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let (raw, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert!(parsed.comments >= 4, "{raw}");
    assert!(raw.contains(": keepalive\n\n"));
}

#[tokio::test]
async fn status_events_only_when_enabled_and_always_closed() {
    let (h, _) = simple(
        vec![BAD, GOOD],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert!(parsed.status_events().is_empty());

    let options = ModelOptions {
        status_events: true,
        ..ModelOptions::default()
    };
    let (h, _) = simple(vec![BAD, GOOD], marker_enforcer(false), options).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    let statuses = parsed.status_events();
    let descriptions: Vec<&str> = statuses
        .iter()
        .map(|e| e["event"]["data"]["description"].as_str().unwrap())
        .collect();
    assert!(
        descriptions.contains(&"Re-asking (2/3): MISSING_STEP_MARKER"),
        "{descriptions:?}"
    );
    assert!(statuses.iter().all(|e| e["event"]["type"] == "status"));
    assert_eq!(statuses.last().unwrap()["event"]["data"]["done"], true);
    assert_eq!(parsed.content(), GOOD);

    // Passing at once: the status line is closed and hidden.
    let (h, _) = simple(vec![GOOD], marker_enforcer(false), options).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    let last = parsed.status_events().last().unwrap()["event"]["data"].clone();
    assert_eq!(last["done"], true);
    assert_eq!(last["hidden"], true);

    // Failing in a stream that started before the verdict: closed too, before the error chunk.
    let options = ModelOptions {
        on_unresolved: FailureResponse::Error,
        ..options
    };
    let server = server_with(
        streams_start_at_once(ServerConfig::default()),
        Arc::new(late(ScriptedRunner::texts([BAD, BAD, BAD]))),
        marker_enforcer(false),
        options,
    );
    let h = Harness::start(server).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(
        parsed.status_events().last().unwrap()["event"]["data"]["done"],
        true
    );
    assert!(parsed.error().is_some());
}
