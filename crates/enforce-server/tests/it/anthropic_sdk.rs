//! The real anthropic Python SDK against `POST /v1/messages`: `messages.create` and
//! `messages.stream`, text and a tool, and an unresolved answer, which the SDK must raise as
//! its own error type with enforce's message in it. The SDK installs itself into the shared
//! venv of the Python clients under the target directory on first use (PyPI, see `sdk`);
//! without python3 the test says "skipped".

use crate::common::{marker_enforcer_retries, server_with, Harness};
use enforce_core::{async_trait, Reply, Request, Runner, RunnerError, ToolCall};
use enforce_server::{FailureResponse, ModelOptions, ServerConfig};
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

/// An answer the step-marker profile passes.
const GOOD_MARKED: &str = "Because it is faster.\n<!-- STEP: why -->";

/// Answers by the question: a tool call for the weather, an answer without the step marker
/// for "Break", else a passing answer.
struct ByQuestion;

impl ByQuestion {
    fn reply(request: &Request) -> Reply {
        let question = request.last_user_text().unwrap_or("");
        if question.contains("weather") {
            Reply {
                tool_calls: vec![ToolCall::new(
                    "toolu_1",
                    "get_weather",
                    r#"{"city": "Oslo"}"#,
                )],
                ..Reply::default()
            }
        } else if question.contains("Break") {
            Reply::text("No marker here.")
        } else {
            Reply::text(GOOD_MARKED)
        }
    }
}

#[async_trait]
impl Runner for ByQuestion {
    async fn ask(&self, request: &Request) -> Result<Reply, RunnerError> {
        Ok(Self::reply(request))
    }
    async fn follow_up(&self, request: &Request, _: &Reply, _: &str) -> Result<Reply, RunnerError> {
        Ok(Self::reply(request))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_anthropic_python_sdk_reads_answers_tools_and_errors() {
    let Some(python) = crate::sdk::or_skip(
        tokio::task::spawn_blocking(crate::sdk::python_clients)
            .await
            .unwrap(),
    ) else {
        return;
    };
    let server = server_with(
        ServerConfig::default(),
        Arc::new(ByQuestion),
        marker_enforcer_retries(false, 1),
        ModelOptions {
            on_unresolved: FailureResponse::Error,
            ..ModelOptions::default()
        },
    );
    let h = Harness::start(server).await;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/it/anthropic_sdk.py");
    let base = h.base.clone();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(python).arg(script).arg(base).arg("m").output()
    })
    .await
    .unwrap()
    .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let cases: Vec<Value> = stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let case = |name: &str| {
        cases
            .iter()
            .find(|c| c["case"] == name)
            .unwrap_or_else(|| panic!("no {name} in {stdout}"))
            .clone()
    };

    let text = case("create_text");
    assert_eq!(text["ok"], true, "{text}");
    assert_eq!(text["blocks"][0]["text"], GOOD_MARKED);
    assert_eq!(text["stop_reason"], "end_turn");
    assert_eq!(
        text["enforcement"], "passed",
        "the SDK keeps the extra field"
    );
    assert!(text["request_id"].as_str().unwrap().starts_with("msg_"));

    let streamed = case("stream_text");
    assert_eq!(streamed["ok"], true, "{streamed}");
    assert_eq!(
        streamed["deltas"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect::<String>(),
        GOOD_MARKED
    );
    assert_eq!(streamed["blocks"][0]["text"], GOOD_MARKED);

    for name in ["create_tool", "stream_tool"] {
        let tool = case(name);
        assert_eq!(tool["ok"], true, "{tool}");
        assert_eq!(
            tool["blocks"],
            serde_json::json!([{"type": "tool_use", "name": "get_weather",
                                "input": {"city": "Oslo"}}]),
            "{name}"
        );
        assert_eq!(tool["stop_reason"], "tool_use");
    }

    // The SDK's own error types, with enforce's message in what it prints.
    let failed = case("create_unresolved");
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["error"], "UnprocessableEntityError", "{failed}");
    assert_eq!(failed["status"], 422);
    assert!(failed["message"]
        .as_str()
        .unwrap()
        .contains("MISSING_STEP_MARKER"));
    // Streamed, the verdict came before the first byte: the same 422, raised as the same type.
    let failed = case("stream_unresolved");
    assert_eq!(failed["ok"], false);
    assert_eq!(failed["error"], "UnprocessableEntityError", "{failed}");
    assert_eq!(failed["status"], 422);
    assert!(failed["message"]
        .as_str()
        .unwrap()
        .contains("MISSING_STEP_MARKER"));
}
