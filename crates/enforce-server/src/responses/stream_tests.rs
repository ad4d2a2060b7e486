//! The stream events as clients read them: every event parsed back and held to the JSON it
//! must hold, for every kind of answer, text in one delta or several, tool calls with and
//! without text, an answer cut at the token limit, drafts shown before it, and a refusal.

use super::object::{ReasoningItem, ResponseObject};
use super::tests::{call, echo, id, message, object_fields, outcomes, sent_fields, written};
use super::ResponsesWriter;
use crate::error::ApiError;
use crate::stream::{self, StreamWriter, CONTENT_PIECE};
use crate::verdict::fixtures::{attempt, outcome};
use crate::verdict::outcome_failure;
use axum::http::StatusCode;
use enforce_core::{runner::ToolCall, Outcome, Status};
use serde_json::{json, Value};

/// A stream's events: each one's `event:` name and its `data:` parsed.
fn events(bytes: &[u8]) -> Vec<(String, Value)> {
    let text = std::str::from_utf8(bytes).expect("UTF-8");
    text.split_terminator("\n\n")
        .map(|event| {
            let (name, data) = event
                .split_once('\n')
                .expect("an event line and a data line");
            let name = name.strip_prefix("event: ").expect("an event name");
            let data = data.strip_prefix("data: ").expect("one data line");
            (name.to_string(), serde_json::from_str(data).expect("JSON"))
        })
        .collect()
}

/// The events a writer echoing `fields` wrote after showing `drafts`, then `end`.
fn streamed(
    fields: &Value,
    drafts: &[&str],
    end: impl FnOnce(&mut ResponsesWriter, &mut Vec<u8>),
) -> (Vec<(String, Value)>, ResponsesWriter) {
    let mut out = Vec::new();
    let mut writer = ResponsesWriter::new(id(), echo(fields));
    writer.open(&mut out);
    for draft in drafts {
        writer.draft(draft, &mut out);
    }
    end(&mut writer, &mut out);
    (events(&out), writer)
}

/// Every event is typed as it is named and numbered in the order it was sent.
fn assert_numbered(events: &[(String, Value)]) {
    for (number, (name, data)) in events.iter().enumerate() {
        assert_eq!(data["type"], name.as_str(), "{data}");
        assert_eq!(data["sequence_number"], number, "{data}");
    }
}

/// The event `name`, number `number`, with `fields`.
fn event(name: &str, number: u64, mut fields: Value) -> (String, Value) {
    fields["type"] = json!(name);
    fields["sequence_number"] = json!(number);
    (name.to_string(), fields)
}

/// Answers of every kind, and ones long enough to come in several deltas.
fn answers() -> Vec<(String, Outcome)> {
    let mut answers: Vec<(String, Outcome)> = outcomes()
        .into_iter()
        .map(|(text, outcome)| (text.to_string(), outcome))
        .collect();
    let long_text = format!("{}\"x\"", "é".repeat(CONTENT_PIECE));
    let long_call = ToolCall::new(
        "call_9",
        "write",
        format!("{{\"body\": \"{}\"}}", "ü".repeat(CONTENT_PIECE)),
    );
    let passed = outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]);
    answers.push((long_text.clone(), passed));
    let calling = vec![long_call];
    let repaired = outcome(Status::Repaired, calling, vec![attempt(None, &["x"])]);
    answers.push((long_text, repaired));
    answers
}

#[test]
fn a_plain_answer_streams_its_message_in_every_event() {
    let (text, outcome) = &outcomes()[0];
    let (events, mut writer) = streamed(&json!({}), &[], |writer, out| {
        writer.write_answer(None, &[], text, outcome, out)
    });
    let item_id = "msg_enf18f0a1b2c3000001";
    let in_progress = object_fields("in_progress", json!([]));
    let at = |fields: Value| {
        let mut at = json!({"item_id": item_id, "output_index": 0, "content_index": 0});
        for (key, value) in fields.as_object().into_iter().flatten() {
            at[key] = value.clone();
        }
        at
    };
    let part = |text| json!({"type": "output_text", "text": text, "annotations": []});
    let completed = written(&ResponseObject::answer(
        &id(),
        &echo(&json!({})),
        text,
        outcome,
    ));
    let expected = vec![
        event("response.created", 0, json!({"response": in_progress})),
        event("response.in_progress", 1, json!({"response": in_progress})),
        event(
            "response.output_item.added",
            2,
            json!({"output_index": 0, "item": message("", "in_progress")}),
        ),
        event(
            "response.content_part.added",
            3,
            at(json!({"part": part("")})),
        ),
        event(
            "response.output_text.delta",
            4,
            at(json!({"delta": text, "logprobs": []})),
        ),
        event(
            "response.output_text.done",
            5,
            at(json!({"text": text, "logprobs": []})),
        ),
        event(
            "response.content_part.done",
            6,
            at(json!({"part": part(text)})),
        ),
        event(
            "response.output_item.done",
            7,
            json!({"output_index": 0, "item": message(text, "completed")}),
        ),
        event("response.completed", 8, json!({"response": completed})),
    ];
    assert_eq!(events, expected);
    let stored = writer.stored().expect("the answer is stored");
    assert_eq!(
        serde_json::from_slice::<Value>(&stored).expect("JSON"),
        completed
    );
}

#[test]
fn drafts_stream_as_a_reasoning_item_before_the_answers_items() {
    let (text, outcome) = &outcomes()[4];
    assert_eq!(outcome.tool_calls.len(), 2, "text and two calls");
    let drafts = ["Thinking \"hard\"", " — and more.\n"];
    let (events, _) = streamed(&json!({}), &drafts, |writer, out| {
        writer.write_answer(None, &[], text, outcome, out)
    });
    assert_numbered(&events);
    let names: Vec<&str> = events.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.reasoning_summary_part.added",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.delta",
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
    );
    let shown = drafts.concat();
    let rs = "rs_enf18f0a1b2c3000001";
    let summary = |text: &str| json!({"type": "summary_text", "text": text});
    let reasoning = json!({"id": rs, "type": "reasoning", "summary": [summary(&shown)]});
    let at = json!({"item_id": rs, "output_index": 0, "summary_index": 0});
    let with = |key: &str, value: Value| {
        let mut fields = at.clone();
        fields[key] = value;
        fields
    };
    let data = |number: usize| {
        let mut data = events[number].1.clone();
        let object = data.as_object_mut().expect("an object");
        object.remove("type");
        object.remove("sequence_number");
        data
    };
    let added = json!({"output_index": 0, "item": {"id": rs, "type": "reasoning", "summary": []}});
    assert_eq!(data(2), added);
    assert_eq!(data(3), with("part", summary("")));
    assert_eq!(data(4), with("delta", json!(drafts[0])));
    assert_eq!(data(5), with("delta", json!(drafts[1])));
    assert_eq!(data(6), with("text", json!(shown)));
    assert_eq!(data(7), with("part", summary(&shown)));
    assert_eq!(data(8), json!({"output_index": 0, "item": reasoning}));
    let fc = "fc_enf18f0a1b2c3000001_0";
    let mut unsent = call(0, "in_progress");
    unsent["arguments"] = json!("");
    assert_eq!(data(15), json!({"output_index": 2, "item": unsent}));
    let arguments = &outcome.tool_calls[0].arguments;
    let delta = json!({"item_id": fc, "output_index": 2, "delta": arguments});
    assert_eq!(data(16), delta);
    let done = json!({"item_id": fc, "output_index": 2, "name": "lookup", "arguments": arguments});
    assert_eq!(data(17), done);
    assert_eq!(
        data(18),
        json!({"output_index": 2, "item": call(0, "completed")})
    );
    let output = json!([
        reasoning,
        message(text, "completed"),
        call(0, "completed"),
        call(1, "completed")
    ]);
    assert_eq!(data(23)["response"]["output"], output);
}

/// What every stream of an answer holds, whatever the answer, the echo, the route and the
/// drafts: the events numbered; the `in_progress` response first; the items announced, their
/// text and arguments in deltas that add up, then each done as the final response lists it;
/// the final response as the answer would be sent unstreamed, and stored as sent.
#[test]
fn every_kind_of_answer_streams_the_items_of_its_response() {
    let id = id();
    let route = json!({"name": "code", "profile": "strict", "by": "field"});
    let ignored = ["include".to_string()];
    let drafts: [&[&str]; 2] = [&[], &["Thinking \"hard\"", " — and more.\n"]];
    let mut several_deltas = false;
    for (text, outcome) in &answers() {
        for fields in &sent_fields() {
            for (route, ignored) in [(None, &[][..]), (Some(&route), &ignored[..])] {
                for drafts in drafts {
                    let (events, mut writer) = streamed(fields, drafts, |writer, out| {
                        writer.write_answer(route, ignored, text, outcome, out)
                    });
                    assert_numbered(&events);
                    let echo = echo(fields);
                    let in_progress = written(&ResponseObject::new(&id, &echo, "in_progress"));
                    assert_eq!(events[0].1["response"], in_progress);
                    assert_eq!(events[1].1["response"], in_progress);
                    let shown = drafts.concat();
                    let shown = (!drafts.is_empty())
                        .then(|| (0, ReasoningItem::new(&id, Some(shown.as_str()))));
                    let expected = ResponseObject::answer(&id, &echo, text, outcome)
                        .routed(route)
                        .warned(ignored)
                        .with_reasoning(shown);
                    let expected = written(&expected);
                    let (last, sent) = events.last().expect("events");
                    let cut = expected["status"] == "incomplete";
                    let kind = ["response.completed", "response.incomplete"][usize::from(cut)];
                    assert_eq!(last, kind);
                    assert_eq!(sent["response"], expected, "{text:?} {fields}");
                    let stored = writer.stored().expect("the answer is stored");
                    let stored: Value = serde_json::from_slice(&stored).expect("JSON");
                    assert_eq!(stored, expected);
                    let items = done_items(&events);
                    assert_eq!(Value::Array(items), expected["output"], "{text:?}");
                    several_deltas |= deltas_add_up(&events, text, outcome, drafts);
                }
            }
        }
    }
    assert!(several_deltas, "an answer long enough for several deltas");
}

/// The items of the `output_item.done` events, each after its `added`, in output order.
fn done_items(events: &[(String, Value)]) -> Vec<Value> {
    let mut added = Vec::new();
    let mut done = Vec::new();
    for (name, data) in events {
        match name.as_str() {
            "response.output_item.added" => added.push(data["output_index"].clone()),
            "response.output_item.done" => {
                assert_eq!(data["output_index"], done.len(), "in output order");
                assert!(added.contains(&data["output_index"]), "added first");
                done.push(data["item"].clone());
            }
            _ => {}
        }
    }
    done
}

/// Whether the text, each call's arguments and the drafts came in deltas that add up to them,
/// none longer than a piece: whether any came in more than one.
fn deltas_add_up(
    events: &[(String, Value)],
    text: &str,
    outcome: &Outcome,
    drafts: &[&str],
) -> bool {
    let deltas = |kind: &str, item_id: &str| -> Vec<String> {
        let of_item = |data: &&Value| item_id.is_empty() || data["item_id"] == item_id;
        let pieces = events
            .iter()
            .filter(|(name, _)| name == kind)
            .map(|(_, data)| data);
        let pieces: Vec<String> = pieces
            .filter(of_item)
            .map(|data| data["delta"].as_str().expect("a delta").to_string())
            .collect();
        assert!(pieces.iter().all(|piece| piece.len() <= CONTENT_PIECE));
        pieces
    };
    let text_deltas = deltas("response.output_text.delta", "");
    if !text.is_empty() || outcome.tool_calls.is_empty() {
        assert_eq!(text_deltas.concat(), text);
    }
    let mut several = text_deltas.len() > 1;
    for (number, call) in outcome.tool_calls.iter().enumerate() {
        let item_id = format!("fc_enf18f0a1b2c3000001_{number}");
        let pieces = deltas("response.function_call_arguments.delta", &item_id);
        assert_eq!(pieces.concat(), call.arguments);
        several |= pieces.len() > 1;
    }
    let shown = deltas("response.reasoning_summary_text.delta", "");
    assert_eq!(shown.concat(), drafts.concat());
    several
}

#[test]
fn a_refusal_ends_the_stream_with_a_failed_response() {
    let unresolved = outcome(Status::Unresolved, Vec::new(), vec![attempt(None, &[])]);
    let errors = [
        outcome_failure(&unresolved),
        stream::interrupted(),
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "server_error",
            "upstream_unavailable",
            "The model is \"away\".",
        ),
    ];
    assert!(
        errors[0].enforcement.is_some(),
        "a refusal with its verdict"
    );
    for error in &errors {
        for fields in &sent_fields() {
            for drafts in [&[][..], &["a draft"][..]] {
                let (events, _) =
                    streamed(fields, drafts, |writer, out| writer.refusal(error, out));
                assert_numbered(&events);
                let reasoning = drafts.iter().map(|draft| {
                    let summary = json!([{"type": "summary_text", "text": draft}]);
                    json!({"id": "rs_enf18f0a1b2c3000001", "type": "reasoning", "summary": summary})
                });
                let mut expected = object_fields("failed", json!(reasoning.collect::<Vec<_>>()));
                for (key, value) in fields.as_object().into_iter().flatten() {
                    expected[key] = value.clone();
                }
                expected["error"] =
                    json!({"code": error.streamed_code(), "message": error.message});
                expected["usage"] = json!({
                    "input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
                    "total_tokens": 0,
                });
                if let Some(enforcement) = &error.enforcement {
                    expected["enforcement"] = (**enforcement).clone();
                }
                let (last, sent) = events.last().expect("events");
                assert_eq!(last, "response.failed");
                assert_eq!(sent["status"], error.status.as_u16());
                assert_eq!(sent["response"], expected, "{error:?}");
                if !drafts.is_empty() {
                    let names = events.iter().map(|(name, _)| name.as_str());
                    let closed: Vec<&str> = names.skip(events.len() - 4).collect();
                    assert_eq!(
                        closed,
                        [
                            "response.reasoning_summary_text.done",
                            "response.reasoning_summary_part.done",
                            "response.output_item.done",
                            "response.failed",
                        ]
                    );
                }
            }
        }
    }
}

#[test]
fn an_unfinished_stream_ends_in_an_error_event() {
    let error = stream::interrupted();
    let expected = json!({
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": null,
        "status": 500,
    });
    assert_eq!(
        events(&ResponsesWriter::unfinished()),
        [("error".to_string(), expected)]
    );
}
