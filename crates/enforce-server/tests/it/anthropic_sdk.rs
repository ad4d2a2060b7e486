//! The real anthropic Python SDK against `POST /v1/messages`: `messages.create` and
//! `messages.stream`, text and a tool, and an unresolved answer, which the SDK must raise as
//! its own error type with enforce's message in it, and must not retry. The SDK installs
//! itself into the shared venv of the Python clients under the target directory on first use
//! (PyPI, see `sdk`); without python3 the test says "skipped".

use crate::common::Harness;
use crate::sdk::{self, ByQuestion, Clients, BROKEN_CODE, HELLO};
use serde_json::json;
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_reads_answers_tools_and_errors() {
    let upstream = Arc::new(ByQuestion::default());
    let h = Harness::start(sdk::server(upstream.clone())).await;
    let Some(cases) = sdk::run_script(Clients::Python, "anthropic_sdk.py", &[&h.base, "m"]).await
    else {
        return;
    };

    let text = cases.ok("create_text");
    assert_eq!(text["blocks"], json!([{"type": "text", "text": HELLO}]));
    assert_eq!(text["stop_reason"], "end_turn");
    assert_eq!(text["usage"], json!([11, 7]), "{text}");
    assert_eq!(
        text["enforcement"], "passed",
        "the SDK keeps the extra field"
    );
    assert!(text["request_id"].as_str().unwrap().starts_with("msg_"));

    let streamed = cases.ok("stream_text");
    assert_eq!(sdk::joined(&streamed["deltas"]), HELLO);
    assert_eq!(streamed["blocks"][0]["text"], HELLO);

    for name in ["create_tool", "stream_tool"] {
        let tool = cases.ok(name);
        assert_eq!(
            tool["blocks"],
            json!([{"type": "tool_use", "name": "get_weather", "input": {"city": "Oslo"}}]),
            "{name}"
        );
        assert_eq!(tool["stop_reason"], "tool_use");
    }

    // The SDK's own error type, with enforce's message in what it prints.
    let failed = cases.failed("create_unresolved", "UnprocessableEntityError", BROKEN_CODE);
    assert_eq!(failed["status"], 422);
    // Streamed, the verdict came before the first byte: the same 422, raised as the same type.
    let failed = cases.failed("stream_unresolved", "UnprocessableEntityError", BROKEN_CODE);
    assert_eq!(failed["status"], 422);
    // One ask and one re-ask each: the SDK retried no unresolved answer.
    upstream.assert_not_retried(&["(create_unresolved)", "(stream_unresolved)"]);
}
