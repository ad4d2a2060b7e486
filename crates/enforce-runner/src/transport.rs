//! How an HTTP runner's requests leave the process ([`Transport`]). A plain `http://` upstream
//! with no proxy in the environment is posted to through hyper's pooled client directly; an
//! `https://` one, or any behind a proxy, through reqwest (TLS, proxies).
//!
//! Why two: reqwest's per-request layers cost the proxy's hot path about 34,000 instructions
//! per request (its redirect policy parses the URL back from the request twice, the proxy
//! matcher, the tower retry and timeout layers), a seventh of `enforce serve`'s whole work
//! per request (callgrind, see `BENCHMARKS.md`). A model server on the same machine or network
//! (llama.cpp, vLLM, Ollama) is plain HTTP, and it is where the proxy's own time shows. Both
//! give the callers the same `reqwest::Response` and the same errors.

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use reqwest::header::HeaderMap;
use reqwest::ResponseBuilderExt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// The environment variables that put a proxy in front of a plain-HTTP URL (as reqwest reads
/// them).
const HTTP_PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// Idle pooled connections are closed after this long (reqwest's default).
const POOL_IDLE: Duration = Duration::from_secs(90);

/// Where a request goes out.
#[derive(Debug, Clone)]
pub(crate) enum Transport {
    /// hyper's pooled HTTP/1 client, for a plain-HTTP URL without a proxy (boxed: it is much
    /// larger than reqwest's handle).
    Direct(Box<hyper_util::client::legacy::Client<HttpConnector, Full<Bytes>>>),
    /// reqwest: TLS, proxies from the environment.
    Reqwest(reqwest::Client),
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
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(connect_timeout));
        connector.set_nodelay(true);
        let client = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .pool_idle_timeout(POOL_IDLE)
            .pool_timer(TokioTimer::new())
            .build(connector);
        Transport::Direct(Box::new(client))
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
        body: Bytes,
        deadline: Instant,
    ) -> Result<reqwest::Response, SendError> {
        match self {
            Transport::Direct(client) => {
                let mut request = http::Request::new(Full::new(body));
                *request.method_mut() = http::Method::POST;
                *request.uri_mut() = uri.clone();
                *request.headers_mut() = headers.clone();
                let sent = tokio::time::timeout_at(deadline, client.request(request)).await;
                match sent {
                    Err(_) => Err(SendError::Timeout),
                    Ok(Err(e)) if e.is_connect() => Err(SendError::Connect(chain(&e))),
                    Ok(Err(e)) => Err(SendError::Other(chain(&e))),
                    Ok(Ok(response)) => {
                        let (mut parts, body) = response.into_parts();
                        // The response's URL as reqwest keeps it (without it, reqwest parses a
                        // placeholder URL for every response).
                        let mut with_url = http::Response::builder().url(url.clone());
                        if let Some(extensions) = with_url.extensions_mut() {
                            parts.extensions.extend(std::mem::take(extensions));
                        }
                        let body = reqwest::Body::wrap(Deadlined {
                            body,
                            sleep: Box::pin(tokio::time::sleep_until(deadline)),
                        });
                        Ok(reqwest::Response::from(http::Response::from_parts(
                            parts, body,
                        )))
                    }
                }
            }
            Transport::Reqwest(client) => {
                let timeout = deadline.saturating_duration_since(Instant::now());
                let sent = client
                    .post(url.clone())
                    .headers(headers.clone())
                    .timeout(timeout)
                    .body(body)
                    .send()
                    .await;
                match sent {
                    Ok(response) => Ok(response),
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
struct Deadlined<B> {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("a valid URL")
    }

    fn uri_of(url: &reqwest::Url) -> http::Uri {
        url.as_str().parse().expect("a URL is a URI")
    }

    fn pick(u: &str, vars: &[(&str, &str)]) -> bool {
        let vars: Vec<(String, String)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let env = move |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        Transport::for_url(&url(u), Duration::from_secs(1), env, reqwest::Client::new()).is_direct()
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

    /// A server that sends the head and the start of a body, then stalls.
    async fn stalling_server() -> reqwest::Url {
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
                    let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{\"a\":";
                    let _ = socket.write_all(head.as_bytes()).await;
                    tokio::time::sleep(Duration::from_secs(10)).await;
                });
            }
        });
        url(&format!("http://{address}/v1/chat/completions"))
    }

    #[tokio::test]
    async fn both_transports_give_the_head_and_time_out_on_a_stalled_body() {
        let url = stalling_server().await;
        let direct = Transport::for_url(
            &url,
            Duration::from_secs(1),
            |_| None,
            reqwest::Client::new(),
        );
        assert!(direct.is_direct());
        let through_reqwest = Transport::Reqwest(reqwest::Client::new());
        for transport in [direct, through_reqwest] {
            let deadline = Instant::now() + Duration::from_millis(300);
            let mut response = transport
                .post(
                    &url,
                    &uri_of(&url),
                    &HeaderMap::new(),
                    Bytes::from_static(b"{}"),
                    deadline,
                )
                .await
                .expect("the head arrives");
            assert_eq!(response.status(), 200);
            assert_eq!(response.url(), &url);
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
        let direct = Transport::for_url(
            &url,
            Duration::from_secs(1),
            |_| None,
            reqwest::Client::new(),
        );
        for transport in [direct, Transport::Reqwest(reqwest::Client::new())] {
            let deadline = Instant::now() + Duration::from_secs(5);
            match transport
                .post(
                    &url,
                    &uri_of(&url),
                    &HeaderMap::new(),
                    Bytes::new(),
                    deadline,
                )
                .await
            {
                Err(SendError::Connect(message)) => assert!(!message.is_empty()),
                other => panic!("{transport:?}: {other:?}"),
            }
        }
    }
}
