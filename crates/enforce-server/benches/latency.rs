//! Latency the proxy adds, on loopback with a keep-alive client.
//!
//! `bare_http` is a minimal axum handler returning a fixed `chat.completion`: the cost of one
//! HTTP round trip on this machine. `proxy_*` goes through enforce-server with an in-process
//! runner that answers at once and one validator, so the difference between the two is what
//! the proxy itself adds (parsing, enforcement loop, validation, bookkeeping, SSE framing).
//!
//! Run: `cargo bench -p enforce-server --bench latency`

use criterion::{criterion_group, criterion_main, Criterion};
use enforce_core::{async_trait, Context, Enforcer, Issue, Reply, Runner, Validation, Validator};
use enforce_core::{Ask, ReplyStream};
use enforce_server::{Model, Server, ServerConfig};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const ANSWER: &str =
    "A short answer that explains the decision in two sentences. It is fine.\n<!-- STEP: why -->";

/// Answers at once.
struct Instant0;

impl Runner for Instant0 {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async { Ok(Reply::text(ANSWER)) })
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

async fn start_proxy() -> String {
    let server = Server::builder(ServerConfig {
        max_concurrent: 1024,
        ..ServerConfig::default()
    })
    .model(Model::new(
        "m",
        Arc::new(Instant0),
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

async fn one(client: &reqwest::Client, url: &str, stream: bool) {
    let body = json!({"model":"m","messages":[{"role":"user","content":"Why?"}],"stream":stream});
    let resp = client.post(url).json(&body).send().await.expect("send");
    let bytes = resp.bytes().await.expect("body");
    assert!(bytes.len() > 50);
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (proxy, bare) = rt.block_on(async { (start_proxy().await, start_bare().await) });
    let client = reqwest::Client::builder()
        .no_proxy()
        .tcp_nodelay(true)
        .pool_max_idle_per_host(64)
        .build()
        .expect("client");

    let mut group = c.benchmark_group("latency");
    group.measurement_time(Duration::from_secs(5));
    for (name, url, stream) in [
        ("bare_http", &bare, false),
        ("proxy_json", &proxy, false),
        ("proxy_stream", &proxy, true),
    ] {
        group.bench_function(format!("{name}/c1"), |b| {
            b.iter(|| rt.block_on(one(&client, url, stream)))
        });
        // c=10: ten requests in flight at once; time per batch divided by 10 is throughput,
        // the batch time itself is the latency under that load.
        group.bench_function(format!("{name}/c10_batch"), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        let batch: Vec<_> = (0..10)
                            .map(|_| {
                                let client = client.clone();
                                let url = url.clone();
                                tokio::spawn(async move { one(&client, &url, stream).await })
                            })
                            .collect();
                        for task in batch {
                            task.await.expect("request task");
                        }
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
