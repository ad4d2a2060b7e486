//! `POST /v1/messages` (the Anthropic Messages API) through the shared pipeline, against the
//! mock OpenAI upstream (and once against the mock Anthropic upstream through the `anthropic`
//! runner): passing and failing contracts, streamed and not, a tool call, an unresolved
//! answer, errors in Anthropic's shape, `x-api-key`.

use crate::common::{
    marker_enforcer, marker_enforcer_retries, server_with, streams_start_at_once, Harness,
};
use enforce_core::Enforcer;
use enforce_runner::{AnthropicConfig, AnthropicRunner, OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{FailureResponse, ModelOptions, ServerConfig};
use enforce_testkit::sse::parse_sse;
use enforce_testkit::{AnthropicReply, MockAnthropic, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";
const BAD: &str = "Because it is faster.";

fn openai_runner(mock: &MockOpenAi) -> Arc<OpenAiRunner> {
    Arc::new(
        OpenAiRunner::new(OpenAiConfig {
            base_url: mock.url(),
            model: "upstream".into(),
            retry: RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            },
            ..OpenAiConfig::default()
        })
        .unwrap(),
    )
}

async fn harness(
    replies: Vec<MockReply>,
    enforcer: Enforcer,
    config: ServerConfig,
) -> (MockOpenAi, Harness) {
    harness_with(replies, enforcer, config, ModelOptions::default()).await
}

async fn harness_with(
    replies: Vec<MockReply>,
    enforcer: Enforcer,
    config: ServerConfig,
    options: ModelOptions,
) -> (MockOpenAi, Harness) {
    let mock = MockOpenAi::start(MockScript::new().replies(replies))
        .await
        .unwrap();
    let server = server_with(config, openai_runner(&mock), enforcer, options);
    (mock, Harness::start(server).await)
}

fn ask(stream: bool) -> Value {
    json!({"model": "m", "max_tokens": 256, "stream": stream,
           "system": "Answer briefly.",
           "messages": [{"role": "user", "content": "Why?"}]})
}

fn weather_tools() -> Value {
    json!([{"name": "get_weather", "description": "Weather for a city",
            "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                             "required": ["city"], "additionalProperties": false}}])
}

async fn post(h: &Harness, body: &Value) -> reqwest::Response {
    h.post("/v1/messages", body, &[("anthropic-version", "2023-06-01")])
        .await
}

/// The events of a Messages stream as (event name, data), each checked: the data's `type` is
/// the event's name.
async fn events(response: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let raw = response.text().await.unwrap();
    parse_sse(&raw)
        .events
        .into_iter()
        .map(|e| {
            let name = e.event.clone().expect("every event is named");
            let data: Value = serde_json::from_str(&e.data).unwrap();
            assert_eq!(data["type"], name.as_str(), "{raw}");
            (name, data)
        })
        .collect()
}

fn streamed_text(events: &[(String, Value)]) -> String {
    events
        .iter()
        .filter_map(|(_, e)| e["delta"]["text"].as_str())
        .collect()
}

#[tokio::test]
async fn a_passing_contract_answers_as_a_message() {
    let (mock, h) = harness(
        vec![MockReply::text(GOOD)],
        marker_enforcer(false),
        ServerConfig::default(),
    )
    .await;
    let response = post(&h, &ask(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-enforce-status"], "passed");
    let id = response.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(id.starts_with("msg_"), "{id}");
    // Anthropic's SDKs read the id from `request-id`.
    assert_eq!(response.headers()["request-id"], id.as_str());
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["id"], id.as_str());
    assert_eq!(body["type"], "message");
    assert_eq!(body["role"], "assistant");
    assert_eq!(body["model"], "m");
    assert_eq!(body["content"], json!([{"type": "text", "text": GOOD}]));
    assert_eq!(body["stop_reason"], "end_turn");
    assert!(body["usage"]["output_tokens"].as_u64().unwrap() > 0);
    assert_eq!(body["enforcement"]["status"], "passed");
    // The upstream got the system prompt and the turn, in its own dialect.
    let sent = &mock.chat_requests()[0];
    assert_eq!(
        sent.messages(),
        [
            ("system".to_string(), "Answer briefly.".to_string()),
            ("user".to_string(), "Why?".to_string())
        ]
    );
    assert_eq!(sent.body["max_tokens"], 256);
}

#[tokio::test]
async fn a_reasked_answer_streams_only_after_its_verdict() {
    let (_mock, h) = harness(
        vec![MockReply::text(BAD), MockReply::text(GOOD)],
        marker_enforcer(false),
        ServerConfig::default(),
    )
    .await;
    let events = events(post(&h, &ask(true)).await).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"));
    assert_eq!(names.last(), Some(&"message_stop"));
    // Only the passing answer was shown, never the failed first one.
    assert_eq!(streamed_text(&events), GOOD);
    let (_, delta) = events
        .iter()
        .find(|(n, _)| n == "message_delta")
        .expect("a message_delta");
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert_eq!(delta["enforcement"]["status"], "passed");
    assert_eq!(delta["enforcement"]["attempts"], 2);
}

#[tokio::test]
async fn an_unresolved_answer_is_delivered_marked_by_default() {
    for stream in [false, true] {
        let (_mock, h) = harness(
            vec![MockReply::text(BAD)],
            marker_enforcer_retries(false, 1),
            ServerConfig::default(),
        )
        .await;
        let response = post(&h, &ask(stream)).await;
        let enforcement = if stream {
            let events = events(response).await;
            assert_eq!(streamed_text(&events), BAD);
            events.iter().find(|(n, _)| n == "message_delta").unwrap().1["enforcement"].clone()
        } else {
            assert_eq!(response.headers()["x-enforce-status"], "unresolved");
            let body: Value = response.json().await.unwrap();
            assert_eq!(body["content"][0]["text"], BAD);
            body["enforcement"].clone()
        };
        assert_eq!(enforcement["status"], "unresolved", "stream: {stream}");
        assert_eq!(enforcement["issues"][0]["code"], "MISSING_STEP_MARKER");
    }
}

#[tokio::test]
async fn an_unresolved_answer_is_an_anthropic_error_streamed_or_not() {
    for stream in [false, true] {
        // The stream starts before the verdict, so the error is an event in it (a verdict
        // before the first byte is the plain 422: early_errors.rs).
        let (_mock, h) = harness_with(
            vec![MockReply::text(BAD).delayed(std::time::Duration::from_millis(50))],
            marker_enforcer_retries(false, 1),
            streams_start_at_once(ServerConfig::default()),
            ModelOptions {
                on_unresolved: FailureResponse::Error,
                ..ModelOptions::default()
            },
        )
        .await;
        let response = post(&h, &ask(stream)).await;
        let error = if stream {
            let events = events(response).await;
            assert_eq!(events[0].0, "message_start");
            assert_eq!(
                streamed_text(&events),
                "",
                "nothing of the failed answer shown"
            );
            let (name, error) = events.last().unwrap().clone();
            assert_eq!(name, "error");
            error
        } else {
            assert_eq!(response.status(), 422);
            assert_eq!(response.headers()["x-enforce-status"], "unresolved");
            let text = response.text().await.unwrap();
            assert!(
                text.starts_with(
                    r#"{"type":"error","error":{"type":"invalid_request_error","message":"#
                ),
                "the message comes first: {text}"
            );
            serde_json::from_str(&text).unwrap()
        };
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["code"], "enforcement_unresolved");
        assert!(error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MISSING_STEP_MARKER"));
        assert_eq!(error["enforcement"]["status"], "unresolved");
    }
}

#[tokio::test]
async fn a_tool_call_goes_out_as_a_tool_use_block_streamed_or_not() {
    for stream in [false, true] {
        let (mock, h) = harness(
            vec![MockReply::tool_call(
                "call_1",
                "get_weather",
                r#"{"city": "Oslo"}"#,
            )],
            Enforcer::new(vec![]),
            ServerConfig::default(),
        )
        .await;
        let mut body = ask(stream);
        body["tools"] = weather_tools();
        body["tool_choice"] = json!({"type": "any"});
        let response = post(&h, &body).await;
        let (blocks, stop_reason) = if stream {
            let events = events(response).await;
            let start = events
                .iter()
                .find(|(_, e)| e["content_block"]["type"] == "tool_use")
                .expect("a tool_use block");
            let index = start.1["index"].clone();
            let input: String = events
                .iter()
                .filter(|(_, e)| e["index"] == index)
                .filter_map(|(_, e)| e["delta"]["partial_json"].as_str())
                .collect();
            let block = json!({"type": "tool_use", "id": start.1["content_block"]["id"],
                "name": start.1["content_block"]["name"],
                "input": serde_json::from_str::<Value>(&input).unwrap()});
            let delta = &events.iter().find(|(n, _)| n == "message_delta").unwrap().1;
            (vec![block], delta["delta"]["stop_reason"].clone())
        } else {
            assert_eq!(response.status(), 200);
            let body: Value = response.json().await.unwrap();
            (
                body["content"].as_array().unwrap().clone(),
                body["stop_reason"].clone(),
            )
        };
        assert_eq!(
            blocks,
            [
                json!({"type": "tool_use", "id": "call_1", "name": "get_weather",
                    "input": {"city": "Oslo"}})
            ],
            "stream: {stream}"
        );
        assert_eq!(stop_reason, "tool_use");
        // The upstream got the tool as a function, and the choice in its words.
        let sent = &mock.chat_requests()[0].body;
        assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
        assert_eq!(
            sent["tools"][0]["function"]["parameters"]["required"],
            json!(["city"])
        );
        assert_eq!(sent["tool_choice"], "required");
    }
}

#[tokio::test]
async fn a_tool_call_against_the_declared_schema_is_reasked() {
    let (mock, h) = harness(
        vec![
            MockReply::tool_call("call_1", "get_weather", r#"{"town": "Oslo"}"#),
            MockReply::tool_call("call_2", "get_weather", r#"{"city": "Oslo"}"#),
        ],
        Enforcer::new(vec![]).with_policy(enforce_core::Policy::builder().max_retries(2).build()),
        ServerConfig::default(),
    )
    .await;
    let mut body = ask(false);
    body["tools"] = weather_tools();
    let response = post(&h, &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"][0]["input"], json!({"city": "Oslo"}));
    assert_eq!(body["enforcement"]["attempts"], 2);
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test]
async fn errors_take_anthropics_shape_and_x_api_key_is_a_key() {
    let config = ServerConfig {
        api_keys: vec!["k-1".into()],
        ..ServerConfig::default()
    };
    let (_mock, h) = harness(vec![MockReply::text(GOOD)], marker_enforcer(false), config).await;
    let send = |key: Option<&'static str>, body: Value| {
        let mut request = h.client.post(h.url("/v1/messages")).json(&body);
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        request.send()
    };
    let response = send(Some("wrong"), ask(false)).await.unwrap();
    assert_eq!(response.status(), 401);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["type"], "error");
    assert_eq!(body["error"]["type"], "authentication_error");

    let mut unknown = ask(false);
    unknown["model"] = json!("nope");
    let response = send(Some("k-1"), unknown).await.unwrap();
    assert_eq!(response.status(), 404);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "not_found_error");
    assert_eq!(body["error"]["code"], "model_not_found");

    let response = send(Some("k-1"), json!({"model": "m", "messages": []}))
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");

    // The key, given as Anthropic clients give it, is accepted.
    let response = send(Some("k-1"), ask(false)).await.unwrap();
    assert_eq!(response.status(), 200);
}

#[tokio::test]
async fn anthropic_on_both_sides_with_fields_it_cannot_carry_reported() {
    let mock = MockAnthropic::scripted(
        vec![AnthropicReply::text(BAD), AnthropicReply::text(GOOD)],
        2,
        Duration::ZERO,
    )
    .await
    .unwrap();
    let runner = AnthropicRunner::new(AnthropicConfig {
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
        ServerConfig::default(),
        Arc::new(runner),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let mut body = ask(false);
    body["thinking"] = json!({"type": "enabled", "budget_tokens": 1024});
    let response = post(&h, &body).await;
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["content"][0]["text"], GOOD);
    assert_eq!(body["enforcement"]["attempts"], 2);
    assert_eq!(body["warnings"][0]["code"], "fields_ignored");
    assert_eq!(body["warnings"][0]["fields"], json!(["thinking"]));
    let sent = mock.requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].header("x-api-key"), Some("upstream-key"));
    assert_eq!(sent[0].body["system"], "Answer briefly.");
    assert_eq!(sent[0].body["max_tokens"], 256);
    // The re-ask carries the failed answer and the feedback.
    let messages = sent[1].body["messages"].as_array().unwrap();
    assert_eq!(messages[1]["content"], BAD);
    assert!(messages[2]["content"]
        .as_str()
        .unwrap()
        .contains("MISSING_STEP_MARKER"));
}
