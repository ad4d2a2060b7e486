//! A mock Anthropic Messages API, enough for the real Claude Code CLI to run offline against it
//! (`ANTHROPIC_BASE_URL`): `POST /v1/messages` answered with the SSE events the CLI reads
//! (`message_start`, `content_block_start`, paced `content_block_delta`/`text_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`) or a whole message, and `HEAD /`.
//!
//! The CLI's main turn carries its own `tools`; its side calls (a title, ...) carry none. Main
//! turns get the scripted answers in order (the last one repeats); side calls a short text.

use crate::loopback::Loopback;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

struct Shared {
    answers: Mutex<VecDeque<String>>,
    last: Mutex<String>,
    chunks: usize,
    gap: Duration,
    /// Bodies of every `POST /v1/messages`, in order.
    requests: Mutex<Vec<Value>>,
    /// Main-turn streams the client closed before their end (a cut).
    abandoned: AtomicUsize,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
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
        let shared = Arc::new(Shared {
            answers: Mutex::new(answers.into_iter().map(Into::into).collect()),
            last: Mutex::new("OK".to_string()),
            chunks: chunks.max(1),
            gap,
            requests: Mutex::new(Vec::new()),
            abandoned: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/messages", post(messages))
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
            .filter(|b| is_main_turn(b))
            .cloned()
            .collect()
    }

    /// Main-turn streams the client closed before their end.
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

async fn messages(State(shared): State<Arc<Shared>>, body: Bytes) -> Response {
    let request: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    lock(&shared.requests).push(request.clone());
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
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(chunks).max(1);
    let mut events: VecDeque<(String, Value)> = VecDeque::new();
    events.push_back((
        "message_start".into(),
        json!({"type": "message_start", "message": {
        "id": "msg_mock", "type": "message", "role": "assistant", "model": model,
        "content": [], "stop_reason": null, "stop_sequence": null,
        "usage": {"input_tokens": 10, "output_tokens": 1}}}),
    ));
    events.push_back((
        "content_block_start".into(),
        json!({"type": "content_block_start",
        "index": 0, "content_block": {"type": "text", "text": ""}}),
    ));
    for piece in chars.chunks(per) {
        events.push_back((
            "content_block_delta".into(),
            json!({"type": "content_block_delta",
            "index": 0, "delta": {"type": "text_delta", "text": piece.iter().collect::<String>()}}),
        ));
    }
    events.push_back((
        "content_block_stop".into(),
        json!({"type": "content_block_stop", "index": 0}),
    ));
    events.push_back((
        "message_delta".into(),
        json!({"type": "message_delta",
        "delta": {"stop_reason": "end_turn", "stop_sequence": null},
        "usage": {"output_tokens": chars.len().div_ceil(4)}}),
    ));
    events.push_back(("message_stop".into(), json!({"type": "message_stop"})));
    let guard = Abandoned {
        shared: main.then(|| Arc::clone(&shared)),
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
