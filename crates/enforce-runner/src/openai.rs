//! The OpenAI-compatible HTTP runner: `POST {base_url}/chat/completions`, stateless follow-ups,
//! bounded retries with jittered exponential backoff that honour `Retry-After`.

use crate::error::{duration_from_secs, ConfigError};
use crate::process::tail;
use crate::sse::{Chunk, SseReader, StreamFault};
use enforce_core::{
    async_trait, follow_up_messages, FinishReason, Message, Reply, ReplyStream, Request, Role,
    Runner, RunnerError, StreamEvent, ToolCall, ToolFeedback, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Request fields the runner sets itself; the same keys in `params` are ignored.
const OWN_FIELDS: [&str; 4] = ["model", "messages", "stream", "stream_options"];

/// How transient failures are retried.
///
/// ```
/// use enforce_runner::RetryConfig;
/// let r = RetryConfig::default();
/// assert_eq!(r.max_retries, 3);
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RetryConfig {
    /// Retries after the first try, for connect errors, 408, 429 and 5xx (default 3).
    pub max_retries: u32,
    /// Backoff before the first retry, in milliseconds; doubles each time (default 500).
    pub initial_backoff_ms: u64,
    /// Longest backoff, in milliseconds (default 8000).
    pub max_backoff_ms: u64,
    /// A `Retry-After` longer than this many seconds ends the retries at once rather than
    /// waiting (default 60).
    pub max_retry_after_secs: u64,
}

impl Default for RetryConfig {
    fn default() -> Self {
        RetryConfig {
            max_retries: 3,
            initial_backoff_ms: 500,
            max_backoff_ms: 8000,
            max_retry_after_secs: 60,
        }
    }
}

/// How the OpenAI-compatible server is reached.
///
/// ```
/// use enforce_runner::OpenAiConfig;
///
/// let c: OpenAiConfig = serde_json::from_str(r#"{
///     "base_url": "http://localhost:11434/v1", "model": "llama3.2",
///     "params": {"temperature": 0.2}, "retry": {"max_retries": 5}}"#).unwrap();
/// assert_eq!(c.retry.max_retries, 5);
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1` (e.g. `http://localhost:11434/v1` for Ollama).
    pub base_url: String,
    /// The API key, sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// An environment variable holding the API key (used when `api_key` is not set).
    pub api_key_env: Option<String>,
    /// The upstream model name.
    pub model: String,
    /// Extra request fields (temperature, max_tokens, ...); the request's own params override
    /// them.
    pub params: Map<String, Value>,
    /// Longest one HTTP call may take, in seconds (default 120).
    pub timeout_secs: f64,
    /// Longest connection setup, in seconds (default 10).
    pub connect_timeout_secs: f64,
    /// Retries of transient failures.
    pub retry: RetryConfig,
    /// Largest response body read, in bytes (default 32 MiB); a larger body is an upstream
    /// error, so a misbehaving server cannot exhaust the proxy's memory.
    pub max_response_bytes: usize,
    /// How a re-ask tells the model its tool calls were rejected: `tool_messages` (default; a
    /// tool result per call, as OpenAI expects) or `user_message` (the calls written out as
    /// text, for servers that reject tool results they did not ask for).
    pub tool_feedback: ToolFeedback,
    /// Ask with `stream: true` so the loop sees the answer as it is written and can cut a
    /// failing one short (default true). `false` for servers that cannot stream.
    pub stream: bool,
}

/// Default of [`OpenAiConfig::max_response_bytes`].
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: "http://localhost:11434/v1".to_string(),
            api_key: None,
            api_key_env: None,
            model: String::new(),
            params: Map::new(),
            timeout_secs: 120.0,
            connect_timeout_secs: 10.0,
            retry: RetryConfig::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            tool_feedback: ToolFeedback::default(),
            stream: true,
        }
    }
}

/// Asks an OpenAI-compatible chat completions endpoint (OpenAI, Ollama, vLLM, llama.cpp
/// server, LM Studio, ...). Follow-ups are stateless: the original messages, the previous answer
/// and the feedback, never every earlier attempt.
///
/// ```no_run
/// use enforce_core::{Request, Runner};
/// use enforce_runner::{OpenAiConfig, OpenAiRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = OpenAiRunner::new(OpenAiConfig {
///     base_url: "http://localhost:11434/v1".into(),
///     model: "llama3.2".into(),
///     ..OpenAiConfig::default()
/// })?;
/// let reply = runner.ask(&Request::prompt("Say hi")).await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiRunner {
    config: OpenAiConfig,
    api_key: Option<String>,
    /// The chat completions URL, parsed once: parsing it per request showed up in the proxy's
    /// profile.
    url: reqwest::Url,
    client: reqwest::Client,
    /// The server refused `stream_options` once: streamed requests go without it from then on.
    no_stream_options: Arc<AtomicBool>,
}

impl OpenAiRunner {
    /// A runner with this configuration; checks the URL, the timeouts and the key variable.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let base = config.base_url.trim().trim_end_matches('/').to_string();
        if base.is_empty() {
            return Err(ConfigError::Missing { field: "base_url" });
        }
        let https = base.starts_with("https://");
        if !https && !base.starts_with("http://") {
            return Err(ConfigError::InvalidBaseUrl(config.base_url.clone()));
        }
        if https && !cfg!(feature = "rustls") {
            return Err(ConfigError::TlsUnavailable(config.base_url.clone()));
        }
        if config.model.trim().is_empty() {
            return Err(ConfigError::Missing { field: "model" });
        }
        let timeout = duration_from_secs("timeout_secs", config.timeout_secs)?;
        let connect = duration_from_secs("connect_timeout_secs", config.connect_timeout_secs)?;
        let api_key = match (&config.api_key, &config.api_key_env) {
            (Some(key), _) => Some(key.clone()),
            (None, Some(var)) => {
                Some(std::env::var(var).map_err(|_| ConfigError::MissingApiKeyEnv(var.clone()))?)
            }
            (None, None) => None,
        };
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(connect)
            .build()
            .map_err(|e| ConfigError::HttpClient(e.to_string()))?;
        let url = reqwest::Url::parse(&format!("{base}/chat/completions"))
            .map_err(|_| ConfigError::InvalidBaseUrl(config.base_url.clone()))?;
        Ok(OpenAiRunner {
            url,
            config,
            api_key,
            client,
            no_stream_options: Arc::new(AtomicBool::new(false)),
        })
    }

    /// The chat completions URL this runner posts to.
    pub fn endpoint(&self) -> &str {
        self.url.as_str()
    }

    /// The JSON body for `messages`: the configured params, the request's params over them,
    /// then model, messages and `stream: false`.
    pub fn body(&self, request: &Request, messages: &[Message]) -> Value {
        self.body_with(request, messages, false, false)
    }

    /// [`body`](Self::body), streamed or not, with `stream_options.include_usage` or without.
    fn body_with(
        &self,
        request: &Request,
        messages: &[Message],
        stream: bool,
        include_usage: bool,
    ) -> Value {
        let mut body = Map::new();
        for params in [&self.config.params, &request.params] {
            for (k, v) in params {
                if !OWN_FIELDS.contains(&k.as_str()) {
                    body.insert(k.clone(), v.clone());
                }
            }
        }
        body.insert("model".into(), Value::String(self.config.model.clone()));
        body.insert(
            "messages".into(),
            Value::Array(messages.iter().map(message_json).collect()),
        );
        body.insert("stream".into(), Value::Bool(stream));
        if include_usage {
            body.insert(
                "stream_options".into(),
                serde_json::json!({"include_usage": true}),
            );
        }
        Value::Object(body)
    }

    async fn call(&self, request: &Request, messages: &[Message]) -> Result<Reply, RunnerError> {
        let started = Instant::now();
        let response = self.send(&self.body(request, messages)).await?;
        let text = read_limited(response, self.config.max_response_bytes).await?;
        let mut reply = parse_completion(&text)?;
        reply.duration = Some(started.elapsed());
        Ok(reply)
    }

    /// Opens a streamed answer: `stream: true` with `stream_options.include_usage`, or without
    /// the options once the server refused them (some do, with a 400 naming the field).
    async fn open_stream(
        &self,
        request: &Request,
        messages: &[Message],
    ) -> Result<reqwest::Response, RunnerError> {
        let with_usage = !self.no_stream_options.load(Ordering::Relaxed);
        let first = self
            .send(&self.body_with(request, messages, true, with_usage))
            .await;
        match first {
            Err(RunnerError::Upstream {
                status: Some(400),
                message,
            }) if with_usage && message.contains("stream_options") => {
                self.no_stream_options.store(true, Ordering::Relaxed);
                self.send(&self.body_with(request, messages, true, false))
                    .await
            }
            other => other,
        }
    }

    /// A streamed ask: text deltas, usage as it is reported, then the whole reply.
    fn stream_reply<'a>(&'a self, request: &'a Request, messages: Vec<Message>) -> ReplyStream<'a> {
        if !self.config.stream {
            return Box::pin(futures_util::stream::once(async move {
                self.call(request, &messages).await.map(StreamEvent::Done)
            }));
        }
        let state = Streaming {
            runner: self,
            request,
            messages,
            response: None,
            reader: SseReader::default(),
            text: String::new(),
            usage: None,
            pending: VecDeque::new(),
            read: 0,
            started: Instant::now(),
            finished: false,
        };
        Box::pin(futures_util::stream::unfold(state, Streaming::next))
    }

    /// Posts `body`, retrying transient failures; returns the successful response, or the
    /// error of the last try.
    async fn send(&self, body: &Value) -> Result<reqwest::Response, RunnerError> {
        // Serialized once; a retry shares the bytes instead of copying them.
        let body =
            bytes::Bytes::from(serde_json::to_vec(body).map_err(|e| RunnerError::Protocol {
                message: format!("cannot serialize the request: {e}"),
            })?);
        let retry = &self.config.retry;
        let mut attempt: u32 = 0;
        loop {
            let mut post = self
                .client
                .post(self.url.clone())
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body.clone());
            if let Some(key) = &self.api_key {
                post = post.bearer_auth(key);
            }
            let (error, retry_after) = match post.send().await {
                Ok(response) => {
                    let status = response.status();
                    if status.is_success() {
                        return Ok(response);
                    }
                    let retry_after = response
                        .headers()
                        .get(reqwest::header::RETRY_AFTER)
                        .and_then(|v| v.to_str().ok())
                        .and_then(parse_retry_after);
                    let text = read_limited(response, self.config.max_response_bytes).await?;
                    let error = RunnerError::Upstream {
                        status: Some(status.as_u16()),
                        message: error_message(&text)
                            .unwrap_or_else(|| format!("HTTP {status} with an empty body")),
                    };
                    let code = status.as_u16();
                    if !(code == 408 || code == 429 || status.is_server_error()) {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                Err(e) if e.is_timeout() => return Err(self.timeout()),
                Err(e) if e.is_connect() => (
                    RunnerError::Upstream {
                        status: None,
                        message: format!("cannot connect to {}: {e}", self.url),
                    },
                    None,
                ),
                Err(e) => {
                    return Err(RunnerError::Upstream {
                        status: None,
                        message: format!("request to {} failed: {e}", self.url),
                    })
                }
            };
            if attempt >= retry.max_retries {
                return Err(with_attempts(error, attempt + 1));
            }
            if retry_after.is_some_and(|d| d > Duration::from_secs(retry.max_retry_after_secs)) {
                return Err(with_attempts(error, attempt + 1));
            }
            let delay = backoff_delay(retry, attempt, retry_after);
            tokio::time::sleep(delay).await;
            attempt += 1;
        }
    }
}

impl OpenAiRunner {
    fn timeout(&self) -> RunnerError {
        RunnerError::Timeout {
            after_ms: u64::try_from(
                duration_from_secs("timeout_secs", self.config.timeout_secs)
                    .unwrap_or_default()
                    .as_millis(),
            )
            .unwrap_or(u64::MAX),
        }
    }
}

/// The state of one streamed answer, advanced by [`Streaming::next`].
struct Streaming<'a> {
    runner: &'a OpenAiRunner,
    request: &'a Request,
    messages: Vec<Message>,
    /// The open response; `None` before it is opened.
    response: Option<reqwest::Response>,
    reader: SseReader,
    text: String,
    usage: Option<Usage>,
    /// Events read but not yet yielded.
    pending: VecDeque<Result<StreamEvent, RunnerError>>,
    read: usize,
    started: Instant,
    finished: bool,
}

impl<'a> Streaming<'a> {
    /// The next event. Dropping the stream drops the response, which closes the connection:
    /// that is how a cut stops the generation.
    async fn next(mut self) -> Option<(Result<StreamEvent, RunnerError>, Self)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((event, self));
            }
            if self.finished {
                return None;
            }
            let Some(response) = self.response.as_mut() else {
                match self.runner.open_stream(self.request, &self.messages).await {
                    Ok(response) if is_event_stream(&response) => self.response = Some(response),
                    // A server that cannot stream may answer whole: read it as a completion.
                    Ok(response) => {
                        let limit = self.runner.config.max_response_bytes;
                        let whole = match read_limited(response, limit).await {
                            Ok(body) => parse_completion(&body),
                            Err(error) => Err(error),
                        };
                        match whole {
                            Ok(mut reply) => {
                                reply.duration = Some(self.started.elapsed());
                                self.pending.push_back(Ok(StreamEvent::Done(reply)));
                                self.finished = true;
                            }
                            Err(error) => self.fail(error),
                        }
                    }
                    Err(error) => self.fail(error),
                }
                continue;
            };
            match response.chunk().await {
                Ok(Some(bytes)) => {
                    self.read = self.read.saturating_add(bytes.len());
                    if self.read > self.runner.config.max_response_bytes {
                        self.fail(too_large(200, self.runner.config.max_response_bytes));
                        continue;
                    }
                    match self.reader.feed(&bytes) {
                        Ok(chunks) => self.take(chunks),
                        Err(StreamFault::ErrorEvent(data)) => self.fail(RunnerError::Upstream {
                            status: Some(200),
                            message: error_message(&data).unwrap_or_else(|| {
                                "the stream reported an error without a message".into()
                            }),
                        }),
                        Err(StreamFault::NotJson(message)) => {
                            self.fail(RunnerError::Protocol { message })
                        }
                    }
                }
                Ok(None) => {
                    // A stream that just stops looks like a short success: it is an error.
                    let error = RunnerError::Upstream {
                        status: Some(200),
                        message: format!(
                            "the stream ended without [DONE] after {} bytes of answer",
                            self.text.len()
                        ),
                    };
                    self.fail(error);
                }
                Err(e) if e.is_timeout() => {
                    let error = self.runner.timeout();
                    self.fail(error);
                }
                Err(e) => self.fail(RunnerError::Upstream {
                    status: Some(200),
                    message: format!("the stream broke off: {e}"),
                }),
            }
        }
    }

    fn take(&mut self, chunks: Vec<Chunk>) {
        for chunk in chunks {
            match chunk {
                Chunk::Text(text) => {
                    self.text.push_str(&text);
                    self.pending.push_back(Ok(StreamEvent::Text(text)));
                }
                Chunk::Reasoning(text) => {
                    self.pending.push_back(Ok(StreamEvent::Reasoning(text)));
                }
                Chunk::Usage(usage) => {
                    self.usage = Some(usage);
                    self.pending.push_back(Ok(StreamEvent::Spent {
                        usage: Some(usage),
                        cost_usd: None,
                    }));
                }
                Chunk::Done => {
                    let tool_calls = self.reader.tool_calls();
                    if self.text.is_empty() && tool_calls.is_empty() {
                        self.fail(RunnerError::Protocol {
                            message: "the stream held neither text nor tool calls".to_string(),
                        });
                        return;
                    }
                    let reply = Reply {
                        text: std::mem::take(&mut self.text),
                        tool_calls,
                        usage: self.usage,
                        duration: Some(self.started.elapsed()),
                        finish_reason: self.reader.finish_reason(),
                        ..Reply::default()
                    };
                    self.pending.push_back(Ok(StreamEvent::Done(reply)));
                    self.finished = true;
                    // Nothing after [DONE] counts; let the connection go.
                    self.response = None;
                    return;
                }
            }
        }
    }

    fn fail(&mut self, error: RunnerError) {
        self.pending.push_back(Err(error));
        self.finished = true;
        self.response = None;
    }
}

/// `Content-Type: text/event-stream`: the server streams as asked.
fn is_event_stream(response: &reqwest::Response) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

fn with_attempts(error: RunnerError, tries: u32) -> RunnerError {
    match error {
        RunnerError::Upstream { status, message } if tries > 1 => RunnerError::Upstream {
            status,
            message: format!("{message} (gave up after {tries} tries)"),
        },
        other => other,
    }
}

#[async_trait]
impl Runner for OpenAiRunner {
    async fn ask(&self, request: &Request) -> Result<Reply, RunnerError> {
        self.call(request, &request.messages).await
    }

    async fn follow_up(
        &self,
        request: &Request,
        previous: &Reply,
        feedback: &str,
    ) -> Result<Reply, RunnerError> {
        let messages = follow_up_messages(request, previous, feedback, self.config.tool_feedback);
        self.call(request, &messages).await
    }

    fn ask_streamed<'a>(&'a self, request: &'a Request) -> ReplyStream<'a> {
        self.stream_reply(request, request.messages.clone())
    }

    fn follow_up_streamed<'a>(
        &'a self,
        request: &'a Request,
        previous: &'a Reply,
        feedback: &'a str,
    ) -> ReplyStream<'a> {
        let messages = follow_up_messages(request, previous, feedback, self.config.tool_feedback);
        self.stream_reply(request, messages)
    }
}

/// One message on the wire. An assistant turn that only calls tools has `content: null`, as
/// OpenAI writes it; a tool result carries the id of the call it answers; a message with
/// content parts beyond text (an image) sends those parts.
fn message_json(m: &Message) -> Value {
    let mut out = Map::with_capacity(4);
    out.insert("role".into(), serde_json::json!(m.role));
    let content = if !m.parts.is_empty() {
        Value::Array(m.parts.clone())
    } else if m.content.is_empty() && !m.tool_calls.is_empty() {
        Value::Null
    } else {
        Value::String(m.content.clone())
    };
    out.insert("content".into(), content);
    if !m.tool_calls.is_empty() {
        out.insert(
            "tool_calls".into(),
            Value::Array(m.tool_calls.iter().map(ToolCall::to_openai).collect()),
        );
    }
    if m.role == Role::Tool {
        if let Some(id) = &m.tool_call_id {
            out.insert("tool_call_id".into(), Value::String(id.clone()));
        }
    }
    Value::Object(out)
}

/// A pseudo-random number for jitter: the clock mixed with a counter (splitmix64). Jitter only
/// has to keep clients from retrying in lockstep, not be unpredictable.
fn jitter_seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let mut z = nanos
        .wrapping_add(COUNTER.fetch_add(1, Ordering::Relaxed))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The wait before retry number `attempt + 1`: exponential (`initial * 2^attempt`, capped at
/// `max_backoff_ms`), with "equal jitter" (between half and all of it), and never shorter than
/// the server's `Retry-After`.
pub fn backoff_delay(retry: &RetryConfig, attempt: u32, retry_after: Option<Duration>) -> Duration {
    let exp = retry
        .initial_backoff_ms
        .saturating_mul(1u64.checked_shl(attempt.min(32)).unwrap_or(u64::MAX))
        .min(retry.max_backoff_ms);
    let half = exp / 2;
    let jittered = half
        + if half > 0 {
            jitter_seed() % (half + 1)
        } else {
            0
        };
    let delay = Duration::from_millis(jittered);
    match retry_after {
        Some(after) if after > delay => after,
        _ => delay,
    }
}

/// Parses `Retry-After`: seconds (`120`, also `1.5`) or an HTTP date (`Sun, 06 Nov 1994
/// 08:49:37 GMT`), as a wait from now.
///
/// ```
/// use enforce_runner::parse_retry_after;
/// use std::time::Duration;
/// assert_eq!(parse_retry_after("2"), Some(Duration::from_secs(2)));
/// assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37 GMT"), Some(Duration::ZERO));
/// assert_eq!(parse_retry_after("soon"), None);
/// ```
pub fn parse_retry_after(value: &str) -> Option<Duration> {
    let value = value.trim();
    if let Ok(secs) = value.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    let at = parse_http_date(value)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH).ok()?.as_secs();
    Some(Duration::from_secs(at.saturating_sub(now)))
}

/// Seconds since the epoch of an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn parse_http_date(value: &str) -> Option<u64> {
    let parts: Vec<&str> = value.split_whitespace().collect();
    let [_weekday, day, month, year, time, "GMT"] = parts.as_slice() else {
        return None;
    };
    let day: u64 = day.parse().ok()?;
    let month = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ]
    .iter()
    .position(|m| m == month)? as u64
        + 1;
    let year: i64 = year.parse().ok()?;
    let hms: Vec<u64> = time.split(':').filter_map(|p| p.parse().ok()).collect();
    let [h, m, s] = hms.as_slice() else {
        return None;
    };
    if !(1..=31).contains(&day) || *h > 23 || *m > 59 || *s > 60 {
        return None;
    }
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month as i64 + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + (*h as i64) * 3600 + (*m as i64) * 60 + *s as i64;
    u64::try_from(secs).ok()
}

/// The message of an error body, from any of the shapes servers use: OpenAI, Ollama and
/// llama.cpp (`{"error": {"message": ...}}` or `{"error": "..."}`), vLLM before 0.10.1 (a
/// top-level `{"object": "error", "message": ...}`); any other body is returned as text (cut).
/// `None` for an empty body.
///
/// ```
/// use enforce_runner::error_message;
/// assert_eq!(error_message(r#"{"error":{"message":"bad model","type":"invalid_request_error"}}"#)
///            .as_deref(), Some("bad model (type: invalid_request_error)"));
/// assert_eq!(error_message(r#"{"object":"error","message":"too long","type":"BadRequestError",
///                              "code":400}"#).as_deref(),
///            Some("too long (type: BadRequestError, code: 400)"));
/// ```
pub fn error_message(body: &str) -> Option<String> {
    let body = body.trim();
    if body.is_empty() {
        return None;
    }
    let Ok(v) = serde_json::from_str::<Value>(body) else {
        return Some(tail(body, 500));
    };
    let described = |obj: &Value| -> Option<String> {
        let message = obj.get("message").and_then(Value::as_str)?;
        let mut extra = Vec::new();
        if let Some(t) = obj.get("type").and_then(Value::as_str) {
            extra.push(format!("type: {t}"));
        }
        match obj.get("code") {
            Some(Value::String(c)) => extra.push(format!("code: {c}")),
            Some(Value::Number(c)) => extra.push(format!("code: {c}")),
            _ => {}
        }
        Some(if extra.is_empty() {
            message.to_string()
        } else {
            format!("{message} ({})", extra.join(", "))
        })
    };
    match v.get("error") {
        Some(Value::String(s)) => return Some(s.clone()),
        Some(obj @ Value::Object(_)) => {
            if let Some(m) = described(obj) {
                return Some(m);
            }
        }
        _ => {}
    }
    if let Some(m) = described(&v) {
        return Some(m);
    }
    if let Some(d) = v.get("detail") {
        return Some(match d {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        });
    }
    Some(tail(body, 500))
}

/// Reads a body of at most `limit` bytes, chunk by chunk, so an enormous or endless body is
/// refused after `limit` bytes instead of being buffered whole.
async fn read_limited(
    mut response: reqwest::Response,
    limit: usize,
) -> Result<String, RunnerError> {
    let status = response.status().as_u16();
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large(status, limit));
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(too_large(status, limit));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => {
                return Err(RunnerError::Upstream {
                    status: Some(status),
                    message: format!("reading the response failed: {e}"),
                })
            }
        }
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

fn too_large(status: u16, limit: usize) -> RunnerError {
    RunnerError::Upstream {
        status: Some(status),
        message: format!("the response is larger than the limit of {limit} bytes"),
    }
}

/// Reads a chat completion: the first choice's message content and the usage. An error object
/// in a 200 response, missing or `null` choices, or a choice without text are errors.
///
/// ```
/// use enforce_runner::parse_completion;
/// let r = parse_completion(r#"{"object":"chat.completion","choices":[{"index":0,
///     "message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],
///     "usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#).unwrap();
/// assert_eq!(r.text, "Hi");
/// assert_eq!(r.usage.unwrap().input_tokens, 5);
/// assert_eq!(r.finish_reason, Some(enforce_core::FinishReason::Stop));
/// ```
pub fn parse_completion(body: &str) -> Result<Reply, RunnerError> {
    let v: Value = serde_json::from_str(body).map_err(|e| RunnerError::Protocol {
        message: format!("response is not JSON ({e}): {}", tail(body.trim(), 200)),
    })?;
    let is_error = v.get("error").is_some_and(|e| !e.is_null())
        || v.get("object").and_then(Value::as_str) == Some("error");
    if is_error {
        return Err(RunnerError::Upstream {
            status: Some(200),
            message: error_message(body).unwrap_or_else(|| "error without a message".into()),
        });
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| RunnerError::Protocol {
            message: "response has no choices".to_string(),
        })?;
    let message = choice.get("message");
    let tool_calls = match message.and_then(|m| m.get("tool_calls")) {
        Some(calls) => {
            ToolCall::list_from_openai(calls).map_err(|message| RunnerError::Protocol {
                message: format!("the model's tool calls cannot be read: {message}"),
            })?
        }
        None => Vec::new(),
    };
    let text = match message.and_then(|m| m.get("content")) {
        Some(Value::String(s)) => s.clone(),
        // Some servers send content as parts: [{"type":"text","text":"..."}].
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        // An answer that only calls tools has no content.
        None | Some(Value::Null) if !tool_calls.is_empty() => String::new(),
        _ => {
            return Err(RunnerError::Protocol {
                message: "the first choice has no message content".to_string(),
            });
        }
    };
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(FinishReason::parse);
    Ok(Reply {
        text,
        tool_calls,
        usage,
        finish_reason,
        ..Reply::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_shapes() {
        assert_eq!(
            error_message(r#"{"error":"model 'x' not found"}"#).as_deref(),
            Some("model 'x' not found")
        );
        assert_eq!(
            error_message(
                r#"{"error":{"code":500,"message":"context full","type":"server_error"}}"#
            )
            .as_deref(),
            Some("context full (type: server_error, code: 500)")
        );
        assert_eq!(
            error_message("<html>bad gateway</html>").as_deref(),
            Some("<html>bad gateway</html>")
        );
        assert_eq!(error_message("  "), None);
    }

    #[test]
    fn completion_faults() {
        assert!(matches!(
            parse_completion(r#"{"choices":null}"#),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_completion("not json"),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_completion(r#"{"error":{"message":"boom"}}"#),
            Err(RunnerError::Upstream { .. })
        ));
        // An empty list of calls and no content: nothing to deliver.
        assert!(matches!(
            parse_completion(r#"{"choices":[{"message":{"content":null,"tool_calls":[]}}]}"#),
            Err(RunnerError::Protocol { message }) if message.contains("no message content")
        ));
        assert!(matches!(
            parse_completion(r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c"}]}}]}"#),
            Err(RunnerError::Protocol { message }) if message.contains("has no `function`")
        ));
    }

    #[test]
    fn tool_calls_are_read_with_or_without_text() {
        let r = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},
                {"type":"function","function":{"name":"g","arguments":{"y":2}}}]},
                "finish_reason":"tool_calls"}]}"#,
        )
        .unwrap();
        assert_eq!(r.text, "");
        assert_eq!(
            r.tool_calls,
            [
                ToolCall::new("call_a", "f", r#"{"x":1}"#),
                ToolCall::new("call_1", "g", r#"{"y":2}"#)
            ]
        );
        let r = parse_completion(
            r#"{"choices":[{"message":{"content":"Let me look.","tool_calls":[
                {"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!((r.text.as_str(), r.tool_calls.len()), ("Let me look.", 1));
    }

    /// An image the client sent reaches the upstream as the parts array, not only its text.
    #[test]
    fn content_parts_go_out_instead_of_the_text() {
        let parts = vec![
            serde_json::json!({"type": "text", "text": "What is it?"}),
            serde_json::json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}}),
        ];
        let mut message = Message::new(Role::User, "What is it?");
        message.parts = parts.clone();
        assert_eq!(message_json(&message)["content"], Value::Array(parts));
        assert_eq!(
            message_json(&Message::new(Role::User, "hi"))["content"],
            "hi"
        );
    }

    #[test]
    fn tool_history_goes_out_as_openai_writes_it() {
        let call = ToolCall::new("call_1", "f", "{}");
        let assistant = message_json(&Message::assistant_calling("", vec![call]));
        assert_eq!(
            assistant,
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        );
        assert_eq!(
            message_json(&Message::tool("call_1", "42")),
            serde_json::json!({"role": "tool", "content": "42", "tool_call_id": "call_1"})
        );
    }

    #[test]
    fn backoff_grows_is_bounded_and_honours_retry_after() {
        let r = RetryConfig {
            max_retries: 5,
            initial_backoff_ms: 100,
            max_backoff_ms: 400,
            max_retry_after_secs: 60,
        };
        for attempt in 0..6 {
            let d = backoff_delay(&r, attempt, None).as_millis() as u64;
            let full = (100u64 << attempt).min(400);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d}");
        }
        assert_eq!(
            backoff_delay(&r, 0, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
    }

    #[test]
    fn http_date() {
        assert_eq!(
            parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT"),
            Some(784_111_777)
        );
        assert_eq!(parse_http_date("Sun, 06 Foo 1994 08:49:37 GMT"), None);
    }
}
