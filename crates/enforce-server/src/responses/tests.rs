//! The typed `response` object against the `Value`-built one it replaced: the same bytes for
//! every kind of answer, echo, route, warning and stream state.

use super::object::{Failure, ReasoningItem, ResponseObject, Text, Verdict};
use super::Responses;
use crate::pipeline::Surface;
use crate::turn::TurnId;
use crate::verdict::fixtures::{self, attempt};
use crate::verdict::{cut_at_token_limit, enforcement_json};
use enforce_core::{
    runner::FinishReason, runner::ToolCall, Attempt, Issue, Outcome, Status, StopReason, Usage,
};
use serde_json::{json, Map, Value};

/// The `Value`-built object as the surface wrote it before it was typed: the reference.
pub(super) mod reference {
    use super::*;

    fn item_id(id: &TurnId, prefix: &str) -> String {
        let suffix = id.id.strip_prefix(Responses::ID_PREFIX).unwrap_or(&id.id);
        format!("{prefix}{suffix}")
    }

    pub fn message_item(id: &TurnId, text: &str, status: &str) -> Value {
        let content = if status != "in_progress" {
            vec![json!({"type": "output_text", "text": text, "annotations": []})]
        } else {
            Vec::new()
        };
        json!({
            "id": item_id(id, "msg_"),
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        })
    }

    pub fn call_item(id: &TurnId, index: usize, call: &ToolCall, status: &str) -> Value {
        json!({
            "id": format!("{}_{index}", item_id(id, "fc_")),
            "type": "function_call",
            "status": status,
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
        })
    }

    fn output_items(id: &TurnId, text: &str, calls: &[ToolCall], status: &str) -> Vec<Value> {
        let mut items = Vec::new();
        if !text.is_empty() || calls.is_empty() {
            items.push(message_item(id, text, status));
        }
        for (index, call) in calls.iter().enumerate() {
            items.push(call_item(id, index, call, status));
        }
        items
    }

    fn usage_json(usage: Option<Usage>) -> Value {
        let u = usage.unwrap_or_default();
        json!({
            "input_tokens": u.input_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.total(),
        })
    }

    pub fn response_object(
        id: &TurnId,
        echo: &Map<String, Value>,
        status: &str,
        output: Vec<Value>,
        usage: Option<Usage>,
        enforcement: Value,
    ) -> Value {
        let mut object = json!({
            "id": id.id,
            "object": "response",
            "created_at": id.created,
            "status": status,
            "model": id.model,
            "output": output,
            "error": null,
            "incomplete_details": null,
            "parallel_tool_calls": true,
            "tool_choice": "auto",
            "tools": [],
            "text": {"format": {"type": "text"}},
            "metadata": {},
            "store": true,
        });
        if let Value::Object(map) = &mut object {
            for (key, value) in echo {
                map.insert(key.clone(), value.clone());
            }
            if status != "in_progress" {
                map.insert("usage".into(), usage_json(usage));
            }
            if !enforcement.is_null() {
                map.insert("enforcement".into(), enforcement);
            }
        }
        object
    }

    pub fn with_reasoning(response: &mut Value, reasoning: Option<(usize, &Value)>) {
        if let (Some((index, item)), Some(output)) = (
            reasoning,
            response.get_mut("output").and_then(Value::as_array_mut),
        ) {
            output.insert(index.min(output.len()), item.clone());
        }
    }

    pub fn answer(
        id: &TurnId,
        echo: &Map<String, Value>,
        route: Option<&Value>,
        ignored: &[String],
        text: &str,
        outcome: &Outcome,
    ) -> Value {
        let mut enforcement = enforcement_json(outcome);
        if let (Some(route), Some(object)) = (route, enforcement.as_object_mut()) {
            object.insert("route".into(), route.clone());
        }
        let cut = cut_at_token_limit(outcome);
        let status = if cut { "incomplete" } else { "completed" };
        let output = output_items(id, text, &outcome.tool_calls, status);
        let mut object = response_object(id, echo, status, output, outcome.usage, enforcement);
        if cut {
            object["incomplete_details"] = json!({"reason": "max_output_tokens"});
        }
        if !ignored.is_empty() {
            object["warnings"] = json!([{
                "code": "fields_ignored",
                "fields": ignored,
                "message": format!(
                    "This proxy did not pass these request fields to the model: {}.",
                    ignored.join(", ")
                ),
            }]);
        }
        object
    }
}

/// An outcome whose last attempt is `last`.
fn outcome(status: Status, calls: Vec<ToolCall>, last: Attempt) -> Outcome {
    fixtures::outcome(status, calls, vec![attempt(None, &[]), last])
}

/// Outcomes of every kind, with the text each answered.
pub(super) fn outcomes() -> Vec<(&'static str, Outcome)> {
    let calls = vec![
        ToolCall::new("call_1", "lookup", r#"{"q":"a \"b\""}"#),
        ToolCall::new("call_2", "sum", "{}"),
    ];
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
    let calls_only = outcome(Status::Passed, calls.clone(), attempt(None, &[]));
    let calls_and_text = outcome(Status::Passed, calls.clone(), attempt(None, &[]));
    let cut = outcome(
        Status::Passed,
        Vec::new(),
        attempt(Some(FinishReason::Length), &[]),
    );
    let cut_calling = outcome(
        Status::Unresolved,
        calls,
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

/// Echoed request fields: none, ones that replace a default, ones added, and `null`s.
pub(super) fn echoes() -> Vec<Map<String, Value>> {
    let object = |value: Value| match value {
        Value::Object(map) => map,
        _ => unreachable!("an object"),
    };
    vec![
        Map::new(),
        object(json!({
            "tools": [{"type": "function", "name": "lookup", "parameters": {"type": "object"}}],
            "text": {"format": {"type": "json_schema", "name": "s", "schema": {"b": 1, "a": 2}}},
            "store": true,
            "metadata": {"chat_id": "c1", "z": "last", "a": "first"},
            "tool_choice": {"type": "function", "name": "lookup"},
            "parallel_tool_calls": false,
        })),
        object(json!({
            "instructions": "Be brief.",
            "temperature": 0.7,
            "top_p": 1,
            "max_output_tokens": 256,
            "previous_response_id": "resp_earlier",
            "truncation": "auto",
            "user": "u-1",
            "reasoning": {"effort": "low"},
            "store": false,
        })),
        object(json!({
            "instructions": null,
            "tools": null,
            "metadata": null,
            "text": {},
            "temperature": null,
        })),
    ]
}

pub(super) fn id() -> TurnId {
    TurnId {
        id: "resp_enf18f0a1b2c3000001".into(),
        created: 1_764_000_000,
        model: "gpt-4o-mini".into(),
    }
}

fn bytes(value: &impl serde::Serialize) -> String {
    serde_json::to_string(value).expect("serializes")
}

#[test]
fn a_typed_answer_is_the_bytes_of_the_value_it_replaced() {
    let id = id();
    let routes = [
        None,
        Some(json!({"name": "code", "profile": "strict", "by": "field"})),
    ];
    let ignored = [Vec::new(), vec!["include".to_string(), "truncation".into()]];
    let mut compared = 0;
    for (text, outcome) in &outcomes() {
        // As the answer writes its text, and as a stream does, escaped once.
        let escaped = Text::escape(text);
        for form in [Text::Plain(text), Text::Json(&escaped)] {
            for echo in &echoes() {
                for route in &routes {
                    for ignored in &ignored {
                        let typed = ResponseObject::answer(&id, echo, form, outcome)
                            .routed(route.as_ref())
                            .warned(ignored);
                        let value =
                            reference::answer(&id, echo, route.as_ref(), ignored, text, outcome);
                        assert_eq!(bytes(&typed), bytes(&value), "{text:?} {echo:?}");
                        compared += 1;
                    }
                }
            }
        }
    }
    assert_eq!(compared, 8 * 2 * 4 * 2 * 2);
}

#[test]
fn a_streamed_response_lists_its_reasoning_item_where_the_stream_showed_it() {
    let id = id();
    let item = json!({
        "id": "rs_enf18f0a1b2c3000001", "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "hm \"quoted\""}],
    });
    let echo = &echoes()[1];
    for (text, outcome) in &outcomes() {
        for index in [0, 1, 2, 7] {
            let mut typed = ResponseObject::answer(&id, echo, Text::Plain(text), outcome);
            typed.output.reasoning = Some((index, ReasoningItem::new(&id, Some("hm \"quoted\""))));
            let mut value = reference::answer(&id, echo, None, &[], text, outcome);
            reference::with_reasoning(&mut value, Some((index, &item)));
            assert_eq!(bytes(&typed), bytes(&value), "{text:?} at {index}");
        }
    }
}

#[test]
fn in_progress_and_failed_responses_are_the_bytes_of_the_values_they_replaced() {
    let id = id();
    let item = json!({"id": "rs_enf18f0a1b2c3000001", "type": "reasoning", "summary": []});
    let enforcement = json!({"status": "unresolved", "attempts": 3});
    for echo in &echoes() {
        let typed = ResponseObject::new(&id, echo, "in_progress");
        let value =
            reference::response_object(&id, echo, "in_progress", Vec::new(), None, Value::Null);
        assert_eq!(bytes(&typed), bytes(&value));
        for (enforced, reasoning) in [(None, None), (Some(&enforcement), Some((0, &item)))] {
            let mut typed = ResponseObject::new(&id, echo, "failed");
            typed.enforcement = enforced.map(Verdict::Refused);
            typed.error = Some(Failure {
                code: "422".into(),
                message: "The answer did not pass its checks: \"json\".",
            });
            typed.output.reasoning =
                reasoning.map(|(index, _)| (index, ReasoningItem::new(&id, None)));
            let mut value = reference::response_object(
                &id,
                echo,
                "failed",
                Vec::new(),
                None,
                enforced.cloned().unwrap_or(Value::Null),
            );
            value["error"] = json!({
                "code": "422",
                "message": "The answer did not pass its checks: \"json\".",
            });
            reference::with_reasoning(&mut value, reasoning);
            assert_eq!(bytes(&typed), bytes(&value));
        }
    }
}

#[test]
fn echoed_fields_replace_the_defaults_they_name() {
    let id = id();
    let (text, outcome) = &outcomes()[0];
    let echo = &echoes()[2];
    let sent: Value = serde_json::from_str(&bytes(&ResponseObject::answer(
        &id,
        echo,
        Text::Plain(text),
        outcome,
    )))
    .expect("JSON");
    assert_eq!(sent["store"], false);
    assert_eq!(sent["temperature"], 0.7);
    assert_eq!(sent["tools"], json!([]));
    let written = bytes(&ResponseObject::answer(
        &id,
        echo,
        Text::Plain(text),
        outcome,
    ));
    assert_eq!(written.matches("\"store\"").count(), 1, "{written}");
}
