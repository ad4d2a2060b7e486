//! The Responses stream events, typed, each written straight to bytes: its keys as prepared
//! text, its values through the JSON writer. A stream writes nine events or more per answer,
//! and writing every key of every event through a serializer cost a streamed answer more than
//! the rest of the Responses surface. Each event's keys, `sequence_number` and `type` among
//! them, come in sorted order, as a `Value` object writes them, so the bytes are those clients
//! always got.

use super::object::{Text, WriteJson};
use crate::stream::push_json;
use serde::Serialize;

/// An event's `data`: one JSON object.
pub(super) trait Event {
    /// Appends the object to `out`.
    fn write(&self, out: &mut Vec<u8>);
}

/// An output item's id as a JSON string literal, quotes included, written once for every
/// event that names the item ([`ItemId::literal`](super::object::ItemId::literal)).
pub(super) type IdLiteral<'a> = &'a str;

/// Appends `"sequence_number":N,"type":"kind"}`, how most events end.
fn sequence_and_kind(out: &mut Vec<u8>, sequence_number: u64, kind: &'static str) {
    sequence(out, sequence_number);
    out.push(b',');
    end_with_kind(out, kind);
}

/// Appends `"sequence_number":N`.
fn sequence(out: &mut Vec<u8>, sequence_number: u64) {
    out.extend_from_slice(b"\"sequence_number\":");
    push_json(out, &sequence_number);
}

/// Appends `"type":"kind"}`: the last key of every event. `kind` is one of the event names
/// this surface writes (`response.output_text.delta`, ...): letters, dots and underscores,
/// nothing to escape.
fn end_with_kind(out: &mut Vec<u8>, kind: &'static str) {
    out.extend_from_slice(b"\"type\":\"");
    out.extend_from_slice(kind.as_bytes());
    out.extend_from_slice(b"\"}");
}

/// Appends `"item_id":"…",`.
fn item_id(out: &mut Vec<u8>, id: IdLiteral<'_>) {
    out.extend_from_slice(b"\"item_id\":");
    out.extend_from_slice(id.as_bytes());
    out.push(b',');
}

/// Appends `"output_index":N,`.
fn output_index(out: &mut Vec<u8>, index: usize) {
    out.extend_from_slice(b"\"output_index\":");
    push_json(out, &index);
    out.push(b',');
}

/// An event carrying the whole `response` object, already written (`response.created`,
/// `response.completed`, ...): the object is written once for every event that carries it.
pub(super) struct WithResponse<'a> {
    pub response: &'a [u8],
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl Event for WithResponse<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"response\":");
        out.extend_from_slice(self.response);
        out.push(b',');
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// An event carrying a whole output item: `response.output_item.added` and `.done`.
pub(super) struct ItemEvent<I> {
    pub item: I,
    pub output_index: usize,
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl<I: WriteJson> Event for ItemEvent<I> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"item\":");
        // Our items hold strings and numbers: writing them into a Vec cannot fail.
        let _ = self.item.write_json(out);
        out.push(b',');
        output_index(out, self.output_index);
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// `response.content_part.added` and `.done`: a message's content part.
pub(super) struct ContentPart<'a, P> {
    pub content_index: u8,
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub part: P,
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl<P: WriteJson> Event for ContentPart<'_, P> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"content_index\":");
        push_json(out, &self.content_index);
        out.push(b',');
        item_id(out, self.item_id);
        output_index(out, self.output_index);
        out.extend_from_slice(b"\"part\":");
        let _ = self.part.write_json(out);
        out.push(b',');
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// `response.output_text.delta`: a piece of the answer's text.
pub(super) struct TextDelta<'a> {
    pub content_index: u8,
    pub delta: &'a str,
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl Event for TextDelta<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"content_index\":");
        push_json(out, &self.content_index);
        out.extend_from_slice(b",\"delta\":");
        push_json(out, self.delta);
        out.push(b',');
        item_id(out, self.item_id);
        // The proxy asks for no logprobs.
        out.extend_from_slice(b"\"logprobs\":[],");
        output_index(out, self.output_index);
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// `response.output_text.done`: the answer's whole text.
pub(super) struct TextDone<'a> {
    pub content_index: u8,
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub text: Text<'a>,
    pub kind: &'static str,
}

impl Event for TextDone<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"content_index\":");
        push_json(out, &self.content_index);
        out.push(b',');
        item_id(out, self.item_id);
        out.extend_from_slice(b"\"logprobs\":[],");
        output_index(out, self.output_index);
        sequence(out, self.sequence_number);
        out.extend_from_slice(b",\"text\":");
        push_json(out, &self.text);
        out.push(b',');
        end_with_kind(out, self.kind);
    }
}

/// `response.function_call_arguments.delta`: a piece of a call's arguments.
pub(super) struct ArgumentsDelta<'a> {
    pub delta: &'a str,
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl Event for ArgumentsDelta<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"delta\":");
        push_json(out, self.delta);
        out.push(b',');
        item_id(out, self.item_id);
        output_index(out, self.output_index);
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// `response.function_call_arguments.done`: a call's whole arguments.
pub(super) struct ArgumentsDone<'a> {
    pub arguments: &'a str,
    pub item_id: IdLiteral<'a>,
    pub name: &'a str,
    pub output_index: usize,
    pub sequence_number: u64,
    pub kind: &'static str,
}

impl Event for ArgumentsDone<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"arguments\":");
        push_json(out, self.arguments);
        out.push(b',');
        item_id(out, self.item_id);
        out.extend_from_slice(b"\"name\":");
        push_json(out, self.name);
        out.push(b',');
        output_index(out, self.output_index);
        sequence_and_kind(out, self.sequence_number, self.kind);
    }
}

/// `response.reasoning_summary_part.added` and `.done`: the summary part showing drafts.
pub(super) struct SummaryPart<'a, P> {
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub part: P,
    pub sequence_number: u64,
    pub summary_index: u8,
    pub kind: &'static str,
}

impl<P: WriteJson> Event for SummaryPart<'_, P> {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        item_id(out, self.item_id);
        output_index(out, self.output_index);
        out.extend_from_slice(b"\"part\":");
        let _ = self.part.write_json(out);
        out.push(b',');
        sequence(out, self.sequence_number);
        summary_index(out, self.summary_index);
        out.push(b',');
        end_with_kind(out, self.kind);
    }
}

/// Appends `,"summary_index":N` (it sorts after the sequence number).
fn summary_index(out: &mut Vec<u8>, index: u8) {
    out.extend_from_slice(b",\"summary_index\":");
    push_json(out, &index);
}

/// `response.reasoning_summary_text.delta`: more text of a draft.
pub(super) struct SummaryDelta<'a> {
    pub delta: &'a str,
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub summary_index: u8,
    pub kind: &'static str,
}

impl Event for SummaryDelta<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(b"{\"delta\":");
        push_json(out, self.delta);
        out.push(b',');
        item_id(out, self.item_id);
        output_index(out, self.output_index);
        sequence(out, self.sequence_number);
        summary_index(out, self.summary_index);
        out.push(b',');
        end_with_kind(out, self.kind);
    }
}

/// `response.reasoning_summary_text.done`: the drafts' whole text.
pub(super) struct SummaryDone<'a> {
    pub item_id: IdLiteral<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub summary_index: u8,
    pub text: &'a str,
    pub kind: &'static str,
}

impl Event for SummaryDone<'_> {
    fn write(&self, out: &mut Vec<u8>) {
        out.push(b'{');
        item_id(out, self.item_id);
        output_index(out, self.output_index);
        sequence(out, self.sequence_number);
        summary_index(out, self.summary_index);
        out.extend_from_slice(b",\"text\":");
        push_json(out, self.text);
        out.push(b',');
        end_with_kind(out, self.kind);
    }
}

/// The `error` event a stream ends with when its driver vanished (it has no sequence number:
/// the writer that counted them is gone). Written once per broken stream, so through serde.
#[derive(Serialize)]
pub(super) struct StreamError<'a> {
    pub code: &'a str,
    pub message: &'a str,
    pub param: Option<&'a str>,
    pub status: u16,
    #[serde(rename = "type")]
    pub kind: &'a str,
}
