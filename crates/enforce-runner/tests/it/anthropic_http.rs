//! The Anthropic Messages runner against the scripted mock Anthropic server: the headers and
//! body it sends, streamed and whole answers, tool use, thinking, every error type, retries,
//! timeouts, and the early abort closing the stream.

use crate::common::{collect, texts, NoAcme};
use enforce_core::Ask;
use enforce_core::{
    runner::FinishReason, runner::ToolCall, Context, Enforcer, Message, Policy, Reply, Request,
    Runner, RunnerError, Status, StreamEvent, Usage,
};
use enforce_runner::{AnthropicConfig, AnthropicRunner, RetryConfig};
use enforce_testkit::mock_anthropic::{
    mock_output_tokens, MOCK_CACHE_READ_TOKENS, MOCK_INPUT_TOKENS,
};
use enforce_testkit::{AnthropicReply, MockAnthropic};
use futures_util::StreamExt;
use serde_json::json;
use std::time::{Duration, Instant};

fn config(mock: &MockAnthropic, stream: bool, max_retries: u32) -> AnthropicConfig {
    AnthropicConfig {
        base_url: mock.url(),
        api_key: Some("sk-ant-test".into()),
        model: "claude-test".into(),
        max_tokens: 256,
        timeout_secs: 5.0,
        retry: RetryConfig {
            max_retries,
            initial_backoff_ms: 5,
            max_backoff_ms: 20,
            max_retry_after_secs: 5,
        },
        stream,
        ..AnthropicConfig::default()
    }
}

fn runner(mock: &MockAnthropic, stream: bool, max_retries: u32) -> AnthropicRunner {
    AnthropicRunner::new(config(mock, stream, max_retries)).unwrap()
}

async fn scripted(replies: Vec<AnthropicReply>) -> MockAnthropic {
    MockAnthropic::scripted(replies, 3, Duration::ZERO)
        .await
        .unwrap()
}

fn done(events: &[StreamEvent]) -> &Reply {
    events
        .iter()
        .find_map(|e| match e {
            StreamEvent::Done(reply) => Some(reply),
            _ => None,
        })
        .expect("a Done event")
}

fn expected_usage(text: &str, tool_input: &str) -> Usage {
    Usage {
        input_tokens: MOCK_INPUT_TOKENS + MOCK_CACHE_READ_TOKENS,
        output_tokens: mock_output_tokens(text, tool_input),
    }
}

#[tokio::test]
async fn streamed_text_with_headers_system_and_exact_usage() {
    let answer = "one two three four five six";
    let mock = scripted(vec![AnthropicReply::text(answer)]).await;
    let mut request = Request {
        messages: vec![Message::system("Be brief."), Message::user("Count")],
        ..Request::default()
    };
    request.params.insert("temperature".into(), json!(0.3));
    request.params.insert("seed".into(), json!(7));
    let (events, error) = collect(&runner(&mock, true, 0), &request).await;
    assert!(error.is_none(), "{error:?}");
    let deltas = texts(&events);
    assert_eq!(deltas.len(), 3, "{deltas:?}");
    assert_eq!(deltas.concat(), answer);
    let reply = done(&events);
    assert_eq!(reply.text, answer);
    assert_eq!(reply.usage, Some(expected_usage(answer, "")));
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
    // Usage is reported as it is learnt: from message_start on, before the end.
    let first_spent = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Spent { .. }))
        .expect("a usage snapshot");
    let first_text = events
        .iter()
        .position(|e| matches!(e, StreamEvent::Text(_)))
        .unwrap();
    assert!(first_spent < first_text, "{events:?}");

    let sent = &mock.requests()[0];
    assert_eq!(sent.header("x-api-key"), Some("sk-ant-test"));
    assert_eq!(sent.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(sent.header("authorization"), None);
    assert_eq!(
        sent.body,
        json!({"temperature": 0.3, "model": "claude-test", "max_tokens": 256,
               "system": "Be brief.", "messages": [{"role": "user", "content": "Count"}],
               "stream": true}),
        "no seed: the Messages API has none and refuses unknown fields"
    );
}

#[tokio::test]
async fn a_whole_answer_when_streaming_is_off() {
    let mock = scripted(vec![AnthropicReply::text("whole").stop_reason("max_tokens")]).await;
    let runner = runner(&mock, false, 0);
    let (events, error) = collect(&runner, &Request::prompt("x")).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(events.len(), 1);
    let reply = done(&events);
    assert_eq!(reply.text, "whole");
    assert_eq!(reply.finish_reason, Some(FinishReason::Length));
    assert_eq!(reply.usage, Some(expected_usage("whole", "")));
    assert_eq!(mock.requests()[0].body["stream"], false);
    let reply = runner
        .ask(Ask::new(&Request::prompt("again")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "whole");
}

#[tokio::test]
async fn tool_use_streamed_and_whole_with_thinking_kept_apart() {
    let input = r#"{"city": "Oslo", "unit": "celsius"}"#;
    for stream in [true, false] {
        let mock = scripted(vec![AnthropicReply::tool_use(
            "Let me look.",
            "toolu_01",
            "get_weather",
            input,
        )
        .with_thinking("The user wants Oslo.")])
        .await;
        let mut request = Request::prompt("Weather in Oslo?");
        request.params.insert(
            "tools".into(),
            json!([{"type": "function", "function": {"name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]),
        );
        request
            .params
            .insert("tool_choice".into(), json!("required"));
        let (events, error) = collect(&runner(&mock, stream, 0), &request).await;
        assert!(error.is_none(), "{error:?}");
        let reply = done(&events);
        assert_eq!(reply.text, "Let me look.", "stream: {stream}");
        assert_eq!(reply.finish_reason, Some(FinishReason::ToolCalls));
        assert_eq!(reply.tool_calls.len(), 1);
        let call = &reply.tool_calls[0];
        assert_eq!(
            (call.id.as_str(), call.name.as_str()),
            ("toolu_01", "get_weather")
        );
        let arguments: serde_json::Value = serde_json::from_str(&call.arguments).unwrap();
        assert_eq!(arguments, json!({"city": "Oslo", "unit": "celsius"}));
        if stream {
            // Streamed, the arguments are the fragments as written, byte for byte.
            assert_eq!(call.arguments, input);
            assert_eq!(reply.usage, Some(expected_usage("Let me look.", input)));
            assert!(events.contains(&StreamEvent::Reasoning("The user wants Oslo.".into())));
        }
        let body = &mock.requests()[0].body;
        assert_eq!(
            body["tools"],
            json!([{"name": "get_weather", "input_schema":
                {"type": "object", "properties": {"city": {"type": "string"}}}}])
        );
        assert_eq!(body["tool_choice"], json!({"type": "any"}));
    }
}

#[tokio::test]
async fn a_follow_up_sends_the_calls_back_with_a_result_each_and_the_feedback() {
    let mock = scripted(vec![AnthropicReply::text("Fixed.")]).await;
    let runner = runner(&mock, true, 0);
    let request = Request {
        messages: vec![Message::system("Sys."), Message::user("Weather?")],
        ..Request::default()
    };
    let previous = Reply {
        text: "Calling.".into(),
        tool_calls: vec![ToolCall::new("toolu_7", "get_weather", r#"{"city":1}"#)],
        ..Reply::default()
    };
    let mut stream =
        runner.ask(Ask::follow_up(&request, &previous, "City must be a string.").streamed());
    while let Some(event) = stream.next().await {
        event.unwrap();
    }
    drop(stream);
    let body = &mock.requests()[0].body;
    assert_eq!(body["system"], "Sys.");
    let messages = body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(
        messages[1],
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Calling."},
            {"type": "tool_use", "id": "toolu_7", "name": "get_weather", "input": {"city": 1}}]})
    );
    assert_eq!(messages[2]["role"], "user");
    let blocks = messages[2]["content"].as_array().unwrap();
    assert_eq!(blocks[0]["type"], "tool_result");
    assert_eq!(blocks[0]["tool_use_id"], "toolu_7");
    assert_eq!(
        blocks[1],
        json!({"type": "text", "text": "City must be a string."})
    );
}

#[tokio::test]
async fn client_errors_are_typed_and_never_retried() {
    for (status, kind, message) in [
        (401, "authentication_error", "invalid x-api-key"),
        (403, "permission_error", "not allowed"),
        (404, "not_found_error", "model: claude-nope"),
        (400, "invalid_request_error", "max_tokens: too large"),
    ] {
        let mock = scripted(vec![AnthropicReply::error(status, kind, message)]).await;
        let error = runner(&mock, true, 3)
            .ask(Ask::new(&Request::prompt("x")).streamed())
            .next()
            .await
            .unwrap()
            .unwrap_err();
        assert_eq!(
            error,
            RunnerError::Upstream {
                status: Some(status),
                message: format!("{message} (type: {kind})")
            }
        );
        assert!(!error.is_transient(), "{kind}");
        assert_eq!(mock.requests().len(), 1, "{kind}: not retried");
    }
}

#[tokio::test]
async fn overloaded_and_server_errors_are_retried_then_reported() {
    // 529 then a good answer: the retry is invisible.
    let mock = scripted(vec![
        AnthropicReply::error(529, "overloaded_error", "Overloaded"),
        AnthropicReply::text("after the storm"),
    ])
    .await;
    let reply = runner(&mock, true, 2)
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "after the storm");
    assert_eq!(mock.requests().len(), 2);

    // Always overloaded: every try is spent, and the error says so.
    let mock = scripted(vec![AnthropicReply::error(
        529,
        "overloaded_error",
        "Overloaded",
    )])
    .await;
    let (_, error) = collect(&runner(&mock, true, 2), &Request::prompt("x")).await;
    let error = error.expect("an error");
    assert_eq!(
        error,
        RunnerError::Busy {
            status: 529,
            message: "Overloaded (type: overloaded_error) (gave up after 3 tries)".into(),
            retry_after_secs: None,
        }
    );
    assert!(error.is_transient());
    assert_eq!(mock.requests().len(), 3);

    let mock = scripted(vec![AnthropicReply::error(500, "api_error", "Internal")]).await;
    let error = runner(&mock, false, 0)
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RunnerError::Upstream { status: Some(500), message } if message.contains("api_error")),
        "{error:?}"
    );
}

#[tokio::test]
async fn a_rate_limit_waits_for_retry_after() {
    let mock = scripted(vec![
        AnthropicReply::rate_limited(1),
        AnthropicReply::text("ok"),
    ])
    .await;
    let started = Instant::now();
    let reply = runner(&mock, true, 1)
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap();
    assert_eq!(reply.text, "ok");
    assert!(
        started.elapsed() >= Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );

    // A retry-after beyond max_retry_after_secs ends the retries at once, as a 429.
    let mock = scripted(vec![AnthropicReply::rate_limited(3600)]).await;
    let started = Instant::now();
    let error = runner(&mock, true, 3)
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(
        matches!(&error, RunnerError::Busy { status: 429, message, retry_after_secs: Some(3600) } if message.contains("rate_limit_error")),
        "{error:?}"
    );
    assert!(error.is_transient());
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn an_error_event_mid_stream_is_typed_by_its_error_type() {
    let mock = scripted(vec![AnthropicReply::error_event(
        "partial answ",
        "overloaded_error",
        "Overloaded",
    )])
    .await;
    let (events, error) = collect(&runner(&mock, true, 0), &Request::prompt("x")).await;
    assert_eq!(texts(&events).concat(), "partial answ");
    let error = error.expect("an error");
    assert_eq!(
        error,
        RunnerError::Busy {
            status: 529,
            message: "Overloaded (type: overloaded_error)".into(),
            retry_after_secs: None,
        }
    );
    assert!(error.is_transient());
}

#[tokio::test]
async fn a_stream_without_message_stop_is_an_error_not_a_short_success() {
    let mock = scripted(vec![AnthropicReply::cut_short("half an ans")]).await;
    let (events, error) = collect(&runner(&mock, true, 0), &Request::prompt("x")).await;
    assert!(!events.iter().any(|e| matches!(e, StreamEvent::Done(_))));
    match error {
        Some(RunnerError::Upstream { message, .. }) => {
            assert!(message.contains("without message_stop"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn timeouts_and_an_unreachable_server() {
    let mock = scripted(vec![
        AnthropicReply::text("late").delayed(Duration::from_secs(3))
    ])
    .await;
    let runner = AnthropicRunner::new(AnthropicConfig {
        timeout_secs: 0.3,
        ..config(&mock, true, 0)
    })
    .unwrap();
    let started = Instant::now();
    let (_, error) = collect(&runner, &Request::prompt("x")).await;
    assert_eq!(error, Some(RunnerError::Timeout { after_ms: 300 }));
    assert!(started.elapsed() < Duration::from_secs(2));

    // Nothing listens there (the mock is gone): an upstream error without status, transient.
    let url = mock.url();
    drop(mock);
    let runner = AnthropicRunner::new(AnthropicConfig {
        base_url: url,
        api_key: Some("k".into()),
        model: "m".into(),
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        ..AnthropicConfig::default()
    })
    .unwrap();
    let error = runner
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap_err();
    assert!(
        matches!(&error, RunnerError::Upstream { status: None, message } if message.contains("cannot connect")),
        "{error:?}"
    );
    assert!(error.is_transient());
}

#[tokio::test]
async fn an_early_abort_closes_the_stream_and_the_reask_carries_the_feedback() {
    let long = "We recommend Acme for this, because it is cheap and near and reliable and \
                fast and everyone in the region has used it for years without trouble.";
    let mock = MockAnthropic::scripted(
        vec![
            AnthropicReply::text(long),
            AnthropicReply::text("We recommend a local supplier."),
        ],
        40,
        Duration::from_millis(15),
    )
    .await
    .unwrap();
    let enforcer = Enforcer::new(vec![Box::new(NoAcme)])
        .with_policy(Policy::builder().partial_check_bytes(4).build());
    let outcome = enforcer
        .run(
            &runner(&mock, true, 0),
            &Request::prompt("Recommend one."),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let cut = outcome.attempts[0]
        .cut
        .as_ref()
        .expect("the first answer was cut");
    assert_eq!(cut.codes, ["FORBIDDEN_TERM"]);
    assert!(cut.bytes < long.len() / 2, "{cut:?}");
    // The cut attempt is audited with the usage message_start reported.
    assert_eq!(
        outcome.attempts[0].usage.map(|u| u.input_tokens),
        Some(MOCK_INPUT_TOKENS + MOCK_CACHE_READ_TOKENS)
    );
    // The mock saw the stream closed before its end.
    for _ in 0..100 {
        if mock.abandoned_streams() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(mock.abandoned_streams(), 1);
    // The re-ask is stateless: the question, the cut answer, the feedback.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap().clone();
    assert_eq!(messages.len(), 3, "{messages:?}");
    assert_eq!(messages[1]["role"], "assistant");
    let feedback = messages[2]["content"].as_str().unwrap();
    assert!(feedback.contains("[FORBIDDEN_TERM]"), "{feedback}");
}
