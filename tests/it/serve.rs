//! `enforce serve` end to end: the real binary on 127.0.0.1 in front of the mock OpenAI server.

use enforce_testkit::sse::ParsedStream;
use enforce_testkit::{ErrorShape, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub(crate) const GOOD: &str = "Here is why.\n<!-- STEP: why -->";

/// A running `enforce serve`, stopped with SIGTERM (or killed) when dropped.
pub(crate) struct Proxy {
    child: Child,
    pub(crate) base: String,
}

impl Proxy {
    pub(crate) fn start(args: &[&str]) -> Proxy {
        Self::start_with_env(args, std::collections::BTreeMap::new())
    }

    pub(crate) fn start_with_env(
        args: &[&str],
        env: std::collections::BTreeMap<String, String>,
    ) -> Proxy {
        let mut child = Command::new(env!("CARGO_BIN_EXE_enforce"))
            .arg("serve")
            // Traces only where a test asks for them.
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .args(["--listen", "127.0.0.1:0"])
            .args(args)
            .env_remove("ENFORCE_API_KEYS")
            // Loopback only: no proxy may sit between the binary and the mock upstream.
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("HTTPS_PROXY")
            .env_remove("https_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .env_remove("ENFORCE_CONFIG")
            // After the removals: what a test sets on purpose is kept.
            .envs(env)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("enforce binary starts");
        let stderr = child.stderr.take().expect("stderr");
        let mut lines = BufReader::new(stderr).lines();
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
        // Keep draining stderr so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines.by_ref() {});
        Proxy { child, base }
    }

    /// The process id of the running `enforce serve`.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Sends SIGTERM and waits for the exit status.
    pub(crate) fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-TERM", &pid]).status();
        for _ in 0..100 {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("enforce serve did not stop on SIGTERM within 5 s");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("enforce-serve-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A config whose model `m` talks to `upstream` without runner-level retries.
pub(crate) fn config_for(
    dir: &std::path::Path,
    upstream: &str,
    extra_model: &str,
    server: &str,
) -> PathBuf {
    let path = dir.join("enforce.yaml");
    let text = format!(
        "models:\n  - id: m\n    profile: chat\n    runner:\n      type: openai\n      base_url: {upstream}\n      model: mock-model\n      timeout_secs: 1\n      retry:\n        max_retries: 0\n{extra_model}{server}"
    );
    std::fs::write(&path, text).unwrap();
    path
}

pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

pub(crate) fn body(stream: bool) -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "Why?"}], "stream": stream})
}

fn stream_error(raw: &str) -> Option<Value> {
    ParsedStream::parse(raw).error().cloned()
}

fn stream_content(raw: &str) -> String {
    ParsedStream::parse(raw).content()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_only_passes_after_a_reask_and_forwards_unknown_fields() {
    let upstream = MockOpenAi::start(
        MockScript::new().replies([MockReply::text("No marker here."), MockReply::text(GOOD)]),
    )
    .await
    .unwrap();
    let proxy = Proxy::start(&[
        "--upstream-url",
        &upstream.url(),
        // No --upstream-model: the proxy takes the first model the upstream lists.
        "--model-id",
        "m",
        "--profile",
        "chat",
    ]);
    let models: Value = client()
        .get(proxy.url("/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "m");

    let mut request = body(false);
    request["max_completion_tokens"] = json!(64);
    request["x_custom"] = json!({"keep": true});
    let resp = client()
        .post(proxy.url("/chat/completions"))
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    let answer: Value = resp.json().await.unwrap();
    assert_eq!(answer["choices"][0]["message"]["content"], GOOD);
    assert_eq!(answer["enforcement"]["attempts"], 2);

    let sent = upstream.chat_requests();
    assert_eq!(sent.len(), 2);
    assert_eq!(sent[0].body["max_completion_tokens"], 64);
    assert_eq!(sent[0].body["x_custom"], json!({"keep": true}));
    assert_eq!(sent[0].body["model"], "mock-model");
    let feedback = sent[1].last_user().unwrap_or_default();
    assert!(feedback.contains("MISSING_STEP_MARKER"), "{feedback}");
    assert!(proxy.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_end_streams_with_an_error_chunk() {
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    let dir = temp_dir("failures");
    let config = config_for(&dir, &upstream.url(), "", "");
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let cases = [
        (
            MockReply::error(ErrorShape::OpenAi, 500, "the model crashed"),
            "upstream",
        ),
        (
            MockReply::text(GOOD).delayed(Duration::from_secs(3)),
            "timeout",
        ),
        (
            MockReply::StreamCut {
                text: GOOD.to_string(),
                after_chunks: 1,
            },
            "cut",
        ),
    ];
    for (reply, name) in cases {
        // Streaming.
        upstream.push(reply.clone());
        let raw = client()
            .post(proxy.url("/chat/completions"))
            .json(&body(true))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let error = stream_error(&raw).unwrap_or_else(|| panic!("{name}: no error chunk in {raw}"));
        let message = error["message"].as_str().unwrap();
        eprintln!("{name}: {message}");
        assert!(message.len() > 20, "{name}");
        assert!(stream_content(&raw).is_empty(), "{name}: {raw}");
        assert!(
            ParsedStream::parse(&raw).done_last,
            "{name}: no [DONE] at the end"
        );
        // Non-streaming: an OpenAI error, never an empty success.
        upstream.push(reply);
        let resp = client()
            .post(proxy.url("/chat/completions"))
            .json(&body(false))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_server_error(), "{name}: {}", resp.status());
        let err: Value = resp.json().await.unwrap();
        assert!(err["error"]["message"].is_string(), "{name}");
    }
    assert!(proxy.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_models_sessions_auth_and_on_unresolved_error() {
    let upstream = MockOpenAi::start(MockScript::new().then(enforce_testkit::Then::RepeatLast))
        .await
        .unwrap();
    let dir = temp_dir("config");
    let strict = format!(
        "  - id: strict\n    profile: ends_ok\n    on_unresolved: error\n    status_events: true\n    runner:\n      type: openai\n      base_url: {}\n      model: mock-model\n      retry:\n        max_retries: 0\n",
        upstream.url()
    );
    // A profile whose check has no repair, so that an answer can stay unresolved.
    let server = format!(
        "validators:\n  needs_ok:\n    type: pattern\n    required:\n      - regex: 'OK$'\n        code: MISSING_OK\n        message: The answer must end with OK.\n        severity: error\nprofiles:\n  ends_ok:\n    validators: [needs_ok]\nserver:\n  api_keys: [secret-key]\n  session_dir: {}\n  audit_log: {}\n",
        dir.join("sessions").display(),
        dir.join("audit.jsonl").display()
    );
    let config = config_for(&dir, &upstream.url(), &strict, &server);
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let c = client();

    let resp = c.get(proxy.url("/models")).send().await.unwrap();
    assert_eq!(resp.status(), 401);
    let models: Value = c
        .get(proxy.url("/models"))
        .bearer_auth("secret-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["m", "strict"]);

    // Two turns of one chat: step history persisted.
    for answer in ["First.\n<!-- STEP: what -->", "Second.\n<!-- STEP: why -->"] {
        upstream.push(MockReply::text(answer));
        let resp = c
            .post(proxy.url("/chat/completions"))
            .bearer_auth("secret-key")
            .header("X-OpenWebUI-Chat-Id", "chat-e2e")
            .json(&body(false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    let session: Value = c
        .get(proxy.url("/sessions/chat-e2e"))
        .bearer_auth("secret-key")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let steps: Vec<&str> = session["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["what", "why"]);
    assert!(dir.join("sessions/chat-e2e/status.json").is_file());

    // `strict` turns an unresolved answer into a 422, streamed or not: the verdict comes before
    // the stream's first byte, so the stream is answered with the same plain 422.
    upstream.push(MockReply::text("never a marker"));
    let mut request = body(false);
    request["model"] = json!("strict");
    let resp = c
        .post(proxy.url("/chat/completions"))
        .bearer_auth("secret-key")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    // Streamed, the verdict comes before the first byte is due: the same plain 422, so SDKs
    // raise their own error type and do not retry.
    request["stream"] = json!(true);
    let resp = c
        .post(proxy.url("/chat/completions"))
        .bearer_auth("secret-key")
        .json(&request)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 422);
    let raw = resp.text().await.unwrap();
    assert!(!raw.contains("never a marker"));
    let body: Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(body["error"]["code"], "enforcement_unresolved", "{raw}");

    let metrics = c
        .get(format!("{}/metrics", proxy.base.trim_end_matches("/v1")))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("enforce_requests_total{model=\"m\",status=\"passed\"} 2"),
        "{metrics}"
    );
    assert!(proxy.terminate().success());
    // The audit log was flushed on SIGTERM: one line per request, the 401 a short `refused`
    // record.
    let audit = std::fs::read_to_string(dir.join("audit.jsonl")).unwrap();
    let statuses: Vec<String> = audit
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["status"].to_string())
        .collect();
    assert_eq!(statuses.len(), 5, "{audit}");
    assert_eq!(
        statuses.iter().filter(|s| *s == "\"refused\"").count(),
        1,
        "{audit}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_sessions_continue_across_turns_and_tools_are_accepted() {
    let fake = enforce_testkit::FakeClaude::new(json!([
        {"kind": "success", "result": "What do you need?\n<!-- STEP: what -->", "session_id": "claude-s1"},
        {"kind": "success", "result": "Because it is simpler.\n<!-- STEP: why -->"},
    ]))
    .unwrap();
    let proxy = Proxy::start_with_env(
        &[
            "--runner",
            "claude",
            "--claude-bin",
            fake.binary().to_str().unwrap(),
            "--profile",
            "chat",
            "--model-id",
            "consultant",
        ],
        fake.env(),
    );
    // What Open WebUI sends from the browser: the chat header and ~36 tool definitions.
    let tools: Vec<Value> = (0..36)
        .map(|i| json!({"type": "function", "function": {"name": format!("tool_{i}"), "parameters": {}}}))
        .collect();
    let mut messages = vec![json!({"role": "user", "content": "Should we cache?"})];
    for expected in ["what", "why"] {
        let request =
            json!({"model": "consultant", "messages": messages, "stream": true, "tools": tools});
        let raw = client()
            .post(proxy.url("/chat/completions"))
            .header("X-OpenWebUI-Chat-Id", "owui-chat-1")
            .json(&request)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let content = stream_content(&raw);
        assert!(
            content.contains(&format!("<!-- STEP: {expected} -->")),
            "{raw}"
        );
        messages.push(json!({"role": "assistant", "content": content}));
        messages.push(json!({"role": "user", "content": "Why?"}));
    }
    let calls = fake.calls();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[0].resume_id(), None);
    // The second turn resumed the first turn's Claude session and sent only the new question.
    assert_eq!(calls[1].resume_id(), Some("claude-s1"));
    assert!(
        !calls[1].stdin.contains("Should we cache?"),
        "{}",
        calls[1].stdin
    );
    let session: Value = client()
        .get(proxy.url("/sessions/owui-chat-1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["runner_session_id"], "claude-s1");
    let steps: Vec<&str> = session["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["what", "why"]);
    assert!(proxy.terminate().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_export_circuit_breaker_states() {
    let upstream = MockOpenAi::start(MockScript::new().then(enforce_testkit::Then::RepeatLast))
        .await
        .unwrap();
    let dir = temp_dir("breaker");
    // A checker that cannot be started fails the breaker at once (threshold 1).
    let extra = format!(
        "  - id: linted\n    profile: linted\n    runner:\n      type: openai\n      base_url: {}\n      model: mock-model\n      retry:\n        max_retries: 0\n",
        upstream.url()
    );
    let rest = "validators:\n  lint:\n    type: external\n    command: [/nonexistent/enforce-test-checker]\n    failure_threshold: 1\n    cooldown_ms: 600000\n    fail_mode: open\nprofiles:\n  linted:\n    validators: [lint]\n";
    let config = config_for(&dir, &upstream.url(), &extra, rest);
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let c = client();
    let metrics_url = format!("{}/metrics", proxy.base.trim_end_matches("/v1"));
    let scrape = || async {
        c.get(&metrics_url)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    };
    let before = scrape().await;
    assert!(
        before.contains("enforce_breaker_state{validator=\"lint\"} 0"),
        "{before}"
    );

    upstream.push(MockReply::text("anything"));
    let mut request = body(false);
    request["model"] = json!("linted");
    let resp = c
        .post(proxy.url("/chat/completions"))
        .json(&request)
        .send()
        .await
        .unwrap();
    // Fail-open: the answer passes with a warning, and the breaker is now open.
    assert_eq!(resp.status(), 200);
    let after = scrape().await;
    assert!(
        after.contains("enforce_breaker_state{validator=\"lint\"} 2"),
        "{after}"
    );
    assert!(proxy.terminate().success());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Collects the spans posted to `/v1/traces` (OTLP/HTTP protobuf) on a free loopback port.
#[cfg(feature = "otel")]
async fn otlp_receiver() -> (
    String,
    std::sync::Arc<
        std::sync::Mutex<
            Vec<opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest>,
        >,
    >,
) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    let received = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let store = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                match ExportTraceServiceRequest::decode(body) {
                    Ok(request) => {
                        store.lock().unwrap().push(request);
                        axum::http::StatusCode::OK
                    }
                    Err(_) => axum::http::StatusCode::BAD_REQUEST,
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), received)
}

#[cfg(feature = "otel")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otel_variables_turn_traces_on_and_sigterm_flushes_them() {
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    let (receiver, received) = otlp_receiver().await;
    let upstream = MockOpenAi::start(
        MockScript::new().replies([MockReply::text("No marker here."), MockReply::text(GOOD)]),
    )
    .await
    .unwrap();
    let env = [
        ("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.as_str()),
        ("OTEL_SERVICE_NAME", "proxy-e2e"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let proxy = Proxy::start_with_env(
        &[
            "--upstream-url",
            &upstream.url(),
            "--upstream-model",
            "mock-model",
            "--model-id",
            "m",
        ],
        env,
    );
    let resp = client()
        .post(proxy.url("/chat/completions"))
        .json(&body(false))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["x-enforce-status"], "passed");
    assert!(proxy.terminate().success());

    let exports = received.lock().unwrap();
    let resources: Vec<_> = exports.iter().flat_map(|e| &e.resource_spans).collect();
    let names: Vec<&str> = resources
        .iter()
        .flat_map(|r| &r.scope_spans)
        .flat_map(|s| &s.spans)
        .map(|s| s.name.as_str())
        .collect();
    let count = |name: &str| names.iter().filter(|n| **n == name).count();
    assert_eq!(count("chat_completion"), 1, "{names:?}");
    assert_eq!(count("chat mock-model"), 2, "{names:?}");
    assert_eq!(count("validate step_marker"), 2, "{names:?}");
    let service = resources[0]
        .resource
        .as_ref()
        .and_then(|r| r.attributes.iter().find(|kv| kv.key == "service.name"))
        .and_then(|kv| kv.value.as_ref()?.value.clone());
    assert_eq!(service, Some(Any::StringValue("proxy-e2e".into())));
}

#[test]
fn a_bad_otlp_endpoint_is_refused_with_the_key_and_an_example() {
    let dir = temp_dir("otlp-bad");
    let config = config_for(
        &dir,
        "http://127.0.0.1:9/v1",
        "",
        "server:\n  otlp:\n    endpoint: localhost:4318\n",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_enforce"))
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("server.otlp.endpoint"), "{stderr}");
    assert!(stderr.contains("http://localhost:4318"), "{stderr}");
}

#[test]
fn an_empty_api_key_is_refused_from_the_flag_and_the_environment() {
    let dir = temp_dir("empty-key");
    let config = config_for(&dir, "http://127.0.0.1:9/v1", "", "");
    let serve = |flags: &[&str], env: Option<&str>| {
        let mut command = Command::new(env!("CARGO_BIN_EXE_enforce"));
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .args(flags)
            .env_remove("ENFORCE_API_KEYS");
        if let Some(value) = env {
            command.env("ENFORCE_API_KEYS", value);
        }
        command.output().unwrap()
    };
    for flag in ["", "  "] {
        let out = serve(&["--api-key", "k", "--api-key", flag], None);
        assert_eq!(out.status.code(), Some(2));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--api-key") && stderr.contains("empty"),
            "{stderr}"
        );
    }
    for value in ["", "k,", "k, ,j"] {
        let out = serve(&[], Some(value));
        assert_eq!(out.status.code(), Some(2), "{value:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("ENFORCE_API_KEYS") && stderr.contains("empty"),
            "{stderr}"
        );
    }
}

/// Errors about `models:` entries, the server's limits and `listen` name the file and line
/// like every other configuration error, and limits of 0 are refused before serving.
#[test]
fn model_listen_and_zero_limit_errors_name_file_line_and_key() {
    let dir = temp_dir("located");
    let runner = "    runner: {type: openai, base_url: 'http://127.0.0.1:9/v1', model: m";
    let cases = [
        (
            format!("models:\n  - id: m\n{runner}, timeout_secs: 0}}\n"),
            ":3:",
            "models[0].runner.timeout_secs",
        ),
        (
            format!("models:\n  - id: m\n{runner}, max_response_bytes: 0}}\n"),
            ":3:",
            "models[0].runner.max_response_bytes",
        ),
        (
            format!("models:\n  - id: m\n{runner}}}\n  - id: m\n{runner}}}\n"),
            ":4:",
            "models[1].id",
        ),
        (
            format!("models:\n  - id: m\n    profile: nope\n{runner}}}\n"),
            ":3:",
            "models[0].profile",
        ),
        (
            format!("models:\n  - id: m\n{runner}}}\nserver:\n  request_timeout_secs: 0\n"),
            ":5:",
            "server.request_timeout_secs",
        ),
        (
            format!("models:\n  - id: m\n{runner}}}\nserver:\n  max_body_bytes: 0\n"),
            ":5:",
            "server.max_body_bytes",
        ),
        (
            format!("models:\n  - id: m\n{runner}}}\nserver:\n  listen: 256.1.1.1:1\n"),
            ":5:",
            "server.listen",
        ),
    ];
    for (yaml, line, key) in cases {
        let path = dir.join("enforce.yaml");
        std::fs::write(&path, &yaml).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_enforce"))
            .args(["serve", "--config"])
            .arg(&path)
            .env_remove("ENFORCE_API_KEYS")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{yaml}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains(&format!("enforce.yaml{line}")) && stderr.contains(key),
            "{yaml}\n{stderr}"
        );
    }
}
