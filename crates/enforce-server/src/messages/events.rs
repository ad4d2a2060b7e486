//! The Messages SSE events of one stream ([`MessagesEvents`]), written after the verdict.

use super::{error_body_of, stop_reason, tool_input, MessagesUsage};
use crate::error::ApiError;
use crate::pipeline::Warnings;
use crate::stream::push_event;
use crate::verdict::Enforcement;
use enforce_core::Outcome;
use serde::Serialize;

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

/// One event of a Messages stream: its `type` is its SSE event name too.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event<'a> {
    MessageStart {
        message: StartMessage<'a>,
    },
    ContentBlockStart {
        index: usize,
        content_block: StartBlock<'a>,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta<'a>,
    },
    ContentBlockStop {
        index: usize,
    },
    MessageDelta {
        delta: StopDelta,
        usage: MessagesUsage,
        enforcement: &'a Enforcement<'a>,
        #[serde(skip_serializing_if = "Option::is_none")]
        warnings: Option<&'a Warnings<'a>>,
    },
    MessageStop,
}

impl Event<'_> {
    /// The SSE event's name: its `type`.
    fn name(&self) -> &'static str {
        match self {
            Event::MessageStart { .. } => "message_start",
            Event::ContentBlockStart { .. } => "content_block_start",
            Event::ContentBlockDelta { .. } => "content_block_delta",
            Event::ContentBlockStop { .. } => "content_block_stop",
            Event::MessageDelta { .. } => "message_delta",
            Event::MessageStop => "message_stop",
        }
    }

    /// Appends the event to `out`.
    fn push(&self, out: &mut Vec<u8>) {
        push_event(out, self.name(), self);
    }
}

/// The message as `message_start` shows it: no content yet.
#[derive(Serialize)]
struct StartMessage<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: [(); 0],
    stop_reason: Option<&'static str>,
    stop_sequence: Option<&'static str>,
    usage: MessagesUsage,
}

/// A block as it starts, empty.
#[derive(Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum StartBlock<'a> {
    Text {
        text: &'static str,
    },
    Thinking {
        thinking: &'static str,
        signature: &'static str,
    },
    ToolUse {
        id: &'a str,
        name: &'a str,
        input: Empty,
    },
}

#[derive(Serialize)]
struct Empty {}

/// More of a block.
#[derive(Serialize)]
#[serde(tag = "type")]
enum Delta<'a> {
    #[serde(rename = "text_delta")]
    Text { text: &'a str },
    #[serde(rename = "thinking_delta")]
    Thinking { thinking: &'a str },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: &'a str },
}

/// `message_delta`'s `delta`: why the answer stopped.
#[derive(Serialize)]
struct StopDelta {
    stop_reason: &'static str,
    stop_sequence: Option<&'static str>,
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
        let message = StartMessage {
            id: &self.id,
            kind: "message",
            role: "assistant",
            model: &self.model,
            content: [],
            stop_reason: None,
            stop_sequence: None,
            usage: MessagesUsage::default(),
        };
        Event::MessageStart { message }.push(out);
    }

    /// More draft text (`stream_mode: draft`) in the `thinking` block, opened on first use.
    pub fn draft(&mut self, text: &str, out: &mut Vec<u8>) {
        self.open(out);
        let index = match self.thinking {
            Some(index) => index,
            None => {
                let index = self.next_block();
                self.thinking = Some(index);
                let content_block = StartBlock::Thinking {
                    thinking: "",
                    signature: "",
                };
                Event::ContentBlockStart {
                    index,
                    content_block,
                }
                .push(out);
                index
            }
        };
        for piece in crate::stream::pieces(text, PIECE) {
            let delta = Delta::Thinking { thinking: piece };
            Event::ContentBlockDelta { index, delta }.push(out);
        }
    }

    fn close_thinking(&mut self, out: &mut Vec<u8>) {
        if let Some(index) = self.thinking.take() {
            Event::ContentBlockStop { index }.push(out);
        }
    }

    /// The checked answer: its text block, a `tool_use` block per call (the arguments as one
    /// `input_json_delta` each, in pieces), `message_delta` with `stop_reason`, usage and
    /// `enforcement` (with `route` when one was taken), `message_stop`.
    pub fn finish(
        &mut self,
        text: &str,
        outcome: &Outcome,
        enforcement: &Enforcement<'_>,
        warnings: Option<&Warnings<'_>>,
        out: &mut Vec<u8>,
    ) {
        self.open(out);
        self.close_thinking(out);
        if !text.is_empty() {
            self.block(
                StartBlock::Text { text: "" },
                text,
                |text| Delta::Text { text },
                out,
            );
        }
        for call in &outcome.tool_calls {
            let start = StartBlock::ToolUse {
                id: &call.id,
                name: &call.name,
                input: Empty {},
            };
            // The input as the object it is, re-serialized: `input_json_delta` fragments must
            // join to the JSON the client parses.
            let input = tool_input(call).to_string();
            let delta = |partial_json| Delta::InputJson { partial_json };
            self.block(start, &input, delta, out);
        }
        Event::MessageDelta {
            delta: StopDelta {
                stop_reason: stop_reason(outcome),
                stop_sequence: None,
            },
            usage: MessagesUsage::of(outcome.usage),
            enforcement,
            warnings,
        }
        .push(out);
        Event::MessageStop.push(out);
    }

    /// One whole block: its start, `content` in pieces as `delta`s, its stop.
    fn block<'a>(
        &mut self,
        start: StartBlock<'_>,
        content: &'a str,
        delta: impl Fn(&'a str) -> Delta<'a>,
        out: &mut Vec<u8>,
    ) {
        let index = self.next_block();
        Event::ContentBlockStart {
            index,
            content_block: start,
        }
        .push(out);
        for piece in crate::stream::pieces(content, PIECE) {
            Event::ContentBlockDelta {
                index,
                delta: delta(piece),
            }
            .push(out);
        }
        Event::ContentBlockStop { index }.push(out);
    }

    /// The stream's end for an answer not delivered: an `error` event in Anthropic's shape
    /// (with `enforcement`). A draft's thinking block is closed first.
    pub fn fail(&mut self, error: &ApiError, out: &mut Vec<u8>) {
        self.close_thinking(out);
        push_event(out, "error", &error_body_of(error));
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
