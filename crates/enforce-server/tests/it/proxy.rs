//! The proxy on real sockets (127.0.0.1, port 0), driven by scripted and purpose-built runners.
//! Answers without streaming here; by topic in `proxy/`: streams, limits and auth, sessions,
//! observability and shutdown.

use crate::common::*;
use enforce_core::{Enforcer, RunnerError, ScriptedRunner};
use enforce_server::{FailureResponse, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

mod limits;
mod observability;
mod sessions;
mod streaming;

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

fn temp_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("enforce-server-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
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
    assert!(message.contains("2 attempt"), "{message}");
    assert!(message.ends_with(MARKER_ERROR_LIST), "{message}");
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
        let server = marker_server(runner);
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
    let enforce_core::scripted::ScriptedCall::Ask { request } = &calls[0] else {
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
    // Nothing validated reached the client: no header or flag may say otherwise.
    assert_eq!(resp.headers().get("x-enforce-status"), None);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "empty_answer");
    assert_eq!(body["enforcement"]["validated"], false, "{body}");
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    assert_eq!(parsed.error().unwrap()["code"], "empty_answer");
    assert!(parsed.done_last);
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

/// A model's decoding constraint (`decode: constrained`) reaches the upstream with every
/// request that does not set its own, and is no contract of the request: an answer outside
/// it is judged by the profile alone (here: none), not by a `response_format` check.
#[tokio::test]
async fn decode_params_reach_the_upstream_without_becoming_a_check() {
    use enforce_testkit::{MockOpenAi, MockReply, MockScript};
    let mock = MockOpenAi::start(MockScript::new().replies(vec![
        MockReply::text("not JSON at all"),
        MockReply::text("not JSON either"),
        MockReply::text("free text"),
    ]))
    .await
    .unwrap();
    let runner = mock_upstream(&mock);
    let format = json!({"type": "json_schema", "json_schema": {"name": "contract",
        "schema": {"type": "object"}, "strict": false}});
    let mut decode = serde_json::Map::new();
    decode.insert("response_format".into(), format.clone());
    let server = enforce_server::Server::builder(ServerConfig::default())
        .model(
            enforce_server::Model::new("m", runner, Arc::new(Enforcer::new(vec![])))
                .with_decode_params(decode),
        )
        .profile("other", Arc::new(Enforcer::new(vec![])))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let mut own = user_body(false);
    own["response_format"] = json!({"type": "text"});
    let resp = h.chat(own).await;
    assert_eq!(resp.status(), 200);
    // Another profile by header: not the model's profile's constraint.
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("X-Enforce-Profile", "other")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let sent: Vec<Value> = mock
        .chat_requests()
        .iter()
        .map(|r| r.body["response_format"].clone())
        .collect();
    assert_eq!(sent, vec![format, json!({"type": "text"}), Value::Null]);
}

/// With the re-ask rung `constrained`, the model's decoding constraint goes only with that
/// rung's re-asks: the first ask answers freely.
#[tokio::test]
async fn a_constrained_rung_sends_the_decode_params_with_its_reask_only() {
    use enforce_core::{policy::Reask, Policy};
    use enforce_testkit::{MockOpenAi, MockReply, MockScript};
    let mock = MockOpenAi::start(MockScript::new().replies(vec![
        MockReply::text("no marker"),
        MockReply::text("done <!-- STEP: done -->"),
    ]))
    .await
    .unwrap();
    let runner = mock_upstream(&mock);
    let grammar = json!("root ::= \"done\"");
    let mut decode = serde_json::Map::new();
    decode.insert("grammar".into(), grammar.clone());
    let policy = Policy::builder()
        .max_retries(1)
        .reask(Reask::Constrained)
        .build();
    let enforcer =
        Enforcer::new(vec![Box::new(NeedsMarker { repairs: false })]).with_policy(policy);
    let server = enforce_server::Server::builder(ServerConfig::default())
        .model(
            enforce_server::Model::new("m", runner, Arc::new(enforcer)).with_decode_params(decode),
        )
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let sent: Vec<Value> = mock
        .chat_requests()
        .iter()
        .map(|r| r.body["grammar"].clone())
        .collect();
    assert_eq!(sent, vec![Value::Null, grammar]);
}
