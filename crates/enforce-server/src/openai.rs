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

    fn parse(body: Bytes) -> Result<(Ask, ()), ApiError> {
        parse_chat_request(body).map(|ask| (ask, ()))
    }

    fn refuse(error: ApiError) -> Response {
        error.into_response()
    }

    fn answer_bytes(turn: &Turn, _: &(), text: &str, outcome: &Outcome) -> Vec<u8> {
        let completion = Completion::of(turn, text, outcome);
        crate::pipeline::answer_body(text, &completion)
    }

    fn writer(turn: &Turn, _: ()) -> ChatWriter {
        ChatWriter::new(
            turn.id.clone(),
            turn.model.options.status_events,
            turn.include_usage,
        )
    }
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

/// A `chat.completion` with one assistant message.
#[derive(Serialize)]
struct Completion<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [CompletionChoice<'a>; 1],
    usage: ChatUsage,
    enforcement: Enforcement<'a>,
}

#[derive(Serialize)]
struct CompletionChoice<'a> {
    index: u32,
    message: AssistantMessage<'a>,
    finish_reason: &'static str,
}

/// The answer: its text (`null` when the answer only calls tools) and its tool calls.
#[derive(Serialize)]
struct AssistantMessage<'a> {
    role: &'static str,
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_calls: Option<Vec<Value>>,
}

/// OpenAI `usage` from the tokens summed over all attempts (zeros when the runner reported
/// none).
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
        let message = AssistantMessage {
            role: "assistant",
            content: (calls.is_empty() || !content.is_empty()).then_some(content),
            tool_calls: (!calls.is_empty())
                .then(|| calls.iter().map(ToolCall::to_openai).collect()),
        };
        Completion {
            id: &id.id,
            object: "chat.completion",
            created: id.created,
            model: &id.model,
            choices: [CompletionChoice {
                index: 0,
                message,
                finish_reason: finish_reason(outcome),
            }],
            usage: ChatUsage::of(outcome.usage),
            enforcement: Enforcement::of(outcome).routed(route),
        }
    }
}

/// A `chat.completion.chunk`: one choice whose `delta` is `D` (none in the usage chunk); the
/// finish chunk carries `enforcement`, the usage chunk `usage`.
#[derive(Serialize)]
struct Chunk<'a, C: Serialize> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: C,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<&'a Enforcement<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<ChatUsage>,
}

/// The choice of a `chat.completion.chunk`: its `delta` is `D`.
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
        ChatWriter {
            id,
            status_events,
            include_usage,
            status_open: false,
            opened: false,
        }
    }

    /// A `chat.completion.chunk` of this answer holding `choices`.
    fn chunk<'a, C: Serialize>(&'a self, choices: C) -> Chunk<'a, C> {
        Chunk {
            id: &self.id.id,
            object: "chat.completion.chunk",
            created: self.id.created,
            model: &self.id.model,
            choices,
            enforcement: None,
            usage: None,
        }
    }

    /// Appends one `data:` line holding a chunk with one choice; the finish chunk carries
    /// `enforcement` too.
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
        let chunk = Chunk {
            enforcement,
            ..self.chunk([choice])
        };
        push_data(out, &chunk);
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
            let usage = Chunk {
                usage: Some(ChatUsage::of(outcome.usage)),
                ..self.chunk([(); 0])
            };
            push_data(out, &usage);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage_json(usage: Option<Usage>) -> Value {
        serde_json::to_value(ChatUsage::of(usage)).expect("usage")
    }

    #[test]
    fn an_unfinished_stream_ends_in_an_error_chunk_then_done() {
        let tail = String::from_utf8(ChatWriter::unfinished().to_vec()).unwrap();
        let lines: Vec<&str> = tail.lines().filter(|l| l.starts_with("data:")).collect();
        assert_eq!(lines.len(), 2);
        let chunk: Value = serde_json::from_str(&lines[0]["data: ".len()..]).unwrap();
        assert!(chunk.get("error").is_some() && chunk.get("choices").is_none());
        assert_eq!(lines[1], "data: [DONE]");
    }

    /// Every `data:` line's JSON of a stream's bytes.
    fn data_values(bytes: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(bytes).expect("UTF-8");
        text.lines()
            .filter_map(|line| line.strip_prefix("data: "))
            .map(|data| serde_json::from_str(data).expect("JSON"))
            .collect()
    }

    /// The completion holds the answer: text, an empty text, tool calls with and without
    /// text, an answer cut at the token limit, a route, escapes in the text.
    #[test]
    fn the_completion_holds_the_answer() {
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
            let written =
                serde_json::to_vec(&Completion::answer(&id, route, text, outcome)).expect("writes");
            assert_eq!(
                serde_json::from_slice::<Value>(&written).expect("JSON"),
                reference
            );
        }
    }

    /// The chunks of an answer, in order: drafts first or not, text in one piece or several,
    /// tool calls with and without text, a route, the usage chunk.
    #[test]
    fn the_chunks_hold_the_answer_in_order() {
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

        /// The answer's chunks.
        fn reference(
            id: &TurnId,
            opened: bool,
            route: Option<&Value>,
            text: &str,
            outcome: &Outcome,
            include_usage: bool,
        ) -> Vec<Value> {
            let mut out = Vec::new();
            let calls = &outcome.tool_calls;
            if !opened {
                let opening = if text.is_empty() && !calls.is_empty() {
                    json!({"role": "assistant", "content": null})
                } else {
                    json!({"role": "assistant", "content": ""})
                };
                out.push(reference_chunk(id, opening, None));
            }
            for piece in stream::pieces(text, CONTENT_PIECE) {
                out.push(reference_chunk(id, json!({"content": piece}), None));
            }
            for (index, call) in calls.iter().enumerate() {
                let head = json!({"tool_calls": [{
                    "index": index, "id": call.id, "type": "function",
                    "function": {"name": call.name, "arguments": ""},
                }]});
                out.push(reference_chunk(id, head, None));
                for piece in stream::pieces(&call.arguments, CONTENT_PIECE) {
                    let more =
                        json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
                    out.push(reference_chunk(id, more, None));
                }
            }
            let mut finish = reference_chunk(id, json!({}), Some(finish_reason(outcome)));
            finish["enforcement"] = enforcement_json(outcome);
            if let (Some(route), Some(object)) = (route, finish["enforcement"].as_object_mut()) {
                object.insert("route".into(), route.clone());
            }
            out.push(finish);
            if include_usage {
                out.push(json!({
                    "id": id.id,
                    "object": "chat.completion.chunk",
                    "created": id.created,
                    "model": id.model,
                    "choices": [],
                    "usage": usage_json(outcome.usage),
                }));
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
                    data_values(&typed),
                    reference(&id, opened, route, text, outcome, include_usage),
                    "{text:?}, opened {opened}, route {route:?}"
                );
            }
        }
        let mut writer = ChatWriter::new(id.clone(), false, false);
        let mut typed = Vec::new();
        writer.draft("thinking \"hard\"", &mut typed);
        let open = json!({"role": "assistant", "content": ""});
        let draft = json!({"reasoning_content": "thinking \"hard\""});
        assert_eq!(
            data_values(&typed),
            [
                reference_chunk(&id, open, None),
                reference_chunk(&id, draft, None)
            ]
        );
    }
}
