//! The typed stream events against the `Value`-built ones they replaced: the same bytes for
//! every kind of answer, text in one delta or several, tool calls with and without text, an
//! answer cut at the token limit, drafts shown before it, and a refusal.

use super::tests::{echoes, id, outcomes, reference};
use super::{Responses, ResponsesWriter};
use crate::error::ApiError;
use crate::pipeline::Surface;
use crate::stream::{self, push_data, StreamWriter, CONTENT_PIECE};
use crate::turn::TurnId;
use crate::verdict::fixtures::{attempt, outcome};
use crate::verdict::{cut_at_token_limit, outcome_failure};
use axum::http::StatusCode;
use enforce_core::{runner::ToolCall, Outcome, Status};
use serde_json::{json, Map, Value};

/// The writer as it was before its events were typed: every event a `json!` tree with `type`
/// and `sequence_number` inserted.
struct ValueWriter {
    id: TurnId,
    echo: Map<String, Value>,
    sequence: u64,
    reasoning: Option<(usize, String)>,
    shown_reasoning: Option<(usize, Value)>,
    next_index: usize,
    item_status: &'static str,
}

impl ValueWriter {
    fn new(id: &TurnId, echo: &Map<String, Value>) -> Self {
        ValueWriter {
            id: id.clone(),
            echo: echo.clone(),
            sequence: 0,
            reasoning: None,
            shown_reasoning: None,
            next_index: 0,
            item_status: "completed",
        }
    }

    fn item_id(&self, prefix: &str) -> String {
        let suffix = self.id.id.strip_prefix(Responses::ID_PREFIX).unwrap();
        format!("{prefix}{suffix}")
    }

    fn event(&mut self, kind: &str, mut body: Value, out: &mut Vec<u8>) {
        out.extend_from_slice(format!("event: {kind}\n").as_bytes());
        if let Value::Object(map) = &mut body {
            map.insert("type".into(), Value::String(kind.to_string()));
            map.insert("sequence_number".into(), Value::from(self.sequence));
        }
        self.sequence += 1;
        push_data(out, &body);
    }

    fn open(&mut self, out: &mut Vec<u8>) {
        for kind in ["response.created", "response.in_progress"] {
            let response = reference::response_object(
                &self.id,
                &self.echo,
                "in_progress",
                Vec::new(),
                None,
                Value::Null,
            );
            self.event(kind, json!({ "response": response }), out);
        }
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        let item_id = self.item_id("rs_");
        let index = match &self.reasoning {
            Some((index, _)) => *index,
            None => {
                let index = self.next_index;
                self.next_index += 1;
                self.reasoning = Some((index, String::new()));
                let item = json!({"id": item_id, "type": "reasoning", "summary": []});
                self.event(
                    "response.output_item.added",
                    json!({"output_index": index, "item": item}),
                    out,
                );
                let part = json!({
                    "item_id": item_id, "output_index": index, "summary_index": 0,
                    "part": {"type": "summary_text", "text": ""},
                });
                self.event("response.reasoning_summary_part.added", part, out);
                index
            }
        };
        if let Some((_, shown)) = &mut self.reasoning {
            shown.push_str(text);
        }
        let delta = json!({
            "item_id": item_id, "output_index": index, "summary_index": 0, "delta": text,
        });
        self.event("response.reasoning_summary_text.delta", delta, out);
    }

    fn close_reasoning(&mut self, out: &mut Vec<u8>) {
        let Some((index, text)) = self.reasoning.take() else {
            return;
        };
        let item_id = self.item_id("rs_");
        let part = json!({"type": "summary_text", "text": text});
        let at = json!({"item_id": item_id, "output_index": index, "summary_index": 0});
        let mut done = at.clone();
        done["text"] = Value::String(text.clone());
        self.event("response.reasoning_summary_text.done", done, out);
        let mut part_done = at;
        part_done["part"] = part.clone();
        self.event("response.reasoning_summary_part.done", part_done, out);
        let item = json!({"id": item_id, "type": "reasoning", "summary": [part]});
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item.clone()}),
            out,
        );
        self.shown_reasoning = Some((index, item));
    }

    fn text_item(&mut self, text: &str, out: &mut Vec<u8>) {
        let index = self.next_index;
        self.next_index += 1;
        let item_id = self.item_id("msg_");
        let added = json!({
            "output_index": index,
            "item": reference::message_item(&self.id, "", "in_progress"),
        });
        self.event("response.output_item.added", added, out);
        let at = json!({"item_id": item_id, "output_index": index, "content_index": 0});
        let mut part_added = at.clone();
        part_added["part"] = json!({"type": "output_text", "text": "", "annotations": []});
        self.event("response.content_part.added", part_added, out);
        for piece in stream::pieces(text, CONTENT_PIECE) {
            let mut delta = at.clone();
            delta["delta"] = Value::String(piece.to_string());
            delta["logprobs"] = json!([]);
            self.event("response.output_text.delta", delta, out);
        }
        let mut done = at.clone();
        done["text"] = Value::String(text.to_string());
        done["logprobs"] = json!([]);
        self.event("response.output_text.done", done, out);
        let mut part_done = at;
        part_done["part"] = json!({"type": "output_text", "text": text, "annotations": []});
        self.event("response.content_part.done", part_done, out);
        let item = reference::message_item(&self.id, text, self.item_status);
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
            out,
        );
    }

    fn call_item(&mut self, number: usize, call: &ToolCall, out: &mut Vec<u8>) {
        let index = self.next_index;
        self.next_index += 1;
        let unsent = ToolCall::new(call.id.clone(), call.name.clone(), "");
        let item = reference::call_item(&self.id, number, &unsent, "in_progress");
        let item_id = item["id"].clone();
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": item}),
            out,
        );
        for piece in stream::pieces(&call.arguments, CONTENT_PIECE) {
            let delta = json!({"item_id": item_id, "output_index": index, "delta": piece});
            self.event("response.function_call_arguments.delta", delta, out);
        }
        let done = json!({
            "item_id": item_id, "output_index": index,
            "name": call.name, "arguments": call.arguments,
        });
        self.event("response.function_call_arguments.done", done, out);
        let item = reference::call_item(&self.id, number, call, self.item_status);
        self.event(
            "response.output_item.done",
            json!({"output_index": index, "item": item}),
            out,
        );
    }

    /// The answer's events; the `response` it ends with, as stored.
    fn answer(
        &mut self,
        route: Option<&Value>,
        ignored: &[String],
        text: &str,
        outcome: &Outcome,
        out: &mut Vec<u8>,
    ) -> String {
        self.close_reasoning(out);
        self.item_status = if cut_at_token_limit(outcome) {
            "incomplete"
        } else {
            "completed"
        };
        let calls = &outcome.tool_calls;
        if !text.is_empty() || calls.is_empty() {
            self.text_item(text, out);
        }
        for (number, call) in calls.iter().enumerate() {
            self.call_item(number, call, out);
        }
        let mut response = reference::answer(&self.id, &self.echo, route, ignored, text, outcome);
        let shown = self.shown_reasoning.as_ref().map(|(i, item)| (*i, item));
        reference::with_reasoning(&mut response, shown);
        let event = if cut_at_token_limit(outcome) {
            "response.incomplete"
        } else {
            "response.completed"
        };
        let stored = response.to_string();
        self.event(event, json!({ "response": response }), out);
        stored
    }

    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.close_reasoning(out);
        let enforcement = error.enforcement.as_deref().cloned().unwrap_or(Value::Null);
        let mut response = reference::response_object(
            &self.id,
            &self.echo,
            "failed",
            Vec::new(),
            None,
            enforcement,
        );
        response["error"] = json!({"code": error.streamed_code(), "message": error.message});
        let shown = self.shown_reasoning.as_ref().map(|(i, item)| (*i, item));
        reference::with_reasoning(&mut response, shown);
        let body = json!({"response": response, "status": error.status.as_u16()});
        self.event("response.failed", body, out);
    }
}

fn utf8(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
    answers.push((
        long_text.clone(),
        outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]),
    ));
    answers.push((
        long_text,
        outcome(
            Status::Repaired,
            vec![long_call],
            vec![attempt(None, &["x"])],
        ),
    ));
    answers
}

/// Both writers opened and shown `drafts`, each with what it wrote: the typed one and the
/// reference.
fn opened(
    id: &TurnId,
    echo: &Map<String, Value>,
    drafts: &[&str],
) -> ((ResponsesWriter, Vec<u8>), (ValueWriter, Vec<u8>)) {
    let mut typed = Vec::new();
    let mut writer = ResponsesWriter::new(id.clone(), echo.clone());
    writer.open(&mut typed);
    let mut value = Vec::new();
    let mut old = ValueWriter::new(id, echo);
    old.open(&mut value);
    for draft in drafts {
        writer.draft(draft, &mut typed);
        old.draft(draft, &mut value);
    }
    ((writer, typed), (old, value))
}

#[test]
fn the_typed_events_are_the_bytes_of_the_values_they_replaced() {
    let id = id();
    let route = json!({"name": "code", "profile": "strict", "by": "field"});
    let ignored = ["include".to_string()];
    let drafts: [&[&str]; 2] = [&[], &["Thinking \"hard\"", " — and more.\n"]];
    let mut several_deltas = false;
    for (text, outcome) in &answers() {
        several_deltas |= stream::pieces(text, CONTENT_PIECE).len() > 1;
        for echo in &echoes() {
            for (route, ignored) in [(None, &[][..]), (Some(&route), &ignored[..])] {
                for drafts in drafts {
                    let ((mut writer, mut typed), (mut old, mut value)) = opened(&id, echo, drafts);
                    writer.write_answer(route, ignored, text, outcome, &mut typed);
                    let stored = old.answer(route, ignored, text, outcome, &mut value);
                    assert_eq!(utf8(&typed), utf8(&value), "{text:?} {echo:?}");
                    let typed_stored = writer.stored().expect("the answer is stored");
                    assert_eq!(utf8(&typed_stored), stored);
                }
            }
        }
    }
    assert!(several_deltas, "an answer long enough for several deltas");
}

#[test]
fn a_typed_refusal_and_an_unfinished_stream_are_the_bytes_of_the_values_they_replaced() {
    let id = id();
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
        for echo in &echoes() {
            for drafts in [&[][..], &["a draft"][..]] {
                let ((mut writer, mut typed), (mut old, mut value)) = opened(&id, echo, drafts);
                writer.refusal(error, &mut typed);
                old.refusal(error, &mut value);
                assert_eq!(utf8(&typed), utf8(&value), "{error:?}");
            }
        }
    }

    let error = stream::interrupted();
    let body = json!({
        "type": "error",
        "code": error.code,
        "message": error.message,
        "param": null,
        "status": StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
    });
    let mut tail = b"event: error\n".to_vec();
    push_data(&mut tail, &body);
    assert_eq!(utf8(&ResponsesWriter::unfinished()), utf8(&tail));
}
