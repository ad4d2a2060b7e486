//! The real Vercel AI SDK (`ai` + `@ai-sdk/openai`) against the proxy, through both of the
//! provider's OpenAI models: the default `openai(model)` (the Responses API) and
//! `openai.chat(model)`; `generateText`, `streamText`, a tool loop, `generateObject`, and an
//! unresolved answer, which must reach the SDK as its own error type with enforce's message
//! in it and must not be retried by the SDK. One script run; the SDK installs itself into an
//! npm prefix under the target directory, and the test says "skipped" without node or npm.

use crate::common::Harness;
use crate::sdk::{self, ByQuestion, Clients, AFTER_TOOL, BROKEN_CODE, HELLO};
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_vercel_ai_sdk_reads_both_openai_apis_tools_objects_and_errors() {
    let upstream = Arc::new(ByQuestion::default());
    let h = Harness::start(sdk::server(upstream.clone())).await;
    let Some(cases) = sdk::run_script(Clients::JavaScript, "ai_sdk.mjs", &[&h.base, "m"]).await
    else {
        return;
    };

    for api in ["responses", "chat"] {
        let case = |name: &str| format!("{api}_{name}");
        let text = cases.ok(&case("generate_text"));
        assert_eq!(text["text"], HELLO, "{text}");
        assert_eq!(text["finishReason"], "stop", "{text}");
        assert_eq!(text["usage"], json!([11, 7]), "{text}");
        assert_eq!(text["enforceStatus"], "passed", "{text}");

        let streamed = cases.ok(&case("stream_text"));
        let deltas = sdk::joined(&streamed["deltas"]);
        assert_eq!(deltas, HELLO, "{streamed}");
        assert_eq!(streamed["text"], HELLO);
        assert_eq!(streamed["finishReason"], "stop");
        assert_eq!(streamed["usage"], json!([11, 7]), "{streamed}");

        // The model "draft" streams each attempt as reasoning: the Responses model shows it
        // as the SDK's reasoning; the chat model does not read `reasoning_content`.
        let draft = cases.ok(&case("stream_draft"));
        assert_eq!(draft["text"], HELLO, "{draft}");
        assert_eq!(
            draft["deltas"],
            json!([HELLO]),
            "no draft in the text: {draft}"
        );
        if api == "responses" {
            assert!(
                draft["reasoning"].as_str().unwrap().contains("BROKEN"),
                "{draft}"
            );
        }

        for name in ["tool", "stream_tool"] {
            let run = cases.ok(&case(name));
            assert_eq!(
                run["calls"],
                json!([{"name": "get_weather", "input": {"city": "Oslo"}}]),
                "{api} {name}: {run}"
            );
            assert_eq!(run["text"], AFTER_TOOL, "{api} {name}: {run}");
            assert_eq!(run["steps"], 2);
            assert_eq!(run["firstFinish"], "tool-calls", "{api} {name}: {run}");
        }

        for name in ["generate_object", "stream_object"] {
            let object = cases.ok(&case(name));
            assert_eq!(
                object["object"],
                json!({"name": "Ada", "age": 36}),
                "{object}"
            );
        }

        // Unresolved: the SDK's APICallError with enforce's status and message, not retried.
        for (name, needle) in [
            ("text_unresolved", BROKEN_CODE),
            ("stream_unresolved", BROKEN_CODE),
            ("object_unresolved", "age"),
        ] {
            let failed = cases.failed(&case(name), "APICallError", needle);
            assert_eq!(failed["status"], 422, "{failed}");
            assert_eq!(failed["retryable"], false, "{failed}");
        }
        // After drafts, the failure comes inside the stream: the Responses model saw output
        // (the reasoning) before it and reports a StreamProviderError; the chat model, which
        // reads no reasoning, an APICallError. Either way 422, not retried.
        let error = if api == "responses" {
            "StreamProviderError"
        } else {
            "APICallError"
        };
        let failed = cases.failed(&case("stream_draft_unresolved"), error, BROKEN_CODE);
        assert_eq!(failed["status"], 422, "{failed}");
        assert_eq!(failed["retryable"], false, "{failed}");
        assert_eq!(failed["deltas"], json!([]), "nothing unchecked as text");

        for name in [
            "text_unresolved",
            "object_unresolved",
            "stream_unresolved",
            "stream_draft_unresolved",
        ] {
            upstream.assert_not_retried(&[&format!("({})", case(name))]);
        }
    }
}
