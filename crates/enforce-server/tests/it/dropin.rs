//! Drop-in behaviour real clients depend on: every route and method answers in
//! JSON naming what is served, request fields are carried or refused (never dropped), the
//! request's `response_format` is checked, error bodies read well when printed, in-stream
//! errors carry the status they stand for, and `x-request-id` is the completion id.

use crate::common::*;
use enforce_core::{scripted::ScriptedCall, Enforcer, ScriptedRunner};
use enforce_server::{FailureResponse, FsyncPolicy, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";

async fn scripted(
    texts: Vec<&'static str>,
    enforcer: Enforcer,
    options: ModelOptions,
) -> (Harness, Arc<ScriptedRunner>) {
    let runner = Arc::new(ScriptedRunner::texts(texts));
    let server = server_with(ServerConfig::default(), runner.clone(), enforcer, options);
    (Harness::start(server).await, runner)
}

fn failing_stays_an_error() -> ModelOptions {
    ModelOptions {
        on_unresolved: FailureResponse::Error,
        ..ModelOptions::default()
    }
}

fn asked_params(runner: &ScriptedRunner) -> Vec<enforce_core::Request> {
    runner
        .calls()
        .into_iter()
        .map(|call| match call {
            ScriptedCall::Ask { request } => request,
            ScriptedCall::FollowUp { request, .. } => request,
            _ => panic!("unexpected call"),
        })
        .collect()
}

#[tokio::test]
async fn unknown_routes_and_methods_answer_in_json_naming_the_served_endpoints() {
    let (h, _) = scripted(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let resp = h
        .client
        .post(h.url("/v2/completions"))
        .json(&json!({"model": "m", "prompt": "hi"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    assert!(resp.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("application/json"));
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "unknown_route");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("POST /v2/completions"), "{message}");
    assert!(message.contains("POST /v1/chat/completions"), "{message}");

    let resp = h
        .client
        .get(h.url("/v1/chat/completions"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 405);
    assert_eq!(resp.headers()["allow"], "POST");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "method_not_allowed");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("GET /v1/models"));
}

#[tokio::test]
async fn n_above_one_is_refused_before_the_model_is_asked() {
    let (h, runner) = scripted(
        vec![GOOD, GOOD],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let mut body = user_body(false);
    body["n"] = json!(2);
    let resp = h.chat(body.clone()).await;
    assert_eq!(resp.status(), 400);
    let error: Value = resp.json().await.unwrap();
    assert_eq!(error["error"]["param"], "n");
    assert!(runner.calls().is_empty(), "no choice was generated");
    body["n"] = json!(1);
    assert_eq!(h.chat(body).await.status(), 200);
}

#[tokio::test]
async fn content_parts_reach_the_runner_and_validators_see_the_text() {
    let (h, runner) = scripted(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    let image =
        json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}});
    let audio =
        json!({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}});
    let resp = h
        .chat(json!({
            "model": "m",
            "messages": [{"role": "user", "content": [
                {"type": "text", "text": "What is on it?"}, image, audio,
            ]}],
        }))
        .await;
    assert_eq!(resp.status(), 200);
    let requests = asked_params(&runner);
    let message = &requests[0].messages[0];
    assert_eq!(message.content, "What is on it?");
    assert_eq!(message.parts.len(), 3);
    assert_eq!(message.parts[1], image);
    assert_eq!(message.parts[2], audio);
}

/// The profile checks nothing; the request's `response_format` still is: a cut JSON is
/// re-asked, never delivered as passed.
#[tokio::test]
async fn the_requests_response_format_is_checked_whatever_the_profile() {
    let schema = json!({
        "type": "object",
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
        "required": ["name", "age"],
    });
    let format = json!({"type": "json_schema", "json_schema": {"name": "U", "schema": schema, "strict": true}});
    let (h, runner) = scripted(
        vec![
            r#"{"name": "Al", "#,
            r#"{"name": "Al"}"#,
            r#"{"name": "Al", "age": 3}"#,
        ],
        Enforcer::new(vec![]),
        ModelOptions::default(),
    )
    .await;
    let resp = h
        .chat(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "Who?"}],
            "response_format": format,
        }))
        .await;
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["enforcement"]["status"], "passed");
    assert_eq!(body["enforcement"]["attempts"], 3);
    assert_eq!(
        body["choices"][0]["message"]["content"],
        r#"{"name": "Al", "age": 3}"#
    );
    let requests = asked_params(&runner);
    assert_eq!(requests.len(), 3);
    // The format still reaches the upstream.
    assert_eq!(requests[0].params["response_format"], format);

    // json_object: JSON alone, whatever its shape.
    let (h, _) = scripted(
        vec!["Sure! Here it is.", r#"{"ok": true}"#],
        Enforcer::new(vec![]),
        failing_stays_an_error(),
    )
    .await;
    let body: Value = h
        .chat(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "JSON please"}],
            "response_format": {"type": "json_object"},
        }))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["enforcement"]["attempts"], 2);
    assert_eq!(body["enforcement"]["status"], "passed");

    // Without a response_format the same answer passes at once.
    let (h, _) = scripted(
        vec!["Sure! Here it is."],
        Enforcer::new(vec![]),
        ModelOptions::default(),
    )
    .await;
    let body: Value = h.chat(user_body(false)).await.json().await.unwrap();
    assert_eq!(body["enforcement"]["attempts"], 1);
}

#[tokio::test]
async fn an_error_body_starts_with_the_error_and_its_message() {
    let (h, _) = scripted(
        vec!["a", "b", "c"],
        marker_enforcer(false),
        failing_stays_an_error(),
    )
    .await;
    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 422);
    let raw = resp.text().await.unwrap();
    assert!(
        raw.starts_with(r#"{"error":{"message":"The model's answer"#),
        "{raw}"
    );
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(body["enforcement"]["status"], "unresolved");
}

/// `@ai-sdk/openai` maps an in-stream error to an HTTP status by a numeric `code` (else by
/// words in `code`/`type`, else 500) and retries what maps to 5xx: an unresolved answer must
/// say 422 there (`error.status` alone was not read, and the SDK asked three times).
#[tokio::test]
async fn an_in_stream_error_carries_the_status_it_stands_for() {
    // A stream that started before the verdict: the error is in it.
    let server = server_with(
        streams_start_at_once(ServerConfig::default()),
        Arc::new(late(ScriptedRunner::texts(["a", "b", "c"]))),
        marker_enforcer(false),
        failing_stays_an_error(),
    );
    let h = Harness::start(server).await;
    let (_, parsed) = read_stream(h.chat(user_body(true)).await).await;
    let error = parsed.error().expect("an error chunk");
    assert_eq!(error["code"], "422");
    assert_eq!(error["type"], "enforcement_error");
    assert_eq!(error["status"], 422);
}

#[tokio::test]
async fn x_request_id_is_the_completion_id_and_the_audit_request_id() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    };
    let runner = Arc::new(ScriptedRunner::texts([GOOD, GOOD, "a", "b", "c"]));
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        failing_stays_an_error(),
    );
    let h = Harness::start(server).await;

    let resp = h.chat(user_body(false)).await;
    let header = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(header, body["id"].as_str().unwrap());
    assert!(header.starts_with("chatcmpl-"), "{header}");

    let resp = h.chat(user_body(true)).await;
    let streamed = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let (_, parsed) = read_stream(resp).await;
    assert_eq!(parsed.chunks()[0]["id"], streamed.as_str());

    let resp = h.chat(user_body(false)).await;
    assert_eq!(resp.status(), 422);
    let failed = resp.headers()["x-request-id"].to_str().unwrap().to_string();

    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let ids: Vec<String> = audit
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["request_id"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(ids, [header, streamed, failed]);
}
