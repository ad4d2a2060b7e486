//! The fault matrix: what a client of the proxy sees when something around it misbehaves, and
//! that nothing is lost (every request is counted, every enforcement that ran has its audit
//! line, and the service answers the next request). One table per family of faults; each row
//! runs non-streaming and streaming through the real HTTP stack.
//!
//! Rows already covered elsewhere are not repeated here (see RELIABILITY.md for the full
//! table): Claude CLI hang, non-zero exit and garbage
//! (`enforce-runner/tests/it/claude_cli.rs`), plugin panic and stall
//! (`enforce-plugin-host/tests/it/host.rs`, `tests/it/plugins.rs` of the
//! `enforce` package), enforcement task panic and deadline (`proxy.rs` next to this file).

use crate::common::{marker_enforcer, server_with, Harness, ParsedStream};
use enforce_core::{Enforcer, FailMode, Runner};
use enforce_external::breaker::BreakerState;
use enforce_external::external::External;
use enforce_runner::{ClaudeConfig, ClaudeRunner, OpenAiConfig, OpenAiRunner, RetryConfig};
use enforce_server::{FsyncPolicy, ModelOptions, Server, ServerConfig};
use enforce_testkit::{FakeClaude, MockOpenAi, MockReply, MockScript, Then};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const ANSWER: &str = "All good.\n<!-- STEP: done -->";

fn body(stream: bool) -> Value {
    json!({"model": "m", "stream": stream, "messages": [{"role": "user", "content": "hi"}]})
}

fn openai_runner(base: &str) -> Arc<dyn Runner> {
    Arc::new(
        OpenAiRunner::new(OpenAiConfig {
            base_url: base.to_string(),
            model: "mock-model".into(),
            // Long enough for a 2 MiB body from a debug-built mock on a loaded machine.
            timeout_secs: 1.5,
            connect_timeout_secs: 1.0,
            retry: RetryConfig {
                max_retries: 1,
                initial_backoff_ms: 10,
                max_backoff_ms: 20,
                max_retry_after_secs: 1,
            },
            max_response_bytes: 1024 * 1024,
            ..OpenAiConfig::default()
        })
        .expect("runner"),
    )
}

fn audited(dir: &tempfile::TempDir) -> ServerConfig {
    ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    }
}

/// A proxy for the OpenAI upstream at `base`, auditing into `dir`.
fn audited_openai(dir: &tempfile::TempDir, base: &str) -> Server {
    server_with(
        audited(dir),
        openai_runner(base),
        marker_enforcer(false),
        ModelOptions::default(),
    )
}

fn audit_lines(dir: &tempfile::TempDir) -> Vec<Value> {
    std::fs::read_to_string(dir.path().join("audit.jsonl"))
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).expect("every audit line is JSON"))
        .collect()
}

/// What the client must see for one row.
struct Seen {
    status: u16,
    code: &'static str,
}

/// Sends the row's request plain and streamed and checks what came back; then checks that the
/// service still answers, that both requests are counted and (when the loop ran) audited.
async fn check_row(name: &str, h: &Harness, dir: &tempfile::TempDir, seen: Seen, audited: bool) {
    let resp = h.chat(body(false)).await;
    assert_eq!(resp.status().as_u16(), seen.status, "{name}: status");
    let json: Value = resp.json().await.expect("an OpenAI error body");
    assert_eq!(json["error"]["code"], seen.code, "{name}: {json}");
    assert!(
        json.get("choices").is_none(),
        "{name}: no answer in an error"
    );
    let message = json["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.len() > 20,
        "{name}: a message for a person: {message}"
    );

    // Streamed: a 4xx known before the first byte is the same plain error; other errors end
    // the stream (an SDK would send the whole request again at once on a 5xx).
    let resp = h.chat(body(true)).await;
    if seen.status < 500 {
        assert_eq!(
            resp.status().as_u16(),
            seen.status,
            "{name}: streamed status"
        );
        let json: Value = resp.json().await.expect("an OpenAI error body");
        assert_eq!(json["error"]["code"], seen.code, "{name}: {json}");
    } else {
        let raw = resp.text().await.expect("stream body");
        let stream = ParsedStream::parse(&raw);
        assert!(stream.done_last, "{name}: [DONE] ends the stream: {raw}");
        let error = stream
            .error()
            .unwrap_or_else(|| panic!("{name}: no error chunk in {raw}"));
        assert_eq!(error["code"], seen.code, "{name}: {raw}");
        assert_eq!(stream.content(), "", "{name}: nothing unchecked was shown");
    }

    let counted: f64 = [
        "aborted",
        "unavailable",
        "unresolved",
        "deadline",
        "internal_error",
    ]
    .iter()
    .map(|s| {
        h.server
            .metrics()
            .value("enforce_requests_total", &[("model", "m"), ("status", s)])
    })
    .sum();
    assert_eq!(counted, 2.0, "{name}: both requests counted");
    if audited {
        let lines = audit_lines(dir);
        assert_eq!(lines.len(), 2, "{name}: one audit line per request");
        assert!(
            lines.iter().all(|l| l["status"] != "passed"),
            "{name}: {lines:?}"
        );
    }
}

/// A TCP server that answers every connection with `reply` (raw bytes) and then closes or
/// resets the connection.
async fn raw_upstream(reply: &'static [u8], reset: bool) -> String {
    raw_server(move |mut socket| async move {
        let _ = socket.write_all(reply).await;
        if reset {
            // SO_LINGER 0: close sends RST instead of FIN. The socket is empty, so the
            // blocking close the deprecation warns about cannot happen.
            #[allow(deprecated)]
            let _ = socket.set_linger(Some(Duration::ZERO));
        }
        drop(socket);
    })
    .await
}

/// A TCP server that reads each connection's request and hands the socket to `answer`; its
/// base URL.
async fn raw_server<F, Fut>(answer: F) -> String
where
    F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            let mut buf = vec![0u8; 64 * 1024];
            let _ = tokio::time::timeout(Duration::from_millis(200), socket.read(&mut buf)).await;
            tokio::spawn(answer(socket));
        }
    });
    format!("http://{addr}/v1")
}

#[tokio::test]
async fn upstream_faults() {
    let big = "x".repeat(2 * 1024 * 1024);
    let mock_rows: Vec<(&str, MockReply, Seen)> = vec![
        (
            "upstream 5xx (retried, then reported)",
            MockReply::error(enforce_testkit::ErrorShape::OpenAi, 500, "broken"),
            Seen {
                status: 502,
                code: "upstream_error",
            },
        ),
        (
            "upstream overloaded (503, retried, then passed on)",
            MockReply::error(enforce_testkit::ErrorShape::OpenAi, 503, "overloaded"),
            Seen {
                status: 503,
                code: "upstream_overloaded",
            },
        ),
        (
            "upstream 429 beyond the retry budget (passed on with its Retry-After)",
            MockReply::rate_limited(1),
            Seen {
                status: 429,
                code: "upstream_rate_limited",
            },
        ),
        (
            "upstream timeout",
            MockReply::text(ANSWER).delayed(Duration::from_secs(4)),
            Seen {
                status: 504,
                code: "upstream_timeout",
            },
        ),
        (
            "garbage bytes in a 200",
            MockReply::Garbage("\u{0}\u{1b}[31mnot json".into()),
            Seen {
                status: 502,
                code: "upstream_protocol_error",
            },
        ),
        (
            "an enormous response (2 MiB over a 1 MiB limit)",
            MockReply::text(big),
            Seen {
                status: 502,
                code: "upstream_cut_off",
            },
        ),
    ];
    for (name, reply, seen) in mock_rows {
        let mock = MockOpenAi::start(MockScript::new().reply(reply).then(Then::RepeatLast))
            .await
            .expect("mock");
        let dir = tempfile::tempdir().expect("dir");
        let server = server_with(
            audited(&dir),
            openai_runner(&mock.url()),
            marker_enforcer(false),
            ModelOptions::default(),
        );
        let h = Harness::start(server).await;
        check_row(name, &h, &dir, seen, true).await;
        // The retry policy held: at most 2 calls per request (1 retry), so 4 for 2 requests.
        assert!(
            mock.chat_requests().len() <= 4,
            "{name}: {} calls",
            mock.chat_requests().len()
        );
        // The service answers the next request once the upstream is healthy again.
        mock.push(MockReply::text(ANSWER));
        let ok = h.chat(body(false)).await;
        assert_eq!(ok.status(), 200, "{name}: service recovers");
        h.shutdown().await.expect("clean shutdown");
        assert_eq!(
            audit_lines(&dir).len(),
            3,
            "{name}: the recovery is audited too"
        );
    }

    let raw_rows: Vec<(&str, &'static [u8], bool, Seen)> = vec![
        (
            "connection reset before any byte",
            b"",
            true,
            Seen { status: 502, code: "upstream_error" },
        ),
        (
            "body cut mid-way (Content-Length not reached)",
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 500\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"cut",
            false,
            Seen { status: 502, code: "upstream_cut_off" },
        ),
        (
            "garbage instead of HTTP",
            b"\x00\xff\xfe garbage \r\n\r\n",
            false,
            Seen { status: 502, code: "upstream_error" },
        ),
    ];
    for (name, reply, reset, seen) in raw_rows {
        let base = raw_upstream(reply, reset).await;
        let dir = tempfile::tempdir().expect("dir");
        let server = audited_openai(&dir, &base);
        let h = Harness::start(server).await;
        check_row(name, &h, &dir, seen, true).await;
        h.shutdown().await.expect("clean shutdown");
    }
}

#[tokio::test]
async fn claude_cli_faults() {
    let scratch = enforce_testkit::ScratchDir::new("fault-claude").expect("scratch");
    let missing = ClaudeConfig {
        binary: scratch.path().join("no-such-claude"),
        timeout_secs: 5.0,
        ..ClaudeConfig::default()
    };
    let is_error = FakeClaude::new(json!([
        {"kind": "error", "subtype": "error_during_execution", "errors": ["API Error: 401 auth expired"]},
        {"kind": "error", "subtype": "error_during_execution", "errors": ["API Error: 401 auth expired"]}
    ]))
    .expect("fake claude");
    let exit = FakeClaude::new(json!([
        {"kind": "exit", "code": 3, "stderr": "boom"},
        {"kind": "exit", "code": 3, "stderr": "boom"}
    ]))
    .expect("fake claude");
    let rows: Vec<(&str, ClaudeConfig, Seen)> = vec![
        (
            "claude CLI missing",
            missing,
            Seen {
                status: 502,
                code: "runner_failed",
            },
        ),
        (
            "claude is_error result",
            ClaudeConfig {
                binary: is_error.binary().into(),
                env: is_error.env(),
                timeout_secs: 10.0,
                ..ClaudeConfig::default()
            },
            Seen {
                status: 502,
                code: "upstream_error",
            },
        ),
        (
            "claude non-zero exit",
            ClaudeConfig {
                binary: exit.binary().into(),
                env: exit.env(),
                timeout_secs: 10.0,
                ..ClaudeConfig::default()
            },
            Seen {
                status: 502,
                code: "runner_failed",
            },
        ),
    ];
    for (name, config, seen) in rows {
        let runner: Arc<dyn Runner> = Arc::new(ClaudeRunner::new(config).expect("runner"));
        let dir = tempfile::tempdir().expect("dir");
        let server = server_with(
            audited(&dir),
            runner,
            marker_enforcer(false),
            ModelOptions::default(),
        );
        let h = Harness::start(server).await;
        check_row(name, &h, &dir, seen, true).await;
        h.shutdown().await.expect("clean shutdown");
    }
}

/// External validator that hangs (or crashes) until a marker file exists: fail-closed, so the
/// client gets a 503 `validator_unavailable`; the breaker opens after 2 failures (then requests
/// are refused without running the command), half-opens after the cooldown and closes on the
/// first success.
#[tokio::test]
async fn external_validator_hang_and_crash_trip_the_breaker_and_it_recovers() {
    // Long enough that a loaded machine answers the open-breaker request within it.
    const COOLDOWN: Duration = Duration::from_millis(1500);
    for (name, failing) in [("hang", "sleep 5"), ("crash", "kill -SEGV $$")] {
        let dir = tempfile::tempdir().expect("dir");
        let marker = dir.path().join("healthy");
        // Each run of the command leaves a line in `runs`, so the test can see whether the
        // breaker let a call through (a timing bound alone flakes on a loaded machine).
        let runs = dir.path().join("runs");
        let script = format!(
            "echo run >> '{}'; test -e '{}' || {failing}",
            runs.display(),
            marker.display()
        );
        let run_count = || {
            std::fs::read_to_string(&runs)
                .map(|s| s.lines().count())
                .unwrap_or(0)
        };
        let external = Arc::new(
            External::command("ext", vec!["sh".into(), "-c".into(), script])
                .expect("external")
                .timeout(Duration::from_millis(300))
                .breaker(2, COOLDOWN)
                .fail_mode(FailMode::Closed),
        );
        let enforcer = Enforcer::new(vec![Box::new(external.clone())]);
        let runner = Arc::new(enforce_core::ScriptedRunner::texts(vec![ANSWER; 16]));
        let options = ModelOptions {
            on_unavailable: enforce_server::FailureResponse::Error,
            ..ModelOptions::default()
        };
        let server = server_with(audited(&dir), runner, enforcer, options);
        let h = Harness::start(server).await;
        for _ in 0..2 {
            let resp = h.chat(body(false)).await;
            assert_eq!(resp.status(), 503, "{name}");
            assert!(resp.headers().get("retry-after").is_some(), "{name}");
            let json: Value = resp.json().await.expect("json");
            assert_eq!(
                json["error"]["code"], "validator_unavailable",
                "{name}: {json}"
            );
        }
        assert_eq!(
            external.circuit_breaker().state(),
            BreakerState::Open,
            "{name}"
        );
        assert_eq!(run_count(), 2, "{name}: both failing calls ran the command");
        // Open: refused at once, the command is not run.
        let started = Instant::now();
        let resp = h.chat(body(true)).await;
        assert!(
            started.elapsed() < COOLDOWN,
            "{name}: open breaker answers before the cooldown ends"
        );
        assert_eq!(
            run_count(),
            2,
            "{name}: the open breaker did not run the command"
        );
        // Known before the stream's first byte, with a Retry-After: a plain 503.
        assert_eq!(resp.status(), 503, "{name}");
        assert!(resp.headers().get("retry-after").is_some(), "{name}");
        let error: Value = resp.json().await.expect("an error body");
        assert_eq!(
            error["error"]["code"], "validator_unavailable",
            "{name}: {error}"
        );
        // Cooldown passes, the command is healthy again: the probe succeeds and closes it.
        std::fs::write(&marker, "").expect("marker");
        tokio::time::sleep(COOLDOWN + Duration::from_millis(100)).await;
        let resp = h.chat(body(false)).await;
        assert_eq!(resp.status(), 200, "{name}");
        assert_eq!(run_count(), 3, "{name}: one probe ran the command");
        assert_eq!(
            external.circuit_breaker().state(),
            BreakerState::Closed,
            "{name}"
        );
        h.shutdown().await.expect("shutdown");
        let lines = audit_lines(&dir);
        assert_eq!(lines.len(), 4, "{name}: every request audited");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l["status"] == "unavailable")
                .count(),
            3,
            "{name}"
        );
    }
}

/// Disk full under the audit log (`/dev/full`: opens, every write fails with ENOSPC): the
/// client still gets its answer, the failure is logged and counted in
/// `enforce_audit_write_failures_total`.
#[tokio::test]
async fn audit_disk_full_keeps_answering_and_raises_a_metric() {
    if !std::path::Path::new("/dev/full").exists() {
        eprintln!("no /dev/full here; skipped");
        return;
    }
    for policy in [FsyncPolicy::Always, FsyncPolicy::Never] {
        let config = ServerConfig {
            audit_log: Some("/dev/full".into()),
            audit_fsync: policy,
            ..ServerConfig::default()
        };
        let runner = Arc::new(enforce_core::ScriptedRunner::texts(vec![ANSWER; 4]));
        let server = server_with(
            config,
            runner,
            marker_enforcer(false),
            ModelOptions::default(),
        );
        let h = Harness::start(server).await;
        let metric = "enforce_audit_write_failures_total";
        assert!(h
            .client
            .get(h.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("text")
            .contains(metric));
        for stream in [false, true] {
            let resp = h.chat(body(stream)).await;
            assert_eq!(resp.status(), 200, "{policy:?}");
            let text = resp.text().await.expect("body");
            assert!(text.contains("All good."), "{policy:?}: {text}");
        }
        let mut failures = 0.0;
        for _ in 0..100 {
            failures = h.server.metrics().value(metric, &[]);
            if failures >= 1.0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(failures >= 1.0, "{policy:?}: failures counted: {failures}");
        h.shutdown().await.expect("shutdown");
    }
}

/// An audit path that cannot be created is a clear start-up error naming the path, not a
/// panic and not a silently unaudited service.
#[test]
fn unwritable_audit_location_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "").expect("file");
    let config = ServerConfig {
        audit_log: Some(file.join("audit.jsonl")),
        ..ServerConfig::default()
    };
    let runner = Arc::new(enforce_core::ScriptedRunner::texts(["x"]));
    let err = enforce_server::Server::builder(config)
        .model(enforce_server::Model::new(
            "m",
            runner,
            Arc::new(Enforcer::new(vec![])),
        ))
        .build()
        .expect_err("must fail");
    let text = err.to_string();
    assert!(text.contains("plain-file"), "{text}");
}

/// An upstream nobody listens on: the client is told the model server cannot be reached, and
/// only the log and the audit record name its internal address.
#[tokio::test]
async fn an_unreachable_upstream_is_not_named_to_the_client() {
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.local_addr().expect("addr").port()
    };
    let base = format!("http://127.0.0.1:{port}/v1");
    let dir = tempfile::tempdir().expect("temp dir");
    let server = audited_openai(&dir, &base);
    let h = Harness::start(server).await;
    let resp = h.chat(body(false)).await;
    assert_eq!(resp.status().as_u16(), 502);
    let plain = resp.text().await.expect("body");
    let raw = h.chat(body(true)).await.text().await.expect("stream");
    for shown in [&plain, &raw] {
        assert!(shown.contains("Cannot reach the model server"), "{shown}");
        assert!(
            !shown.contains(&port.to_string()),
            "the address leaked: {shown}"
        );
    }
    let audit = std::fs::read_to_string(dir.path().join("audit.jsonl")).expect("audit");
    assert!(
        audit.contains(&base),
        "the audit names the upstream: {audit}"
    );
}

/// An upstream that answers at once and then sends its body one byte at a time, past the
/// runner's `timeout_secs`: the same 504 `upstream_timeout` as an upstream that never answers.
#[tokio::test]
async fn a_dribbling_upstream_times_out_like_a_hanging_one() {
    let base = raw_server(|mut socket| async move {
        let head = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100000\r\n\r\n{\"choices\":[{\"message\":{\"content\":\"";
        if socket.write_all(head).await.is_err() {
            return;
        }
        // Well past the runner's 1.5 s, then gives up by itself.
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            if socket.write_all(b"x").await.is_err() {
                return;
            }
        }
    })
    .await;
    let dir = tempfile::tempdir().expect("dir");
    let server = audited_openai(&dir, &base);
    let h = Harness::start(server).await;
    let seen = Seen {
        status: 504,
        code: "upstream_timeout",
    };
    check_row(
        "an upstream dribbling past the timeout",
        &h,
        &dir,
        seen,
        true,
    )
    .await;
}
