//! Reading an SSE chat-completions stream as a client does, for assertions in tests.
//!
//! ```
//! use enforce_testkit::sse::ParsedStream;
//! let raw = ": keepalive\n\ndata: {\"object\":\"chat.completion.chunk\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n";
//! let stream = ParsedStream::parse(raw);
//! assert_eq!(stream.openai_result(), Ok("Hi".to_string()));
//! assert_eq!(stream.comments, 1);
//! ```

use serde_json::Value;

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
        let mut out = ParsedStream::default();
        for event in raw.split("\n\n") {
            let mut data: Vec<&str> = Vec::new();
            for line in event.lines() {
                if line.starts_with(':') {
                    out.comments += 1;
                } else if let Some(rest) = line.strip_prefix("data:") {
                    data.push(rest.strip_prefix(' ').unwrap_or(rest));
                }
            }
            if data.is_empty() {
                continue;
            }
            assert!(!out.done_last, "data after [DONE]: {raw}");
            let payload = data.join("\n");
            if payload == "[DONE]" {
                out.done_last = true;
            } else {
                out.events
                    .push(serde_json::from_str(&payload).expect("each data line is JSON"));
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
