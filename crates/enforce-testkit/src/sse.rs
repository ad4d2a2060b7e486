//! A client-side Server-Sent Events parser, as the WHATWG spec describes it and as openai-python
//! and Open WebUI read a stream: events end at a blank line, `data:` lines of one event join
//! with `\n`, one space after the colon is stripped, `:` lines are comments, other fields
//! (`event:`, `id:`, `retry:`) are kept but ignored by OpenAI clients.
//!
//! [`parse_sse`] is the spec-level parser (never panics); [`ParsedStream`] builds on it for
//! assertions on chat-completion streams (it panics on malformed JSON, as a test should).
//!
//! ```
//! use enforce_testkit::sse::ParsedStream;
//! let raw = ": keepalive\n\ndata: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
//! let stream = ParsedStream::parse(raw);
//! assert_eq!(stream.openai_result(), Ok("Hi".to_string()));
//! assert_eq!(stream.comments, 1);
//! ```

use serde_json::Value;

/// One dispatched event.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseEvent {
    /// The `event:` field, when present.
    pub event: Option<String>,
    /// The `data:` lines, joined with `\n`.
    pub data: String,
    /// The `id:` field, when present.
    pub id: Option<String>,
}

/// Everything a stream held: its events and its comments (keep-alives).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SseStream {
    /// Dispatched events, in order (an event without a `data:` line is not dispatched).
    pub events: Vec<SseEvent>,
    /// Comment lines without the leading `:`.
    pub comments: Vec<String>,
    /// Whether the text ended inside an event (no blank line after its last field): a client
    /// drops such an event.
    pub torn_tail: bool,
}

/// Parses a whole SSE body. Lines end at `\r\n`, `\n` or `\r`. Never panics.
///
/// ```
/// use enforce_testkit::sse::parse_sse;
///
/// let stream = parse_sse(": keepalive\n\ndata: {\"a\":1}\n\ndata: [DONE]\n\n");
/// assert_eq!(stream.comments, vec![" keepalive".to_string()]);
/// assert_eq!(stream.events.len(), 2);
/// assert_eq!(stream.events[1].data, "[DONE]");
/// ```
pub fn parse_sse(text: &str) -> SseStream {
    let mut out = SseStream::default();
    // As the spec does it: every data line appends value + "\n"; the last "\n" goes at dispatch.
    let mut data = String::new();
    let mut event: Option<String> = None;
    let mut id: Option<String> = None;
    let mut pending = false;
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut rest = text;
    loop {
        let (line, next, terminated) = match rest.find(['\r', '\n']) {
            Some(i) => {
                let skip = if rest[i..].starts_with("\r\n") { 2 } else { 1 };
                (&rest[..i], &rest[i + skip..], true)
            }
            None => (rest, "", false),
        };
        if !terminated && line.is_empty() {
            break;
        }
        if line.is_empty() {
            if !data.is_empty() {
                data.pop();
                out.events.push(SseEvent {
                    event: event.take(),
                    data: std::mem::take(&mut data),
                    id: id.clone(),
                });
            }
            event = None;
            pending = false;
        } else if let Some(comment) = line.strip_prefix(':') {
            out.comments.push(comment.to_string());
        } else {
            let (field, value) = match line.split_once(':') {
                Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                None => (line, ""),
            };
            pending = true;
            match field {
                "data" => {
                    data.push_str(value);
                    data.push('\n');
                }
                "event" => event = Some(value.to_string()),
                "id" if !value.contains('\0') => id = Some(value.to_string()),
                _ => {}
            }
        }
        if !terminated {
            break;
        }
        rest = next;
    }
    out.torn_tail = pending;
    out
}

/// A server-sent event stream read the way openai-python and Open WebUI read it: only `data:`
/// lines count (joined per event), `:` comments are counted and ignored, `[DONE]` ends it.
#[derive(Debug, Default)]
pub struct ParsedStream {
    /// Every JSON `data:` payload, in order.
    pub events: Vec<Value>,
    /// `data: [DONE]` was seen (and was the last data line).
    pub done_last: bool,
    /// Raw `:` comment lines seen (clients ignore them).
    pub comments: usize,
}

impl ParsedStream {
    /// Parses a whole stream body. Panics (it is a test helper) when a data payload is not JSON
    /// or data follows `[DONE]`.
    pub fn parse(raw: &str) -> ParsedStream {
        let sse = parse_sse(raw);
        let mut out = ParsedStream {
            comments: sse.comments.len(),
            ..ParsedStream::default()
        };
        for event in sse.events {
            assert!(!out.done_last, "data after [DONE]: {raw}");
            if event.data == "[DONE]" {
                out.done_last = true;
            } else {
                out.events
                    .push(serde_json::from_str(&event.data).expect("each data payload is JSON"));
            }
        }
        out
    }

    /// An error chunk as Open WebUI and openai-python see it: `error` and no (or empty)
    /// `choices`.
    pub fn error(&self) -> Option<&Value> {
        self.events.iter().find_map(|e| {
            let no_choices = e
                .get("choices")
                .is_none_or(|c| c.as_array().is_some_and(|a| a.is_empty()) || c.is_null());
            (no_choices && e.get("error").is_some()).then(|| &e["error"])
        })
    }

    /// The concatenated `delta.content` of all chunks.
    pub fn content(&self) -> String {
        self.events
            .iter()
            .filter_map(|e| e["choices"][0]["delta"]["content"].as_str())
            .collect()
    }

    /// The tool calls streamed as `delta.tool_calls`, assembled the way openai-python's
    /// stream helpers do: by `index`, id and name from the first fragment, arguments
    /// concatenated. `(id, name, arguments)` in index order.
    pub fn tool_calls(&self) -> Vec<(String, String, String)> {
        let mut calls: Vec<(String, String, String)> = Vec::new();
        for e in &self.events {
            let Some(fragments) = e["choices"][0]["delta"]["tool_calls"].as_array() else {
                continue;
            };
            for f in fragments {
                let index = f["index"].as_u64().unwrap_or(0) as usize;
                while calls.len() <= index {
                    calls.push(Default::default());
                }
                let call = &mut calls[index];
                if let Some(id) = f["id"].as_str() {
                    call.0 = id.to_string();
                }
                if let Some(name) = f["function"]["name"].as_str() {
                    call.1.push_str(name);
                }
                if let Some(arguments) = f["function"]["arguments"].as_str() {
                    call.2.push_str(arguments);
                }
            }
        }
        calls
    }

    /// The `finish_reason` of the chunk that has one.
    pub fn finish_reason(&self) -> Option<&str> {
        self.events
            .iter()
            .find_map(|e| e["choices"][0]["finish_reason"].as_str())
    }

    /// The `chat.completion.chunk` events.
    pub fn chunks(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e["object"] == "chat.completion.chunk")
            .collect()
    }

    /// The Open WebUI custom events (`{"event": ...}`).
    pub fn status_events(&self) -> Vec<&Value> {
        self.events
            .iter()
            .filter(|e| e.get("event").is_some())
            .collect()
    }

    /// What an openai-python loop yields: the content, or the APIError it raises.
    pub fn openai_result(&self) -> Result<String, String> {
        let mut text = String::new();
        for e in &self.events {
            if e.get("event").is_some() {
                // Not an OpenAI chunk; openai-python would choke, so these must be opt-in.
                return Err("unexpected non-chunk event".into());
            }
            if let Some(err) = e.get("error") {
                return Err(err["message"].as_str().unwrap_or("").to_string());
            }
            if let Some(c) = e["choices"][0]["delta"]["content"].as_str() {
                text.push_str(c);
            }
        }
        if !self.done_last {
            return Err("stream ended without [DONE]".into());
        }
        Ok(text)
    }
}
