//! Field routes on every surface: a route written for chat-completions fields reads the same
//! field of a Responses or Messages request, where those bodies spell it differently
//! (`user` vs `metadata.user_id`, `max_tokens` vs `max_output_tokens`, `response_format`
//! vs `text.format`), and a pointer into a surface's own spelling still works.

use crate::common::*;
use enforce_core::{Enforcer, ScriptedRunner};
use enforce_server::{Model, Route, Routes, Server, ServerConfig, When};
use serde_json::{json, Value};
use std::sync::Arc;

fn enforcer() -> Arc<Enforcer> {
    Arc::new(Enforcer::new(vec![]))
}

fn field(pointer: &str, value: &str) -> When {
    When::field(pointer, vec![value.to_string()]).unwrap()
}

async fn profile_of(h: &Harness, path: &str, body: Value) -> String {
    let response = h.client.post(h.url(path)).json(&body).send().await.unwrap();
    assert_eq!(response.status(), 200, "{path}");
    let profile = response.headers()["x-enforce-profile"]
        .to_str()
        .unwrap()
        .to_string();
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["enforcement"]["route"]["profile"], profile.as_str());
    profile
}

#[tokio::test]
async fn a_field_route_reads_the_field_of_every_surface() {
    let routes = Routes::new(
        vec![
            Route::new("alice", "by_user", enforcer(), field("/user", "alice")),
            Route::new("short", "by_limit", enforcer(), field("/max_tokens", "7")),
            Route::new(
                "json",
                "by_format",
                enforcer(),
                field("/response_format/type", "json_object"),
            ),
            Route::new(
                "native",
                "by_native",
                enforcer(),
                field("/text/verbosity", "low"),
            ),
        ],
        None,
    )
    .unwrap();
    let runner = Arc::new(ScriptedRunner::texts(["{\"ok\": true}"; 32]));
    let server = Server::builder(ServerConfig::default())
        .model(
            Model::new("m", runner, enforcer())
                .with_profile("chat")
                .with_routes(routes),
        )
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let chat = |extra: Value| {
        let mut body = json!({"model": "m", "messages": [{"role": "user", "content": "Hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let responses = |extra: Value| {
        let mut body = json!({"model": "m", "input": "Hi"});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    let messages = |extra: Value| {
        let mut body = json!({"model": "m", "max_tokens": 64,
                              "messages": [{"role": "user", "content": "Hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        body
    };
    const CHAT: &str = "/v1/chat/completions";
    const RESPONSES: &str = "/v1/responses";
    const MESSAGES: &str = "/v1/messages";
    let cases = [
        (CHAT, chat(json!({"user": "alice"})), "by_user"),
        (RESPONSES, responses(json!({"user": "alice"})), "by_user"),
        (
            MESSAGES,
            messages(json!({"metadata": {"user_id": "alice"}})),
            "by_user",
        ),
        (CHAT, chat(json!({"max_tokens": 7})), "by_limit"),
        (
            RESPONSES,
            responses(json!({"max_output_tokens": 7})),
            "by_limit",
        ),
        (MESSAGES, messages(json!({"max_tokens": 7})), "by_limit"),
        (
            CHAT,
            chat(json!({"response_format": {"type": "json_object"}})),
            "by_format",
        ),
        (
            RESPONSES,
            responses(json!({"text": {"format": {"type": "json_object"}}})),
            "by_format",
        ),
        // A pointer into the surface's own spelling.
        (
            RESPONSES,
            responses(json!({"text": {"verbosity": "low"}})),
            "by_native",
        ),
        // Nothing matches: the model's own profile.
        (MESSAGES, messages(json!({})), "chat"),
        (RESPONSES, responses(json!({"user": "bob"})), "chat"),
    ];
    for (path, body, profile) in cases {
        assert_eq!(
            profile_of(&h, path, body.clone()).await,
            profile,
            "{path} {body}"
        );
    }
}
