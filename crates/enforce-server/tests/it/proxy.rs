//! The proxy on real sockets (127.0.0.1, port 0), driven by scripted and purpose-built runners.

use crate::common::*;
use enforce_core::{Enforcer, Reply, RunnerError, ScriptedRunner};
use enforce_server::{FailureResponse, FsyncPolicy, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";
const BAD: &str = "Because it is faster.";

fn unresolved(mode: FailureResponse) -> ModelOptions {
    ModelOptions {
        on_unresolved: mode,
        ..ModelOptions::default()
    }
}

async fn simple(
    texts: Vec<&'static str>,
    enforcer: Enforcer,
    options: ModelOptions,
) -> (Harness, Arc<ScriptedRunner>) {
    let runner = Arc::new(ScriptedRunner::texts(texts));
    let server = server_with(ServerConfig::default(), runner.clone(), enforcer, options);
    (Harness::start(server).await, runner)
}

// ------------------------------------------------------------------ non-streaming

#[tokio::test]
async fn passes_first_time() {
    let (h, runner) = simple(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "chat.completion");
    assert_eq!(body["model"], "m");
    assert_eq!(body["choices"][0]["message"]["role"], "assistant");
    assert_eq!(body["choices"][0]["message"]["content"], GOOD);
    assert_eq!(body["choices"][0]["finish_reason"], "stop");
    assert_eq!(body["enforcement"]["status"], "passed");
    assert_eq!(body["enforcement"]["attempts"], 1);
    assert_eq!(runner.calls().len(), 1);
}

#[tokio::test]
async fn passes_after_a_reask() {
    let (h, runner) = simple(
        vec![BAD, GOOD],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], GOOD);
    assert_eq!(body["enforcement"]["attempts"], 2);
    let calls = runner.calls();
    assert!(calls[1].feedback().unwrap().contains("MISSING_STEP_MARKER"));
}

#[tokio::test]
async fn repaired_when_reasks_do_not_help() {
    let (h, _) = simple(
        vec![BAD, "still bad", "bad again"],
        marker_enforcer_retries(true, 2),
        ModelOptions::default(),
    )
    .await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.headers()["x-enforce-status"], "repaired");
    let body: Value = resp.json().await.unwrap();
    let content = body["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(content.ends_with("<!-- STEP: done -->"), "{content}");
    assert_eq!(body["enforcement"]["repairs"], json!(["step_marker"]));
}

#[tokio::test]
async fn unresolved_is_returned_with_its_status_by_default() {
    let (h, _) = simple(
        vec![BAD, "b", "c"],
        marker_enforcer(false),
        unresolved(FailureResponse::Return),
    )
    .await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-status"], "unresolved");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["enforcement"]["status"], "unresolved");
    assert_eq!(
        body["enforcement"]["issues"][0]["code"],
        "MISSING_STEP_MARKER"
    );
    // The loop stops early when a re-ask shows no progress (same codes): 2 attempts.
    assert_eq!(body["enforcement"]["attempts"], 2);
    assert_eq!(body["choices"][0]["message"]["content"], "b");
}

#[tokio::test]
async fn unresolved_is_a_422_when_configured() {
    let (h, _) = simple(
        vec![BAD, "b", "c"],
        marker_enforcer(false),
        unresolved(FailureResponse::Error),
    )
    .await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 422);
    assert_eq!(resp.headers()["x-enforce-status"], "unresolved");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "enforcement_unresolved");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("MISSING_STEP_MARKER"), "{message}");
    assert!(message.contains("2 attempt"), "{message}");
    assert!(body.get("choices").is_none());
}

#[tokio::test]
async fn unavailable_validator_modes() {
    for (mode, status) in [
        (FailureResponse::Return, 200),
        (FailureResponse::Error, 503),
    ] {
        let runner = Arc::new(ScriptedRunner::texts([GOOD]));
        let options = ModelOptions {
            on_unavailable: mode,
            ..ModelOptions::default()
        };
        let server = server_with(
            ServerConfig::default(),
            runner,
            Enforcer::new(vec![Box::new(Down)]),
            options,
        );
        let h = Harness::start(server).await;
        let resp = h.chat(user_body(false)).await;
        assert_eq!(resp.status(), status);
        assert_eq!(resp.headers()["x-enforce-status"], "unavailable");
    }
}

#[tokio::test]
async fn validation_status_is_in_the_enforcement_object_and_a_header() {
    use enforce_core::{FailMode, Policy};
    // (answers, enforcer, options, HTTP status, validation_status)
    let unavailable_in = |mode| ModelOptions {
        on_unavailable: mode,
        ..ModelOptions::default()
    };
    let cases: Vec<(Vec<&'static str>, Enforcer, ModelOptions, u16, &str)> = vec![
        (
            vec![GOOD],
            marker_enforcer(false),
            ModelOptions::default(),
            200,
            "",
        ),
        (
            vec![BAD, "b", "c"],
            marker_enforcer(true),
            ModelOptions::default(),
            200,
            "",
        ),
        (
            vec![BAD, "b", "c"],
            marker_enforcer(false),
            unresolved(FailureResponse::Return),
            200,
            "INVALID_UNRESOLVED",
        ),
        (
            vec![BAD, "b", "c"],
            marker_enforcer(false),
            unresolved(FailureResponse::Error),
            422,
            "INVALID_UNRESOLVED",
        ),
        // Fail-closed validator without verdict: its configured name.
        (
            vec![GOOD],
            Enforcer::new(vec![Box::new(Down)]),
            unavailable_in(FailureResponse::Error),
            503,
            "EXTERNAL_UNAVAILABLE",
        ),
        // Fail-open: passed, but unvalidated, and the status says which check did not run.
        (
            vec![GOOD],
            Enforcer::new(vec![Box::new(Down)])
                .with_policy(Policy::builder().on_unavailable(FailMode::Open).build()),
            ModelOptions::default(),
            200,
            "EXTERNAL_UNAVAILABLE",
        ),
    ];
    for (texts, enforcer, options, status, expected) in cases {
        let (h, _) = simple(texts, enforcer, options).await;
        let resp = h.chat(user_body(false)).await;
        assert_eq!(resp.status(), status, "{expected}");
        assert_eq!(
            resp.headers()["x-enforce-validation-status"],
            expected,
            "{status}"
        );
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["enforcement"]["validation_status"], expected, "{body}");
        // Additive: the existing fields are still there.
        assert!(body["enforcement"]["status"].is_string(), "{body}");
    }
}

#[tokio::test]
async fn upstream_failures_become_openai_errors() {
    let cases = [
        (
            RunnerError::Upstream {
                status: Some(500),
                message: "internal server error".into(),
            },
            502,
            "upstream_error",
        ),
        (
            RunnerError::Timeout { after_ms: 1500 },
            504,
            "upstream_timeout",
        ),
        (
            RunnerError::Protocol {
                message: "the stream ended before the answer was complete".into(),
            },
            502,
            "upstream_protocol_error",
        ),
    ];
    for (error, status, code) in cases {
        let runner = Arc::new(ScriptedRunner::new([Err(error)]));
        let server = server_with(
            ServerConfig::default(),
            runner,
            marker_enforcer(false),
            ModelOptions::default(),
        );
        let h = Harness::start(server).await;
        let resp = h.chat(user_body(false)).await;
        assert_eq!(resp.status(), status);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], code);
        assert!(body.get("choices").is_none());
    }
}

#[tokio::test]
async fn fields_pass_through_and_max_completion_tokens_is_accepted() {
    let (h, runner) = simple(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let tools: Vec<Value> = (0..36)
        .map(|i| json!({"type": "function", "function": {"name": format!("tool_{i}")}}))
        .collect();
    let resp = h
        .chat(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "Title?"}],
            "max_completion_tokens": 50,
            "max_tokens": 60,
            "temperature": 0.2,
            "tools": tools,
            "x_vendor_flag": {"deep": [1, 2]},
        }))
        .await;
    assert_eq!(resp.status(), 200);
    let calls = runner.calls();
    let enforce_core::ScriptedCall::Ask { request } = &calls[0] else {
        panic!("first call is an ask")
    };
    assert_eq!(request.params["max_completion_tokens"], 50);
    assert_eq!(request.params["max_tokens"], 60);
    assert_eq!(request.params["temperature"], 0.2);
    assert_eq!(request.params["tools"].as_array().unwrap().len(), 36);
    assert_eq!(request.params["x_vendor_flag"], json!({"deep": [1, 2]}));
    assert!(!request.params.contains_key("model"));
}

#[tokio::test]
async fn panicking_runner_is_a_500_not_a_hang() {
    let server = server_with(
        ServerConfig::default(),
        Arc::new(Panicking),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 500);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "internal_error");
}

#[tokio::test]
async fn deadline_ends_a_slow_enforcement() {
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD]),
        delay: Duration::from_secs(5),
    });
    let config = ServerConfig {
        request_timeout: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 504);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "deadline_exceeded");
    // Streaming: an error chunk, then [DONE].
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.error().unwrap()["code"], "deadline_exceeded");
    assert!(parsed.done_last);
    assert!(parsed.content().is_empty());
}

#[tokio::test]
async fn unknown_model_and_bad_json_are_openai_errors() {
    let (h, _) = simple(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let resp = h
        .chat(json!({"model": "nope", "messages": [{"role": "user", "content": "q"}]}))
        .await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "model_not_found");
    assert_eq!(body["error"]["param"], "model");
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
}

#[tokio::test]
async fn models_are_listed() {
    let (h, _) = simple(vec![], marker_enforcer(false), ModelOptions::default()).await;
    let body: Value = h
        .client
        .get(h.url("/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"][0]["id"], "m");
    assert_eq!(body["data"][0]["object"], "model");
    assert!(body["data"][0]["created"].is_u64());
    assert!(body["data"][0]["owned_by"].is_string());
    let one: Value = h
        .client
        .get(h.url("/v1/models/m"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(one, body["data"][0]);
    let missing = h.client.get(h.url("/v1/models/x")).send().await.unwrap();
    assert_eq!(missing.status(), 404);
}

// ------------------------------------------------------------------ streaming

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
    let server = server_with(
        ServerConfig::default(),
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
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
    assert!(message.contains("MISSING_STEP_MARKER"), "{message}");
    assert!(message.contains("not shown"), "{message}");
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
        let server = server_with(
            ServerConfig::default(),
            runner,
            marker_enforcer(false),
            ModelOptions::default(),
        );
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

// ------------------------------------------------------------------ limits and auth

#[tokio::test]
async fn bearer_auth_guards_the_api() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let config = ServerConfig {
        api_keys: vec!["k-one".into(), "k-two".into()],
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for key in [None, Some("wrong"), Some("k-one-but-longer")] {
        let mut req = h
            .client
            .post(h.url("/v1/chat/completions"))
            .json(&user_body(false));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert!(body["error"]["message"].is_string());
    }
    let resp = h.client.get(h.url("/v1/models")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .bearer_auth("k-two")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = h.client.get(h.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn body_limit_is_enforced() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let config = ServerConfig {
        max_body_bytes: 2_000,
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(5_000)}]});
    let resp = h.chat(big).await;
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_too_large");
    // Chunked upload without Content-Length is cut off too.
    let stream = futures_util::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 500]))),
    );
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(h.chat(user_body(false)).await.status(), 200);
}

#[tokio::test]
async fn concurrency_limit_answers_429_with_retry_after() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let runner = Arc::new(Gated {
        inner: ScriptedRunner::texts([GOOD, GOOD]),
        gate: gate.clone(),
    });
    let config = ServerConfig {
        max_concurrent: 1,
        retry_after_secs: 2,
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let first = {
        let client = h.client.clone();
        let url = h.url("/v1/chat/completions");
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await })
    };
    h.wait_in_flight(1).await;
    let second = h.chat(user_body(false)).await;
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "2");
    let body: Value = second.json().await.unwrap();
    assert!(body["error"]["message"].is_string());
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    // The slot is free again.
    gate.add_permits(1);
    assert_eq!(h.chat(user_body(false)).await.status(), 200);
}

// ------------------------------------------------------------------ sessions

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("enforce-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

#[tokio::test]
async fn sessions_continue_and_keep_the_step_history() {
    let dir = temp_dir("sessions");
    let runner = Arc::new(Sessions::new(vec![
        "What do you need?\n<!-- STEP: what -->",
        "Because.\n<!-- STEP: why -->",
    ]));
    let config = ServerConfig {
        session_dir: Some(dir.clone()),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner.clone(),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for _ in 0..2 {
        let resp = h
            .client
            .post(h.url("/v1/chat/completions"))
            .header("X-OpenWebUI-Chat-Id", "chat-42")
            .json(&user_body(false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    // The second turn continued the first turn's runner session.
    let calls = runner.calls.lock().unwrap().clone();
    assert_eq!(calls[0].session_id, None);
    assert_eq!(calls[1].session_id.as_deref(), Some("sess-1"));

    let file = dir.join("chat-42").join("status.json");
    let stored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(stored["runner_session_id"], "sess-2");
    assert_eq!(stored["turns"], 2);
    let steps: Vec<&str> = stored["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["what", "why"]);

    let served: Value = h
        .client
        .get(h.url("/v1/sessions/chat-42"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(served, stored);
    let missing = h
        .client
        .get(h.url("/v1/sessions/none"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // metadata.chat_id and user identify a chat too; streaming records the step as well.
    let mut body = user_body(true);
    body["metadata"] = json!({"chat_id": "meta-chat"});
    let (_, parsed) = read_stream(h.chat(body).await).await;
    assert!(parsed.openai_result().is_ok());
    let mut body = user_body(false);
    body["user"] = json!("user-7");
    assert_eq!(h.chat(body).await.status(), 200);
    for id in ["meta-chat", "user-7"] {
        let s: Value = h
            .client
            .get(h.url(&format!("/v1/sessions/{id}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(s["turns"], 1, "{id}");
        assert_eq!(s["steps"].as_array().unwrap().len(), 1, "{id}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Needs the marker, and remembers the `previous_step` each check saw.
struct SeesPreviousStep {
    seen: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

#[enforce_core::async_trait]
impl enforce_core::Validator for SeesPreviousStep {
    fn name(&self) -> &str {
        "step_marker"
    }
    async fn validate(
        &self,
        response: &str,
        context: &enforce_core::Context,
    ) -> enforce_core::Validation {
        self.seen
            .lock()
            .unwrap()
            .push(context.get_str("previous_step").map(String::from));
        Ok(if response.contains("<!-- STEP:") {
            vec![]
        } else {
            vec![enforce_core::Issue::error(
                "step_marker",
                "MISSING_STEP_MARKER",
                "no marker",
            )]
        })
    }
}

#[tokio::test]
async fn a_failed_turn_records_the_unknown_step_and_the_next_turn_sees_it() {
    let dir = temp_dir("unknown-step");
    let audit = dir.join("audit.jsonl");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let runner = Arc::new(ScriptedRunner::texts([BAD, BAD, BAD, GOOD]));
    let config = ServerConfig {
        audit_log: Some(audit.clone()),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    };
    let enforcer = Enforcer::new(vec![Box::new(SeesPreviousStep { seen: seen.clone() })]);
    let server = server_with(config, runner, enforcer, ModelOptions::default());
    let h = Harness::start(server).await;
    let mut body = user_body(false);
    body["user"] = json!("u1");
    assert_eq!(
        h.chat(body.clone()).await.headers()["x-enforce-status"],
        "unresolved"
    );
    let session = |h: &Harness| {
        let (client, url) = (h.client.clone(), h.url("/v1/sessions/u1"));
        async move {
            let s: Value = client.get(url).send().await.unwrap().json().await.unwrap();
            s
        }
    };
    let s = session(&h).await;
    assert_eq!(s["last_status"], "unresolved");
    assert_eq!(s["steps"][0]["step"], "unknown", "{s}");
    assert_eq!(s["steps"][0]["status"], "unresolved", "{s}");
    // The next turn's validators read `previous_step: unknown`, and its own step follows.
    assert_eq!(h.chat(body).await.headers()["x-enforce-status"], "passed");
    assert_eq!(
        seen.lock().unwrap().last().cloned().flatten().as_deref(),
        Some("unknown")
    );
    let s = session(&h).await;
    let steps: Vec<&str> = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["unknown", "why"]);
    // The audit lines carry the step too.
    let log = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["step"], "unknown");
    assert_eq!(lines[1]["step"], "why");
    let _ = std::fs::remove_dir_all(&dir);
}

// ------------------------------------------------------------------ observability and shutdown

#[tokio::test]
async fn metrics_count_what_happened() {
    let (h, _) = simple(
        vec![BAD, GOOD, BAD, "x"],
        marker_enforcer_retries(true, 2),
        ModelOptions::default(),
    )
    .await;
    assert_eq!(
        h.chat(user_body(false)).await.headers()["x-enforce-status"],
        "passed"
    );
    assert_eq!(
        h.chat(user_body(false)).await.headers()["x-enforce-status"],
        "repaired"
    );
    let _ = h.client.get(h.url("/v1/models")).send().await.unwrap();
    let resp = h.chat(json!({"model": "m", "messages": "nope"})).await;
    assert_eq!(resp.status(), 400);
    let text = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for expected in [
        "enforce_requests_total{model=\"m\",status=\"passed\"} 1",
        "enforce_requests_total{model=\"m\",status=\"repaired\"} 1",
        "enforce_attempts_total{model=\"m\"} 4",
        "enforce_issues_total{code=\"MISSING_STEP_MARKER\",model=\"m\",severity=\"error\",validator=\"step_marker\"} 3",
        "enforce_repairs_total{model=\"m\",validator=\"step_marker\"} 1",
        "enforce_rejected_total{reason=\"bad_request\"} 1",
        "enforce_upstream_latency_seconds_count{model=\"m\"} 4",
        "enforce_overhead_seconds_count{model=\"m\"} 2",
        "enforce_in_flight 0",
        "# TYPE enforce_overhead_seconds histogram",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in\n{text}");
    }
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_and_flushes_the_audit_log() {
    let dir = temp_dir("audit");
    let audit = dir.join("audit.jsonl");
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD, GOOD]),
        delay: Duration::from_millis(400),
    });
    let config = ServerConfig {
        audit_log: Some(audit.clone()),
        audit_fsync: FsyncPolicy::Interval(Duration::from_secs(3600)),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let mut h = Harness::start(server).await;
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let non_stream =
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await });
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let stream = tokio::spawn(async move {
        let resp = client
            .post(url)
            .json(&user_body(true))
            .send()
            .await
            .unwrap();
        read_stream(resp).await.1
    });
    h.wait_in_flight(2).await;
    let serving = h.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // New connections are refused while draining.
    let late = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(h.url("/healthz"))
        .send()
        .await;
    assert!(late.is_err() || late.unwrap().status() == 503);

    let resp = non_stream.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], GOOD);
    assert_eq!(stream.await.unwrap().openai_result().unwrap(), GOOD);
    serving.await.unwrap().unwrap();

    // Both outcomes are in the audit log, one JSON line each, even with a lazy fsync policy.
    let log = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["status"] == "passed"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn shutdown_grace_bounds_the_drain() {
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD]),
        delay: Duration::from_secs(30),
    });
    let config = ServerConfig {
        shutdown_grace: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let mut h = Harness::start(server).await;
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let _pending =
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await });
    h.wait_in_flight(1).await;
    let started = std::time::Instant::now();
    let serving = h.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("serve returned after the grace period")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn an_empty_answer_is_an_error_not_an_empty_success() {
    let runner = Arc::new(ScriptedRunner::texts(["  ", "  "]));
    let server = server_with(
        ServerConfig::default(),
        runner,
        Enforcer::new(vec![]),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 502);
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.error().unwrap()["code"], "empty_answer");
    assert!(parsed.done_last);
}

#[tokio::test]
async fn scrape_hook_exports_outside_gauges() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let server = enforce_server::Server::builder(ServerConfig::default())
        .model(enforce_server::Model::new(
            "m",
            runner,
            Arc::new(marker_enforcer(false)),
        ))
        .on_scrape(|m| {
            m.set_gauge(
                "enforce_breaker_state",
                "Circuit breaker state (0 closed, 1 half-open, 2 open).",
                &[("validator", "external")],
                2.0,
            )
        })
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let text = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("enforce_breaker_state{validator=\"external\"} 2"),
        "{text}"
    );
}

#[tokio::test]
async fn a_request_may_pick_another_profile_by_header() {
    let runner = Arc::new(ScriptedRunner::texts(["no marker at all", "still none"]));
    let server = enforce_server::Server::builder(ServerConfig::default())
        .model(enforce_server::Model::new(
            "m",
            runner,
            Arc::new(marker_enforcer(false)),
        ))
        .profile("plain", Arc::new(Enforcer::new(vec![])))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("X-Enforce-Profile", "plain")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("X-Enforce-Profile", "nope")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 400);
    let body: Value = resp.json().await.unwrap();
    assert!(body["error"]["message"].as_str().unwrap().contains("plain"));
}

#[tokio::test]
async fn a_policy_fallback_is_delivered_even_in_streams() {
    // The fallback passes the profile's own check (it has a marker).
    let fallback = "Sorry, no valid answer could be produced.\n<!-- STEP: done -->";
    let enforcer = marker_enforcer(false)
        .with_policy(enforce_core::Policy::builder().fallback(fallback).build());
    let runner = Arc::new(ScriptedRunner::texts([
        "FAILING", "FAILING", "FAILING", "FAILING",
    ]));
    let server = server_with(
        ServerConfig::default(),
        runner,
        enforcer,
        unresolved(FailureResponse::Error),
    );
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-status"], "unresolved");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], fallback);
    assert_eq!(body["enforcement"]["fallback_used"], true);
    let (raw, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert!(!raw.contains("FAILING"));
    assert_eq!(parsed.openai_result().unwrap(), fallback);
}

#[tokio::test]
async fn a_fallback_that_fails_validation_is_not_delivered() {
    // No marker: the fallback fails the very check it stands in for.
    let fallback = "Sorry, no valid answer could be produced.";
    let enforcer = marker_enforcer(false)
        .with_policy(enforce_core::Policy::builder().fallback(fallback).build());
    let runner = Arc::new(ScriptedRunner::texts(["FAILING"; 6]));
    let server = server_with(
        ServerConfig::default(),
        runner,
        enforcer,
        unresolved(FailureResponse::Error),
    );
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 422, "an error, not the broken fallback");
    let raw = resp.text().await.unwrap();
    assert!(!raw.contains("Sorry"), "{raw}");
    assert!(
        raw.contains("FALLBACK_INVALID"),
        "the error says why: {raw}"
    );
    // Streamed, the verdict came before the first byte: the same plain 422.
    let resp = h.chat(user_body(true)).await;
    assert_eq!(resp.status(), 422);
    let raw = resp.text().await.unwrap();
    assert!(!raw.contains("Sorry") && !raw.contains("FAILING"), "{raw}");
    assert!(raw.contains("FALLBACK_INVALID"), "{raw}");
}
