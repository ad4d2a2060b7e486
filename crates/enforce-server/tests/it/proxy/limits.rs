//! Limits and auth: bearer keys, the body limit, the concurrency limit.

use super::GOOD;
use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_server::{ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

/// A proxy answering `GOOD` that accepts `keys`.
async fn keyed(keys: &[&str]) -> Harness {
    let config = ServerConfig {
        api_keys: keys.iter().map(|k| k.to_string()).collect(),
        ..ServerConfig::default()
    };
    let runner = Arc::new(ScriptedRunner::texts([GOOD]));
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    Harness::start(server).await
}

#[tokio::test]
async fn bearer_auth_guards_the_api() {
    let h = keyed(&["k-one", "k-two"]).await;
    for key in [None, Some("wrong"), Some("k-one-but-longer")] {
        let mut req = h
            .client
            .post(h.url("/v1/chat/completions"))
            .json(&user_body(false));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401);
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body["error"]["code"], "invalid_api_key");
        assert!(body["error"]["message"].is_string());
    }
    let resp = h.client.get(h.url("/v1/models")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .bearer_auth("k-two")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let resp = h.client.get(h.url("/healthz")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn an_empty_presented_key_is_never_accepted() {
    let h = keyed(&["k-one"]).await;
    let empty_headers: [&[(&str, &str)]; 4] = [
        &[("x-api-key", "")],
        &[("x-api-key", "   ")],
        &[("authorization", "Bearer ")],
        &[("authorization", "Bearer "), ("x-api-key", "")],
    ];
    for headers in empty_headers {
        let mut req = h.client.post(h.url("/v1/messages")).json(&json!({
            "model": "m", "max_tokens": 16,
            "messages": [{"role": "user", "content": "hi"}]
        }));
        for (name, value) in headers {
            req = req.header(*name, *value);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), 401, "{headers:?}");
    }
}

#[test]
fn a_blank_configured_key_is_refused_at_build() {
    let build = |config: ServerConfig| {
        let runner = Arc::new(ScriptedRunner::texts([GOOD]));
        let model = enforce_server::Model::new("m", runner, Arc::new(marker_enforcer(false)));
        match enforce_server::Server::builder(config).model(model).build() {
            Err(enforce_server::ServerError::EmptyApiKey { origin }) => origin,
            Err(other) => panic!("another error: {other}"),
            Ok(_) => panic!("a blank key must be refused"),
        }
    };
    for blank in ["", "  "] {
        let config = ServerConfig {
            api_keys: vec!["k-one".into(), blank.into()],
            ..ServerConfig::default()
        };
        assert_eq!(build(config), "api_keys[1]");
    }
    let grant = enforce_server::KeyGrant {
        name: "ops".into(),
        key: " ".into(),
        models: None,
        profiles: None,
    };
    let config = ServerConfig {
        key_grants: vec![grant],
        ..ServerConfig::default()
    };
    assert_eq!(build(config), "ops");
}

#[tokio::test]
async fn body_limit_is_enforced() {
    let runner = Arc::new(ScriptedRunner::texts([GOOD, GOOD]));
    let config = ServerConfig {
        max_body_bytes: 2_000,
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let big = json!({"model": "m", "messages": [{"role": "user", "content": "x".repeat(5_000)}]});
    let resp = h.chat(big).await;
    assert_eq!(resp.status(), 413);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_too_large");
    // Chunked upload without Content-Length is cut off too.
    let stream = futures_util::stream::iter(
        (0..10).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from(vec![b' '; 500]))),
    );
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 413);
    assert_eq!(h.chat(user_body(false)).await.status(), 200);
    // A chunked body under the limit, in pieces that split its JSON anywhere, is read whole.
    let whole = serde_json::to_vec(&user_body(false)).unwrap();
    let pieces: Vec<Result<bytes::Bytes, std::io::Error>> = whole
        .chunks(7)
        .map(|piece| Ok(bytes::Bytes::copy_from_slice(piece)))
        .collect();
    let resp = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("content-type", "application/json")
        .body(reqwest::Body::wrap_stream(futures_util::stream::iter(
            pieces,
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["enforcement"]["status"], "passed", "{body}");
}

#[tokio::test]
async fn concurrency_limit_answers_429_with_retry_after() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let runner = Arc::new(Gated {
        inner: ScriptedRunner::texts([GOOD, GOOD]),
        gate: gate.clone(),
    });
    let config = ServerConfig {
        max_concurrent: 1,
        retry_after_secs: 2,
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner,
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let first = {
        let client = h.client.clone();
        let url = h.url("/v1/chat/completions");
        tokio::spawn(async move { client.post(url).json(&user_body(false)).send().await })
    };
    h.wait_in_flight(1).await;
    let second = h.chat(user_body(false)).await;
    assert_eq!(second.status(), 429);
    assert_eq!(second.headers()["retry-after"], "2");
    let body: Value = second.json().await.unwrap();
    assert!(body["error"]["message"].is_string());
    gate.add_permits(1);
    assert_eq!(first.await.unwrap().unwrap().status(), 200);
    // The slot is free again.
    gate.add_permits(1);
    assert_eq!(h.chat(user_body(false)).await.status(), 200);
}
