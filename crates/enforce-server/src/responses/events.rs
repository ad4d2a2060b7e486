//! The Responses stream events, typed: written straight to bytes, with no `serde_json::Value`
//! tree per event (building and writing those trees made a streamed answer cost the proxy far
//! more work than the same answer not streamed). Each event's keys, `sequence_number` and
//! `type` among them, come in sorted order, as a `Value` object writes them, so the bytes are
//! those clients always got.

use super::object::{ItemId, Text};
use serde::Serialize;

/// `[]`: the `logprobs` of a text event (the proxy asks for none).
type NoLogprobs = [(); 0];

/// An event carrying a whole output item: `response.output_item.added` and `.done`.
#[derive(Serialize)]
pub(super) struct ItemEvent<'a, I> {
    pub item: I,
    pub output_index: usize,
    pub sequence_number: u64,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.content_part.added` and `.done`: a message's content part.
#[derive(Serialize)]
pub(super) struct ContentPart<'a, P> {
    pub content_index: u8,
    pub item_id: ItemId<'a>,
    pub output_index: usize,
    pub part: P,
    pub sequence_number: u64,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.output_text.delta`: a piece of the answer's text.
#[derive(Serialize)]
pub(super) struct TextDelta<'a> {
    pub content_index: u8,
    pub delta: &'a str,
    pub item_id: ItemId<'a>,
    pub logprobs: NoLogprobs,
    pub output_index: usize,
    pub sequence_number: u64,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.output_text.done`: the answer's whole text.
#[derive(Serialize)]
pub(super) struct TextDone<'a> {
    pub content_index: u8,
    pub item_id: ItemId<'a>,
    pub logprobs: NoLogprobs,
    pub output_index: usize,
    pub sequence_number: u64,
    pub text: Text<'a>,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.function_call_arguments.delta`: a piece of a call's arguments.
#[derive(Serialize)]
pub(super) struct ArgumentsDelta<'a> {
    pub delta: &'a str,
    pub item_id: ItemId<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.function_call_arguments.done`: a call's whole arguments.
#[derive(Serialize)]
pub(super) struct ArgumentsDone<'a> {
    pub arguments: &'a str,
    pub item_id: ItemId<'a>,
    pub name: &'a str,
    pub output_index: usize,
    pub sequence_number: u64,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.reasoning_summary_part.added` and `.done`: the summary part showing drafts.
#[derive(Serialize)]
pub(super) struct SummaryPart<'a, P> {
    pub item_id: ItemId<'a>,
    pub output_index: usize,
    pub part: P,
    pub sequence_number: u64,
    pub summary_index: u8,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.reasoning_summary_text.delta`: more text of a draft.
#[derive(Serialize)]
pub(super) struct SummaryDelta<'a> {
    pub delta: &'a str,
    pub item_id: ItemId<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub summary_index: u8,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// `response.reasoning_summary_text.done`: the drafts' whole text.
#[derive(Serialize)]
pub(super) struct SummaryDone<'a> {
    pub item_id: ItemId<'a>,
    pub output_index: usize,
    pub sequence_number: u64,
    pub summary_index: u8,
    pub text: &'a str,
    #[serde(rename = "type")]
    pub kind: &'a str,
}

/// The `error` event a stream ends with when its driver vanished (it has no sequence number:
/// the writer that counted them is gone).
#[derive(Serialize)]
pub(super) struct StreamError<'a> {
    pub code: &'a str,
    pub message: &'a str,
    pub param: Option<&'a str>,
    pub status: u16,
    #[serde(rename = "type")]
    pub kind: &'a str,
}
