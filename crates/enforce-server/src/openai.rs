//! The OpenAI chat-completions surface (`POST /v1/chat/completions`): its request read into
//! the shared [`Ask`] (`request.rs`), its completion, chunks, Open WebUI status events and
//! error envelope.

use crate::error::ApiError;
use crate::pipeline::{Ask, Surface};
use crate::stream::{self, push_data, StreamWriter, CONTENT_PIECE};
use crate::turn::{Turn, TurnId};
use crate::verdict::{cut_at_token_limit, Enforcement};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::json;
use enforce_core::{runner::ToolCall, Outcome, Usage};
use serde::Serialize;
use serde_json::{json, Value};

mod request;
use request::parse_chat_request;

/// The chat-completions surface.
pub(crate) struct Chat;

impl Surface for Chat {
    const NAME: &'static str = "chat";
    const ID_PREFIX: &'static str = "chatcmpl-";
    const ROUTE: &'static str = "/v1/chat/completions";
    type Kept = ();
    type Writer = ChatWriter;

    fn parse(body: &[u8]) -> Result<(Ask, ()), ApiError> {
        parse_chat_request(body).map(|ask| (ask, ()))
    }

    fn refuse(error: ApiError) -> Response {
        error.into_response()
    }

    fn answer_bytes(turn: &Turn, _: &(), text: &str, outcome: &Outcome) -> Vec<u8> {
        let completion = Completion::of(turn, text, outcome);
        crate::pipeline::answer_body(text, |body| completion.write_json(body))
    }

    fn writer(turn: &Turn, _: ()) -> ChatWriter {
        ChatWriter::new(
            turn.id.clone(),
            turn.model.options.status_events,
            turn.include_usage,
        )
    }
}

/// OpenAI `usage` from the tokens summed over all attempts (zeros when the runner reported
/// none).
pub(crate) fn usage_json(usage: Option<Usage>) -> Value {
    serde_json::to_value(ChatUsage::of(usage)).unwrap_or_default()
}

/// `tool_calls` when the answer calls tools, `length` when it was cut at the token limit,
/// else `stop`.
pub(crate) fn finish_reason(outcome: &Outcome) -> &'static str {
    if !outcome.tool_calls.is_empty() {
        "tool_calls"
    } else if cut_at_token_limit(outcome) {
        "length"
    } else {
        "stop"
    }
}

/// A `chat.completion` with one assistant message: the text (`null` when the answer only calls
/// tools) and the tool calls. Written straight to bytes ([`Completion::write_json`]), its keys
/// in the order a `Value` writes them (sorted), so both forms are the same bytes.
struct Completion<'a> {
    finish_reason: &'static str,
    content: Option<&'a str>,
    tool_calls: Option<Vec<Value>>,
    created: u64,
    enforcement: Enforcement<'a>,
    id: &'a str,
    model: &'a str,
    usage: ChatUsage,
}

/// OpenAI `usage` (see [`usage_json`]).
#[derive(Serialize)]
struct ChatUsage {
    completion_tokens: u64,
    prompt_tokens: u64,
    total_tokens: u64,
}

impl ChatUsage {
    fn of(usage: Option<Usage>) -> Self {
        let u = usage.unwrap_or_default();
        ChatUsage {
            completion_tokens: u.output_tokens,
            prompt_tokens: u.input_tokens,
            total_tokens: u.total(),
        }
    }
}

impl<'a> Completion<'a> {
    fn of(turn: &'a Turn, content: &'a str, outcome: &'a Outcome) -> Self {
        Completion::answer(&turn.id, turn.route.as_ref(), content, outcome)
    }

    /// The answer `id` gives, routed by `route`.
    fn answer(
        id: &'a TurnId,
        route: Option<&'a Value>,
        content: &'a str,
        outcome: &'a Outcome,
    ) -> Self {
        let calls = &outcome.tool_calls;
        Completion {
            finish_reason: finish_reason(outcome),
            content: (calls.is_empty() || !content.is_empty()).then_some(content),
            tool_calls: (!calls.is_empty())
                .then(|| calls.iter().map(ToolCall::to_openai).collect()),
            created: id.created,
            enforcement: Enforcement::of(outcome).routed(route),
            id: &id.id,
            model: &id.model,
            usage: ChatUsage::of(outcome.usage),
        }
    }

    /// Appends the completion's JSON to `out`: the fixed keys and values as prepared text, a
    /// copy each, the rest as values.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        out.extend_from_slice(br#"{"choices":[{"finish_reason":"#);
        json::write(out, self.finish_reason)?;
        out.extend_from_slice(br#","index":0,"message":{"content":"#);
        json::write(out, &self.content)?;
        out.extend_from_slice(br#","role":"assistant""#);
        if let Some(calls) = &self.tool_calls {
            out.extend_from_slice(br#","tool_calls":"#);
            json::write(out, calls)?;
        }
        out.extend_from_slice(br#"}}],"created":"#);
        json::write(out, &self.created)?;
        out.extend_from_slice(br#","enforcement":"#);
        json::write(out, &self.enforcement)?;
        out.extend_from_slice(br#","id":"#);
        json::write(out, self.id)?;
        out.extend_from_slice(br#","model":"#);
        json::write(out, self.model)?;
        out.extend_from_slice(br#","object":"chat.completion","usage":"#);
        json::write(out, &self.usage)?;
        out.push(b'}');
        Ok(())
    }
}

/// The choice of a `chat.completion.chunk`: its `delta` is `D`. Keys in the order a `Value`
/// writes them (sorted), as every chunk's are, so the typed chunks are the bytes clients
/// always got.
#[derive(Serialize)]
struct ChunkChoice<D: Serialize> {
    delta: D,
    finish_reason: Option<&'static str>,
    index: u32,
}

/// The first delta of an answer: the role, and empty content (`null` when the answer only
/// calls tools).
#[derive(Serialize)]
struct Opening {
    content: Option<&'static str>,
    role: &'static str,
}

/// A piece of the answer's text.
#[derive(Serialize)]
struct Content<'a> {
    content: &'a str,
}

/// A piece of a draft, shown as thinking.
#[derive(Serialize)]
struct Reasoning<'a> {
    reasoning_content: &'a str,
}

/// The finish chunk's empty delta.
#[derive(Serialize)]
struct NoDelta {}

/// The usage chunk: no choices, only `usage`.
fn usage_chunk(id: &TurnId, usage: Option<Usage>) -> Value {
    json!({
        "id": id.id,
        "object": "chat.completion.chunk",
        "created": id.created,
        "model": id.model,
        "choices": [],
        "usage": usage_json(usage),
    })
}

/// An Open WebUI status event.
fn status_event(description: &str, done: bool, hidden: bool) -> Value {
    let mut data = json!({"description": description, "done": done});
    if hidden {
        data["hidden"] = Value::Bool(true);
    }
    json!({"event": {"type": "status", "data": data}})
}

const DONE: &[u8] = b"data: [DONE]\n\n";

/// Writes a chat-completions stream: Open WebUI status events (when the model's
/// `status_events` is on), drafts as `delta.reasoning_content`, then the content and tool-call
/// chunks, the finish chunk with `enforcement`, the usage chunk when asked for, `[DONE]`.
pub(crate) struct ChatWriter {
    id: TurnId,
    /// What every chunk of the answer has after its choice, written once: `],"created":N`.
    chunk_created: Vec<u8>,
    /// And how every chunk ends: `,"id":…,"model":…,"object":"chat.completion.chunk"}`.
    chunk_end: Vec<u8>,
    status_events: bool,
    include_usage: bool,
    /// A status event with `done:false` is showing and must be closed.
    status_open: bool,
    /// The assistant's opening chunk (`role`) went out already (a draft started the message).
    opened: bool,
}

impl ChatWriter {
    /// The writer of answer `id`.
    fn new(id: TurnId, status_events: bool, include_usage: bool) -> Self {
        // Serializing a number or a string into a Vec cannot fail.
        let mut chunk_created = b"],\"created\":".to_vec();
        let _ = enforce_core::json::write(&mut chunk_created, &id.created);
        let mut chunk_end = b",\"id\":".to_vec();
        let _ = enforce_core::json::write(&mut chunk_end, &id.id);
        chunk_end.extend_from_slice(b",\"model\":");
        let _ = enforce_core::json::write(&mut chunk_end, &id.model);
        chunk_end.extend_from_slice(b",\"object\":\"chat.completion.chunk\"}");
        ChatWriter {
            id,
            chunk_created,
            chunk_end,
            status_events,
            include_usage,
            status_open: false,
            opened: false,
        }
    }

    /// Appends one `data:` line holding a `chat.completion.chunk` with one choice; the finish
    /// chunk carries `enforcement` too. The fields every chunk shares are the bytes written
    /// once; the keys come sorted, as a `Value` writes them.
    fn push_chunk<D: Serialize>(
        &self,
        out: &mut Vec<u8>,
        delta: D,
        finish_reason: Option<&'static str>,
        enforcement: Option<&Enforcement<'_>>,
    ) {
        let choice = ChunkChoice {
            delta,
            finish_reason,
            index: 0,
        };
        stream::push_data_with(out, |out| {
            out.extend_from_slice(b"{\"choices\":[");
            // Serializing into a Vec cannot fail.
            let _ = enforce_core::json::write(out, &choice);
            out.extend_from_slice(&self.chunk_created);
            if let Some(enforcement) = enforcement {
                out.extend_from_slice(b",\"enforcement\":");
                let _ = enforce_core::json::write(out, enforcement);
            }
            out.extend_from_slice(&self.chunk_end);
        });
    }

    /// The event closing a showing status line: a final description, or hidden when there is
    /// nothing worth keeping on screen.
    fn close_status(&mut self, description: Option<&str>, out: &mut Vec<u8>) {
        if !self.status_events || !self.status_open {
            return;
        }
        self.status_open = false;
        let event = match description {
            Some(d) => status_event(d, true, false),
            None => status_event("", true, true),
        };
        push_data(out, &event);
    }
}

impl StreamWriter for ChatWriter {
    fn status(&mut self, description: &str, out: &mut Vec<u8>) {
        if self.status_events {
            self.status_open = true;
            push_data(out, &status_event(description, false, false));
        }
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        if !self.opened {
            self.opened = true;
            let open = Opening {
                content: Some(""),
                role: "assistant",
            };
            self.push_chunk(out, open, None, None);
        }
        let reasoning = Reasoning {
            reasoning_content: text,
        };
        self.push_chunk(out, reasoning, None, None);
    }

    fn answer(
        &mut self,
        turn: &Turn,
        text: &str,
        outcome: &Outcome,
        summary: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        self.write_answer(turn.route.as_ref(), text, outcome, summary, out);
    }

    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        let description = format!("Answer not shown: {}", error.code);
        self.close_status(Some(&description), out);
        push_data(out, &error.streamed_body());
    }

    fn end(&mut self, out: &mut Vec<u8>) {
        out.extend_from_slice(DONE);
    }

    fn unfinished() -> Bytes {
        let mut tail = Vec::new();
        push_data(&mut tail, &stream::interrupted().streamed_body());
        tail.extend_from_slice(DONE);
        Bytes::from(tail)
    }
}

impl ChatWriter {
    /// The answer's chunks (see [`StreamWriter::answer`]); `route`: how the request was routed.
    fn write_answer(
        &mut self,
        route: Option<&Value>,
        text: &str,
        outcome: &Outcome,
        summary: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        self.close_status(summary, out);
        let calls = &outcome.tool_calls;
        // An answer that only calls tools has no content, as OpenAI streams it.
        if !self.opened {
            let opening = Opening {
                content: (calls.is_empty() || !text.is_empty()).then_some(""),
                role: "assistant",
            };
            self.push_chunk(out, opening, None, None);
        }
        for piece in stream::pieces(text, CONTENT_PIECE) {
            self.push_chunk(out, Content { content: piece }, None, None);
        }
        // Each call: its id and name with empty arguments first, then the arguments in pieces
        // under the same index, as OpenAI streams them.
        for (index, call) in calls.iter().enumerate() {
            let head = json!({"tool_calls": [{
                "index": index, "id": call.id, "type": "function",
                "function": {"name": call.name, "arguments": ""},
            }]});
            self.push_chunk(out, head, None, None);
            for piece in stream::pieces(&call.arguments, CONTENT_PIECE) {
                let more =
                    json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
                self.push_chunk(out, more, None, None);
            }
        }
        let enforcement = Enforcement::of(outcome).routed(route);
        let finish = Some(finish_reason(outcome));
        self.push_chunk(out, NoDelta {}, finish, Some(&enforcement));
        if self.include_usage {
            push_data(out, &usage_chunk(&self.id, outcome.usage));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unfinished_stream_ends_in_an_error_chunk_then_done() {
        let tail = String::from_utf8(ChatWriter::unfinished().to_vec()).unwrap();
        let lines: Vec<&str> = tail.lines().filter(|l| l.starts_with("data:")).collect();
        assert_eq!(lines.len(), 2);
        let chunk: Value = serde_json::from_str(&lines[0]["data: ".len()..]).unwrap();
        assert!(chunk.get("error").is_some() && chunk.get("choices").is_none());
        assert_eq!(lines[1], "data: [DONE]");
    }

    /// The completion written by hand is, byte for byte, the `Value` of it serde_json writes:
    /// text, an empty text, tool calls with and without text, an answer cut at the token
    /// limit, a route, escapes in the text.
    #[test]
    fn the_completion_is_the_bytes_of_its_value() {
        use crate::verdict::enforcement_json;
        use crate::verdict::fixtures::{attempt, outcome};
        use enforce_core::{runner::FinishReason, Status};

        let id = TurnId {
            id: "chatcmpl-enf1".into(),
            created: 1_700_000_000,
            model: "m".into(),
        };
        let call = ToolCall::new("call_1", "get_weather", r#"{"city":"Paris"}"#);
        let route = json!({"name": "r", "profile": "p", "by": "field"});
        let passed = outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]);
        let calling = outcome(Status::Passed, vec![call], vec![attempt(None, &[])]);
        let cut = outcome(
            Status::Passed,
            Vec::new(),
            vec![attempt(Some(FinishReason::Length), &[])],
        );
        let cases: [(&str, &Outcome, Option<&Value>); 6] = [
            ("{\"name\": \"Ada\"}\n", &passed, None),
            ("", &passed, None),
            ("", &calling, None),
            ("Looking it up.", &calling, None),
            ("cut sh", &cut, None),
            ("routed", &passed, Some(&route)),
        ];
        for (text, outcome, route) in cases {
            let calls = &outcome.tool_calls;
            let mut message = json!({
                "role": "assistant",
                "content": (calls.is_empty() || !text.is_empty()).then_some(text),
            });
            if !calls.is_empty() {
                let calls: Vec<Value> = calls.iter().map(ToolCall::to_openai).collect();
                message["tool_calls"] = Value::Array(calls);
            }
            let mut enforcement = enforcement_json(outcome);
            if let Some(route) = route {
                enforcement["route"] = route.clone();
            }
            let reference = json!({
                "id": id.id,
                "object": "chat.completion",
                "created": id.created,
                "model": id.model,
                "choices": [{
                    "index": 0,
                    "message": message,
                    "finish_reason": finish_reason(outcome),
                }],
                "usage": usage_json(outcome.usage),
                "enforcement": enforcement,
            });
            let mut written = Vec::new();
            Completion::answer(&id, route, text, outcome)
                .write_json(&mut written)
                .expect("writes");
            assert_eq!(
                String::from_utf8(written).expect("UTF-8"),
                serde_json::to_string(&reference).expect("serializes")
            );
        }
    }

    /// The typed chunks are, byte for byte, the `Value`-built ones they replaced: drafts
    /// first or not, text in one piece or several, tool calls with and without text, a route,
    /// the usage chunk.
    #[test]
    fn the_typed_chunks_are_the_bytes_of_the_values_they_replaced() {
        use crate::verdict::enforcement_json;
        use crate::verdict::fixtures::{attempt, outcome};
        use enforce_core::Status;

        fn reference_chunk(id: &TurnId, delta: Value, finish_reason: Option<&str>) -> Value {
            json!({
                "id": id.id,
                "object": "chat.completion.chunk",
                "created": id.created,
                "model": id.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            })
        }

        /// The answer as the writer wrote it with `Value`s.
        fn reference(
            id: &TurnId,
            opened: bool,
            route: Option<&Value>,
            text: &str,
            outcome: &Outcome,
            include_usage: bool,
        ) -> Vec<u8> {
            let mut out = Vec::new();
            let calls = &outcome.tool_calls;
            if !opened {
                let opening = if text.is_empty() && !calls.is_empty() {
                    json!({"role": "assistant", "content": null})
                } else {
                    json!({"role": "assistant", "content": ""})
                };
                push_data(&mut out, &reference_chunk(id, opening, None));
            }
            for piece in stream::pieces(text, CONTENT_PIECE) {
                push_data(
                    &mut out,
                    &reference_chunk(id, json!({"content": piece}), None),
                );
            }
            for (index, call) in calls.iter().enumerate() {
                let head = json!({"tool_calls": [{
                    "index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]});
                push_data(&mut out, &reference_chunk(id, head, None));
                for piece in stream::pieces(&call.arguments, CONTENT_PIECE) {
                    let more =
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
                    push_data(&mut out, &reference_chunk(id, more, None));
                }
            }
            let mut finish = reference_chunk(id, json!({}), Some(finish_reason(outcome)));
            finish["enforcement"] = enforcement_json(outcome);
            if let (Some(route), Some(object)) = (route, finish["enforcement"].as_object_mut()) {
                object.insert("route".into(), route.clone());
            }
            push_data(&mut out, &finish);
            if include_usage {
                push_data(&mut out, &usage_chunk(id, outcome.usage));
            }
            out
        }

        let id = TurnId {
            id: "chatcmpl-enf1".into(),
            created: 7,
            model: "m \"quoted\"".into(),
        };
        let call = ToolCall::new("c1", "f", "{\"a\": 1}");
        let route = json!({"name": "r", "profile": "p", "by": "default"});
        let long = "é".repeat(CONTENT_PIECE);
        let mut failed = outcome(
            Status::Unresolved,
            Vec::new(),
            vec![attempt(None, &["json"])],
        );
        failed.usage = Some(Usage {
            input_tokens: 3,
            output_tokens: 4,
        });
        let answers = [
            (
                "plain text",
                outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]),
            ),
            (
                "",
                outcome(Status::Passed, vec![call.clone()], vec![attempt(None, &[])]),
            ),
            (
                "text and a call",
                outcome(Status::Repaired, vec![call], vec![attempt(None, &["x"])]),
            ),
            (long.as_str(), failed),
        ];
        for (text, outcome) in &answers {
            for (opened, route, include_usage) in [
                (false, None, false),
                (true, Some(&route), true),
                (false, Some(&route), true),
            ] {
                let mut writer = ChatWriter {
                    opened,
                    ..ChatWriter::new(id.clone(), false, include_usage)
                };
                let mut typed = Vec::new();
                writer.write_answer(route, text, outcome, None, &mut typed);
                assert_eq!(
                    String::from_utf8_lossy(&typed),
                    String::from_utf8_lossy(&reference(
                        &id,
                        opened,
                        route,
                        text,
                        outcome,
                        include_usage
                    )),
                    "{text:?}, opened {opened}, route {route:?}"
                );
            }
        }
        let mut writer = ChatWriter::new(id.clone(), false, false);
        let mut typed = Vec::new();
        writer.draft("thinking \"hard\"", &mut typed);
        let mut expected = Vec::new();
        let open = json!({"role": "assistant", "content": ""});
        push_data(&mut expected, &reference_chunk(&id, open, None));
        let draft = json!({"reasoning_content": "thinking \"hard\""});
        push_data(&mut expected, &reference_chunk(&id, draft, None));
        assert_eq!(
            String::from_utf8_lossy(&typed),
            String::from_utf8_lossy(&expected)
        );
    }
}
