//! `examples/grafana-dashboard.json` queries only series that `enforce serve` exports: the
//! real binary serves requests that touch every metric (a re-ask, a repair, an upstream
//! failure, a rejection, an open breaker, an audit log, a route, an input check, a fallback), and each metric name in the
//! dashboard's queries must be a sample name in the scraped `/metrics`.

use super::repo;
use super::serve::{body, client, config_for, temp_dir, Proxy, GOOD};
use enforce_testkit::{ErrorShape, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::collections::BTreeSet;

/// Every PromQL expression in the dashboard: panel targets and template variable queries.
fn queries(dashboard: &Value) -> Vec<String> {
    let mut found = Vec::new();
    collect(dashboard, &mut found);
    found
}

fn collect(value: &Value, found: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                match (key.as_str(), v) {
                    ("expr" | "definition", Value::String(q)) => found.push(q.clone()),
                    ("query", Value::String(q)) if q.contains("enforce_") => found.push(q.clone()),
                    _ => collect(v, found),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect(v, found)),
        _ => {}
    }
}

/// The metric names a PromQL expression reads (`enforce_…` identifiers).
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut rest = expr;
    while let Some(at) = rest.find("enforce_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.insert(tail[..end].to_string());
        rest = &tail[end..];
    }
    names
}

/// The sample names of a Prometheus text exposition.
fn exposed(metrics: &str) -> BTreeSet<String> {
    metrics
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

#[test]
fn metric_names_are_read_from_queries() {
    let names = metric_names(
        "histogram_quantile(0.5, sum by (le) (rate(enforce_overhead_seconds_bucket{model=~\"$model\"}[5m]))) / enforce_in_flight",
    );
    let expected: BTreeSet<String> = ["enforce_overhead_seconds_bucket", "enforce_in_flight"]
        .map(String::from)
        .into();
    assert_eq!(names, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_queries_is_exported() {
    let text =
        std::fs::read_to_string(repo().join("examples/grafana-dashboard.json")).expect("dashboard");
    let dashboard: Value = serde_json::from_str(&text).expect("valid JSON");
    assert!(!text.contains("http"), "the dashboard links nowhere");
    let exprs = queries(&dashboard);
    assert!(exprs.len() >= 10, "{exprs:?}");
    let wanted: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();

    let upstream = MockOpenAi::start(MockScript::new().then(enforce_testkit::Then::RepeatLast))
        .await
        .expect("mock upstream");
    let dir = temp_dir("grafana");
    let linted = format!(
        "  - id: linted\n    profile: linted\n    runner:\n      type: openai\n      base_url: {0}\n      model: mock-model\n      retry:\n        max_retries: 0\n\
         \x20 - id: routed\n    profile: chat\n    runner:\n      type: openai\n      base_url: {0}\n      model: mock-model\n    routes:\n      - profile: gated\n        when: {{ header: X-Kind, equals: gate }}\n\
         \x20 - id: fallback\n    profile: with_fallback\n    runner:\n      type: openai\n      base_url: {0}\n      model: mock-model\n",
        upstream.url()
    );
    let rest = format!(
        "validators:\n  lint:\n    type: external\n    command: [/nonexistent/enforce-test-checker]\n    failure_threshold: 1\n    cooldown_ms: 600000\n    fail_mode: open\n  short_question:\n    type: length\n    unit: chars\n    max: 200\n  no_forbidden:\n    type: pattern\n    forbidden:\n      - regex: FORBIDDEN\n        code: FORBIDDEN_WORD\nprofiles:\n  with_fallback:\n    validators: [no_forbidden]\n    max_retries: 0\n    fallback: A safe answer.\n  linted:\n    validators: [lint]\n  gated:\n    validators: []\n    input_validators: [short_question]\nserver:\n  audit_log: {}\n",
        dir.join("audit.jsonl").display()
    );
    let config = config_for(&dir, &upstream.url(), &linted, &rest);
    let proxy = Proxy::start(&["--config", config.to_str().expect("utf-8 path")]);
    let c = client();
    let chat = |request: Value| {
        let c = c.clone();
        let url = proxy.url("/chat/completions");
        async move {
            c.post(url)
                .json(&request)
                .send()
                .await
                .expect("proxy answers")
                .status()
        }
    };
    // Passed after a re-ask (issues, attempts, latencies).
    upstream.push(MockReply::text("No marker here."));
    upstream.push(MockReply::text(GOOD));
    assert_eq!(chat(body(false)).await, 200);
    // Never a marker: re-asks run out and the repair adds one.
    upstream.push(MockReply::text("Still no marker."));
    assert_eq!(chat(body(false)).await, 200);
    // The upstream fails: a runner failure.
    upstream.push(MockReply::error(
        ErrorShape::OpenAi,
        500,
        "the model crashed",
    ));
    assert!(chat(body(false)).await.is_server_error());
    // An unknown model is rejected before any enforcement.
    let mut unknown = body(false);
    unknown["model"] = json!("nobody");
    assert_eq!(chat(unknown).await, 404);
    // The external checker cannot start: its breaker opens.
    upstream.push(MockReply::text("anything"));
    let mut lint = body(false);
    lint["model"] = json!("linted");
    assert_eq!(chat(lint).await, 200);

    // A routed request whose profile checks the question first (routes, input checks).
    upstream.push(MockReply::text("anything"));
    let mut routed = body(false);
    routed["model"] = json!("routed");
    let status = c
        .post(proxy.url("/chat/completions"))
        .header("X-Kind", "gate")
        .json(&routed)
        .send()
        .await
        .expect("proxy answers")
        .status();
    assert_eq!(status, 200);

    // An answer that fails its only attempt: the profile's fallback goes out.
    upstream.push(MockReply::text("FORBIDDEN"));
    let mut fallback = body(false);
    fallback["model"] = json!("fallback");
    assert_eq!(chat(fallback).await, 200);

    let metrics_url = format!("{}/metrics", proxy.base.trim_end_matches("/v1"));
    let metrics = c
        .get(&metrics_url)
        .send()
        .await
        .expect("scrape")
        .text()
        .await
        .expect("text");
    let have = exposed(&metrics);
    let missing: Vec<&String> = wanted.difference(&have).collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries {missing:?}, which /metrics does not export:\n{metrics}"
    );
    // Every declared series is on the dashboard (histograms through their buckets).
    let unused: Vec<&String> = have
        .iter()
        .filter(|name| !name.ends_with("_sum") && !name.ends_with("_count"))
        .filter(|name| !wanted.contains(*name))
        .collect();
    assert!(
        unused.is_empty(),
        "/metrics exports {unused:?}, not on the dashboard"
    );
    assert!(proxy.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}
