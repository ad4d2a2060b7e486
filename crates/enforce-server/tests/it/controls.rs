//! Per-request control: keys limited to models and profiles (403 in each surface's error
//! shape), and `X-Enforce-Max-Retries` / `X-Enforce-Token-Budget` lowering a model's limits
//! where its configuration allows them.

use crate::common::*;
use enforce_core::{policy::Reask, Budget, Enforcer, Policy, Reply, Runner, RunnerError, Usage};
use enforce_core::{Ask, ReplyStream};
use enforce_server::{KeyGrant, Model, ModelOptions, Route, Routes, Server, ServerConfig, When};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Answers every call with `text` (after the first, with its call number in front: a model
/// drawing anew, so a byte-identical repeat never ends the loop early), reporting 10 input and
/// 40 output tokens, and counts calls.
struct Always {
    text: &'static str,
    calls: AtomicUsize,
}

impl Always {
    fn new(text: &'static str) -> Arc<Always> {
        Arc::new(Always {
            text,
            calls: AtomicUsize::new(0),
        })
    }
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
    fn reply(&self) -> Result<Reply, RunnerError> {
        let earlier = self.calls.fetch_add(1, Ordering::SeqCst);
        let text = match earlier {
            0 => self.text.to_string(),
            n => format!("{}. {}", n + 1, self.text),
        };
        Ok(Reply {
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 40,
            }),
            ..Reply::text(text)
        })
    }
}

impl Runner for Always {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move { self.reply() })
    }
}

const BAD: &str = "Because it is faster.";
const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";

fn strict(max_retries: u32, budget: Budget) -> Enforcer {
    marker_enforcer(false).with_policy(
        Policy::builder()
            .max_retries(max_retries)
            .budget(budget)
            // Independent draws: the same error twice is not "no progress".
            .reask(Reask::Resample)
            .build(),
    )
}

fn limits_allowed(allowed: bool) -> ModelOptions {
    ModelOptions {
        request_limits: allowed,
        ..ModelOptions::default()
    }
}

async fn post(h: &Harness, path: &str, body: &Value, headers: &[(&str, &str)]) -> (u16, Value) {
    let response = h.post(path, body, headers).await;
    let status = response.status().as_u16();
    (status, response.json().await.unwrap())
}

/// One request path and body per surface, for model `model`.
fn bodies(model: &str) -> [(&'static str, Value); 3] {
    SURFACES.map(|surface| surface_request(surface, model, false))
}

/// The error's type and message in the surface's own shape (Anthropic's for /v1/messages).
fn error_of(path: &str, body: &Value) -> (String, String) {
    if path == "/v1/messages" {
        assert_eq!(body["type"], "error", "{body}");
    }
    let kind = body["error"]["type"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    let message = body["error"]["message"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!message.is_empty(), "{body}");
    (kind, message)
}

#[tokio::test]
async fn max_retries_header_lowers_the_profile_limit_and_never_raises_it() {
    let runner = Always::new(BAD);
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        strict(3, Budget::default()),
        limits_allowed(true),
    );
    let h = Harness::start(server).await;
    // Asked for, profile allows 3 re-asks: attempts made (0 re-asks = 1 attempt).
    for (asked, attempts) in [("0", 1), ("1", 2), (" 2 ", 3), ("9", 4)] {
        let before = runner.calls();
        let (status, body) = post(
            &h,
            "/v1/chat/completions",
            &bodies("m")[0].1,
            &[("X-Enforce-Max-Retries", asked)],
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["enforcement"]["status"], "unresolved", "{body}");
        assert_eq!(
            body["enforcement"]["attempts"], attempts,
            "asked {asked}: {body}"
        );
        assert_eq!(runner.calls() - before, attempts, "asked {asked}");
    }
    // Without the header: the profile's own limit.
    let (_, body) = post(&h, "/v1/chat/completions", &bodies("m")[0].1, &[]).await;
    assert_eq!(body["enforcement"]["attempts"], 4, "{body}");
    // Streamed alike: the last chunk reports the attempts made.
    let before = runner.calls();
    let response = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("X-Enforce-Max-Retries", "1")
        .json(&user_body(true))
        .send()
        .await
        .unwrap();
    let (_, parsed) = read_stream(response).await;
    let last = parsed.chunks().last().copied().cloned().unwrap();
    assert_eq!(last["enforcement"]["attempts"], 2, "{last}");
    assert_eq!(runner.calls() - before, 2);
}

#[tokio::test]
async fn token_budget_header_stops_the_reasks_with_a_budget_outcome_in_every_surface() {
    // 50 tokens per attempt: a budget of 120 is spent after the third attempt.
    let runner = Always::new(BAD);
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        strict(5, Budget::default()),
        limits_allowed(true),
    );
    let h = Harness::start(server).await;
    let (status, body) = post(
        &h,
        "/v1/chat/completions",
        &bodies("m")[0].1,
        &[("X-Enforce-Token-Budget", "120")],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["enforcement"]["attempts"], 3, "{body}");
    assert_eq!(
        body["enforcement"]["stop_reason"],
        json!({"reason": "budget", "budget": "tokens"}),
        "{body}"
    );
    for (path, request) in &bodies("m")[1..] {
        let (status, body) = post(&h, path, request, &[("X-Enforce-Token-Budget", "120")]).await;
        assert_eq!(status, 200, "{path}: {body}");
        assert_eq!(body["enforcement"]["attempts"], 3, "{path}: {body}");
        assert_eq!(
            body["enforcement"]["stop_reason"]["budget"], "tokens",
            "{path}: {body}"
        );
    }

    // A profile budget below the header's wins: the header never raises it.
    let runner = Always::new(BAD);
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        strict(
            5,
            Budget {
                max_tokens: Some(60),
                ..Budget::default()
            },
        ),
        limits_allowed(true),
    );
    let h = Harness::start(server).await;
    let (_, body) = post(
        &h,
        "/v1/chat/completions",
        &bodies("m")[0].1,
        &[("X-Enforce-Token-Budget", "100000")],
    )
    .await;
    assert_eq!(body["enforcement"]["attempts"], 2, "{body}");
    assert_eq!(body["enforcement"]["stop_reason"]["budget"], "tokens");
}

#[tokio::test]
async fn bad_or_unallowed_limit_headers_are_a_400_in_each_surface_shape() {
    let runner = Always::new(GOOD);
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        strict(2, Budget::default()),
        limits_allowed(true),
    );
    let h = Harness::start(server).await;
    for (header, value) in [
        ("X-Enforce-Max-Retries", "two"),
        ("X-Enforce-Max-Retries", "-1"),
        ("X-Enforce-Max-Retries", "99999999999"),
        ("X-Enforce-Token-Budget", "0"),
        ("X-Enforce-Token-Budget", "1.5"),
        ("X-Enforce-Token-Budget", ""),
    ] {
        for (path, request) in bodies("m") {
            let (status, body) = post(&h, path, &request, &[(header, value)]).await;
            assert_eq!(status, 400, "{header}: {value} on {path}: {body}");
            let (kind, message) = error_of(path, &body);
            assert_eq!(kind, "invalid_request_error", "{body}");
            assert!(message.contains(header), "{message}");
        }
    }
    assert_eq!(runner.calls(), 0);

    // Not allowed by the configuration: refused, not silently ignored.
    let server = server_with(
        ServerConfig::default(),
        runner.clone(),
        strict(2, Budget::default()),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for header in ["X-Enforce-Max-Retries", "X-Enforce-Token-Budget"] {
        for (path, request) in bodies("m") {
            let (status, body) = post(&h, path, &request, &[(header, "1")]).await;
            assert_eq!(status, 400, "{path}: {body}");
            let (_, message) = error_of(path, &body);
            assert!(message.contains("allow_request_limits"), "{message}");
        }
    }
    assert_eq!(runner.calls(), 0);
    let (status, _) = post(&h, "/v1/chat/completions", &bodies("m")[0].1, &[]).await;
    assert_eq!(status, 200);
}

/// Models `m` (profile `chat`) and `other` (profile `strict`); `k-admin` may use everything,
/// `k-app` only `m` with `chat`.
fn granted_server(runner: Arc<Always>) -> Server {
    let enforcer = || Arc::new(strict(0, Budget::default()));
    let config = ServerConfig {
        api_keys: vec!["k-admin".into()],
        key_grants: vec![KeyGrant {
            name: "app".into(),
            key: "k-app".into(),
            models: Some(vec!["m".into()]),
            profiles: Some(vec!["chat".into()]),
        }],
        ..ServerConfig::default()
    };
    // `X-Kind: s` routes `m`'s requests to `strict`.
    let when = When::header("X-Kind", vec!["s".into()]).unwrap();
    let routes = Routes::new(vec![Route::new("s", "strict", enforcer(), when)], None).unwrap();
    Server::builder(config)
        .model(
            Model::new("m", runner.clone(), enforcer())
                .with_profile("chat")
                .with_routes(routes),
        )
        .model(Model::new("other", runner, enforcer()).with_profile("strict"))
        .profile("chat", enforcer())
        .profile("strict", enforcer())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_key_outside_its_models_or_profiles_gets_403_in_every_surface_shape() {
    let runner = Always::new(GOOD);
    let h = Harness::start(granted_server(runner.clone())).await;
    let app_key = |path: &str| {
        if path == "/v1/messages" {
            ("x-api-key", "k-app".to_string())
        } else {
            ("authorization", "Bearer k-app".to_string())
        }
    };
    for (path, request) in bodies("other") {
        let (name, value) = app_key(path);
        let (status, body) = post(&h, path, &request, &[(name, &value)]).await;
        assert_eq!(status, 403, "{path}: {body}");
        let (kind, message) = error_of(path, &body);
        assert_eq!(kind, "permission_error", "{body}");
        assert!(
            message.contains("`other`") && message.contains("app"),
            "{message}"
        );
        if path != "/v1/messages" {
            assert_eq!(body["error"]["code"], "model_not_allowed", "{body}");
        }
        // A model that does not exist is forbidden too: the key learns nothing more.
        let unknown = bodies("nope")
            .into_iter()
            .find(|(p, _)| *p == path)
            .unwrap()
            .1;
        let (status, body) = post(&h, path, &unknown, &[(name, &value)]).await;
        assert_eq!(status, 403, "{path}: {body}");
    }
    for (path, request) in bodies("m") {
        let (name, value) = app_key(path);
        let (status, body) = post(
            &h,
            path,
            &request,
            &[(name, &value), ("X-Enforce-Profile", "strict")],
        )
        .await;
        assert_eq!(status, 403, "{path}: {body}");
        let (kind, message) = error_of(path, &body);
        assert_eq!(kind, "permission_error", "{body}");
        assert!(message.contains("`strict`"), "{message}");
        // Routed to a profile outside the key's list: refused once the route is known.
        let (status, body) = post(&h, path, &request, &[(name, &value), ("X-Kind", "s")]).await;
        assert_eq!(status, 403, "{path}: {body}");
        let (_, message) = error_of(path, &body);
        assert!(message.contains("`strict`"), "{message}");
        // A profile that does not exist: forbidden too, not a 400 listing every profile.
        let (status, body) = post(
            &h,
            path,
            &request,
            &[(name, &value), ("X-Enforce-Profile", "secret-profile")],
        )
        .await;
        assert_eq!(status, 403, "{path}: {body}");
        assert!(!body.to_string().contains("strict"), "{body}");
    }
    assert_eq!(runner.calls(), 0, "nothing forbidden reached the model");
    for (path, request) in bodies("m") {
        let (name, value) = app_key(path);
        let (status, body) = post(&h, path, &request, &[(name, &value)]).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    for (path, request) in bodies("other") {
        let (status, body) = post(&h, path, &request, &[("authorization", "Bearer k-admin")]).await;
        assert_eq!(status, 200, "{path}: {body}");
    }
    let (status, _) = post(
        &h,
        "/v1/chat/completions",
        &bodies("other")[0].1,
        &[("authorization", "Bearer k-other")],
    )
    .await;
    assert_eq!(status, 401);
}

#[tokio::test]
async fn the_model_list_shows_a_limited_key_only_its_models() {
    let h = Harness::start(granted_server(Always::new(GOOD))).await;
    let list = |key: &'static str| {
        let request = h.client.get(h.url("/v1/models")).bearer_auth(key);
        async move {
            let body: Value = request.send().await.unwrap().json().await.unwrap();
            body["data"]
                .as_array()
                .unwrap()
                .iter()
                .map(|m| m["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(list("k-app").await, ["m"]);
    assert_eq!(list("k-admin").await, ["m", "other"]);
    let one = |key: &'static str, id: &'static str| {
        let request = h
            .client
            .get(h.url(&format!("/v1/models/{id}")))
            .bearer_auth(key);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(one("k-app", "m").await, 200);
    assert_eq!(one("k-app", "other").await, 403);
    assert_eq!(one("k-admin", "other").await, 200);
}

#[tokio::test]
async fn a_limited_key_reads_and_continues_only_its_models_stored_answers() {
    let runner = Always::new(GOOD);
    let h = Harness::start(granted_server(runner.clone())).await;
    let app = [("authorization", "Bearer k-app")];
    let admin = [("authorization", "Bearer k-admin")];
    let responses = |model: &str| json!({"model": model, "input": "Explain it."});
    let (_, mine) = post(&h, "/v1/responses", &responses("m"), &app).await;
    let (_, theirs) = post(&h, "/v1/responses", &responses("other"), &admin).await;
    let get = |id: &str, key: &'static str| {
        let request = h
            .client
            .get(h.url(&format!("/v1/responses/{id}")))
            .bearer_auth(key);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let (mine, theirs) = (mine["id"].as_str().unwrap(), theirs["id"].as_str().unwrap());
    assert_eq!(get(mine, "k-app").await, 200);
    assert_eq!(
        get(theirs, "k-app").await,
        404,
        "as unknown as one never stored"
    );
    assert_eq!(get(theirs, "k-admin").await, 200);
    let calls = runner.calls();
    let continuing = json!({"model": "m", "input": "And then?", "previous_response_id": theirs});
    let (status, body) = post(&h, "/v1/responses", &continuing, &app).await;
    assert_eq!(status, 404, "{body}");
    assert_eq!(body["error"]["code"], "previous_response_not_found");
    assert_eq!(
        runner.calls(),
        calls,
        "the other model's conversation reached no model"
    );
    let continuing = json!({"model": "m", "input": "And then?", "previous_response_id": mine});
    let (status, body) = post(&h, "/v1/responses", &continuing, &app).await;
    assert_eq!(status, 200, "{body}");
    let session = |key: &'static str| {
        let request = h.client.get(h.url("/v1/sessions/any")).bearer_auth(key);
        async move { request.send().await.unwrap().status().as_u16() }
    };
    assert_eq!(session("k-app").await, 403);
    assert_eq!(session("k-admin").await, 404);
}

#[tokio::test]
async fn count_tokens_admits_the_model_for_the_key_and_its_404_lists_only_the_keys_models() {
    let runner = Always::new(GOOD);
    let enforcer = || Arc::new(strict(0, Budget::default()));
    let config = ServerConfig {
        key_grants: vec![KeyGrant {
            name: "app".into(),
            key: "k-app".into(),
            // `ghost` is in the key's list but served by no model.
            models: Some(vec!["m".into(), "ghost".into()]),
            profiles: None,
        }],
        ..ServerConfig::default()
    };
    let server = Server::builder(config)
        .model(Model::new("m", runner.clone(), enforcer()))
        .model(Model::new("other", runner.clone(), enforcer()))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let count = |model: &str| {
        let body = json!({"model": model, "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}]});
        let request = h
            .client
            .post(h.url("/v1/messages/count_tokens"))
            .header("x-api-key", "k-app")
            .json(&body);
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            (status, response.json::<Value>().await.unwrap())
        }
    };
    let (status, body) = count("other").await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(body["error"]["type"], "permission_error", "{body}");
    assert_eq!(count("m").await.0, 200);
    for path in ["/v1/messages/count_tokens", "/v1/chat/completions"] {
        let (status, body) = if path == "/v1/chat/completions" {
            post(
                &h,
                path,
                &json!({"model": "ghost", "messages": [{"role": "user", "content": "hi"}]}),
                &[("authorization", "Bearer k-app")],
            )
            .await
        } else {
            count("ghost").await
        };
        assert_eq!(status, 404, "{path}: {body}");
        let (_, message) = error_of(path, &body);
        assert!(message.contains("Available: m."), "{path}: {message}");
        assert!(!message.contains("other"), "{path}: {message}");
    }
    assert_eq!(runner.calls(), 0);
}
