//! The real OpenAI-flavoured Python clients against the proxy: the openai SDK
//! (`responses.create` streamed and not, a function tool and its loop, `responses.parse`,
//! `chat.completions.parse` with a Pydantic model), LangChain's `ChatOpenAI` (invoke, stream,
//! `with_structured_output`, tools, the Responses API) and the OpenAI Agents SDK (one agent,
//! one function tool, by model name). An answer that stays broken must reach each client as
//! its own error type with enforce's message in it. The endpoints enforce does not enforce
//! (`embeddings.create`, the legacy `completions.create`) reach the mock OpenAI upstream through
//! it. One script run serves the three tests;
//! the clients install themselves into the shared venv under the target directory.

use crate::common::Harness;
use crate::sdk::{self, ByQuestion, Cases, Clients, AFTER_TOOL, BROKEN_CODE, HELLO};
use enforce_server::Upstream;
use enforce_testkit::{MockOpenAi, MockScript};
use serde_json::{json, Value};
use std::sync::Arc;

/// The cases of every family, from one script run (importing the openai SDK, which all three
/// build on, is most of a run's time), and the upstream that answered them; `None` when the
/// clients cannot be installed. The first test to ask runs it; the others wait for it.
async fn python_cases() -> Option<&'static (Cases, Arc<ByQuestion>)> {
    static RUN: tokio::sync::OnceCell<Option<(Cases, Arc<ByQuestion>)>> =
        tokio::sync::OnceCell::const_new();
    RUN.get_or_init(|| async {
        let upstream = Arc::new(ByQuestion::default());
        let mock = MockOpenAi::start(MockScript::new()).await.ok()?;
        let forwarded = Upstream::openai(mock.url(), Some("sk-upstream"));
        let h = Harness::start(sdk::forwarding_server(upstream.clone(), Some(forwarded))).await;
        let args = [h.base.as_str(), "m", "openai,langchain,agents"];
        let cases = sdk::run_script(Clients::Python, "openai_clients.py", &args).await?;
        Some((cases, upstream))
    })
    .await
    .as_ref()
}

/// The JSON `{name, age}` answer parsed into the client's own model class.
fn assert_person(case: &Value) {
    assert_eq!(case["parsed"], json!({"name": "Ada", "age": 36}), "{case}");
    assert_eq!(case["type"], "Person", "{case}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_python_sdk_reads_responses_tools_parsed_models_and_errors() {
    let Some((cases, upstream)) = python_cases().await else {
        return;
    };

    let text = cases.ok("responses_text");
    assert_eq!(text["text"], HELLO);
    assert_eq!(text["status"], "completed");
    assert_eq!(text["usage"], json!([11, 7]));
    assert_eq!(
        text["enforcement"], "passed",
        "the SDK keeps the extra field"
    );
    assert_eq!(
        text["request_id"], text["id"],
        "x-request-id is the response id"
    );

    // A re-ask the client never notices.
    let mended = cases.ok("responses_mended");
    assert_eq!(mended["text"], HELLO);
    assert_eq!(mended["attempts"], 2);
    assert_eq!(upstream.calls("(responses_mended)"), 2);

    // Drafts as a reasoning item, which the SDK's stream helper keeps in the final response.
    let draft = cases.ok("responses_stream_draft");
    assert_eq!(draft["items"], json!(["reasoning", "message"]), "{draft}");
    assert!(
        draft["reasoning"][0].as_str().unwrap().contains("BROKEN"),
        "{draft}"
    );
    assert_eq!(draft["text"], HELLO);

    let continued = cases.ok("responses_continued");
    assert_eq!(continued["text"], HELLO);
    assert_eq!(continued["previous"], continued["first_id"]);
    assert_eq!(continued["retrieved"], HELLO);

    let streamed = cases.ok("responses_stream_text");
    let deltas = sdk::joined(&streamed["deltas"]);
    assert_eq!(deltas, HELLO);
    assert_eq!(streamed["text"], HELLO);
    let events = &streamed["events"];
    assert_eq!(events[0], "response.created", "{events}");
    assert_eq!(
        events.as_array().unwrap().last().unwrap(),
        "response.completed"
    );

    let tool = cases.ok("responses_tool");
    assert_eq!(tool["first"][0]["type"], "function_call", "{tool}");
    assert_eq!(tool["first"][0]["name"], "get_weather");
    assert_eq!(tool["first"][0]["arguments"], json!({"city": "Oslo"}));
    assert_eq!(tool["text"], AFTER_TOOL, "the call's output went back");

    let streamed_tool = cases.ok("responses_stream_tool");
    assert_eq!(
        streamed_tool["items"],
        json!([{"type": "function_call", "name": "get_weather",
                "arguments": {"city": "Oslo"}, "call_id": "call_weather_1"}]),
    );
    assert!(streamed_tool["events"]
        .as_array()
        .unwrap()
        .contains(&json!("response.function_call_arguments.done")));

    // A tool call in draft mode: no text to show as a draft, the call's events as held.
    let draft_tool = cases.ok("responses_stream_draft_tool");
    assert_eq!(draft_tool["items"], streamed_tool["items"], "{draft_tool}");

    assert_person(cases.ok("responses_parse"));
    let parsed = cases.ok("chat_parse");
    assert_person(parsed);
    assert_eq!(parsed["finish_reason"], "stop");

    // Unresolved: the SDK's own error types, with enforce's message in what they print.
    let failed = cases.failed(
        "responses_unresolved",
        "UnprocessableEntityError",
        BROKEN_CODE,
    );
    assert_eq!(failed["status"], 422);
    // The request's JSON Schema is checked whatever the profile: a missing field is refused.
    let failed = cases.failed("chat_parse_unresolved", "UnprocessableEntityError", "age");
    assert_eq!(failed["status"], 422);
    // In a stream that began (with drafts): a chat stream's error chunk is the SDK's
    // APIError, a Responses stream ends in its ResponseFailedEvent.
    cases.failed("chat_stream_draft_unresolved", "APIError", BROKEN_CODE);
    let failed = cases.failed(
        "responses_stream_draft_unresolved",
        "ResponseFailedEvent",
        BROKEN_CODE,
    );
    assert_eq!(failed["code"], "422", "a status the AI SDK does not retry");
    // A held stream: the same in the stream, or a plain 422 before its first byte.
    let held = ["UnprocessableEntityError"];
    cases.failed_as_one_of(
        "chat_stream_unresolved",
        &["APIError", held[0]],
        BROKEN_CODE,
    );
    cases.failed_as_one_of(
        "responses_stream_unresolved",
        &["ResponseFailedEvent", held[0]],
        BROKEN_CODE,
    );
    // Not enforced, passed through to the upstream and read as the SDK's own types.
    let embedded = cases.ok("embeddings_create");
    assert_eq!(embedded["type"], "CreateEmbeddingResponse", "{embedded}");
    assert_eq!(embedded["vectors"], 2);
    assert_eq!(embedded["dimensions"], 64);
    let completed = cases.ok("completions_create");
    assert_eq!(completed["type"], "Completion", "{completed}");
    assert_eq!(completed["text"], "Say this is a test (completions_create)");
    let streamed = cases.ok("completions_stream");
    assert_eq!(
        sdk::joined(&streamed["chunks"]),
        "Say this is a test (completions_stream)"
    );
    assert!(
        streamed["chunks"].as_array().unwrap().len() > 1,
        "{streamed}"
    );

    // One ask and one re-ask each: no client retried an unresolved answer.
    upstream.assert_not_retried(&[
        "(responses_unresolved)",
        "(chat_parse_unresolved)",
        "(responses_stream_unresolved)",
        "(chat_stream_unresolved)",
        "(responses_stream_draft_unresolved)",
        "(chat_stream_draft_unresolved)",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn langchain_chat_openai_invokes_streams_structures_and_raises() {
    let Some((cases, upstream)) = python_cases().await else {
        return;
    };

    let invoked = cases.ok("invoke");
    assert_eq!(invoked["type"], "AIMessage");
    assert_eq!(invoked["text"], HELLO);
    assert_eq!(invoked["finish_reason"], "stop");
    assert_eq!(invoked["usage"], json!([11, 7]));
    let streamed = cases.ok("stream");
    let text = sdk::joined(&streamed["chunks"]);
    assert_eq!(text, HELLO);
    assert_eq!(
        streamed["usage"],
        json!([11, 7]),
        "the stream's usage chunk"
    );
    assert_person(cases.ok("structured"));
    assert_person(cases.ok("structured_by_tool"));
    assert_eq!(
        cases.ok("tools")["tool_calls"],
        json!([{"name": "get_weather", "args": {"city": "Oslo"}}])
    );
    // Drafts travel as `reasoning_content`, which LangChain does not put into the content.
    let draft = sdk::joined(&cases.ok("stream_draft")["chunks"]);
    assert_eq!(draft, HELLO);
    // The same through the Responses API.
    let responses = cases.ok("responses_api");
    assert_eq!(responses["text"], HELLO);
    assert_eq!(
        sdk::joined(&cases.ok("responses_api_stream")["chunks"]),
        HELLO
    );
    assert_person(cases.ok("responses_api_structured"));
    assert_eq!(
        cases.ok("responses_api_tools")["tool_calls"],
        json!([{"name": "get_weather", "args": {"city": "Oslo"}}])
    );

    // LangChain raises the openai SDK's errors as they are.
    let failed = cases.failed("invoke_unresolved", "UnprocessableEntityError", BROKEN_CODE);
    assert_eq!(failed["status"], 422);
    cases.failed("stream_draft_unresolved", "APIError", BROKEN_CODE);
    cases.failed_as_one_of(
        "stream_unresolved",
        &["APIError", "UnprocessableEntityError"],
        BROKEN_CODE,
    );
    cases.failed("structured_unresolved", "UnprocessableEntityError", "age");
    cases.failed(
        "responses_api_unresolved",
        "UnprocessableEntityError",
        BROKEN_CODE,
    );
    // LangChain raises a `response.failed` event's error as a ValueError.
    cases.failed(
        "responses_api_stream_draft_unresolved",
        "ValueError",
        BROKEN_CODE,
    );
    cases.failed_as_one_of(
        "responses_api_stream_unresolved",
        &["ValueError", "UnprocessableEntityError"],
        BROKEN_CODE,
    );
    // The tool's arguments are checked against its schema: the re-asked call still broke it.
    cases.failed(
        "structured_by_tool_unresolved",
        "UnprocessableEntityError",
        "INVALID_TOOL_ARGUMENTS",
    );
    upstream.assert_not_retried(&[
        "(invoke_unresolved)",
        "(stream_unresolved)",
        "(structured_unresolved)",
        "(structured_by_tool_unresolved)",
        "(responses_api_unresolved)",
        "(responses_api_stream_unresolved)",
        "(stream_draft_unresolved)",
        "(responses_api_stream_draft_unresolved)",
    ]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openai_agents_sdk_runs_an_agent_with_a_tool_and_raises() {
    let Some((cases, upstream)) = python_cases().await else {
        return;
    };
    for name in ["run_tool", "run_streamed"] {
        let run = cases.ok(name);
        assert_eq!(run["final_output"], AFTER_TOOL, "{run}");
        assert_eq!(run["cities"], json!(["Oslo"]), "the tool ran once: {run}");
    }
    assert_eq!(
        cases.ok("run_tool")["items"],
        json!([
            "tool_call_item",
            "tool_call_output_item",
            "message_output_item"
        ])
    );
    assert_person(cases.ok("run_structured"));
    let failed = cases.failed("run_unresolved", "UnprocessableEntityError", BROKEN_CODE);
    assert_eq!(failed["status"], 422);
    // Streamed, the SDK raises its own error for a `response.failed` event.
    cases.failed(
        "run_streamed_draft_unresolved",
        "ModelBehaviorError",
        BROKEN_CODE,
    );
    cases.failed_as_one_of(
        "run_streamed_unresolved",
        &["ModelBehaviorError", "UnprocessableEntityError"],
        BROKEN_CODE,
    );
    upstream.assert_not_retried(&[
        "(run_unresolved)",
        "(run_streamed_unresolved)",
        "(run_streamed_draft_unresolved)",
    ]);
}
