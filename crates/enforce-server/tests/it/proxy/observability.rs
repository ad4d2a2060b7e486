//! Observability and shutdown: metrics, the scrape hook, draining in-flight requests and
//! flushing the audit log.

use super::{simple, temp_dir, BAD, GOOD};
use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_server::{FsyncPolicy, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn metrics_count_what_happened() {
    let (h, _) = simple(
        vec![BAD, GOOD, BAD, "x"],
        marker_enforcer_retries(true, 2),
        ModelOptions::default(),
    )
    .await;
    assert_eq!(
        h.chat(user_body(false)).await.headers()["x-enforce-status"],
        "passed"
    );
    assert_eq!(
        h.chat(user_body(false)).await.headers()["x-enforce-status"],
        "repaired"
    );
    let _ = h.client.get(h.url("/v1/models")).send().await.unwrap();
    let resp = h.chat(json!({"model": "m", "messages": "nope"})).await;
    assert_eq!(resp.status(), 400);
    let text = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    for expected in [
        "enforce_requests_total{model=\"m\",status=\"passed\"} 1",
        "enforce_requests_total{model=\"m\",status=\"repaired\"} 1",
        "enforce_attempts_total{model=\"m\"} 4",
        "enforce_issues_total{code=\"MISSING_STEP_MARKER\",model=\"m\",severity=\"error\",validator=\"step_marker\"} 3",
        "enforce_repairs_total{model=\"m\",validator=\"step_marker\"} 1",
        "enforce_rejected_total{reason=\"bad_request\"} 1",
        "enforce_upstream_latency_seconds_count{model=\"m\"} 4",
        "enforce_overhead_seconds_count{model=\"m\"} 2",
        "enforce_in_flight 0",
        "# TYPE enforce_overhead_seconds histogram",
    ] {
        assert!(text.contains(expected), "missing `{expected}` in\n{text}");
    }
}

#[tokio::test]
async fn shutdown_finishes_in_flight_requests_and_flushes_the_audit_log() {
    let dir = temp_dir("audit");
    let audit = dir.join("audit.jsonl");
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD, GOOD]),
        delay: Duration::from_millis(400),
    });
    let config = ServerConfig {
        audit_log: Some(audit.clone()),
        audit_fsync: FsyncPolicy::Interval(Duration::from_secs(3600)),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let mut h = Harness::start(server).await;
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let non_stream =
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await });
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let stream = tokio::spawn(async move {
        let resp = client
            .post(url)
            .json(&user_body(true))
            .send()
            .await
            .unwrap();
        read_stream(resp).await.1
    });
    h.wait_in_flight(2).await;
    let serving = h.begin_shutdown();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // New connections are refused while draining.
    let late = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(h.url("/healthz"))
        .send()
        .await;
    assert!(late.is_err() || late.unwrap().status() == 503);

    let resp = non_stream.await.unwrap().unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["choices"][0]["message"]["content"], GOOD);
    assert_eq!(stream.await.unwrap().openai_result().unwrap(), GOOD);
    serving.await.unwrap().unwrap();

    // Both outcomes are in the audit log, one JSON line each, even with a lazy fsync policy.
    let log = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["status"] == "passed"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn shutdown_grace_bounds_the_drain() {
    let runner = Arc::new(Slow {
        inner: ScriptedRunner::texts([GOOD]),
        delay: Duration::from_secs(30),
    });
    let config = ServerConfig {
        shutdown_grace: Duration::from_millis(200),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let mut h = Harness::start(server).await;
    let url = h.url("/v1/chat/completions");
    let client = h.client.clone();
    let _pending =
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await });
    h.wait_in_flight(1).await;
    let started = std::time::Instant::now();
    let serving = h.begin_shutdown();
    tokio::time::timeout(Duration::from_secs(5), serving)
        .await
        .expect("serve returned after the grace period")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(150));
}

#[tokio::test]
async fn scrape_hook_exports_outside_gauges() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let server = enforce_server::Server::builder(ServerConfig::default())
        .model(enforce_server::Model::new(
            "m",
            runner,
            Arc::new(marker_enforcer(false)),
        ))
        .on_scrape(|m| {
            m.set_gauge(
                "enforce_breaker_state",
                "Circuit breaker state (0 closed, 1 half-open, 2 open).",
                &[("validator", "external")],
                2.0,
            )
        })
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let text = h
        .client
        .get(h.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        text.contains("enforce_breaker_state{validator=\"external\"} 2"),
        "{text}"
    );
}
