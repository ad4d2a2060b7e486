//! `POST /v1/responses` and `GET /v1/responses/{id}` (the OpenAI Responses API) against the
//! mock chat-completions upstream: requests in the shapes the Agents SDK, the AI SDK and
//! openai-python send are translated for the upstream, answers come back as `response` objects
//! and typed stream events with `sequence_number`, stored responses continue a conversation,
//! and one contract gets the same verdict on chat and responses, streamed and not.

use crate::common::*;
use enforce_core::{Enforcer, Policy, ScriptedRunner};
use enforce_server::{FailureResponse, FsyncPolicy, ModelOptions, ServerConfig, StreamMode};
use enforce_testkit::sse::parse_sse;
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::sync::Arc;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";
const BAD: &str = "UNCHECKED draft without a marker.";

async fn against_mock(
    replies: Vec<MockReply>,
    enforcer: Enforcer,
    options: ModelOptions,
) -> (MockOpenAi, Harness) {
    let mock = MockOpenAi::start(MockScript::new().replies(replies))
        .await
        .unwrap();
    let server = server_with(
        ServerConfig::default(),
        mock_upstream(&mock),
        enforcer,
        options,
    );
    (mock, Harness::start(server).await)
}

async fn post(h: &Harness, body: Value) -> reqwest::Response {
    h.post("/v1/responses", &body, &[]).await
}

/// The `(event, data)` pairs of a Responses stream, checking that every event's `type` is its
/// `event:` name and that `sequence_number` counts up from 0.
async fn events(response: reqwest::Response) -> Vec<(String, Value)> {
    assert_eq!(response.status(), 200);
    let raw = response.text().await.unwrap();
    let stream = parse_sse(&raw);
    assert!(!stream.torn_tail, "{raw}");
    let events: Vec<(String, Value)> = stream
        .events
        .iter()
        .map(|e| {
            let data: Value = serde_json::from_str(&e.data).unwrap();
            (e.event.clone().unwrap_or_default(), data)
        })
        .collect();
    for (n, (name, data)) in events.iter().enumerate() {
        assert_eq!(&data["type"], name.as_str(), "{raw}");
        assert_eq!(data["sequence_number"], n as u64, "{raw}");
    }
    events
}

/// `GET /v1/responses/{id}`: its status, `content-type` and body as sent.
async fn read_back(h: &Harness, id: &str) -> (u16, String, String) {
    let response = h
        .client
        .get(h.url(&format!("/v1/responses/{id}")))
        .send()
        .await
        .unwrap();
    let content_type = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_string();
    (
        response.status().as_u16(),
        content_type,
        response.text().await.unwrap(),
    )
}

fn named<'a>(events: &'a [(String, Value)], name: &str) -> Vec<&'a Value> {
    events
        .iter()
        .filter(|(n, _)| n == name)
        .map(|(_, d)| d)
        .collect()
}

#[tokio::test]
async fn a_text_answer_is_a_response_object_and_the_upstream_gets_chat_messages() {
    let (mock, h) = against_mock(
        vec![MockReply::text(GOOD)],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let resp = post(
        &h,
        json!({"model": "m", "input": "Why?", "instructions": "Be brief."}),
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let request_id = resp.headers()["x-request-id"].to_str().unwrap().to_string();
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["object"], "response");
    assert_eq!(body["id"], request_id.as_str());
    assert!(request_id.starts_with("resp_"), "{request_id}");
    assert_eq!(body["status"], "completed");
    assert_eq!(body["instructions"], "Be brief.");
    assert_eq!(body["output"][0]["type"], "message");
    assert_eq!(body["output"][0]["role"], "assistant");
    assert_eq!(body["output"][0]["content"][0]["type"], "output_text");
    assert_eq!(body["output"][0]["content"][0]["text"], GOOD);
    assert!(body["usage"]["input_tokens"].is_u64());
    assert!(body["usage"]["output_tokens"].is_u64());
    assert_eq!(body["enforcement"]["status"], "passed");
    let sent = &mock.chat_requests()[0];
    assert_eq!(
        sent.messages(),
        [
            ("system".to_string(), "Be brief.".to_string()),
            ("user".to_string(), "Why?".to_string())
        ]
    );
}

/// The AI SDK's and the Agents SDK's bodies: items with parts, a call and its output, flat
/// function tools, `text.format`, `max_output_tokens`.
#[tokio::test]
async fn items_tools_and_format_are_translated_for_the_chat_upstream() {
    let (mock, h) = against_mock(
        vec![MockReply::text(r#"{"city": "Oslo"}"#)],
        Enforcer::new(vec![]),
        ModelOptions::default(),
    )
    .await;
    let schema = json!({"type": "object", "properties": {"city": {"type": "string"}},
                        "required": ["city"], "additionalProperties": false});
    let resp = post(
        &h,
        json!({
            "model": "m",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "Weather?"},
                    {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "low"}]},
                {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"},
                {"type": "function_call_output", "call_id": "call_1", "output": "12 C"},
                {"role": "user", "content": "As JSON."},
            ],
            "tools": [{"type": "function", "name": "get_weather", "parameters": schema, "strict": true}],
            "tool_choice": "auto",
            "text": {"format": {"type": "json_schema", "name": "W", "schema": schema, "strict": true}},
            "max_output_tokens": 64,
            "temperature": 0.1,
            "include": [],
        }),
    )
    .await;
    assert_eq!(resp.status(), 200);
    let sent = &mock.chat_requests()[0].body;
    assert_eq!(sent["tools"][0]["type"], "function");
    assert_eq!(sent["tools"][0]["function"]["name"], "get_weather");
    assert_eq!(sent["tools"][0]["function"]["parameters"], schema);
    assert_eq!(sent["tool_choice"], "auto");
    assert_eq!(sent["response_format"]["type"], "json_schema");
    assert_eq!(sent["response_format"]["json_schema"]["schema"], schema);
    assert_eq!(sent["max_tokens"], 64);
    assert_eq!(sent["temperature"], 0.1);
    let messages = sent["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    // The image goes upstream as a chat content part, next to the text.
    assert_eq!(
        messages[0]["content"][0],
        json!({"type": "text", "text": "Weather?"})
    );
    assert_eq!(
        messages[0]["content"][1],
        json!({"type": "image_url", "image_url": {"url": "https://example.com/a.png", "detail": "low"}})
    );
    assert_eq!(messages[1]["tool_calls"][0]["id"], "call_1");
    assert_eq!(messages[2]["tool_call_id"], "call_1");
    assert_eq!(messages[2]["content"], "12 C");
}

#[tokio::test]
async fn a_function_call_answer_is_a_function_call_item() {
    let (_mock, h) = against_mock(
        vec![MockReply::tool_call(
            "call_9",
            "get_weather",
            r#"{"city":"Oslo"}"#,
        )],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let tools = json!([{"type": "function", "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]);
    let body: Value = post(
        &h,
        json!({"model": "m", "input": "Weather?", "tools": tools}),
    )
    .await
    .json()
    .await
    .unwrap();
    let output = body["output"].as_array().unwrap();
    assert_eq!(output.len(), 1, "{body}");
    assert_eq!(output[0]["type"], "function_call");
    assert_eq!(output[0]["call_id"], "call_9");
    assert_eq!(output[0]["name"], "get_weather");
    assert_eq!(output[0]["arguments"], r#"{"city":"Oslo"}"#);
    let (_mock, h) = against_mock(
        vec![MockReply::tool_call(
            "call_9",
            "get_weather",
            r#"{"city":"Oslo"}"#,
        )],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let events = events(
        post(
            &h,
            json!({"model": "m", "input": "Weather?", "tools": tools, "stream": true}),
        )
        .await,
    )
    .await;
    let args: String = named(&events, "response.function_call_arguments.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(args, r#"{"city":"Oslo"}"#);
    let done = named(&events, "response.function_call_arguments.done");
    assert_eq!(done[0]["arguments"], r#"{"city":"Oslo"}"#);
    let completed = named(&events, "response.completed");
    assert_eq!(completed[0]["response"]["output"][0]["call_id"], "call_9");
}

#[tokio::test]
async fn a_held_stream_shows_only_the_checked_answer() {
    let (_mock, h) = against_mock(
        vec![MockReply::text(BAD), MockReply::text(GOOD)],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let resp = post(&h, json!({"model": "m", "input": "Why?", "stream": true})).await;
    assert!(resp.headers()["x-request-id"]
        .to_str()
        .unwrap()
        .starts_with("resp_"));
    let events = events(resp).await;
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names[..2], ["response.created", "response.in_progress"]);
    assert_eq!(names.last(), Some(&"response.completed"), "{events:?}");
    for name in [
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
    ] {
        assert!(names.contains(&name), "{name} missing: {names:?}");
    }
    let text: String = named(&events, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, GOOD);
    assert!(events
        .iter()
        .all(|(_, d)| !d.to_string().contains("UNCHECKED")));
    let completed = &named(&events, "response.completed")[0]["response"];
    assert_eq!(completed["status"], "completed");
    assert_eq!(completed["enforcement"]["attempts"], 2);
    assert_eq!(completed["output"][0]["content"][0]["text"], GOOD);
}

#[tokio::test]
async fn a_draft_stream_shows_attempts_as_reasoning_and_the_answer_as_text() {
    let (_mock, h) = against_mock(
        vec![MockReply::text(BAD), MockReply::text(GOOD)],
        marker_enforcer(false),
        ModelOptions {
            stream_mode: StreamMode::Draft,
            ..ModelOptions::default()
        },
    )
    .await;
    let events =
        events(post(&h, json!({"model": "m", "input": "Why?", "stream": true})).await).await;
    let reasoning: String = named(&events, "response.reasoning_summary_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert!(reasoning.contains("UNCHECKED"), "{reasoning}");
    let text: String = named(&events, "response.output_text.delta")
        .iter()
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(text, GOOD);
    // The reasoning item is closed before the message item opens.
    let names: Vec<&str> = events.iter().map(|(n, _)| n.as_str()).collect();
    let closed = names
        .iter()
        .position(|n| *n == "response.reasoning_summary_text.done")
        .unwrap();
    let text_at = names
        .iter()
        .position(|n| *n == "response.content_part.added")
        .unwrap();
    assert!(closed < text_at, "{names:?}");
    // The final response lists every item the events announced, at their output indexes
    // (openai-python's stream helper rebuilds the answer from it).
    let completed = &named(&events, "response.completed")[0]["response"];
    let output = completed["output"].as_array().unwrap();
    let types: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(types, ["reasoning", "message"]);
    for added in named(&events, "response.output_item.added") {
        let index = added["output_index"].as_u64().unwrap() as usize;
        assert_eq!(output[index]["id"], added["item"]["id"], "{added}");
    }
    assert!(output[0]["summary"][0]["text"]
        .as_str()
        .unwrap()
        .contains("UNCHECKED"));
    // Stored as the stream completed it, reasoning item included.
    let (status, _, stored) = read_back(&h, completed["id"].as_str().unwrap()).await;
    assert_eq!(status, 200);
    assert_eq!(&serde_json::from_str::<Value>(&stored).unwrap(), completed);
}

#[tokio::test]
async fn an_unresolved_stream_ends_in_response_failed_with_its_status() {
    // A stream that started before the verdict (a verdict before the first byte is a plain
    // 422: early_errors.rs).
    let late = || MockReply::text(BAD).delayed(std::time::Duration::from_millis(50));
    let mock = MockOpenAi::start(MockScript::new().replies([late(), late(), late()]))
        .await
        .unwrap();
    let server = server_with(
        streams_start_at_once(ServerConfig::default()),
        mock_upstream(&mock),
        marker_enforcer(false),
        ModelOptions {
            on_unresolved: FailureResponse::Error,
            ..ModelOptions::default()
        },
    );
    let h = Harness::start(server).await;
    let events =
        events(post(&h, json!({"model": "m", "input": "Why?", "stream": true})).await).await;
    assert!(named(&events, "response.output_text.delta").is_empty());
    let failed = named(&events, "response.failed");
    assert_eq!(failed.len(), 1, "{events:?}");
    assert_eq!(failed[0]["status"], 422);
    assert_eq!(failed[0]["response"]["status"], "failed");
    // The code `@ai-sdk/openai` maps to a status it does not retry (it reads only `code`).
    assert_eq!(failed[0]["response"]["error"]["code"], "422");
    assert_eq!(failed[0]["response"]["enforcement"]["status"], "unresolved");
    assert_eq!(events.last().unwrap().0, "response.failed");
}

#[tokio::test]
async fn stored_responses_continue_a_conversation_and_can_be_read_back() {
    let (mock, h) = against_mock(
        vec![MockReply::text(GOOD), MockReply::text(GOOD)],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let sent = post(&h, json!({"model": "m", "input": "Why?"}))
        .await
        .text()
        .await
        .unwrap();
    let first: Value = serde_json::from_str(&sent).unwrap();
    let id = first["id"].as_str().unwrap();
    // Read back as the bytes that were sent.
    let (status, content_type, read) = read_back(&h, id).await;
    assert_eq!((status, content_type.as_str()), (200, "application/json"));
    assert_eq!(read, sent);

    let second = post(
        &h,
        json!({"model": "m", "input": "And why else?", "previous_response_id": id, "instructions": "Short."}),
    )
    .await;
    assert_eq!(second.status(), 200);
    let second: Value = second.json().await.unwrap();
    assert_eq!(second["previous_response_id"], id);
    let sent = &mock.chat_requests()[1];
    assert_eq!(
        sent.messages(),
        [
            ("system".to_string(), "Short.".to_string()),
            ("user".to_string(), "Why?".to_string()),
            ("assistant".to_string(), GOOD.to_string()),
            ("user".to_string(), "And why else?".to_string()),
        ]
    );

    // `store: false` keeps nothing.
    let unstored: Value = post(&h, json!({"model": "m", "input": "Why?", "store": false}))
        .await
        .json()
        .await
        .unwrap();
    let missing = h
        .client
        .get(h.url(&format!(
            "/v1/responses/{}",
            unstored["id"].as_str().unwrap()
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn unknown_response_ids_are_openai_errors() {
    let (h, runner) = {
        let runner = Arc::new(ScriptedRunner::texts([GOOD]));
        let server = server_with(
            ServerConfig::default(),
            runner.clone(),
            marker_enforcer(false),
            ModelOptions::default(),
        );
        (Harness::start(server).await, runner)
    };
    let resp = h
        .client
        .get(h.url("/v1/responses/resp_nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "response_not_found");
    assert!(body["error"]["message"]
        .as_str()
        .unwrap()
        .contains("resp_nope"));

    let resp = post(
        &h,
        json!({"model": "m", "input": "Why?", "previous_response_id": "resp_nope"}),
    )
    .await;
    assert_eq!(resp.status(), 404);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "previous_response_not_found");
    assert_eq!(body["error"]["param"], "previous_response_id");
    assert!(runner.calls().is_empty());
}

#[tokio::test]
async fn fields_that_cannot_be_carried_are_refused_by_name() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for (body, param) in [
        (
            json!({"model": "m", "input": "x", "background": true}),
            "background",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "web_search"}]}),
            "tools",
        ),
        (json!({"model": "m"}), "input"),
        (json!({"input": "x"}), "model"),
    ] {
        let resp = post(&h, body).await;
        assert_eq!(resp.status(), 400);
        let error: Value = resp.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    assert!(runner.calls().is_empty());
}

/// What one cell of the surface matrix saw: the verdict, the attempts and the audit record.
#[derive(Debug, PartialEq)]
struct Verdict {
    status: String,
    attempts: u64,
    codes: Vec<String>,
    audit_status: String,
    audit_attempts: usize,
}

async fn verdict_of(surface: &str, stream: bool, texts: [&'static str; 3]) -> Verdict {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    };
    let runner = Arc::new(ScriptedRunner::texts(texts));
    let enforcer = marker_enforcer(false).with_policy(Policy::builder().max_retries(2).build());
    let options = ModelOptions {
        on_unresolved: FailureResponse::Error,
        ..ModelOptions::default()
    };
    let h = Harness::start(server_with(config, runner, enforcer, options)).await;
    let enforcement = match (surface, stream) {
        ("chat", false) => {
            let body: Value = h.chat(user_body(false)).await.json().await.unwrap();
            body["enforcement"].clone()
        }
        ("chat", true) => {
            let response = h.chat(user_body(true)).await;
            // A verdict known before the first byte: a plain error (here an unresolved answer).
            if response.status() == 422 {
                let body: Value = response.json().await.unwrap();
                body["enforcement"].clone()
            } else {
                let (_, parsed) = read_stream(response).await;
                parsed.chunks().last().unwrap()["enforcement"].clone()
            }
        }
        ("responses", false) => {
            let body: Value = post(&h, json!({"model": "m", "input": "Explain it."}))
                .await
                .json()
                .await
                .unwrap();
            body["enforcement"].clone()
        }
        ("messages", stream) => {
            let body = json!({"model": "m", "max_tokens": 64, "stream": stream,
                              "messages": [{"role": "user", "content": "Explain it."}]});
            let response = h
                .client
                .post(h.url("/v1/messages"))
                .json(&body)
                .send()
                .await
                .unwrap();
            if stream && response.status() == 200 {
                let raw = response.text().await.unwrap();
                // The enforcement rides on `message_delta`, or on the `error` event.
                parse_sse(&raw)
                    .events
                    .iter()
                    .rev()
                    .filter_map(|e| serde_json::from_str::<Value>(&e.data).ok())
                    .find_map(|data| data.get("enforcement").cloned())
                    .unwrap_or(Value::Null)
            } else {
                let body: Value = response.json().await.unwrap();
                body["enforcement"].clone()
            }
        }
        _ => {
            let response = post(
                &h,
                json!({"model": "m", "input": "Explain it.", "stream": true}),
            )
            .await;
            if response.status() == 422 {
                let body: Value = response.json().await.unwrap();
                body["enforcement"].clone()
            } else {
                let events = events(response).await;
                events.last().unwrap().1["response"]["enforcement"].clone()
            }
        }
    };
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let line: Value = serde_json::from_str(audit.lines().next().unwrap()).unwrap();
    Verdict {
        status: enforcement["status"].as_str().unwrap_or("?").to_string(),
        attempts: enforcement["attempts"].as_u64().unwrap_or(0),
        codes: enforcement["issues"]
            .as_array()
            .map(|i| {
                i.iter()
                    .map(|i| i["code"].as_str().unwrap().to_string())
                    .collect()
            })
            .unwrap_or_default(),
        audit_status: line["status"].as_str().unwrap_or("?").to_string(),
        audit_attempts: line["attempts"].as_array().map_or(0, Vec::len),
    }
}

/// One passing and one failing contract through chat, responses and messages,
/// streamed and not: the same verdict, re-asks and audit record in every cell.
#[tokio::test]
async fn one_contract_gets_the_same_verdict_on_every_surface() {
    for (texts, status, attempts) in [
        ([BAD, GOOD, GOOD], "passed", 2),
        // The same errors twice: no progress, the loop stops after two attempts.
        ([BAD, BAD, BAD], "unresolved", 2),
    ] {
        let mut cells = Vec::new();
        for surface in ["chat", "responses", "messages"] {
            for stream in [false, true] {
                cells.push((surface, stream, verdict_of(surface, stream, texts).await));
            }
        }
        let (_, _, first) = &cells[0];
        assert_eq!(first.status, status);
        assert_eq!(first.attempts, attempts);
        assert_eq!(first.audit_status, status);
        assert_eq!(first.audit_attempts, attempts as usize);
        for (surface, stream, verdict) in &cells {
            assert_eq!(verdict, first, "{surface} stream={stream}");
        }
    }
}

/// Fields a chat upstream has no use for are left out, and the answer says which.
#[tokio::test]
async fn fields_left_out_are_named_in_warnings_and_a_header() {
    let (_mock, h) = against_mock(
        vec![MockReply::text(GOOD), MockReply::text(GOOD)],
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let resp = post(
        &h,
        json!({"model": "m", "input": "Why?", "include": ["reasoning.encrypted_content"],
               "truncation": "auto"}),
    )
    .await;
    assert_eq!(
        resp.headers()["x-enforce-warnings"],
        "fields_ignored=include,truncation"
    );
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["warnings"][0]["code"], "fields_ignored");
    assert_eq!(
        body["warnings"][0]["fields"],
        json!(["include", "truncation"])
    );
    // An empty `include` (the Agents SDK sends one) asks for nothing.
    let resp = post(&h, json!({"model": "m", "input": "Why?", "include": []})).await;
    assert!(resp.headers().get("x-enforce-warnings").is_none());
    let body: Value = resp.json().await.unwrap();
    assert!(body.get("warnings").is_none());
}
