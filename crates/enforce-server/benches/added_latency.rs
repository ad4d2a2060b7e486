//! Percentiles of the latency the proxy adds, and memory with 1,000 held streams.
//!
//! Criterion reports means; the targets are p50/p99, so this harness times each request itself:
//! N sequential requests (c=1) and N requests from 10 concurrent clients (c=10), against a bare
//! axum handler (one HTTP round trip, the floor) and against the proxy with an in-process runner
//! that answers at once. Added latency = proxy percentile − bare percentile.
//!
//! The same against the mock OpenAI upstream of `enforce-testkit` on loopback: the upstream
//! asked directly versus through the proxy (`OpenAiRunner` → mock), so added latency includes
//! the runner's HTTP client hop.
//!
//! Every API surface is measured: `/v1/chat/completions`, `/v1/responses` and `/v1/messages`
//! (the same pipeline; the Responses rows add its translation, its event stream and the stored
//! response, the Messages rows their translation and event stream).
//!
//! Then it opens 1,000 streaming requests whose runner waits until released, and reports the
//! process RSS (server and client share the process, so this is an upper bound for the server).
//!
//! Run: `cargo bench -p enforce-server --bench added_latency` (Linux, for /proc RSS).

use enforce_core::{async_trait, Context, Enforcer, Issue, Reply, Runner, Validation, Validator};
use enforce_core::{Ask, ReplyStream};
use enforce_server::{Model, Server, ServerConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::RwLock;

const ANSWER: &str =
    "A short answer that explains the decision in two sentences. It is fine.\n<!-- STEP: why -->";
const N: usize = 4000;

/// Answers at once, or once the write lock on `gate` is released.
struct Gated {
    gate: Option<Arc<RwLock<()>>>,
}

impl Runner for Gated {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move {
            if let Some(gate) = &self.gate {
                drop(gate.read().await);
            }
            Ok(Reply::text(ANSWER))
        })
    }
}

struct HasMarker;

#[async_trait]
impl Validator for HasMarker {
    fn name(&self) -> &str {
        "step_marker"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("<!-- STEP:") {
            vec![]
        } else {
            vec![Issue::error(
                "step_marker",
                "MISSING_STEP_MARKER",
                "no marker",
            )]
        })
    }
}

async fn start_proxy(gate: Option<Arc<RwLock<()>>>) -> String {
    let server = Server::builder(ServerConfig {
        max_concurrent: 4096,
        ..ServerConfig::default()
    })
    .model(Model::new(
        "m",
        Arc::new(Gated { gate }),
        Arc::new(Enforcer::new(vec![Box::new(HasMarker)])),
    ))
    .build()
    .expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.serve(listener, std::future::pending()));
    format!("http://{addr}/v1/chat/completions")
}

/// The proxy in front of `upstream` (an OpenAI-compatible base URL).
async fn start_proxy_upstream(upstream: &str) -> String {
    let runner = enforce_runner::OpenAiRunner::new(enforce_runner::OpenAiConfig {
        base_url: upstream.to_string(),
        model: "mock-model".into(),
        retry: enforce_runner::RetryConfig {
            max_retries: 0,
            ..enforce_runner::RetryConfig::default()
        },
        ..enforce_runner::OpenAiConfig::default()
    })
    .expect("runner");
    let server = Server::builder(ServerConfig {
        max_concurrent: 4096,
        ..ServerConfig::default()
    })
    .model(Model::new(
        "m",
        Arc::new(runner),
        Arc::new(Enforcer::new(vec![Box::new(HasMarker)])),
    ))
    .build()
    .expect("server");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(server.serve(listener, std::future::pending()));
    format!("http://{addr}/v1/chat/completions")
}

async fn start_bare() -> String {
    let body = json!({"id":"x","object":"chat.completion","created":0,"model":"m",
        "choices":[{"index":0,"message":{"role":"assistant","content":ANSWER},"finish_reason":"stop"}]});
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move |_: axum::body::Bytes| {
            let body = body.clone();
            async move { axum::Json(body) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1/chat/completions")
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(2048)
        .build()
        .expect("client")
}

/// The API surface a request goes to.
#[derive(Clone, Copy)]
enum Api {
    Chat,
    Responses,
    Messages,
}

impl Api {
    /// The surface's URL on a proxy whose chat URL is `chat_url`.
    fn url(self, chat_url: &str) -> String {
        match self {
            Api::Chat => chat_url.to_string(),
            Api::Responses => chat_url.replace("/v1/chat/completions", "/v1/responses"),
            Api::Messages => chat_url.replace("/v1/chat/completions", "/v1/messages"),
        }
    }

    fn body(self, stream: bool) -> serde_json::Value {
        match self {
            Api::Chat => {
                json!({"model":"m","messages":[{"role":"user","content":"Why?"}],"stream":stream})
            }
            Api::Responses => json!({"model":"m","input":"Why?","stream":stream}),
            Api::Messages => json!({"model":"m","max_tokens":256,
                                    "messages":[{"role":"user","content":"Why?"}],"stream":stream}),
        }
    }
}

async fn one(client: &reqwest::Client, url: &str, stream: bool) -> Duration {
    one_on(client, url, Api::Chat, stream).await
}

async fn one_on(client: &reqwest::Client, url: &str, api: Api, stream: bool) -> Duration {
    let body = api.body(stream);
    let start = Instant::now();
    let resp = client.post(url).json(&body).send().await.expect("send");
    let bytes = resp.bytes().await.expect("body");
    let took = start.elapsed();
    assert!(bytes.len() > 50);
    took
}

async fn run(url: &str, stream: bool, concurrency: usize) -> Vec<Duration> {
    run_on(url, Api::Chat, stream, concurrency).await
}

async fn run_on(url: &str, api: Api, stream: bool, concurrency: usize) -> Vec<Duration> {
    let client = client();
    for _ in 0..200 {
        one_on(&client, url, api, stream).await;
    }
    let per = N / concurrency;
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let client = client.clone();
            let url = url.to_string();
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(per);
                for _ in 0..per {
                    times.push(one_on(&client, &url, api, stream).await);
                }
                times
            })
        })
        .collect();
    let mut all = Vec::with_capacity(N);
    for t in tasks {
        all.extend(t.await.expect("task"));
    }
    all.sort();
    all
}

/// The `X-Enforce-Overhead-Ms` the proxy reports on `n` sequential completions, sorted.
async fn reported_overheads(url: &str, n: usize) -> Vec<f64> {
    let client = client();
    let body = json!({"model":"m","messages":[{"role":"user","content":"Why?"}]});
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        let resp = client.post(url).json(&body).send().await.expect("send");
        let ms = resp
            .headers()
            .get("x-enforce-overhead-ms")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<f64>().ok())
            .expect("the proxy reports its overhead");
        resp.bytes().await.expect("body");
        all.push(ms);
    }
    all.sort_by(f64::total_cmp);
    all
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

fn rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map(|kb| kb / 1024.0)
        .unwrap_or(f64::NAN)
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too: keep that quick.
    if std::env::args().any(|a| a == "--test" || a == "--list") {
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let bare = start_bare().await;
        let proxy = start_proxy(None).await;
        println!("requests per case: {N}, keep-alive client, loopback, 2 worker threads");
        println!("case                      p50 µs   p99 µs   added p50   added p99");
        for c in [1usize, 10] {
            let floor = run(&bare, false, c).await;
            let (f50, f99) = (pct(&floor, 0.5), pct(&floor, 0.99));
            println!("bare_http c={c:<2}            {f50:8.1} {f99:8.1}");
            for (name, api, stream) in [
                ("proxy_json", Api::Chat, false),
                ("proxy_stream", Api::Chat, true),
                ("responses_json", Api::Responses, false),
                ("responses_strm", Api::Responses, true),
                ("messages_json", Api::Messages, false),
                ("messages_strm", Api::Messages, true),
            ] {
                let t = run_on(&api.url(&proxy), api, stream, c).await;
                let (p50, p99) = (pct(&t, 0.5), pct(&t, 0.99));
                println!(
                    "{name:<13} c={c:<2}        {p50:8.1} {p99:8.1}   {:9.1}   {:9.1}",
                    p50 - f50,
                    p99 - f99
                );
            }
        }

        let mock = enforce_testkit::MockOpenAi::start(
            enforce_testkit::MockScript::new()
                .reply(enforce_testkit::MockReply::text(ANSWER))
                .then(enforce_testkit::Then::RepeatLast),
        )
        .await
        .expect("mock upstream");
        let direct = format!("{}/chat/completions", mock.url());
        let via = start_proxy_upstream(&mock.url()).await;
        println!("against the mock upstream (direct vs through the proxy):");
        for c in [1usize, 10] {
            let floor = run(&direct, false, c).await;
            let (f50, f99) = (pct(&floor, 0.5), pct(&floor, 0.99));
            println!("mock_direct c={c:<2}          {f50:8.1} {f99:8.1}");
            let t = run(&via, false, c).await;
            let (p50, p99) = (pct(&t, 0.5), pct(&t, 0.99));
            println!(
                "via_proxy_json c={c:<2}       {p50:8.1} {p99:8.1}   {:9.1}   {:9.1}",
                p50 - f50,
                p99 - f99
            );
            let t = run(&via, true, c).await;
            let (p50, p99) = (pct(&t, 0.5), pct(&t, 0.99));
            println!(
                "via_proxy_stream c={c:<2}     {p50:8.1} {p99:8.1}   {:9.1}   {:9.1}",
                p50 - f50,
                p99 - f99
            );
            for (name, api, stream) in [
                ("via_responses_json", Api::Responses, false),
                ("via_responses_strm", Api::Responses, true),
                ("via_messages_json ", Api::Messages, false),
                ("via_messages_strm ", Api::Messages, true),
            ] {
                let t = run_on(&api.url(&via), api, stream, c).await;
                let (p50, p99) = (pct(&t, 0.5), pct(&t, 0.99));
                println!(
                    "{name} c={c:<2} {p50:8.1} {p99:8.1}   {:9.1}   {:9.1}",
                    p50 - f50,
                    p99 - f99
                );
            }
        }

        // What the proxy says about itself: X-Enforce-Overhead-Ms (its time minus the runner's
        // wait). It leaves out the client-side HTTP hop that the added latency above includes.
        let reported = reported_overheads(&via, 2000).await;
        let at = |p: f64| reported[((reported.len() as f64 - 1.0) * p).round() as usize] * 1000.0;
        println!(
            "X-Enforce-Overhead-Ms via the mock, c=1: p50 {:.1} µs, p99 {:.1} µs",
            at(0.5),
            at(0.99)
        );

        let gate = Arc::new(RwLock::new(()));
        let closed = gate.clone().write_owned().await;
        let held = start_proxy(Some(gate.clone())).await;
        let before = rss_mb();
        let client = client();
        let streams: Vec<_> = (0..1000)
            .map(|_| {
                let client = client.clone();
                let url = held.clone();
                tokio::spawn(async move { one(&client, &url, true).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let during = rss_mb();
        drop(closed);
        let mut done = 0;
        for s in streams {
            s.await.expect("stream");
            done += 1;
        }
        println!(
            "1000 held streams: RSS before {before:.1} MB, while held {during:.1} MB (+{:.1} MB, client included), {done} completed",
            during - before
        );
    });
}
