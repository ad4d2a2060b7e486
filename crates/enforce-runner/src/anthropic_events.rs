//! Reading an Anthropic Messages stream: typed SSE events (`message_start`,
//! `content_block_start`/`_delta`/`_stop` with `text_delta`, `input_json_delta` and
//! `thinking_delta`, `message_delta` with the stop reason and the running usage,
//! `message_stop`, `ping`, `error`) on the frames [`SseFramer`] splits.

use crate::process::tail;
use crate::sse::{Chunk, EventReader, SseFramer, StreamFault};
use enforce_core::{runner::FinishReason, runner::ToolCall, Usage};
use serde_json::Value;

/// Most content blocks one answer may open: a hostile index must not make the reader allocate.
const MAX_BLOCKS: usize = 128;

/// Tokens sent, as Anthropic counts them: `input_tokens` leaves out the prompt-cache reads and
/// writes, which were sent (and billed) too.
pub(crate) fn input_usage(usage: &Value) -> u64 {
    [
        "input_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    ]
    .iter()
    .filter_map(|k| usage.get(*k).and_then(Value::as_u64))
    .fold(0u64, u64::saturating_add)
}

/// Anthropic's `stop_reason` as a [`FinishReason`]: `end_turn` and `stop_sequence` stop,
/// `max_tokens` and `model_context_window_exceeded` are the token limit, `tool_use` calls
/// tools, `refusal` is a content filter; others (`pause_turn`) keep their name.
pub(crate) fn stop_reason(reason: &str) -> FinishReason {
    match reason {
        "refusal" => FinishReason::ContentFilter,
        "model_context_window_exceeded" => FinishReason::Length,
        other => FinishReason::parse(other),
    }
}

/// A content block being assembled.
#[derive(Debug, Default, Clone)]
enum Block {
    /// Not opened, or a kind the answer does not use (`thinking` is reported as it comes,
    /// `redacted_thinking`, server tools).
    #[default]
    Other,
    /// A `tool_use` block: its id, name, the input it opened with and the `partial_json`
    /// fragments since.
    ToolUse {
        id: String,
        name: String,
        opened_with: Option<Value>,
        json: String,
    },
}

/// Reads Anthropic Messages events.
#[derive(Debug, Default)]
pub(crate) struct MessagesReader {
    framer: SseFramer,
    /// Blocks by index.
    blocks: Vec<Block>,
    /// Usage so far: `message_start` gives the input, `message_delta` the running output.
    usage: Usage,
    finish_reason: Option<FinishReason>,
    /// `message_stop` was read: anything after it is ignored.
    done: bool,
}

impl EventReader for MessagesReader {
    const END: &'static str = "message_stop";

    fn framer(&mut self) -> &mut SseFramer {
        &mut self.framer
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn event(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault> {
        self.read_event(data, out)
    }

    fn tool_calls(&self) -> Vec<ToolCall> {
        self.blocks
            .iter()
            .enumerate()
            .filter_map(|(i, block)| match block {
                Block::ToolUse {
                    id,
                    name,
                    opened_with,
                    json,
                } => {
                    let arguments = if !json.is_empty() {
                        json.clone()
                    } else {
                        // No fragments: the input the block opened with (`{}` when none).
                        opened_with
                            .as_ref()
                            .map_or_else(|| "{}".to_string(), Value::to_string)
                    };
                    let id = if id.is_empty() {
                        format!("toolu_{i}")
                    } else {
                        id.clone()
                    };
                    Some(ToolCall::new(id, name.clone(), arguments))
                }
                Block::Other => None,
            })
            .collect()
    }

    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }
}

impl MessagesReader {
    fn read_event(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault> {
        let event: Value = serde_json::from_str(data.trim()).map_err(|e| {
            StreamFault::NotJson(format!(
                "a stream event is not JSON ({e}): {}",
                tail(data, 200)
            ))
        })?;
        match event.get("type").and_then(Value::as_str).unwrap_or("") {
            "message_start" => {
                if let Some(usage) = event.pointer("/message/usage").filter(|u| u.is_object()) {
                    self.usage = Usage {
                        input_tokens: input_usage(usage),
                        output_tokens: usage
                            .get("output_tokens")
                            .and_then(Value::as_u64)
                            .unwrap_or(0),
                    };
                    out.push(Chunk::Usage(self.usage));
                }
            }
            "content_block_start" => {
                let Some(index) = self.index(&event) else {
                    return Ok(());
                };
                let block = event.get("content_block").unwrap_or(&Value::Null);
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => push_text(out, block.get("text"), Chunk::Text),
                    Some("thinking") => push_text(out, block.get("thinking"), Chunk::Reasoning),
                    Some("tool_use") => {
                        self.blocks[index] = Block::ToolUse {
                            id: str_of(block, "id"),
                            name: str_of(block, "name"),
                            opened_with: block
                                .get("input")
                                .filter(|i| i.as_object().is_some_and(|o| !o.is_empty()))
                                .cloned(),
                            json: String::new(),
                        };
                    }
                    _ => {}
                }
            }
            "content_block_delta" => {
                let Some(index) = self.index(&event) else {
                    return Ok(());
                };
                let delta = event.get("delta").unwrap_or(&Value::Null);
                match delta.get("type").and_then(Value::as_str) {
                    Some("text_delta") => push_text(out, delta.get("text"), Chunk::Text),
                    Some("thinking_delta") => {
                        push_text(out, delta.get("thinking"), Chunk::Reasoning)
                    }
                    Some("input_json_delta") => {
                        if let (Block::ToolUse { json, .. }, Some(part)) = (
                            &mut self.blocks[index],
                            delta.get("partial_json").and_then(Value::as_str),
                        ) {
                            json.push_str(part);
                        }
                    }
                    _ => {} // signature_delta, citations_delta
                }
            }
            "message_delta" => {
                if let Some(reason) = event.pointer("/delta/stop_reason").and_then(Value::as_str) {
                    self.finish_reason = Some(stop_reason(reason));
                }
                if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
                    // The counts are running totals; input appears here only on newer APIs.
                    if let Some(output) = usage.get("output_tokens").and_then(Value::as_u64) {
                        self.usage.output_tokens = output;
                    }
                    if usage.get("input_tokens").is_some_and(Value::is_u64) {
                        self.usage.input_tokens = input_usage(usage);
                    }
                    out.push(Chunk::Usage(self.usage));
                }
            }
            "message_stop" => {
                self.done = true;
                out.push(Chunk::Done);
            }
            "error" => return Err(StreamFault::ErrorEvent(data.to_string())),
            // ping, content_block_stop, and event types added later.
            _ => {}
        }
        Ok(())
    }

    /// The block index an event names, with room made for it; `None` beyond [`MAX_BLOCKS`].
    fn index(&mut self, event: &Value) -> Option<usize> {
        let index = usize::try_from(event.get("index").and_then(Value::as_u64)?).ok()?;
        if index >= MAX_BLOCKS {
            return None;
        }
        if self.blocks.len() <= index {
            self.blocks.resize_with(index + 1, Block::default);
        }
        Some(index)
    }
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

fn push_text(out: &mut Vec<Chunk>, text: Option<&Value>, chunk: fn(String) -> Chunk) {
    if let Some(text) = text.and_then(Value::as_str).filter(|t| !t.is_empty()) {
        out.push(chunk(text.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(name: &str, data: &str) -> String {
        format!("event: {name}\ndata: {data}\n\n")
    }

    /// A stream as the Messages API writes it: thinking, text, a tool call in fragments.
    fn tool_stream() -> String {
        [
            event("message_start", r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-x","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_read_input_tokens":5,"output_tokens":1}}}"#),
            event("ping", r#"{"type": "ping"}"#),
            event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"Oslo, then."}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#),
            event("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
            event("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Let me "}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"look."}}"#),
            event("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
            event("content_block_start", r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_01","name":"get_weather","input":{}}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":""}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\": \"Os"}}"#),
            event("content_block_delta", r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"lo\"}"}}"#),
            event("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
            event("message_delta", r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":89}}"#),
            event("message_stop", r#"{"type":"message_stop"}"#),
        ]
        .concat()
    }

    #[test]
    fn text_thinking_tool_use_usage_and_stop_reason() {
        let stream = tool_stream();
        // Split anywhere, the events read the same.
        for cut in (1..stream.len()).step_by(7) {
            if !stream.is_char_boundary(cut) {
                continue;
            }
            let mut reader = MessagesReader::default();
            let mut chunks = reader.feed(&stream.as_bytes()[..cut]).unwrap();
            chunks.extend(reader.feed(&stream.as_bytes()[cut..]).unwrap());
            let text: String = chunks
                .iter()
                .filter_map(|c| match c {
                    Chunk::Text(t) => Some(t.as_str()),
                    _ => None,
                })
                .collect();
            assert_eq!(text, "Let me look.", "cut at {cut}");
            assert!(chunks.contains(&Chunk::Reasoning("Oslo, then.".into())));
            assert_eq!(
                chunks.iter().rev().find_map(|c| match c {
                    Chunk::Usage(u) => Some(*u),
                    _ => None,
                }),
                Some(Usage {
                    input_tokens: 30,
                    output_tokens: 89
                })
            );
            assert_eq!(chunks.last(), Some(&Chunk::Done));
            assert!(reader.is_done());
            assert_eq!(
                reader.tool_calls(),
                [ToolCall::new(
                    "toolu_01",
                    "get_weather",
                    r#"{"city": "Oslo"}"#
                )]
            );
            assert_eq!(reader.finish_reason(), Some(FinishReason::ToolCalls));
        }
    }

    #[test]
    fn an_error_event_is_a_fault_and_nothing_after_the_stop_counts() {
        let mut reader = MessagesReader::default();
        reader
            .feed(event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"a"}}"#).as_bytes())
            .unwrap();
        let error =
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            reader.feed(event("error", error).as_bytes()),
            Err(StreamFault::ErrorEvent(error.to_string()))
        );
        let mut reader = MessagesReader::default();
        let chunks = reader
            .feed(
                [
                    event("message_stop", r#"{"type":"message_stop"}"#),
                    event("content_block_delta", r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"late"}}"#),
                ]
                .concat()
                .as_bytes(),
            )
            .unwrap();
        assert_eq!(chunks, [Chunk::Done]);
        assert!(matches!(
            MessagesReader::default().feed(b"data: {nope\n\n"),
            Err(StreamFault::NotJson(_))
        ));
    }

    #[test]
    fn a_tool_call_without_fragments_keeps_its_input_and_hostile_indexes_are_dropped() {
        let mut reader = MessagesReader::default();
        reader
            .feed(
                [
                    event("content_block_start", r#"{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"toolu_a","name":"now","input":{}}}"#),
                    event("content_block_start", r#"{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"","name":"f","input":{"x":1}}}"#),
                    event("content_block_start", r#"{"type":"content_block_start","index":99999999,"content_block":{"type":"tool_use","id":"t","name":"g","input":{}}}"#),
                    event("some_future_event", r#"{"type":"some_future_event"}"#),
                ]
                .concat()
                .as_bytes(),
            )
            .unwrap();
        assert_eq!(
            reader.tool_calls(),
            [
                ToolCall::new("toolu_a", "now", "{}"),
                ToolCall::new("toolu_1", "f", r#"{"x":1}"#)
            ]
        );
    }
}
