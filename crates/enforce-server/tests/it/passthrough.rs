//! The endpoints the proxy does not enforce (`/v1/embeddings`, `/v1/completions`, ...) go to
//! the upstream of the model as they are: with the runner's key, the client's key checked,
//! streams streamed, a `passthrough` audit line; a model without an HTTP upstream refuses them
//! in the OpenAI error shape. Every route answers without `/v1` too.

use crate::common::*;
use enforce_core::ScriptedRunner;
use enforce_server::{FsyncPolicy, KeyGrant, Model, Server, ServerConfig, Upstream};
use enforce_testkit::{MockOpenAi, MockScript};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

const CLIENT_KEY: &str = "client-key-to-enforce";
const UPSTREAM_KEY: &str = "sk-upstream-runner-key";

struct Passing {
    harness: Harness,
    mock: MockOpenAi,
    dir: tempfile::TempDir,
}

impl Passing {
    async fn start(script: MockScript) -> Passing {
        let mock = MockOpenAi::start(script).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            api_keys: vec![CLIENT_KEY.into()],
            audit_log: Some(dir.path().join("audit.jsonl")),
            audit_fsync: FsyncPolicy::Always,
            ..ServerConfig::default()
        };
        let model = Model::new("m", mock_upstream(&mock), Arc::new(marker_enforcer(false)))
            .with_passthrough(Upstream::openai(mock.url(), Some(UPSTREAM_KEY)));
        let server = Server::builder(config).model(model).build().unwrap();
        Passing {
            harness: Harness::start(server).await,
            mock,
            dir,
        }
    }

    fn post(&self, path: &str, body: Value) -> reqwest::RequestBuilder {
        self.harness
            .client
            .post(self.harness.url(path))
            .bearer_auth(CLIENT_KEY)
            .json(&body)
    }

    /// The JSON answer to a `POST` of `body` to `path` with the client's key.
    async fn post_json(&self, path: &str, body: Value) -> Value {
        let response = self.post(path, body).send().await.unwrap();
        response.json().await.unwrap()
    }

    /// The JSON answer to a `GET` of `path` with the client's key.
    async fn get_json(&self, path: &str) -> Value {
        let h = &self.harness;
        let response = h.client.get(h.url(path)).bearer_auth(CLIENT_KEY).send();
        response.await.unwrap().json().await.unwrap()
    }

    /// The audit lines, once the server has stopped and flushed them.
    async fn audit_lines(self) -> Vec<Value> {
        self.harness.shutdown().await.unwrap();
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }
}

#[tokio::test]
async fn embeddings_reach_the_upstream_with_the_runners_key_and_are_audited() {
    let p = Passing::start(MockScript::new()).await;
    let response = p
        .post(
            "/v1/embeddings",
            json!({"model": "text-embedding-3-small", "input": ["red apples", "green pears"]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["object"], "list");
    assert_eq!(body["data"].as_array().unwrap().len(), 2);
    assert_eq!(body["model"], "text-embedding-3-small");

    let sent = p.mock.embedding_requests();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].path, "/v1/embeddings");
    let upstream_auth = format!("Bearer {UPSTREAM_KEY}");
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some(upstream_auth.as_str())
    );
    assert!(
        !sent[0].headers.iter().any(|(_, v)| v.contains(CLIENT_KEY)),
        "the client's key to enforce never reaches the upstream: {:?}",
        sent[0].headers
    );
    assert_eq!(sent[0].body["input"], json!(["red apples", "green pears"]));
    // A JSON body read to find its model goes with its length, not chunked.
    assert!(
        sent[0].header("content-length").is_some(),
        "{:?}",
        sent[0].headers
    );

    let metric = p.harness.server.metrics().value(
        "enforce_requests_total",
        &[("model", "m"), ("status", "passthrough")],
    );
    assert_eq!(metric, 1.0);
    let lines = p.audit_lines().await;
    let line = lines
        .iter()
        .find(|l| l["status"] == "passthrough")
        .unwrap_or_else(|| panic!("a passthrough audit line: {lines:?}"));
    assert_eq!(line["path"], "/v1/embeddings");
    assert_eq!(line["http_status"], 200);
    assert_eq!(line["model"], "m");
}

#[tokio::test]
async fn legacy_completions_pass_whole_and_streamed_as_a_stream() {
    let gap = Duration::from_millis(150);
    let p = Passing::start(MockScript::new().stream_chunks(4, gap)).await;
    let whole = p
        .post_json(
            "/v1/completions",
            json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test"}),
        )
        .await;
    assert_eq!(whole["object"], "text_completion");
    assert_eq!(whole["choices"][0]["text"], "Say this is a test");

    let started = Instant::now();
    let response = p
        .post(
            "/v1/completions",
            json!({"model": "gpt-3.5-turbo-instruct", "prompt": "Say this is a test", "stream": true}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/event-stream"));
    let mut body = response.bytes_stream();
    let first = body.next().await.unwrap().unwrap();
    let first_at = started.elapsed();
    assert!(String::from_utf8_lossy(&first).starts_with("data: "));
    let mut text = String::from_utf8_lossy(&first).into_owned();
    while let Some(chunk) = body.next().await {
        text.push_str(&String::from_utf8_lossy(&chunk.unwrap()));
    }
    let all_at = started.elapsed();
    // Four pieces, a finish chunk and [DONE], 150 ms apart: the first arrives long before the
    // last is written, as it would not if the answer were buffered.
    assert!(
        all_at >= first_at + gap * 3,
        "first chunk at {first_at:?}, the end at {all_at:?}"
    );
    let pieces: String = text
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str::<Value>(d).unwrap()["choices"][0]["text"].to_string())
        .map(|t| t.trim_matches('"').to_string())
        .collect();
    assert_eq!(pieces, "Say this is a test");
    assert!(text.contains("data: [DONE]"));
}

#[tokio::test]
async fn routes_answer_without_v1_and_a_missing_key_is_401() {
    let p = Passing::start(MockScript::new()).await;
    let h = &p.harness;
    let unauthorized = h
        .post("/v1/embeddings", &json!({"model": "e", "input": "x"}), &[])
        .await;
    assert_eq!(unauthorized.status(), 401);
    assert!(p.mock.embedding_requests().is_empty());

    let embedded = p
        .post("/embeddings", json!({"model": "e", "input": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(embedded.status(), 200);
    assert_eq!(p.mock.embedding_requests()[0].path, "/v1/embeddings");

    let models = p.get_json("/models").await;
    assert_eq!(models["data"][0]["id"], "m");
    let chat = p
        .post("/chat/completions", user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.status(), 200);
    assert!(!p.mock.chat_requests().is_empty());
}

#[tokio::test]
async fn unknown_model_ids_are_asked_upstream_and_the_proxys_own_stay_its_own() {
    let p = Passing::start(MockScript::new()).await;
    let h = &p.harness;
    let own = p.get_json("/v1/models/m").await;
    assert_eq!(own["owned_by"], "enforce");
    // The mock serves no /v1/models/{id}: its own 404 comes back.
    let other = h
        .client
        .get(h.url("/v1/models/gpt-4o"))
        .bearer_auth(CLIENT_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(other.status(), 404);
    let body: Value = other.json().await.unwrap();
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("mock server"), "{message}");
}

#[tokio::test]
async fn a_model_without_an_http_upstream_refuses_in_the_openai_error_shape() {
    let runner = Arc::new(ScriptedRunner::texts(vec!["never asked"]));
    let server = Server::builder(ServerConfig::default())
        .model(
            Model::new("cli", runner.clone(), Arc::new(marker_enforcer(false)))
                .with_runner_kind("claude"),
        )
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let response = h
        .post(
            "/v1/completions",
            &json!({"model": "cli", "prompt": "hi"}),
            &[],
        )
        .await;
    assert_eq!(response.status(), 501);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "passthrough_unsupported");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`cli`") && message.contains("claude"),
        "{message}"
    );
    assert!(runner.calls().is_empty());
    // Unknown ids of models stay a 404 without an upstream to ask.
    let missing = h.get("/v1/models/gpt-4o").await;
    assert_eq!(missing.status(), 404);
}

#[tokio::test]
async fn bodies_over_the_limit_are_refused_json_or_not() {
    let mock = MockOpenAi::start(MockScript::new()).await.unwrap();
    let config = ServerConfig {
        max_body_bytes: 1000,
        ..ServerConfig::default()
    };
    let model = Model::new("m", mock_upstream(&mock), Arc::new(marker_enforcer(false)))
        .with_passthrough(Upstream::openai(mock.url(), None));
    let h = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    let big = "x".repeat(2000);
    let json = h
        .post("/v1/embeddings", &json!({"model": "e", "input": big}), &[])
        .await;
    assert_eq!(json.status(), 413);
    let upload = h
        .client
        .post(h.url("/v1/audio/transcriptions"))
        .header("content-type", "multipart/form-data; boundary=x")
        .body(big)
        .send()
        .await
        .unwrap();
    assert_eq!(upload.status(), 413);
    let body: Value = upload.json().await.unwrap();
    assert_eq!(body["error"]["code"], "request_too_large");
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn an_upstream_that_cannot_be_reached_is_a_502_and_still_audited() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        ..ServerConfig::default()
    };
    let runner = Arc::new(ScriptedRunner::texts(vec!["never asked"]));
    // Port 1 on the loopback: nothing listens there, the connection is refused at once.
    let model = Model::new("m", runner, Arc::new(marker_enforcer(false)))
        .with_passthrough(Upstream::openai("http://127.0.0.1:1/v1", None));
    let h = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    let response = h
        .post("/v1/embeddings", &json!({"model": "e", "input": "x"}), &[])
        .await;
    assert_eq!(response.status(), 502);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "upstream_error");
    h.shutdown().await.unwrap();
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let line: Value = serde_json::from_str(audit.lines().last().unwrap()).unwrap();
    assert_eq!(line["status"], "passthrough");
    assert_eq!(line["http_status"], 502);
}

#[tokio::test]
async fn a_key_limited_to_some_models_passes_through_only_what_names_one() {
    let mock = MockOpenAi::start(MockScript::new()).await.unwrap();
    let config = ServerConfig {
        key_grants: vec![KeyGrant {
            name: "app".into(),
            key: "limited-key".into(),
            models: Some(vec!["m".into()]),
            profiles: None,
        }],
        ..ServerConfig::default()
    };
    let model = Model::new("m", mock_upstream(&mock), Arc::new(marker_enforcer(false)))
        .with_passthrough(Upstream::openai(mock.url(), None));
    let h = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    let embed = |model: &'static str| {
        h.client
            .post(h.url("/v1/embeddings"))
            .bearer_auth("limited-key")
            .json(&json!({"model": model, "input": "x"}))
            .send()
    };
    assert_eq!(embed("m").await.unwrap().status(), 200);
    let other = embed("text-embedding-3-small").await.unwrap();
    assert_eq!(other.status(), 403);
    assert_eq!(mock.embedding_requests().len(), 1);
}
