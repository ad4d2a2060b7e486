//! Errors a stream's client gets as plain HTTP errors when the outcome is known before the
//! stream's first byte, and the upstream's busy answers passed on with their
//! `Retry-After`, on every surface: chat completions, responses and messages.

use crate::common::*;
use enforce_core::{Ask, ReplyStream};
use enforce_core::{Policy, Reply, Runner};
use enforce_runner::{AnthropicConfig, AnthropicRunner, OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{FailureResponse, Model, ModelOptions, ServerConfig};
use enforce_testkit::sse::parse_sse;
use enforce_testkit::{AnthropicReply, MockAnthropic, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const BAD: &str = "UNCHECKED draft without a marker.";

async fn send(h: &Harness, surface: &str, stream: bool) -> reqwest::Response {
    let (path, body) = surface_request(surface, "m", stream);
    h.client.post(h.url(path)).json(&body).send().await.unwrap()
}

fn content_type(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

/// The error's code (`error.code` in the OpenAI shape and in Anthropic's) and, for messages,
/// that the body is in Anthropic's shape.
fn error_code(surface: &str, body: &Value) -> String {
    if surface == "messages" {
        assert_eq!(body["type"], "error", "{body}");
        assert!(body["error"]["type"].is_string(), "{body}");
    } else {
        assert!(body["error"]["message"].is_string(), "{body}");
    }
    body["error"]["code"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Answers [`BAD`] to every call.
struct AlwaysBad;

impl Runner for AlwaysBad {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async { Ok(Reply::text(BAD)) })
    }
}

fn unresolved_server(config: ServerConfig, delay: Duration) -> enforce_server::Server {
    let runner = Slow {
        inner: AlwaysBad,
        delay,
    };
    let enforcer = marker_enforcer(false).with_policy(Policy::builder().max_retries(1).build());
    let options = ModelOptions {
        on_unresolved: FailureResponse::Error,
        ..ModelOptions::default()
    };
    enforce_server::Server::builder(config)
        .model(
            Model::new("m", Arc::new(runner), Arc::new(enforcer))
                .with_profile("strict")
                .with_options(options),
        )
        .build()
        .unwrap()
}

/// A held stream whose answer ends unresolved before anything had to be sent answers a plain
/// 422 in the surface's error shape, with the enforcement headers, as a request not streamed.
#[tokio::test]
async fn a_held_stream_that_ends_unresolved_is_a_plain_422_on_every_surface() {
    let h = Harness::start(unresolved_server(ServerConfig::default(), Duration::ZERO)).await;
    for surface in SURFACES {
        for stream in [false, true] {
            let response = send(&h, surface, stream).await;
            let cell = format!("{surface} stream={stream}");
            assert_eq!(response.status(), 422, "{cell}");
            assert!(
                content_type(&response).starts_with("application/json"),
                "{cell}: {}",
                content_type(&response)
            );
            assert_eq!(
                response.headers()["x-enforce-status"],
                "unresolved",
                "{cell}"
            );
            assert!(response.headers().get("x-request-id").is_some(), "{cell}");
            assert_eq!(response.headers()["x-enforce-profile"], "strict", "{cell}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(
                error_code(surface, &body),
                "enforcement_unresolved",
                "{cell}"
            );
            assert_eq!(
                body["enforcement"]["status"], "unresolved",
                "{cell}: {body}"
            );
            assert_eq!(body["enforcement"]["attempts"], 2, "{cell}: {body}");
        }
    }
}

/// A stream that had to send bytes before the verdict (here its first keep-alive) keeps the
/// error in the stream, typed for the SDKs as before.
#[tokio::test]
async fn a_stream_that_already_sent_bytes_keeps_the_error_in_the_stream() {
    let config = ServerConfig {
        keepalive_interval: Duration::from_millis(20),
        ..ServerConfig::default()
    };
    let h = Harness::start(unresolved_server(config, Duration::from_millis(150))).await;
    for surface in SURFACES {
        let response = send(&h, surface, true).await;
        assert_eq!(response.status(), 200, "{surface}");
        assert!(content_type(&response).starts_with("text/event-stream"));
        let raw = response.text().await.unwrap();
        assert!(raw.contains(": keepalive"), "{surface}: {raw}");
        let events = parse_sse(&raw).events;
        let error = events
            .iter()
            .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
            .find_map(|data| match surface {
                "chat" => data.get("error").cloned(),
                "responses" => {
                    (data["type"] == "response.failed").then(|| data["response"]["error"].clone())
                }
                _ => (data["type"] == "error").then(|| data["error"].clone()),
            })
            .unwrap_or_else(|| panic!("{surface}: no error in {raw}"));
        // The OpenAI surfaces carry the status as the in-stream code (what @ai-sdk/openai
        // reads to decide on a retry); Anthropic's error event keeps enforce's code.
        let code = if surface == "messages" {
            "enforcement_unresolved"
        } else {
            "422"
        };
        assert_eq!(error["code"], code, "{surface}: {raw}");
    }
}

/// An upstream that rate-limits or is overloaded, past the runner's retries: the client gets
/// a 429 / 503 with the upstream's `Retry-After`, streamed (before the first byte) or not, on
/// every surface.
#[tokio::test]
async fn an_upstream_429_is_a_429_with_its_retry_after_on_every_surface() {
    let no_retries = RetryConfig {
        max_retries: 0,
        ..RetryConfig::default()
    };
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::rate_limited(7))
            .then(enforce_testkit::Then::RepeatLast),
    )
    .await
    .unwrap();
    let runner = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "mock-model".into(),
        retry: no_retries.clone(),
        ..OpenAiConfig::default()
    })
    .unwrap();
    let server = server_with(
        ServerConfig::default(),
        Arc::new(runner),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for surface in SURFACES {
        for stream in [false, true] {
            let cell = format!("{surface} stream={stream}");
            let response = send(&h, surface, stream).await;
            assert_eq!(response.status(), 429, "{cell}");
            assert_eq!(response.headers()["retry-after"], "7", "{cell}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(
                error_code(surface, &body),
                "upstream_rate_limited",
                "{cell}"
            );
            if surface == "messages" {
                assert_eq!(body["error"]["type"], "rate_limit_error", "{cell}");
            }
        }
    }

    // Anthropic's 529 (overloaded) is a 503, which every client knows and retries.
    let mock = MockAnthropic::scripted(
        vec![AnthropicReply::error(529, "overloaded_error", "Overloaded").retry_after(3)],
        1,
        Duration::ZERO,
    )
    .await
    .unwrap();
    let runner = AnthropicRunner::new(AnthropicConfig {
        base_url: mock.url(),
        api_key: Some("k".into()),
        model: "claude-upstream".into(),
        retry: no_retries,
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
    for surface in SURFACES {
        for stream in [false, true] {
            let cell = format!("{surface} stream={stream}");
            let response = send(&h, surface, stream).await;
            assert_eq!(response.status(), 503, "{cell}");
            assert_eq!(response.headers()["retry-after"], "3", "{cell}");
            let body: Value = response.json().await.unwrap();
            assert_eq!(error_code(surface, &body), "upstream_overloaded", "{cell}");
            if surface == "messages" {
                assert_eq!(body["error"]["type"], "overloaded_error", "{cell}");
            }
        }
    }
}

/// Fields read leniently before: a `stream` that is not a boolean, a `role` that is not a
/// string and an `X-Enforce-Profile` that is not ASCII are 400s on every surface, before the
/// model is asked.
#[tokio::test]
async fn non_boolean_stream_numeric_role_and_a_binary_profile_header_are_400s() {
    let runner = Arc::new(enforce_core::ScriptedRunner::texts(Vec::<String>::new()));
    let server = marker_server(runner);
    let h = Harness::start(server).await;
    let expect_400 = |surface: &str, response_body: &Value, said: &str| {
        let code = error_code(surface, response_body);
        assert_eq!(code, "invalid_request", "{surface}: {response_body}");
        let message = response_body["error"]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(message.contains(said), "{surface}: {message}");
    };
    for surface in SURFACES {
        let (path, good) = surface_request(surface, "m", false);
        for stream in [json!("yes"), json!(1), json!({})] {
            let mut body = good.clone();
            body["stream"] = stream.clone();
            let resp = h.client.post(h.url(path)).json(&body).send().await.unwrap();
            assert_eq!(resp.status(), 400, "{surface}: stream {stream}");
            expect_400(
                surface,
                &resp.json().await.unwrap(),
                "`stream` must be true or false",
            );
        }
        let mut body = good.clone();
        let turn = json!([{"type": "message", "role": 3, "content": "Explain it."}]);
        match surface {
            "responses" => body["input"] = turn,
            _ => body["messages"] = turn,
        }
        let resp = h.client.post(h.url(path)).json(&body).send().await.unwrap();
        assert_eq!(resp.status(), 400, "{surface}: numeric role");
        expect_400(surface, &resp.json().await.unwrap(), "got 3 (not a string)");

        let resp = h
            .client
            .post(h.url(path))
            .header(
                "x-enforce-profile",
                reqwest::header::HeaderValue::from_bytes(b"str\xe9ct").unwrap(),
            )
            .json(&good)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{surface}: binary profile header");
        expect_400(surface, &resp.json().await.unwrap(), "x-enforce-profile");
    }
}
