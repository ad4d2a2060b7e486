//! The `external` validator against real commands, a hanging command and a loopback HTTP
//! checker; and its circuit breaker.

use enforce_config::{BuildEnv, Registry};
use enforce_core::{Context, Enforcer, FailMode, Status, Validator};
use enforce_external::breaker::BreakerState;
use enforce_external::external::External;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn build(spec: serde_json::Value) -> Box<dyn Validator> {
    Registry::builtin()
        .build("checker", &spec, &BuildEnv::default())
        .unwrap()
}

fn have(program: &str) -> bool {
    std::process::Command::new(program)
        .arg("--version")
        .output()
        .is_ok()
}

#[tokio::test]
async fn python_blocks_are_compiled_and_errors_map_to_response_lines() {
    if !have("python3") {
        eprintln!("python3 not installed; skipping");
        return;
    }
    let v = build(
        json!({"type": "external", "command": ["python3", "-m", "py_compile", "{file}"], "blocks": "python"}),
    );
    let good = "Here:\n```python\ndef f(x):\n    return x\n```\n";
    assert!(v.validate(good, &Context::new()).await.unwrap().is_empty());
    let bad = "Intro\n\n```python\nimport os\ndef f(:\n    pass\n```\nAnd JS:\n```js\n{{{\n```\n";
    let issues = v.validate(bad, &Context::new()).await.unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].code, "EXTERNAL_CHECK_FAILED");
    assert_eq!(issues[0].line, Some(5), "{issues:?}"); // `def f(:` is line 5 of the response
    assert!(issues[0].message.contains("SyntaxError"), "{issues:?}");
    // No python block: an error, never an unchecked pass.
    let issues = v.validate("plain text", &Context::new()).await.unwrap();
    assert_eq!(issues[0].code, "CODE_BLOCK_MISSING", "{issues:?}");
}

#[tokio::test]
async fn a_code_answer_without_the_expected_block_is_an_error_with_a_hint() {
    // `false` rejects every input: the check must not even be reached for these answers.
    let v = build(json!({"type": "external", "command": ["false"], "blocks": "avap"}));
    let issues = v
        .validate("Here is the code: addVar(x, 1)", &Context::new())
        .await
        .unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].code, "CODE_BLOCK_MISSING");
    assert!(issues[0].is_error());
    assert!(issues[0].message.contains("```avap"), "{issues:?}");
    assert!(
        issues[0]
            .hint
            .as_deref()
            .is_some_and(|h| h.contains("```avap")),
        "{issues:?}"
    );
    // A block in another language is named as such, at its line.
    let issues = v
        .validate("Sure:\n\n```python\nprint(1)\n```\n", &Context::new())
        .await
        .unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].code, "CODE_BLOCK_MISSING");
    assert!(issues[0].message.contains("python"), "{issues:?}");
    assert_eq!(issues[0].line, Some(3));
}

#[tokio::test]
async fn require_block_false_lets_an_answer_without_a_block_pass() {
    let v = build(
        json!({"type": "external", "command": ["false"], "blocks": "avap", "require_block": false}),
    );
    assert!(v
        .validate("no code here", &Context::new())
        .await
        .unwrap()
        .is_empty());
    // Without `blocks` the key means nothing: refused.
    let err = Registry::builtin()
        .build(
            "checker",
            &json!({"type": "external", "command": ["false"], "require_block": true}),
            &BuildEnv::default(),
        )
        .err()
        .unwrap();
    assert!(err.to_string().contains("require_block"), "{err}");
}

#[tokio::test]
async fn a_missing_block_is_re_asked_and_the_next_answer_is_checked() {
    let v = build(json!({"type": "external", "command": ["sh", "-n"], "blocks": "sh"}));
    let runner =
        enforce_core::ScriptedRunner::texts(["Run echo hi in your shell.", "```sh\necho hi\n```"]);
    let outcome = Enforcer::new(vec![v])
        .run(
            &runner,
            &enforce_core::Request::prompt("a shell command"),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.attempts.len(), 2);
    assert_eq!(outcome.attempts[0].issues[0].code, "CODE_BLOCK_MISSING");
    let calls = runner.calls();
    assert!(
        calls[1]
            .feedback()
            .is_some_and(|f| f.contains("CODE_BLOCK_MISSING")),
        "{:?}",
        calls[1].feedback()
    );
}

#[tokio::test]
async fn shell_syntax_via_stdin() {
    let v = build(json!({"type": "external", "command": ["sh", "-n"], "blocks": "sh"}));
    assert!(v
        .validate("```sh\necho hi\n```", &Context::new())
        .await
        .unwrap()
        .is_empty());
    let issues = v
        .validate("Try:\n```sh\necho ok\nif then fi (\n```", &Context::new())
        .await
        .unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].line, Some(4), "{issues:?}");
}

#[tokio::test]
async fn whole_response_on_stdin_and_unparsed_output() {
    let v = build(
        json!({"type": "external", "command": ["sh", "-c", "grep -q OK || { echo 'missing the word'; exit 1; }"]}),
    );
    assert!(v
        .validate("all OK", &Context::new())
        .await
        .unwrap()
        .is_empty());
    let issues = v.validate("nope", &Context::new()).await.unwrap();
    assert_eq!(issues[0].line, None);
    assert!(issues[0].message.contains("missing the word"), "{issues:?}");
    // Large input is streamed to a checker that reads it all.
    let v = build(json!({"type": "external", "command": ["sh", "-c", "wc -c >/dev/null"]}));
    let big = "x".repeat(10 * 1024 * 1024);
    assert!(v.validate(&big, &Context::new()).await.unwrap().is_empty());
    // ... and to one that ignores it.
    let v = build(json!({"type": "external", "command": ["true"]}));
    assert!(v.validate(&big, &Context::new()).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_hanging_command_is_killed_at_the_timeout() {
    let pid_file = std::env::temp_dir().join(format!("enforce-hang-{}.pid", std::process::id()));
    let script = format!("echo $$ > {}; exec sleep 30", pid_file.display());
    let v = build(json!({"type": "external", "command": ["sh", "-c", script], "timeout_ms": 300}));
    let started = Instant::now();
    let err = v.validate("x", &Context::new()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(err.reason.contains("did not finish within 300 ms"), "{err}");
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let _ = std::fs::remove_file(&pid_file);
    // The process must be gone (or a zombie about to be reaped), not sleeping.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()));
        match stat {
            Err(_) => break,
            Ok(s) if s.split_whitespace().nth(2) == Some("Z") => break,
            Ok(s) => {
                assert!(Instant::now() < deadline, "process still running: {s}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

#[tokio::test]
async fn timeout_zero_disables_the_validator_and_says_so() {
    // `false` would reject everything: a disabled validator never runs it, and leaves a warning
    // (not an error) so the outcome is marked as not fully validated.
    let v = build(json!({"type": "external", "command": ["false"], "timeout_ms": 0}));
    let issues = v.validate("x", &Context::new()).await.unwrap();
    assert_eq!(issues.len(), 1);
    assert_eq!(issues[0].code, enforce_core::validator::VALIDATOR_DISABLED);
    assert!(!issues[0].is_error());
    let outcome = enforce_core::Enforcer::new(vec![v])
        .check("x", &Context::new(), enforce_core::Check::Report)
        .await;
    assert_eq!(outcome.status, enforce_core::Status::Passed);
    assert_eq!(outcome.unchecked_validators(), ["checker"]);
}

#[tokio::test]
async fn breaker_opens_then_probes_then_closes() {
    let marker = std::env::temp_dir().join(format!("enforce-breaker-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    // Unavailable (exit status is a verdict, so unavailability = timeout) until the marker exists.
    let script = format!("test -e {} || sleep 5", marker.display());
    let v = External::command("flaky", vec!["sh".into(), "-c".into(), script])
        .unwrap()
        .timeout(Duration::from_millis(200))
        .breaker(2, Duration::from_millis(300));
    assert!(v.validate("x", &Context::new()).await.is_err());
    assert_eq!(v.circuit_breaker().state(), BreakerState::Closed);
    assert!(v.validate("x", &Context::new()).await.is_err());
    assert_eq!(v.circuit_breaker().state(), BreakerState::Open);
    // Open: refused at once, no call made.
    let started = Instant::now();
    let err = v.validate("x", &Context::new()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_millis(100));
    assert!(err.reason.contains("is open"), "{err}");
    // After the cooldown, a successful probe closes it.
    std::fs::write(&marker, "").unwrap();
    tokio::time::sleep(Duration::from_millis(350)).await;
    assert!(v.validate("x", &Context::new()).await.unwrap().is_empty());
    assert_eq!(v.circuit_breaker().state(), BreakerState::Closed);
    let _ = std::fs::remove_file(&marker);
}

/// Every log line of this test process (one process-wide subscriber: thread-scoped ones miss
/// events of callsites first hit by other tests' threads).
type Logs = enforce_testkit::LogBuffer;

fn captured_logs() -> &'static Logs {
    static LOGS: std::sync::OnceLock<Logs> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Logs::default();
        let writer = logs.clone();
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::INFO)
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .init();
        logs
    })
}

#[tokio::test]
async fn breaker_transitions_are_logged_open_half_open_closed() {
    let logs = captured_logs();
    let marker = std::env::temp_dir().join(format!("enforce-breaker-log-{}", std::process::id()));
    let _ = std::fs::remove_file(&marker);
    let script = format!("test -e {} || sleep 5", marker.display());
    // A generous timeout: the probe must pass on a loaded machine too.
    let v = External::command("logged_parser", vec!["sh".into(), "-c".into(), script])
        .unwrap()
        .timeout(Duration::from_millis(1500))
        .breaker(1, Duration::from_millis(200));
    assert!(v.validate("x", &Context::new()).await.is_err());
    std::fs::write(&marker, "").unwrap();
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert!(v.validate("x", &Context::new()).await.unwrap().is_empty());
    let _ = std::fs::remove_file(&marker);
    // Only this test's validator: other tests log into the same buffer.
    let text: String = logs
        .text()
        .lines()
        .filter(|l| l.contains("logged_parser"))
        .map(|l| format!("{l}\n"))
        .collect();
    let at = |needle: &str| {
        text.find(needle)
            .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{text}"))
    };
    let open = at("circuit OPEN: logged_parser");
    let half_open = at("circuit HALF-OPEN: probing whether logged_parser");
    let closed = at("circuit CLOSED: logged_parser is reachable");
    assert!(open < half_open && half_open < closed, "{text}");
    assert!(text[open..].starts_with("circuit OPEN"), "{text}");
    assert!(text.contains("WARN"), "OPEN is a warning: {text}");
}

fn external(options: serde_json::Value) -> Result<External, enforce_config::BuildError> {
    External::from_config(&enforce_config::FactoryInput::new("parser", &options))
}

#[test]
fn the_documented_defaults_are_pinned() {
    // Checker: 2 s per call; breaker: open after 3 consecutive failures, probe after 30 s.
    let v = external(json!({"command": ["true"]})).unwrap();
    assert_eq!(v.call_timeout(), Duration::from_secs(2));
    assert_eq!(v.circuit_breaker().threshold(), 3);
    assert_eq!(v.circuit_breaker().cooldown(), Duration::from_secs(30));
    // The loop: 2 re-asks after the first attempt.
    assert_eq!(enforce_core::Policy::default().max_retries, 2);
    assert_eq!(Enforcer::new(vec![]).max_attempts(), 3);
}

#[test]
fn timeouts_and_cooldowns_in_seconds_as_the_seed_environment_gives_them() {
    // `timeout_s: ${AVAP_PARSER_TIMEOUT}` with AVAP_PARSER_TIMEOUT=2, `cooldown_s:
    // ${PARSER_CB_COOLDOWN}` with 30: the numbers as the environment names them.
    let v = external(json!({"command": ["true"], "timeout_s": 2, "cooldown_s": 30})).unwrap();
    assert_eq!(v.call_timeout(), Duration::from_secs(2));
    assert_eq!(v.circuit_breaker().cooldown(), Duration::from_secs(30));
    let v = external(json!({"command": ["true"], "timeout_s": 0.5})).unwrap();
    assert_eq!(v.call_timeout(), Duration::from_millis(500));
    // 0 switches the validator off, as `timeout_ms: 0` does.
    let v = external(json!({"command": ["true"], "timeout_s": 0})).unwrap();
    assert_eq!(v.call_timeout(), Duration::ZERO);
    for (bad, key) in [
        (
            json!({"command": ["true"], "timeout_s": 2, "timeout_ms": 2000}),
            "timeout_s",
        ),
        (
            json!({"command": ["true"], "cooldown_s": 30, "cooldown_ms": 1}),
            "cooldown_s",
        ),
        (json!({"command": ["true"], "timeout_s": -1}), "timeout_s"),
    ] {
        let err = external(bad).err().unwrap();
        assert_eq!(err.key, key, "{err}");
    }
}

#[tokio::test]
async fn fail_open_and_fail_closed_in_the_loop() {
    let missing = |mode: &str| {
        build(json!({"type": "external", "command": ["/nonexistent/checker"], "fail_mode": mode}))
    };
    let open = Enforcer::new(vec![missing("open")]);
    let out = open
        .check("text", &Context::new(), enforce_core::Check::Report)
        .await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.warnings[0].code, "VALIDATOR_UNAVAILABLE");
    let closed = Enforcer::new(vec![missing("closed")]);
    let out = closed
        .check("text", &Context::new(), enforce_core::Check::Report)
        .await;
    assert_eq!(out.status, Status::Unavailable);
    assert!(out.unavailable().unwrap().reason.contains("cannot start"));
    assert_eq!(missing("open").fail_mode(), Some(FailMode::Open));
}

/// A one-shot-per-connection HTTP checker on 127.0.0.1: answers "Line 2: bad" unless the body
/// contains "good"; returns 503 when the body contains "down". Stops after `max` requests.
async fn checker(max: usize) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..max {
            let Ok(Ok((sock, _))) =
                tokio::time::timeout(Duration::from_secs(10), listener.accept()).await
            else {
                return;
            };
            answer(sock).await;
        }
    });
    format!("http://{addr}/check")
}

/// The same checker over TLS with a fresh self-signed certificate for 127.0.0.1: its
/// `https://` URL and the certificate (PEM) to trust.
async fn tls_checker(max: usize) -> (String, String) {
    use tokio_rustls::rustls;
    let certified = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(rustls::pki_types::PrivatePkcs8KeyDer::from(
        certified.key_pair.serialize_der(),
    ));
    let config = rustls::ServerConfig::builder_with_provider(std::sync::Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![certified.cert.der().clone()], key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(std::sync::Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for _ in 0..max {
            let Ok(Ok((sock, _))) =
                tokio::time::timeout(Duration::from_secs(10), listener.accept()).await
            else {
                return;
            };
            // A client that does not trust the certificate aborts the handshake.
            if let Ok(tls) = acceptor.accept(sock).await {
                answer(tls).await;
            }
        }
    });
    (format!("https://{addr}/check"), certified.cert.pem())
}

/// Reads one request (head + Content-Length body) and answers it (see [`checker`]).
async fn answer<S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin>(mut sock: S) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some(split) = text.find("\r\n\r\n") {
            let len: usize = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= split + 4 + len {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (status, body) = if text.contains("down") {
        ("503 Service Unavailable", String::new())
    } else if text.contains("good") {
        ("200 OK", String::new())
    } else if text.contains("json") {
        (
            "200 OK",
            r#"{"issues":[{"message":"bad value","line":3,"column":2}]}"#.to_string(),
        )
    } else {
        ("200 OK", "Line 2: bad\n".to_string())
    };
    let reply = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = sock.write_all(reply.as_bytes()).await;
    let _ = sock.shutdown().await;
}

#[tokio::test]
async fn https_checker_with_a_private_ca() {
    let (url, ca) = tls_checker(3).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ca.pem"), ca).unwrap();
    let v = Registry::builtin()
        .build(
            "checker",
            &json!({"type": "external", "url": url, "ca_file": "ca.pem"}),
            &BuildEnv::new(dir.path()),
        )
        .unwrap();
    assert!(v
        .validate("good text", &Context::new())
        .await
        .unwrap()
        .is_empty());
    let issues = v.validate("a\nb", &Context::new()).await.unwrap();
    assert_eq!(
        (issues[0].line, issues[0].message.as_str()),
        (Some(2), "bad")
    );
    // Without the CA the self-signed certificate is refused: no verdict.
    let untrusted = build(json!({"type": "external", "url": url}));
    let err = untrusted
        .validate("good text", &Context::new())
        .await
        .unwrap_err();
    assert!(err.reason.to_lowercase().contains("certificate"), "{err}");
}

#[tokio::test]
async fn http_checker_verdicts_and_errors() {
    let url = checker(4).await;
    let v = build(json!({"type": "external", "url": url}));
    assert!(v
        .validate("good text", &Context::new())
        .await
        .unwrap()
        .is_empty());
    let issues = v.validate("a\nb", &Context::new()).await.unwrap();
    assert_eq!(
        (issues[0].line, issues[0].message.as_str()),
        (Some(2), "bad")
    );
    let issues = v.validate("json please", &Context::new()).await.unwrap();
    assert_eq!((issues[0].line, issues[0].column), (Some(3), Some(2)));
    let err = v.validate("down", &Context::new()).await.unwrap_err();
    assert!(err.reason.contains("503"), "{err}");
}

#[tokio::test]
async fn http_checker_that_never_answers_times_out() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let _conn = listener.accept().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    });
    let v = build(json!({"type": "external", "url": format!("http://{addr}/"), "timeout_ms": 200}));
    let started = Instant::now();
    let err = v.validate("x", &Context::new()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert!(err.reason.contains("within 200 ms"), "{err}");
    hold.abort();
}

#[test]
fn config_errors() {
    let r = Registry::builtin();
    let env = BuildEnv::default();
    let err = r
        .build("x", &json!({"type": "external"}), &env)
        .err()
        .unwrap();
    assert!(err.message.contains("exactly one"), "{err}");
    let err = r
        .build("x", &json!({"type": "external", "url": "ftp://x"}), &env)
        .err()
        .unwrap();
    assert_eq!(err.key, "url");
    let err = r
        .build("x", &json!({"type": "external", "command": []}), &env)
        .err()
        .unwrap();
    assert_eq!(err.key, "command");
    let err = r
        .build(
            "x",
            &json!({"type": "external", "command": ["a"], "timeout": 5}),
            &env,
        )
        .err()
        .unwrap();
    assert_eq!(err.key, "timeout");
}

fn case() -> Context {
    Context::new()
        .with("tests", "assert f(1) == 2")
        .with("n", json!([1, 2]))
}

/// A command sees its case: `{context.KEY}` in its arguments and the whole context as JSON
/// in ENFORCE_CONTEXT; a key the context lacks makes the check unavailable, naming it.
#[tokio::test]
async fn a_command_gets_the_case_in_its_arguments_and_environment() {
    let script = r#"test "$1" = "assert f(1) == 2" || { echo "argument: $1"; exit 1; }
printf %s "$ENFORCE_CONTEXT" | grep -q '"n":\[1,2\]' || { echo "context: $ENFORCE_CONTEXT"; exit 1; }"#;
    let v = build(
        json!({"type": "external", "command": ["sh", "-c", script, "sh", "{context.tests}"]}),
    );
    let issues = v.validate("answer", &case()).await.unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    let other = Context::new()
        .with("tests", "assert f(0) == 0")
        .with("n", json!([1, 2]));
    let issues = v.validate("answer", &other).await.unwrap();
    assert!(
        issues[0].message.contains("argument: assert f(0) == 0"),
        "{issues:?}"
    );
    let err = v.validate("answer", &Context::new()).await.unwrap_err();
    assert!(err.reason.contains("`tests`"), "{err}");
}

/// A context too large for one environment string goes in a file instead.
#[tokio::test]
async fn a_large_context_reaches_the_command_through_a_file() {
    let script = r#"test -z "$ENFORCE_CONTEXT" && grep -q needle "$ENFORCE_CONTEXT_FILE""#;
    let v = build(json!({"type": "external", "command": ["sh", "-c", script]}));
    let big = Context::new().with("tests", format!("{}needle", "x".repeat(200 * 1024)));
    let issues = v.validate("answer", &big).await.unwrap();
    assert!(issues.is_empty(), "{issues:?}");
}

/// One request to 127.0.0.1, answered 200 with an empty body (a pass); returns its URL and
/// the request as received.
async fn recording_checker() -> (String, tokio::sync::oneshot::Receiver<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let Ok(Ok((mut sock, _))) =
            tokio::time::timeout(Duration::from_secs(10), listener.accept()).await
        else {
            return;
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        while let Ok(n) = sock.read(&mut chunk).await {
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            let Some(split) = text.find("\r\n\r\n") else {
                continue;
            };
            let len = text
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase()
                        .strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0usize);
            if buf.len() >= split + 4 + len {
                break;
            }
        }
        let _ = sock
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .await;
        let _ = tx.send(String::from_utf8_lossy(&buf).into_owned());
    });
    (format!("http://{addr}"), rx)
}

/// An HTTP checker sees its case: placeholders in the URL (percent-encoded, so a value
/// cannot add a path or a query) and, with `context_field`, the context in a JSON body.
#[tokio::test]
async fn an_http_checker_gets_the_case_in_its_url_and_body() {
    let (base, request) = recording_checker().await;
    let v = build(json!({
        "type": "external",
        "url": format!("{base}/check/{{context.id}}?n={{context.n}}"),
        "context_field": "case"
    }));
    let context = case().with("id", "a/b c");
    assert!(v
        .validate("def f(): pass", &context)
        .await
        .unwrap()
        .is_empty());
    let request = request.await.expect("the checker was called");
    let head = request.lines().next().unwrap_or_default();
    assert_eq!(
        head, "POST /check/a%2Fb%20c?n=%5B1%2C2%5D HTTP/1.1",
        "{request}"
    );
    assert!(
        request
            .to_ascii_lowercase()
            .contains("content-type: application/json"),
        "{request}"
    );
    let body = &request[request.find("\r\n\r\n").unwrap() + 4..];
    let body: serde_json::Value = serde_json::from_str(body).expect("a JSON body");
    assert_eq!(body["input"], "def f(): pass");
    assert_eq!(body["case"]["tests"], "assert f(1) == 2");
    assert_eq!(body["case"]["n"], json!([1, 2]));
}

#[test]
fn case_options_that_cannot_work_are_configuration_errors() {
    let error = |spec: serde_json::Value| {
        Registry::builtin()
            .build("checker", &spec, &BuildEnv::default())
            .map(|_| ())
            .unwrap_err()
            .to_string()
    };
    let host = error(json!({"type": "external", "url": "http://{context.host}/check"}));
    assert!(host.contains("not in the scheme or the host"), "{host}");
    let command = error(json!({"type": "external", "command": ["true"], "context_field": "c"}));
    assert!(command.contains("ENFORCE_CONTEXT"), "{command}");
    let input =
        error(json!({"type": "external", "url": "http://127.0.0.1:9/x", "context_field": "input"}));
    assert!(input.contains("other than `input`"), "{input}");
}
