//! The OpenAI-compatible runner streaming from the mock server: deltas in order, usage, tool
//! calls, every way a stream can go wrong, the fallbacks for servers that cannot do it, and
//! cancellation by dropping the stream.

use crate::common::{collect, texts};
use enforce_core::Ask;
use enforce_core::{
    runner::FinishReason, runner::ToolCall, Reply, Request, Runner, RunnerError, StreamEvent, Usage,
};
use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use futures_util::StreamExt;
use std::time::Duration;

fn runner(mock: &MockOpenAi, stream: bool) -> OpenAiRunner {
    OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "upstream-model".into(),
        timeout_secs: 5.0,
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        stream,
        ..OpenAiConfig::default()
    })
    .unwrap()
}

fn done(events: &[StreamEvent]) -> Option<&Reply> {
    events.iter().find_map(|e| match e {
        StreamEvent::Done(reply) => Some(reply),
        _ => None,
    })
}

#[tokio::test]
async fn deltas_arrive_in_order_then_the_whole_reply_with_usage() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("one two three four five six"))
            .stream_chunks(3, Duration::ZERO),
    )
    .await
    .unwrap();
    let (events, error) = collect(&runner(&mock, true), &Request::prompt("Count")).await;
    assert!(error.is_none(), "{error:?}");
    let deltas = texts(&events);
    assert_eq!(deltas.len(), 3, "{deltas:?}");
    assert_eq!(deltas.concat(), "one two three four five six");
    let reply = done(&events).expect("a Done event");
    assert_eq!(reply.text, "one two three four five six");
    assert!(reply.usage.is_some_and(|u| u.output_tokens > 0));
    assert!(matches!(events.last(), Some(StreamEvent::Done(_))));
    let body = &mock.chat_requests()[0].body;
    assert_eq!(body["stream"], true);
    assert_eq!(body["stream_options"]["include_usage"], true);
}

#[tokio::test]
async fn the_finish_reason_comes_with_the_reply_whole_or_streamed() {
    for stream in [false, true] {
        let mock = MockOpenAi::start(
            MockScript::new()
                .reply(MockReply::Truncated("{\"a\": [1, 2".into()))
                .reply(MockReply::text("done"))
                .stream_chunks(3, Duration::ZERO),
        )
        .await
        .unwrap();
        let runner = runner(&mock, stream);
        let (events, error) = collect(&runner, &Request::prompt("Count")).await;
        assert!(error.is_none(), "{error:?}");
        let reply = done(&events).expect("a Done event");
        assert_eq!(reply.text, "{\"a\": [1, 2");
        assert_eq!(
            reply.finish_reason,
            Some(FinishReason::Length),
            "stream: {stream}"
        );
        let reply = runner
            .ask(Ask::new(&Request::prompt("Count")))
            .reply()
            .await
            .unwrap();
        assert_eq!(
            reply.finish_reason,
            Some(FinishReason::Stop),
            "stream: {stream}"
        );
    }
}

#[tokio::test]
async fn streamed_tool_calls_come_whole_in_the_reply() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::ToolCalls {
        text: None,
        calls: vec![(
            "call_1".into(),
            "get_weather".into(),
            r#"{"city": "Oslo"}"#.into(),
        )],
    }))
    .await
    .unwrap();
    let (events, error) = collect(&runner(&mock, true), &Request::prompt("Weather?")).await;
    assert!(error.is_none(), "{error:?}");
    let reply = done(&events).unwrap();
    assert_eq!(reply.text, "");
    assert_eq!(
        reply.tool_calls,
        [ToolCall::new(
            "call_1",
            "get_weather",
            r#"{"city": "Oslo"}"#
        )]
    );
}

#[tokio::test]
async fn a_stream_that_breaks_off_or_reports_an_error_is_never_a_short_success() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::StreamCut {
        text: "a long answer that never ends".into(),
        after_chunks: 2,
    }))
    .await
    .unwrap();
    let (events, error) = collect(&runner(&mock, true), &Request::prompt("x")).await;
    assert!(done(&events).is_none());
    assert_eq!(texts(&events).len(), 2);
    assert!(
        matches!(
            &error,
            Some(RunnerError::Upstream {
                status: Some(200),
                ..
            })
        ),
        "{error:?}"
    );

    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::StreamError {
        text: "partial".into(),
        after_chunks: 1,
        message: "model overloaded".into(),
    }))
    .await
    .unwrap();
    let (events, error) = collect(&runner(&mock, true), &Request::prompt("x")).await;
    assert!(done(&events).is_none());
    match error {
        Some(RunnerError::Upstream { message, .. }) => {
            assert!(message.contains("model overloaded"), "{message}")
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn servers_that_refuse_stream_options_are_asked_again_without_them() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reject_stream_options(true)
            .reply(MockReply::text("fine")),
    )
    .await
    .unwrap();
    let runner = runner(&mock, true);
    let (events, error) = collect(&runner, &Request::prompt("x")).await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(done(&events).unwrap().text, "fine");
    let requests = mock.chat_requests();
    assert_eq!(requests.len(), 2);
    assert!(requests[1].body.get("stream_options").is_none());
    // Remembered: the next ask goes without them at once.
    collect(&runner, &Request::prompt("y")).await;
    assert_eq!(mock.chat_requests().len(), 3);
}

#[tokio::test]
async fn stream_false_asks_for_a_whole_answer() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("whole")))
        .await
        .unwrap();
    let (events, error) = collect(&runner(&mock, false), &Request::prompt("x")).await;
    assert!(error.is_none());
    assert_eq!(events.len(), 1);
    assert_eq!(done(&events).unwrap().text, "whole");
    assert_eq!(mock.chat_requests()[0].body["stream"], false);
}

#[tokio::test]
async fn dropping_the_stream_closes_the_connection() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("a b c d e f g h i j k l m n o p"))
            .stream_chunks(16, Duration::from_millis(50)),
    )
    .await
    .unwrap();
    let runner = runner(&mock, true);
    let request = Request::prompt("x");
    {
        let mut stream = runner.ask(Ask::new(&request).streamed());
        let first = stream.next().await;
        assert!(matches!(first, Some(Ok(StreamEvent::Text(_)))), "{first:?}");
    }
    // The mock notices at its next write.
    for _ in 0..100 {
        if mock.abandoned_streams() == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the upstream never saw the stream closed");
}

#[tokio::test]
async fn usage_snapshots_arrive_before_the_end() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("abc")))
        .await
        .unwrap();
    let (events, _) = collect(&runner(&mock, true), &Request::prompt("x")).await;
    let spent: Vec<Option<Usage>> = events
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Spent { usage, .. } => Some(*usage),
            _ => None,
        })
        .collect();
    assert_eq!(spent.len(), 1);
    assert_eq!(spent[0], done(&events).unwrap().usage);
}
