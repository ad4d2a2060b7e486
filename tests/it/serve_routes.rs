//! `enforce serve` with `routes:`: the routed profile in `X-Enforce-Profile` and the audit
//! line, a classifier reached through `${VAR}` in the config, and route errors at start-up
//! located in the file.

use crate::serve::{client, temp_dir, Proxy, GOOD};
use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::process::Command;

/// The config: model `m` (profile `chat`) routed by a body field first, then by the
/// classifier, whose URL comes from the environment.
fn routed_config(upstream: &str, audit: &std::path::Path) -> String {
    format!(
        "\
profiles:
  code:
    validators: []
models:
  - id: m
    profile: chat
    runner:
      type: openai
      base_url: {upstream}
      model: mock-model
      retry:
        max_retries: 0
    routes:
      - name: smalltalk
        profile: chat
        when: {{field: /metadata/kind, equals: smalltalk}}
      - name: code
        profile: code
        when: {{label: CODE_GENERATION}}
    classify:
      runner:
        type: openai
        base_url: ${{CLASSIFY_URL}}
        model: classifier
        retry:
          max_retries: 0
      labels: [CODE_GENERATION, CONVERSATIONAL]
      timeout_ms: ${{CLASSIFY_TIMEOUT_MS:-3000}}
server:
  audit_log: {}
  audit_fsync: always
",
        audit.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_pick_the_profile_shown_in_the_header_and_the_audit() {
    let upstream = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text(GOOD))
            .then(Then::RepeatLast),
    )
    .await
    .unwrap();
    let classifier = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("CODE_GENERATION"))
            .then(Then::RepeatLast),
    )
    .await
    .unwrap();
    let dir = temp_dir("routes");
    let audit = dir.join("audit.jsonl");
    let config = dir.join("enforce.yaml");
    std::fs::write(&config, routed_config(&upstream.url(), &audit)).unwrap();
    let env = BTreeMap::from([("CLASSIFY_URL".to_string(), classifier.url())]);
    let proxy = Proxy::start_with_env(&["--config", config.to_str().unwrap()], env);
    let c = client();

    // The classifier labels it: profile `code`.
    let resp = c
        .post(proxy.url("/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "Write a parser"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("x-enforce-profile").unwrap(), "code");
    let body: Value = resp.json().await.unwrap();
    assert_eq!(body["enforcement"]["route"]["name"], "code");
    assert_eq!(
        body["enforcement"]["route"]["classify"]["label"],
        "CODE_GENERATION"
    );
    let asked = classifier.chat_requests();
    assert_eq!(asked.len(), 1);
    assert!(
        asked[0]
            .last_user()
            .unwrap_or_default()
            .contains("Write a parser"),
        "{:?}",
        asked[0].last_user()
    );

    // The body field matches first: the classifier is not asked, profile `chat`, streamed.
    let resp = c
        .post(proxy.url("/chat/completions"))
        .json(
            &json!({"model": "m", "stream": true, "metadata": {"kind": "smalltalk"},
                      "messages": [{"role": "user", "content": "Write a parser"}]}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers().get("x-enforce-profile").unwrap(), "chat");
    let _ = resp.text().await.unwrap();
    assert_eq!(classifier.chat_requests().len(), 1);

    let lines: Vec<Value> = std::fs::read_to_string(&audit)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2);
    assert_eq!(lines[0]["profile"], "code");
    assert_eq!(
        lines[0]["route"],
        json!({"name": "code", "profile": "code", "by": "classify",
               "classify": {"label": "CODE_GENERATION", "ms": lines[0]["route"]["classify"]["ms"]}})
    );
    assert_eq!(lines[1]["profile"], "chat");
    assert_eq!(
        lines[1]["route"],
        json!({"name": "smalltalk", "profile": "chat", "by": "field"})
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `enforce serve` with `config`; its stderr, after it refused to start.
fn refused(dir: &std::path::Path, config: &str) -> String {
    let path = dir.join("enforce.yaml");
    std::fs::write(&path, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_enforce"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&path)
        .env("CLASSIFY_URL", "http://127.0.0.1:9/v1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn bad_routes_are_refused_at_start_up_with_file_line_and_key() {
    let dir = temp_dir("routes-bad");
    let good = routed_config("http://127.0.0.1:9/v1", &dir.join("audit.jsonl"));
    let file = dir.join("enforce.yaml");
    for (from, to, line, key) in [
        (
            "        profile: code\n",
            "        profile: kode\n",
            18,
            "models[0].routes[1].profile",
        ),
        // Keys inside a flow mapping are located at the mapping's key.
        (
            "field: /metadata/kind, equals: smalltalk}",
            "matches: '(unclosed'}",
            16,
            "models[0].routes[0].when.matches",
        ),
        (
            "field: /metadata/kind,",
            "field: metadata/kind,",
            16,
            "models[0].routes[0].when.field",
        ),
        (
            "label: CODE_GENERATION}",
            "label: CODE}",
            19,
            "models[0].routes[1].when",
        ),
    ] {
        assert!(good.contains(from), "{from}");
        let stderr = refused(&dir, &good.replacen(from, to, 1));
        let at = format!("{}:{line}:", file.display());
        assert!(stderr.contains(&at), "{key}: {stderr}");
        assert!(stderr.contains(key), "{key}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
