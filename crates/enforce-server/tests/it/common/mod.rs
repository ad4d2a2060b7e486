//! Test fixtures: a server on 127.0.0.1:0, simple validators and runners, and a stream parser
//! that reads SSE the way openai-python and Open WebUI do.

use enforce_core::{
    async_trait, Context, Enforcer, Issue, Policy, Reply, Request, Runner, RunnerError, Validation,
    Validator,
};
use enforce_core::{Ask, ReplyStream};
use enforce_server::{Model, ModelOptions, Server, ServerConfig, ServerError};
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// The OpenAI runner against `mock` (model `mock-model`), without HTTP retries: what a test
/// scripts is what the proxy gets.
pub fn mock_upstream(mock: &enforce_testkit::MockOpenAi) -> Arc<enforce_runner::OpenAiRunner> {
    mock_upstream_with(mock, enforce_core::runner::ToolFeedback::default())
}

/// [`mock_upstream`], feeding tool-call errors back to the model as `tool_feedback` says.
pub fn mock_upstream_with(
    mock: &enforce_testkit::MockOpenAi,
    tool_feedback: enforce_core::runner::ToolFeedback,
) -> Arc<enforce_runner::OpenAiRunner> {
    use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
    Arc::new(
        OpenAiRunner::new(OpenAiConfig {
            base_url: mock.url(),
            model: "mock-model".into(),
            retry: RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            },
            tool_feedback,
            ..OpenAiConfig::default()
        })
        .unwrap(),
    )
}

/// A running server.
pub struct Harness {
    pub base: String,
    pub server: Server,
    pub client: reqwest::Client,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<Result<(), ServerError>>>,
}

impl Harness {
    pub async fn start(server: Server) -> Harness {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.clone().serve(listener, async move {
            let _ = stopped.await;
        }));
        Harness {
            base: format!("http://{addr}"),
            server,
            client: reqwest::Client::builder().no_proxy().build().unwrap(),
            stop: Some(stop),
            task: Some(task),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub async fn chat(&self, body: Value) -> reqwest::Response {
        self.post("/v1/chat/completions", &body, &[]).await
    }

    /// POSTs `body` as JSON to `path` with the extra `headers`.
    pub async fn post(
        &self,
        path: &str,
        body: &Value,
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = self.client.post(self.url(path)).json(body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request.send().await.unwrap()
    }

    /// A GET of `path`.
    pub async fn get(&self, path: &str) -> reqwest::Response {
        self.client.get(self.url(path)).send().await.unwrap()
    }

    /// The JSON body of a GET of `path`.
    pub async fn get_json(&self, path: &str) -> Value {
        self.get(path).await.json().await.unwrap()
    }

    /// The text of `/metrics`.
    pub async fn metrics(&self) -> String {
        let response = self.client.get(self.url("/metrics")).send().await.unwrap();
        response.text().await.unwrap()
    }

    /// Waits (up to 10 s) until `n` enforcements are in flight.
    pub async fn wait_in_flight(&self, n: usize) {
        for _ in 0..1000 {
            if self.server.metrics().value("enforce_in_flight", &[]) >= n as f64 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("{n} requests never were in flight");
    }

    /// Asks the server to stop and waits until `serve` returned.
    pub async fn shutdown(mut self) -> Result<(), ServerError> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        match self.task.take() {
            Some(task) => tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("serve returned within 10 s")
                .expect("serve task did not panic"),
            None => Ok(()),
        }
    }

    /// Begins a shutdown without waiting.
    pub fn begin_shutdown(&mut self) -> JoinHandle<Result<(), ServerError>> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.task.take().expect("server task")
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// A one-model server.
pub fn server_with(
    config: ServerConfig,
    runner: Arc<dyn Runner>,
    enforcer: Enforcer,
    options: ModelOptions,
) -> Server {
    Server::builder(config)
        .model(Model::new("m", runner, Arc::new(enforcer)).with_options(options))
        .step_extractor(step_mark)
        .build()
        .unwrap()
}

/// The last `<!-- STEP: x -->` marker's step.
pub fn step_of(text: &str) -> Option<String> {
    step_mark(text).map(|m| m.step)
}

/// The marker `step_of` reads, with its place.
pub fn step_mark(text: &str) -> Option<enforce_server::StepMark> {
    let start = text.rfind("<!-- STEP:")?;
    let rest = &text[start + "<!-- STEP:".len()..];
    let end = rest.find("-->")?;
    Some(enforce_server::StepMark {
        step: rest[..end].trim().to_string(),
        range: start..start + "<!-- STEP:".len() + end + "-->".len(),
    })
}

/// Requires a step marker; repairs by appending `<!-- STEP: done -->` when `repairs` is set.
pub struct NeedsMarker {
    pub repairs: bool,
}

#[async_trait]
impl Validator for NeedsMarker {
    fn name(&self) -> &str {
        "step_marker"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if step_of(response).is_some() {
            vec![]
        } else {
            vec![Issue::error(
                "step_marker",
                "MISSING_STEP_MARKER",
                "The answer has no step marker.",
            )
            .with_hint("End the answer with <!-- STEP: x -->.")]
        })
    }
    fn repair(&self, response: &str, _: &Context, _: &[Issue]) -> Option<String> {
        self.repairs
            .then(|| format!("{response}\n<!-- STEP: done -->"))
    }
}

/// The list a chat user is shown for `NeedsMarker`'s error: each code with its message and
/// hint, then the request to try again.
pub const MARKER_ERROR_LIST: &str = "What was wrong:\n- MISSING_STEP_MARKER: The answer has no step marker. End the answer with <!-- STEP: x -->.\nPlease try again or rephrase your request.";

/// Never gives a verdict.
pub struct Down;

#[async_trait]
impl Validator for Down {
    fn name(&self) -> &str {
        "external"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Err(enforce_core::Unavailable::new("checker unreachable"))
    }
}

/// A proxy over `runner` with the step-marker contract (no repairs) and the defaults.
pub fn marker_server(runner: Arc<dyn Runner>) -> Server {
    server_with(
        ServerConfig::default(),
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    )
}

pub fn marker_enforcer(repairs: bool) -> Enforcer {
    Enforcer::new(vec![Box::new(NeedsMarker { repairs })])
}

pub fn marker_enforcer_retries(repairs: bool, max_retries: u32) -> Enforcer {
    marker_enforcer(repairs).with_policy(Policy::builder().max_retries(max_retries).build())
}

/// Waits `delay` before each answer of the inner runner.
pub struct Slow<R> {
    pub inner: R,
    pub delay: Duration,
}

impl<R: Runner> Runner for Slow<R> {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move {
            tokio::time::sleep(self.delay).await;
            self.inner.ask(ask).reply().await
        })
    }
}

/// Streams that start at once: the first keep-alive is due after 1 ms, so with a runner
/// slower than that ([`late`]) an error reaches the client inside the `200` stream, as it does
/// for a loop that takes longer than a keep-alive interval (an outcome known before the first
/// byte is a plain HTTP error instead).
pub fn streams_start_at_once(config: ServerConfig) -> ServerConfig {
    ServerConfig {
        keepalive_interval: Duration::from_millis(1),
        ..config
    }
}

/// `runner`, answering 50 ms late: after [`streams_start_at_once`]'s first keep-alive.
pub fn late<R: Runner>(runner: R) -> Slow<R> {
    Slow {
        inner: runner,
        delay: Duration::from_millis(50),
    }
}

/// Answers each call only after the test released one permit of `gate`.
pub struct Gated<R> {
    pub inner: R,
    pub gate: Arc<tokio::sync::Semaphore>,
}

impl<R: Runner> Runner for Gated<R> {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move {
            if let Ok(permit) = self.gate.acquire().await {
                permit.forget();
            }
            self.inner.ask(ask).reply().await
        })
    }
}

/// Panics on every call.
pub struct Panicking;

impl Runner for Panicking {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async { panic!("runner bug") })
    }
}

/// Answers `text` with session id `sess-<n>` where n counts calls, recording each request.
pub struct Sessions {
    pub calls: std::sync::Mutex<Vec<Request>>,
    pub count: AtomicUsize,
    pub texts: Vec<&'static str>,
}

impl Sessions {
    pub fn new(texts: Vec<&'static str>) -> Self {
        Sessions {
            calls: std::sync::Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
            texts,
        }
    }
    fn answer(&self, request: &Request) -> Result<Reply, RunnerError> {
        self.calls.lock().unwrap().push(request.clone());
        let n = self.count.fetch_add(1, Ordering::SeqCst);
        Ok(Reply {
            session_id: Some(format!("sess-{}", n + 1)),
            ..Reply::text(self.texts[n % self.texts.len()])
        })
    }
}

impl Runner for Sessions {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move { self.answer(ask.request) })
    }
}

pub fn user_body(stream: bool) -> Value {
    serde_json::json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Explain it."}],
        "stream": stream,
    })
}

/// The three API surfaces, by the names [`surface_request`] takes.
pub const SURFACES: [&str; 3] = ["chat", "responses", "messages"];

/// The path of `surface` (`chat`, `responses`, `messages`) and a request body asking model
/// `model` to "Explain it.", in that surface's shape.
pub fn surface_request(surface: &str, model: &str, stream: bool) -> (&'static str, Value) {
    match surface {
        "chat" => (
            "/v1/chat/completions",
            serde_json::json!({"model": model, "stream": stream,
                               "messages": [{"role": "user", "content": "Explain it."}]}),
        ),
        "responses" => (
            "/v1/responses",
            serde_json::json!({"model": model, "input": "Explain it.", "stream": stream}),
        ),
        "messages" => (
            "/v1/messages",
            serde_json::json!({"model": model, "max_tokens": 64, "stream": stream,
                               "messages": [{"role": "user", "content": "Explain it."}]}),
        ),
        other => panic!("no surface `{other}`"),
    }
}

/// A stream read the way openai-python / Open WebUI read it: only `data:` lines count.
pub use enforce_testkit::sse::ParsedStream;

pub async fn read_stream(response: reqwest::Response) -> (String, ParsedStream) {
    assert_eq!(response.status(), 200);
    let ct = response
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    assert!(ct.starts_with("text/event-stream"), "content-type {ct}");
    let raw = response.text().await.unwrap();
    let parsed = ParsedStream::parse(&raw);
    (raw, parsed)
}
