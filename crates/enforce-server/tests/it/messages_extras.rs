//! What Anthropic clients ask besides `POST /v1/messages`: `HEAD /` and `GET /` (the Claude
//! CLI checks the base URL with `HEAD /`) and `POST /v1/messages/count_tokens`, counted by an
//! `anthropic` upstream or estimated, and said to be estimated.

use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_runner::{AnthropicConfig, AnthropicRunner, RetryConfig};
use enforce_server::{ModelOptions, ServerConfig};
use enforce_testkit::{AnthropicReply, MockAnthropic};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

fn keyed() -> ServerConfig {
    ServerConfig {
        api_keys: vec!["proxy-key".into()],
        ..ServerConfig::default()
    }
}

#[tokio::test]
async fn head_and_get_of_the_root_answer_without_a_key() {
    let runner = Arc::new(ScriptedRunner::texts(["x"]));
    let server = server_with(
        keyed(),
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let head = h.client.head(h.url("/")).send().await.unwrap();
    assert_eq!(head.status(), 200);
    let get = h.client.get(h.url("/")).send().await.unwrap();
    assert_eq!(get.status(), 200);
    let body: Value = get.json().await.unwrap();
    assert_eq!(body["name"], "enforce");
    let endpoints: Vec<&str> = body["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for served in [
        "POST /v1/chat/completions",
        "POST /v1/responses",
        "POST /v1/messages",
        "POST /v1/messages/count_tokens",
    ] {
        assert!(endpoints.contains(&served), "{served} in {endpoints:?}");
    }
}

fn count_body(model: &str) -> Value {
    json!({
        "model": model,
        "system": "Answer briefly.",
        "messages": [{"role": "user", "content": "How far is the moon?"}],
        "tools": [{"name": "get_distance", "description": "Distance to a body",
                   "input_schema": {"type": "object", "properties": {"body": {"type": "string"}}}}],
    })
}

async fn count(h: &Harness, body: &Value) -> reqwest::Response {
    h.client
        .post(h.url("/v1/messages/count_tokens"))
        .header("x-api-key", "proxy-key")
        .header("anthropic-version", "2023-06-01")
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A model served by the `anthropic` runner: the upstream counts (its own model name, only
/// the fields `count_tokens` takes); any other runner: an estimate marked as one.
#[tokio::test]
async fn count_tokens_asks_an_anthropic_upstream_and_marks_an_estimate() {
    let mock = MockAnthropic::scripted([AnthropicReply::text("unused")], 1, Duration::ZERO)
        .await
        .unwrap();
    let anthropic = AnthropicRunner::new(AnthropicConfig {
        base_url: mock.url(),
        api_key: Some("upstream-key".into()),
        model: "claude-upstream".into(),
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        ..AnthropicConfig::default()
    })
    .unwrap();
    let server = server_with(
        keyed(),
        Arc::new(anthropic),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = count(&h, &count_body("m")).await;
    assert_eq!(resp.status(), 200);
    assert!(resp.headers().get("x-enforce-token-count").is_none());
    let body: Value = resp.json().await.unwrap();
    let asked = mock.count_requests();
    assert_eq!(asked.len(), 1, "{asked:?}");
    assert_eq!(asked[0]["model"], "claude-upstream");
    assert_eq!(asked[0]["tools"][0]["name"], "get_distance");
    assert!(asked[0].get("max_tokens").is_none(), "{}", asked[0]);
    // The mock's count of what it was sent, passed on as it is.
    let expected = ["system", "messages", "tools"]
        .iter()
        .map(|k| asked[0][*k].to_string().len())
        .sum::<usize>()
        / 4;
    assert_eq!(body, json!({"input_tokens": expected}));
    assert!(mock.requests().is_empty(), "no model was asked to answer");

    // An unknown model: Anthropic's error shape.
    let resp = count(&h, &count_body("nope")).await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "not_found_error");

    // A runner that cannot count: an estimate, said to be one.
    let runner = Arc::new(ScriptedRunner::texts(["x"]));
    let server = server_with(
        keyed(),
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = count(&h, &count_body("m")).await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-token-count"], "estimated");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["estimated"], true);
    assert!(
        body["input_tokens"].as_u64().is_some_and(|n| n > 5),
        "{body}"
    );
}
