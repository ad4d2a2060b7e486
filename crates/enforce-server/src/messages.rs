//! The Anthropic Messages wire format (`POST /v1/messages`), at the edge of the proxy:
//! [`parse_messages_request`] reads a request into the conversation and the chat-completions
//! params the runners forward; [`message_json`] renders an outcome as a Messages response,
//! [`MessagesEvents`] as Messages SSE events, [`error_body`] / [`error_response`] an error in
//! Anthropic's shape (`{"type":"error","error":{"type","message"}}`).
//!
//! The rules of translation are the chat surface's, so one contract gets one verdict: text
//! blocks of a message join with `\n` (as chat's text parts), `system` becomes the first
//! system message, `tool_use` blocks are the assistant's tool calls, `tool_result` blocks are
//! tool messages, `input_schema` is a tool's `parameters`. Fields the proxy cannot carry to an
//! upstream are listed in [`MessagesRequest::ignored`], never dropped unsaid.

use crate::error::ApiError;
use crate::pipeline::{Ask, Surface};
use crate::stream::StreamWriter;
use crate::turn::Turn;
use crate::verdict::enforcement_json;
use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use enforce_core::{Message, Outcome, Role, ToolCall, Usage};
use serde::Serialize;
use serde_json::{json, Map, Value};

/// The Messages surface of the request pipeline: `POST /v1/messages`.
pub(crate) struct Messages;

impl Surface for Messages {
    const NAME: &'static str = "messages";
    const ID_PREFIX: &'static str = "msg_";
    /// The anthropic SDKs read `request-id` (their `_request_id`).
    const REQUEST_ID_HEADERS: &'static [&'static str] = &["x-request-id", "request-id"];
    type Kept = ();
    type Writer = MessagesWriter;

    fn parse(body: &[u8]) -> Result<(Ask, ()), ApiError> {
        let request = parse_messages_request(body)?;
        let chat_hint = request.chat_id(None);
        let ask = Ask {
            model: request.model,
            messages: request.messages,
            params: request.params,
            stream: request.stream,
            // Messages streams always end with the usage (in `message_delta`).
            include_usage: true,
            enforce: request.enforce,
            chat_hint,
            // The Messages API is stateless: the client sends the whole conversation.
            continues: None,
            store: false,
            // Named in `warnings` and `X-Enforce-Warnings` by the pipeline.
            ignored: request.ignored,
        };
        Ok((ask, ()))
    }

    fn refuse(error: ApiError) -> Response {
        error_response(error)
    }

    fn answer(turn: &Turn, _: &(), text: &str, outcome: &Outcome) -> Value {
        let mut body = message_json(&turn.id.id, &turn.id.model, text, outcome);
        turn.add_route(&mut body["enforcement"]);
        if let Some(warnings) = crate::pipeline::warnings_json(turn) {
            body["warnings"] = warnings;
        }
        body
    }

    fn writer(turn: &Turn, _: ()) -> MessagesWriter {
        MessagesWriter {
            events: MessagesEvents::new(turn.id.id.clone(), turn.id.model.clone()),
        }
    }
}

/// The [`StreamWriter`] of the Messages surface: [`MessagesEvents`].
#[derive(Debug)]
pub(crate) struct MessagesWriter {
    events: MessagesEvents,
}

impl StreamWriter for MessagesWriter {
    fn open(&mut self, out: &mut Vec<u8>) {
        self.events.open(out);
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        self.events.draft(text, out);
    }

    fn answer(
        &mut self,
        turn: &Turn,
        text: &str,
        outcome: &Outcome,
        _summary: Option<&str>,
        out: &mut Vec<u8>,
    ) {
        let mut enforcement = enforcement_json(outcome);
        turn.add_route(&mut enforcement);
        let warnings = crate::pipeline::warnings_json(turn);
        self.events
            .finish(text, outcome, enforcement, warnings.as_ref(), out);
    }

    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.events.fail(error, out);
    }

    fn unfinished() -> Bytes {
        Bytes::from(unfinished_tail())
    }
}

/// Body fields read here; every other field is listed as ignored.
const READ: &[&str] = &[
    "model",
    "messages",
    "system",
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
    "stream",
    "enforce",
];

/// A parsed `POST /v1/messages` body.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    /// The public model id.
    pub model: String,
    /// The conversation: `system` first (as a system message), then the turns; tool results
    /// as tool messages.
    pub messages: Vec<Message>,
    /// `stream: true`.
    pub stream: bool,
    /// The proxy's own `enforce` field, as sent.
    pub enforce: Option<Value>,
    /// What the runners forward, in the chat-completions dialect they take: `max_tokens`,
    /// `stop` (from `stop_sequences`), `temperature`, `top_p`, `top_k`, `tools` (as functions),
    /// `tool_choice`, `parallel_tool_calls`, `user` (from `metadata.user_id`).
    pub params: Map<String, Value>,
    /// Fields (or parts) the proxy cannot carry to the upstream, by name (`thinking`,
    /// `messages.content.image`, `tools.web_search_20250305`, ...): reported as a warning.
    pub ignored: Vec<String>,
}

impl MessagesRequest {
    /// The chat this request belongs to: the `X-OpenWebUI-Chat-Id` header, else
    /// `metadata.user_id` (the one metadata field the Messages API has).
    pub fn chat_id(&self, header: Option<&str>) -> Option<String> {
        header
            .or_else(|| self.params.get("user").and_then(Value::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    fn ignore(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.ignored.contains(&what) {
            self.ignored.push(what);
        }
    }
}

fn bad(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// Parses a request body. Errors are 400s naming the field; [`error_response`] renders them.
pub fn parse_messages_request(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    let mut fields = crate::pipeline::body_object(body)?;
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(bad(
                "The request needs a `model` (one of the ids listed by /v1/models).",
                "model",
            ))
        }
    };
    let mut request = MessagesRequest {
        model,
        messages: Vec::new(),
        stream: fields
            .get("stream")
            .and_then(Value::as_bool)
            .unwrap_or(false),
        enforce: fields.remove("enforce"),
        params: Map::new(),
        ignored: Vec::new(),
    };
    if let Some(system) = fields.get("system") {
        let text = match system {
            Value::Null => String::new(),
            Value::String(s) => s.clone(),
            Value::Array(blocks) => text_of_blocks(blocks, "system", &mut request)?,
            _ => {
                return Err(bad(
                    "`system` must be a string or an array of text blocks.",
                    "system",
                ))
            }
        };
        if !text.is_empty() {
            request.messages.push(Message::system(text));
        }
    }
    let Some(Value::Array(turns)) = fields.get("messages") else {
        return Err(bad(
            "The request needs `messages`, an array of user and assistant turns.",
            "messages",
        ));
    };
    if turns.is_empty() {
        return Err(bad(
            "`messages` must hold at least one message.",
            "messages",
        ));
    }
    for turn in turns {
        read_turn(turn, &mut request)?;
    }
    read_params(&fields, &mut request)?;
    for key in fields.keys() {
        if !READ.contains(&key.as_str()) {
            request.ignore(key.clone());
        }
    }
    Ok(request)
}

/// One turn of `messages`: its text, tool calls (assistant) and tool results (user).
fn read_turn(turn: &Value, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let role = match turn.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        other => {
            return Err(bad(
                format!(
                    "A message's `role` must be `user` or `assistant`, got {}.",
                    other.map_or_else(|| "none".to_string(), |r| format!("`{r}`"))
                ),
                "messages",
            ))
        }
    };
    let blocks = match turn.get("content") {
        Some(Value::String(s)) => {
            request.messages.push(Message::new(role, s.clone()));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(bad(
                "A message's `content` must be a string or an array of content blocks.",
                "messages",
            ))
        }
    };
    let mut texts: Vec<&str> = Vec::new();
    // The content as chat parts, kept when it holds an image (as chat keeps `image_url`).
    let mut parts: Vec<Value> = Vec::new();
    let mut has_image = false;
    let mut calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                texts.push(text);
                parts.push(json!({"type": "text", "text": text}));
            }
            "image" if role == Role::User => match image_part(block) {
                Some(part) => {
                    has_image = true;
                    parts.push(part);
                }
                None => request.ignore("messages.content.image"),
            },
            "tool_use" if role == Role::Assistant => calls.push(tool_call(block)?),
            "tool_result" if role == Role::User => {
                let id = block
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .ok_or_else(|| {
                        bad(
                            "A `tool_result` block needs the `tool_use_id` of the call it answers.",
                            "messages",
                        )
                    })?;
                let mut content = match block.get("content") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(Value::Array(parts)) => text_of_blocks(parts, "messages", request)?,
                    Some(_) => {
                        return Err(bad(
                            "A `tool_result`'s `content` must be a string or text blocks.",
                            "messages",
                        ))
                    }
                };
                if block.get("is_error").and_then(Value::as_bool) == Some(true) {
                    content = format!("[tool error]\n{content}");
                }
                request.messages.push(Message::tool(id, content));
            }
            // The model's own reasoning sent back: not answer text (and enforce's drafts carry
            // no signature an upstream would take).
            "thinking" | "redacted_thinking" if role == Role::Assistant => {}
            "document" | "search_result" => {
                request.ignore(format!(
                    "messages.content.{}",
                    block["type"].as_str().unwrap_or("")
                ));
            }
            other => {
                return Err(bad(
                    format!(
                        "A `{}` message cannot hold a `{other}` content block here.",
                        if role == Role::User {
                            "user"
                        } else {
                            "assistant"
                        }
                    ),
                    "messages",
                ))
            }
        }
    }
    // Tool results (pushed above) come before the turn's text, as the API orders them.
    let text = texts.join("\n");
    if !text.is_empty() || !calls.is_empty() || has_image {
        let mut message = match role {
            Role::Assistant => Message::assistant_calling(text, calls),
            _ => Message::user(text),
        };
        if has_image {
            message.parts = parts;
        }
        request.messages.push(message);
    }
    Ok(())
}

/// An `image` block as a chat `image_url` part: a base64 source as a `data:` URL, a `url`
/// source as it is; `None` for a source it cannot say (a file id).
fn image_part(block: &Value) -> Option<Value> {
    let source = block.get("source")?;
    let url = match source.get("type").and_then(Value::as_str)? {
        "base64" => format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str)?,
            source.get("data").and_then(Value::as_str)?
        ),
        "url" => source.get("url").and_then(Value::as_str)?.to_string(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// The text of text blocks (`system`, a tool result's content), joined with `\n`; other
/// blocks are listed as ignored.
fn text_of_blocks(
    blocks: &[Value],
    field: &'static str,
    request: &mut MessagesRequest,
) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some(other) => request.ignore(format!("{field}.content.{other}")),
            None => return Err(bad("A content block needs a `type`.", field)),
        }
    }
    Ok(texts.join("\n"))
}

fn tool_call(block: &Value) -> Result<ToolCall, ApiError> {
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("A `tool_use` block needs a `name`.", "messages"))?;
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad("A `tool_use` block needs an `id`.", "messages"))?;
    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
    Ok(ToolCall::new(id, name, input.to_string()))
}

/// The sampling fields, tools and metadata, in the chat-completions dialect.
fn read_params(fields: &Map<String, Value>, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let params = &mut request.params;
    if let Some(max) = fields.get("max_tokens") {
        match max.as_u64() {
            Some(n) if n > 0 => {
                params.insert("max_tokens".into(), Value::from(n));
            }
            _ => {
                return Err(bad(
                    "`max_tokens` must be a positive integer.",
                    "max_tokens",
                ))
            }
        }
    }
    for key in ["temperature", "top_p", "top_k"] {
        if let Some(v) = fields.get(key).filter(|v| !v.is_null()) {
            params.insert(key.into(), v.clone());
        }
    }
    match fields.get("stop_sequences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(stops)) if stops.iter().all(Value::is_string) => {
            if !stops.is_empty() {
                params.insert("stop".into(), Value::Array(stops.clone()));
            }
        }
        Some(_) => {
            return Err(bad(
                "`stop_sequences` must be an array of strings.",
                "stop_sequences",
            ))
        }
    }
    if let Some(user) = fields
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        params.insert("user".into(), Value::String(user.to_string()));
    }
    let mut ignored = Vec::new();
    match fields.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => {
            let mut functions = Vec::with_capacity(tools.len());
            for tool in tools {
                match tool.get("type").and_then(Value::as_str) {
                    None | Some("custom") => functions.push(function_of(tool)?),
                    // Server tools (web search, code execution, ...) run at Anthropic only.
                    Some(other) => ignored.push(format!("tools.{other}")),
                }
            }
            if !functions.is_empty() {
                params.insert("tools".into(), Value::Array(functions));
            }
        }
        Some(_) => return Err(bad("`tools` must be an array of tools.", "tools")),
    }
    if let Some(choice) = fields.get("tool_choice").filter(|c| !c.is_null()) {
        let kind = choice.get("type").and_then(Value::as_str);
        let openai = match kind {
            Some("auto") => json!("auto"),
            Some("any") => json!("required"),
            Some("none") => json!("none"),
            Some("tool") => {
                let name = choice.get("name").and_then(Value::as_str).ok_or_else(|| {
                    bad(
                        "`tool_choice` of type `tool` needs a `name`.",
                        "tool_choice",
                    )
                })?;
                json!({"type": "function", "function": {"name": name}})
            }
            _ => {
                return Err(bad(
                    "`tool_choice` must be an object of type `auto`, `any`, `tool` or `none`.",
                    "tool_choice",
                ))
            }
        };
        params.insert("tool_choice".into(), openai);
        if choice
            .get("disable_parallel_tool_use")
            .and_then(Value::as_bool)
            == Some(true)
        {
            params.insert("parallel_tool_calls".into(), Value::Bool(false));
        }
    }
    for what in ignored {
        request.ignore(what);
    }
    Ok(())
}

/// An Anthropic tool (`{name, description, input_schema}`) as a chat-completions function.
fn function_of(tool: &Value) -> Result<Value, ApiError> {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("A tool needs a `name`.", "tools"))?;
    let mut function = Map::new();
    function.insert("name".into(), Value::String(name.to_string()));
    if let Some(d) = tool.get("description").and_then(Value::as_str) {
        function.insert("description".into(), Value::String(d.to_string()));
    }
    let schema = tool
        .get("input_schema")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or_else(|| {
            bad(
                format!("The tool `{name}` needs an `input_schema` object."),
                "tools",
            )
        })?;
    function.insert("parameters".into(), schema);
    Ok(json!({"type": "function", "function": function}))
}

/// `tool_use` when the answer calls tools, `max_tokens` when it was cut at the token limit,
/// else `end_turn` (as chat's `finish_reason`).
pub fn stop_reason(outcome: &Outcome) -> &'static str {
    if !outcome.tool_calls.is_empty() {
        "tool_use"
    } else if crate::verdict::cut_at_token_limit(outcome) {
        "max_tokens"
    } else {
        "end_turn"
    }
}

/// A call's `input`: its arguments as the JSON object they are (the proxy's tool checks saw to
/// that for declared tools); anything else becomes `{}`.
fn tool_input(call: &ToolCall) -> Value {
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(input @ Value::Object(_)) => input,
        _ => json!({}),
    }
}

fn usage_json(usage: Option<Usage>) -> Value {
    let u = usage.unwrap_or_default();
    json!({"input_tokens": u.input_tokens, "output_tokens": u.output_tokens})
}

/// The Messages response for a delivered answer: a `text` block (when there is text), a
/// `tool_use` block per call, `stop_reason`, `usage` summed over the attempts, and enforce's
/// outcome in `enforcement`.
pub fn message_json(id: &str, model: &str, text: &str, outcome: &Outcome) -> Value {
    let mut content = Vec::with_capacity(1 + outcome.tool_calls.len());
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    for call in &outcome.tool_calls {
        content.push(
            json!({"type": "tool_use", "id": call.id, "name": call.name, "input": tool_input(call)}),
        );
    }
    json!({
        "id": id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": stop_reason(outcome),
        "stop_sequence": null,
        "usage": usage_json(outcome.usage),
        "enforcement": enforcement_json(outcome),
    })
}

/// The Anthropic error `type` for a status: Anthropic's table, and `invalid_request_error` for
/// other 4xx (as Anthropic does); 503 (a check or model unavailable for now) is
/// `overloaded_error`, which clients retry.
pub fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        400..=499 => "invalid_request_error",
        _ => "api_error",
    }
}

/// Anthropic's error body, `type` and `error` first so a printed error starts with the human
/// message; enforce's stable `code` inside `error`, the `enforcement` object after it.
#[derive(Serialize)]
struct ErrorBody<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    error: ErrorDetail<'a>,
    #[serde(skip_serializing_if = "Option::is_none")]
    enforcement: Option<&'a Value>,
}

#[derive(Serialize)]
struct ErrorDetail<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    message: &'a str,
    code: &'static str,
}

fn error_body_of(error: &ApiError) -> ErrorBody<'_> {
    ErrorBody {
        kind: "error",
        error: ErrorDetail {
            kind: error_type(error.status),
            message: &error.message,
            code: error.code,
        },
        enforcement: error.enforcement.as_deref(),
    }
}

/// An error in Anthropic's shape: `{"type":"error","error":{"type","message","code"},
/// "enforcement"?}` as JSON text.
pub fn error_body(error: &ApiError) -> String {
    serde_json::to_string(&error_body_of(error)).unwrap_or_else(|_| {
        r#"{"type":"error","error":{"type":"api_error","message":"error"}}"#.to_string()
    })
}

/// An error response in Anthropic's shape, with the headers every surface sends with an error
/// (`Retry-After`, `X-Enforce-Status`, `X-Enforce-Validation-Status`).
pub fn error_response(error: ApiError) -> Response {
    let mut response = (
        error.status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        error_body(&error),
    )
        .into_response();
    error.headers(response.headers_mut());
    response
}

/// Writes the SSE events of one Messages stream. Nothing of the answer (text, tool calls) goes
/// out before the verdict: [`finish`](Self::finish) writes it whole. Only `stream_mode: draft`
/// shows attempts as they are written, in a `thinking` block, the Messages form of chat's
/// `reasoning_content`.
#[derive(Debug)]
pub struct MessagesEvents {
    id: String,
    model: String,
    /// `message_start` went out.
    opened: bool,
    /// The index of the open `thinking` block, if a draft is showing.
    thinking: Option<usize>,
    /// The index the next block gets.
    next_index: usize,
}

fn push_event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    out.extend_from_slice(data.to_string().as_bytes());
    out.extend_from_slice(b"\n\n");
}

/// Text is sent in pieces of at most this many bytes (cut on character boundaries).
const PIECE: usize = 2048;

impl MessagesEvents {
    /// The writer of the stream of message `id` from `model`.
    pub fn new(id: impl Into<String>, model: impl Into<String>) -> Self {
        MessagesEvents {
            id: id.into(),
            model: model.into(),
            opened: false,
            thinking: None,
            next_index: 0,
        }
    }

    /// `message_start` (once): the message with empty `content`. Clients show a message from
    /// here, so an error that follows has one to belong to. (Keep-alives are the driver's
    /// `: keepalive` comments, which Anthropic's SDKs skip like `ping` events.)
    pub fn open(&mut self, out: &mut Vec<u8>) {
        if self.opened {
            return;
        }
        self.opened = true;
        push_event(
            out,
            "message_start",
            &json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": 0, "output_tokens": 0}}}),
        );
    }

    /// More draft text (`stream_mode: draft`) in the `thinking` block, opened on first use.
    pub fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        self.open(out);
        let index = match self.thinking {
            Some(index) => index,
            None => {
                let index = self.next_index;
                self.next_index += 1;
                self.thinking = Some(index);
                push_event(
                    out,
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": index,
                            "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
                );
                index
            }
        };
        for piece in crate::stream::pieces(text, PIECE) {
            push_event(
                out,
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": index,
                        "delta": {"type": "thinking_delta", "thinking": piece}}),
            );
        }
    }

    fn close_thinking(&mut self, out: &mut Vec<u8>) {
        if let Some(index) = self.thinking.take() {
            push_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
    }

    /// The checked answer: its text block, a `tool_use` block per call (the arguments as one
    /// `input_json_delta` each, in pieces), `message_delta` with `stop_reason`, usage and
    /// `enforcement` (with `route` when one was taken), `message_stop`.
    pub fn finish(
        &mut self,
        text: &str,
        outcome: &Outcome,
        enforcement: Value,
        warnings: Option<&Value>,
        out: &mut Vec<u8>,
    ) {
        self.open(out);
        self.close_thinking(out);
        if !text.is_empty() {
            let index = self.next_block();
            push_event(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index,
                        "content_block": {"type": "text", "text": ""}}),
            );
            for piece in crate::stream::pieces(text, PIECE) {
                push_event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "text_delta", "text": piece}}),
                );
            }
            push_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
        for call in &outcome.tool_calls {
            let index = self.next_block();
            push_event(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index, "content_block":
                        {"type": "tool_use", "id": call.id, "name": call.name, "input": {}}}),
            );
            // The input as the object it is, re-serialized: `input_json_delta` fragments must
            // join to the JSON the client parses.
            let input = tool_input(call).to_string();
            for piece in crate::stream::pieces(&input, PIECE) {
                push_event(
                    out,
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": index,
                            "delta": {"type": "input_json_delta", "partial_json": piece}}),
                );
            }
            push_event(
                out,
                "content_block_stop",
                &json!({"type": "content_block_stop", "index": index}),
            );
        }
        let usage = outcome.usage.unwrap_or_default();
        let mut delta = json!({"type": "message_delta",
                "delta": {"stop_reason": stop_reason(outcome), "stop_sequence": null},
                "usage": {"input_tokens": usage.input_tokens, "output_tokens": usage.output_tokens},
                "enforcement": enforcement});
        if let Some(warnings) = warnings {
            delta["warnings"] = warnings.clone();
        }
        push_event(out, "message_delta", &delta);
        push_event(out, "message_stop", &json!({"type": "message_stop"}));
    }

    /// The stream's end for an answer not delivered: an `error` event in Anthropic's shape
    /// (with `enforcement`). A draft's thinking block is closed first.
    pub fn fail(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.close_thinking(out);
        out.extend_from_slice(b"event: error\ndata: ");
        out.extend_from_slice(error_body(error).as_bytes());
        out.extend_from_slice(b"\n\n");
    }

    fn next_block(&mut self) -> usize {
        let index = self.next_index;
        self.next_index += 1;
        index
    }
}

/// What ends a Messages stream whose driver vanished without finishing it: an `error` event.
pub fn unfinished_tail() -> Vec<u8> {
    let error = crate::stream::interrupted();
    let mut out = Vec::new();
    MessagesEvents::new("", "").fail(&error, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::{Issue, Status, StopReason};

    fn parse(body: Value) -> Result<MessagesRequest, ApiError> {
        parse_messages_request(body.to_string().as_bytes())
    }

    #[test]
    fn a_full_request_becomes_the_conversation_and_chat_params() {
        let request = parse(json!({
            "model": "m", "max_tokens": 1024, "stream": true,
            "system": [{"type": "text", "text": "Be brief."},
                       {"type": "text", "text": "Use tools.", "cache_control": {"type": "ephemeral"}}],
            "messages": [
                {"role": "user", "content": "Weather in Oslo?"},
                {"role": "assistant", "content": [
                    {"type": "thinking", "thinking": "hmm", "signature": "s"},
                    {"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Oslo"}}]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1",
                     "content": [{"type": "text", "text": "12 C"}]},
                    {"type": "text", "text": "And tomorrow?"}]}
            ],
            "tools": [{"name": "get_weather", "description": "Weather",
                       "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}},
                      {"type": "web_search_20250305", "name": "web_search"}],
            "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": true},
            "stop_sequences": ["END"], "temperature": 0.2, "top_k": 5,
            "metadata": {"user_id": "u-1"},
            "thinking": {"type": "enabled", "budget_tokens": 1024},
            "enforce": {"context": {"a": 1}}
        }))
        .unwrap();
        assert!(request.stream);
        assert_eq!(request.enforce, Some(json!({"context": {"a": 1}})));
        assert_eq!(
            request.messages,
            [
                Message::system("Be brief.\nUse tools."),
                Message::user("Weather in Oslo?"),
                Message::assistant_calling(
                    "Looking.",
                    vec![ToolCall::new(
                        "toolu_1",
                        "get_weather",
                        r#"{"city":"Oslo"}"#
                    )]
                ),
                Message::tool("toolu_1", "12 C"),
                Message::user("And tomorrow?"),
            ]
        );
        assert_eq!(
            Value::Object(request.params.clone()),
            json!({
                "max_tokens": 1024, "temperature": 0.2, "top_k": 5, "stop": ["END"],
                "user": "u-1",
                "tools": [{"type": "function", "function": {"name": "get_weather",
                    "description": "Weather", "parameters":
                    {"type": "object", "properties": {"city": {"type": "string"}}}}}],
                "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
                "parallel_tool_calls": false
            })
        );
        assert_eq!(request.ignored, ["tools.web_search_20250305", "thinking"]);
        assert_eq!(request.chat_id(None).as_deref(), Some("u-1"));
        assert_eq!(request.chat_id(Some("c-9")).as_deref(), Some("c-9"));
    }

    #[test]
    fn text_blocks_join_as_chat_text_parts_do_and_images_become_chat_parts() {
        let request = parse(json!({"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "one"},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA=="}},
            {"type": "text", "text": "two"},
            {"type": "image", "source": {"type": "file", "file_id": "f"}},
            {"type": "document", "source": {"type": "text", "data": "d"}}]}]}))
        .unwrap();
        let mut expected = Message::user("one\ntwo");
        expected.parts = vec![
            json!({"type": "text", "text": "one"}),
            json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}),
            json!({"type": "text", "text": "two"}),
        ];
        assert_eq!(request.messages, [expected]);
        assert_eq!(
            request.ignored,
            ["messages.content.image", "messages.content.document"]
        );
        assert!(!request.stream);
        assert!(request.params.is_empty());
        let request = parse(json!({"model": "m", "messages": [
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                          "content": "boom", "is_error": true}]}]}))
        .unwrap();
        assert_eq!(request.messages, [Message::tool("t", "[tool error]\nboom")]);
    }

    #[test]
    fn malformed_requests_are_400s_naming_the_field() {
        for (body, param) in [
            (
                json!({"messages": [{"role": "user", "content": "x"}]}),
                "model",
            ),
            (json!({"model": "m"}), "messages"),
            (json!({"model": "m", "messages": []}), "messages"),
            (
                json!({"model": "m", "messages": [{"role": "system", "content": "x"}]}),
                "messages",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": 5}]}),
                "messages",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "tool_use", "id": "t", "name": "f", "input": {}}]}]}),
                "messages",
            ),
            (
                json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "tool_result", "content": "x"}]}]}),
                "messages",
            ),
            (
                json!({"model": "m", "messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "name": "f", "input": {}}]}]}),
                "messages",
            ),
            (
                json!({"model": "m", "max_tokens": 0, "messages": [{"role": "user", "content": "x"}]}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "system": 3, "messages": [{"role": "user", "content": "x"}]}),
                "system",
            ),
            (
                json!({"model": "m", "stop_sequences": "END", "messages": [{"role": "user", "content": "x"}]}),
                "stop_sequences",
            ),
            (
                json!({"model": "m", "tools": [{"name": "f"}], "messages": [{"role": "user", "content": "x"}]}),
                "tools",
            ),
            (
                json!({"model": "m", "tool_choice": {"type": "maybe"}, "messages": [{"role": "user", "content": "x"}]}),
                "tool_choice",
            ),
        ] {
            let error = parse(body.clone()).expect_err(&body.to_string());
            assert_eq!(error.status, StatusCode::BAD_REQUEST, "{body}");
            assert_eq!(error.param, Some(param), "{body}: {}", error.message);
        }
        assert!(parse_messages_request(b"{not json").is_err());
        assert!(parse_messages_request(b"[1]").is_err());
    }

    fn outcome(status: Status, calls: Vec<ToolCall>) -> Outcome {
        let mut outcome = Outcome {
            status,
            stop_reason: StopReason::Clean,
            response: Some("Sunny.".into()),
            tool_calls: calls,
            issues: Vec::new(),
            warnings: Vec::new(),
            attempts: Vec::new(),
            input: None,
            fallback_used: false,
            session_id: None,
            usage: Some(Usage {
                input_tokens: 20,
                output_tokens: 7,
            }),
            cost_usd: None,
            total_us: 0,
            runner_us: 0,
        };
        if status != Status::Passed {
            outcome.issues = vec![Issue::error("json", "INVALID_JSON", "Not JSON.")];
        }
        outcome
    }

    #[test]
    fn an_answer_renders_as_a_message_with_enforcement() {
        let calls = vec![ToolCall::new(
            "toolu_1",
            "get_weather",
            r#"{"city":"Oslo"}"#,
        )];
        let message = message_json("msg_1", "m", "Sunny.", &outcome(Status::Passed, calls));
        assert_eq!(message["type"], "message");
        assert_eq!(message["role"], "assistant");
        assert_eq!(
            message["content"],
            json!([{"type": "text", "text": "Sunny."},
                   {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                    "input": {"city": "Oslo"}}])
        );
        assert_eq!(message["stop_reason"], "tool_use");
        assert_eq!(
            message["usage"],
            json!({"input_tokens": 20, "output_tokens": 7})
        );
        assert_eq!(message["enforcement"]["status"], "passed");
        let message = message_json("msg_2", "m", "", &outcome(Status::Repaired, vec![]));
        assert_eq!(message["content"], json!([]));
        assert_eq!(message["stop_reason"], "end_turn");
        assert_eq!(message["enforcement"]["status"], "repaired");
    }

    /// The events of a stream, as (event name, data) pairs, checked to be well formed: every
    /// `event:` line's name equals its data's `type`.
    fn parse_events(bytes: &[u8]) -> Vec<(String, Value)> {
        let text = std::str::from_utf8(bytes).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|event| {
                let mut lines = event.lines();
                let name = lines.next().unwrap().strip_prefix("event: ").unwrap();
                let data: Value =
                    serde_json::from_str(lines.next().unwrap().strip_prefix("data: ").unwrap())
                        .unwrap();
                assert_eq!(data["type"], name, "{event}");
                assert!(lines.next().is_none());
                (name.to_string(), data)
            })
            .collect()
    }

    #[test]
    fn a_stream_holds_everything_until_the_verdict_then_writes_it_whole() {
        let calls = vec![ToolCall::new(
            "toolu_1",
            "get_weather",
            r#"{ "city" : "Oslo" }"#,
        )];
        let outcome = outcome(Status::Passed, calls);
        let mut writer = MessagesEvents::new("msg_1", "m");
        let mut out = Vec::new();
        writer.open(&mut out);
        writer.finish(
            "Sunny.",
            &outcome,
            enforcement_json(&outcome),
            None,
            &mut out,
        );
        let names: Vec<String> = parse_events(&out).into_iter().map(|(n, _)| n).collect();
        assert_eq!(
            names,
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop"
            ]
        );
        let events = parse_events(&out);
        assert_eq!(events[0].1["message"]["id"], "msg_1");
        assert_eq!(
            events[2].1["delta"],
            json!({"type": "text_delta", "text": "Sunny."})
        );
        assert_eq!(events[4].1["index"], 1);
        assert_eq!(events[4].1["content_block"]["name"], "get_weather");
        let partial = events[5].1["delta"]["partial_json"].as_str().unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(partial).unwrap(),
            json!({"city": "Oslo"})
        );
        assert_eq!(events[7].1["delta"]["stop_reason"], "tool_use");
        assert_eq!(events[7].1["usage"]["output_tokens"], 7);
        assert_eq!(events[7].1["enforcement"]["status"], "passed");
    }

    #[test]
    fn drafts_are_a_thinking_block_closed_before_the_answer_or_the_error() {
        let outcome = outcome(Status::Passed, vec![]);
        let mut writer = MessagesEvents::new("msg_1", "m");
        let mut out = Vec::new();
        writer.draft("first try", &mut out);
        writer.draft(" more", &mut out);
        writer.finish(
            "Sunny.",
            &outcome,
            enforcement_json(&outcome),
            None,
            &mut out,
        );
        let events = parse_events(&out);
        assert_eq!(events[0].0, "message_start");
        assert_eq!(events[1].1["content_block"]["type"], "thinking");
        assert_eq!(events[2].1["delta"]["thinking"], "first try");
        assert_eq!(events[3].1["delta"]["thinking"], " more");
        assert_eq!(
            events[4].1,
            json!({"type": "content_block_stop", "index": 0})
        );
        assert_eq!(events[5].1["index"], 1);
        assert_eq!(events[5].1["content_block"]["type"], "text");

        let mut writer = MessagesEvents::new("msg_2", "m");
        let mut out = Vec::new();
        writer.draft("try", &mut out);
        let mut error = ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "enforcement_error",
            "enforcement_unresolved",
            "The answer still broke the format.",
        );
        error.enforcement = Some(Box::new(json!({"status": "unresolved"})));
        writer.fail(&error, &mut out);
        let events = parse_events(&out);
        let (last_name, last) = events.last().unwrap();
        assert_eq!(events[events.len() - 2].0, "content_block_stop");
        assert_eq!(last_name, "error");
        assert_eq!(
            last,
            &json!({"type": "error", "error": {"type": "invalid_request_error",
                    "message": "The answer still broke the format.",
                    "code": "enforcement_unresolved"},
                    "enforcement": {"status": "unresolved"}})
        );
    }

    #[test]
    fn errors_take_anthropics_shape_with_the_message_first() {
        let mut error = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "too_many_requests",
            "Too many requests at once.",
        );
        error.retry_after = Some(2);
        error.enforcement = Some(Box::new(json!({"status": "aborted"})));
        let body = error_body(&error);
        assert!(
            body.starts_with(r#"{"type":"error","error":{"type":"rate_limit_error","message":"Too many requests at once.""#),
            "{body}"
        );
        let response = error_response(error);
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()["retry-after"], "2");
        for (status, kind) in [
            (400, "invalid_request_error"),
            (401, "authentication_error"),
            (403, "permission_error"),
            (404, "not_found_error"),
            (413, "request_too_large"),
            (422, "invalid_request_error"),
            (502, "api_error"),
            (503, "overloaded_error"),
            (504, "timeout_error"),
        ] {
            assert_eq!(error_type(StatusCode::from_u16(status).unwrap()), kind);
        }
        let tail = unfinished_tail();
        let events = parse_events(&tail);
        assert_eq!(events.len(), 1);
        assert_eq!(events[0].1["error"]["code"], "stream_interrupted");
    }
}
