//! The command and HTTP reformulation hooks of the input stage.

use enforce_core::{context::keys, input::Reformulator, Context, Issue};
use enforce_external::{CommandReformulator, HttpReformulator};
use serde_json::{json, Value};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn view() -> Context {
    Context::new()
        .with(keys::QUESTION, "What about colours?")
        .with(keys::SYSTEM, "Use the sources.")
        .with(keys::RETRIEVED_CONTEXT, json!(["chunk"]))
        .with("team", "blue")
}

fn issues() -> Vec<Issue> {
    vec![Issue::error(
        "relevance",
        "CONTEXT_NOT_RELEVANT",
        "off topic",
    )]
}

fn sh(script: &str, timeout_ms: u64) -> CommandReformulator {
    CommandReformulator::new(
        vec!["sh".into(), "-c".into(), script.into()],
        Duration::from_millis(timeout_ms),
    )
    .expect("command")
}

#[tokio::test]
async fn a_command_gets_the_request_and_answers_json() {
    let dir = tempfile::tempdir().unwrap();
    let seen = dir.path().join("in.json");
    let hook = sh(
        &format!(
            "cat > {}; echo '{{\"question\": \"How are colours hashed?\", \"context\": \"new\"}}'",
            seen.display()
        ),
        5000,
    );
    let r = hook
        .reformulate(&view(), &issues())
        .await
        .expect("reformulated");
    assert_eq!(r.question.as_deref(), Some("How are colours hashed?"));
    assert_eq!(r.context, Some(Value::from("new")));
    let input: Value = serde_json::from_str(&std::fs::read_to_string(seen).unwrap()).unwrap();
    assert_eq!(
        input,
        json!({"question": "What about colours?", "system": "Use the sources.",
               "context": ["chunk"], "history": [], "issues": [{"code": "CONTEXT_NOT_RELEVANT", "message": "off topic"}],
               "facts": {"team": "blue"}})
    );
}

#[tokio::test]
async fn a_failing_command_slow_command_or_bad_answer_is_an_error() {
    let failed = sh("cat >/dev/null; echo broken >&2; exit 3", 5000)
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(
        failed.contains("exited") && failed.contains("broken"),
        "{failed}"
    );
    let slow = sh("sleep 5", 200)
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(slow.contains("did not finish within 200 ms"), "{slow}");
    let prose = sh("cat >/dev/null; echo sure, here you go", 5000)
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(prose.contains("not {\"question\""), "{prose}");
    let unknown = sh("cat >/dev/null; echo '{\"query\": \"x\"}'", 5000)
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(unknown.contains("unknown field"), "{unknown}");
    let missing =
        CommandReformulator::new(vec!["/nonexistent/hook".into()], Duration::from_secs(1))
            .unwrap()
            .reformulate(&view(), &issues())
            .await
            .unwrap_err();
    assert!(missing.contains("cannot start"), "{missing}");
    assert!(CommandReformulator::new(vec![], Duration::from_secs(1)).is_err());
}

/// Answers one request with `status` and `body`; returns the URL and the request body.
async fn one_shot(
    status: &'static str,
    body: &'static str,
) -> (String, tokio::task::JoinHandle<String>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/reformulate", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let Ok(Ok((mut sock, _))) =
            tokio::time::timeout(Duration::from_secs(10), listener.accept()).await
        else {
            return String::new();
        };
        let mut buf = Vec::new();
        let mut chunk = [0u8; 4096];
        let body_start = loop {
            let n = sock.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                return String::new();
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf).to_ascii_lowercase();
            let Some(split) = text.find("\r\n\r\n") else {
                continue;
            };
            let len: usize = text
                .lines()
                .find_map(|l| {
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap_or(0))
                })
                .unwrap_or(0);
            if buf.len() >= split + 4 + len {
                break split + 4;
            }
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = sock.write_all(reply.as_bytes()).await;
        String::from_utf8_lossy(&buf[body_start..]).into_owned()
    });
    (url, task)
}

#[tokio::test]
async fn an_endpoint_gets_the_request_and_answers_json() {
    let (url, request) = one_shot("200 OK", r#"{"context": ["fresh chunk"]}"#).await;
    let hook = HttpReformulator::new(&url, Duration::from_secs(5)).unwrap();
    let r = hook
        .reformulate(&view(), &issues())
        .await
        .expect("reformulated");
    assert_eq!(r.question, None);
    assert_eq!(r.context, Some(json!(["fresh chunk"])));
    let sent: Value = serde_json::from_str(&request.await.unwrap()).unwrap();
    assert_eq!(sent["question"], "What about colours?");
    assert_eq!(sent["issues"][0]["code"], "CONTEXT_NOT_RELEVANT");
}

#[tokio::test]
async fn an_endpoint_error_or_silence_is_an_error() {
    let (url, _) = one_shot("503 Service Unavailable", "index rebuilding").await;
    let err = HttpReformulator::new(&url, Duration::from_secs(5))
        .unwrap()
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(
        err.contains("503") && err.contains("index rebuilding"),
        "{err}"
    );

    // Accepts, never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let conn = listener.accept().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(conn);
    });
    let err = HttpReformulator::new(&url, Duration::from_millis(200))
        .unwrap()
        .reformulate(&view(), &issues())
        .await
        .unwrap_err();
    assert!(err.contains("did not answer within 200 ms"), "{err}");
    hold.abort();

    assert!(HttpReformulator::new("ftp://x", Duration::from_secs(1)).is_err());
    assert!(HttpReformulator::new("not a url", Duration::from_secs(1)).is_err());
}
