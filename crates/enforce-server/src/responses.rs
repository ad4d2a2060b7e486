//! The OpenAI Responses surface (`POST /v1/responses`, `GET /v1/responses/{id}`): the request
//! translated into the shared [`Ask`] (`request.rs`), the `response` object (`object.rs`), its
//! typed stream events with `sequence_number` (`events.rs`, written by [`ResponsesWriter`]),
//! and the OpenAI error envelope.

use crate::error::ApiError;
use crate::pipeline::{Ask, Surface};
use crate::stream::{self, push_event, StreamWriter, CONTENT_PIECE};
use crate::turn::{Turn, TurnId};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::{runner::ToolCall, Outcome};
use events::{
    ArgumentsDelta, ArgumentsDone, ContentPart, ItemEvent, Sequenced, StreamError, SummaryDelta,
    SummaryDone, SummaryPart, TextDelta, TextDone, WithResponse,
};
use object::{
    item_id, item_status, CallItem, Failure, MessageItem, OutputText, ReasoningItem,
    ResponseObject, SummaryText, Verdict,
};
use request::Echo;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::Value;

mod events;
mod object;
mod request;
#[cfg(test)]
mod stream_tests;
#[cfg(test)]
mod tests;

/// The Responses surface.
pub(crate) struct Responses;

impl Surface for Responses {
    const NAME: &'static str = "responses";
    const ID_PREFIX: &'static str = "resp_";
    const ROUTE: &'static str = "/v1/responses";
    /// The request fields the `response` object echoes.
    type Kept = Echo;
    type Writer = ResponsesWriter;

    fn parse(body: Bytes) -> Result<(Ask, Echo), ApiError> {
        request::parse_responses_request(body)
    }

    fn refuse(error: ApiError) -> Response {
        error.into_response()
    }

    fn answer_bytes(turn: &Turn, echo: &Echo, text: &str, outcome: &Outcome) -> Vec<u8> {
        let response = ResponseObject::of_turn(turn, echo, text, outcome);
        crate::pipeline::answer_body(text, &response)
    }

    fn writer(turn: &Turn, echo: Echo) -> ResponsesWriter {
        ResponsesWriter::new(turn.id.clone(), echo)
    }
}

/// The reasoning item a stream showed, with its output index, for a final `response`.
fn shown<'a>(
    id: &TurnId,
    shown: &'a Option<(usize, String)>,
) -> Option<(usize, ReasoningItem<'a>)> {
    shown
        .as_ref()
        .map(|(index, text)| (*index, ReasoningItem::new(id, Some(text))))
}

/// Writes a Responses stream: `response.created` and `response.in_progress` at once, drafts
/// as a `reasoning` item's summary text (what clients show as thinking), then the answer's
/// items with their delta and done events, and `response.completed`, or `response.failed`.
/// Every event carries its `sequence_number`; every event is typed ([`events`]).
pub(crate) struct ResponsesWriter {
    id: TurnId,
    echo: Echo,
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
/// borrow the writer's other fields while it is written.
#[derive(Default)]
struct Sequence(u64);

impl Sequence {
    /// Writes `event` as the next event, of type `kind`.
    fn write(&mut self, out: &mut Vec<u8>, kind: &str, event: impl Serialize) {
        let event = Sequenced {
            kind,
            sequence_number: self.0,
            event,
        };
        self.0 += 1;
        push_event(out, kind, &event);
    }
}

impl ResponsesWriter {
    /// The writer of the answer `id`, echoing `echo`.
    fn new(id: TurnId, echo: Echo) -> Self {
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

    /// The output index of a new item.
    fn next_output_index(&mut self) -> usize {
        self.next_index += 1;
        self.next_index - 1
    }

    /// Closes the reasoning item of the drafts, if one is open.
    fn close_reasoning(&mut self, out: &mut Vec<u8>) {
        let Some((output_index, text)) = self.reasoning.take() else {
            return;
        };
        let item_id = &item_id(&self.id, "rs_", None);
        let (summary_index, text) = (0, text.as_str());
        let done = SummaryDone {
            item_id,
            output_index,
            summary_index,
            text,
        };
        self.sequence
            .write(out, "response.reasoning_summary_text.done", done);
        let part = SummaryPart {
            item_id,
            output_index,
            summary_index,
            part: SummaryText::new(text),
        };
        self.sequence
            .write(out, "response.reasoning_summary_part.done", part);
        let item = ReasoningItem::new(&self.id, Some(text));
        let done = ItemEvent { output_index, item };
        self.sequence.write(out, "response.output_item.done", done);
        self.shown_reasoning = Some((output_index, text.to_string()));
    }

    /// The message item of `text`: added, its content part, its text in deltas, done.
    fn text_item(&mut self, text: &str, out: &mut Vec<u8>) {
        let output_index = self.next_output_index();
        let item_id = &item_id(&self.id, "msg_", None);
        let item = MessageItem::new(&self.id, "", "in_progress");
        let added = ItemEvent { output_index, item };
        self.sequence
            .write(out, "response.output_item.added", added);
        let part = |text| ContentPart {
            item_id,
            output_index,
            content_index: 0,
            part: OutputText::new(text),
        };
        self.sequence
            .write(out, "response.content_part.added", part(""));
        for delta in stream::pieces(text, CONTENT_PIECE) {
            let delta = TextDelta {
                item_id,
                output_index,
                content_index: 0,
                delta,
                logprobs: [],
            };
            self.sequence
                .write(out, "response.output_text.delta", delta);
        }
        let done = TextDone {
            item_id,
            output_index,
            content_index: 0,
            text,
            logprobs: [],
        };
        self.sequence.write(out, "response.output_text.done", done);
        self.sequence
            .write(out, "response.content_part.done", part(text));
        let item = MessageItem::new(&self.id, text, self.item_status);
        let done = ItemEvent { output_index, item };
        self.sequence.write(out, "response.output_item.done", done);
    }

    /// The `function_call` item of `call`: added, its arguments in deltas, done.
    fn call_item(&mut self, number: usize, call: &ToolCall, out: &mut Vec<u8>) {
        let output_index = self.next_output_index();
        let item_id = &item_id(&self.id, "fc_", Some(number));
        let item = CallItem::new(&self.id, number, call, "", "in_progress");
        let added = ItemEvent { output_index, item };
        self.sequence
            .write(out, "response.output_item.added", added);
        for delta in stream::pieces(&call.arguments, CONTENT_PIECE) {
            let delta = ArgumentsDelta {
                item_id,
                output_index,
                delta,
            };
            self.sequence
                .write(out, "response.function_call_arguments.delta", delta);
        }
        let done = ArgumentsDone {
            item_id,
            output_index,
            name: &call.name,
            arguments: &call.arguments,
        };
        self.sequence
            .write(out, "response.function_call_arguments.done", done);
        let item = CallItem::new(&self.id, number, call, &call.arguments, self.item_status);
        let done = ItemEvent { output_index, item };
        self.sequence.write(out, "response.output_item.done", done);
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
        let response = ResponseObject::answer(&self.id, &self.echo, text, outcome)
            .routed(route)
            .warned(ignored)
            .with_reasoning(shown(&self.id, &self.shown_reasoning));
        // `response.incomplete` for an answer cut at the token limit, as OpenAI streams it.
        let kind = if response.is_cut() {
            "response.incomplete"
        } else {
            "response.completed"
        };
        // Written once: the event carries the bytes that are stored. Our types always
        // serialize; `null` stands in should one not.
        let body = serde_json::value::to_raw_value(&response)
            .unwrap_or_else(|_| RawValue::NULL.to_owned());
        let event = WithResponse {
            response: &*body,
            status: None,
        };
        self.sequence.write(out, kind, event);
        self.completed = Some(Bytes::from(Box::<str>::from(body).into_boxed_bytes()));
    }
}

impl StreamWriter for ResponsesWriter {
    fn open(&mut self, out: &mut Vec<u8>) {
        let response = ResponseObject::new(&self.id, &self.echo, "in_progress");
        for kind in ["response.created", "response.in_progress"] {
            let event = WithResponse {
                response: &response,
                status: None,
            };
            self.sequence.write(out, kind, event);
        }
    }

    fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        let item_id = &item_id(&self.id, "rs_", None);
        let output_index = match &mut self.reasoning {
            Some((index, shown)) => {
                shown.push_str(text);
                *index
            }
            None => {
                let output_index = self.next_output_index();
                self.reasoning = Some((output_index, text.to_string()));
                let item = ReasoningItem::new(&self.id, None);
                let added = ItemEvent { output_index, item };
                self.sequence
                    .write(out, "response.output_item.added", added);
                let part = SummaryPart {
                    item_id,
                    output_index,
                    summary_index: 0,
                    part: SummaryText::new(""),
                };
                self.sequence
                    .write(out, "response.reasoning_summary_part.added", part);
                output_index
            }
        };
        let delta = SummaryDelta {
            item_id,
            output_index,
            summary_index: 0,
            delta: text,
        };
        self.sequence
            .write(out, "response.reasoning_summary_text.delta", delta);
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
        let mut response = ResponseObject::new(&self.id, &self.echo, "failed")
            .with_reasoning(shown(&self.id, &self.shown_reasoning));
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
        let event = WithResponse {
            response: &response,
            status: Some(error.status.as_u16()),
        };
        self.sequence.write(out, "response.failed", event);
    }

    fn unfinished() -> Bytes {
        let error = stream::interrupted();
        let body = StreamError {
            code: error.code,
            message: &error.message,
            param: None,
            status: StatusCode::INTERNAL_SERVER_ERROR.as_u16(),
        };
        let mut tail = Vec::new();
        push_event(&mut tail, "error", &body);
        Bytes::from(tail)
    }
}
