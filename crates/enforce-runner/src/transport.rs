//! How an HTTP runner's requests leave the process ([`Transport`]). A plain `http://` upstream
//! with no proxy in the environment is posted to over hyper's HTTP/1 connections directly,
//! kept open in a pool of this runner's own ([`DirectPool`]); an `https://` one, or any behind
//! a proxy, through reqwest (TLS, proxies).
//!
//! Why two: reqwest's per-request layers cost the proxy's hot path about 34,000 instructions
//! per request (its redirect policy parses the URL back from the request twice, the proxy
//! matcher, the tower retry and timeout layers), a seventh of `enforce serve`'s whole work
//! per request (counted with callgrind as in `docs/performance.md`). A model server on the
//! same machine or network (llama.cpp, vLLM, Ollama) is plain HTTP, and it is where the proxy's
//! own time shows. Both give the callers an [`UpstreamResponse`] and the same errors.
//!
//! Why not hyper-util's pooled client: it keys its pool by scheme and host in SipHash maps and
//! hands each connection back through a spawned task, about 8,000 instructions per request.
//! A runner talks to one host, so its pool is a stack of idle connections.

use bytes::Bytes;
use http_body::{Frame, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use reqwest::header::{HeaderMap, HeaderValue};
use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{ready, Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::{Instant, Sleep};

/// The environment variables that put a proxy in front of a plain-HTTP URL (as reqwest reads
/// them).
const HTTP_PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Idle pooled connections are closed after this long (reqwest's default idle timeout).
const POOL_IDLE: Duration = Duration::from_secs(90);

/// Where a request goes out.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// hyper's HTTP/1 connections, for a plain-HTTP URL without a proxy.
    Direct(Arc<DirectPool>),
    /// reqwest: TLS, proxies from the environment.
    Reqwest(reqwest::Client),
}

/// HTTP/1 connections to one plain-HTTP upstream, kept open between requests. A connection
/// goes back to the pool when its response body has been read to the end; one dropped before
/// that is closed (its unread rest would otherwise be read as the next answer).
#[derive(Debug)]
pub(crate) struct DirectPool {
    /// `host:port`, as connected to.
    address: String,
    /// The `Host` header every request carries (hyper's connection API sets none).
    host: HeaderValue,
    connect_timeout: Duration,
    /// Oldest first; the newest is taken first (it is the likeliest to be open still).
    idle: Mutex<VecDeque<Idle>>,
}

#[derive(Debug)]
struct Idle {
    sender: SendRequest<UploadBody>,
    since: std::time::Instant,
}

impl DirectPool {
    fn new(url: &reqwest::Url, connect_timeout: Duration) -> Option<DirectPool> {
        let host = url.host_str()?;
        let port = url.port_or_known_default()?;
        // The Host header as the URL gives it: the port only when the URL names one.
        let authority = match url.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        Some(DirectPool {
            // An IPv6 host keeps its brackets (`[::1]:8080`), as a socket address is written.
            address: format!("{host}:{port}"),
            host: HeaderValue::from_str(&authority).ok()?,
            connect_timeout,
            idle: Mutex::new(VecDeque::new()),
        })
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, VecDeque<Idle>> {
        // A plain list behind the lock: a panic elsewhere cannot leave it inconsistent.
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The most recently used idle connection that can take a request now. Closed and expired
    /// ones are dropped; one still settling its last exchange stays for later.
    fn checkout(&self) -> Option<SendRequest<UploadBody>> {
        let mut idle = self.idle();
        let mut settling = Vec::new();
        let mut found = None;
        while let Some(connection) = idle.pop_back() {
            if connection.sender.is_closed() || connection.since.elapsed() >= POOL_IDLE {
                continue;
            }
            if connection.sender.is_ready() {
                found = Some(connection.sender);
                break;
            }
            settling.push(connection);
        }
        idle.extend(settling.into_iter().rev());
        found
    }

    /// Keeps `sender` for the next request, and closes the connections idle for too long
    /// (dropping its last sender closes a connection).
    fn put_back(&self, sender: SendRequest<UploadBody>) {
        let mut idle = self.idle();
        while idle
            .front()
            .is_some_and(|c| c.sender.is_closed() || c.since.elapsed() >= POOL_IDLE)
        {
            idle.pop_front();
        }
        if !sender.is_closed() {
            idle.push_back(Idle {
                sender,
                since: std::time::Instant::now(),
            });
        }
    }

    async fn connect(&self) -> Result<SendRequest<UploadBody>, SendError> {
        let connected = tokio::time::timeout(
            self.connect_timeout,
            tokio::net::TcpStream::connect(&self.address),
        )
        .await;
        let stream = match connected {
            Err(_) => {
                return Err(SendError::Connect(format!(
                    "no connection to {} within {} ms",
                    self.address,
                    self.connect_timeout.as_millis()
                )))
            }
            Ok(Err(e)) => return Err(SendError::Connect(format!("{}: {e}", self.address))),
            Ok(Ok(stream)) => stream,
        };
        // Requests are written whole: nothing to gain from Nagle's delay.
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| SendError::Connect(chain(&e)))?;
        // The connection's own task reads and writes the socket until either side closes it.
        // Its error (the upstream went away) reaches the request in flight, if any.
        tokio::spawn(async move {
            let _ = connection.await;
        });
        Ok(sender)
    }

    /// Sends `request` on an idle connection, or a new one. A pooled connection the upstream
    /// closed as it was taken gives the request back unsent: it goes out once more on a new
    /// connection (what hyper-util's pool does for such a request).
    async fn send(
        self: &Arc<Self>,
        mut request: http::Request<UploadBody>,
    ) -> Result<http::Response<Returning>, SendError> {
        request
            .headers_mut()
            .insert(http::header::HOST, self.host.clone());
        if let Some(mut sender) = self.checkout() {
            match sender.try_send_request(request).await {
                Ok(response) => return Ok(self.returning(response, sender)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => request = unsent,
                    None => return Err(SendError::Other(chain(e.error()))),
                },
            }
        }
        let mut sender = self.connect().await?;
        match sender.send_request(request).await {
            Ok(response) => Ok(self.returning(response, sender)),
            Err(e) => Err(SendError::Other(chain(&e))),
        }
    }

    fn returning(
        self: &Arc<Self>,
        response: http::Response<hyper::body::Incoming>,
        sender: SendRequest<UploadBody>,
    ) -> http::Response<Returning> {
        response.map(|body| Returning {
            body,
            sender: Some(sender),
            pool: self.clone(),
        })
    }
}

/// A response body that gives its connection back to the pool once read to the end.
pub(crate) struct Returning {
    body: hyper::body::Incoming,
    sender: Option<SendRequest<UploadBody>>,
    pool: Arc<DirectPool>,
}

impl Returning {
    fn give_back(&mut self) {
        if let Some(sender) = self.sender.take() {
            self.pool.put_back(sender);
        }
    }
}

impl http_body::Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, hyper::Error>>> {
        let frame = ready!(Pin::new(&mut self.body).poll_frame(cx));
        match &frame {
            None => self.give_back(),
            Some(Ok(_)) if self.body.is_end_stream() => self.give_back(),
            // An error leaves the connection in an unknown state: it is not reused.
            Some(Err(_)) => self.sender = None,
            Some(Ok(_)) => {}
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// A request body as the transports send it.
#[derive(Debug)]
pub(crate) enum UploadBody {
    /// Written before the request is sent; `None` once it is taken.
    Whole(Option<Bytes>),
    /// Chunks written as the connection takes them; `left` bytes to come (the body's
    /// `Content-Length`, from a first pass that counts them).
    Streamed {
        chunks: mpsc::Receiver<io::Result<Bytes>>,
        left: u64,
    },
}

impl From<Bytes> for UploadBody {
    fn from(bytes: Bytes) -> Self {
        UploadBody::Whole(Some(bytes))
    }
}

impl http_body::Body for UploadBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, io::Error>>> {
        match self.get_mut() {
            UploadBody::Whole(whole) => Poll::Ready(
                whole
                    .take()
                    .filter(|bytes| !bytes.is_empty())
                    .map(|bytes| Ok(Frame::data(bytes))),
            ),
            UploadBody::Streamed { chunks, left } => {
                let chunk = ready!(chunks.poll_recv(cx));
                if let Some(Ok(bytes)) = &chunk {
                    *left = left.saturating_sub(bytes.len() as u64);
                }
                Poll::Ready(chunk.map(|chunk| chunk.map(Frame::data)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            UploadBody::Whole(whole) => whole.as_ref().is_none_or(Bytes::is_empty),
            UploadBody::Streamed { left, .. } => *left == 0,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            UploadBody::Whole(whole) => {
                SizeHint::with_exact(whole.as_ref().map_or(0, |bytes| bytes.len() as u64))
            }
            UploadBody::Streamed { left, .. } => SizeHint::with_exact(*left),
        }
    }
}

/// Why a request got no response.
#[derive(Debug)]
pub(crate) enum SendError {
    /// The time for the whole call ran out.
    Timeout,
    /// No connection could be made (the message says why).
    Connect(String),
    /// Anything else (the message says what).
    Other(String),
}

impl Transport {
    /// The transport for `url`: direct when it is plain HTTP and `env` names no proxy for it.
    pub(crate) fn for_url(
        url: &reqwest::Url,
        connect_timeout: Duration,
        env: impl Fn(&str) -> Option<String>,
        reqwest: reqwest::Client,
    ) -> Transport {
        let proxied = HTTP_PROXY_VARS
            .iter()
            .any(|name| env(name).is_some_and(|v| !v.trim().is_empty()));
        if url.scheme() != "http" || proxied {
            return Transport::Reqwest(reqwest);
        }
        match DirectPool::new(url, connect_timeout) {
            Some(pool) => Transport::Direct(Arc::new(pool)),
            None => Transport::Reqwest(reqwest),
        }
    }

    /// Whether requests go through hyper directly.
    #[cfg(test)]
    pub(crate) fn is_direct(&self) -> bool {
        matches!(self, Transport::Direct(_))
    }

    /// Posts `body` to `url` (`uri`: the same, as hyper takes it) with `headers`; the
    /// response's body must be read by `deadline` too (the call's whole time, as reqwest's
    /// `timeout` counts it).
    pub(crate) async fn post(
        &self,
        url: &reqwest::Url,
        uri: &http::Uri,
        headers: &HeaderMap,
        body: UploadBody,
        deadline: Instant,
    ) -> Result<UpstreamResponse, SendError> {
        match self {
            Transport::Direct(pool) => {
                let mut request = http::Request::new(body);
                *request.method_mut() = http::Method::POST;
                // Origin form (`/v1/chat/completions`), as a client talking to the host itself
                // sends it.
                if let Some(path) = uri.path_and_query() {
                    *request.uri_mut() = http::Uri::from(path.clone());
                }
                *request.headers_mut() = headers.clone();
                // One timer for the call and its body: it goes on with the body.
                let mut sleep = Box::pin(tokio::time::sleep_until(deadline));
                let sent = tokio::select! {
                    biased;
                    sent = pool.send(request) => Some(sent),
                    () = sleep.as_mut() => None,
                };
                match sent {
                    None => Err(SendError::Timeout),
                    Some(Err(e)) => Err(e),
                    Some(Ok(response)) => {
                        let (head, body) = response.into_parts();
                        Ok(UpstreamResponse::Direct {
                            head,
                            body: Deadlined { body, sleep },
                        })
                    }
                }
            }
            Transport::Reqwest(client) => {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let body = match body {
                    UploadBody::Whole(whole) => reqwest::Body::from(whole.unwrap_or_default()),
                    streamed => reqwest::Body::wrap(streamed),
                };
                let sent = client
                    .post(url.clone())
                    .headers(headers.clone())
                    .timeout(timeout)
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(response) => Ok(UpstreamResponse::Reqwest(response)),
                    Err(e) if e.is_timeout() => Err(SendError::Timeout),
                    Err(e) if e.is_connect() => Err(SendError::Connect(e.to_string())),
                    Err(e) => Err(SendError::Other(e.to_string())),
                }
            }
        }
    }
}

/// An error with its sources (hyper's own message is only "client error (Connect)").
fn chain(error: &dyn std::error::Error) -> String {
    let mut message = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        message.push_str(": ");
        message.push_str(&cause.to_string());
        source = cause.source();
    }
    message
}

/// A response body that fails with a timeout once its deadline passes.
pub(crate) struct Deadlined<B> {
    body: B,
    sleep: Pin<Box<Sleep>>,
}

impl<B> http_body::Body for Deadlined<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: std::error::Error + Send + Sync + 'static,
{
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.sleep.as_mut().poll(cx).is_ready() {
            // reqwest's `is_timeout` knows an `io::Error` of this kind.
            let timed_out = std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the response was not read within the runner's timeout",
            );
            return Poll::Ready(Some(Err(Box::new(timed_out))));
        }
        Pin::new(&mut self.body)
            .poll_frame(cx)
            .map_err(|e| Box::new(e) as Self::Error)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

/// An upstream's answer, whichever way it came: its head, and its body read chunk by chunk
/// by the call's deadline.
pub(crate) enum UpstreamResponse {
    /// Over the runner's own connection, its body failing with a timeout past the deadline.
    /// Read here, not wrapped in a `reqwest::Response`: the wrapping cost a boxed body, a map
    /// for the response's URL and reqwest's own layers on every answer.
    Direct {
        head: http::response::Parts,
        body: Deadlined<Returning>,
    },
    /// Through reqwest (TLS, proxies), with its own timeout.
    Reqwest(reqwest::Response),
}

impl std::fmt::Debug for UpstreamResponse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let transport = match self {
            UpstreamResponse::Direct { .. } => "direct",
            UpstreamResponse::Reqwest(_) => "reqwest",
        };
        f.debug_struct("UpstreamResponse")
            .field("transport", &transport)
            .field("status", &self.status())
            .finish_non_exhaustive()
    }
}

/// Why an upstream's body could not be read to its end.
#[derive(Debug)]
pub(crate) struct ReadError {
    message: String,
    timeout: bool,
}

impl ReadError {
    /// The call's deadline passed before the body ended.
    pub(crate) fn is_timeout(&self) -> bool {
        self.timeout
    }
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl UpstreamResponse {
    /// The status.
    pub(crate) fn status(&self) -> http::StatusCode {
        match self {
            UpstreamResponse::Direct { head, .. } => head.status,
            UpstreamResponse::Reqwest(response) => response.status(),
        }
    }

    /// The headers.
    pub(crate) fn headers(&self) -> &HeaderMap {
        match self {
            UpstreamResponse::Direct { head, .. } => &head.headers,
            UpstreamResponse::Reqwest(response) => response.headers(),
        }
    }

    /// The body's length, when the head gives it.
    pub(crate) fn content_length(&self) -> Option<u64> {
        match self {
            UpstreamResponse::Direct { body, .. } => http_body::Body::size_hint(body).exact(),
            UpstreamResponse::Reqwest(response) => response.content_length(),
        }
    }

    /// The next piece of the body; `None` at its end.
    pub(crate) async fn chunk(&mut self) -> Result<Option<Bytes>, ReadError> {
        match self {
            UpstreamResponse::Direct { body, .. } => loop {
                match http_body_util::BodyExt::frame(body).await {
                    None => return Ok(None),
                    Some(Ok(frame)) => {
                        // Trailers carry no body: read on.
                        if let Ok(data) = frame.into_data() {
                            return Ok(Some(data));
                        }
                    }
                    Some(Err(e)) => {
                        return Err(ReadError {
                            // What `Deadlined` fails with at the deadline.
                            timeout: e.downcast_ref::<std::io::Error>().map(std::io::Error::kind)
                                == Some(std::io::ErrorKind::TimedOut),
                            message: chain(&*e),
                        });
                    }
                }
            },
            UpstreamResponse::Reqwest(response) => response.chunk().await.map_err(|e| ReadError {
                timeout: e.is_timeout(),
                message: e.to_string(),
            }),
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("a valid URL")
    }

    fn uri_of(url: &reqwest::Url) -> http::Uri {
        url.as_str().parse().expect("a URL is a URI")
    }

    /// Posts `body` to `url` with no headers, by `deadline`.
    async fn post(
        transport: &Transport,
        url: &reqwest::Url,
        body: Bytes,
        deadline: Instant,
    ) -> Result<UpstreamResponse, SendError> {
        transport
            .post(url, &uri_of(url), &HeaderMap::new(), body.into(), deadline)
            .await
    }

    fn pick(u: &str, vars: &[(&str, &str)]) -> bool {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        Transport::for_url(&url(u), Duration::from_secs(1), env, reqwest::Client::new()).is_direct()
    }

    #[test]
    fn the_pool_connects_to_the_urls_host_and_port_and_names_its_host_as_the_url_does() {
        let cases = [
            (
                "http://127.0.0.1:8080/v1",
                "127.0.0.1:8080",
                "127.0.0.1:8080",
            ),
            ("http://localhost/v1", "localhost:80", "localhost"),
            ("http://[::1]:11434/v1", "[::1]:11434", "[::1]:11434"),
        ];
        for (u, address, host) in cases {
            let pool = DirectPool::new(&url(u), Duration::from_secs(1)).expect("a pool");
            assert_eq!(pool.address, address, "{u}");
            assert_eq!(pool.host, host, "{u}");
            // What the connection is opened with must parse or resolve as given.
            assert!(
                pool.address.parse::<std::net::SocketAddr>().is_ok() || !address.starts_with('['),
                "{u}"
            );
        }
    }

    #[tokio::test]
    async fn plain_http_without_a_proxy_goes_direct_and_the_rest_through_reqwest() {
        assert!(pick("http://127.0.0.1:8080/v1/chat/completions", &[]));
        assert!(pick(
            "http://localhost/v1",
            &[("HTTPS_PROXY", "http://p:3128")]
        ));
        assert!(pick("http://localhost/v1", &[("HTTP_PROXY", " ")]));
        assert!(!pick("https://api.openai.com/v1", &[]));
        for var in HTTP_PROXY_VARS {
            assert!(
                !pick("http://localhost/v1", &[(var, "http://proxy:3128")]),
                "{var}"
            );
        }
    }

    /// A server that reads the start of each request, sends `answer`, and holds the
    /// connection for `hold` without reading more.
    pub(crate) async fn answering_server(answer: &'static [u8], hold: Duration) -> reqwest::Url {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buffer = [0u8; 4096];
                    let _ = socket.read(&mut buffer).await;
                    let _ = socket.write_all(answer).await;
                    tokio::time::sleep(hold).await;
                });
            }
        });
        url(&format!("http://{address}/v1/chat/completions"))
    }

    /// A server that sends the head and the start of a body, then stalls.
    async fn stalling_server() -> reqwest::Url {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"a\":";
        answering_server(head, Duration::from_secs(10)).await
    }

    #[tokio::test]
    async fn both_transports_give_the_head_and_time_out_on_a_stalled_body() {
        let url = stalling_server().await;
        let direct = direct(&url);
        assert!(direct.is_direct());
        let through_reqwest = Transport::Reqwest(reqwest::Client::new());
        for transport in [direct, through_reqwest] {
            let deadline = Instant::now() + Duration::from_millis(300);
            let mut response = post(&transport, &url, Bytes::from_static(b"{}"), deadline)
                .await
                .expect("the head arrives");
            assert_eq!(response.status(), 200);
            assert_eq!(response.content_length(), Some(100));
            let mut read = Vec::new();
            let error = loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => read.extend_from_slice(&chunk),
                    Ok(None) => panic!("the body cannot end: it stalls"),
                    Err(e) => break e,
                }
            };
            assert_eq!(read, b"{\"a\":", "{transport:?}");
            assert!(error.is_timeout(), "{transport:?}: {error}");
            assert!(Instant::now() >= deadline);
            assert!(Instant::now() < deadline + Duration::from_secs(2));
        }
    }

    #[tokio::test]
    async fn a_refused_connection_is_a_connect_error_on_both() {
        // A port that was free a moment ago: nobody listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let url = url(&format!("http://127.0.0.1:{port}/v1"));
        let direct = direct(&url);
        for transport in [direct, Transport::Reqwest(reqwest::Client::new())] {
            let deadline = Instant::now() + Duration::from_secs(5);
            match post(&transport, &url, Bytes::new(), deadline).await {
                Err(SendError::Connect(message)) => assert!(!message.is_empty()),
                other => panic!("{transport:?}: {other:?}"),
            }
        }
    }

    /// A keep-alive HTTP/1 server answering every request with `{}` (and `Connection: close`
    /// plus a close when `close` is set); it counts the connections it accepted.
    async fn counting_server(close: bool) -> (reqwest::Url, Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let address = listener.local_addr().expect("address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counter = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                counter.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut pending = Vec::new();
                    let mut buffer = [0u8; 4096];
                    loop {
                        // One request: its head, then `content-length` bytes of body.
                        let head_end = loop {
                            if let Some(i) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
                                break i + 4;
                            }
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => pending.extend_from_slice(&buffer[..n]),
                            }
                        };
                        let head = String::from_utf8_lossy(&pending[..head_end]).to_lowercase();
                        let length: usize = head
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse().ok())
                            .unwrap_or(0);
                        while pending.len() < head_end + length {
                            match socket.read(&mut buffer).await {
                                Ok(0) | Err(_) => return,
                                Ok(n) => pending.extend_from_slice(&buffer[..n]),
                            }
                        }
                        pending.drain(..head_end + length);
                        let answer = if close {
                            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
                        } else {
                            "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
                        };
                        if socket.write_all(answer.as_bytes()).await.is_err() || close {
                            return;
                        }
                    }
                });
            }
        });
        (
            url(&format!("http://{address}/v1/chat/completions")),
            accepted,
        )
    }

    async fn post_and_read(transport: &Transport, url: &reqwest::Url) -> Bytes {
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut response = post(transport, url, Bytes::from_static(b"{}"), deadline)
            .await
            .expect("an answer");
        assert_eq!(response.status(), 200);
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.expect("the body") {
            body.extend_from_slice(&chunk);
        }
        Bytes::from(body)
    }

    fn direct(url: &reqwest::Url) -> Transport {
        Transport::for_url(
            url,
            Duration::from_secs(1),
            |_| None,
            reqwest::Client::new(),
        )
    }

    /// The connections the counting server accepted for three requests in turn.
    async fn connections_for_three_requests(close: bool) -> usize {
        let (url, accepted) = counting_server(close).await;
        let direct = direct(&url);
        assert!(direct.is_direct());
        for _ in 0..3 {
            assert_eq!(post_and_read(&direct, &url).await, "{}");
        }
        accepted.load(std::sync::atomic::Ordering::SeqCst)
    }

    #[tokio::test]
    async fn the_direct_transport_keeps_one_connection_for_requests_in_turn() {
        assert_eq!(connections_for_three_requests(false).await, 1);
    }

    #[tokio::test]
    async fn the_direct_transport_opens_a_new_connection_when_the_upstream_closed_one() {
        assert_eq!(connections_for_three_requests(true).await, 3);
    }

    #[tokio::test]
    async fn a_response_left_unread_does_not_give_its_connection_back() {
        let url = stalling_server().await;
        let Transport::Direct(pool) = direct(&url) else {
            panic!("plain HTTP goes direct");
        };
        let transport = Transport::Direct(pool.clone());
        let deadline = Instant::now() + Duration::from_secs(5);
        let response = post(&transport, &url, Bytes::new(), deadline)
            .await
            .expect("the head arrives");
        drop(response);
        assert!(
            pool.idle().is_empty(),
            "a half-read connection went back to the pool"
        );
    }
}
