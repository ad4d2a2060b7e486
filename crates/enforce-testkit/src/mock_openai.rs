//! An in-process OpenAI-compatible server with scripted replies and faults: [`MockOpenAi`].
//!
//! Besides chat completions it serves `POST /v1/embeddings` with deterministic bag-of-words
//! vectors ([`bag_of_words_embedding`]: texts sharing words score higher), and faults for it
//! ([`EmbeddingsFault`]).

use crate::loopback::Loopback;
use axum::body::{Body, Bytes};
use axum::extract::Request;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Which server's error body to imitate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorShape {
    /// OpenAI (and Ollama's `/v1`): `{"error": {"message", "type", "param", "code"}}`.
    OpenAi,
    /// Ollama's native form: `{"error": "message"}`.
    OllamaString,
    /// vLLM before 0.10.1: top-level `{"object": "error", "message", "type", "param", "code"}`.
    VllmTopLevel,
    /// llama.cpp server: `{"error": {"code": 500, "message", "type"}}`.
    LlamaCpp,
}

impl ErrorShape {
    /// The error body for `status` and `message`.
    pub fn body(self, status: u16, message: &str) -> Value {
        let kind = if status >= 500 {
            "server_error"
        } else {
            "invalid_request_error"
        };
        match self {
            ErrorShape::OpenAi => json!({"error": {
                "message": message, "type": kind, "param": null, "code": null}}),
            ErrorShape::OllamaString => json!({"error": message}),
            ErrorShape::VllmTopLevel => json!({
                "object": "error", "message": message, "type": "BadRequestError",
                "param": null, "code": status}),
            ErrorShape::LlamaCpp => json!({"error": {
                "code": status, "message": message, "type": kind}}),
        }
    }
}

/// One scripted answer.
///
/// Reply texts may hold placeholders: `{{last_user}}` becomes the last user message, `{{token}}`
/// the per-request token (the `XYZ` of the first `[token:XYZ]` in any message).
#[derive(Debug, Clone, PartialEq)]
pub enum MockReply {
    /// A 200 chat completion (streamed as SSE when the request asks for `stream: true`).
    Text(String),
    /// Any status with a raw body and an optional `Retry-After` header.
    Status {
        /// HTTP status.
        status: u16,
        /// The body, sent as it is.
        body: String,
        /// The `Retry-After` header.
        retry_after: Option<String>,
    },
    /// An error in one of the servers' shapes.
    Error {
        /// Whose shape.
        shape: ErrorShape,
        /// HTTP status.
        status: u16,
        /// The message.
        message: String,
        /// The `Retry-After` header.
        retry_after: Option<String>,
    },
    /// A 200 whose body is not a chat completion.
    Garbage(String),
    /// Waits, then answers.
    Delayed(Duration, Box<MockReply>),
    /// A 200 answer with the model's own reasoning first (`reasoning_content` deltas when
    /// streamed, `message.reasoning_content` when not), then the text.
    Reasoning {
        /// The reasoning.
        reasoning: String,
        /// The answer.
        text: String,
    },
    /// A 200 answer calling tools, with an optional text (streamed as `delta.tool_calls`
    /// chunks: id and name first, then the arguments in pieces, when the request streams).
    ToolCalls {
        /// Text beside the calls (`None`: `content: null`).
        text: Option<String>,
        /// `(id, name, arguments)` of each call.
        calls: Vec<(String, String, String)>,
    },
    /// A 200 answer cut at the token limit: `finish_reason: "length"` (in the completion, or
    /// in the finish chunk of the stream).
    Truncated(String),
    /// A stream that sends `after_chunks` content chunks of `text` and then breaks off: no
    /// finish chunk, no `[DONE]`, the connection is aborted.
    StreamCut {
        /// The text whose first chunks are sent.
        text: String,
        /// How many content chunks get through.
        after_chunks: usize,
    },
    /// A stream that sends `after_chunks` content chunks, then an error chunk (no `choices`)
    /// and `[DONE]`, as OpenAI does for an error after the stream started.
    StreamError {
        /// The text whose first chunks are sent.
        text: String,
        /// How many content chunks get through.
        after_chunks: usize,
        /// The error message.
        message: String,
    },
}

impl MockReply {
    /// A 200 completion with this text.
    pub fn text(text: impl Into<String>) -> Self {
        MockReply::Text(text.into())
    }

    /// An error of this shape and status.
    pub fn error(shape: ErrorShape, status: u16, message: impl Into<String>) -> Self {
        MockReply::Error {
            shape,
            status,
            message: message.into(),
            retry_after: None,
        }
    }

    /// A 429 in OpenAI's shape with `Retry-After: <secs>`.
    pub fn rate_limited(retry_after_secs: u64) -> Self {
        MockReply::Error {
            shape: ErrorShape::OpenAi,
            status: 429,
            message: "Rate limit reached, retry later".to_string(),
            retry_after: Some(retry_after_secs.to_string()),
        }
    }

    /// This reply after `delay`.
    pub fn delayed(self, delay: Duration) -> Self {
        MockReply::Delayed(delay, Box::new(self))
    }

    /// An answer that only calls one tool.
    pub fn tool_call(id: &str, name: &str, arguments: &str) -> Self {
        MockReply::ToolCalls {
            text: None,
            calls: vec![(id.to_string(), name.to_string(), arguments.to_string())],
        }
    }
}

/// Default length of the mock's embedding vectors.
pub const DEFAULT_EMBEDDING_DIMENSIONS: usize = 64;

/// How the mock's `/v1/embeddings` fails.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmbeddingsFault {
    /// An error in OpenAI's shape with this status.
    Status(u16),
    /// Answers correctly after this delay.
    Delay(Duration),
    /// Answers one vector fewer than asked for.
    MissingVector,
    /// The last vector is one dimension shorter than the others.
    MixedDimensions,
}

/// The mock's embedding of `text`: each word (lowercased, letters and digits, three characters
/// or more, a few stop words left out) adds 1 to the dimension its FNV-1a hash picks, then the
/// vector is scaled to length 1. Texts sharing words have a higher cosine; a text without
/// words gets the first unit vector.
pub fn bag_of_words_embedding(text: &str, dimensions: usize) -> Vec<f32> {
    const STOP: [&str; 16] = [
        "the", "and", "for", "are", "was", "what", "how", "does", "with", "this", "that", "you",
        "your", "from", "which", "can",
    ];
    let dimensions = dimensions.max(1);
    let mut vector = vec![0f32; dimensions];
    let lower = text.to_lowercase();
    for word in lower
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(w))
    {
        let hash = word.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        });
        let slot = usize::try_from(hash % dimensions as u64).unwrap_or(0);
        vector[slot] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        vector[0] = 1.0;
    } else {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
    vector
}

/// How strictly the mock reads tool history in requests, like the servers it stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ToolHistory {
    /// Anything goes.
    #[default]
    Accept,
    /// As OpenAI: each assistant turn's `tool_calls` must be answered, each by a `tool` message
    /// with its `tool_call_id`, before any other message; a `tool` message must answer a call.
    /// Otherwise 400.
    OpenAi,
    /// As older Ollama and llama.cpp builds: a `tool` message or an assistant message with
    /// `content: null` is a 400.
    NoToolMessages,
}

/// What the server answers once the scripted replies are used up.
#[derive(Debug, Clone, PartialEq)]
pub enum Then {
    /// Repeat the last scripted reply (or echo, when there was none).
    RepeatLast,
    /// Answer with the last user message.
    Echo,
    /// Answer `invalid` until the last user message holds `marker` (i.e. the request carries
    /// the feedback), then `valid`. Both may use the placeholders.
    FailFirst {
        /// The answer to a first ask.
        invalid: String,
        /// The answer once feedback arrived.
        valid: String,
        /// What marks feedback in the last user message.
        marker: String,
    },
}

/// The script of a [`MockOpenAi`]: replies in order, then a fallback, and how to stream.
#[derive(Debug, Clone, PartialEq)]
pub struct MockScript {
    replies: VecDeque<MockReply>,
    then: Then,
    chunks: usize,
    chunk_gap: Duration,
    model: String,
    tool_history: ToolHistory,
    reject_stream_options: bool,
    pace_whole_answers: bool,
    embedding_dimensions: usize,
    embeddings_fault: Option<EmbeddingsFault>,
}

impl Default for MockScript {
    fn default() -> Self {
        MockScript {
            replies: VecDeque::new(),
            then: Then::RepeatLast,
            chunks: 4,
            chunk_gap: Duration::ZERO,
            model: "mock-model".to_string(),
            tool_history: ToolHistory::Accept,
            reject_stream_options: false,
            pace_whole_answers: false,
            embedding_dimensions: DEFAULT_EMBEDDING_DIMENSIONS,
            embeddings_fault: None,
        }
    }
}

impl MockScript {
    /// An empty script: echo every request.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a reply to the queue.
    pub fn reply(mut self, reply: MockReply) -> Self {
        self.replies.push_back(reply);
        self
    }

    /// Adds several replies.
    pub fn replies(mut self, replies: impl IntoIterator<Item = MockReply>) -> Self {
        self.replies.extend(replies);
        self
    }

    /// What to answer once the queue is empty.
    pub fn then(mut self, then: Then) -> Self {
        self.then = then;
        self
    }

    /// Streamed texts are split into `chunks` content chunks (at least 1), `gap` apart.
    pub fn stream_chunks(mut self, chunks: usize, gap: Duration) -> Self {
        self.chunks = chunks.max(1);
        self.chunk_gap = gap;
        self
    }

    /// The model name reported by `/v1/models` and in completions.
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = model.into();
        self
    }

    /// Answer a request carrying `stream_options` with a 400 naming it, as some servers do.
    pub fn reject_stream_options(mut self, reject: bool) -> Self {
        self.reject_stream_options = reject;
        self
    }

    /// A text answer asked for whole takes as long as its stream would (`chunks` × `gap`) and
    /// counts its chunks as generated, like a model that writes at the same pace either way
    /// (default: whole answers come at once).
    pub fn pace_whole_answers(mut self, pace: bool) -> Self {
        self.pace_whole_answers = pace;
        self
    }

    /// The length of the vectors `/v1/embeddings` answers (default 64, at least 1).
    pub fn embedding_dimensions(mut self, dimensions: usize) -> Self {
        self.embedding_dimensions = dimensions.max(1);
        self
    }

    /// Every `/v1/embeddings` request fails this way (see also
    /// [`MockOpenAi::set_embeddings_fault`]).
    pub fn embeddings_fault(mut self, fault: EmbeddingsFault) -> Self {
        self.embeddings_fault = Some(fault);
        self
    }

    /// How tool history in requests is judged (default: accepted).
    pub fn tool_history(mut self, rule: ToolHistory) -> Self {
        self.tool_history = rule;
        self
    }
}

/// Why `messages` break `rule`, if they do.
fn tool_history_fault(rule: ToolHistory, messages: &[Value]) -> Option<String> {
    let role = |m: &Value| {
        m.get("role")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    match rule {
        ToolHistory::Accept => None,
        ToolHistory::NoToolMessages => messages.iter().find_map(|m| {
            if role(m) == "tool" {
                return Some("unsupported role: tool".to_string());
            }
            (role(m) == "assistant" && m.get("content").is_some_and(Value::is_null))
                .then(|| "assistant message content must be a string".to_string())
        }),
        ToolHistory::OpenAi => {
            let mut open: Vec<String> = Vec::new();
            for m in messages {
                if role(m) == "tool" {
                    let id = m
                        .get("tool_call_id")
                        .and_then(Value::as_str)
                        .unwrap_or_default();
                    let Some(at) = open.iter().position(|o| o == id) else {
                        return Some(format!(
                            "Invalid parameter: messages with role 'tool' must be a response to a preceding message with 'tool_calls' (unknown id {id:?})."
                        ));
                    };
                    open.remove(at);
                    continue;
                }
                if !open.is_empty() {
                    return Some(format!(
                        "An assistant message with 'tool_calls' must be followed by tool messages responding to each 'tool_call_id'. Missing: {}.",
                        open.join(", ")
                    ));
                }
                if let Some(calls) = m.get("tool_calls").and_then(Value::as_array) {
                    open = calls
                        .iter()
                        .filter_map(|c| c.get("id").and_then(Value::as_str).map(str::to_string))
                        .collect();
                }
            }
            (!open.is_empty()).then(|| format!("tool calls left unanswered: {}", open.join(", ")))
        }
    }
}

/// A request the server received.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRequest {
    /// HTTP method.
    pub method: String,
    /// Path (and query).
    pub path: String,
    /// The `Authorization` header.
    pub authorization: Option<String>,
    /// Every header, lowercased names.
    pub headers: Vec<(String, String)>,
    /// The body as JSON (`Null` when it was not JSON).
    pub body: Value,
}

impl RecordedRequest {
    /// A request of `method` to `path` with `headers` and `body` (JSON, else `Null`).
    pub(crate) fn new(method: &str, path: &str, headers: &HeaderMap, body: &[u8]) -> Self {
        let headers: Vec<(String, String)> = headers
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let authorization = headers
            .iter()
            .find(|(k, _)| k == "authorization")
            .map(|(_, v)| v.clone());
        RecordedRequest {
            method: method.to_string(),
            path: path.to_string(),
            authorization,
            headers,
            body: serde_json::from_slice(body).unwrap_or(Value::Null),
        }
    }

    /// The `(role, content)` pairs of the body's `messages`.
    pub fn messages(&self) -> Vec<(String, String)> {
        self.body
            .get("messages")
            .and_then(Value::as_array)
            .map(|ms| {
                ms.iter()
                    .map(|m| {
                        let field = |k: &str| {
                            m.get(k)
                                .and_then(Value::as_str)
                                .unwrap_or_default()
                                .to_string()
                        };
                        (field("role"), field("content"))
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The content of the last user message.
    pub fn last_user(&self) -> Option<String> {
        self.messages()
            .into_iter()
            .rev()
            .find(|(role, _)| role == "user")
            .map(|(_, content)| content)
    }

    /// A header value by (case-insensitive) name.
    pub fn header(&self, name: &str) -> Option<&str> {
        let name = name.to_ascii_lowercase();
        self.headers
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.as_str())
    }
}

struct Shared {
    script: Mutex<MockScript>,
    last: Mutex<Option<MockReply>>,
    requests: Mutex<Vec<RecordedRequest>>,
    /// Streams whose client went away before the last event was sent.
    abandoned: AtomicUsize,
    /// Streamed chunks that carried answer text: what the "model" generated.
    content_chunks: AtomicUsize,
}

/// Counts a stream as abandoned when it is dropped before its last event went out.
struct StreamGuard {
    shared: Arc<Shared>,
    finished: bool,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if !self.finished {
            self.shared.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking test thread leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A running mock server; it stops when dropped.
///
/// ```
/// use enforce_testkit::{MockOpenAi, MockReply, MockScript};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let mock = MockOpenAi::start(MockScript::new()
///     .reply(MockReply::rate_limited(0))
///     .reply(MockReply::text("Hi"))).await.unwrap();
/// let url = format!("{}/chat/completions", mock.url());
/// # let _ = url;
/// # });
/// ```
pub struct MockOpenAi {
    server: Loopback,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for MockOpenAi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MockOpenAi")
            .field("addr", &self.server.addr())
            .finish()
    }
}

impl MockOpenAi {
    /// Binds `127.0.0.1` on a free port and serves `script` on the current tokio runtime.
    pub async fn start(script: MockScript) -> std::io::Result<MockOpenAi> {
        let shared = Arc::new(Shared {
            script: Mutex::new(script),
            last: Mutex::new(None),
            requests: Mutex::new(Vec::new()),
            abandoned: AtomicUsize::new(0),
            content_chunks: AtomicUsize::new(0),
        });
        let app = Router::new()
            .route("/v1/chat/completions", post(chat))
            .route("/chat/completions", post(chat))
            .route("/v1/responses", post(responses))
            .route("/v1/models", get(models))
            .route("/v1/embeddings", post(embeddings))
            .route("/v1/completions", post(completions))
            .fallback(not_found)
            .with_state(Arc::clone(&shared));
        Ok(MockOpenAi {
            server: Loopback::serve(app, "mock OpenAI server").await?,
            shared,
        })
    }

    /// The base URL, `http://127.0.0.1:<port>/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.server.addr())
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        lock(&self.shared.requests).clone()
    }

    /// The chat completion requests received so far.
    pub fn chat_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/chat/completions"))
            .collect()
    }

    /// The `/v1/embeddings` requests received so far.
    pub fn embedding_requests(&self) -> Vec<RecordedRequest> {
        self.requests()
            .into_iter()
            .filter(|r| r.path.ends_with("/embeddings"))
            .collect()
    }

    /// Makes `/v1/embeddings` fail this way from now on (`None`: answer correctly again).
    pub fn set_embeddings_fault(&self, fault: Option<EmbeddingsFault>) {
        lock(&self.shared.script).embeddings_fault = fault;
    }

    /// Streams the client closed before their last event: a cut or a client that left
    /// (cancellation reached the upstream).
    pub fn abandoned_streams(&self) -> usize {
        self.shared.abandoned.load(Ordering::SeqCst)
    }

    /// Streamed chunks with answer text sent so far, over all streams: with one token per chunk,
    /// the tokens the "model" generated (a cut stream stops counting when it is closed).
    pub fn content_chunks_sent(&self) -> usize {
        self.shared.content_chunks.load(Ordering::SeqCst)
    }

    /// Queues another reply.
    pub fn push(&self, reply: MockReply) {
        lock(&self.shared.script).replies.push_back(reply);
    }
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(ErrorShape::OpenAi.body(404, "no such route on the mock server")),
    )
        .into_response()
}

async fn models(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    record(&shared, request).await;
    let model = lock(&shared.script).model.clone();
    axum::Json(json!({"object": "list", "data": [
        {"id": model, "object": "model", "created": 0, "owned_by": "enforce-testkit"}]}))
    .into_response()
}

/// `POST /v1/embeddings`: `input` is a string or a list of strings; the answer is OpenAI's
/// `{"object": "list", "data": [{"object": "embedding", "index", "embedding"}], "model",
/// "usage"}`.
async fn embeddings(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let request = record(&shared, request).await;
    let inputs: Vec<String> = match request.get("input") {
        Some(Value::String(s)) => vec![s.clone()],
        Some(Value::Array(items)) if items.iter().all(Value::is_string) => items
            .iter()
            .filter_map(|i| i.as_str().map(str::to_string))
            .collect(),
        _ => {
            return openai_error(400, "'input' must be a string or a list of strings");
        }
    };
    let (dimensions, fault) = {
        let s = lock(&shared.script);
        (s.embedding_dimensions, s.embeddings_fault.clone())
    };
    let mut vectors: Vec<Vec<f32>> = inputs
        .iter()
        .map(|t| bag_of_words_embedding(t, dimensions))
        .collect();
    match fault {
        None => {}
        Some(EmbeddingsFault::Status(status)) => {
            return openai_error(status, "the embeddings model failed");
        }
        Some(EmbeddingsFault::Delay(delay)) => tokio::time::sleep(delay).await,
        Some(EmbeddingsFault::MissingVector) => {
            vectors.pop();
        }
        Some(EmbeddingsFault::MixedDimensions) => {
            if let Some(last) = vectors.last_mut() {
                last.pop();
            }
        }
    }
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-embedding")
        .to_string();
    let tokens: u64 = inputs.iter().map(|t| approx_tokens(t)).sum();
    let data: Vec<Value> = vectors
        .into_iter()
        .enumerate()
        .map(|(index, embedding)| json!({"object": "embedding", "index": index, "embedding": embedding}))
        .collect();
    axum::Json(json!({
        "object": "list", "data": data, "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }))
    .into_response()
}

/// `POST /v1/completions`, the legacy text completion: the answer echoes `prompt` (a string, or
/// the first of a list) as OpenAI's `text_completion`, or, with `stream: true`, as
/// `text_completion` chunks of it (the script's `stream_chunks`, paced alike), a chunk with
/// `finish_reason: "stop"`, then `[DONE]`.
async fn completions(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let request = record(&shared, request).await;
    let prompt = match request.get("prompt") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .first()
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        _ => {
            return openai_error(400, "'prompt' must be a string or a list of strings");
        }
    };
    let model = request
        .get("model")
        .and_then(Value::as_str)
        .unwrap_or("mock-instruct")
        .to_string();
    let choice = |text: &str, finish: Value| json!({"text": text, "index": 0, "logprobs": null, "finish_reason": finish});
    let completion = |choices: Value| {
        json!({"id": "cmpl-mock", "object": "text_completion", "created": 0, "model": model,
               "choices": choices})
    };
    if request.get("stream").and_then(Value::as_bool) != Some(true) {
        let tokens = approx_tokens(&prompt);
        let mut answer = completion(json!([choice(&prompt, json!("stop"))]));
        answer["usage"] = json!({"prompt_tokens": tokens, "completion_tokens": tokens, "total_tokens": 2 * tokens});
        return axum::Json(answer).into_response();
    }
    let (chunks, gap) = {
        let script = lock(&shared.script);
        (script.chunks, script.chunk_gap)
    };
    let mut events: Vec<String> = pieces(&prompt, chunks)
        .iter()
        .map(|piece| completion(json!([choice(piece, Value::Null)])).to_string())
        .collect();
    events.push(completion(json!([choice("", json!("stop"))])).to_string());
    events.push("[DONE]".to_string());
    sse(&shared, events, gap, false)
}

/// Records `request` and returns its body as JSON (`Null` when it is not JSON).
async fn record(shared: &Shared, request: Request) -> Value {
    let (parts, body) = request.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let recorded = RecordedRequest::new(
        parts.method.as_str(),
        parts.uri.path(),
        &parts.headers,
        &body,
    );
    let body = recorded.body.clone();
    lock(&shared.requests).push(recorded);
    body
}

/// The next reply for a request whose last user message is `last_user`, after its delays; a
/// scripted status or error is the response already.
async fn next_reply(shared: &Shared, last_user: &str) -> Result<MockReply, Response> {
    let mut reply = choose(shared, last_user);
    while let MockReply::Delayed(delay, inner) = reply {
        tokio::time::sleep(delay).await;
        reply = *inner;
    }
    match reply {
        MockReply::Status {
            status,
            body,
            retry_after,
        } => Err(with_status(status, body, retry_after)),
        MockReply::Error {
            shape,
            status,
            message,
            retry_after,
        } => Err(with_status(
            status,
            shape.body(status, &message).to_string(),
            retry_after,
        )),
        reply => Ok(reply),
    }
}

/// The next reply for a request with this body.
fn choose(shared: &Shared, last_user: &str) -> MockReply {
    let mut script = lock(&shared.script);
    if let Some(reply) = script.replies.pop_front() {
        *lock(&shared.last) = Some(reply.clone());
        return reply;
    }
    match &script.then {
        Then::RepeatLast => lock(&shared.last)
            .clone()
            .unwrap_or_else(|| MockReply::text("{{last_user}}")),
        Then::Echo => MockReply::text("{{last_user}}"),
        Then::FailFirst {
            invalid,
            valid,
            marker,
        } => {
            let text = if last_user.contains(marker.as_str()) {
                valid
            } else {
                invalid
            };
            MockReply::text(text.clone())
        }
    }
}

fn fill(text: &str, body: &Value, last_user: &str) -> String {
    let token = body
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|m| m.get("content").and_then(Value::as_str))
        .find_map(|c| {
            let start = c.find("[token:")? + "[token:".len();
            let len = c[start..].find(']')?;
            Some(c[start..start + len].to_string())
        })
        .unwrap_or_default();
    text.replace("{{last_user}}", last_user)
        .replace("{{token}}", &token)
}

async fn chat(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let request = record(&shared, request).await;
    let last_user = request
        .get("messages")
        .and_then(Value::as_array)
        .and_then(|ms| {
            ms.iter()
                .rev()
                .find(|m| m.get("role").and_then(Value::as_str) == Some("user"))
        })
        .and_then(|m| m.get("content").and_then(Value::as_str))
        .unwrap_or_default()
        .to_string();
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = request
        .pointer("/stream_options/include_usage")
        .and_then(Value::as_bool)
        == Some(true);
    let (chunks, gap, model, tool_rule, reject_options, pace_whole) = {
        let s = lock(&shared.script);
        (
            s.chunks,
            s.chunk_gap,
            s.model.clone(),
            s.tool_history,
            s.reject_stream_options,
            s.pace_whole_answers,
        )
    };
    if reject_options && request.get("stream_options").is_some() {
        return openai_error(
            400,
            "Unrecognized request argument supplied: stream_options",
        );
    }
    let messages = request
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    if let Some(fault) = tool_history_fault(tool_rule, messages) {
        return openai_error(400, &fault);
    }
    let reply = match next_reply(&shared, &last_user).await {
        Ok(reply) => reply,
        Err(failed) => return failed,
    };
    let prompt_tokens = approx_tokens(&request.to_string());
    match reply {
        MockReply::Text(_) | MockReply::Truncated(_) => {
            let (text, finish) = match reply {
                MockReply::Truncated(text) => (text, "length"),
                MockReply::Text(text) => (text, "stop"),
                _ => unreachable!("matched above"),
            };
            let text = fill(&text, &request, &last_user);
            if stream {
                let events = stream_events(&model, &text, chunks, Some(finish), include_usage);
                sse(&shared, events, gap, false)
            } else {
                if pace_whole {
                    // The pieces the stream would have had, written at the same pace.
                    let pieces = stream_events(&model, &text, chunks, None, false)
                        .iter()
                        .filter(|e| e.contains("\"content\":\""))
                        .count();
                    tokio::time::sleep(gap * u32::try_from(pieces).unwrap_or(u32::MAX)).await;
                    shared.content_chunks.fetch_add(pieces, Ordering::SeqCst);
                }
                let message = json!({"role": "assistant", "content": text});
                let usage = usage(prompt_tokens, approx_tokens(&text));
                completion(&model, finish, message, usage)
            }
        }
        MockReply::Garbage(body) => with_status(200, body, None),
        MockReply::Reasoning { reasoning, text } => {
            let text = fill(&text, &request, &last_user);
            if stream {
                let mut events = stream_events(&model, &text, chunks, None, include_usage);
                for (i, piece) in reasoning.split_inclusive(' ').enumerate() {
                    let delta = json!({"reasoning_content": piece});
                    events.insert(1 + i, chat_chunk(&model, delta, Value::Null));
                }
                sse(&shared, events, gap, false)
            } else {
                let message = json!({"role": "assistant", "content": text,
                                     "reasoning_content": reasoning});
                completion(&model, "stop", message, Value::Null)
            }
        }
        MockReply::ToolCalls { text, calls } => {
            let text = text.map(|t| fill(&t, &request, &last_user));
            if stream {
                sse(
                    &shared,
                    tool_call_events(&model, text.as_deref(), &calls),
                    gap,
                    false,
                )
            } else {
                let calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, name, arguments)| {
                        json!({"id": id, "type": "function",
                        "function": {"name": name, "arguments": arguments}})
                    })
                    .collect();
                let message = json!({"role": "assistant", "content": text, "tool_calls": calls});
                completion(&model, "tool_calls", message, usage(prompt_tokens, 10))
            }
        }
        MockReply::StreamCut { text, after_chunks } => {
            let text = fill(&text, &request, &last_user);
            let mut events = stream_events(&model, &text, chunks, None, false);
            // role chunk + the content chunks that get through
            events.truncate(1 + after_chunks);
            sse(&shared, events, gap, true)
        }
        MockReply::StreamError {
            text,
            after_chunks,
            message,
        } => {
            let text = fill(&text, &request, &last_user);
            let mut events = stream_events(&model, &text, chunks, None, false);
            events.truncate(1 + after_chunks);
            events.push(ErrorShape::OpenAi.body(500, &message).to_string());
            events.push("[DONE]".to_string());
            sse(&shared, events, gap, false)
        }
        // Answered by `next_reply`; kept total without a panic.
        MockReply::Delayed(..) | MockReply::Status { .. } | MockReply::Error { .. } => {
            openai_error(500, "the mock's reply was answered before")
        }
    }
}

/// A whole `chat.completion` with one choice; `usage` left out when `Null`.
fn completion(model: &str, finish: &str, message: Value, usage: Value) -> Response {
    let mut answer = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": finish, "message": message}],
    });
    if !usage.is_null() {
        answer["usage"] = usage;
    }
    axum::Json(answer).into_response()
}

/// A completion's `usage`.
fn usage(prompt_tokens: u64, completion_tokens: u64) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
           "total_tokens": prompt_tokens + completion_tokens})
}

fn approx_tokens(text: &str) -> u64 {
    (text.chars().count() as u64).div_ceil(4)
}

/// An error in OpenAI's shape.
fn openai_error(status: u16, message: &str) -> Response {
    with_status(
        status,
        ErrorShape::OpenAi.body(status, message).to_string(),
        None,
    )
}

fn with_status(status: u16, body: String, retry_after: Option<String>) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, body).into_response();
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(value) = retry_after.and_then(|v| HeaderValue::from_str(&v).ok()) {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, value);
    }
    response
}

/// `text` in `chunks` pieces (at least 1) of about the same number of characters.
pub(crate) fn pieces(text: &str, chunks: usize) -> Vec<String> {
    let chars: Vec<char> = text.chars().collect();
    let per = chars.len().div_ceil(chunks.max(1)).max(1);
    chars
        .chunks(per)
        .map(|piece| piece.iter().collect())
        .collect()
}

/// One `chat.completion.chunk` of a stream, as its `data:` payload.
fn chat_chunk(model: &str, delta: Value, finish_reason: Value) -> String {
    json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
           "model": model,
           "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}]})
    .to_string()
}

/// The `data:` payloads of a streamed completion: a role chunk, `chunks` content chunks, a
/// finish chunk, the usage chunk when asked for, `[DONE]`.
fn stream_events(
    model: &str,
    text: &str,
    chunks: usize,
    finish: Option<&str>,
    include_usage: bool,
) -> Vec<String> {
    let chunk = |delta: Value, finish_reason: Value| chat_chunk(model, delta, finish_reason);
    let mut events = vec![chunk(json!({"role": "assistant"}), Value::Null)];
    for piece in pieces(text, chunks) {
        events.push(chunk(json!({"content": piece}), Value::Null));
    }
    events.push(chunk(json!({}), json!(finish.unwrap_or("stop"))));
    if include_usage {
        let out = approx_tokens(text);
        events.push(
            json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0,
                   "model": model, "choices": [],
                   "usage": {"prompt_tokens": 0, "completion_tokens": out, "total_tokens": out}})
            .to_string(),
        );
    }
    events.push("[DONE]".to_string());
    events
}

/// The `data:` payloads of a streamed answer that calls tools, as OpenAI streams them: a role
/// chunk, the text, per call a chunk with id, name and empty arguments and then argument pieces
/// under the same index, a `tool_calls` finish chunk, `[DONE]`.
fn tool_call_events(
    model: &str,
    text: Option<&str>,
    calls: &[(String, String, String)],
) -> Vec<String> {
    let chunk = |delta: Value, finish_reason: Value| chat_chunk(model, delta, finish_reason);
    let mut events = vec![chunk(
        json!({"role": "assistant", "content": null}),
        Value::Null,
    )];
    if let Some(text) = text {
        events.push(chunk(json!({"content": text}), Value::Null));
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{"index": index, "id": id, "type": "function",
                                   "function": {"name": name, "arguments": ""}}]}),
            Value::Null,
        ));
        let chars: Vec<char> = arguments.chars().collect();
        for piece in chars.chunks(5) {
            events.push(chunk(
                json!({"tool_calls": [{"index": index,
                    "function": {"arguments": piece.iter().collect::<String>()}}]}),
                Value::Null,
            ));
        }
    }
    events.push(chunk(json!({}), json!("tool_calls")));
    events.push("[DONE]".to_string());
    events
}

/// An SSE response sending each event `gap` apart; `cut` aborts the body after the last one.
fn sse(shared: &Arc<Shared>, events: Vec<String>, gap: Duration, cut: bool) -> Response {
    let items: VecDeque<String> = events.into();
    let guard = StreamGuard {
        shared: Arc::clone(shared),
        finished: false,
    };
    let stream = futures_util::stream::unfold(
        (items, true, cut, guard),
        move |(mut items, first, cut, mut guard)| async move {
            match items.pop_front() {
                Some(event) => {
                    if !first && !gap.is_zero() {
                        tokio::time::sleep(gap).await;
                    }
                    if items.is_empty() {
                        guard.finished = true;
                    }
                    if event.contains("\"content\":\"") {
                        guard.shared.content_chunks.fetch_add(1, Ordering::SeqCst);
                    }
                    let frame = Bytes::from(format!("data: {event}\n\n"));
                    Some((Ok::<_, std::io::Error>(frame), (items, false, cut, guard)))
                }
                None if cut => {
                    // Pause first so the head and the chunks before the cut reach the client.
                    tokio::time::sleep(gap.max(Duration::from_millis(30))).await;
                    Some((
                        Err(std::io::Error::new(
                            std::io::ErrorKind::ConnectionAborted,
                            "stream cut by the script",
                        )),
                        (items, false, false, guard),
                    ))
                }
                None => None,
            }
        },
    );
    let mut response = Response::new(Body::from_stream(stream));
    response.headers_mut().insert(
        axum::http::header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    response.headers_mut().insert(
        axum::http::header::CACHE_CONTROL,
        HeaderValue::from_static("no-cache"),
    );
    response
}

/// `POST /v1/responses`: the same script answered in the Responses API's shapes, for runners
/// that speak it (`api: responses`): text (`Truncated`: `status: incomplete` with
/// `incomplete_details.reason: max_output_tokens`), tool calls (`function_call` items) and
/// errors; streamed as typed events (`response.created`, `response.output_text.delta`...,
/// `response.output_item.done`, then `response.completed` or `response.incomplete`) when the
/// request streams. Other replies are a 500 naming them.
async fn responses(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let request = record(&shared, request).await;
    let last_user = match request.get("input") {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .rev()
            .find(|i| i.get("role").and_then(Value::as_str) == Some("user"))
            .and_then(|i| i.get("content").and_then(Value::as_str))
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    };
    let stream = request.get("stream").and_then(Value::as_bool) == Some(true);
    let (chunks, gap, model) = {
        let s = lock(&shared.script);
        (s.chunks, s.chunk_gap, s.model.clone())
    };
    let reply = match next_reply(&shared, &last_user).await {
        Ok(reply) => reply,
        Err(failed) => return failed,
    };
    let (text, calls, incomplete) = match reply {
        MockReply::Text(text) => (Some(fill(&text, &request, &last_user)), Vec::new(), false),
        MockReply::Truncated(text) => (Some(fill(&text, &request, &last_user)), Vec::new(), true),
        MockReply::ToolCalls { text, calls } => {
            (text.map(|t| fill(&t, &request, &last_user)), calls, false)
        }
        other => {
            let message = format!("the mock's /v1/responses does not play {other:?}");
            return openai_error(500, &message);
        }
    };
    let mut output = Vec::new();
    if let Some(text) = &text {
        output.push(
            json!({"id": "msg_mock", "type": "message", "status": "completed",
                           "role": "assistant",
                           "content": [{"type": "output_text", "text": text, "annotations": []}]}),
        );
    }
    for (index, (id, name, arguments)) in calls.iter().enumerate() {
        output.push(
            json!({"id": format!("fc_mock_{index}"), "type": "function_call",
                           "status": "completed", "call_id": id, "name": name,
                           "arguments": arguments}),
        );
    }
    let input_tokens = approx_tokens(&request.to_string());
    let output_tokens = approx_tokens(text.as_deref().unwrap_or_default());
    let response = json!({
        "id": "resp_mock", "object": "response", "created_at": 0, "model": model,
        "status": if incomplete { "incomplete" } else { "completed" },
        "incomplete_details": if incomplete { json!({"reason": "max_output_tokens"}) } else { Value::Null },
        "error": null,
        "output": output,
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                  "total_tokens": input_tokens + output_tokens},
    });
    if !stream {
        return axum::Json(response).into_response();
    }
    let mut events = Vec::new();
    let mut in_progress = response.clone();
    in_progress["status"] = json!("in_progress");
    in_progress["output"] = json!([]);
    events.push(json!({"type": "response.created", "response": in_progress}).to_string());
    for (index, item) in output.iter().enumerate() {
        match item["type"].as_str() {
            Some("message") => {
                for piece in pieces(text.as_deref().unwrap_or_default(), chunks) {
                    events.push(
                        json!({"type": "response.output_text.delta", "item_id": "msg_mock",
                               "output_index": index, "content_index": 0, "delta": piece})
                        .to_string(),
                    );
                }
            }
            _ => events.push(
                json!({"type": "response.function_call_arguments.delta",
                       "item_id": item["id"], "output_index": index,
                       "delta": item["arguments"]})
                .to_string(),
            ),
        }
        events.push(
            json!({"type": "response.output_item.done", "output_index": index, "item": item})
                .to_string(),
        );
    }
    let end = if incomplete {
        "response.incomplete"
    } else {
        "response.completed"
    };
    events.push(json!({"type": end, "response": response}).to_string());
    sse(&shared, events, gap, false)
}
