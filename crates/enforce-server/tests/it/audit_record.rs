//! The proxy's audit record: one line per request in the shared `AuditRecord` shape (time,
//! request id, model, profile, chat, runner, then the outcome), also for requests cut short by
//! the deadline or a panic, with the attempts made until then.

use crate::common::*;
use enforce_core::{Ask, ReplyStream};
use enforce_core::{Outcome, Reply, Runner, StopReason};
use enforce_server::{FsyncPolicy, KeyGrant, Model, ModelOptions, Server, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const BAD: &str = "No marker here.";
const GOOD: &str = "Done.\n<!-- STEP: done -->";

/// What the re-ask does after a first answer without a marker.
#[derive(Clone, Copy)]
enum ThenDo {
    Answer,
    Hang,
    Panic,
}

/// Answers the first ask with [`BAD`] (so the loop re-asks), then does `then`.
struct FirstBad {
    then: ThenDo,
}

impl Runner for FirstBad {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move {
            if ask.follow_up.is_none() {
                return Ok(Reply {
                    session_id: Some("sess-1".into()),
                    ..Reply::text(BAD)
                });
            }
            match self.then {
                ThenDo::Answer => Ok(Reply::text(GOOD)),
                ThenDo::Hang => {
                    tokio::time::sleep(Duration::from_secs(30)).await;
                    Ok(Reply::text(GOOD))
                }
                ThenDo::Panic => panic!("runner bug on the re-ask"),
            }
        })
    }
}

struct Audited {
    harness: Harness,
    dir: tempfile::TempDir,
}

impl Audited {
    async fn start(then: ThenDo) -> Audited {
        let dir = tempfile::tempdir().unwrap();
        let config = ServerConfig {
            audit_log: Some(dir.path().join("audit.jsonl")),
            // The response waits for its line: no polling for the file.
            audit_fsync: FsyncPolicy::Always,
            request_timeout: Duration::from_millis(600),
            ..ServerConfig::default()
        };
        let runner: Arc<dyn Runner> = Arc::new(FirstBad { then });
        let server = Server::builder(config)
            .model(
                Model::new("m", runner, Arc::new(marker_enforcer(false)))
                    .with_profile("markers")
                    .with_runner_kind("openai"),
            )
            .profile("other", Arc::new(marker_enforcer(true)))
            .build()
            .unwrap();
        Audited {
            harness: Harness::start(server).await,
            dir,
        }
    }

    fn lines(&self) -> Vec<(String, Value)> {
        std::fs::read_to_string(self.dir.path().join("audit.jsonl"))
            .unwrap_or_default()
            .lines()
            .map(|l| (l.to_string(), serde_json::from_str(l).expect("JSON")))
            .collect()
    }
}

/// `keys` appear in this order in the raw line (a parsed `Value` may sort its keys).
fn keys_in_order(line: &str, keys: &[&str]) {
    let mut from = 0;
    for key in keys {
        let at = line[from..]
            .find(&format!("\"{key}\":"))
            .unwrap_or_else(|| panic!("`{key}` after byte {from} in {line}"));
        from += at;
    }
}

fn is_rfc3339_millis_utc(ts: &str) -> bool {
    let b = ts.as_bytes();
    ts.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
        && ts
            .chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit())
}

#[tokio::test]
async fn a_passed_request_is_audited_with_its_header_and_every_attempt() {
    let a = Audited::start(ThenDo::Answer).await;
    let resp = a
        .harness
        .client
        .post(a.harness.url("/v1/chat/completions"))
        .header("X-OpenWebUI-Chat-Id", "chat-7")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    let lines = a.lines();
    assert_eq!(lines.len(), 1);
    let (raw, record) = &lines[0];
    keys_in_order(
        raw,
        &[
            "ts",
            "request_id",
            "model",
            "profile",
            "chat_id",
            "runner",
            "status",
            "stop_reason",
            "attempts",
        ],
    );
    assert!(
        is_rfc3339_millis_utc(record["ts"].as_str().unwrap()),
        "{raw}"
    );
    // The id the client got is the id in the audit.
    assert_eq!(record["request_id"], body["id"]);
    assert_eq!(record["model"], "m");
    assert_eq!(record["profile"], "markers");
    assert_eq!(record["chat_id"], "chat-7");
    assert_eq!(record["runner"], "openai");
    assert_eq!(record["status"], "passed");
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2);
    // The outcome reads back from the record.
    let outcome: Outcome = serde_json::from_str(raw).unwrap();
    assert_eq!(outcome.attempts.len(), 2);

    // A profile picked by header is the profile audited; no chat id, no key.
    let resp = a
        .harness
        .client
        .post(a.harness.url("/v1/chat/completions"))
        .header("X-Enforce-Profile", "other")
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let lines = a.lines();
    let (raw, record) = &lines[1];
    assert_eq!(record["profile"], "other");
    assert!(record.get("chat_id").is_none(), "{raw}");
    assert_ne!(record["request_id"], lines[0].1["request_id"]);
}

#[tokio::test]
async fn deadline_and_panic_still_write_the_record_with_the_attempts_so_far() {
    for (then, reason, plain_status, metric) in [
        (ThenDo::Hang, "deadline_exceeded", 504, "deadline"),
        (ThenDo::Panic, "panicked", 500, "internal_error"),
    ] {
        let a = Audited::start(then).await;
        let resp = a.harness.chat(user_body(false)).await;
        assert_eq!(resp.status().as_u16(), plain_status, "{reason}");
        let (_, parsed) = read_stream(a.harness.chat(user_body(true)).await).await;
        assert!(parsed.error().is_some(), "{reason}: an error chunk");
        let lines = a.lines();
        assert_eq!(
            lines.len(),
            2,
            "{reason}: plain and streamed are both audited"
        );
        for (raw, record) in &lines {
            assert_eq!(record["status"], "aborted", "{raw}");
            assert_eq!(record["stop_reason"]["reason"], reason, "{raw}");
            assert_eq!(record["profile"], "markers");
            assert!(record["request_id"]
                .as_str()
                .is_some_and(|id| id.starts_with("chatcmpl-")));
            // The first attempt (no marker) was made before the re-ask hung or panicked.
            let attempts = record["attempts"].as_array().unwrap();
            assert_eq!(attempts.len(), 1, "{raw}");
            assert_eq!(attempts[0]["issues"][0]["code"], "MISSING_STEP_MARKER");
            assert_eq!(attempts[0]["session_id"], "sess-1");
            assert_eq!(record["session_id"], "sess-1");
            assert_eq!(record["response"], Value::Null);
            let outcome: Outcome = serde_json::from_str(raw).expect("reads back");
            let expected = match then {
                ThenDo::Hang => StopReason::DeadlineExceeded,
                _ => StopReason::Panicked,
            };
            assert_eq!(outcome.stop_reason, expected);
        }
        let counted = a.harness.server.metrics().value(
            "enforce_requests_total",
            &[("model", "m"), ("status", metric)],
        );
        assert_eq!(counted, 2.0, "{reason}: the metric label stays");
    }
}

/// The limit headers a request sends.
type LimitHeaders = &'static [(&'static str, &'static str)];

#[tokio::test]
async fn the_record_names_the_key_and_the_limits_the_request_set_on_every_surface() {
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        audit_fsync: FsyncPolicy::Always,
        api_keys: vec!["k-anonymous".into()],
        key_grants: vec![
            KeyGrant {
                name: "support-app".into(),
                key: "k-secret-app".into(),
                models: Some(vec!["m".into()]),
                profiles: None,
            },
            // Named, not limited: kept for its name.
            KeyGrant {
                name: "ops".into(),
                key: "k-secret-ops".into(),
                models: None,
                profiles: None,
            },
        ],
        ..ServerConfig::default()
    };
    let options = ModelOptions {
        request_limits: true,
        ..ModelOptions::default()
    };
    let runner: Arc<dyn Runner> = Arc::new(FirstBad {
        then: ThenDo::Answer,
    });
    // The profile allows 2 re-asks and sets no token budget.
    let server = Server::builder(config)
        .model(
            Model::new("m", runner, Arc::new(marker_enforcer_retries(false, 2)))
                .with_profile("markers")
                .with_options(options),
        )
        .build()
        .unwrap();
    let h = Harness::start(server).await;
    let path = dir.path().join("audit.jsonl");
    let mut seen = 0;
    for surface in SURFACES {
        for stream in [false, true] {
            let (url, body) = surface_request(surface, "m", stream);
            let cases: [(&str, LimitHeaders, Value); 3] = [
                (
                    "k-secret-app",
                    &[
                        ("X-Enforce-Max-Retries", "0"),
                        ("X-Enforce-Token-Budget", "5000"),
                    ],
                    json!({"key": "support-app", "request_limits": {
                        "max_retries": {"asked": 0, "applied": 0, "from": "request"},
                        "token_budget": {"asked": 5000, "applied": 5000, "from": "request"},
                    }}),
                ),
                // Asking for more than the profile allows: the profile's value applies.
                (
                    "k-secret-ops",
                    &[("X-Enforce-Max-Retries", "9")],
                    json!({"key": "ops", "request_limits": {
                        "max_retries": {"asked": 9, "applied": 2, "from": "profile"},
                    }}),
                ),
                ("k-anonymous", &[], json!({})),
            ];
            for (key, limits, expected) in cases {
                let mut request = h.client.post(h.url(url)).json(&body);
                request = if surface == "messages" {
                    request.header("x-api-key", key)
                } else {
                    request.bearer_auth(key)
                };
                for (name, value) in limits {
                    request = request.header(*name, *value);
                }
                let response = request.send().await.unwrap();
                let status = response.status();
                let text = response.text().await.unwrap();
                assert_eq!(status, 200, "{surface} stream={stream} {key}: {text}");
                let written = std::fs::read_to_string(&path).unwrap();
                let lines: Vec<&str> = written.lines().collect();
                assert_eq!(lines.len(), seen + 1, "{surface} stream={stream} {key}");
                seen += 1;
                let raw = lines[seen - 1];
                let record: Value = serde_json::from_str(raw).unwrap();
                let case = format!("{surface} stream={stream} {key}: {raw}");
                assert_eq!(record.get("key"), expected.get("key"), "{case}");
                assert_eq!(
                    record.get("request_limits"),
                    expected.get("request_limits"),
                    "{case}"
                );
                // The record names keys, never holds them.
                assert!(!raw.contains("k-secret") && !raw.contains(key), "{case}");
                // The lowered limit is the one the loop ran with: no re-ask for the app's
                // request, the re-ask that passes for the others.
                let attempts = record["attempts"].as_array().unwrap().len();
                let expected = if key == "k-secret-app" { 1 } else { 2 };
                assert_eq!(attempts, expected, "{case}");
            }
        }
    }
}
