//! Crash safety of `enforce serve`: the real binary in front of the mock upstream, under load
//! from concurrent clients, is killed with SIGKILL. Afterwards:
//! - every complete audit line is one JSON object; at most the last line is torn (and then it
//!   is the only line without its newline, which a reader skips and reports);
//! - with `audit_fsync: always`, every answer a client received is in the audit log;
//! - every session `status.json` is complete JSON (atomic rename), never half-written.
//!
//! Bounded: about 1.5 s of load, then the kill.

use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Reads an audit log the way an operator's tool should: complete lines are records; a last
/// line without its newline is a torn write from a crash, reported and skipped.
fn read_audit(text: &str) -> (Vec<Value>, Option<String>) {
    let (complete, torn) = match text.rfind('\n') {
        Some(i) => (&text[..=i], &text[i + 1..]),
        None => ("", text),
    };
    let records = complete
        .lines()
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|e| panic!("torn line in the middle: {e}: {l:?}"))
        })
        .collect();
    (records, (!torn.is_empty()).then(|| torn.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_answer() {
    let mock = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("answer for {{token}}\n<!-- STEP: done -->"))
            .then(Then::RepeatLast),
    )
    .await
    .expect("mock");
    let dir = tempfile::tempdir().expect("dir");
    let audit = dir.path().join("audit.jsonl");
    let sessions = dir.path().join("sessions");
    let config = dir.path().join("enforce.yaml");
    std::fs::write(
        &config,
        format!(
            "models:\n  - id: m\n    profile: chat\n    runner:\n      type: openai\n      base_url: {}\n      model: mock-model\n      timeout_secs: 5\n      retry:\n        max_retries: 0\nserver:\n  session_dir: {}\n  audit_log: {}\n  audit_fsync: always\n",
            mock.url(),
            sessions.display(),
            audit.display()
        ),
    )
    .expect("config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_enforce"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env_remove("ENFORCE_API_KEYS")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("enforce starts");
    let mut lines = BufReader::new(child.stderr.take().expect("stderr")).lines();
    let base = loop {
        match lines.next() {
            Some(Ok(line)) => {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    break rest.trim().to_string();
                }
            }
            other => {
                let _ = child.kill();
                panic!("enforce serve did not start: {other:?}");
            }
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});

    let acknowledged = Arc::new(Mutex::new(BTreeSet::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let client = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client");
    let mut clients = Vec::new();
    for c in 0..16 {
        let (client, base, acknowledged, stop) = (
            client.clone(),
            base.clone(),
            acknowledged.clone(),
            stop.clone(),
        );
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let token = format!("c{c}n{n}");
                let stream = n % 2 == 0;
                let body = json!({"model": "m", "stream": stream,
                    "metadata": {"chat_id": format!("chat-{}", c % 4)},
                    "messages": [{"role": "user", "content": format!("q [token:{token}]")}]});
                let Ok(resp) = client
                    .post(format!("{base}/chat/completions"))
                    .json(&body)
                    .send()
                    .await
                else {
                    break;
                };
                let code = resp.status();
                let Ok(text) = resp.text().await else { break };
                if !code.is_success() && n < 2 {
                    eprintln!("status {code}");
                }
                // Acknowledged = the whole answer reached the client.
                let complete = if stream {
                    text.contains("data: [DONE]")
                } else {
                    text.ends_with('}')
                };
                if complete && text.contains(&format!("answer for {token}")) {
                    acknowledged.lock().expect("lock").insert(token);
                }
            }
        }));
    }
    // At least 1.5 s of load, and on a busy machine (tests running side by side on two cores)
    // until 20 answers got through; the assertion below still fails if they never do.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while acknowledged.lock().expect("lock").len() < 20 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    child.kill().expect("SIGKILL");
    let status = child.wait().expect("wait");
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        let _ = tokio::time::timeout(Duration::from_secs(5), c).await;
    }
    assert!(!status.success(), "killed, not exited: {status:?}");

    let acknowledged = acknowledged.lock().expect("lock").clone();
    assert!(
        acknowledged.len() >= 20,
        "the load was real: {} answers",
        acknowledged.len()
    );
    let text = std::fs::read_to_string(&audit).expect("audit log");
    let (records, torn) = read_audit(&text);
    if let Some(torn) = &torn {
        eprintln!("reader: skipped a torn last line of {} bytes", torn.len());
    }
    let audited: BTreeSet<String> = records
        .iter()
        .filter_map(|r| r["response"].as_str())
        .filter_map(|r| r.strip_prefix("answer for "))
        .filter_map(|r| r.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let missing: Vec<&String> = acknowledged.difference(&audited).collect();
    assert!(
        missing.is_empty(),
        "acknowledged but not audited: {missing:?}"
    );

    let mut statuses = 0;
    for entry in std::fs::read_dir(&sessions).expect("session dir") {
        let path = entry.expect("entry").path().join("status.json");
        if let Ok(text) = std::fs::read_to_string(&path) {
            serde_json::from_str::<Value>(&text)
                .unwrap_or_else(|e| panic!("half-written {}: {e}: {text:?}", path.display()));
            statuses += 1;
        }
    }
    assert!(statuses >= 1, "sessions were written");
}

#[test]
fn the_reader_skips_and_reports_a_torn_last_line() {
    let (records, torn) = read_audit("{\"a\":1}\n{\"a\":2}\n{\"a\":");
    assert_eq!(records.len(), 2);
    assert_eq!(torn.as_deref(), Some("{\"a\":"));
    let (records, torn) = read_audit("{\"a\":1}\n");
    assert_eq!((records.len(), torn), (1, None));
}
