//! What the HTTP runners share: one endpoint posted to with bounded retries and jittered
//! exponential backoff that honour `Retry-After` ([`HttpEndpoint`]), bodies read with a size
//! limit, error bodies in every shape servers send ([`error_message`]), and the driver of a
//! streamed answer ([`Streaming`]) over any wire format's [`EventReader`].

use crate::error::{timeout_from_secs, ConfigError};
use crate::process::tail;
use crate::sse::{Chunk, EventReader, StreamFault};
use crate::transport::{SendError, Transport, UpstreamResponse};
use crate::upload::{Target, UploadError, WriteBody};
use enforce_core::{
    async_trait, Message, Reply, ReplyStream, Request, RunnerError, StreamEvent, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::borrow::Cow;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Default of the HTTP runners' `max_response_bytes` (32 MiB).
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 32 * 1024 * 1024;

/// Where an HTTP runner posts, and how: the URL parsed once (parsing it per request showed up
/// in the proxy's profile), the transport with its timeouts, the headers every request carries
/// (the API key, the content type), the retries and the body limit.
#[derive(Debug, Clone)]
pub(crate) struct HttpEndpoint {
    url: reqwest::Url,
    /// `url` as hyper takes it.
    uri: http::Uri,
    transport: Transport,
    headers: reqwest::header::HeaderMap,
    retry: RetryConfig,
    max_response_bytes: usize,
    timeout: Duration,
}

/// `url` as hyper takes it (`configured`: the base URL as the config spells it, for the error).
fn uri_of(url: &reqwest::Url, configured: &str) -> Result<http::Uri, ConfigError> {
    url.as_str()
        .parse()
        .map_err(|_| ConfigError::InvalidBaseUrl(configured.to_string()))
}

/// The settings an [`HttpEndpoint`] is made of, as the runner configs spell them.
pub(crate) struct EndpointSettings<'a> {
    /// The configured base URL (checked: `http://` or `https://`).
    pub base_url: &'a str,
    /// The path after the base URL (`/chat/completions`, `/v1/messages`).
    pub path: &'a str,
    /// `timeout_secs`.
    pub timeout_secs: f64,
    /// `connect_timeout_secs`.
    pub connect_timeout_secs: f64,
    /// `retry`.
    pub retry: &'a RetryConfig,
    /// `max_response_bytes`.
    pub max_response_bytes: usize,
}

impl HttpEndpoint {
    /// Checks the base URL and the timeouts and builds the client.
    pub(crate) fn new(settings: EndpointSettings<'_>) -> Result<Self, ConfigError> {
        let base = settings.base_url.trim().trim_end_matches('/').to_string();
        if base.is_empty() {
            return Err(ConfigError::Missing { field: "base_url" });
        }
        let https = base.starts_with("https://");
        if !https && !base.starts_with("http://") {
            return Err(ConfigError::InvalidBaseUrl(settings.base_url.to_string()));
        }
        if https && !cfg!(feature = "rustls") {
            return Err(ConfigError::TlsUnavailable(settings.base_url.to_string()));
        }
        let timeout = timeout_from_secs("timeout_secs", settings.timeout_secs)?;
        let connect = timeout_from_secs("connect_timeout_secs", settings.connect_timeout_secs)?;
        if settings.max_response_bytes == 0 {
            return Err(ConfigError::Zero {
                field: "max_response_bytes",
            });
        }
        let client = reqwest::Client::builder()
            .connect_timeout(connect)
            .build()
            .map_err(|e| ConfigError::HttpClient(e.to_string()))?;
        let url = reqwest::Url::parse(&format!("{base}{}", settings.path))
            .map_err(|_| ConfigError::InvalidBaseUrl(settings.base_url.to_string()))?;
        let uri = uri_of(&url, settings.base_url)?;
        let transport = Transport::for_url(&url, connect, |name| std::env::var(name).ok(), client);
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::CONTENT_TYPE,
            reqwest::header::HeaderValue::from_static("application/json"),
        );
        // What reqwest sends by default, so both transports send the same.
        headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static("*/*"),
        );
        Ok(HttpEndpoint {
            url,
            uri,
            transport,
            headers,
            retry: settings.retry.clone(),
            max_response_bytes: settings.max_response_bytes,
            timeout,
        })
    }

    /// Sends `value` as header `name` with every request.
    pub(crate) fn set_header(
        &mut self,
        name: impl reqwest::header::IntoHeaderName,
        value: reqwest::header::HeaderValue,
    ) {
        self.headers.insert(name, value);
    }

    /// The same endpoint (client, headers, retries) with `path` at the end of its URL replaced
    /// by `by` (`/chat/completions` by `/responses`).
    pub(crate) fn replaced(&self, path: &str, by: &str) -> Result<Self, ConfigError> {
        let url = self.url.as_str();
        let base = url.strip_suffix(path).unwrap_or(url);
        let url = reqwest::Url::parse(&format!("{base}{by}"))
            .map_err(|_| ConfigError::InvalidBaseUrl(self.url.to_string()))?;
        self.at(url)
    }

    /// The same endpoint (client, headers, retries) at its URL followed by `suffix`
    /// (`/v1/messages` + `/count_tokens`).
    pub(crate) fn extended(&self, suffix: &str) -> Result<Self, ConfigError> {
        let url = reqwest::Url::parse(&format!("{}{suffix}", self.url))
            .map_err(|_| ConfigError::InvalidBaseUrl(self.url.to_string()))?;
        self.at(url)
    }

    /// The same endpoint at `url` (same scheme and host: the transport stays right for it).
    fn at(&self, url: reqwest::Url) -> Result<Self, ConfigError> {
        Ok(HttpEndpoint {
            uri: uri_of(&url, url.as_str())?,
            url,
            ..self.clone()
        })
    }

    /// The URL posted to.
    pub(crate) fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// The largest body read.
    pub(crate) fn max_response_bytes(&self) -> usize {
        self.max_response_bytes
    }

    /// Posts `body` (carrying `messages`), retrying connect errors, 408, 429 and 5xx
    /// (Anthropic's 529 too); returns the successful response, or the error of the last try
    /// with the server's own message.
    pub(crate) async fn post<B: serde::Serialize + ?Sized + Sync>(
        &self,
        body: &B,
        messages: &[Message],
    ) -> Result<UpstreamResponse, RunnerError> {
        self.post_written(&|out| serde_json::to_writer(out, body), messages)
            .await
    }

    /// [`post`](Self::post) of the body `write` writes, carrying `messages`.
    pub(crate) async fn post_written(
        &self,
        write: WriteBody<'_>,
        messages: &[Message],
    ) -> Result<UpstreamResponse, RunnerError> {
        // Written for each try, not kept for a retry: the bytes are freed once sent, and a
        // large body is streamed as it is written (`crate::upload`), so a long conversation
        // is not in memory twice while the upstream reads it or thinks.
        let retry = &self.retry;
        let target = Target {
            transport: &self.transport,
            url: &self.url,
            uri: &self.uri,
            headers: &self.headers,
        };
        let room = room_for(messages);
        let mut attempt: u32 = 0;
        loop {
            let deadline = tokio::time::Instant::now() + self.timeout;
            let sent = match crate::upload::post(&target, write, room, deadline).await {
                Err(UploadError::Unwritable(e)) => return Err(unwritable(&e)),
                Err(UploadError::Send(e)) => Err(e),
                Ok(response) => Ok(response),
            };
            let (error, retry_after) = match sent {
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
                    let text = self.read(response).await?;
                    let error = upstream_error(
                        status.as_u16(),
                        error_message(&text)
                            .unwrap_or_else(|| format!("HTTP {status} with an empty body")),
                        retry_after,
                    );
                    let code = status.as_u16();
                    if !(code == 408 || code == 429 || status.is_server_error()) {
                        return Err(error);
                    }
                    (error, retry_after)
                }
                Err(SendError::Timeout) => return Err(self.timeout_error()),
                Err(SendError::Connect(e)) => (
                    RunnerError::Upstream {
                        status: None,
                        message: format!("cannot connect to {}: {e}", self.url),
                    },
                    None,
                ),
                Err(SendError::Other(e)) => {
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

    /// Reads a whole body within the limit.
    pub(crate) async fn read(&self, response: UpstreamResponse) -> Result<String, RunnerError> {
        read_limited(response, self.max_response_bytes)
            .await
            .map_err(|failure| match failure {
                // A body still dribbling in at the deadline is the same timeout as a server
                // that never answered: the client sees one status for both.
                ReadFailure::TimedOut => self.timeout_error(),
                ReadFailure::Failed(error) => error,
            })
    }

    /// The error of a call that ran out of time.
    pub(crate) fn timeout_error(&self) -> RunnerError {
        RunnerError::Timeout {
            after_ms: u64::try_from(self.timeout.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// What a streamed answer needs of its runner: the endpoint, how to open the stream, how to
/// read an answer the server sent whole, and what an error event means.
#[async_trait]
pub(crate) trait StreamSource: Sync {
    /// The wire format's event reader.
    type Reader: EventReader;
    /// The endpoint the answers come from.
    fn http(&self) -> &HttpEndpoint;
    /// Writes the body of the request for `messages`, streamed or not, into `out`.
    fn write_body(
        &self,
        request: &Request,
        messages: &[Message],
        stream: bool,
        out: &mut dyn std::io::Write,
    ) -> serde_json::Result<()>;
    /// Posts the streamed request for `messages`.
    async fn open(
        &self,
        request: &Request,
        messages: &[Message],
    ) -> Result<UpstreamResponse, RunnerError> {
        self.http()
            .post_written(
                &|out| self.write_body(request, messages, true, out),
                messages,
            )
            .await
    }
    /// Reads a whole answer (asked without streaming, or a server that cannot stream).
    fn parse_whole(&self, body: &str) -> Result<Reply, RunnerError>;
    /// The error an error event's data carries.
    fn stream_error(&self, data: &str) -> RunnerError;
}

/// The error of a request body serde could not write.
fn unwritable(error: &serde_json::Error) -> RunnerError {
    RunnerError::Protocol {
        message: format!("cannot serialize the request: {error}"),
    }
}

/// Room for a request body carrying `messages`: their text, an eighth more for escapes, and
/// a kilobyte for the fields around them.
fn room_for(messages: &[Message]) -> usize {
    messages
        .iter()
        .map(|m| m.content.len() + m.content.len() / 8 + 64)
        .fold(1024, usize::saturating_add)
}

/// Asks without streaming: posts the whole body, reads and parses the answer.
pub(crate) async fn ask_whole<S: StreamSource>(
    source: &S,
    request: &Request,
    messages: &[Message],
) -> Result<Reply, RunnerError> {
    let started = Instant::now();
    let endpoint = source.http();
    let response = endpoint
        .post_written(
            &|out| source.write_body(request, messages, false, out),
            messages,
        )
        .await?;
    let text = endpoint.read(response).await?;
    let mut reply = source.parse_whole(&text)?;
    reply.duration = Some(started.elapsed());
    Ok(reply)
}

/// An answer as a [`ReplyStream`]: streamed ([`stream_reply`]), or with `stream` off the whole
/// answer as one event. `messages` stay borrowed when they are the request's own
/// ([`Ask::messages`](enforce_core::Ask::messages)): a copy would hold a long conversation
/// twice while the model answers.
pub(crate) fn answer<'a, S: StreamSource>(
    source: &'a S,
    request: &'a Request,
    messages: Cow<'a, [Message]>,
    stream: bool,
) -> ReplyStream<'a> {
    if !stream {
        return ReplyStream::new(futures_util::stream::once(async move {
            ask_whole(source, request, &messages)
                .await
                .map(StreamEvent::Done)
        }));
    }
    stream_reply(source, request, messages)
}

/// A streamed ask: text deltas, usage as it is reported, then the whole reply. Dropping the
/// stream drops the response, which closes the connection: that is how a cut stops the
/// generation.
fn stream_reply<'a, S: StreamSource>(
    source: &'a S,
    request: &'a Request,
    messages: Cow<'a, [Message]>,
) -> ReplyStream<'a> {
    let state = Streaming {
        source,
        request,
        messages,
        response: None,
        reader: S::Reader::default(),
        text: String::new(),
        usage: None,
        pending: VecDeque::new(),
        read: 0,
        started: Instant::now(),
        finished: false,
    };
    ReplyStream::new(futures_util::stream::unfold(state, Streaming::next))
}

/// The state of one streamed answer, advanced by [`Streaming::next`].
struct Streaming<'a, S: StreamSource> {
    source: &'a S,
    request: &'a Request,
    messages: Cow<'a, [Message]>,
    /// The open response; `None` before it is opened.
    response: Option<UpstreamResponse>,
    reader: S::Reader,
    text: String,
    usage: Option<Usage>,
    /// Events read but not yet yielded.
    pending: VecDeque<Result<StreamEvent, RunnerError>>,
    read: usize,
    started: Instant,
    finished: bool,
}

impl<'a, S: StreamSource> Streaming<'a, S> {
    /// The next event.
    async fn next(mut self) -> Option<(Result<StreamEvent, RunnerError>, Self)> {
        let endpoint = self.source.http();
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((event, self));
            }
            if self.finished {
                return None;
            }
            let Some(response) = self.response.as_mut() else {
                match self.source.open(self.request, &self.messages).await {
                    Ok(response) if is_event_stream(&response) => self.response = Some(response),
                    // A server that cannot stream may answer whole: read it so.
                    Ok(response) => {
                        let whole = match endpoint.read(response).await {
                            Ok(body) => self.source.parse_whole(&body),
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
                    if self.read > endpoint.max_response_bytes() {
                        self.fail(too_large(200, endpoint.max_response_bytes()));
                        continue;
                    }
                    match self.reader.feed(&bytes) {
                        Ok(chunks) => self.take(chunks),
                        Err(StreamFault::ErrorEvent(data)) => {
                            let error = self.source.stream_error(&data);
                            self.fail(error)
                        }
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
                            "the stream ended without {} after {} bytes of answer",
                            S::Reader::END,
                            self.text.len()
                        ),
                    };
                    self.fail(error);
                }
                Err(e) if e.is_timeout() => self.fail(endpoint.timeout_error()),
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
                    // Nothing after the end counts; let the connection go.
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

/// The API key of a runner config: `api_key`, else the variable `api_key_env` names (which
/// must be set), else the variable `default_env` when it is set.
pub(crate) fn api_key(
    key: Option<&String>,
    key_env: Option<&String>,
    default_env: Option<&str>,
) -> Result<Option<String>, ConfigError> {
    match (key, key_env) {
        (Some(key), _) => Ok(Some(key.clone())),
        (None, Some(var)) => std::env::var(var)
            .map(Some)
            .map_err(|_| ConfigError::MissingApiKeyEnv(var.clone())),
        (None, None) => Ok(default_env.and_then(|var| std::env::var(var).ok())),
    }
}

/// A header value for a secret (marked sensitive, so it is never logged).
pub(crate) fn secret_header(value: &str) -> Result<reqwest::header::HeaderValue, ConfigError> {
    let mut value = reqwest::header::HeaderValue::from_str(value).map_err(|_| {
        ConfigError::HttpClient("the API key holds characters a header cannot carry".into())
    })?;
    value.set_sensitive(true);
    Ok(value)
}

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

/// Parses `Retry-After`: seconds (`120`, also `1.5`) or an HTTP date in any of the three forms
/// HTTP allows (`Sun, 06 Nov 1994 08:49:37 GMT`), as a wait from now.
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
    let at = httpdate::parse_http_date(value).ok()?;
    Some(
        at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO),
    )
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

/// Why a body could not be read whole.
enum ReadFailure {
    /// The call's deadline passed before the body ended.
    TimedOut,
    /// Anything else.
    Failed(RunnerError),
}

impl From<RunnerError> for ReadFailure {
    fn from(error: RunnerError) -> Self {
        ReadFailure::Failed(error)
    }
}

/// Reads a body of at most `limit` bytes, chunk by chunk, so an enormous or endless body is
/// refused after `limit` bytes instead of being buffered whole.
async fn read_limited(mut response: UpstreamResponse, limit: usize) -> Result<String, ReadFailure> {
    let status = response.status().as_u16();
    if response.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large(status, limit).into());
    }
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > limit {
                    return Err(too_large(status, limit).into());
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) if e.is_timeout() => return Err(ReadFailure::TimedOut),
            Err(e) => {
                return Err(ReadFailure::Failed(RunnerError::Upstream {
                    status: Some(status),
                    message: format!("reading the response failed: {e}"),
                }))
            }
        }
    }
    // Checked whole (the fast path); replacement characters only for a body that needs them.
    Ok(String::from_utf8(body)
        .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
}

fn too_large(status: u16, limit: usize) -> RunnerError {
    RunnerError::Upstream {
        status: Some(status),
        message: format!("the response is larger than the limit of {limit} bytes"),
    }
}

/// `Content-Type: text/event-stream`: the server streams as asked.
fn is_event_stream(response: &UpstreamResponse) -> bool {
    response
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("text/event-stream"))
}

/// The error of an upstream's error answer: [`RunnerError::Busy`] for a server that
/// rate-limits (429) or is overloaded (503, Anthropic's 529), with its `Retry-After`;
/// [`RunnerError::Upstream`] for any other status.
pub(crate) fn upstream_error(
    status: u16,
    message: String,
    retry_after: Option<Duration>,
) -> RunnerError {
    match status {
        429 | 503 | 529 => RunnerError::Busy {
            status,
            message,
            // Rounded up: a client told to wait 0 s after 0.5 s would come back too early.
            retry_after_secs: retry_after.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0)),
        },
        _ => RunnerError::Upstream {
            status: Some(status),
            message,
        },
    }
}

fn with_attempts(error: RunnerError, tries: u32) -> RunnerError {
    let gave_up = |message: String| format!("{message} (gave up after {tries} tries)");
    match error {
        RunnerError::Upstream { status, message } if tries > 1 => RunnerError::Upstream {
            status,
            message: gave_up(message),
        },
        RunnerError::Busy {
            status,
            message,
            retry_after_secs,
        } if tries > 1 => RunnerError::Busy {
            status,
            message: gave_up(message),
            retry_after_secs,
        },
        other => other,
    }
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
    fn retry_after_dates_are_waits_from_now() {
        let in_two_minutes = httpdate::fmt_http_date(SystemTime::now() + Duration::from_secs(120));
        let wait = parse_retry_after(&in_two_minutes).map(|d| d.as_secs_f64());
        assert!(
            matches!(wait, Some(w) if (118.0..=120.0).contains(&w)),
            "{wait:?}"
        );
        assert_eq!(parse_retry_after("Sun, 06 Foo 1994 08:49:37 GMT"), None);
        assert_eq!(parse_retry_after("Sun, 06 Nov 1994 08:49:37"), None);
    }
}
