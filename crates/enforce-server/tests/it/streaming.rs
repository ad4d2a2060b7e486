//! Streaming from the model through the proxy (the OpenAI runner against the paced mock): a
//! failing answer is cut at its first definite error and re-asked, `draft` streams attempts as
//! reasoning and only the checked answer as content, and a client that leaves stops the
//! upstream generation.

use crate::common::{mock_upstream, read_stream, server_with, Harness};
use enforce_core::{Enforcer, Policy};
use enforce_runner::{OpenAiConfig, OpenAiRunner};
use enforce_server::{ModelOptions, ServerConfig, StreamMode};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use enforce_validators::terms::{Term, Terms};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// 40 chunks 25 ms apart: a second to write in full; "guaranteed" is in the first chunks.
const BAD: &str = "This is guaranteed to work, and here is a long explanation of why it works so well in every case you can think of, written slowly.";
const GOOD: &str = "This should work in most cases.";

fn no_promises() -> Enforcer {
    let terms = Terms::builder("wording")
        .forbid(Term::new("guaranteed").code("FORBIDDEN_TERM"))
        .build()
        .unwrap();
    Enforcer::new(vec![Box::new(terms)]).with_policy(Policy::builder().max_retries(2).build())
}

async fn harness(options: ModelOptions) -> (MockOpenAi, Harness) {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text(BAD))
            .reply(MockReply::text(GOOD))
            .stream_chunks(40, Duration::from_millis(25)),
    )
    .await
    .unwrap();
    let runner = mock_upstream(&mock);
    let server = server_with(ServerConfig::default(), runner, no_promises(), options);
    (mock, Harness::start(server).await)
}

fn body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream,
           "messages": [{"role": "user", "content": "Will it work?"}]})
}

async fn wait_abandoned(mock: &MockOpenAi, n: usize) {
    for _ in 0..200 {
        if mock.abandoned_streams() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the upstream saw {} closed streams, not {n}",
        mock.abandoned_streams()
    );
}

#[tokio::test]
async fn a_failing_answer_is_cut_at_its_first_error_and_re_asked() {
    let (mock, h) = harness(ModelOptions {
        status_events: true,
        ..ModelOptions::default()
    })
    .await;
    let started = Instant::now();
    let (raw, parsed) = read_stream(h.chat(body(true)).await).await;
    let took = started.elapsed();
    // Status events are on: read it as Open WebUI does.
    assert_eq!(parsed.content(), GOOD);
    assert!(parsed.error().is_none() && parsed.done_last);
    assert!(
        !raw.contains("guaranteed"),
        "hold mode leaked the draft: {raw}"
    );
    // The first answer was not read to its end: its connection was closed.
    wait_abandoned(&mock, 1).await;
    // Each answer takes ~1 s to write in full (40 chunks, 25 ms apart): both in full would be
    // ~2 s; with the first cut after a few chunks the exchange is ~1.25 s.
    assert!(took < Duration::from_millis(1800), "took {took:?}");
    let descriptions: Vec<String> = parsed
        .status_events()
        .iter()
        .map(|e| {
            e["event"]["data"]["description"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(
        descriptions
            .iter()
            .any(|d| d == "Stopped attempt 1 at FORBIDDEN_TERM, re-asking (2/3)"),
        "{descriptions:?}"
    );
    let feedback = mock.chat_requests()[1].last_user().unwrap();
    assert!(feedback.contains("FORBIDDEN_TERM"), "{feedback}");
    assert!(feedback.contains("guaranteed"), "{feedback}");
    let finish = parsed
        .chunks()
        .into_iter()
        .find(|c| c.get("enforcement").is_some())
        .unwrap();
    assert_eq!(finish["enforcement"]["attempts"], 2);
}

#[tokio::test]
async fn draft_mode_streams_attempts_as_reasoning_and_only_the_checked_answer_as_content() {
    let (_mock, h) = harness(ModelOptions {
        stream_mode: StreamMode::Draft,
        ..ModelOptions::default()
    })
    .await;
    let (_, parsed) = read_stream(h.chat(body(true)).await).await;
    let reasoning: String = parsed
        .chunks()
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
        .collect();
    assert!(reasoning.starts_with("This is guaranteed"), "{reasoning}");
    assert!(
        reasoning.contains("[stopped: FORBIDDEN_TERM]"),
        "{reasoning}"
    );
    assert!(reasoning.contains("— attempt 2 —"), "{reasoning}");
    assert_eq!(parsed.content(), GOOD);
    assert_eq!(parsed.openai_result().unwrap(), GOOD);
    // One opening chunk for the whole message.
    let roles = parsed
        .chunks()
        .iter()
        .filter(|c| c["choices"][0]["delta"].get("role").is_some())
        .count();
    assert_eq!(roles, 1);
}

#[tokio::test]
async fn a_non_streaming_client_gets_the_same_early_cut() {
    let (mock, h) = harness(ModelOptions::default()).await;
    let response = h.chat(body(false)).await;
    assert_eq!(response.headers()["x-enforce-attempts"], "2");
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], GOOD);
    wait_abandoned(&mock, 1).await;
}

#[tokio::test]
async fn a_client_that_leaves_stops_the_upstream_generation() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text(GOOD.repeat(20)))
            .stream_chunks(100, Duration::from_millis(30)),
    )
    .await
    .unwrap();
    let runner = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "mock-model".into(),
        ..OpenAiConfig::default()
    })
    .unwrap();
    let server = server_with(
        ServerConfig::default(),
        Arc::new(runner),
        no_promises(),
        ModelOptions {
            stream_mode: StreamMode::Draft,
            ..ModelOptions::default()
        },
    );
    let h = Harness::start(server).await;
    let mut response = h.chat(body(true)).await;
    // Read the first draft bytes, then hang up.
    let first = response.chunk().await.unwrap();
    assert!(first.is_some());
    drop(response);
    wait_abandoned(&mock, 1).await;
}

#[tokio::test]
async fn the_models_own_reasoning_shows_in_draft_mode_and_never_in_the_answer() {
    for (mode, shown) in [(StreamMode::Draft, true), (StreamMode::Hold, false)] {
        let mock = MockOpenAi::start(MockScript::new().reply(MockReply::Reasoning {
            reasoning: "Let me weigh the cases first.".into(),
            text: GOOD.into(),
        }))
        .await
        .unwrap();
        let runner = OpenAiRunner::new(OpenAiConfig {
            base_url: mock.url(),
            model: "mock-model".into(),
            ..OpenAiConfig::default()
        })
        .unwrap();
        let server = server_with(
            ServerConfig::default(),
            Arc::new(runner),
            no_promises(),
            ModelOptions {
                stream_mode: mode,
                ..ModelOptions::default()
            },
        );
        let h = Harness::start(server).await;
        let (raw, parsed) = read_stream(h.chat(body(true)).await).await;
        let reasoning: String = parsed
            .chunks()
            .iter()
            .filter_map(|c| c["choices"][0]["delta"]["reasoning_content"].as_str())
            .collect();
        assert_eq!(parsed.content(), GOOD, "{mode:?}");
        if shown {
            assert!(
                reasoning.starts_with("Let me weigh the cases first."),
                "{reasoning}"
            );
        } else {
            assert!(!raw.contains("weigh"), "hold mode showed reasoning: {raw}");
        }
    }
}
