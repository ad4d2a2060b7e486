//! The Anthropic Messages wire format (`POST /v1/messages`), at the edge of the proxy:
//! [`parse_messages_request`] reads a request into the conversation and the chat-completions
//! params the runners forward; [`MessageBody`] renders an outcome as a Messages response,
//! [`MessagesEvents`] as Messages SSE events, [`error_body`] / [`error_response`] an error in
//! Anthropic's shape (`{"type":"error","error":{"type","message"}}`).
//!
//! The rules of translation are the chat surface's, so one contract gets one verdict: text
//! blocks of a message join with `\n` (as chat's text parts), `system` becomes the first
//! system message, `tool_use` blocks are the assistant's tool calls, `tool_result` blocks are
//! tool messages, `input_schema` is a tool's `parameters`. Fields the proxy cannot carry to an
//! upstream are listed in [`MessagesRequest::ignored`](request::MessagesRequest::ignored),
//! never dropped unsaid.

use crate::error::ApiError;
use crate::headers as names;
use crate::pipeline::{Ask, Surface};
use crate::stream::StreamWriter;
use crate::turn::Turn;
use crate::verdict::Enforcement;
use axum::body::Bytes;
use axum::http::{HeaderName, StatusCode};
use axum::response::{IntoResponse, Response};
use enforce_core::{runner::ToolCall, Outcome, Usage};
use serde::Serialize;
use serde_json::{json, Value};

mod events;
mod request;
#[cfg(test)]
mod tests;
pub use events::{unfinished_tail, MessagesEvents};
pub use request::parse_messages_request;

/// The Messages surface of the request pipeline: `POST /v1/messages`.
pub(crate) struct Messages;

impl Surface for Messages {
    const NAME: &'static str = "messages";
    const ID_PREFIX: &'static str = "msg_";
    const ROUTE: &'static str = "/v1/messages";
    /// The anthropic SDKs read `request-id` (their `_request_id`).
    fn request_id_headers() -> &'static [HeaderName] {
        static HEADERS: [HeaderName; 2] = [names::REQUEST_ID, names::ANTHROPIC_REQUEST_ID];
        &HEADERS
    }
    type Kept = ();
    type Writer = MessagesWriter;

    fn parse(body: Bytes) -> Result<(Ask, ()), ApiError> {
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

    fn answer_bytes(turn: &Turn, _: &(), text: &str, outcome: &Outcome) -> Vec<u8> {
        let message = MessageBody::of_turn(turn, text, outcome);
        crate::pipeline::answer_body(text, &message)
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
        let enforcement = Enforcement::of(outcome).routed(turn.route.as_ref());
        let warnings = crate::pipeline::Warnings::of(&turn.ignored);
        self.events
            .finish(text, outcome, &enforcement, warnings.as_ref(), out);
    }

    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.events.fail(error, out);
    }

    fn unfinished() -> Bytes {
        Bytes::from(unfinished_tail())
    }
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

/// Messages `usage`.
#[derive(Serialize, Default)]
struct MessagesUsage {
    input_tokens: u64,
    output_tokens: u64,
}

impl MessagesUsage {
    fn of(usage: Option<Usage>) -> Self {
        let u = usage.unwrap_or_default();
        MessagesUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
        }
    }
}

/// The Messages response for a delivered answer: a `text` block (when there is text), a
/// `tool_use` block per call, `stop_reason`, `usage` summed over the attempts, and enforce's
/// outcome in `enforcement`.
#[derive(Serialize)]
struct MessageBody<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<Block<'a>>,
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
    usage: MessagesUsage,
    enforcement: Enforcement<'a>,
    /// What the request could not carry upstream, when anything (see the pipeline).
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<crate::pipeline::Warnings<'a>>,
}

/// A content block of an answer.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block<'a> {
    Text {
        text: &'a str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Value,
    },
}

impl<'a> MessageBody<'a> {
    fn of(id: &'a str, model: &'a str, text: &'a str, outcome: &'a Outcome) -> Self {
        let mut content = Vec::with_capacity(1 + outcome.tool_calls.len());
        if !text.is_empty() {
            content.push(Block::Text { text });
        }
        for call in &outcome.tool_calls {
            content.push(Block::ToolUse {
                id: &call.id,
                name: &call.name,
                input: tool_input(call),
            });
        }
        MessageBody {
            id,
            kind: "message",
            role: "assistant",
            model,
            content,
            stop_reason: stop_reason(outcome),
            stop_sequence: None,
            usage: MessagesUsage::of(outcome.usage),
            enforcement: Enforcement::of(outcome),
            warnings: None,
        }
    }

    /// The answer to `turn`, with how it was routed and what its request could not carry.
    fn of_turn(turn: &'a Turn, text: &'a str, outcome: &'a Outcome) -> Self {
        let body = MessageBody::of(&turn.id.id, &turn.id.model, text, outcome);
        MessageBody {
            enforcement: body.enforcement.routed(turn.route.as_ref()),
            warnings: crate::pipeline::Warnings::of(&turn.ignored),
            ..body
        }
    }
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
