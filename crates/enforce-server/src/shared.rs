//! State shared by the replicas of one deployment: the [`SharedState`] trait (implemented for
//! Redis by [`RedisState`](crate::RedisState)) and [`ReplicaState`], which puts it in front of
//! this replica's local state.
//!
//! Local state (memory, `session_dir`, the local semaphore, each breaker's own state) is always
//! kept: it is the only state without a shared store, and the fallback with one. When the store
//! fails or is slow, every operation goes on with local state, logs a warning naming the
//! request's chat, counts `enforce_state_fallbacks_total{op}` and sets `enforce_state_degraded`
//! and `/healthz` `state: degraded`. Sessions written meanwhile are remembered and written to the
//! store when it answers again (the monitor, [`ReplicaState::monitor`]); breakers write their
//! open state at their next call.

use crate::metrics::{Metrics, STATE_DEGRADED, STATE_FALLBACKS};
use crate::session_status::SessionStatus;
use enforce_core::async_trait;
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// A failed operation of a [`SharedState`] store: unreachable, timed out, or an answer that
/// could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared state: {0}")]
pub struct StateError(pub String);

/// Storage of the state replicas share. Every method is one short round trip; callers fall
/// back to local state on an error.
#[async_trait]
pub trait SharedState: Send + Sync {
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), StateError>;
    /// The chat's session, if the store has it.
    async fn load_session(&self, chat_id: &str) -> Result<Option<SessionStatus>, StateError>;
    /// Stores the chat's session (replacing the stored one) and renews its expiry.
    async fn save_session(&self, status: &SessionStatus) -> Result<(), StateError>;
    /// Takes one of `limit` global concurrency slots for `ttl` (released by
    /// [`release_slot`](Self::release_slot), or expired when the replica died): `false` when
    /// all are taken.
    async fn try_slot(&self, slot: &str, limit: usize, ttl: Duration) -> Result<bool, StateError>;
    /// Gives a slot back.
    async fn release_slot(&self, slot: &str) -> Result<(), StateError>;
    /// Marks `replica` alive for `ttl`.
    async fn heartbeat(&self, replica: &str, ttl: Duration) -> Result<(), StateError>;
    /// Whether `replica` sent a heartbeat within its ttl.
    async fn is_alive(&self, replica: &str) -> Result<bool, StateError>;
    /// Removes `replica`'s heartbeat (it is shutting down).
    async fn leave(&self, replica: &str) -> Result<(), StateError>;
    /// When circuit breaker `name` was opened (Unix ms), if it is open.
    async fn breaker_opened_at(&self, name: &str) -> Result<Option<u64>, StateError>;
    /// Marks breaker `name` open since `at_ms` and ends its probe.
    async fn breaker_open(&self, name: &str, at_ms: u64) -> Result<(), StateError>;
    /// Takes breaker `name`'s one probe for `lease`: `true` when no other replica holds it.
    async fn breaker_try_probe(
        &self,
        name: &str,
        holder: &str,
        lease: Duration,
    ) -> Result<bool, StateError>;
    /// Marks breaker `name` closed and ends its probe.
    async fn breaker_close(&self, name: &str) -> Result<(), StateError>;
    /// Keeps a stored Responses answer (`body`: its JSON) under its `id`, with the sessions'
    /// expiry. The default keeps nothing (a store that shares no responses: each replica
    /// then reads its own copies).
    async fn save_response(&self, id: &str, body: &[u8]) -> Result<(), StateError> {
        let _ = (id, body);
        Ok(())
    }
    /// A stored Responses answer's JSON, if the store has it. The default has none.
    async fn load_response(&self, id: &str) -> Result<Option<Vec<u8>>, StateError> {
        let _ = id;
        Ok(None)
    }
    /// Keeps a cached answer (`answer`: its stored form) under `key` for `ttl`. The default
    /// keeps nothing (a store without a shared cache: every lookup misses).
    async fn cache_put(&self, key: &str, answer: &[u8], ttl: Duration) -> Result<(), StateError> {
        let _ = (key, answer, ttl);
        Ok(())
    }
    /// A cached answer under `key`, unless it expired. The default has none.
    async fn cache_get(&self, key: &str) -> Result<Option<Vec<u8>>, StateError> {
        let _ = key;
        Ok(None)
    }
    /// Adds `counters` (name, amount) to the `reask: auto` statistics `name`, unless they
    /// were started before (by any replica). The default shares no statistics.
    async fn seed_stats(&self, name: &str, counters: &[(String, u64)]) -> Result<(), StateError> {
        let _ = (name, counters);
        Ok(())
    }
    /// Adds `counters` (name, amount) to the `reask: auto` statistics `name`. The default
    /// shares no statistics.
    async fn add_stats(&self, name: &str, counters: &[(String, u64)]) -> Result<(), StateError> {
        let _ = (name, counters);
        Ok(())
    }
    /// Every counter of the `reask: auto` statistics `name`; `None` from a store that shares
    /// none (the default).
    async fn load_stats(&self, name: &str) -> Result<Option<Vec<(String, u64)>>, StateError> {
        let _ = name;
        Ok(None)
    }
}

/// How often the monitor checks the store, renews the heartbeat and, after an outage, resyncs.
const MONITOR_INTERVAL: Duration = Duration::from_secs(1);
/// A replica whose heartbeat is older than this is taken for gone.
const HEARTBEAT_TTL: Duration = Duration::from_secs(10);

/// A [`SharedState`] store in front of this replica's local state: tracks whether the store is
/// reachable, counts fallbacks, remembers what must be written again. Share it in an `Arc`.
pub struct ReplicaState {
    pub(crate) store: Arc<dyn SharedState>,
    replica: String,
    metrics: Arc<Metrics>,
    degraded: AtomicBool,
    /// Chats whose session was written locally while the store failed.
    unsynced: Mutex<HashSet<String>>,
    next_slot: AtomicU64,
}

impl std::fmt::Debug for ReplicaState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaState")
            .field("replica", &self.replica)
            .field("degraded", &self.is_degraded())
            .finish_non_exhaustive()
    }
}

impl ReplicaState {
    /// Puts `store` in front of the local state of replica `replica`.
    pub fn new(store: Arc<dyn SharedState>, replica: String, metrics: Arc<Metrics>) -> Self {
        // Present from the start, so an alert can watch it before the first outage.
        metrics.set_declared_gauge(&STATE_DEGRADED, &[], 0.0);
        ReplicaState {
            store,
            replica,
            metrics,
            degraded: AtomicBool::new(false),
            unsynced: Mutex::new(HashSet::new()),
            next_slot: AtomicU64::new(0),
        }
    }

    /// This replica's name.
    pub fn replica(&self) -> &str {
        &self.replica
    }

    /// Whether the store failed and has not been resynced since.
    pub fn is_degraded(&self) -> bool {
        self.degraded.load(Ordering::Relaxed)
    }

    /// Records a failed operation: a warning (with the chat, when there is one), the metrics.
    fn fell_back(&self, op: &'static str, chat_id: Option<&str>, error: &StateError) {
        tracing::warn!(
            op,
            chat_id = chat_id.unwrap_or(""),
            replica = %self.replica,
            error = %error,
            "shared state unavailable: going on with this replica's local state"
        );
        self.metrics.count(&STATE_FALLBACKS, &[("op", op)], 1);
        if !self.degraded.swap(true, Ordering::Relaxed) {
            self.metrics.set_declared_gauge(&STATE_DEGRADED, &[], 1.0);
        }
    }

    /// Runs `call`; on an error falls back (see [`fell_back`](Self::fell_back)) and gives `None`.
    async fn attempt<T, F>(&self, op: &'static str, chat_id: Option<&str>, call: F) -> Option<T>
    where
        F: std::future::Future<Output = Result<T, StateError>>,
    {
        match call.await {
            Ok(v) => Some(v),
            Err(e) => {
                self.fell_back(op, chat_id, &e);
                None
            }
        }
    }

    /// The chat's session from the store; `None` when the store has none or failed (then the
    /// caller uses its local copy).
    pub(crate) async fn load_session(&self, chat_id: &str) -> Option<Option<SessionStatus>> {
        self.attempt(
            "load_session",
            Some(chat_id),
            self.store.load_session(chat_id),
        )
        .await
    }

    /// Writes the chat's session; when the store fails, remembers the chat for the resync.
    pub(crate) async fn save_session(&self, status: &SessionStatus) {
        let saved = self
            .attempt(
                "save_session",
                Some(&status.chat_id),
                self.store.save_session(status),
            )
            .await;
        if saved.is_none() {
            self.unsynced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(status.chat_id.clone());
        }
    }

    /// Keeps a stored response in the store (a failure is logged and counted; the local copy
    /// stays).
    pub(crate) async fn save_response(&self, id: &str, body: &[u8]) {
        let _ = self
            .attempt("save_response", None, self.store.save_response(id, body))
            .await;
    }

    /// A stored response's JSON; `None` when the store has none or failed.
    pub(crate) async fn load_response(&self, id: &str) -> Option<Option<Vec<u8>>> {
        self.attempt("load_response", None, self.store.load_response(id))
            .await
    }

    /// Keeps a cached answer in the store (a failure is logged and counted: the answer is
    /// just not cached).
    pub(crate) async fn cache_put(&self, key: &str, answer: &[u8], ttl: Duration) {
        let _ = self
            .attempt("cache_put", None, self.store.cache_put(key, answer, ttl))
            .await;
    }

    /// A cached answer from the store; `None` when it has none or failed (a miss).
    pub(crate) async fn cache_get(&self, key: &str) -> Option<Vec<u8>> {
        self.attempt("cache_get", None, self.store.cache_get(key))
            .await
            .flatten()
    }

    /// Takes a global concurrency slot: `Some(Some(slot))` taken, `Some(None)` all taken,
    /// `None` the store failed (the local limit alone applies).
    pub(crate) async fn try_slot(
        self: &Arc<Self>,
        limit: usize,
        ttl: Duration,
        chat_id: Option<&str>,
    ) -> Option<Option<GlobalSlot>> {
        let n = self.next_slot.fetch_add(1, Ordering::Relaxed);
        let slot = format!("{}:{n}", self.replica);
        let taken = self
            .attempt("try_slot", chat_id, self.store.try_slot(&slot, limit, ttl))
            .await?;
        Some(taken.then(|| GlobalSlot {
            state: self.clone(),
            slot,
        }))
    }

    /// Whether `replica` is alive: `None` when the store failed.
    pub(crate) async fn is_alive(&self, replica: &str, chat_id: &str) -> Option<bool> {
        self.attempt("is_alive", Some(chat_id), self.store.is_alive(replica))
            .await
    }

    /// When breaker `name` was opened, for the breakers' link to the store.
    pub async fn breaker_opened_at(&self, name: &str) -> Result<Option<u64>, StateError> {
        self.observed("breaker", self.store.breaker_opened_at(name))
            .await
    }

    /// Marks breaker `name` open since `at_ms`.
    pub async fn breaker_open(&self, name: &str, at_ms: u64) -> Result<(), StateError> {
        self.observed("breaker", self.store.breaker_open(name, at_ms))
            .await
    }

    /// Takes breaker `name`'s probe for this replica.
    pub async fn breaker_try_probe(&self, name: &str, lease: Duration) -> Result<bool, StateError> {
        self.observed(
            "breaker",
            self.store.breaker_try_probe(name, &self.replica, lease),
        )
        .await
    }

    /// Marks breaker `name` closed.
    pub async fn breaker_close(&self, name: &str) -> Result<(), StateError> {
        self.observed("breaker", self.store.breaker_close(name))
            .await
    }

    /// Like [`attempt`](Self::attempt) but hands the error on (the breaker decides locally).
    pub(crate) async fn observed<T>(
        &self,
        op: &'static str,
        call: impl std::future::Future<Output = Result<T, StateError>>,
    ) -> Result<T, StateError> {
        let result = call.await;
        if let Err(e) = &result {
            self.fell_back(op, None, e);
        }
        result
    }

    /// Runs until the process ends: every second renews this replica's heartbeat, and after an
    /// outage, once the store answers, writes the sessions changed meanwhile and clears the
    /// degraded state. `sessions` gives the local copy of a chat's session.
    pub(crate) async fn monitor(
        self: Arc<Self>,
        local: impl Fn(&str) -> Option<SessionStatus> + Send + Sync,
    ) {
        let mut tick = tokio::time::interval(MONITOR_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if let Err(e) = self.store.heartbeat(&self.replica, HEARTBEAT_TTL).await {
                if !self.is_degraded() {
                    self.fell_back("heartbeat", None, &e);
                }
                continue;
            }
            if self.is_degraded() {
                self.resync(&local).await;
            }
        }
    }

    /// Writes every session changed during the outage, unless the store holds a longer one
    /// (more turns, or as many and updated later: a replica that continued a chat from an
    /// older copy must not replace turns another replica added); clears the degraded state
    /// when all are written.
    async fn resync(&self, local: &(impl Fn(&str) -> Option<SessionStatus> + Send + Sync)) {
        let chats: Vec<String> = self
            .unsynced
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain()
            .collect();
        let mut written = 0usize;
        let mut failed = Vec::new();
        for chat in chats {
            let Some(mine) = local(&chat) else { continue };
            let result = async {
                let theirs = self.store.load_session(&chat).await?;
                if theirs.is_none_or(|t| (t.turns, t.updated_at) <= (mine.turns, mine.updated_at)) {
                    self.store.save_session(&mine).await?;
                    return Ok::<bool, StateError>(true);
                }
                Ok(false)
            }
            .await;
            match result {
                Ok(w) => written += usize::from(w),
                Err(_) => failed.push(chat),
            }
        }
        if failed.is_empty() {
            self.degraded.store(false, Ordering::Relaxed);
            self.metrics.set_declared_gauge(&STATE_DEGRADED, &[], 0.0);
            tracing::info!(
                replica = %self.replica,
                sessions_written = written,
                "shared state reachable again: local changes written"
            );
        } else {
            self.unsynced
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend(failed);
        }
    }

    /// Removes this replica's heartbeat, so others take its chats over at once.
    pub(crate) async fn leave(&self) {
        if let Err(e) = self.store.leave(&self.replica).await {
            tracing::debug!(error = %e, "could not remove the replica heartbeat");
        }
    }
}

/// A taken global concurrency slot, given back when dropped (in the background: the release
/// is one round trip; a slot that is never given back expires with its ttl).
pub(crate) struct GlobalSlot {
    state: Arc<ReplicaState>,
    slot: String,
}

impl Drop for GlobalSlot {
    fn drop(&mut self) {
        let state = self.state.clone();
        let slot = std::mem::take(&mut self.slot);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = state.store.release_slot(&slot).await {
                    state.fell_back("release_slot", None, &e);
                }
            });
        }
    }
}
