//! `enforce run --audit` and `enforce serve`'s audit log write one record shape, and `run`
//! takes the proxy's `audit_fsync` setting (or `--audit-fsync`).

use crate::serve::{client, temp_dir, Proxy};
use crate::text;
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::process::{Command, Output};

const GOOD: &str = "Here is why.\n<!-- STEP: why -->";

fn run(args: Vec<String>) -> Output {
    Command::new(env!("CARGO_BIN_EXE_enforce"))
        .arg("run")
        .args(args)
        .env_remove("ENFORCE_CONFIG")
        .env_remove("ENFORCE_MODEL")
        .env_remove("ENFORCE_BASE_URL")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .expect("the enforce binary runs")
}

fn records(path: &std::path::Path) -> Vec<(String, Value)> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(|l| (l.to_string(), serde_json::from_str(l).expect("JSON")))
        .collect()
}

/// The record's keys in the order they are written (a parsed map may sort them).
fn keys(line: &str) -> Vec<String> {
    let map: serde_json::Map<String, Value> = serde_json::from_str(line).expect("an object");
    let mut positions: Vec<(usize, String)> = map
        .keys()
        .map(|k| {
            let at = line
                .find(&format!("\"{k}\":"))
                .unwrap_or_else(|| panic!("{k} in {line}"));
            (at, k.clone())
        })
        .collect();
    positions.sort();
    positions.into_iter().map(|(_, k)| k).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_and_serve_write_the_same_record() {
    let upstream = MockOpenAi::start(
        MockScript::new().replies([MockReply::text(GOOD), MockReply::text(GOOD)]),
    )
    .await
    .unwrap();
    let dir = temp_dir("audit-shape");
    let config = dir.join("enforce.yaml");
    std::fs::write(
        &config,
        format!(
            "runner:\n  type: openai\n  base_url: {url}\n  model: mock-model\n  retry:\n    max_retries: 0\n\
             models:\n  - id: m\n    profile: chat\n\
             server:\n  audit_log: {serve_log}\n  audit_fsync: always\n",
            url = upstream.url(),
            serve_log = dir.join("serve.jsonl").display(),
        ),
    )
    .unwrap();

    let run_log = dir.join("run.jsonl");
    let args: Vec<String> = vec![
        "--config".into(),
        config.display().to_string(),
        "--audit".into(),
        run_log.display().to_string(),
        "Answer.".into(),
    ];
    let out = tokio::task::spawn_blocking(move || run(args))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let resp = client()
        .post(proxy.url("/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "Answer."}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let body: Value = resp.json().await.unwrap();
    assert!(proxy.terminate().success());

    let from_run = records(&run_log);
    let from_serve = records(&dir.join("serve.jsonl"));
    assert_eq!((from_run.len(), from_serve.len()), (1, 1));
    let ((run_line, run_record), (serve_line, serve_record)) = (&from_run[0], &from_serve[0]);
    // Same keys in the same order (neither request has a chat id).
    assert_eq!(keys(run_line), keys(serve_line));
    assert_eq!(
        &keys(run_line)[..6],
        ["ts", "request_id", "model", "profile", "runner", "status"]
    );
    assert!(!run_line.contains("timestamp_ms"));
    for record in [run_record, serve_record] {
        let ts = record["ts"].as_str().unwrap();
        assert!(
            ts.len() == 24 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T',
            "{ts}"
        );
        assert_eq!(record["profile"], "chat");
        assert_eq!(record["runner"], "openai");
        assert_eq!(record["status"], "passed");
    }
    assert_eq!(run_record["model"], "mock-model");
    assert_eq!(serve_record["model"], "m");
    assert!(run_record["request_id"]
        .as_str()
        .unwrap()
        .starts_with("run-"));
    assert_eq!(serve_record["request_id"], body["id"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn run_reads_the_proxys_fsync_setting_and_its_flag() {
    let dir = temp_dir("audit-fsync");
    // A bad server.audit_fsync stops `run` too: it is the setting `run` honours.
    let config = dir.join("enforce.yaml");
    std::fs::write(&config, "server:\n  audit_fsync: sometimes\n").unwrap();
    let out = run(vec![
        "--config".into(),
        config.display().to_string(),
        "--command".into(),
        "cat".into(),
        "q".into(),
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("server.audit_fsync"),
        "{}",
        text(&out.stderr)
    );
    // The flag takes the same words.
    let out = run(vec!["--audit-fsync".into(), "sometimes".into(), "q".into()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("never, always, interval"),
        "{}",
        text(&out.stderr)
    );
    // A good setting writes the record (syncing is unit-tested in `run`).
    std::fs::write(&config, "server:\n  audit_fsync: always\n").unwrap();
    let audit = dir.join("audit.jsonl");
    for flag in [None, Some("never")] {
        let mut args = vec![
            "--config".into(),
            config.display().to_string(),
            "--command".into(),
            "printf 'Done.\\n<!-- STEP: done -->'".into(),
            "--audit".into(),
            audit.display().to_string(),
        ];
        if let Some(flag) = flag {
            args.extend(["--audit-fsync".to_string(), flag.to_string()]);
        }
        args.push("q".into());
        let out = run(args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    }
    let written = records(&audit);
    assert_eq!(written.len(), 2);
    assert!(written
        .iter()
        .all(|(_, r)| r["runner"] == "command" && r["model"].is_null() && r["status"] == "passed"));
    let _ = std::fs::remove_dir_all(&dir);
}
