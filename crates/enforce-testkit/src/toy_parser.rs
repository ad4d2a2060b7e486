//! [`ToyParser`]: an in-process gRPC code checker (`toy.Parser/Validate` of
//! `protos/parser.proto`) on `127.0.0.1`, for the gRPC target of the `external` validator.
//!
//! The toy language has one command per line, `name(args)` or `name args`; `#` starts a
//! comment. A line whose command is not one of [`KNOWN_COMMANDS`] is reported as
//! `Line N: unknown command 'name'`. The messages are derived by hand (no protoc at build time)
//! and must match `protos/parser.proto`.

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::oneshot;
use tonic::body::Body;
use tonic::codegen::{http, Service};
use tonic::server::{NamedService, UnaryService};
use tonic::{Request, Response, Status};

/// Commands the toy parser knows.
pub const KNOWN_COMMANDS: &[&str] = &[
    "addVar",
    "addParam",
    "addResult",
    "encodeSHA256",
    "getDateTime",
    "if",
    "else",
    "end",
    "startLoop",
    "endLoop",
];

/// `toy.ValidateRequest`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValidateRequest {
    /// The code to check.
    #[prost(string, tag = "1")]
    pub code: String,
    /// Its language, as the caller says.
    #[prost(string, tag = "2")]
    pub language: String,
}

/// `toy.Verdict`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, prost::Enumeration)]
#[repr(i32)]
pub enum Verdict {
    /// Not set.
    Unspecified = 0,
    /// The code parses.
    Valid = 1,
    /// It does not.
    Invalid = 2,
}

/// `toy.ValidateResponse`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ValidateResponse {
    /// Whether the code parses.
    #[prost(bool, tag = "1")]
    pub valid: bool,
    /// `Line N: message` lines; empty when valid.
    #[prost(string, tag = "2")]
    pub trace: String,
    /// `valid` as an enum.
    #[prost(enumeration = "Verdict", tag = "3")]
    pub verdict: i32,
    /// The request's language, echoed.
    #[prost(string, tag = "4")]
    pub language: String,
}

/// Checks `code` in the toy language: `Line N: message` per unknown command.
pub fn toy_trace(code: &str) -> String {
    let mut trace = Vec::new();
    for (i, line) in code.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let command: String = line
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        if !KNOWN_COMMANDS.contains(&command.as_str()) {
            let shown = if command.is_empty() { line } else { &command };
            trace.push(format!(
                "Line {}: unknown command '{shown}' (expected a known command)",
                i + 1
            ));
        }
    }
    trace.join("\n")
}

/// How [`ToyParser`] behaves.
#[derive(Debug, Clone, Default)]
pub struct ToyParserOptions {
    /// Waits this long before answering (to test deadlines).
    pub delay: Duration,
    /// Serves TLS with a fresh self-signed certificate for `127.0.0.1` and `localhost`
    /// ([`ToyParser::ca_pem`]).
    pub tls: bool,
}

#[derive(Debug, Default)]
struct Shared {
    calls: AtomicUsize,
    requests: Mutex<Vec<ValidateRequest>>,
}

/// The tonic service: routes `/toy.Parser/Validate` through tonic's unary machinery.
#[derive(Debug, Clone)]
struct ParserService {
    delay: Duration,
    shared: Arc<Shared>,
}

impl NamedService for ParserService {
    const NAME: &'static str = "toy.Parser";
}

impl UnaryService<ValidateRequest> for ParserService {
    type Response = ValidateResponse;
    type Future = Pin<Box<dyn Future<Output = Result<Response<ValidateResponse>, Status>> + Send>>;

    fn call(&mut self, request: Request<ValidateRequest>) -> Self::Future {
        let delay = self.delay;
        let shared = self.shared.clone();
        Box::pin(async move {
            shared.calls.fetch_add(1, Ordering::SeqCst);
            let request = request.into_inner();
            if let Ok(mut r) = shared.requests.lock() {
                r.push(request.clone());
            }
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            let trace = toy_trace(&request.code);
            let valid = trace.is_empty();
            Ok(Response::new(ValidateResponse {
                valid,
                trace,
                verdict: if valid {
                    Verdict::Valid
                } else {
                    Verdict::Invalid
                } as i32,
                language: request.language,
            }))
        })
    }
}

impl Service<http::Request<Body>> for ParserService {
    type Response = http::Response<Body>;
    type Error = std::convert::Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(
        &mut self,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        std::task::Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        let service = self.clone();
        Box::pin(async move {
            if req.uri().path() == "/toy.Parser/Validate" {
                let codec = tonic_prost::ProstCodec::<ValidateResponse, ValidateRequest>::default();
                Ok(tonic::server::Grpc::new(codec).unary(service, req).await)
            } else {
                Ok(Status::unimplemented(format!("no method {}", req.uri().path())).into_http())
            }
        })
    }
}

/// An in-process gRPC toy parser on `127.0.0.1` (a free port); stops when dropped.
#[derive(Debug)]
pub struct ToyParser {
    addr: SocketAddr,
    tls: bool,
    ca_pem: Option<String>,
    shared: Arc<Shared>,
    shutdown: Option<oneshot::Sender<()>>,
}

/// Errors starting a [`ToyParser`].
pub type StartError = Box<dyn std::error::Error + Send + Sync>;

impl ToyParser {
    /// Starts a plain (HTTP/2 without TLS) parser that answers at once.
    pub async fn start() -> Result<ToyParser, StartError> {
        Self::start_with(ToyParserOptions::default()).await
    }

    /// Starts a parser with `options`.
    pub async fn start_with(options: ToyParserOptions) -> Result<ToyParser, StartError> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let service = ParserService {
            delay: options.delay,
            shared: shared.clone(),
        };
        let mut builder = tonic::transport::Server::builder();
        let mut ca_pem = None;
        if options.tls {
            let certified = rcgen::generate_simple_self_signed(vec![
                "127.0.0.1".to_string(),
                "localhost".to_string(),
            ])?;
            let cert = certified.cert.pem();
            let identity =
                tonic::transport::Identity::from_pem(&cert, certified.key_pair.serialize_pem());
            builder =
                builder.tls_config(tonic::transport::ServerTlsConfig::new().identity(identity))?;
            ca_pem = Some(cert);
        }
        let (tx, rx) = oneshot::channel::<()>();
        let incoming = tonic::transport::server::TcpIncoming::from(listener);
        let router = builder.add_service(service);
        tokio::spawn(async move {
            let _ = router
                .serve_with_incoming_shutdown(incoming, async {
                    let _ = rx.await;
                })
                .await;
        });
        Ok(ToyParser {
            addr,
            tls: options.tls,
            ca_pem,
            shared,
            shutdown: Some(tx),
        })
    }

    /// `http://127.0.0.1:port`, or `https://...` with TLS.
    pub fn url(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// The self-signed certificate (PEM) a TLS parser serves, to trust as a CA.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// How many calls reached the parser.
    pub fn calls(&self) -> usize {
        self.shared.calls.load(Ordering::SeqCst)
    }

    /// The requests received, in order.
    pub fn requests(&self) -> Vec<ValidateRequest> {
        self.shared
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// `protos/parser.proto` of this crate, the service's contract.
    pub fn proto_path() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("protos/parser.proto")
    }
}

impl Drop for ToyParser {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_toy_language() {
        assert_eq!(toy_trace("addVar(x, 1)\n# note\n\naddResult(x)"), "");
        assert_eq!(
            toy_trace("addVar(x, 1)\ngetSHA256(x)\nfor i in range(3)\n"),
            "Line 2: unknown command 'getSHA256' (expected a known command)\nLine 3: unknown command 'for' (expected a known command)"
        );
    }
}
