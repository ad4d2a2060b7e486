//! The answer cache (`cache:` on a model): a repeated request is answered once upstream, a
//! changed contract is a miss, only checked answers are kept, `Cache-Control: no-cache`
//! bypasses, a hit replays as a stream, entries expire and are evicted by bytes, and the
//! shared store (the trait replicas share Redis through) serves another replica. Redis itself
//! is tested end to end in the root package's `tests/it/replicas.rs`.

use crate::common::{marker_enforcer, mock_upstream, read_stream, step_mark, user_body, Harness};
use crate::shared_state::MemoryState;
use enforce_server::{
    CacheConfig, CacheStore, KeyGrant, Model, ModelOptions, Server, ServerConfig, StateConfig,
};
use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const GOOD: &str = "Fine.\n<!-- STEP: what -->";

fn cached(cache: CacheConfig) -> ModelOptions {
    ModelOptions {
        cache: Some(cache),
        ..ModelOptions::default()
    }
}

async fn upstream(answer: &str) -> MockOpenAi {
    let script = MockScript::new()
        .reply(MockReply::text(answer))
        .then(Then::RepeatLast);
    MockOpenAi::start(script).await.unwrap()
}

/// Model `m` over `mock`, with profile `chat` (the step marker).
fn chat_model(mock: &MockOpenAi, options: ModelOptions) -> Model {
    Model::new("m", mock_upstream(mock), Arc::new(marker_enforcer(false)))
        .with_profile("chat")
        .with_options(options)
}

/// A server of model `m` (profile `chat`, whose contract is `contract`) over `mock`.
fn server(
    config: ServerConfig,
    mock: &MockOpenAi,
    options: ModelOptions,
    contract: &str,
) -> Server {
    Server::builder(config)
        .model(chat_model(mock, options))
        .contract("chat", contract)
        .step_extractor(step_mark)
        .build()
        .unwrap()
}

async fn start(mock: &MockOpenAi, cache: CacheConfig) -> Harness {
    Harness::start(server(ServerConfig::default(), mock, cached(cache), "c1")).await
}

/// Sends `body` (with `headers`); the status, `X-Enforce-Cache` and the JSON answer.
async fn ask(h: &Harness, body: &Value, headers: &[(&str, &str)]) -> (u16, String, Value) {
    let mut request = h.client.post(h.url("/v1/chat/completions")).json(body);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let response = request.send().await.unwrap();
    let cache = cache_header(&response);
    (
        response.status().as_u16(),
        cache,
        response.json().await.unwrap(),
    )
}

fn cache_header(response: &reqwest::Response) -> String {
    response
        .headers()
        .get("x-enforce-cache")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default()
}

fn content(answer: &Value) -> &str {
    answer["choices"][0]["message"]["content"].as_str().unwrap()
}

fn asking(text: &str) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": text}]})
}

#[tokio::test]
async fn a_repeated_request_is_answered_once_upstream() {
    let mock = upstream(GOOD).await;
    let h = start(&mock, CacheConfig::default()).await;
    let (status, first, answer) = ask(&h, &user_body(false), &[]).await;
    assert_eq!(
        (status, first.as_str(), content(&answer)),
        (200, "miss", GOOD)
    );
    let (status, second, again) = ask(&h, &user_body(false), &[]).await;
    assert_eq!(
        (status, second.as_str(), content(&again)),
        (200, "hit", GOOD)
    );
    assert_eq!(mock.chat_requests().len(), 1, "one upstream call");
    assert_ne!(answer["id"], again["id"], "a hit is an answer of its own");
    assert_eq!(again["enforcement"]["status"], "passed");
    let other = ask(&h, &asking("Something else."), &[]).await;
    assert_eq!(other.1, "miss", "another request");
    let metrics = h.metrics().await;
    assert!(
        metrics.contains(r#"enforce_cache_lookups_total{model="m",result="hit"} 1"#),
        "{metrics}"
    );
    assert!(metrics.contains(r#"enforce_cache_lookups_total{model="m",result="miss"} 2"#));
    assert!(metrics.contains(r#"enforce_cache_tokens_saved_total{model="m"}"#));
}

#[tokio::test]
async fn a_model_without_cache_says_nothing_of_it() {
    let mock = upstream(GOOD).await;
    let h = Harness::start(server(
        ServerConfig::default(),
        &mock,
        ModelOptions::default(),
        "c1",
    ))
    .await;
    for _ in 0..2 {
        assert_eq!(ask(&h, &user_body(false), &[]).await.1, "");
    }
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test]
async fn an_answer_that_failed_is_never_cached() {
    let mock = upstream("No marker.").await;
    let h = start(&mock, CacheConfig::default()).await;
    for _ in 0..2 {
        let (_, cache, answer) = ask(&h, &user_body(false), &[]).await;
        assert_eq!(cache, "miss");
        assert_ne!(answer["enforcement"]["status"], "passed");
    }
    let asked = mock.chat_requests().len();
    assert!(asked >= 2, "asked again: {asked}");
}

#[tokio::test]
async fn no_cache_bypasses_the_lookup_and_keeps_the_fresh_answer() {
    let mock = upstream(GOOD).await;
    let h = start(&mock, CacheConfig::default()).await;
    let no_cache = [("cache-control", "no-cache")];
    assert_eq!(ask(&h, &user_body(false), &no_cache).await.1, "bypass");
    assert_eq!(ask(&h, &user_body(false), &[]).await.1, "hit", "kept");
    assert_eq!(ask(&h, &user_body(false), &no_cache).await.1, "bypass");
    assert_eq!(mock.chat_requests().len(), 2, "a bypass asks upstream");
}

#[tokio::test]
async fn a_hit_replays_as_a_stream_for_a_streamed_request() {
    let mock = upstream(GOOD).await;
    let h = start(&mock, CacheConfig::default()).await;
    assert_eq!(ask(&h, &user_body(false), &[]).await.1, "miss");
    let response = h.chat(user_body(true)).await;
    assert_eq!(cache_header(&response), "hit");
    let (_, parsed) = read_stream(response).await;
    assert_eq!(parsed.content(), GOOD);
    assert!(parsed.done_last, "the stream ends as a held stream does");
    assert_eq!(mock.chat_requests().len(), 1);
}

#[tokio::test]
async fn an_answer_expires_after_its_ttl() {
    let mock = upstream(GOOD).await;
    let config = CacheConfig {
        ttl_secs: 1,
        ..CacheConfig::default()
    };
    let h = start(&mock, config).await;
    assert_eq!(ask(&h, &user_body(false), &[]).await.1, "miss");
    assert_eq!(ask(&h, &user_body(false), &[]).await.1, "hit");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(ask(&h, &user_body(false), &[]).await.1, "miss", "expired");
}

#[tokio::test]
async fn memory_keeps_at_most_max_bytes_and_evicts_the_least_recently_used() {
    let mock = upstream(GOOD).await;
    // Room for one answer (its key and its stored form, about 150 bytes), not two.
    let config = CacheConfig {
        max_bytes: 250,
        ..CacheConfig::default()
    };
    let h = start(&mock, config).await;
    let (a, b) = (asking("A?"), asking("B?"));
    assert_eq!(ask(&h, &a, &[]).await.1, "miss");
    assert_eq!(ask(&h, &a, &[]).await.1, "hit");
    assert_eq!(ask(&h, &b, &[]).await.1, "miss");
    assert_eq!(ask(&h, &b, &[]).await.1, "hit");
    assert_eq!(ask(&h, &a, &[]).await.1, "miss", "evicted by b");
}

#[tokio::test]
async fn a_changed_contract_is_a_miss_in_the_shared_store() {
    let mock = upstream(GOOD).await;
    let store = Arc::new(MemoryState::default());
    let shared = CacheConfig {
        store: CacheStore::Redis,
        ..CacheConfig::default()
    };
    let replica = |name: &str, contract: &str| {
        let mut state = StateConfig::redis("redis://unused");
        state.replica = name.into();
        let config = ServerConfig {
            state: Some(state),
            ..ServerConfig::default()
        };
        Server::builder(config)
            .model(chat_model(&mock, cached(shared)))
            .contract("chat", contract)
            .shared_state(store.clone())
            .build()
            .unwrap()
    };
    let first = Harness::start(replica("a", "contract-1")).await;
    let same = Harness::start(replica("b", "contract-1")).await;
    let changed = Harness::start(replica("c", "contract-2")).await;
    assert_eq!(ask(&first, &user_body(false), &[]).await.1, "miss");
    assert_eq!(ask(&same, &user_body(false), &[]).await.1, "hit", "shared");
    assert_eq!(mock.chat_requests().len(), 1);
    assert_eq!(
        ask(&changed, &user_body(false), &[]).await.1,
        "miss",
        "another contract never replays the old one's answer"
    );
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test]
async fn a_profile_without_a_contract_fingerprint_is_not_cached() {
    let mock = upstream(GOOD).await;
    let server = Server::builder(ServerConfig::default())
        .model(chat_model(&mock, cached(CacheConfig::default())))
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    for _ in 0..2 {
        assert_eq!(ask(&h, &user_body(false), &[]).await.1, "");
    }
    assert_eq!(mock.chat_requests().len(), 2);
}

#[tokio::test]
async fn a_limited_key_has_answers_of_its_own() {
    let mock = upstream(GOOD).await;
    let grant = |name: &str, key: &str| KeyGrant {
        name: name.into(),
        key: key.into(),
        models: Some(vec!["m".into()]),
        profiles: None,
    };
    let config = ServerConfig {
        key_grants: vec![grant("team-a", "key-a"), grant("team-b", "key-b")],
        ..ServerConfig::default()
    };
    let h = Harness::start(server(config, &mock, cached(CacheConfig::default()), "c1")).await;
    let with_key = |key: &'static str| [("authorization", key)];
    let body = user_body(false);
    assert_eq!(ask(&h, &body, &with_key("Bearer key-a")).await.1, "miss");
    assert_eq!(ask(&h, &body, &with_key("Bearer key-a")).await.1, "hit");
    assert_eq!(ask(&h, &body, &with_key("Bearer key-b")).await.1, "miss");
}
