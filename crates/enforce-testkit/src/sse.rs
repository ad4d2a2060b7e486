//! A client-side Server-Sent Events parser, as the WHATWG spec describes it and as openai-python
//! and Open WebUI read a stream: events end at a blank line, `data:` lines of one event join
//! with `\n`, one space after the colon is stripped, `:` lines are comments, other fields
//! (`event:`, `id:`, `retry:`) are kept but ignored by OpenAI clients.

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
