//! A mock Anthropic Messages API, enough for the real Claude Code CLI to run offline against it
//! (`ANTHROPIC_BASE_URL`): `POST /v1/messages` answered with the SSE events the CLI reads
//! (`message_start`, `content_block_start`, paced `content_block_delta`/`text_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`) or a whole message, and `HEAD /`.
//!
//! The CLI's main turn carries its own `tools`; its side calls (a title, ...) carry none. Main
//! turns get the scripted answers in order (the last one repeats); side calls a short text.
//!
//! [`MockAnthropic::scripted`] answers every request from a script of [`AnthropicReply`]s
//! instead: text, `tool_use` (streamed as `input_json_delta` fragments), `thinking`, HTTP
//! errors in Anthropic's shape (`{"type":"error","error":{"type","message"}}`, `retry-after`),
//! an `error` event mid-stream, a stream that stops before `message_stop`, delays. Every
//! request is recorded with its headers ([`MockAnthropic::requests`]).

use crate::loopback::Loopback;
use crate::mock_openai::{lock, pieces, RecordedRequest};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer of [`MockAnthropic::scripted`].
#[derive(Debug, Clone)]
pub struct AnthropicReply {
    kind: ReplyKind,
    thinking: Option<String>,
    stop_reason: Option<String>,
    delay: Duration,
}

#[derive(Debug, Clone)]
enum ReplyKind {
    /// Text, then optionally one tool call (id, name, input JSON text as streamed).
    Answer {
        text: String,
        tool: Option<(String, String, String)>,
    },
    /// An HTTP error before any event.
    Error {
        status: u16,
        kind: String,
        message: String,
        retry_after: Option<String>,
    },
    /// `text` streamed, then an `error` event.
    ErrorEvent {
        text: String,
        kind: String,
        message: String,
    },
    /// `text` streamed, then the stream just ends (no `message_delta`, no `message_stop`).
    CutShort { text: String },
}

impl AnthropicReply {
    /// A text answer (`end_turn`).
    pub fn text(text: impl Into<String>) -> Self {
        Self::of(ReplyKind::Answer {
            text: text.into(),
            tool: None,
        })
    }

    /// `text` (may be empty) and one `tool_use` block whose input is `input_json` (streamed in
    /// fragments as written, so it may be broken JSON; whole, it is parsed, `{}` if broken);
    /// `stop_reason` `tool_use`.
    pub fn tool_use(
        text: impl Into<String>,
        id: impl Into<String>,
        name: impl Into<String>,
        input_json: impl Into<String>,
    ) -> Self {
        Self::of(ReplyKind::Answer {
            text: text.into(),
            tool: Some((id.into(), name.into(), input_json.into())),
        })
        .stop_reason("tool_use")
    }

    /// An HTTP error with Anthropic's error body: `status`, error `type` `kind`, `message`.
    pub fn error(status: u16, kind: impl Into<String>, message: impl Into<String>) -> Self {
        Self::of(ReplyKind::Error {
            status,
            kind: kind.into(),
            message: message.into(),
            retry_after: None,
        })
    }

    /// 429 `rate_limit_error` with `retry-after: secs`.
    pub fn rate_limited(secs: u64) -> Self {
        Self::error(
            429,
            "rate_limit_error",
            "Number of requests has exceeded your rate limit",
        )
        .retry_after(secs)
    }

    /// This error reply with a `retry-after: secs` header (other replies are unchanged).
    pub fn retry_after(mut self, secs: u64) -> Self {
        if let ReplyKind::Error { retry_after, .. } = &mut self.kind {
            *retry_after = Some(secs.to_string());
        }
        self
    }

    /// A 200 stream that writes `text`, then an `error` event of type `kind`.
    pub fn error_event(
        text: impl Into<String>,
        kind: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self::of(ReplyKind::ErrorEvent {
            text: text.into(),
            kind: kind.into(),
            message: message.into(),
        })
    }

    /// A 200 stream that writes `text` and ends without `message_stop`.
    pub fn cut_short(text: impl Into<String>) -> Self {
        Self::of(ReplyKind::CutShort { text: text.into() })
    }

    /// A `thinking` block before the answer.
    pub fn with_thinking(mut self, thinking: impl Into<String>) -> Self {
        self.thinking = Some(thinking.into());
        self
    }

    /// The `stop_reason` (default `end_turn`, `tool_use` for [`tool_use`](Self::tool_use)).
    pub fn stop_reason(mut self, reason: impl Into<String>) -> Self {
        self.stop_reason = Some(reason.into());
        self
    }

    /// Waits `delay` before answering (the headers too).
    pub fn delayed(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    fn of(kind: ReplyKind) -> Self {
        AnthropicReply {
            kind,
            thinking: None,
            stop_reason: None,
            delay: Duration::ZERO,
        }
    }
}

/// Tokens the mock reports as sent: `input_tokens` plus the cache reads it also reports.
pub const MOCK_INPUT_TOKENS: u64 = 12;
/// Cache reads the mock reports besides [`MOCK_INPUT_TOKENS`].
pub const MOCK_CACHE_READ_TOKENS: u64 = 3;

/// Output tokens the mock reports for an answer: one per four characters of text and tool
/// input, at least one.
pub fn mock_output_tokens(text: &str, tool_input: &str) -> u64 {
    ((text.chars().count() + tool_input.chars().count()).div_ceil(4)).max(1) as u64
}

/// One request the mock received.
pub type RecordedMessages = RecordedRequest;

struct Shared {
    /// The script of [`MockAnthropic::scripted`], which answers every request.
    script: Option<Mutex<(VecDeque<AnthropicReply>, Option<AnthropicReply>)>>,
    answers: Mutex<VecDeque<String>>,
    last: Mutex<String>,
    chunks: usize,
    gap: Duration,
    /// Every `POST /v1/messages`, in order.
    requests: Mutex<Vec<RecordedMessages>>,
    /// Main-turn streams the client closed before their end (a cut).
    abandoned: AtomicUsize,
    /// Every `POST /v1/messages/count_tokens` body, in order.
    counted: Mutex<Vec<Value>>,
}

/// A running mock; it stops when dropped.
pub struct MockAnthropic {
    server: Loopback,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockAnthropic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockAnthropic")
            .field("addr", &self.server.addr())
            .finish()
    }
}

impl MockAnthropic {
    /// Serves `answers` to main turns, each streamed in `chunks` deltas `gap` apart, on
    /// `127.0.0.1` at a free port.
    pub async fn start(
        answers: impl IntoIterator<Item = impl Into<String>>,
        chunks: usize,
        gap: Duration,
    ) -> std::io::Result<MockAnthropic> {
        let answers = answers.into_iter().map(Into::into).collect();
        Self::serve(None, answers, chunks, gap).await
    }

    /// Answers every request with the next of `replies` (the last one repeats), streamed in
    /// `chunks` text deltas `gap` apart when the request asks for a stream.
    pub async fn scripted(
        replies: impl IntoIterator<Item = AnthropicReply>,
        chunks: usize,
        gap: Duration,
    ) -> std::io::Result<MockAnthropic> {
        let script = Some(Mutex::new((replies.into_iter().collect(), None)));
        Self::serve(script, VecDeque::new(), chunks, gap).await
    }

    async fn serve(
        script: Option<Mutex<(VecDeque<AnthropicReply>, Option<AnthropicReply>)>>,
        answers: VecDeque<String>,
        chunks: usize,
        gap: Duration,
    ) -> std::io::Result<MockAnthropic> {
        let shared = Arc::new(Shared {
            script,
            answers: Mutex::new(answers),
            last: Mutex::new("OK".to_string()),
            chunks: chunks.max(1),
            gap,
            requests: Mutex::new(Vec::new()),
            abandoned: AtomicUsize::new(0),
            counted: Mutex::new(Vec::new()),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
            .route("/v1/messages/count_tokens", post(count_tokens))
            .route("/", axum::routing::any(|| async { StatusCode::OK }))
            .fallback(|| async { (StatusCode::NOT_FOUND, "not on the mock") })
            .with_state(Arc::clone(&shared));
        Ok(MockAnthropic {
            server: Loopback::serve(app, "mock Anthropic server").await?,
            shared,
        })
    }

    /// The base URL for `ANTHROPIC_BASE_URL`.
    pub fn url(&self) -> String {
        format!("http://{}", self.server.addr())
    }

    /// The main-turn requests (those that carry `tools`), in order.
    pub fn main_turns(&self) -> Vec<Value> {
        lock(&self.shared.requests)
            .iter()
            .filter(|r| is_main_turn(&r.body))
            .map(|r| r.body.clone())
            .collect()
    }

    /// Every request, in order.
    pub fn requests(&self) -> Vec<RecordedMessages> {
        lock(&self.shared.requests).clone()
    }

    /// Every `count_tokens` request body, in order.
    pub fn count_requests(&self) -> Vec<Value> {
        lock(&self.shared.counted).clone()
    }

    /// Main-turn streams (with a script: any streams) the client closed before their end.
    pub fn abandoned_streams(&self) -> usize {
        self.shared.abandoned.load(Ordering::SeqCst)
    }
}

fn is_main_turn(body: &Value) -> bool {
    body.get("tools")
        .and_then(Value::as_array)
        .is_some_and(|t| !t.is_empty())
}

/// The text of the last user message of a request body (string or text blocks).
pub fn last_user_text(body: &Value) -> String {
    let Some(message) = body
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| ms.iter().rev().find(|m| m["role"] == "user"))
    else {
        return String::new();
    };
    match &message["content"] {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| b.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The fields `count_tokens` takes; the API refuses any other (`max_tokens`, `stream`, ...).
const COUNTED_FIELDS: [&str; 6] = [
    "model",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "thinking",
];

/// `POST /v1/messages/count_tokens`: `input_tokens` is the length of the JSON of `system`,
/// `messages` and `tools` divided by 4 (the mock's own tokenizer); a field the API does not
/// take there is a 400, as the API answers it.
async fn count_tokens(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&shared.counted).push(request.clone());
    let extra = request.as_object().and_then(|o| {
        o.keys()
            .find(|k| !COUNTED_FIELDS.contains(&k.as_str()))
            .cloned()
    });
    if let Some(field) = extra {
        let body = json!({"type": "error", "error": {"type": "invalid_request_error",
                          "message": format!("{field}: Extra inputs are not permitted")}});
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let counted: usize = ["system", "messages", "tools"]
        .iter()
        .filter_map(|k| request.get(*k))
        .map(|v| v.to_string().len())
        .sum();
    axum::Json(json!({"input_tokens": counted / 4})).into_response()
}

async fn messages(State(shared): State<Arc<Shared>>, headers: HeaderMap, body: Bytes) -> Response {
    let recorded = RecordedRequest::new("POST", "/v1/messages", &headers, &body);
    let request = recorded.body.clone();
    lock(&shared.requests).push(recorded);
    if let Some(script) = &shared.script {
        let reply = {
            let mut script = lock(script);
            match script.0.pop_front() {
                Some(next) => {
                    script.1 = Some(next.clone());
                    Some(next)
                }
                None => script.1.clone(),
            }
        };
        let reply = reply.unwrap_or_else(|| AnthropicReply::text("OK"));
        return scripted_reply(&shared, &request, reply).await;
    }
    let main = is_main_turn(&request);
    let text = if main {
        let next = lock(&shared.answers).pop_front();
        match next {
            Some(answer) => {
                *lock(&shared.last) = answer.clone();
                answer
            }
            None => lock(&shared.last).clone(),
        }
    } else {
        "Checked answer".to_string()
    };
    let model = request["model"]
        .as_str()
        .unwrap_or("claude-mock")
        .to_string();
    if request["stream"] != true {
        return axum::Json(json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn", "stop_sequence": null,
            "usage": {"input_tokens": 10, "output_tokens": 5}}))
        .into_response();
    }
    let chunks = if main { shared.chunks } else { 1 };
    let gap = if main { shared.gap } else { Duration::ZERO };
    let mut events: VecDeque<(String, Value)> = VecDeque::new();
    events.push_back((
        "message_start".into(),
        json!({"type": "message_start", "message": {
        "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ));
    events.push_back(block_start(0, json!({"type": "text", "text": ""})));
    for piece in pieces(&text, chunks) {
        events.push_back(block_delta(0, json!({"type": "text_delta", "text": piece})));
    }
    events.push_back(block_stop(0));
    events.push_back((
        "message_delta".into(),
        json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": null},
        "usage": {"output_tokens": text.chars().count().div_ceil(4)}}),
    ));
    events.push_back(("message_stop".into(), json!({"type": "message_stop"})));
    sse_response(events, gap, main.then(|| Arc::clone(&shared)))
}

/// The answer to one request of a scripted mock.
async fn scripted_reply(shared: &Arc<Shared>, request: &Value, reply: AnthropicReply) -> Response {
    if !reply.delay.is_zero() {
        tokio::time::sleep(reply.delay).await;
    }
    let model = request["model"]
        .as_str()
        .unwrap_or("claude-mock")
        .to_string();
    let (text, tool) = match reply.kind {
        ReplyKind::Error {
            status,
            kind,
            message,
            retry_after,
        } => {
            let body = json!({"type": "error", "error": {"type": kind, "message": message},
                              "request_id": "req_mock"});
            let mut response = (
                StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR),
                axum::Json(body),
            )
                .into_response();
            if let Some(secs) = retry_after.and_then(|s| HeaderValue::from_str(&s).ok()) {
                response.headers_mut().insert("retry-after", secs);
            }
            return response;
        }
        ReplyKind::Answer { ref text, ref tool } => (text.clone(), tool.clone()),
        ReplyKind::ErrorEvent { ref text, .. } | ReplyKind::CutShort { ref text } => {
            (text.clone(), None)
        }
    };
    let tool_input = tool.as_ref().map_or("", |(_, _, input)| input.as_str());
    let output_tokens = mock_output_tokens(&text, tool_input);
    let stop_reason = reply
        .stop_reason
        .clone()
        .unwrap_or_else(|| "end_turn".into());
    let usage = json!({"input_tokens": MOCK_INPUT_TOKENS,
                       "cache_read_input_tokens": MOCK_CACHE_READ_TOKENS,
                       "cache_creation_input_tokens": 0});
    if request["stream"] != true {
        let mut content = Vec::new();
        if let Some(thinking) = &reply.thinking {
            content.push(json!({"type": "thinking", "thinking": thinking, "signature": "sig"}));
        }
        if !text.is_empty() {
            content.push(json!({"type": "text", "text": text}));
        }
        if let Some((id, name, input)) = &tool {
            let input: Value = serde_json::from_str(input).unwrap_or_else(|_| json!({}));
            content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
        }
        let mut usage = usage;
        usage["output_tokens"] = json!(output_tokens);
        return axum::Json(json!({
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": usage}))
        .into_response();
    }
    let mut start_usage = usage;
    start_usage["output_tokens"] = json!(1);
    let mut events: VecDeque<(String, Value)> = VecDeque::new();
    events.push_back((
        "message_start".into(),
        json!({"type": "message_start", "message": {
            "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": start_usage}}),
    ));
    events.push_back(("ping".into(), json!({"type": "ping"})));
    let mut index = 0;
    if let Some(thinking) = &reply.thinking {
        events.push_back(block_start(
            index,
            json!({"type": "thinking", "thinking": ""}),
        ));
        events.push_back(block_delta(
            index,
            json!({"type": "thinking_delta", "thinking": thinking}),
        ));
        events.push_back(block_delta(
            index,
            json!({"type": "signature_delta", "signature": "sig"}),
        ));
        events.push_back(block_stop(index));
        index += 1;
    }
    if !text.is_empty() {
        events.push_back(block_start(index, json!({"type": "text", "text": ""})));
        for piece in pieces(&text, shared.chunks) {
            events.push_back(block_delta(
                index,
                json!({"type": "text_delta", "text": piece}),
            ));
        }
        events.push_back(block_stop(index));
        index += 1;
    }
    match reply.kind {
        ReplyKind::ErrorEvent { kind, message, .. } => {
            events.push_back((
                "error".into(),
                json!({"type": "error", "error": {"type": kind, "message": message}}),
            ));
        }
        ReplyKind::CutShort { .. } => {}
        _ => {
            if let Some((id, name, input)) = &tool {
                events.push_back(block_start(
                    index,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
                for piece in pieces(input, 3) {
                    events.push_back(block_delta(
                        index,
                        json!({"type": "input_json_delta", "partial_json": piece}),
                    ));
                }
                events.push_back(block_stop(index));
            }
            events.push_back((
                "message_delta".into(),
                json!({"type": "message_delta",
                       "delta": {"stop_reason": stop_reason, "stop_sequence": null},
                       "usage": {"output_tokens": output_tokens}}),
            ));
            events.push_back(("message_stop".into(), json!({"type": "message_stop"})));
        }
    }
    sse_response(events, shared.gap, Some(Arc::clone(shared)))
}

fn block_start(index: usize, block: Value) -> (String, Value) {
    (
        "content_block_start".into(),
        json!({"type": "content_block_start", "index": index, "content_block": block}),
    )
}

fn block_delta(index: usize, delta: Value) -> (String, Value) {
    (
        "content_block_delta".into(),
        json!({"type": "content_block_delta", "index": index, "delta": delta}),
    )
}

fn block_stop(index: usize) -> (String, Value) {
    (
        "content_block_stop".into(),
        json!({"type": "content_block_stop", "index": index}),
    )
}

/// `events` as an SSE response, each text delta after the first `gap` later; a stream dropped
/// before its last event counts as abandoned (when `shared` is given).
fn sse_response(
    events: VecDeque<(String, Value)>,
    gap: Duration,
    shared: Option<Arc<Shared>>,
) -> Response {
    let guard = Abandoned {
        shared,
        finished: false,
    };
    let stream = futures_util::stream::unfold(
        (events, true, guard),
        move |(mut events, first, mut guard)| async move {
            let (name, data) = events.pop_front()?;
            if !first && !gap.is_zero() && name == "content_block_delta" {
                tokio::time::sleep(gap).await;
            }
            if events.is_empty() {
                guard.finished = true;
            }
            let frame = Bytes::from(format!("event: {name}\ndata: {data}\n\n"));
            Some((Ok::<_, std::io::Error>(frame), (events, false, guard)))
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response
}

/// Counts a main-turn stream dropped before its last event.
struct Abandoned {
    shared: Option<Arc<Shared>>,
    finished: bool,
}

impl Drop for Abandoned {
    fn drop(&mut self) {
        if let (false, Some(shared)) = (self.finished, &self.shared) {
            shared.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}
