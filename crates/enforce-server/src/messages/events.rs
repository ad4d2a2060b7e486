//! The Messages SSE events of one stream ([`MessagesEvents`]), written after the verdict.

use super::{error_body, stop_reason, tool_input};
use crate::error::ApiError;
use crate::pipeline::Warnings;
use crate::stream::{push_event_with, push_json};
use crate::verdict::Enforcement;
use enforce_core::Outcome;
use serde::Serialize;
use serde_json::json;

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

fn push_event(out: &mut Vec<u8>, name: &str, data: &impl Serialize) {
    push_event_with(out, name, |out| push_json(out, data));
}

// The events of an answer written straight to bytes, in the order a `Value` writes their
// keys (sorted), so both forms are the same bytes. The events every answer has (the message's
// start, its text block, `message_delta`, `message_stop`) are prepared text around their
// values: their keys written through a serializer cost a streamed answer more than the rest
// of the Messages surface. The rarer ones (a tool call) are typed and serialized.

#[derive(Serialize)]
struct BlockStart<B: Serialize> {
    content_block: B,
    index: usize,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct ToolUseBlock<'a> {
    id: &'a str,
    input: Empty,
    name: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct Empty {}

#[derive(Serialize)]
struct BlockDelta<D: Serialize> {
    delta: D,
    index: usize,
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Serialize)]
struct InputJsonDelta<'a> {
    partial_json: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

fn block_stop(out: &mut Vec<u8>, index: usize) {
    push_event_with(out, "content_block_stop", |out| {
        out.extend_from_slice(br#"{"index":"#);
        push_json(out, &index);
        out.extend_from_slice(br#","type":"content_block_stop"}"#);
    });
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
        push_event_with(out, "message_start", |out| {
            out.extend_from_slice(br#"{"message":{"content":[],"id":"#);
            push_json(out, self.id.as_str());
            out.extend_from_slice(br#","model":"#);
            push_json(out, self.model.as_str());
            out.extend_from_slice(
                br#","role":"assistant","stop_reason":null,"stop_sequence":null,"#,
            );
            out.extend_from_slice(
                br#""type":"message","usage":{"input_tokens":0,"output_tokens":0}},"#,
            );
            out.extend_from_slice(br#""type":"message_start"}"#);
        });
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
            block_stop(out, index);
        }
    }

    /// The checked answer: its text block, a `tool_use` block per call (the arguments as one
    /// `input_json_delta` each, in pieces), `message_delta` with `stop_reason`, usage and
    /// `enforcement` (with `route` when one was taken), `message_stop`.
    pub fn finish(
        &mut self,
        text: &str,
        outcome: &Outcome,
        enforcement: Enforcement<'_>,
        warnings: Option<Warnings<'_>>,
        out: &mut Vec<u8>,
    ) {
        self.open(out);
        self.close_thinking(out);
        if !text.is_empty() {
            let index = self.next_block();
            push_event_with(out, "content_block_start", |out| {
                out.extend_from_slice(br#"{"content_block":{"text":"","type":"text"},"index":"#);
                push_json(out, &index);
                out.extend_from_slice(br#","type":"content_block_start"}"#);
            });
            for piece in crate::stream::pieces(text, PIECE) {
                push_event_with(out, "content_block_delta", |out| {
                    out.extend_from_slice(br#"{"delta":{"text":"#);
                    push_json(out, piece);
                    out.extend_from_slice(br#","type":"text_delta"},"index":"#);
                    push_json(out, &index);
                    out.extend_from_slice(br#","type":"content_block_delta"}"#);
                });
            }
            block_stop(out, index);
        }
        for call in &outcome.tool_calls {
            let index = self.next_block();
            let start = BlockStart {
                content_block: ToolUseBlock {
                    id: &call.id,
                    input: Empty {},
                    name: &call.name,
                    kind: "tool_use",
                },
                index,
                kind: "content_block_start",
            };
            push_event(out, "content_block_start", &start);
            // The input as the object it is, re-serialized: `input_json_delta` fragments must
            // join to the JSON the client parses.
            let input = tool_input(call).to_string();
            for piece in crate::stream::pieces(&input, PIECE) {
                let delta = BlockDelta {
                    delta: InputJsonDelta {
                        partial_json: piece,
                        kind: "input_json_delta",
                    },
                    index,
                    kind: "content_block_delta",
                };
                push_event(out, "content_block_delta", &delta);
            }
            block_stop(out, index);
        }
        let usage = outcome.usage.unwrap_or_default();
        push_event_with(out, "message_delta", |out| {
            out.extend_from_slice(br#"{"delta":{"stop_reason":"#);
            push_json(out, stop_reason(outcome));
            out.extend_from_slice(br#","stop_sequence":null},"enforcement":"#);
            push_json(out, &enforcement);
            out.extend_from_slice(br#","type":"message_delta","usage":{"input_tokens":"#);
            push_json(out, &usage.input_tokens);
            out.extend_from_slice(br#","output_tokens":"#);
            push_json(out, &usage.output_tokens);
            out.push(b'}');
            if let Some(warnings) = &warnings {
                out.extend_from_slice(br#","warnings":"#);
                push_json(out, warnings);
            }
            out.push(b'}');
        });
        push_event_with(out, "message_stop", |out| {
            out.extend_from_slice(br#"{"type":"message_stop"}"#);
        });
    }

    /// The stream's end for an answer not delivered: an `error` event in Anthropic's shape
    /// (with `enforcement`). A draft's thinking block is closed first.
    pub fn fail(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.close_thinking(out);
        push_event_with(out, "error", |out| {
            out.extend_from_slice(error_body(error).as_bytes());
        });
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
