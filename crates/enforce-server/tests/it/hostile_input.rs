//! Hostile input through the proxy: answer texts and issue messages with newlines, control
//! characters and SSE syntax cannot forge SSE events, audit lines or log lines; API keys (the
//! proxy's own and the upstream's) never reach the logs or the audit records.

use crate::common::{server_with, streams_start_at_once, Harness};
use enforce_core::{
    async_trait, Context, Enforcer, Issue, Policy, Reply, Runner, Validation, Validator,
};
use enforce_core::{Ask, ReplyStream};
use enforce_runner::{OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{FailureResponse, FsyncPolicy, ModelOptions, ServerConfig};
use enforce_testkit::sse::parse_sse;
use enforce_testkit::{ErrorShape, MockOpenAi, MockReply, MockScript, Then};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use serde_json::{json, Value};
use std::sync::{Arc, OnceLock};

/// Answers with the last user message, as it is.
struct Echo;

impl Runner for Echo {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let text = ask
            .request
            .messages
            .iter()
            .rev()
            .find(|m| m.role == enforce_core::Role::User)
            .map(|m| m.content.clone())
            .unwrap_or_default();
        ReplyStream::whole(std::future::ready(Ok(Reply::text(text))))
    }
}

/// Fails every response with an issue whose code and message are taken from the response.
struct Hostile;

#[async_trait]
impl Validator for Hostile {
    fn name(&self) -> &str {
        "hostile"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(vec![Issue::error(
            "hostile",
            response.to_string(),
            response.to_string(),
        )
        .with_hint(response.to_string())])
    }
}

fn body(text: &str, stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": text}]})
}

/// The strings an attacker would try: SSE framing, fake chunks, fake [DONE], CR, NUL, ESC, BOM.
fn hostile_text() -> impl Strategy<Value = String> {
    let part = prop_oneof![
        Just("\n\ndata: [DONE]\n\n".to_string()),
        Just("\r\ndata: {\"choices\":[{\"delta\":{\"content\":\"FORGED\"}}]}\r\n\r\n".to_string()),
        Just("event: status\nid: 1\nretry: 1\n".to_string()),
        Just(": comment\n".to_string()),
        Just("\r".to_string()),
        Just("\u{0}\u{1b}[2J\u{7f}\u{2028}\u{feff}".to_string()),
        Just("\\\"}]}".to_string()),
        any::<String>(),
    ];
    prop::collection::vec(part, 1..6).prop_map(|p| p.concat())
}

/// Every streamed answer arrives exactly as the runner gave it, as JSON chunks followed by one
/// `[DONE]`, whatever bytes it holds.
#[test]
fn no_answer_text_can_forge_sse_events() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let h = rt.block_on(async {
        let server = server_with(
            ServerConfig::default(),
            Arc::new(Echo),
            Enforcer::new(vec![]),
            ModelOptions::default(),
        );
        Harness::start(server).await
    });
    let mut runner = TestRunner::new(Config {
        cases: 96,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&hostile_text(), |text| {
            if text.trim().is_empty() {
                return Ok(()); // an empty answer is an error by design (proxy.rs)
            }
            let raw =
                rt.block_on(async { h.chat(body(&text, true)).await.text().await.expect("body") });
            let stream = parse_sse(&raw);
            prop_assert!(!stream.torn_tail);
            let (last, chunks) = stream.events.split_last().expect("events");
            prop_assert_eq!(&last.data, "[DONE]");
            let mut content = String::new();
            for event in chunks {
                prop_assert!(event.event.is_none() && event.id.is_none(), "{raw:?}");
                let chunk: Value =
                    serde_json::from_str(&event.data).expect("every data line is one JSON chunk");
                prop_assert_eq!(&chunk["object"], "chat.completion.chunk");
                if let Some(c) = chunk["choices"][0]["delta"]["content"].as_str() {
                    content.push_str(c);
                }
            }
            prop_assert_eq!(content, text.clone());
            let resp = rt.block_on(async {
                h.chat(body(&text, false))
                    .await
                    .json::<Value>()
                    .await
                    .expect("json")
            });
            prop_assert_eq!(
                resp["choices"][0]["message"]["content"].as_str(),
                Some(text.as_str())
            );
            Ok(())
        })
        .expect("property holds");
}

/// The process-wide log capture (installed on first use).
pub(crate) type Captured = enforce_testkit::LogBuffer;

pub(crate) fn captured_logs() -> &'static Captured {
    static LOGS: OnceLock<Captured> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Captured::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
}

const FORGED: &str = "\n2026-01-01T00:00:00Z ERROR FORGED log line\r\ndata: [DONE]\n\n";

/// Issue messages, codes and hints with newlines reach the client inside one JSON error chunk,
/// the audit log keeps one line per request, and no log line can be forged; the proxy's key,
/// a client's wrong key and the upstream key never show up in logs or audit lines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_text_and_keys_cannot_leak_or_forge_lines() {
    let logs = captured_logs();
    let dir = tempfile::tempdir().expect("dir");
    let audit = dir.path().join("audit.jsonl");
    let proxy_key = "sk-proxy-SECRET-1111";
    let upstream_key = "sk-upstream-SECRET-2222";
    let wrong_key = "sk-wrong-SECRET-3333";
    let mock = MockOpenAi::start(
        MockScript::new()
            // Late: the stream starts before the verdict, so the error goes out inside it.
            .reply(
                MockReply::text(format!("answer{FORGED}"))
                    .delayed(std::time::Duration::from_millis(50)),
            )
            .reply(MockReply::error(
                ErrorShape::OpenAi,
                400,
                format!("bad{FORGED}"),
            ))
            .then(Then::RepeatLast),
    )
    .await
    .expect("mock");
    let runner = OpenAiRunner::new(OpenAiConfig {
        base_url: mock.url(),
        model: "mock-model".into(),
        api_key: Some(upstream_key.into()),
        retry: RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        },
        ..OpenAiConfig::default()
    })
    .expect("runner");
    let enforcer = Enforcer::new(vec![Box::new(Hostile)])
        .with_policy(Policy::builder().max_retries(0).build());
    let config = ServerConfig {
        api_keys: vec![proxy_key.into()],
        audit_log: Some(audit.clone()),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    };
    let options = ModelOptions {
        on_unresolved: FailureResponse::Error,
        ..ModelOptions::default()
    };
    let config = streams_start_at_once(config);
    let h = Harness::start(server_with(config, Arc::new(runner), enforcer, options)).await;
    let send = |key: &'static str, stream: bool| {
        h.client
            .post(h.url("/v1/chat/completions"))
            .bearer_auth(key)
            .json(&body("q", stream))
            .send()
    };

    // 1. The hostile issue, streamed: one error chunk, [DONE] last, nothing forged.
    let raw = send(proxy_key, true)
        .await
        .expect("send")
        .text()
        .await
        .expect("body");
    let stream = parse_sse(&raw);
    let data: Vec<&str> = stream.events.iter().map(|e| e.data.as_str()).collect();
    assert_eq!(data.len(), 2, "one error chunk and [DONE]: {raw:?}");
    assert_eq!(data[1], "[DONE]");
    let error: Value = serde_json::from_str(data[0]).expect("json");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap_or_default()
            .contains("FORGED"),
        "the message is kept, escaped"
    );
    assert!(!raw.contains("\ndata: [DONE]\n\ndata: [DONE]"));
    // 2. An upstream error whose text holds newlines.
    let resp = send(proxy_key, false).await.expect("send");
    assert_eq!(resp.status(), 502);
    // 3. A client with a wrong key.
    assert_eq!(send(wrong_key, false).await.expect("send").status(), 401);
    h.shutdown().await.expect("shutdown");

    let audit_text = std::fs::read_to_string(&audit).expect("audit");
    // One line per request: two enforcements and the refused wrong key.
    assert_eq!(
        audit_text.lines().count(),
        3,
        "one line per request: {audit_text}"
    );
    for line in audit_text.lines() {
        serde_json::from_str::<Value>(line).expect("each audit line is one JSON object");
    }
    let log_text = logs.text();
    assert!(
        log_text.contains("runner failed"),
        "the log was captured: {log_text}"
    );
    for (name, text) in [("audit", &audit_text), ("log", &log_text)] {
        for key in [proxy_key, upstream_key, wrong_key] {
            assert!(!text.contains(key), "{name} holds a key: {text}");
        }
        assert!(
            !text
                .lines()
                .any(|l| l.starts_with("2026-01-01T00:00:00Z ERROR FORGED")),
            "{name} has a forged line: {text}"
        );
    }
    // The mock did get the upstream key (so the test would notice a leak).
    assert_eq!(
        mock.chat_requests()[0].header("authorization"),
        Some(format!("Bearer {upstream_key}").as_str())
    );
}
