//! The `response` object as clients read it: what is written, parsed back, against the JSON
//! it must hold, for every kind of answer, echo, route, warning and stream state.

use super::object::{Failure, ReasoningItem, ResponseObject, Verdict};
use super::request::{parse_responses_request, Echo};
use crate::turn::TurnId;
use crate::verdict::enforcement_json;
use crate::verdict::fixtures::{self, attempt};
use enforce_core::runner::{FinishReason, ToolCall};
use enforce_core::{Attempt, Issue, Outcome, Status, StopReason, Usage};
use serde_json::{json, Value};

/// An outcome whose last attempt is `last`.
fn outcome(status: Status, calls: Vec<ToolCall>, last: Attempt) -> Outcome {
    fixtures::outcome(status, calls, vec![attempt(None, &[]), last])
}

/// The calls of the outcomes that call tools.
fn calls() -> Vec<ToolCall> {
    vec![
        ToolCall::new("call_1", "lookup", r#"{"q":"a \"b\""}"#),
        ToolCall::new("call_2", "sum", "{}"),
    ]
}

/// Outcomes of every kind, with the text each answered.
pub(super) fn outcomes() -> Vec<(&'static str, Outcome)> {
    let passed = Outcome {
        usage: Some(Usage {
            input_tokens: 12,
            output_tokens: 7,
        }),
        ..outcome(
            Status::Passed,
            Vec::new(),
            attempt(Some(FinishReason::Stop), &[]),
        )
    };
    let mut issue = Issue::error("json", "json.invalid", "Not JSON.");
    issue.hint = Some("Answer with JSON only.".into());
    issue.line = Some(3);
    let unresolved = Outcome {
        stop_reason: StopReason::RetriesExhausted,
        issues: vec![issue],
        warnings: vec![Issue::warning("length", "length.long", "Long.")],
        ..outcome(
            Status::Unresolved,
            Vec::new(),
            attempt(None, &["strip_fences"]),
        )
    };
    let repaired = outcome(
        Status::Repaired,
        Vec::new(),
        attempt(None, &["strip_fences"]),
    );
    let calls_only = outcome(Status::Passed, calls(), attempt(None, &[]));
    let calls_and_text = outcome(Status::Passed, calls(), attempt(None, &[]));
    let cut = outcome(
        Status::Passed,
        Vec::new(),
        attempt(Some(FinishReason::Length), &[]),
    );
    let cut_calling = outcome(
        Status::Unresolved,
        calls(),
        attempt(Some(FinishReason::Length), &[]),
    );
    vec![
        ("The answer, with \"quotes\" and ü.\n", passed),
        ("{\"a\": 1", unresolved),
        ("{}", repaired),
        ("", calls_only),
        ("Let me look that up.", calls_and_text),
        ("Cut at the lim", cut),
        ("", cut_calling),
        ("", outcome(Status::Passed, Vec::new(), attempt(None, &[]))),
    ]
}

/// Request fields a response echoes: none, ones that replace a default, ones added, and
/// `null`s.
pub(super) fn sent_fields() -> Vec<Value> {
    vec![
        json!({}),
        json!({
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"b": 1, "a": 2}}},
            "store": true,
            "metadata": {"chat_id": "c1", "z": "last", "a": "first"},
            "tool_choice": {"type": "function", "name": "lookup"},
            "parallel_tool_calls": false,
        }),
        json!({
            "instructions": "Be brief.",
            "temperature": 0.7,
            "top_p": 1,
            "max_output_tokens": 256,
            "previous_response_id": "resp_earlier",
            "truncation": "auto",
            "user": "u-1",
            "reasoning": {"effort": "low"},
            "store": false,
        }),
        json!({
            "instructions": null,
            "tools": null,
            "metadata": null,
            "text": {},
            "temperature": null,
        }),
    ]
}

/// The echo of a request that sent `fields`.
pub(super) fn echo(fields: &Value) -> Echo {
    let mut body = json!({"model": "m", "input": "q"});
    for (key, value) in fields.as_object().into_iter().flatten() {
        body[key] = value.clone();
    }
    let (_, echo) =
        parse_responses_request(bytes::Bytes::from(body.to_string())).expect("a request");
    echo
}

pub(super) fn id() -> TurnId {
    TurnId {
        id: "resp_enf18f0a1b2c3000001".into(),
        created: 1_764_000_000,
        model: "gpt-4o-mini".into(),
    }
}

/// `value` as written, parsed back.
pub(super) fn written(value: &impl serde::Serialize) -> Value {
    let bytes = serde_json::to_vec(value).expect("serializes");
    serde_json::from_slice(&bytes).expect("JSON")
}

/// The fields of every `response` object before what is echoed is laid over them.
pub(super) fn object_fields(status: &str, output: Value) -> Value {
    json!({
        "id": "resp_enf18f0a1b2c3000001",
        "object": "response",
        "created_at": 1_764_000_000,
        "model": "gpt-4o-mini",
        "status": status,
        "output": output,
        "error": null,
        "incomplete_details": null,
        "tools": [],
        "tool_choice": "auto",
        "text": {"format": {"type": "text"}},
        "metadata": {},
        "parallel_tool_calls": true,
        "store": true,
    })
}

/// The `message` item of an answer.
pub(super) fn message(text: &str, status: &str) -> Value {
    let content = match status {
        "in_progress" => json!([]),
        _ => json!([{"type": "output_text", "text": text, "annotations": []}]),
    };
    json!({
        "id": "msg_enf18f0a1b2c3000001", "type": "message", "status": status,
        "role": "assistant", "content": content,
    })
}

/// The `function_call` item of the outcomes' call `number`.
pub(super) fn call(number: usize, status: &str) -> Value {
    let call = &calls()[number];
    json!({
        "id": format!("fc_enf18f0a1b2c3000001_{number}"), "type": "function_call",
        "status": status, "call_id": call.id, "name": call.name, "arguments": call.arguments,
    })
}

/// The usage of an answer whose runner reported `input` and `output` tokens.
fn usage(input: u64, output: u64) -> Value {
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input + output,
    })
}

#[test]
fn a_plain_answer_is_the_whole_response_object() {
    let id = id();
    let (text, outcome) = &outcomes()[0];
    let echo = echo(&json!({}));
    let mut expected = object_fields("completed", json!([message(text, "completed")]));
    expected["usage"] = usage(12, 7);
    expected["enforcement"] = enforcement_json(outcome);
    assert_eq!(expected["enforcement"]["status"], "passed");
    assert_eq!(
        written(&ResponseObject::answer(&id, &echo, text, outcome)),
        expected
    );
}

/// Each answer's items (a message unless it only calls tools, then its calls), status,
/// `incomplete_details` and verdict.
#[test]
fn every_kind_of_answer_lists_its_items() {
    let id = id();
    let echo = echo(&json!({}));
    let done = "completed";
    let cut = "incomplete";
    let expected = [
        (
            done,
            json!([message("The answer, with \"quotes\" and ü.\n", done)]),
        ),
        (done, json!([message("{\"a\": 1", done)])),
        (done, json!([message("{}", done)])),
        (done, json!([call(0, done), call(1, done)])),
        (
            done,
            json!([
                message("Let me look that up.", done),
                call(0, done),
                call(1, done)
            ]),
        ),
        (cut, json!([message("Cut at the lim", cut)])),
        (cut, json!([call(0, cut), call(1, cut)])),
        (done, json!([message("", done)])),
    ];
    for ((text, outcome), (status, output)) in outcomes().iter().zip(expected) {
        let sent = written(&ResponseObject::answer(&id, &echo, text, outcome));
        assert_eq!(sent["status"], status, "{text:?}");
        assert_eq!(sent["output"], output, "{text:?}");
        let incomplete = (status == cut).then(|| json!({"reason": "max_output_tokens"}));
        assert_eq!(
            sent["incomplete_details"],
            incomplete.unwrap_or(Value::Null)
        );
        assert_eq!(sent["enforcement"], enforcement_json(outcome), "{text:?}");
        let reported = outcome.usage.unwrap_or_default();
        let expected_usage = usage(reported.input_tokens, reported.output_tokens);
        assert_eq!(sent["usage"], expected_usage);
    }
}

#[test]
fn echoed_fields_replace_the_defaults_they_name() {
    let id = id();
    let (text, outcome) = &outcomes()[0];
    for fields in sent_fields() {
        let echo = echo(&fields);
        let response = ResponseObject::answer(&id, &echo, text, outcome);
        let mut expected = object_fields("completed", json!([message(text, "completed")]));
        for (key, value) in fields.as_object().into_iter().flatten() {
            expected[key] = value.clone();
        }
        expected["usage"] = usage(12, 7);
        expected["enforcement"] = enforcement_json(outcome);
        assert_eq!(written(&response), expected, "{fields}");
        // Once: an echoed field stands instead of its default, not beside it.
        let bytes = serde_json::to_string(&response).expect("serializes");
        assert_eq!(bytes.matches("\"store\"").count(), 1, "{bytes}");
    }
}

#[test]
fn a_routed_answer_says_how_and_one_with_fields_left_out_warns() {
    let id = id();
    let echo = echo(&json!({}));
    let route = json!({"name": "code", "profile": "strict", "by": "field"});
    let ignored = ["include".to_string(), "truncation".into()];
    for (text, outcome) in &outcomes() {
        let plain = written(&ResponseObject::answer(&id, &echo, text, outcome));
        assert_eq!(plain.get("warnings"), None);
        assert_eq!(plain["enforcement"].get("route"), None);
        let response = ResponseObject::answer(&id, &echo, text, outcome)
            .routed(Some(&route))
            .warned(&ignored);
        let mut expected = plain;
        expected["enforcement"]["route"] = route.clone();
        expected["warnings"] = json!([{
            "code": "fields_ignored",
            "fields": ["include", "truncation"],
            "message": "This proxy did not pass these request fields to the model: include, truncation.",
        }]);
        assert_eq!(written(&response), expected, "{text:?}");
    }
}

#[test]
fn a_streamed_response_lists_its_reasoning_item_where_the_stream_showed_it() {
    let id = id();
    let echo = echo(&json!({}));
    let item = json!({
        "id": "rs_enf18f0a1b2c3000001", "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "hm \"quoted\""}],
    });
    for (text, outcome) in &outcomes() {
        let plain = written(&ResponseObject::answer(&id, &echo, text, outcome));
        let items = plain["output"].as_array().expect("a list").clone();
        for index in [0, 1, 2, 7] {
            let shown = ReasoningItem::new(&id, Some("hm \"quoted\""));
            let response = ResponseObject::answer(&id, &echo, text, outcome)
                .with_reasoning(Some((index, shown)));
            let mut output = items.clone();
            output.insert(index.min(items.len()), item.clone());
            assert_eq!(
                written(&response)["output"],
                Value::Array(output),
                "{text:?} at {index}"
            );
        }
    }
}

#[test]
fn in_progress_and_failed_responses_hold_no_answer() {
    let id = id();
    let echo = echo(&json!({}));
    let in_progress = ResponseObject::new(&id, &echo, "in_progress");
    assert_eq!(
        written(&in_progress),
        object_fields("in_progress", json!([]))
    );

    let enforcement = json!({"status": "unresolved", "attempts": 3});
    let item = json!({"id": "rs_enf18f0a1b2c3000001", "type": "reasoning", "summary": []});
    for (enforced, reasoning) in [(None, None), (Some(&enforcement), Some(&item))] {
        let mut failed = ResponseObject::new(&id, &echo, "failed")
            .with_reasoning(reasoning.map(|_| (0, ReasoningItem::new(&id, None))));
        failed.enforcement = enforced.map(Verdict::Refused);
        failed.error = Some(Failure {
            code: "422".into(),
            message: "The answer did not pass its checks: \"json\".",
        });
        let mut expected =
            object_fields("failed", json!(reasoning.into_iter().collect::<Vec<_>>()));
        expected["error"] = json!({
            "code": "422",
            "message": "The answer did not pass its checks: \"json\".",
        });
        expected["usage"] = usage(0, 0);
        if let Some(enforcement) = enforced {
            expected["enforcement"] = enforcement.clone();
        }
        assert_eq!(written(&failed), expected);
    }
}
