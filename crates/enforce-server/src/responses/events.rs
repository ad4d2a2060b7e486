//! The Responses stream events, one struct of fields each; [`Sequenced`] adds the `type` and
//! `sequence_number` every event carries.

use super::object::{OutputText, SummaryText};
use serde::Serialize;

/// An event as sent: its fields, its `type` and its place in the stream.
#[derive(Serialize)]
pub(super) struct Sequenced<'a, E> {
    #[serde(rename = "type")]
    pub kind: &'a str,
    pub sequence_number: u64,
    #[serde(flatten)]
    pub event: E,
}

/// An event carrying the whole `response` object (`response.created`, `response.completed`,
/// `response.failed`, ...).
#[derive(Serialize)]
pub(super) struct WithResponse<'a, R: ?Sized> {
    pub response: &'a R,
    /// The HTTP status of a failed response.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
}

/// `response.output_item.added` and `.done`: a whole output item.
#[derive(Serialize)]
pub(super) struct ItemEvent<I> {
    pub output_index: usize,
    pub item: I,
}

/// `response.content_part.added` and `.done`: a message's content part.
#[derive(Serialize)]
pub(super) struct ContentPart<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: u8,
    pub part: OutputText<'a>,
}

/// `response.output_text.delta`: a piece of the answer's text.
#[derive(Serialize)]
pub(super) struct TextDelta<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: u8,
    pub delta: &'a str,
    /// The proxy asks for no logprobs.
    pub logprobs: [(); 0],
}

/// `response.output_text.done`: the answer's whole text.
#[derive(Serialize)]
pub(super) struct TextDone<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub content_index: u8,
    pub text: &'a str,
    pub logprobs: [(); 0],
}

/// `response.function_call_arguments.delta`: a piece of a call's arguments.
#[derive(Serialize)]
pub(super) struct ArgumentsDelta<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub delta: &'a str,
}

/// `response.function_call_arguments.done`: a call's whole arguments.
#[derive(Serialize)]
pub(super) struct ArgumentsDone<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub name: &'a str,
    pub arguments: &'a str,
}

/// `response.reasoning_summary_part.added` and `.done`: the summary part showing drafts.
#[derive(Serialize)]
pub(super) struct SummaryPart<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub summary_index: u8,
    pub part: SummaryText<'a>,
}

/// `response.reasoning_summary_text.delta`: more text of a draft.
#[derive(Serialize)]
pub(super) struct SummaryDelta<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub summary_index: u8,
    pub delta: &'a str,
}

/// `response.reasoning_summary_text.done`: the drafts' whole text.
#[derive(Serialize)]
pub(super) struct SummaryDone<'a> {
    pub item_id: &'a str,
    pub output_index: usize,
    pub summary_index: u8,
    pub text: &'a str,
}

/// The `error` event a stream ends with when its driver vanished (it has no sequence number:
/// the writer that counted them is gone).
#[derive(Serialize)]
#[serde(tag = "type", rename = "error")]
pub(super) struct StreamError<'a> {
    pub code: &'a str,
    pub message: &'a str,
    pub param: Option<&'a str>,
    pub status: u16,
}
