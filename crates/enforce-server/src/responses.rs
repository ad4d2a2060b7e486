//! The OpenAI Responses surface (`POST /v1/responses`, `GET /v1/responses/{id}`): the request
//! translated into the shared [`Ask`] (`request.rs`), the `response` object (`object.rs`), its
//! typed stream events with `sequence_number` (`events.rs`, written by [`ResponsesWriter`]),
//! and the OpenAI error envelope.

use crate::error::ApiError;
use crate::pipeline::{Ask, Surface};
use crate::stream::{self, StreamWriter, CONTENT_PIECE};
use crate::turn::{Turn, TurnId};
use crate::verdict::cut_at_token_limit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::{runner::ToolCall, Outcome};
use events::{
    ArgumentsDelta, ArgumentsDone, ContentPart, Event, ItemEvent, StreamError, SummaryDelta,
    SummaryDone, SummaryPart, TextDelta, TextDone, WithResponse,
};
use object::{
    CallItem, Failure, ItemId, MessageItem, OutputText, ReasoningItem, ResponseObject, SummaryText,
    Text, Verdict,
};
use serde::Serialize;
use serde_json::{Map, Value};

mod events;
mod object;
mod request;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

/// The Responses surface.
pub(crate) struct Responses;

/// What the Responses surface keeps of its request for rendering: the echoed fields.
pub(crate) struct Kept {
    pub(super) echo: Map<String, Value>,
}

impl Surface for Responses {
    const NAME: &'static str = "responses";
    const ID_PREFIX: &'static str = "resp_";
    const ROUTE: &'static str = "/v1/responses";
    type Kept = Kept;
    type Writer = ResponsesWriter;

    fn parse(body: &[u8]) -> Result<(Ask, Kept), ApiError> {
        request::parse_responses_request(body)
    }

    fn refuse(error: ApiError) -> Response {
        error.into_response()
    }

    fn answer_bytes(turn: &Turn, kept: &Kept, text: &str, outcome: &Outcome) -> Vec<u8> {
        let response = ResponseObject::of_turn(turn, &kept.echo, text, outcome);
        crate::pipeline::answer_body(text, |body| response.write_json(body))
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

/// A response object's JSON (`null` if it could not be written, which our types cannot fail).
fn response_bytes(response: &ResponseObject<'_>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(1024);
    match response.write_json(&mut bytes) {
        Ok(()) => bytes,
        Err(_) => b"null".to_vec(),
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
    /// The next event's sequence number.
    fn next(&mut self) -> u64 {
        let sequence = self.0;
        self.0 += 1;
        sequence
    }

    /// Writes an event of `kind` carrying the response object whose JSON is `body`.
    fn write_response(&mut self, kind: &'static str, out: &mut Vec<u8>, body: &[u8]) {
        self.write(kind, out, |sequence_number| WithResponse {
            response: body,
            sequence_number,
            kind,
        });
    }

    /// Writes an event of `kind`: its `data:` is `event` of its sequence number.
    fn write<E: Event>(
        &mut self,
        kind: &'static str,
        out: &mut Vec<u8>,
        event: impl FnOnce(u64) -> E,
    ) {
        let sequence_number = self.next();
        stream::push_event_with(out, kind, |out| event(sequence_number).write(out));
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
        let item_id = item_id(&self.id, "rs_").literal();
        let item_id = item_id.as_str();
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

    /// The message item of `text`, whose JSON string literal is `literal`.
    fn text_item(&mut self, text: &str, literal: Text<'_>, out: &mut Vec<u8>) {
        let output_index = self.next_index;
        self.next_index += 1;
        let item_id = item_id(&self.id, "msg_").literal();
        let item_id = item_id.as_str();
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
        self.sequence.write(kind, out, part(kind, Text::Plain("")));
        for delta in stream::pieces(text, CONTENT_PIECE) {
            let kind = "response.output_text.delta";
            self.sequence.write(kind, out, |sequence_number| TextDelta {
                content_index: 0,
                delta,
                item_id,
                output_index,
                sequence_number,
                kind,
            });
        }
        let kind = "response.output_text.done";
        self.sequence.write(kind, out, |sequence_number| TextDone {
            content_index: 0,
            item_id,
            output_index,
            sequence_number,
            text: literal,
            kind,
        });
        let kind = "response.content_part.done";
        self.sequence.write(kind, out, part(kind, literal));
        let kind = "response.output_item.done";
        self.sequence.write(kind, out, |sequence_number| ItemEvent {
            item: MessageItem::new(&self.id, Some(literal), self.item_status),
            output_index,
            sequence_number,
            kind,
        });
    }

    fn call_item(&mut self, number: usize, call: &ToolCall, out: &mut Vec<u8>) {
        let output_index = self.next_index;
        self.next_index += 1;
        let added = CallItem::new(&self.id, number, call, "", "in_progress");
        let item_id = added.id.literal();
        let item_id = item_id.as_str();
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
        // Escaped once: the events and the final response write it five times.
        let escaped = Text::escape(text);
        let literal = Text::Json(&escaped);
        if !text.is_empty() || calls.is_empty() {
            self.text_item(text, literal, out);
        }
        for (number, call) in calls.iter().enumerate() {
            self.call_item(number, call, out);
        }
        let mut response = ResponseObject::answer(&self.id, &self.echo, literal, outcome)
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
        let body = response_bytes(&response);
        self.sequence.write_response(event, out, &body);
        self.completed = Some(Bytes::from(body));
    }
}

impl StreamWriter for ResponsesWriter {
    fn open(&mut self, out: &mut Vec<u8>) {
        // Both events carry the same object: written once.
        let response = ResponseObject::new(&self.id, &self.echo, "in_progress");
        let body = response_bytes(&response);
        for kind in ["response.created", "response.in_progress"] {
            self.sequence.write_response(kind, out, &body);
        }
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        let item_id = item_id(&self.id, "rs_").literal();
        let item_id = item_id.as_str();
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
        let sequence_number = self.sequence.next();
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
        stream::push_event_with(out, kind, |out| stream::push_json(out, &event));
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
        let mut tail = Vec::new();
        stream::push_event_with(&mut tail, "error", |out| stream::push_json(out, &body));
        Bytes::from(tail)
    }
}
