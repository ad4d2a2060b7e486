//! The Messages SSE events of one stream ([`MessagesEvents`]), written after the verdict.

use super::{error_body, stop_reason, tool_input};
use crate::error::ApiError;
use enforce_core::Outcome;
use serde_json::{json, Value};

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
