//! Requests that end without an answer are audited too: a client that disconnects leaves an
//! `aborted` record (`stop_reason: client_disconnected`, the attempts made) on every kind of
//! answer, and a refused request a short `refused` record.

use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_server::{ModelOptions, ServerConfig, StreamMode};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

const GOOD: &str = "Fine.\n\n<!-- STEP: done -->";
const NO_MARKER: &str = "Fine, without a marker.";

/// A server with an audit log whose model answers `NO_MARKER` at once, then waits for `gate`
/// before each further answer.
async fn audited(
    options: ModelOptions,
    gate: Arc<tokio::sync::Semaphore>,
) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        keepalive_interval: Duration::from_millis(50),
        ..ServerConfig::default()
    };
    gate.add_permits(1);
    let runner = Arc::new(Gated {
        inner: ScriptedRunner::texts([NO_MARKER, GOOD, GOOD]),
        gate,
    });
    let server = server_with(config, runner, marker_enforcer_retries(false, 3), options);
    (Harness::start(server).await, dir)
}

/// The audit lines once there are `n` (the writer flushes within 200 ms), waiting up to 5 s.
async fn audit_lines(dir: &tempfile::TempDir, n: usize) -> Vec<Value> {
    for _ in 0..100 {
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap_or_default();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        if lines.len() >= n {
            return lines;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("fewer than {n} audit lines after 5 s");
}

#[tokio::test]
async fn a_client_that_disconnects_is_audited_on_every_kind_of_answer() {
    for (kind, stream, mode) in [
        ("plain", false, StreamMode::Hold),
        ("held stream", true, StreamMode::Hold),
        ("draft stream", true, StreamMode::Draft),
    ] {
        let gate = Arc::new(tokio::sync::Semaphore::new(0));
        let options = ModelOptions {
            stream_mode: mode,
            ..ModelOptions::default()
        };
        let (h, dir) = audited(options, gate.clone()).await;
        let request = h
            .client
            .post(h.url("/v1/chat/completions"))
            .json(&user_body(stream));
        if stream {
            // The headers come with the first keep-alive; then the client goes.
            let response = request.send().await.unwrap();
            assert_eq!(response.status(), 200, "{kind}");
            drop(response);
        } else {
            let cut = request.timeout(Duration::from_millis(300)).send().await;
            assert!(cut.is_err(), "{kind}: the answer waits for the gate");
        }
        let lines = audit_lines(&dir, 1).await;
        assert_eq!(lines.len(), 1, "{kind}: {lines:?}");
        let record = &lines[0];
        assert_eq!(record["status"], "aborted", "{kind}: {record}");
        assert_eq!(
            record["stop_reason"]["reason"], "client_disconnected",
            "{kind}: {record}"
        );
        // The first answer was checked and re-asked; the re-ask was under way.
        assert_eq!(
            record["attempts"].as_array().map(Vec::len),
            Some(1),
            "{kind}: {record}"
        );
        assert_eq!(record["model"], "m", "{kind}");
        assert!(
            record["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("chatcmpl-")),
            "{kind}: {record}"
        );
        let disconnected = h.server.metrics().value(
            "enforce_requests_total",
            &[("model", "m"), ("status", "client_disconnected")],
        );
        assert_eq!(disconnected, 1.0, "{kind}");
    }
}

#[tokio::test]
async fn each_refused_request_leaves_a_short_refused_record() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        api_keys: vec!["k-admin".into()],
        key_grants: vec![enforce_server::KeyGrant {
            name: "app".into(),
            key: "k-app".into(),
            models: Some(vec!["m".into()]),
            profiles: None,
        }],
        audit_log: Some(dir.path().join("audit.jsonl")),
        max_body_bytes: 2_000,
        max_concurrent: 1,
        ..ServerConfig::default()
    };
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let runner = Arc::new(Gated {
        inner: ScriptedRunner::texts([GOOD]),
        gate: gate.clone(),
    });
    let enforcer = || Arc::new(marker_enforcer(false));
    let server = enforce_server::Server::builder(config)
        .model(enforce_server::Model::new("m", runner.clone(), enforcer()))
        .model(enforce_server::Model::new("other", runner, enforcer()))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let chat = |key: Option<&str>, body: String| {
        let mut request = h
            .client
            .post(h.url("/v1/chat/completions"))
            .header("content-type", "application/json")
            .body(body);
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let body = |model: &str| {
        user_body(false)
            .to_string()
            .replace("\"m\"", &format!("{model:?}"))
    };
    // (status, key, body): what is sent, and the record expected of it.
    let cases = [
        (401, None, body("m"), "unauthorized", None, None),
        (
            403,
            Some("k-app"),
            body("other"),
            "forbidden",
            Some("app"),
            Some("other"),
        ),
        (
            400,
            Some("k-app"),
            "{not json".to_string(),
            "bad_request",
            Some("app"),
            None,
        ),
        (
            404,
            Some("k-admin"),
            body("nope"),
            "unknown_model",
            None,
            Some("nope"),
        ),
        (
            413,
            Some("k-admin"),
            "x".repeat(3_000),
            "body_too_large",
            None,
            None,
        ),
    ];
    for (n, (status, key, sent, ..)) in cases.iter().enumerate() {
        assert_eq!(chat(*key, sent.clone()).await, *status, "case {n}");
    }
    // One request holds the only permit: the next is a 429.
    let held = {
        let (client, url) = (h.client.clone(), h.url("/v1/chat/completions"));
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth("k-app")
                .json(&user_body(false))
                .send()
                .await
        })
    };
    h.wait_in_flight(1).await;
    assert_eq!(chat(Some("k-app"), body("m")).await, 429);
    let lines = audit_lines(&dir, cases.len() + 1).await;
    let expected = cases
        .iter()
        .map(|(status, _, _, reason, key, model)| (*status, *reason, *key, *model))
        .chain([(429, "overloaded", Some("app"), None)]);
    for (record, (status, reason, key, model)) in lines.iter().zip(expected) {
        assert_eq!(record["status"], "refused", "{record}");
        assert_eq!(record["reason"], reason, "{record}");
        assert_eq!(record["http_status"], status, "{record}");
        assert_eq!(record["key"].as_str(), key, "{record}");
        assert_eq!(record["model"].as_str(), model, "{record}");
        assert!(
            record["ts"].as_str().is_some_and(|ts| ts.ends_with('Z')),
            "{record}"
        );
        assert!(
            !record.to_string().contains("k-app"),
            "the key itself: {record}"
        );
    }
    gate.add_permits(1);
    assert_eq!(held.await.unwrap().unwrap().status(), 200);
}
