//! Server-sent events as model servers send them: [`SseFramer`] splits a byte stream into
//! events (`data:` lines, blank-line separated, `:` comments); [`SseReader`] reads OpenAI-style
//! `chat.completion.chunk` JSON from them, as OpenAI, Ollama, vLLM and llama.cpp send it, quirks
//! included. The Anthropic Messages reader (`anthropic_events.rs`) reads the same frames.

use enforce_core::{runner::FinishReason, runner::ToolCall, Usage};
use serde_json::Value;

/// A stream that cannot go on.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum StreamFault {
    /// The server reported an error mid-stream; the event's data as sent.
    ErrorEvent(String),
    /// An event is not JSON, or not what the wire format allows; what was wrong.
    NotJson(String),
}

/// One thing an event said.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Chunk {
    /// More answer text.
    Text(String),
    /// More of the model's own reasoning (`reasoning_content`, or `reasoning` as some servers
    /// name it; Anthropic's `thinking` blocks).
    Reasoning(String),
    /// Token counts (the usage chunk, or usage on a finish chunk).
    Usage(Usage),
    /// The end of the answer (`data: [DONE]`, Anthropic's `message_stop`).
    Done,
}

/// Reads the events of one streamed answer: what the shared stream driver
/// (`http::Streaming`) needs of a wire format.
pub(crate) trait EventReader: Default + Send {
    /// What ends a complete stream, named in the error of a stream that stops before it.
    const END: &'static str;
    /// The reader's framer.
    fn framer(&mut self) -> &mut SseFramer;
    /// The end was read: nothing after it counts.
    fn is_done(&self) -> bool;
    /// Reads one event's data into `out`.
    fn event(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault>;

    /// Reads `bytes`; returns what the complete events in them said, or why the stream cannot
    /// go on.
    fn feed(&mut self, bytes: &[u8]) -> Result<Vec<Chunk>, StreamFault> {
        let frames = self.framer().feed(bytes);
        let mut out = Vec::new();
        for frame in frames {
            if self.is_done() {
                break;
            }
            match frame {
                Frame::Data(data) => self.event(&data, &mut out)?,
                Frame::Error(value) => return Err(StreamFault::ErrorEvent(value)),
            }
        }
        Ok(out)
    }
    /// The tool calls assembled so far, in order.
    fn tool_calls(&self) -> Vec<ToolCall>;
    /// Why the model stopped, once an event said so.
    fn finish_reason(&self) -> Option<FinishReason>;
}

/// One complete event.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Frame {
    /// The event's `data:` lines, joined with `\n`.
    Data(String),
    /// An `error:` field, which old llama.cpp builds send for a mid-stream error.
    Error(String),
}

/// Splits a byte stream into SSE events. Feed it bytes as they arrive; it keeps an incomplete
/// line for the next feed. `event:`, `id:` and `retry:` are ignored: in both wire formats read
/// here the data names its own type.
#[derive(Debug, Default)]
pub(crate) struct SseFramer {
    /// Bytes of a line not yet ended.
    line: Vec<u8>,
    /// `data:` lines of the event being read, joined with `\n`.
    data: String,
    has_data: bool,
}

impl SseFramer {
    /// The events that `bytes` complete, in order.
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> Vec<Frame> {
        let mut out = Vec::new();
        for &b in bytes {
            if b != b'\n' {
                self.line.push(b);
                continue;
            }
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.line_done(&line, &mut out);
        }
        out
    }

    fn line_done(&mut self, line: &[u8], out: &mut Vec<Frame>) {
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                out.push(Frame::Data(std::mem::take(&mut self.data)));
            }
            return;
        }
        let line = String::from_utf8_lossy(line);
        if line.starts_with(':') {
            return; // a comment (keep-alive)
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            "error" => out.push(Frame::Error(value.to_string())),
            _ => {} // event:, id:, retry:
        }
    }
}

/// One tool call being assembled from `delta.tool_calls` fragments.
#[derive(Debug, Default, Clone)]
struct PartialCall {
    id: String,
    name: String,
    arguments: String,
}

/// Reads OpenAI `chat.completion.chunk` events.
#[derive(Debug, Default)]
pub(crate) struct SseReader {
    framer: SseFramer,
    /// Tool calls by index, as the fragments build them.
    calls: Vec<PartialCall>,
    /// `[DONE]` was read: anything after it is ignored.
    done: bool,
    /// The first choice's `finish_reason`, once a chunk carried one.
    finish_reason: Option<FinishReason>,
}

impl EventReader for SseReader {
    const END: &'static str = "[DONE]";

    fn framer(&mut self) -> &mut SseFramer {
        &mut self.framer
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn event(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault> {
        self.event_done(data, out)
    }

    fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls
            .iter()
            .enumerate()
            .filter(|(_, c)| !c.name.is_empty())
            .map(|(i, c)| {
                let id = if c.id.is_empty() {
                    format!("call_{i}")
                } else {
                    c.id.clone()
                };
                ToolCall::new(id, c.name.clone(), c.arguments.clone())
            })
            .collect()
    }

    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }
}

impl SseReader {
    fn event_done(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault> {
        let data = data.trim();
        if data == "[DONE]" {
            self.done = true;
            out.push(Chunk::Done);
            return Ok(());
        }
        let chunk: Value = serde_json::from_str(data).map_err(|e| {
            StreamFault::NotJson(format!(
                "a stream event is not JSON ({e}): {}",
                crate::process::tail(data, 200)
            ))
        })?;
        // An error after the stream started: OpenAI's `{"error": {...}}` with no choices, vLLM's
        // old top-level `{"object": "error"}`.
        if chunk.get("error").is_some_and(|e| !e.is_null())
            || chunk.get("object").and_then(Value::as_str) == Some("error")
        {
            return Err(StreamFault::ErrorEvent(data.to_string()));
        }
        // `choices: null` (vLLM) is no choices.
        if let Some(choice) = chunk
            .get("choices")
            .and_then(Value::as_array)
            .and_then(|c| c.first())
        {
            if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
                self.finish_reason = Some(FinishReason::parse(reason));
            }
            let delta = choice.get("delta");
            let reasoning = delta.and_then(|d| {
                d.get("reasoning_content")
                    .or_else(|| d.get("reasoning"))
                    .and_then(Value::as_str)
            });
            if let Some(text) = reasoning.filter(|t| !t.is_empty()) {
                out.push(Chunk::Reasoning(text.to_string()));
            }
            if let Some(text) = delta.and_then(|d| d.get("content")).and_then(Value::as_str) {
                if !text.is_empty() {
                    out.push(Chunk::Text(text.to_string()));
                }
            }
            if let Some(fragments) = delta
                .and_then(|d| d.get("tool_calls"))
                .and_then(Value::as_array)
            {
                for (position, fragment) in fragments.iter().enumerate() {
                    self.tool_fragment(position, fragment);
                }
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| u.is_object()) {
            out.push(Chunk::Usage(Usage {
                input_tokens: usage
                    .get("prompt_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
                output_tokens: usage
                    .get("completion_tokens")
                    .and_then(Value::as_u64)
                    .unwrap_or(0),
            }));
        }
        Ok(())
    }

    fn tool_fragment(&mut self, position: usize, fragment: &Value) {
        // Servers that omit `index` send one call per fragment list position.
        let index = fragment
            .get("index")
            .and_then(Value::as_u64)
            .map_or(position, |i| i as usize);
        // A hostile index must not make us allocate: calls beyond a sane count are dropped.
        if index >= 128 {
            return;
        }
        if self.calls.len() <= index {
            self.calls.resize_with(index + 1, PartialCall::default);
        }
        let call = &mut self.calls[index];
        if let Some(id) = fragment.get("id").and_then(Value::as_str) {
            if !id.is_empty() {
                call.id = id.to_string();
            }
        }
        let function = fragment.get("function");
        if let Some(name) = function.and_then(|f| f.get("name")).and_then(Value::as_str) {
            call.name.push_str(name);
        }
        match function.and_then(|f| f.get("arguments")) {
            Some(Value::String(part)) => call.arguments.push_str(part),
            // Some servers send the arguments whole, as an object.
            Some(other @ Value::Object(_)) => call.arguments.push_str(&other.to_string()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(parts: &[&str]) -> (Vec<Chunk>, SseReader) {
        let mut reader = SseReader::default();
        let mut out = Vec::new();
        for p in parts {
            out.extend(reader.feed(p.as_bytes()).unwrap());
        }
        (out, reader)
    }

    fn text(chunks: &[Chunk]) -> String {
        chunks
            .iter()
            .filter_map(|c| match c {
                Chunk::Text(t) => Some(t.as_str()),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_finish_chunk_gives_the_finish_reason() {
        let stream = concat!(
            "data: {\"choices\":[{\"delta\":{\"content\":\"{\\\"a\\\": [1\"},\"finish_reason\":null}]}\n\n",
            "data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"length\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (chunks, reader) = read_all(&[stream]);
        assert_eq!(text(&chunks), "{\"a\": [1");
        assert_eq!(reader.finish_reason(), Some(FinishReason::Length));
    }

    #[test]
    fn events_split_anywhere_still_read_whole() {
        let stream = "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\n: keepalive\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"Hel\"}}]}\r\n\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"lo\"},\"finish_reason\":null}]}\n\nevent: x\nid: 3\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":2}}\n\ndata: [DONE]\n\n";
        for cut in 1..stream.len() {
            if !stream.is_char_boundary(cut) {
                continue;
            }
            let (chunks, reader) = read_all(&[&stream[..cut], &stream[cut..]]);
            assert_eq!(text(&chunks), "Hello", "cut at {cut}");
            assert_eq!(reader.finish_reason(), None, "`null` is no reason");
            assert!(chunks.contains(&Chunk::Usage(Usage {
                input_tokens: 3,
                output_tokens: 2
            })));
            assert_eq!(chunks.last(), Some(&Chunk::Done));
            assert!(reader.is_done());
        }
    }

    #[test]
    fn reasoning_is_told_apart_from_the_answer() {
        let (chunks, _) = read_all(&[
            "data: {\"choices\":[{\"delta\":{\"reasoning_content\":\"think\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"reasoning\":\"more\"}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"content\":\"answer\"}}]}\n\n",
        ]);
        assert_eq!(
            chunks,
            [
                Chunk::Reasoning("think".into()),
                Chunk::Reasoning("more".into()),
                Chunk::Text("answer".into())
            ]
        );
    }

    #[test]
    fn null_choices_and_multi_line_data() {
        let (chunks, _) = read_all(&[
            "data: {\"choices\":null}\n\n",
            "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"}}]}\n\n",
        ]);
        assert_eq!(text(&chunks), "x");
    }

    #[test]
    fn mid_stream_errors_in_every_shape() {
        for event in [
            "data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
            "data: {\"object\":\"error\",\"message\":\"overloaded\",\"type\":\"x\",\"code\":500}\n\n",
            "error: {\"message\":\"overloaded\"}\n\n",
        ] {
            let mut reader = SseReader::default();
            reader
                .feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\n\n")
                .unwrap();
            match reader.feed(event.as_bytes()) {
                Err(StreamFault::ErrorEvent(data)) => {
                    assert!(data.contains("overloaded"), "{data}")
                }
                other => panic!("{event}: {other:?}"),
            }
        }
        let mut reader = SseReader::default();
        assert!(matches!(
            reader.feed(b"data: {not json\n\n"),
            Err(StreamFault::NotJson(_))
        ));
    }

    #[test]
    fn tool_call_fragments_assemble_by_index() {
        let (chunks, reader) = read_all(&[
            "data: {\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"arguments\":\"\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"function\":{\"name\":\"now\",\"arguments\":\"{}\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"city\\\":\"}}]}}]}\n\n",
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"\\\"Oslo\\\"}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n",
            "data: [DONE]\n\n",
        ]);
        assert_eq!(text(&chunks), "");
        assert_eq!(
            reader.tool_calls(),
            [
                ToolCall::new("call_a", "get_weather", r#"{"city":"Oslo"}"#),
                ToolCall::new("call_b", "now", "{}"),
            ]
        );
        let (_, reader) = read_all(&[
            "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":99999999,\"function\":{\"name\":\"x\"}}]}}]}\n\n",
        ]);
        assert!(reader.tool_calls().is_empty());
    }

    #[test]
    fn nothing_after_done_counts() {
        let (chunks, _) = read_all(&[
            "data: [DONE]\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"late\"}}]}\n\n",
        ]);
        assert_eq!(chunks, [Chunk::Done]);
    }
}
