//! The OpenAI Responses surface (`POST /v1/responses`, `GET /v1/responses/{id}`): a Responses
//! request translated into the shared [`Ask`] (in the chat-completions dialect the runners
//! speak), the `response` object, its typed stream events with `sequence_number`, and the
//! OpenAI error envelope.
//!
//! Translation: `instructions` → a system message; `input` (a string, or items: messages with
//! `input_text`/`output_text`/`input_image`/`input_file` parts, `function_call` and
//! `function_call_output`) → messages; function `tools` → chat tools; `text.format` →
//! `response_format`; `max_output_tokens` → `max_tokens`; `reasoning.effort` →
//! `reasoning_effort`. What cannot be carried is refused with a 400 naming the field.

use crate::error::ApiError;
use crate::pipeline::{body_object, model_of, non_empty, Ask, Surface};
use crate::stream::{self, StreamWriter, CONTENT_PIECE};
use crate::turn::{Turn, TurnId};
use crate::verdict::cut_at_token_limit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::{Message, Outcome, Role, ToolCall};
use events::{
    ArgumentsDelta, ArgumentsDone, ContentPart, ItemEvent, StreamError, SummaryDelta, SummaryDone,
    SummaryPart, TextDelta, TextDone,
};
use object::{
    CallItem, Failure, ItemId, MessageItem, OutputText, ReasoningItem, ResponseObject, SummaryText,
    Verdict,
};
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

mod events;
mod object;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

/// The Responses surface.
pub(crate) struct Responses;

/// Request fields echoed in the `response` object, as the client sent them.
const ECHOED: &[&str] = &[
    "instructions",
    "tools",
    "tool_choice",
    "text",
    "temperature",
    "top_p",
    "max_output_tokens",
    "metadata",
    "previous_response_id",
    "parallel_tool_calls",
    "store",
    "truncation",
    "user",
    "reasoning",
];

/// Request fields this proxy cannot carry to a chat-completions upstream: refused, never
/// dropped.
const REFUSED: &[(&str, &str)] = &[
    (
        "background",
        "background responses are not supported by this proxy",
    ),
    (
        "conversation",
        "conversations are not supported by this proxy; use `previous_response_id`",
    ),
    ("prompt", "stored prompts are not supported by this proxy"),
];

/// Request fields a chat-completions upstream has no use for: left out, and named in the
/// answer's `warnings` and the `X-Enforce-Warnings` header (`fields_ignored`).
const IGNORED: &[&str] = &["include", "truncation", "max_tool_calls", "top_logprobs"];

/// Request fields passed to a chat-completions upstream as they are.
const FORWARDED: &[&str] = &[
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "metadata",
    "safety_identifier",
    "service_tier",
    "seed",
    "stop",
];

/// What the Responses surface keeps of its request for rendering: the echoed fields.
pub(crate) struct Kept {
    echo: Map<String, Value>,
}

impl Surface for Responses {
    const NAME: &'static str = "responses";
    const ID_PREFIX: &'static str = "resp_";
    const ROUTE: &'static str = "/v1/responses";
    type Kept = Kept;
    type Writer = ResponsesWriter;

    fn parse(body: &[u8]) -> Result<(Ask, Kept), ApiError> {
        parse_responses_request(body)
    }

    fn refuse(error: ApiError) -> Response {
        error.into_response()
    }

    fn answer_bytes(turn: &Turn, kept: &Kept, text: &str, outcome: &Outcome) -> Vec<u8> {
        crate::pipeline::answer_body(
            &ResponseObject::of_turn(turn, &kept.echo, text, outcome),
            text,
        )
    }

    fn writer(turn: &Turn, kept: Kept) -> ResponsesWriter {
        ResponsesWriter::new(turn.id.clone(), kept.echo)
    }
}

/// The status of the answer's output items: `incomplete` when the answer was cut at the token
/// limit, as OpenAI's items are at `max_output_tokens`.
fn item_status(outcome: &Outcome) -> &'static str {
    if cut_at_token_limit(outcome) {
        "incomplete"
    } else {
        "completed"
    }
}

fn invalid(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The text of a Responses `content` (a string, or parts); the parts that are not text
/// (images, files, audio) in the chat dialect, passed on to the upstream.
fn content_of(content: &Value) -> Result<(String, Vec<Value>), ApiError> {
    let parts = match content {
        Value::Null => return Ok((String::new(), Vec::new())),
        Value::String(s) => return Ok((s.clone(), Vec::new())),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(
                "An input message's `content` must be a string or an array of content parts.",
                "input",
            ))
        }
    };
    let mut texts = Vec::new();
    let mut other = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "input_text" | "output_text" | "text" | "summary_text" => {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    texts.push(text);
                }
            }
            "refusal" => {
                if let Some(text) = part.get("refusal").and_then(Value::as_str) {
                    texts.push(text);
                }
            }
            "input_image" => {
                let url = part
                    .get("image_url")
                    .cloned()
                    .or_else(|| part.get("file_id").map(|id| json!(format!("file:{id}"))))
                    .unwrap_or(Value::Null);
                let mut image = json!({"url": url});
                if let Some(detail) = part.get("detail") {
                    image["detail"] = detail.clone();
                }
                other.push(json!({"type": "image_url", "image_url": image}));
            }
            "input_file" => {
                let mut file = Map::new();
                for key in ["file_id", "file_data", "filename"] {
                    if let Some(v) = part.get(key) {
                        file.insert(key.into(), v.clone());
                    }
                }
                other.push(json!({"type": "file", "file": file}));
            }
            "input_audio" => {
                let audio = part.get("input_audio").cloned().unwrap_or(Value::Null);
                other.push(json!({"type": "input_audio", "input_audio": audio}));
            }
            kind => {
                return Err(invalid(
                    format!("Content parts of type `{kind}` are not supported by this proxy."),
                    "input",
                ))
            }
        }
    }
    Ok((texts.join("\n"), other))
}

/// A message from text and the other parts: the parts (text first) are kept for the upstream.
fn message_with_parts(role: Role, text: String, other: Vec<Value>) -> Message {
    let mut message = Message::new(role, text);
    if !other.is_empty() {
        let mut parts = Vec::with_capacity(other.len() + 1);
        if !message.content.is_empty() {
            parts.push(json!({"type": "text", "text": message.content}));
        }
        parts.extend(other);
        message.parts = parts;
    }
    message
}

/// The `input` items as messages.
fn input_messages(input: &Value, messages: &mut Vec<Message>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(text) => {
            messages.push(Message::new(Role::User, text.clone()));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => {
            return Err(invalid(
                "`input` must be a string or an array of input items.",
                "input",
            ))
        }
    };
    for item in items {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str).unwrap_or("") {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "system" | "developer" => Role::System,
                    other => {
                        return Err(invalid(
                            format!("Unknown input message role `{other}`."),
                            "input",
                        ))
                    }
                };
                let (text, other) = content_of(item.get("content").unwrap_or(&Value::Null))?;
                messages.push(message_with_parts(role, text, other));
            }
            "function_call" => {
                let field = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
                let (call_id, name) = (field("call_id"), field("name"));
                if call_id.is_empty() || name.is_empty() {
                    return Err(invalid(
                        "A `function_call` input item needs a `call_id` and a `name`.",
                        "input",
                    ));
                }
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => other.to_string(),
                };
                let call = ToolCall::new(call_id, name, arguments);
                // Calls of one turn follow each other: they belong to one assistant message.
                match messages.last_mut() {
                    Some(last) if last.role == Role::Assistant && last.parts.is_empty() => {
                        last.tool_calls.push(call)
                    }
                    _ => messages.push(Message::assistant_calling("", vec![call])),
                }
            }
            "function_call_output" => {
                let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if call_id.is_empty() {
                    return Err(invalid(
                        "A `function_call_output` input item needs the `call_id` of the call it answers.",
                        "input",
                    ));
                }
                let (output, _) = content_of(item.get("output").unwrap_or(&Value::Null))?;
                messages.push(Message::tool(call_id, output));
            }
            // The model's reasoning of an earlier turn is not part of the conversation a chat
            // upstream takes.
            "reasoning" => {}
            other => {
                return Err(invalid(
                    format!("Input items of type `{other}` are not supported by this proxy."),
                    "input",
                ))
            }
        }
    }
    Ok(())
}

/// Function tools in the chat dialect; any other tool type is refused.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(tools) = tools.as_array() else {
        return Err(invalid("`tools` must be an array.", "tools"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(invalid(
                format!("Tools of type `{kind}` are not supported by this proxy (only `function` tools)."),
                "tools",
            ));
        }
        let mut function = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                function.insert(key.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `text.format` as a chat `response_format` (none for plain text).
fn response_format(text: &Value) -> Result<Option<Value>, ApiError> {
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => Ok(None),
        "json_object" => Ok(Some(json!({"type": "json_object"}))),
        "json_schema" => {
            let mut schema = Map::new();
            for key in ["name", "description", "schema", "strict"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        other => Err(invalid(
            format!("`text.format` of type `{other}` is not supported by this proxy."),
            "text",
        )),
    }
}

/// Parses a `POST /v1/responses` body.
/// A field of a request body as sent: present (`null` included) or absent.
fn present<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(from).map(Some)
}

/// The request fields this surface reads, each as sent; the rest of a body is skipped
/// unread. Read straight from the body: a map of every field, looked up some forty times,
/// cost the surface more than the rest of its parsing.
macro_rules! request_fields {
    ($($name:ident),* $(,)?) => {
        #[derive(serde::Deserialize)]
        struct RequestFields {
            $(#[serde(default, deserialize_with = "present")] $name: Option<Value>,)*
        }

        impl RequestFields {
            /// The field named `key`; `None` for a field this surface does not read.
            fn slot(&self, key: &str) -> Option<&Option<Value>> {
                match key {
                    $(stringify!($name) => Some(&self.$name),)*
                    _ => None,
                }
            }

            fn slot_mut(&mut self, key: &str) -> Option<&mut Option<Value>> {
                match key {
                    $(stringify!($name) => Some(&mut self.$name),)*
                    _ => None,
                }
            }
        }
    };
}

request_fields!(
    model,
    input,
    instructions,
    stream,
    store,
    previous_response_id,
    enforce,
    background,
    conversation,
    prompt,
    tools,
    tool_choice,
    text,
    temperature,
    top_p,
    max_output_tokens,
    metadata,
    parallel_tool_calls,
    truncation,
    user,
    reasoning,
    include,
    max_tool_calls,
    top_logprobs,
    safety_identifier,
    service_tier,
    seed,
    stop,
);

impl RequestFields {
    /// Reads a body; a body that is not one JSON object is refused as every surface refuses
    /// it ([`body_object`]).
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        // Only an object: serde would read an array into the fields one by one.
        if body.trim_ascii_start().first() == Some(&b'{') {
            if let Ok(fields) = serde_json::from_slice(body) {
                return Ok(fields);
            }
        }
        // Not an object, not JSON, or a field given twice (the last one counts, as in a map):
        // read as every surface reads a body.
        serde_json::from_value(Value::Object(body_object(body)?)).map_err(|e| {
            ApiError::bad_request(format!("The request body cannot be read: {e}."), None)
        })
    }

    fn get(&self, key: &str) -> Option<&Value> {
        self.slot(key).and_then(Option::as_ref)
    }

    fn remove(&mut self, key: &str) -> Option<Value> {
        self.slot_mut(key).and_then(Option::take)
    }
}

pub(crate) fn parse_responses_request(body: &[u8]) -> Result<(Ask, Kept), ApiError> {
    let mut fields = RequestFields::parse(body)?;
    let model = model_of(fields.remove("model"))?;
    for (key, why) in REFUSED {
        if fields
            .get(key)
            .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
        {
            return Err(invalid(format!("`{key}`: {why}."), key));
        }
    }
    let mut echo = Map::new();
    for key in ECHOED {
        if let Some(v) = fields.get(key) {
            echo.insert((*key).to_string(), v.clone());
        }
    }
    let mut messages = Vec::new();
    if let Some(instructions) = fields.remove("instructions") {
        match instructions {
            Value::String(s) if !s.is_empty() => messages.push(Message::system(s)),
            Value::String(_) | Value::Null => {}
            _ => return Err(invalid("`instructions` must be a string.", "instructions")),
        }
    }
    match fields.remove("input") {
        Some(input) => input_messages(&input, &mut messages)?,
        None => return Err(invalid("The request needs an `input`.", "input")),
    }
    if !messages.iter().any(|m| m.role != Role::System) {
        return Err(invalid("`input` must hold at least one item.", "input"));
    }
    let continues = match fields.remove("previous_response_id") {
        Some(Value::String(id)) if !id.is_empty() => Some(id),
        None | Some(Value::Null) => None,
        Some(_) => {
            return Err(invalid(
                "`previous_response_id` must be a response id.",
                "previous_response_id",
            ))
        }
    };
    let store = fields.remove("store").and_then(|v| v.as_bool());
    let stream = fields
        .remove("stream")
        .and_then(|v| v.as_bool())
        .unwrap_or(false);
    let enforce = fields.remove("enforce");
    let chat_hint = fields
        .get("metadata")
        .and_then(|m| m.get("chat_id"))
        .and_then(Value::as_str)
        .and_then(non_empty)
        .or_else(|| {
            fields
                .get("user")
                .or_else(|| fields.get("safety_identifier"))
                .and_then(Value::as_str)
                .and_then(non_empty)
        });
    // Asked for, but nothing a chat-completions upstream can do: left out, and said so.
    let ignored: Vec<String> = IGNORED
        .iter()
        .filter(|key| {
            fields.get(key).is_some_and(|v| match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                _ => true,
            })
        })
        .map(|key| (*key).to_string())
        .collect();
    // What the upstream gets, in the chat-completions dialect.
    let mut params = Map::new();
    if let Some(tools) = fields.remove("tools").filter(|t| !t.is_null()) {
        params.insert("tools".into(), chat_tools(&tools)?);
    }
    if let Some(choice) = fields.remove("tool_choice").filter(|c| !c.is_null()) {
        let choice = match choice.get("name").and_then(Value::as_str) {
            Some(name) if choice.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": name}})
            }
            _ => choice,
        };
        params.insert("tool_choice".into(), choice);
    }
    if let Some(text) = fields.remove("text") {
        if let Some(format) = response_format(&text)? {
            params.insert("response_format".into(), format);
        }
    }
    if let Some(max) = fields.remove("max_output_tokens").filter(|m| !m.is_null()) {
        params.insert("max_tokens".into(), max);
    }
    if let Some(effort) = fields
        .remove("reasoning")
        .and_then(|r| r.get("effort").cloned())
        .filter(|e| !e.is_null())
    {
        params.insert("reasoning_effort".into(), effort);
    }
    for &key in FORWARDED {
        if let Some(v) = fields.remove(key).filter(|v| !v.is_null()) {
            params.insert(key.into(), v);
        }
    }
    let ask = Ask {
        model,
        messages,
        params,
        stream,
        // A Responses answer always carries its usage.
        include_usage: true,
        enforce,
        chat_hint,
        continues,
        // Stored unless the client says not to, as OpenAI does.
        store: store != Some(false),
        ignored,
    };
    Ok((ask, Kept { echo }))
}

/// The id of the answer's item with `prefix` (`msg_…`, `rs_…`), for a stream's events.
fn item_id<'a>(id: &'a TurnId, prefix: &'static str) -> ItemId<'a> {
    ItemId {
        prefix,
        id,
        number: None,
    }
}

/// A stream event carrying the whole `response` object (`response.created`,
/// `response.completed`, `response.failed`, ...), its keys in sorted order like every event's.
#[derive(Serialize)]
struct ResponseEvent<'a, R: ?Sized> {
    response: &'a R,
    sequence_number: u64,
    /// The HTTP status of a failed response.
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(rename = "type")]
    kind: &'a str,
}

impl<'a, R: ?Sized> ResponseEvent<'a, R> {
    fn new(kind: &'a str, sequence_number: u64, response: &'a R) -> Self {
        ResponseEvent {
            response,
            sequence_number,
            status: None,
            kind,
        }
    }
}

/// Writes a Responses stream: `response.created` and `response.in_progress` at once, drafts
/// as a `reasoning` item's summary text (what clients show as thinking), then the answer's
/// items with their delta and done events, and `response.completed`, or `response.failed`.
/// Every event carries its `sequence_number`; every event is typed ([`events`]).
pub(crate) struct ResponsesWriter {
    id: TurnId,
    echo: Map<String, Value>,
    sequence: Sequence,
    /// The reasoning item showing drafts: its output index and text so far.
    reasoning: Option<(usize, String)>,
    /// The reasoning item once closed, with its output index: the final `response` lists it
    /// too, so that its `output` matches the items the events announced.
    shown_reasoning: Option<(usize, String)>,
    /// The output index of the next item.
    next_index: usize,
    /// The status the answer's items end with (`incomplete` when cut at the token limit).
    item_status: &'static str,
    /// The completed response as sent, until it is taken for storing.
    completed: Option<Bytes>,
}

/// The sequence numbers of a stream's events; a field of its own, so that an event can
/// borrow the writer's other fields while it is numbered.
#[derive(Default)]
struct Sequence(u64);

impl Sequence {
    /// Starts an event: its `event:` line; its sequence number.
    fn next(&mut self, kind: &str, out: &mut Vec<u8>) -> u64 {
        let sequence = self.0;
        self.0 += 1;
        out.extend_from_slice(b"event: ");
        out.extend_from_slice(kind.as_bytes());
        out.push(b'\n');
        sequence
    }

    /// Writes an event of `kind`: its `data:` is `event` of its sequence number.
    fn write<E: Serialize>(&mut self, kind: &str, out: &mut Vec<u8>, event: impl FnOnce(u64) -> E) {
        let sequence_number = self.next(kind, out);
        stream::push_data(out, &event(sequence_number));
    }
}

impl ResponsesWriter {
    /// The writer of the answer `id`, echoing `echo`.
    fn new(id: TurnId, echo: Map<String, Value>) -> Self {
        ResponsesWriter {
            id,
            echo,
            sequence: Sequence::default(),
            reasoning: None,
            shown_reasoning: None,
            next_index: 0,
            item_status: "completed",
            completed: None,
        }
    }

    /// Closes the reasoning item of the drafts, if one is open.
    fn close_reasoning(&mut self, out: &mut Vec<u8>) {
        let Some((output_index, text)) = self.reasoning.take() else {
            return;
        };
        let item_id = item_id(&self.id, "rs_");
        let kind = "response.reasoning_summary_text.done";
        self.sequence
            .write(kind, out, |sequence_number| SummaryDone {
                item_id,
                output_index,
                sequence_number,
                summary_index: 0,
                text: &text,
                kind,
            });
        let kind = "response.reasoning_summary_part.done";
        self.sequence
            .write(kind, out, |sequence_number| SummaryPart {
                item_id,
                output_index,
                part: SummaryText::new(&text),
                sequence_number,
                summary_index: 0,
                kind,
            });
        let kind = "response.output_item.done";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: ReasoningItem::new(&self.id, Some(&text)),
            output_index,
            sequence_number,
            kind,
        });
        self.shown_reasoning = Some((output_index, text));
    }

    /// The reasoning item the stream showed, for a final `response`'s `output`.
    fn shown_reasoning(&self) -> Option<(usize, ReasoningItem<'_>)> {
        self.shown_reasoning
            .as_ref()
            .map(|(index, text)| (*index, ReasoningItem::new(&self.id, Some(text))))
    }

    fn text_item(&mut self, text: &str, out: &mut Vec<u8>) {
        let output_index = self.next_index;
        self.next_index += 1;
        let item_id = item_id(&self.id, "msg_");
        let kind = "response.output_item.added";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: MessageItem::new(&self.id, None, "in_progress"),
            output_index,
            sequence_number,
            kind,
        });
        let part = |kind, text| {
            move |sequence_number| ContentPart {
                content_index: 0,
                item_id,
                output_index,
                part: OutputText::new(text),
                sequence_number,
                kind,
            }
        };
        let kind = "response.content_part.added";
        self.sequence.write(kind, out, part(kind, ""));
        for delta in stream::pieces(text, CONTENT_PIECE) {
            let kind = "response.output_text.delta";
            self.sequence.write(kind, out, |sequence_number| TextDelta {
                content_index: 0,
                delta,
                item_id,
                logprobs: [],
                output_index,
                sequence_number,
                kind,
            });
        }
        let kind = "response.output_text.done";
        self.sequence.write(kind, out, |sequence_number| TextDone {
            content_index: 0,
            item_id,
            logprobs: [],
            output_index,
            sequence_number,
            text,
            kind,
        });
        let kind = "response.content_part.done";
        self.sequence.write(kind, out, part(kind, text));
        let kind = "response.output_item.done";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: MessageItem::new(&self.id, Some(text), self.item_status),
            output_index,
            sequence_number,
            kind,
        });
    }

    fn call_item(&mut self, number: usize, call: &ToolCall, out: &mut Vec<u8>) {
        let output_index = self.next_index;
        self.next_index += 1;
        let added = CallItem::new(&self.id, number, call, "", "in_progress");
        let item_id = added.id;
        let kind = "response.output_item.added";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: added,
            output_index,
            sequence_number,
            kind,
        });
        for delta in stream::pieces(&call.arguments, CONTENT_PIECE) {
            let kind = "response.function_call_arguments.delta";
            self.sequence
                .write(kind, out, |sequence_number| ArgumentsDelta {
                    delta,
                    item_id,
                    output_index,
                    sequence_number,
                    kind,
                });
        }
        let kind = "response.function_call_arguments.done";
        self.sequence
            .write(kind, out, |sequence_number| ArgumentsDone {
                arguments: &call.arguments,
                item_id,
                name: &call.name,
                output_index,
                sequence_number,
                kind,
            });
        let kind = "response.output_item.done";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: CallItem::new(&self.id, number, call, &call.arguments, self.item_status),
            output_index,
            sequence_number,
            kind,
        });
    }

    /// The answer's events (see [`StreamWriter::answer`]); `route`: how the request was
    /// routed; `ignored`: the request fields left out.
    fn write_answer(
        &mut self,
        route: Option<&Value>,
        ignored: &[String],
        text: &str,
        outcome: &Outcome,
        out: &mut Vec<u8>,
    ) {
        self.close_reasoning(out);
        self.item_status = item_status(outcome);
        let calls = &outcome.tool_calls;
        if !text.is_empty() || calls.is_empty() {
            self.text_item(text, out);
        }
        for (number, call) in calls.iter().enumerate() {
            self.call_item(number, call, out);
        }
        let mut response = ResponseObject::answer(&self.id, &self.echo, text, outcome)
            .routed(route)
            .warned(ignored);
        response.output.reasoning = self.shown_reasoning();
        // `response.incomplete` for an answer cut at the token limit, as OpenAI streams it.
        let event = if response.cut {
            "response.incomplete"
        } else {
            "response.completed"
        };
        // Written once: the event carries the bytes that are stored.
        let body = serde_json::value::to_raw_value(&response)
            .unwrap_or_else(|_| RawValue::NULL.to_owned());
        self.sequence.write(event, out, |sequence_number| {
            ResponseEvent::new(event, sequence_number, &*body)
        });
        self.completed = Some(Bytes::from(Box::<str>::from(body).into_boxed_bytes()));
    }
}

impl StreamWriter for ResponsesWriter {
    fn open(&mut self, out: &mut Vec<u8>) {
        for kind in ["response.created", "response.in_progress"] {
            let response = ResponseObject::new(&self.id, &self.echo, "in_progress");
            self.sequence.write(kind, out, |sequence_number| {
                ResponseEvent::new(kind, sequence_number, &response)
            });
        }
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        let item_id = item_id(&self.id, "rs_");
        let output_index = match &mut self.reasoning {
            Some((index, shown)) => {
                shown.push_str(text);
                *index
            }
            None => {
                let output_index = self.next_index;
                self.next_index += 1;
                self.reasoning = Some((output_index, text.to_string()));
                let kind = "response.output_item.added";
                self.sequence.write(kind, out, |sequence_number| ItemEvent {
                    item: ReasoningItem::new(&self.id, None),
                    output_index,
                    sequence_number,
                    kind,
                });
                let kind = "response.reasoning_summary_part.added";
                self.sequence
                    .write(kind, out, |sequence_number| SummaryPart {
                        item_id,
                        output_index,
                        part: SummaryText::new(""),
                        sequence_number,
                        summary_index: 0,
                        kind,
                    });
                output_index
            }
        };
        let kind = "response.reasoning_summary_text.delta";
        self.sequence
            .write(kind, out, |sequence_number| SummaryDelta {
                delta: text,
                item_id,
                output_index,
                sequence_number,
                summary_index: 0,
                kind,
            });
    }

    fn answer(
        &mut self,
        turn: &Turn,
        text: &str,
        outcome: &Outcome,
        _summary: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        self.write_answer(turn.route.as_ref(), &turn.ignored, text, outcome, out);
    }

    fn stored(&mut self) -> Option<Bytes> {
        self.completed.take()
    }

    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.close_reasoning(out);
        let kind = "response.failed";
        let sequence_number = self.sequence.next(kind, out);
        let mut response = ResponseObject::new(&self.id, &self.echo, "failed");
        response.enforcement = error
            .enforcement
            .as_deref()
            .filter(|e| !e.is_null())
            .map(Verdict::Refused);
        // The code SDKs map to an HTTP status (`@ai-sdk/openai` reads only `code` here), so
        // that an answer that failed its checks is not asked for again.
        response.error = Some(Failure {
            code: error.streamed_code(),
            message: &error.message,
        });
        response.output.reasoning = self.shown_reasoning();
        let event = ResponseEvent {
            status: Some(error.status.as_u16()),
            ..ResponseEvent::new(kind, sequence_number, &response)
        };
        stream::push_data(out, &event);
    }

    fn unfinished() -> Bytes {
        let error = stream::interrupted();
        let body = StreamError {
            code: error.code,
            message: &error.message,
            param: None,
            status: StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
            kind: "error",
        };
        let mut tail = b"event: error\n".to_vec();
        stream::push_data(&mut tail, &body);
        Bytes::from(tail)
    }
}
