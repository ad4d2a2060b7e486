//! Replicas sharing state through the `SharedState` trait, with an in-memory store that can be
//! switched off (the Redis implementation is tested end to end in the root package's
//! `tests/it/replicas.rs`): sessions move between replicas, a failing store degrades and
//! resyncs, and a runner session is continued only on the replica that holds it.

use crate::common::{marker_enforcer, step_mark, user_body, Harness, Sessions};
use enforce_core::{async_trait, Runner, ScriptedRunner};
use enforce_server::{
    Model, Server, ServerConfig, SessionStatus, SharedState, StateConfig, StateError,
};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GOOD: &str = "Fine.\n<!-- STEP: what -->";

/// Sessions, heartbeats and cached answers in memory; `down` fails every operation.
#[derive(Default)]
pub(crate) struct MemoryState {
    sessions: Mutex<HashMap<String, SessionStatus>>,
    alive: Mutex<HashMap<String, bool>>,
    /// Cached answers and when they expire.
    answers: Mutex<HashMap<String, (Vec<u8>, Instant)>>,
    down: AtomicBool,
}

impl MemoryState {
    fn up(&self) -> Result<(), StateError> {
        if self.down.load(Ordering::SeqCst) {
            Err(StateError("switched off".into()))
        } else {
            Ok(())
        }
    }
}

#[async_trait]
impl SharedState for MemoryState {
    async fn ping(&self) -> Result<(), StateError> {
        self.up()
    }
    async fn load_session(&self, chat_id: &str) -> Result<Option<SessionStatus>, StateError> {
        self.up()?;
        Ok(self.sessions.lock().unwrap().get(chat_id).cloned())
    }
    async fn save_session(&self, status: &SessionStatus) -> Result<(), StateError> {
        self.up()?;
        let mut sessions = self.sessions.lock().unwrap();
        sessions.insert(status.chat_id.clone(), status.clone());
        Ok(())
    }
    async fn try_slot(&self, _: &str, _: usize, _: Duration) -> Result<bool, StateError> {
        self.up().map(|()| true)
    }
    async fn release_slot(&self, _: &str) -> Result<(), StateError> {
        self.up()
    }
    async fn heartbeat(&self, replica: &str, _: Duration) -> Result<(), StateError> {
        self.up()?;
        self.alive.lock().unwrap().insert(replica.into(), true);
        Ok(())
    }
    async fn is_alive(&self, replica: &str) -> Result<bool, StateError> {
        self.up()?;
        Ok(self.alive.lock().unwrap().get(replica) == Some(&true))
    }
    async fn leave(&self, replica: &str) -> Result<(), StateError> {
        self.up()?;
        self.alive.lock().unwrap().insert(replica.into(), false);
        Ok(())
    }
    async fn breaker_opened_at(&self, _: &str) -> Result<Option<u64>, StateError> {
        self.up().map(|()| None)
    }
    async fn breaker_open(&self, _: &str, _: u64) -> Result<(), StateError> {
        self.up()
    }
    async fn breaker_try_probe(&self, _: &str, _: &str, _: Duration) -> Result<bool, StateError> {
        self.up().map(|()| true)
    }
    async fn breaker_close(&self, _: &str) -> Result<(), StateError> {
        self.up()
    }
    async fn cache_put(&self, key: &str, answer: &[u8], ttl: Duration) -> Result<(), StateError> {
        self.up()?;
        let expires = Instant::now() + ttl;
        let mut answers = self.answers.lock().unwrap();
        answers.insert(key.into(), (answer.to_vec(), expires));
        Ok(())
    }
    async fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        self.up()?;
        let answers = self.answers.lock().unwrap();
        let live = answers
            .get(key)
            .filter(|(_, expires)| *expires > Instant::now());
        Ok(live.map(|(answer, _)| answer.clone()))
    }
}

async fn replica(name: &str, store: &Arc<MemoryState>, runner: Arc<dyn Runner>) -> Harness {
    let mut state = StateConfig::redis("redis://unused");
    state.replica = name.into();
    let config = ServerConfig {
        state: Some(state),
        ..ServerConfig::default()
    };
    let server = Server::builder(config)
        .model(Model::new("m", runner, Arc::new(marker_enforcer(false))))
        .step_extractor(step_mark)
        .shared_state(store.clone())
        .build()
        .unwrap();
    Harness::start(server).await
}

async fn turn(h: &Harness, chat: &str) -> (u16, Value) {
    let response = h
        .client
        .post(h.url("/v1/chat/completions"))
        .header("X-OpenWebUI-Chat-Id", chat)
        .json(&user_body(false))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

async fn health(h: &Harness) -> Value {
    let response = h.client.get(h.url("/healthz")).send().await.unwrap();
    assert_eq!(response.status(), 200, "a degraded replica still serves");
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_store_degrades_the_replica_and_it_resyncs_when_back() {
    let store = Arc::new(MemoryState::default());
    // A runner without sessions (an OpenAI-compatible upstream): no replica holds the chat.
    let runner = Arc::new(ScriptedRunner::texts([GOOD; 8]));
    let a = replica("a", &store, runner.clone()).await;
    let b = replica("b", &store, runner).await;
    assert_eq!(health(&a).await["state"], "shared");
    assert_eq!(turn(&a, "x").await.0, 200);
    assert_eq!(turn(&b, "x").await.0, 200);
    assert_eq!(store.sessions.lock().unwrap()["x"].turns, 2);
    // a reads the chat (and keeps that copy) before the outage.
    let session: Value = a
        .client
        .get(a.url("/v1/sessions/x"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(session["turns"], 2);

    store.down.store(true, Ordering::SeqCst);
    assert_eq!(turn(&a, "x").await.0, 200, "served on local state");
    assert_eq!(health(&a).await["state"], "degraded");
    let metrics = a.server.metrics();
    assert_eq!(metrics.value("enforce_state_degraded", &[]), 1.0);
    assert_eq!(
        metrics.value("enforce_state_fallbacks_total", &[("op", "save_session")]),
        1.0
    );
    assert_eq!(
        store.sessions.lock().unwrap()["x"].turns,
        2,
        "store was down"
    );

    store.down.store(false, Ordering::SeqCst);
    for _ in 0..50 {
        if health(&a).await["state"] == "shared" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(health(&a).await["state"], "shared");
    assert_eq!(metrics.value("enforce_state_degraded", &[]), 0.0);
    assert_eq!(
        store.sessions.lock().unwrap()["x"].turns,
        3,
        "the turn taken during the outage was written back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runner_session_is_continued_only_on_its_replica() {
    let store = Arc::new(MemoryState::default());
    let runner = Arc::new(Sessions::new(vec![GOOD]));
    let a = replica("a", &store, runner.clone()).await;
    let b = replica("b", &store, runner.clone()).await;
    // The monitors' first heartbeats.
    for _ in 0..50 {
        if store.alive.lock().unwrap().len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(turn(&a, "y").await.0, 200);
    let held = store.sessions.lock().unwrap()["y"].clone();
    assert_eq!(held.runner_replica.as_deref(), Some("a"));

    let (code, error) = turn(&b, "y").await;
    assert_eq!(code, 409, "{error}");
    assert_eq!(error["error"]["code"], "session_on_other_replica");
    assert_eq!(runner.calls.lock().unwrap().len(), 1, "no model call");

    // Cannot tell whether a is alive: 503, try again.
    store.down.store(true, Ordering::SeqCst);
    let (code, error) = turn(&b, "y").await;
    assert_eq!(code, 503, "{error}");
    assert_eq!(error["error"]["code"], "session_on_other_replica");
    store.down.store(false, Ordering::SeqCst);

    // a is gone: b starts a fresh runner session and holds the chat from then on.
    store.alive.lock().unwrap().insert("a".into(), false);
    assert_eq!(turn(&b, "y").await.0, 200);
    let calls = runner.calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 2);
    assert_eq!(
        calls[1].session_id, None,
        "never the other replica's session"
    );
    let now = store.sessions.lock().unwrap()["y"].clone();
    assert_eq!(now.runner_replica.as_deref(), Some("b"));
    assert_eq!(now.steps.len(), 2, "the step history went along");
}
