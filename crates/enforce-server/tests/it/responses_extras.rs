//! The Responses surface beyond the basics: an answer cut at the token limit is `incomplete`
//! (`incomplete_details.reason: max_output_tokens`, its items too), streamed
//! (`response.incomplete`) or not, and chat and Messages say `length` / `max_tokens`.

use crate::common::*;
use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{ModelOptions, ServerConfig};
use enforce_testkit::sse::parse_sse;
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::sync::Arc;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";

async fn harness(replies: Vec<MockReply>) -> (MockOpenAi, Harness) {
    let mock = MockOpenAi::start(MockScript::new().replies(replies))
        .await
        .unwrap();
    let runner = mock_upstream(&mock);
    let server = marker_server(runner);
    (mock, Harness::start(server).await)
}

async fn post(h: &Harness, body: Value) -> reqwest::Response {
    h.post("/v1/responses", &body, &[]).await
}

#[tokio::test]
async fn an_answer_cut_at_the_token_limit_is_incomplete_streamed_or_not() {
    let (_mock, h) = harness(vec![
        MockReply::Truncated(GOOD.into()),
        MockReply::Truncated(GOOD.into()),
        MockReply::text(GOOD),
    ])
    .await;
    let ask = |stream: bool| json!({"model": "m", "input": "Why?", "max_output_tokens": 16, "stream": stream});

    let body: Value = post(&h, ask(false)).await.json().await.unwrap();
    assert_eq!(body["status"], "incomplete", "{body}");
    assert_eq!(body["incomplete_details"]["reason"], "max_output_tokens");
    assert_eq!(body["output"][0]["content"][0]["text"], GOOD);
    assert_eq!(body["output"][0]["status"], "incomplete", "{body}");

    let raw = post(&h, ask(true)).await.text().await.unwrap();
    let events: Vec<Value> = parse_sse(&raw)
        .events
        .iter()
        .filter_map(|e| serde_json::from_str(&e.data).ok())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["type"], "response.incomplete", "{raw}");
    assert_eq!(last["response"]["status"], "incomplete");
    assert_eq!(
        last["response"]["incomplete_details"]["reason"],
        "max_output_tokens"
    );
    assert_eq!(last["response"]["output"][0]["status"], "incomplete");
    let item_done = events
        .iter()
        .find(|e| e["type"] == "response.output_item.done")
        .unwrap_or_else(|| panic!("no output_item.done in {raw}"));
    assert_eq!(item_done["item"]["status"], "incomplete", "{raw}");

    // An answer that ended on its own is `completed`, with no details.
    let body: Value = post(&h, ask(false)).await.json().await.unwrap();
    assert_eq!(body["status"], "completed", "{body}");
    assert!(body["incomplete_details"].is_null());
    assert_eq!(body["output"][0]["status"], "completed", "{body}");
}

/// Chat completions and Messages say it in their own words: `finish_reason: length` and
/// `stop_reason: max_tokens`, streamed or not; an answer that ended on its own does not.
#[tokio::test]
async fn an_answer_cut_at_the_token_limit_says_so_on_chat_and_messages() {
    let (_mock, h) = harness(vec![
        MockReply::Truncated(GOOD.into()),
        MockReply::Truncated(GOOD.into()),
        MockReply::Truncated(GOOD.into()),
        MockReply::Truncated(GOOD.into()),
        MockReply::text(GOOD),
        MockReply::text(GOOD),
    ])
    .await;
    let send = |path: &'static str, body: Value| {
        let request = h.client.post(h.url(path)).json(&body);
        async move { request.send().await.unwrap() }
    };
    let chat = |stream: bool| {
        json!({"model": "m", "max_tokens": 16, "stream": stream,
               "messages": [{"role": "user", "content": "Why?"}]})
    };
    let messages = |stream: bool| {
        json!({"model": "m", "max_tokens": 16, "stream": stream,
               "messages": [{"role": "user", "content": "Why?"}]})
    };
    let events = |raw: &str| -> Vec<Value> {
        parse_sse(raw)
            .events
            .iter()
            .filter_map(|e| serde_json::from_str(&e.data).ok())
            .collect()
    };

    let body: Value = send("/v1/chat/completions", chat(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "length", "{body}");
    let raw = send("/v1/chat/completions", chat(true))
        .await
        .text()
        .await
        .unwrap();
    let finish: Vec<Value> = events(&raw)
        .into_iter()
        .filter_map(|e| e["choices"][0].get("finish_reason").cloned())
        .filter(|f| !f.is_null())
        .collect();
    assert_eq!(finish, [json!("length")], "{raw}");

    let body: Value = send("/v1/messages", messages(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["stop_reason"], "max_tokens", "{body}");
    let raw = send("/v1/messages", messages(true))
        .await
        .text()
        .await
        .unwrap();
    let delta = events(&raw)
        .into_iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap_or_else(|| panic!("no message_delta in {raw}"));
    assert_eq!(delta["delta"]["stop_reason"], "max_tokens", "{raw}");

    let body: Value = send("/v1/chat/completions", chat(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["choices"][0]["finish_reason"], "stop", "{body}");
    let body: Value = send("/v1/messages", messages(false))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(body["stop_reason"], "end_turn", "{body}");
}

/// The native Responses passthrough: a model whose `openai` runner asks the upstream's
/// `/v1/responses` (`api: responses`) serves every surface, and the upstream's token limit
/// still ends the answer `incomplete`.
#[tokio::test]
async fn an_upstream_that_speaks_responses_is_asked_natively() {
    let mock = MockOpenAi::start(
        MockScript::new().replies([MockReply::text(GOOD), MockReply::Truncated(GOOD.into())]),
    )
    .await
    .unwrap();
    let runner = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "mock-model".into(),
        api: enforce_runner::OpenAiApi::Responses,
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
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
    let chat: Value = h.chat(user_body(false)).await.json().await.unwrap();
    assert_eq!(chat["choices"][0]["message"]["content"], GOOD);
    let body: Value = post(
        &h,
        json!({"model": "m", "input": "Why?", "instructions": "Be brief.", "max_output_tokens": 16}),
    )
    .await
    .json()
    .await
    .unwrap();
    assert_eq!(body["status"], "incomplete", "{body}");
    let asked: Vec<_> = mock
        .requests()
        .into_iter()
        .map(|r| (r.path, r.body))
        .collect();
    assert!(
        asked.iter().all(|(path, _)| path == "/v1/responses"),
        "{asked:?}"
    );
    assert_eq!(asked[1].1["instructions"], "Be brief.");
    assert_eq!(
        asked[1].1["input"],
        json!([{"role": "user", "content": "Why?"}])
    );
    assert_eq!(asked[1].1["max_output_tokens"], 16);
}
