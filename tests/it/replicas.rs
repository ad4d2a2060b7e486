//! Two `enforce serve` processes sharing one real Redis (`server.state`): a chat continues on
//! the other replica with its step history, a breaker opened on one is open on the other and
//! probed once, the global concurrency limit counts both, a Claude session is never resumed on
//! the wrong replica, and a Redis outage leaves the replicas serving (degraded) and resynced
//! once Redis is back.
//!
//! Each test starts its own `redis-server` on a free loopback port (no persistence) and stops
//! it at the end; without `redis-server` on PATH the tests print "skipped: redis-server not
//! found" and pass (`.ci/run` installs it, so CI always runs them).

use crate::serve::{client, temp_dir, Proxy};
use enforce_testkit::{FakeClaude, MockOpenAi, MockReply, MockScript};
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A `redis-server` of the test's own, killed when dropped.
struct RedisServer {
    child: Option<Child>,
    binary: PathBuf,
    port: u16,
}

fn on_path(program: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(program))
        .find(|p| p.is_file())
}

impl RedisServer {
    /// Starts one, or says why the test is skipped.
    fn start() -> Option<RedisServer> {
        let Some(binary) = on_path("redis-server") else {
            eprintln!("skipped: redis-server not found (install the Debian package redis-server)");
            return None;
        };
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free port");
        let mut server = RedisServer {
            child: None,
            binary,
            port,
        };
        server.restart();
        Some(server)
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Starts it (again, empty: nothing is persisted) on the same port.
    fn restart(&mut self) {
        let child = Command::new(&self.binary)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server starts");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.command(&["PING"]).as_deref() != Some("+PONG") {
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills it at once, as a crash would.
    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Sends one command in the inline protocol; the first reply line.
    fn command(&self, args: &[&str]) -> Option<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
        stream
            .write_all(format!("{}\r\n", args.join(" ")).as_bytes())
            .ok()?;
        let mut reply = Vec::new();
        let mut byte = [0u8; 1];
        while stream.read(&mut byte).ok()? == 1 && byte[0] != b'\n' {
            reply.push(byte[0]);
        }
        Some(String::from_utf8_lossy(&reply).trim_end().to_string())
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Writes a config for one replica: `models_and_profiles` plus a server section with the
/// shared state.
fn replica_config(dir: &Path, replica: &str, body: &str, redis: &str, state: &str) -> PathBuf {
    let path = dir.join(format!("{replica}.yaml"));
    let text = format!(
        "{body}server:\n  audit_log: {audit}\n  state:\n    redis: {redis}\n    replica: {replica}\n{state}",
        audit = dir.join(format!("{replica}-audit.jsonl")).display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn openai_model(upstream: &str, profile: &str) -> String {
    format!(
        "models:\n  - id: m\n    profile: {profile}\n    runner:\n      type: openai\n      base_url: {upstream}\n      model: mock-model\n      timeout_secs: 5\n      retry:\n        max_retries: 0\n"
    )
}

fn start(config: &Path) -> Proxy {
    start_with_env(config, Default::default())
}

fn start_with_env(config: &Path, env: std::collections::BTreeMap<String, String>) -> Proxy {
    let config = config.to_str().unwrap();
    Proxy::start_with_env(&["--config", config], env)
}

/// One non-streaming chat turn: status code, `X-Enforce-Status`, body.
async fn turn(proxy: &Proxy, chat: &str, question: &str) -> (u16, String, Value) {
    let response = client()
        .post(proxy.url("/chat/completions"))
        .header("X-OpenWebUI-Chat-Id", chat)
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": question}]}))
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let enforced = response
        .headers()
        .get("x-enforce-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (
        status,
        enforced,
        response.json().await.unwrap_or(Value::Null),
    )
}

async fn get_json(proxy: &Proxy, path: &str) -> Value {
    client()
        .get(proxy.url(path))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// `/healthz` lives beside `/v1`.
async fn health_state(proxy: &Proxy) -> String {
    let url = proxy.url("").trim_end_matches("/v1").to_string() + "/healthz";
    let health: Value = client()
        .get(url)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    health["state"].as_str().unwrap_or_default().to_string()
}

/// Waits until the replica has its shared state back (it resyncs first).
async fn wait_until_shared(proxy: &Proxy) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while health_state(proxy).await != "shared" {
        assert!(
            Instant::now() < deadline,
            "the replica never left the degraded state"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn metrics(proxy: &Proxy) -> String {
    let url = proxy.url("").trim_end_matches("/v1").to_string() + "/metrics";
    client()
        .get(url)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

fn steps(session: &Value) -> Vec<String> {
    session["steps"]
        .as_array()
        .map(|s| {
            s.iter()
                .map(|s| s["step"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_continues_on_the_other_replica_and_survives_a_redis_outage() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    let dir = temp_dir("replicas-chat");
    let model = openai_model(&upstream.url(), "chat");
    let a = start(&replica_config(&dir, "a", &model, &redis.url(), ""));
    let b = start(&replica_config(&dir, "b", &model, &redis.url(), ""));
    assert_eq!(health_state(&a).await, "shared");

    upstream.push(MockReply::text("What.\n<!-- STEP: what -->"));
    assert_eq!(turn(&a, "c1", "first").await.1, "passed");
    upstream.push(MockReply::text("Why.\n<!-- STEP: why -->"));
    assert_eq!(turn(&b, "c1", "second").await.1, "passed");
    // Either replica knows both turns.
    for replica in [&a, &b] {
        let session = get_json(replica, "/sessions/c1").await;
        assert_eq!(session["turns"], 2, "{session}");
        assert_eq!(steps(&session), ["what", "why"]);
    }
    assert!(redis
        .command(&["EXISTS", "enforce:default:session:c1"])
        .is_some_and(|r| r == ":1"));

    // Redis dies: the replica answers on local state, says so, and audits the turn.
    redis.kill();
    upstream.push(MockReply::text("How.\n<!-- STEP: constraints -->"));
    let started = Instant::now();
    let (code, status, _) = turn(&a, "c1", "third").await;
    assert_eq!((code, status.as_str()), (200, "passed"));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "a dead Redis costs at most a few timeouts: {:?}",
        started.elapsed()
    );
    assert_eq!(health_state(&a).await, "degraded");
    let text = metrics(&a).await;
    assert!(text.contains("enforce_state_degraded 1"), "{text}");
    assert!(
        text.contains("enforce_state_fallbacks_total{op=\"save_session\"} 1"),
        "{text}"
    );
    let audit = std::fs::read_to_string(dir.join("a-audit.jsonl")).unwrap();
    assert_eq!(audit.lines().count(), 2, "both of a's turns are audited");
    assert_eq!(
        steps(&get_json(&a, "/sessions/c1").await),
        ["what", "why", "constraints"]
    );

    // Redis is back (empty): a writes the chat it changed meanwhile, b reads it from there.
    redis.restart();
    for replica in [&a, &b] {
        wait_until_shared(replica).await;
    }
    assert!(metrics(&a).await.contains("enforce_state_degraded 0"));
    let session = get_json(&b, "/sessions/c1").await;
    assert_eq!(session["turns"], 3, "{session}");
    assert_eq!(steps(&session), ["what", "why", "constraints"]);
    drop((a, b));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_breaker_opened_on_one_replica_is_open_on_the_other_and_probed_once() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(MockScript::new().reply(MockReply::text("Fine.")))
        .await
        .unwrap();
    let dir = temp_dir("replicas-breaker");
    let (calls, down, slow) = (dir.join("calls"), dir.join("down"), dir.join("slow"));
    // Counts its calls; dies by a signal (no verdict) while `down` exists; takes 0.8 s while
    // `slow` exists.
    let script = format!(
        "echo x >> {}; if [ -e {} ]; then kill -9 $$; fi; if [ -e {} ]; then sleep 0.8; fi; exit 0",
        calls.display(),
        down.display(),
        slow.display()
    );
    let body = format!(
        "validators:\n  checker:\n    type: external\n    command: [sh, -c, {script:?}]\n    timeout_ms: 5000\n    failure_threshold: 1\n    cooldown_ms: 1500\n    fail_mode: closed\nprofiles:\n  checked:\n    validators: [checker]\n{}",
        openai_model(&upstream.url(), "checked")
    );
    let a = start(&replica_config(&dir, "a", &body, &redis.url(), ""));
    let b = start(&replica_config(&dir, "b", &body, &redis.url(), ""));
    let count = || {
        std::fs::read_to_string(&calls)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };

    std::fs::write(&down, "").unwrap();
    assert_eq!(turn(&a, "k1", "q").await.1, "unavailable");
    assert_eq!(count(), 1);
    // The checker is fine again, but b never calls it: the breaker is open on both.
    std::fs::remove_file(&down).unwrap();
    assert_eq!(turn(&b, "k2", "q").await.1, "unavailable");
    assert_eq!(count(), 1, "b called the checker behind an open breaker");
    assert!(redis
        .command(&["EXISTS", "enforce:default:breaker:checker"])
        .is_some_and(|r| r == ":1"));

    // After the cooldown both replicas want to call at once: exactly one probe.
    tokio::time::sleep(Duration::from_millis(1600)).await;
    std::fs::write(&slow, "").unwrap();
    let (on_a, on_b) = tokio::join!(turn(&a, "k3", "q"), turn(&b, "k4", "q"));
    let mut statuses = [on_a.1, on_b.1];
    statuses.sort();
    assert_eq!(statuses, ["passed", "unavailable"]);
    assert_eq!(count(), 2, "one probe across both replicas");
    // The probe closed it for both.
    std::fs::remove_file(&slow).unwrap();
    assert_eq!(turn(&a, "k5", "q").await.1, "passed");
    assert_eq!(turn(&b, "k6", "q").await.1, "passed");
    assert_eq!(count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_global_concurrency_limit_counts_both_replicas() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    upstream.push(MockReply::text("Slow.\n<!-- STEP: a -->").delayed(Duration::from_millis(1500)));
    upstream.push(MockReply::text("Quick.\n<!-- STEP: b -->"));
    let dir = temp_dir("replicas-limit");
    let model = openai_model(&upstream.url(), "chat");
    let state = "    concurrency: global\n  max_concurrent: 1\n";
    let a = start(&replica_config(&dir, "a", &model, &redis.url(), state));
    let b = start(&replica_config(&dir, "b", &model, &redis.url(), state));
    let slow = turn(&a, "g1", "slow");
    let busy = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        turn(&b, "g2", "quick").await
    };
    let ((slow_code, _, _), (busy_code, _, busy_body)) = tokio::join!(slow, busy);
    assert_eq!(slow_code, 200);
    assert_eq!(busy_code, 429, "{busy_body}");
    assert_eq!(busy_body["error"]["code"], "too_many_requests");
    // The slot was given back.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let (code, _, _) = turn(&b, "g2", "quick").await;
        if code == 200 {
            break;
        }
        assert!(Instant::now() < deadline, "the slot was never given back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claude_session_is_resumed_only_on_its_replica_or_restarted_when_that_replica_is_gone() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let fake =
        FakeClaude::new(json!([{"kind": "success", "result": "Done.\n<!-- STEP: what -->"}]))
            .expect("fake-claude");
    let dir = temp_dir("replicas-claude");
    let body = format!(
        "models:\n  - id: m\n    profile: chat\n    runner:\n      type: claude\n      binary: {}\n",
        fake.binary().display()
    );
    let a = start_with_env(
        &replica_config(&dir, "a", &body, &redis.url(), ""),
        fake.env(),
    );
    let b = start_with_env(
        &replica_config(&dir, "b", &body, &redis.url(), ""),
        fake.env(),
    );
    assert_eq!(turn(&a, "s1", "first").await.1, "passed");
    assert_eq!(fake.calls()[0].resume_id(), None);

    // The load balancer sends the chat to b while a (which holds the session's files) is up:
    // a clear error, and no model call.
    let (code, _, error) = turn(&b, "s1", "second").await;
    assert_eq!(code, 409, "{error}");
    assert_eq!(error["error"]["code"], "session_on_other_replica");
    let message = error["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("`a`") && message.contains("X-OpenWebUI-Chat-Id"),
        "{message}"
    );
    assert_eq!(fake.calls().len(), 1);

    // On its own replica the session is resumed.
    assert_eq!(turn(&a, "s1", "second").await.1, "passed");
    let resumed = fake.calls()[1].resume_id().map(str::to_string);
    assert_eq!(resumed.as_deref(), Some("fake-session-1"));

    // a shuts down: b starts a fresh session with the conversation and the step history.
    assert!(a.terminate().success());
    assert_eq!(turn(&b, "s1", "third").await.1, "passed");
    let calls = fake.calls();
    assert_eq!(calls.len(), 3);
    assert_eq!(
        calls[2].resume_id(),
        None,
        "never --resume on the wrong replica"
    );
    let session = get_json(&b, "/sessions/s1").await;
    assert_eq!(session["runner_replica"], "b", "{session}");
    assert_eq!(session["turns"], 3);
    drop(redis);
}

#[test]
fn a_bad_redis_url_is_a_clear_configuration_error() {
    let dir = temp_dir("replicas-bad-url");
    let config = replica_config(
        &dir,
        "a",
        &openai_model("http://127.0.0.1:9/v1", "chat"),
        "http://127.0.0.1:6379",
        "",
    );
    let out = Command::new(crate::BIN)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env_remove("ENFORCE_CONFIG")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = crate::text(&out.stderr);
    assert!(
        stderr.contains("server.state.redis") && stderr.contains("not a redis:// URL"),
        "{stderr}"
    );
}

/// Posts one Responses request; status code and body.
async fn respond(proxy: &Proxy, body: Value) -> (u16, Value) {
    let response = client()
        .post(proxy.url("/responses"))
        .json(&body)
        .send()
        .await
        .unwrap();
    (
        response.status().as_u16(),
        response.json().await.unwrap_or(Value::Null),
    )
}

/// Stored Responses answers in the shared Redis: written by one replica (under
/// `enforce:<ns>:response:<id>`), read back and continued (`previous_response_id`) on the
/// other; `store: false` keeps nothing, and an unknown id is OpenAI's 404 on either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_responses_are_shared_by_the_replicas_through_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    let dir = temp_dir("replicas-responses");
    let model = openai_model(&upstream.url(), "chat");
    let a = start(&replica_config(&dir, "a", &model, &redis.url(), ""));
    let b = start(&replica_config(&dir, "b", &model, &redis.url(), ""));

    upstream.push(MockReply::text("Paris.\n<!-- STEP: what -->"));
    let (code, first) = respond(&a, json!({"model": "m", "input": "Capital of France?"})).await;
    assert_eq!(code, 200, "{first}");
    let id = first["id"].as_str().unwrap().to_string();
    assert!(
        redis
            .command(&["EXISTS", &format!("enforce:default:response:{id}")])
            .is_some_and(|r| r == ":1"),
        "the response is in Redis"
    );
    // The other replica reads it back as it was sent...
    let read = get_json(&b, &format!("/responses/{id}")).await;
    assert_eq!(read["id"], id.as_str());
    assert_eq!(read["output"], first["output"]);
    // ... and continues its conversation: the upstream gets the stored turns first.
    upstream.push(MockReply::text("About 2.1 million.\n<!-- STEP: why -->"));
    let (code, second) = respond(
        &b,
        json!({"model": "m", "input": "How many people live there?", "previous_response_id": id}),
    )
    .await;
    assert_eq!(code, 200, "{second}");
    let asked = upstream.chat_requests().last().unwrap().body.clone();
    let contents: Vec<&str> = asked["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] != "system")
        .filter_map(|m| m["content"].as_str())
        .collect();
    assert_eq!(
        contents,
        [
            "Capital of France?",
            "Paris.\n<!-- STEP: what -->",
            "How many people live there?"
        ]
    );

    // `store: false`: nothing kept, on either replica.
    upstream.push(MockReply::text("Berlin.\n<!-- STEP: what -->"));
    let (code, unstored) = respond(
        &a,
        json!({"model": "m", "input": "Capital of Germany?", "store": false}),
    )
    .await;
    assert_eq!(code, 200);
    let unstored = unstored["id"].as_str().unwrap().to_string();
    for replica in [&a, &b] {
        let response = client()
            .get(replica.url(&format!("/responses/{unstored}")))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 404);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["code"], "response_not_found");
    }
    let (code, error) = respond(
        &b,
        json!({"model": "m", "input": "And?", "previous_response_id": unstored}),
    )
    .await;
    assert_eq!(code, 404);
    assert_eq!(error["error"]["param"], "previous_response_id");
    drop(redis);
}

/// A profile `p` (the step marker and a length limit of `max` characters) and model `m` over
/// `upstream` with the answer cache in Redis.
fn cached_model(upstream: &str, max: u32) -> String {
    format!(
        "validators:\n  short:\n    type: length\n    unit: chars\n    max: {max}\nprofiles:\n  p:\n    validators: [step_marker, short]\n{}    cache:\n      ttl_secs: 60\n      store: redis\n",
        openai_model(upstream, "p")
    )
}

/// One turn of `question`; `X-Enforce-Cache` and the answer.
async fn cache_turn(proxy: &Proxy, question: &str) -> (String, Value) {
    let response = client()
        .post(proxy.url("/chat/completions"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": question}]}))
        .send()
        .await
        .unwrap();
    let cache = response
        .headers()
        .get("x-enforce-cache")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    (cache, response.json().await.unwrap_or(Value::Null))
}

/// The last audit record of replica `replica`, once its writer has written one.
async fn last_audit_record(dir: &Path, replica: &str) -> Value {
    let path = dir.join(format!("{replica}-audit.jsonl"));
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        if let Some(line) = text.lines().last() {
            return serde_json::from_str(line).unwrap();
        }
        assert!(
            Instant::now() < deadline,
            "no audit record in {}",
            path.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_cached_in_redis_serves_every_replica_until_the_contract_changes() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text("What.\n<!-- STEP: what -->"))
            .then(enforce_testkit::Then::RepeatLast),
    )
    .await
    .unwrap();
    let dir = temp_dir("replicas-cache");
    let same = cached_model(&upstream.url(), 500);
    let a = start(&replica_config(&dir, "a", &same, &redis.url(), ""));
    let b = start(&replica_config(&dir, "b", &same, &redis.url(), ""));
    let (cache, answer) = cache_turn(&a, "first").await;
    assert_eq!(
        (cache.as_str(), &answer["enforcement"]["status"]),
        ("miss", &json!("passed"))
    );
    let (cache, again) = cache_turn(&b, "first").await;
    assert_eq!(cache, "hit", "the other replica reads it from Redis");
    assert_eq!(
        again["choices"][0]["message"],
        answer["choices"][0]["message"]
    );
    assert_eq!(upstream.chat_requests().len(), 1, "one upstream call");
    let hit = last_audit_record(&dir, "b").await;
    assert_eq!(hit["cache"]["status"], "hit", "{hit}");
    assert_eq!(hit["attempts"], json!([]), "no model was asked");
    assert!(hit["cache"]["tokens_saved"].as_u64() > Some(0), "{hit}");
    assert!(metrics(&b)
        .await
        .contains(r#"enforce_cache_lookups_total{model="m",result="hit"} 1"#));

    // Another option of a validator is another contract: its answers are not replayed.
    let changed = cached_model(&upstream.url(), 400);
    let c = start(&replica_config(&dir, "c", &changed, &redis.url(), ""));
    assert_eq!(cache_turn(&c, "first").await.0, "miss");
    assert_eq!(upstream.chat_requests().len(), 2);
    assert_eq!(cache_turn(&c, "first").await.0, "hit");
    assert_eq!(
        cache_turn(&a, "first").await.0,
        "hit",
        "the first contract's stays"
    );
    assert_eq!(upstream.chat_requests().len(), 2);
}

/// `reask: auto` statistics on two replicas: each adds its re-asks to the shared counters,
/// which start from the file once (not once per replica), and the replica that stops last
/// writes the sum of both to its file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_add_their_reask_statistics_up() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
    // Never the OK the profile wants: every request re-asks once, by feedback.
    upstream.push(MockReply::text("No."));
    let dir = temp_dir("replicas-stats");
    let seed = r#"{"version": 1, "rows": [{"model": "mock-model", "profile": "auto_p",
        "code": "MISSING_OK", "strategy": "feedback", "attempts": 2, "fixed": 1, "valid": 1}]}"#;
    let body = format!(
        "{}validators:\n  needs_ok:\n    type: pattern\n    required:\n      - regex: 'OK$'\n        code: MISSING_OK\n        message: The answer must end with OK.\n        severity: error\n\
         profiles:\n  auto_p:\n    validators: [needs_ok]\n    max_retries: 1\n    reask: auto\n    reask_auto: {{stats: stats.json, explore: false, min_attempts: 1}}\n",
        openai_model(&upstream.url(), "auto_p")
    );
    let replica = |name: &str| {
        let own = dir.join(name);
        std::fs::create_dir_all(&own).unwrap();
        std::fs::write(own.join("stats.json"), seed).unwrap();
        (
            start(&replica_config(&own, name, &body, &redis.url(), "")),
            own,
        )
    };
    let ((a, _), (b, b_dir)) = (replica("a"), replica("b"));
    for (proxy, requests) in [(&a, 2), (&b, 3)] {
        for i in 0..requests {
            turn(proxy, &format!("s{i}"), "Why?").await;
        }
    }
    assert!(a.terminate().success());
    assert!(b.terminate().success());
    let written: Value =
        serde_json::from_str(&std::fs::read_to_string(b_dir.join("stats.json")).unwrap()).unwrap();
    let rows = written["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 1, "{written}");
    // The file's 2 once, and each replica's re-asks: 2 on a, 3 on b.
    assert_eq!(rows[0]["attempts"], 2 + 2 + 3, "{written}");
    assert_eq!(rows[0]["valid"], 1, "{written}");
}
