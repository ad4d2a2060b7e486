//! The `openai` runner with `api: responses` against the mock's `/v1/responses`: the request
//! translated (instructions, input items, Responses fields), answers read back whole and
//! streamed (text, tool calls, usage, the token limit), re-asks and errors typed as on chat.

use enforce_core::runner::FinishReason;
use enforce_core::Ask;
use enforce_core::{runner::ToolCall, Message, Reply, Request, Runner, RunnerError, StreamEvent};
use enforce_runner::{OpenAiApi, OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use futures_util::StreamExt;
use serde_json::json;

fn runner(mock: &MockOpenAi, stream: bool) -> OpenAiRunner {
    OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        api_key: Some("sk-test".into()),
        model: "upstream-model".into(),
        params: serde_json::from_value(json!({"max_tokens": 50})).unwrap(),
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        stream,
        api: OpenAiApi::Responses,
        ..OpenAiConfig::default()
    })
    .unwrap()
}

async fn streamed(
    runner: &OpenAiRunner,
    request: &Request,
) -> (String, Result<Reply, RunnerError>) {
    let mut stream = runner.ask(Ask::new(request).streamed());
    let mut text = String::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(StreamEvent::Text(delta)) => text.push_str(&delta),
            Ok(StreamEvent::Done(reply)) => return (text, Ok(reply)),
            Ok(_) => {}
            Err(e) => return (text, Err(e)),
        }
    }
    (
        text,
        Err(RunnerError::Protocol {
            message: "no end".into(),
        }),
    )
}

#[tokio::test]
async fn answers_come_from_the_responses_api_whole_and_streamed() {
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("Hello there."),
        MockReply::Truncated("Hello th".into()),
    ]))
    .await
    .unwrap();
    let request = Request {
        messages: vec![Message::system("Be kind."), Message::user("Hi")],
        ..Request::default()
    };
    let streaming = runner(&mock, true);
    assert!(
        streaming.endpoint().ends_with("/v1/responses"),
        "{}",
        streaming.endpoint()
    );
    let (deltas, reply) = streamed(&streaming, &request).await;
    let reply = reply.expect("an answer");
    assert_eq!(
        (deltas.as_str(), reply.text.as_str()),
        ("Hello there.", "Hello there.")
    );
    assert_eq!(reply.finish_reason, Some(FinishReason::Stop));
    assert!(reply.usage.is_some_and(|u| u.output_tokens > 0));
    let asked = &mock.requests()[0];
    assert_eq!(asked.path, "/v1/responses");
    assert_eq!(asked.authorization.as_deref(), Some("Bearer sk-test"));
    assert_eq!(
        asked.body,
        json!({"model": "upstream-model", "instructions": "Be kind.",
               "input": [{"role": "user", "content": "Hi"}],
               "max_output_tokens": 50, "stream": true, "store": false})
    );

    // Whole, cut at the token limit: the loop's TRUNCATED.
    let reply = runner(&mock, false)
        .ask(Ask::new(&request))
        .reply()
        .await
        .expect("an answer");
    assert_eq!(reply.text, "Hello th");
    assert_eq!(reply.finish_reason, Some(FinishReason::Length));
    assert_eq!(mock.requests()[1].body["stream"], false);
}

#[tokio::test]
async fn tool_calls_and_their_results_round_trip() {
    let call = || MockReply::tool_call("call_9", "get_weather", r#"{"city":"Paris"}"#);
    let mock = MockOpenAi::start(MockScript::new().replies([call(), call()]))
        .await
        .unwrap();
    let mut request = Request::prompt("Weather in Paris?");
    request.params.insert(
        "tools".into(),
        json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]),
    );
    let expected = [ToolCall::new(
        "call_9",
        "get_weather",
        r#"{"city":"Paris"}"#,
    )];
    for stream in [true, false] {
        let runner = runner(&mock, stream);
        let reply = if stream {
            streamed(&runner, &request).await.1
        } else {
            runner.ask(Ask::new(&request)).reply().await
        }
        .expect("an answer");
        assert_eq!(reply.tool_calls, expected, "stream={stream}");
        assert_eq!(reply.finish_reason, Some(FinishReason::ToolCalls));
    }
    let asked = &mock.requests()[0].body;
    assert_eq!(
        asked["tools"],
        json!([{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}])
    );

    // A conversation with the call and its result goes out as Responses items.
    let mut tool = Message::new(enforce_core::Role::Tool, "18 C");
    tool.tool_call_id = Some("call_9".into());
    let follow = Request {
        messages: vec![
            Message::user("Weather in Paris?"),
            Message::assistant_calling("", expected.to_vec()),
            tool,
        ],
        ..Request::default()
    };
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("18 C in Paris.")))
        .await
        .unwrap();
    let reply = runner(&mock, false)
        .ask(Ask::new(&follow))
        .reply()
        .await
        .expect("an answer");
    assert_eq!(reply.text, "18 C in Paris.");
    assert_eq!(
        mock.requests()[0].body["input"],
        json!([
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": "call_9", "name": "get_weather", "arguments": r#"{"city":"Paris"}"#},
            {"type": "function_call_output", "call_id": "call_9", "output": "18 C"},
        ])
    );
}

#[tokio::test]
async fn errors_are_typed_as_on_chat() {
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::rate_limited(9)))
        .await
        .unwrap();
    let error = runner(&mock, true)
        .ask(Ask::new(&Request::prompt("x")))
        .reply()
        .await
        .unwrap_err();
    assert!(
        matches!(
            error,
            RunnerError::Busy {
                status: 429,
                retry_after_secs: Some(9),
                ..
            }
        ),
        "{error:?}"
    );
}
