//! Tool calls through the proxy, against the mock OpenAI upstream: answers that call tools reach
//! the client intact (streamed and not), tool history reaches the upstream as sent, calls are
//! checked against the request's `tools` and re-asked in either follow-up style, and text
//! validators leave a reply of only tool calls alone.

use crate::common::{
    marker_enforcer, mock_upstream_with, read_stream, server_with, step_mark, Harness,
};
use enforce_core::{runner::ToolFeedback, Enforcer, Policy, Validator};
use enforce_server::{Model, ModelOptions, Server, ServerConfig};
use enforce_testkit::{MockOpenAi, MockReply, MockScript, RecordedRequest, ToolHistory};
use enforce_validators::pattern::{Pattern, Rule};
use enforce_validators::scope::{Scope, ScopeExt, Source};
use serde_json::{json, Value};
use std::sync::Arc;

const WEATHER: &str = r#"{"city": "Oslo"}"#;

fn tools() -> Value {
    json!([{"type": "function", "function": {
        "name": "get_weather",
        "description": "Weather for a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"], "additionalProperties": false}}}])
}

async fn harness(
    script: MockScript,
    feedback: ToolFeedback,
    enforcer: Enforcer,
    options: ModelOptions,
) -> (MockOpenAi, Harness) {
    let mock = MockOpenAi::start(script).await.unwrap();
    let server = server_with(
        ServerConfig::default(),
        mock_upstream_with(&mock, feedback),
        enforcer,
        options,
    );
    (mock, Harness::start(server).await)
}

fn ask(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "tools": tools(),
           "messages": [{"role": "user", "content": "Weather in Oslo?"}]})
}

fn retrying() -> Enforcer {
    Enforcer::new(vec![]).with_policy(Policy::builder().max_retries(2).build())
}

#[tokio::test]
async fn a_tool_call_reaches_a_json_client_intact_and_is_not_failed_by_text_rules() {
    let script = MockScript::new().reply(MockReply::tool_call("call_1", "get_weather", WEATHER));
    // The step-marker profile: a reply of only tool calls has no text for it to judge.
    let (mock, h) = harness(
        script,
        ToolFeedback::default(),
        marker_enforcer(false),
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-enforce-status"], "passed");
    let body: Value = response.json().await.unwrap();
    let choice = &body["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert!(choice["message"]["content"].is_null());
    assert_eq!(
        choice["message"]["tool_calls"],
        json!([{"id": "call_1", "type": "function",
                "function": {"name": "get_weather", "arguments": WEATHER}}])
    );
    assert_eq!(body["enforcement"]["validated"], true);
    // The declared tools went upstream as the client sent them.
    assert_eq!(mock.chat_requests()[0].body["tools"], tools());
}

#[tokio::test]
async fn a_tool_call_with_text_streams_as_openai_streams_it() {
    let script = MockScript::new().reply(MockReply::ToolCalls {
        text: Some("Let me look that up.".into()),
        calls: vec![
            ("call_1".into(), "get_weather".into(), WEATHER.into()),
            (
                "call_2".into(),
                "get_weather".into(),
                r#"{"city": "Bergen"}"#.into(),
            ),
        ],
    });
    let (_mock, h) = harness(
        script,
        ToolFeedback::default(),
        Enforcer::new(vec![]),
        ModelOptions::default(),
    )
    .await;
    let (_, parsed) = read_stream(h.chat(ask(true)).await).await;
    assert!(parsed.done_last);
    assert_eq!(parsed.content(), "Let me look that up.");
    assert_eq!(
        parsed.tool_calls(),
        [
            ("call_1".into(), "get_weather".into(), WEATHER.into()),
            (
                "call_2".into(),
                "get_weather".into(),
                r#"{"city": "Bergen"}"#.into()
            ),
        ]
    );
    assert_eq!(parsed.finish_reason(), Some("tool_calls"));
    // The first fragment of each call carries id, type and name; later ones only arguments.
    let fragments: Vec<&Value> = parsed
        .chunks()
        .into_iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0))
        .collect();
    assert_eq!(fragments[0]["type"], "function");
    assert!(fragments[1].get("id").is_none());
    let last = parsed
        .chunks()
        .into_iter()
        .rev()
        .find(|c| c.get("enforcement").is_some());
    assert_eq!(last.unwrap()["enforcement"]["status"], "passed");
}

#[tokio::test]
async fn tool_history_reaches_the_upstream_unchanged() {
    let (mock, h) = harness(
        MockScript::new()
            .tool_history(ToolHistory::OpenAi)
            .reply(MockReply::text("It is sunny in Oslo.")),
        ToolFeedback::default(),
        Enforcer::new(vec![]),
        ModelOptions::default(),
    )
    .await;
    let history = json!([
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "call_9", "type": "function",
            "function": {"name": "get_weather", "arguments": WEATHER}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "{\"sky\": \"sunny\"}"},
    ]);
    let response = h
        .chat(json!({"model": "m", "tools": tools(), "messages": history}))
        .await;
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let sent = &mock.chat_requests()[0].body["messages"];
    assert_eq!(sent, &history);
}

/// The messages of the re-ask, as `(role, content, tool_call_id)`.
fn shape(request: &RecordedRequest) -> Vec<(String, Value, Value)> {
    request.body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap_or_default().to_string(),
                m["content"].clone(),
                m.get("tool_call_id").cloned().unwrap_or(Value::Null),
            )
        })
        .collect()
}

#[tokio::test]
async fn an_unknown_tool_is_re_asked_with_a_tool_result_for_openai_style_servers() {
    let script = MockScript::new()
        .tool_history(ToolHistory::OpenAi)
        .reply(MockReply::tool_call("call_1", "delete_everything", "{}"))
        .reply(MockReply::tool_call("call_2", "get_weather", WEATHER));
    let (mock, h) = harness(
        script,
        ToolFeedback::ToolMessages,
        retrying(),
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-enforce-attempts"], "2");
    let body: Value = response.json().await.unwrap();
    assert_eq!(
        body["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "get_weather"
    );
    let reask = &mock.chat_requests()[1];
    let messages = shape(reask);
    let roles: Vec<&str> = messages.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "user"]);
    assert_eq!(messages[2].2, "call_1");
    let feedback = messages[3].1.as_str().unwrap();
    assert!(feedback.contains("UNKNOWN_TOOL"), "{feedback}");
    assert!(feedback.contains("get_weather"), "{feedback}");
}

#[tokio::test]
async fn servers_without_tool_messages_get_the_rejected_call_as_text() {
    let script = || {
        MockScript::new()
            .tool_history(ToolHistory::NoToolMessages)
            .reply(MockReply::tool_call(
                "call_1",
                "get_weather",
                r#"{"town": 3}"#,
            ))
            .reply(MockReply::tool_call("call_2", "get_weather", WEATHER))
    };
    let (mock, h) = harness(
        script(),
        ToolFeedback::UserMessage,
        retrying(),
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-enforce-attempts"], "2");
    let messages = shape(&mock.chat_requests()[1]);
    let roles: Vec<&str> = messages.iter().map(|m| m.0.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    let written = messages[1].1.as_str().unwrap();
    assert!(
        written.contains(r#"get_weather with arguments {"town": 3}"#),
        "{written}"
    );
    let feedback = messages[2].1.as_str().unwrap();
    assert!(feedback.contains("INVALID_TOOL_ARGUMENTS"), "{feedback}");

    // The same server with tool results: it refuses the re-ask, which is why the switch exists.
    let (_mock, h) = harness(
        script(),
        ToolFeedback::ToolMessages,
        retrying(),
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.status(), 502);
    let error: Value = response.json().await.unwrap();
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("HTTP 400"), "{message}");
    assert!(
        message.contains("assistant message content must be a string"),
        "{message}"
    );
}

#[tokio::test]
async fn broken_arguments_stay_unresolved_and_name_line_and_pointer() {
    let script = MockScript::new()
        .reply(MockReply::tool_call(
            "call_1",
            "get_weather",
            "{\"city\": Oslo}",
        ))
        .reply(MockReply::tool_call(
            "call_2",
            "get_weather",
            r#"{"city": 7}"#,
        ));
    let (mock, h) = harness(
        script,
        ToolFeedback::default(),
        Enforcer::new(vec![]).with_policy(Policy::builder().max_retries(1).build()),
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-enforce-status"], "unresolved");
    let body: Value = response.json().await.unwrap();
    let issues = &body["enforcement"]["issues"];
    assert_eq!(issues[0]["code"], "INVALID_TOOL_ARGUMENTS");
    assert!(issues[0]["message"].as_str().unwrap().contains("at /city"));
    assert_eq!(body["enforcement"]["validated"], false);
    let first_feedback = mock.chat_requests()[1].last_user().unwrap();
    assert!(
        first_feedback.contains("not valid JSON"),
        "{first_feedback}"
    );
    assert!(first_feedback.contains("line 1"), "{first_feedback}");
}

#[tokio::test]
async fn a_profile_validator_scoped_to_a_tool_checks_its_arguments() {
    let no_bergen = Pattern::new(
        "no_bergen",
        vec![Rule::new("Bergen", "CITY_NOT_SERVED").unwrap()],
        vec![],
    )
    .scoped(Scope::default().input(Source::Tool {
        name: "get_weather".into(),
        pointer: Some("/city".into()),
    }));
    let enforcer = Enforcer::new(vec![Box::new(no_bergen) as Box<dyn Validator>])
        .with_policy(Policy::builder().max_retries(1).build());
    let script = MockScript::new()
        .reply(MockReply::tool_call(
            "call_1",
            "get_weather",
            r#"{"city": "Bergen"}"#,
        ))
        .reply(MockReply::tool_call("call_2", "get_weather", WEATHER));
    let (mock, h) = harness(
        script,
        ToolFeedback::default(),
        enforcer,
        ModelOptions::default(),
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.headers()["x-enforce-attempts"], "2");
    let feedback = mock.chat_requests()[1].last_user().unwrap();
    assert!(feedback.contains("CITY_NOT_SERVED"), "{feedback}");
}

#[tokio::test]
async fn tool_checks_can_be_switched_off_per_model() {
    let script = MockScript::new().reply(MockReply::tool_call("call_1", "nope", "not json"));
    let (_mock, h) = harness(
        script,
        ToolFeedback::default(),
        retrying(),
        ModelOptions {
            check_tool_calls: false,
            ..ModelOptions::default()
        },
    )
    .await;
    let response = h.chat(ask(false)).await;
    assert_eq!(response.headers()["x-enforce-status"], "passed");
    assert_eq!(response.headers()["x-enforce-attempts"], "1");
}

#[tokio::test]
async fn hidden_step_markers_are_recorded_and_put_back_in_history() {
    let script = MockScript::new()
        .reply(MockReply::text("Here is why.\n\n<!-- STEP: why -->"))
        .reply(MockReply::text("Next.\n\n<!-- STEP: constraints -->"));
    let (mock, h) = harness(
        script,
        ToolFeedback::default(),
        marker_enforcer(false),
        ModelOptions {
            hide_step_marker: true,
            ..ModelOptions::default()
        },
    )
    .await;
    let first = json!({"model": "m", "user": "chat-7",
                       "messages": [{"role": "user", "content": "Why?"}]});
    let body: Value = h.chat(first).await.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], "Here is why.");
    let session: Value = h
        .client
        .get(h.url("/v1/sessions/chat-7"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["steps"][0]["step"], "why");

    // Streamed, with the answer sent back as the client shows it.
    let second = json!({"model": "m", "user": "chat-7", "stream": true, "messages": [
        {"role": "user", "content": "Why?"},
        {"role": "assistant", "content": "Here is why."},
        {"role": "user", "content": "And then?"}]});
    let (_, parsed) = read_stream(h.chat(second).await).await;
    assert_eq!(parsed.content(), "Next.");
    let sent = mock.chat_requests()[1].messages();
    assert_eq!(sent[1].1, "Here is why.\n\n<!-- STEP: why -->");
    assert!(step_mark(&sent[1].1).is_some());
}

#[tokio::test]
async fn completions_say_profile_and_overhead_in_headers() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("Hi")))
        .await
        .unwrap();
    let model = Model::new(
        "m",
        mock_upstream_with(&mock, ToolFeedback::default()),
        Arc::new(Enforcer::new(vec![])),
    )
    .with_profile("chat");
    let server = Server::builder(ServerConfig::default())
        .model(model)
        .profile("strict", Arc::new(marker_enforcer(false)))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let response = h
        .chat(json!({"model": "m", "messages": [{"role": "user", "content": "Hi?"}]}))
        .await;
    assert_eq!(response.headers()["x-enforce-profile"], "chat");
    let overhead: f64 = response.headers()["x-enforce-overhead-ms"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((0.0..10_000.0).contains(&overhead), "{overhead}");
    // A profile picked per request is the one reported.
    let response = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("x-enforce-profile", "strict")
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "Hi?"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-enforce-profile"], "strict");
}

#[tokio::test]
async fn streamed_tool_calls_are_held_back_until_checked_in_draft_mode_too() {
    let script = MockScript::new()
        .reply(MockReply::ToolCalls {
            text: Some("Deleting.".into()),
            calls: vec![("call_1".into(), "delete_everything".into(), "{}".into())],
        })
        .reply(MockReply::ToolCalls {
            text: Some("Looking it up.".into()),
            calls: vec![("call_2".into(), "get_weather".into(), WEATHER.into())],
        });
    let (_mock, h) = harness(
        script,
        ToolFeedback::default(),
        retrying(),
        ModelOptions {
            stream_mode: enforce_server::StreamMode::Draft,
            ..ModelOptions::default()
        },
    )
    .await;
    let (raw, parsed) = read_stream(h.chat(ask(true)).await).await;
    // The rejected call never reaches the client, not even as a fragment; drafts are text only.
    assert!(!raw.contains("delete_everything"), "{raw}");
    assert_eq!(
        parsed.tool_calls(),
        [("call_2".into(), "get_weather".into(), WEATHER.into())]
    );
    let reasoning: String = parsed
        .chunks()
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert!(reasoning.contains("Deleting."), "{reasoning}");
    assert_eq!(parsed.content(), "Looking it up.");
    assert_eq!(parsed.finish_reason(), Some("tool_calls"));
}
