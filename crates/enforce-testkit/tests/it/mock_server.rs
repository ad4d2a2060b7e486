//! The mock server speaks the documented formats, streaming included.

use enforce_testkit::{ErrorShape, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::time::Duration;

fn data_lines(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter_map(|event| event.strip_prefix("data: "))
        .map(str::to_string)
        .collect()
}

async fn post(mock: &MockOpenAi, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", mock.url()))
        .json(&body)
        .send()
        .await
        .unwrap()
}

#[tokio::test]
async fn streams_chunks_usage_and_done() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("abcdefgh"))
            .stream_chunks(4, Duration::from_millis(5)),
    )
    .await
    .unwrap();
    let response = post(
        &mock,
        json!({"model": "m", "stream": true, "stream_options": {"include_usage": true},
               "messages": [{"role": "user", "content": "hi"}]}),
    )
    .await;
    assert_eq!(
        response.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let body = response.text().await.unwrap();
    let lines = data_lines(&body);
    assert_eq!(lines.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = lines[..lines.len() - 1]
        .iter()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(text, "abcdefgh");
    let contents = chunks
        .iter()
        .filter(|c| c["choices"][0]["delta"]["content"].is_string())
        .count();
    assert_eq!(contents, 4);
    assert_eq!(chunks.last().unwrap()["choices"], json!([]));
    assert!(chunks.last().unwrap()["usage"].is_object());
}

#[tokio::test]
async fn stream_error_chunk_then_done() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::StreamError {
        text: "partial answer".into(),
        after_chunks: 1,
        message: "upstream overloaded".into(),
    }))
    .await
    .unwrap();
    let body = post(&mock, json!({"stream": true, "messages": []}))
        .await
        .text()
        .await
        .unwrap();
    let lines = data_lines(&body);
    assert_eq!(
        lines.len(),
        4,
        "role, one content chunk, error, DONE: {lines:?}"
    );
    let error: Value = serde_json::from_str(&lines[2]).unwrap();
    assert_eq!(error["error"]["message"], "upstream overloaded");
    assert!(error.get("choices").is_none());
    assert_eq!(lines[3], "[DONE]");
}

#[tokio::test]
async fn stream_cut_breaks_the_body() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::StreamCut {
        text: "never finished".into(),
        after_chunks: 2,
    }))
    .await
    .unwrap();
    let response = post(&mock, json!({"stream": true, "messages": []})).await;
    assert!(
        response.text().await.is_err(),
        "a cut stream must not end cleanly"
    );
}

#[tokio::test]
async fn faults_records_and_models() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::Error {
                shape: ErrorShape::VllmTopLevel,
                status: 503,
                message: "busy".into(),
                retry_after: Some("2".into()),
            })
            .then(enforce_testkit::Then::Echo),
    )
    .await
    .unwrap();
    let r = post(
        &mock,
        json!({"messages": [{"role": "user", "content": "x"}]}),
    )
    .await;
    assert_eq!(r.status().as_u16(), 503);
    assert_eq!(r.headers()["retry-after"].to_str().unwrap(), "2");
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["object"], "error");
    assert_eq!(body["message"], "busy");

    let r = post(
        &mock,
        json!({"messages": [{"role": "user", "content": "echo me"}]}),
    )
    .await;
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "echo me");

    let models: Value = reqwest::get(format!("{}/models", mock.url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "mock-model");
    let recorded = mock.requests();
    assert_eq!(recorded.len(), 3);
    assert_eq!(recorded[1].last_user().as_deref(), Some("echo me"));
    assert_eq!(mock.chat_requests().len(), 2);
}
