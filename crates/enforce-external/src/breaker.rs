//! A circuit breaker for validators that call something outside the process.
//!
//! closed → (N consecutive failures) → open → (cooldown) → half-open → (probe succeeds) →
//! closed, or (probe fails) → open again. While open, no call is made. Every state change is
//! logged with `tracing` (target `enforce_external::breaker`).
//!
//! Replicas of a service can share their breakers through a [`SharedBreakers`] store (the
//! proxy's Redis state implements it; this crate knows no store): a breaker that opens in one
//! process is open in every process at its next call, exactly one process probes after the
//! cooldown, and its probe closes the breaker everywhere. When the store fails, each breaker goes
//! on with its local state and writes its local open state at its next call once the store
//! answers again.
//!
//! ```
//! use enforce_external::breaker::{BreakerState, CircuitBreaker};
//! use std::time::Duration;
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let breaker = CircuitBreaker::new("lint", 2, Duration::from_millis(20));
//! for _ in 0..2 {
//!     breaker.acquire().await.unwrap().failure("exit 127").await;
//! }
//! assert_eq!(breaker.state(), BreakerState::Open);
//! assert!(breaker.acquire().await.is_err());           // open: no call is made
//! tokio::time::sleep(Duration::from_millis(30)).await;
//! let probe = breaker.acquire().await.unwrap();        // cooldown over: one probe
//! assert_eq!(breaker.state(), BreakerState::HalfOpen);
//! assert!(breaker.acquire().await.is_err());           // only one probe at a time
//! probe.success().await;
//! assert_eq!(breaker.state(), BreakerState::Closed);
//! # }
//! ```

use enforce_core::async_trait;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Every live breaker's id, name and state, so a server can export them as metrics without
/// knowing which validators own breakers.
static LIVE: Mutex<Vec<(u64, String, BreakerState)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);
/// The store every breaker of this process shares its state through, once installed.
static SHARED: RwLock<Option<Arc<dyn SharedBreakers>>> = RwLock::new(None);

fn live() -> MutexGuard<'static, Vec<(u64, String, BreakerState)>> {
    LIVE.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The name and current state of every circuit breaker alive in this process, in creation
/// order (a validator shared by several profiles appears once).
pub fn states() -> Vec<(String, BreakerState)> {
    live()
        .iter()
        .map(|(_, name, state)| (name.clone(), *state))
        .collect()
}

/// Makes every breaker of this process (those built before and after) share its state through
/// `store`, unless the breaker was given its own with [`CircuitBreaker::with_shared`].
pub fn share_state(store: Arc<dyn SharedBreakers>) {
    *SHARED.write().unwrap_or_else(PoisonError::into_inner) = Some(store);
}

/// A failed operation of a [`SharedBreakers`] store (unreachable, timed out).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared breaker state: {0}")]
pub struct SharedError(pub String);

/// Breaker state shared by several processes. Names are the breakers' names (the validator
/// names); times are milliseconds since the Unix epoch, so processes agree on them.
#[async_trait]
pub trait SharedBreakers: Send + Sync {
    /// When breaker `name` was opened, if it is open.
    async fn opened_at(&self, name: &str) -> Result<Option<u64>, SharedError>;
    /// Marks breaker `name` open since `at_ms` and ends any probe.
    async fn open(&self, name: &str, at_ms: u64) -> Result<(), SharedError>;
    /// Takes the one probe of breaker `name` for at most `lease`: `true` when this process won
    /// it (no other process holds an unexpired one).
    async fn try_probe(&self, name: &str, lease: Duration) -> Result<bool, SharedError>;
    /// Marks breaker `name` closed (its probe succeeded) and ends the probe.
    async fn close(&self, name: &str) -> Result<(), SharedError>;
}

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The breaker's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerState {
    /// Calls go through.
    Closed,
    /// Calls are refused until the cooldown ends.
    Open,
    /// One probe call is allowed; its result decides.
    HalfOpen,
}

impl fmt::Display for BreakerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            BreakerState::Closed => "closed",
            BreakerState::Open => "open",
            BreakerState::HalfOpen => "half-open",
        })
    }
}

#[derive(Debug)]
struct Inner {
    state: BreakerState,
    consecutive_failures: u32,
    opened_at: Option<Instant>,
    /// The same moment in Unix milliseconds, as the shared store knows it.
    opened_at_ms: u64,
    probe_in_flight: bool,
    /// The open state is in the shared store (false while the store was unreachable: written
    /// at the next call that reaches it).
    published: bool,
}

/// See the [module docs](self).
pub struct CircuitBreaker {
    id: u64,
    name: String,
    threshold: u32,
    cooldown: Duration,
    shared: Option<Arc<dyn SharedBreakers>>,
    inner: Mutex<Inner>,
}

impl fmt::Debug for CircuitBreaker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CircuitBreaker")
            .field("name", &self.name)
            .field("threshold", &self.threshold)
            .field("cooldown", &self.cooldown)
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl Drop for CircuitBreaker {
    fn drop(&mut self) {
        live().retain(|(id, _, _)| *id != self.id);
    }
}

/// Why a call was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("circuit breaker of '{name}' is {state}: {detail}")]
pub struct Refused {
    /// The breaker's name.
    pub name: String,
    /// Its state.
    pub state: BreakerState,
    /// More detail (time left, probe running).
    pub detail: String,
}

/// Permission for one call; report how it went with [`success`](Permit::success) or
/// [`failure`](Permit::failure). Dropping it unreported (a cancelled call) counts as a failure,
/// so a half-open breaker never waits forever for a probe that was abandoned.
#[must_use = "report the call's result with success() or failure()"]
pub struct Permit<'a> {
    breaker: &'a CircuitBreaker,
    reported: bool,
}

impl std::fmt::Debug for Permit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Permit")
            .field("breaker", &self.breaker.name)
            .field("reported", &self.reported)
            .finish()
    }
}

impl Permit<'_> {
    /// The call worked.
    pub async fn success(mut self) {
        self.reported = true;
        let change = self.breaker.record(true, "");
        self.breaker.publish(change).await;
    }

    /// The call failed (no verdict); `reason` is logged.
    pub async fn failure(mut self, reason: &str) {
        self.reported = true;
        let change = self.breaker.record(false, reason);
        self.breaker.publish(change).await;
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.reported {
            let change = self.breaker.record(false, "call abandoned");
            // Cannot wait here: the shared store learns it in the background when a runtime
            // is at hand, else at this breaker's next call (it stays unpublished).
            if let (Change::Opened(at_ms), Some(shared)) = (change, self.breaker.shared()) {
                if let Ok(handle) = tokio::runtime::Handle::try_current() {
                    let name = self.breaker.name.clone();
                    handle.spawn(async move {
                        let _ = shared.open(&name, at_ms).await;
                    });
                }
            }
        }
    }
}

/// What a reported call changed, for the shared store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    None,
    Opened(u64),
    /// A probe succeeded.
    Closed,
}

impl CircuitBreaker {
    /// Consecutive failures that open the breaker.
    pub fn threshold(&self) -> u32 {
        self.threshold
    }

    /// How long the open breaker waits before one probe.
    pub fn cooldown(&self) -> Duration {
        self.cooldown
    }

    /// A closed breaker that opens after `threshold` consecutive failures (at least 1) and
    /// allows a probe after `cooldown`.
    pub fn new(name: impl Into<String>, threshold: u32, cooldown: Duration) -> Self {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        let name = name.into();
        live().push((id, name.clone(), BreakerState::Closed));
        CircuitBreaker {
            id,
            name,
            threshold: threshold.max(1),
            cooldown,
            shared: None,
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive_failures: 0,
                opened_at: None,
                opened_at_ms: 0,
                probe_in_flight: false,
                published: true,
            }),
        }
    }

    /// Shares this breaker's state through `store` instead of the process-wide one
    /// ([`share_state`]).
    pub fn with_shared(mut self, store: Arc<dyn SharedBreakers>) -> Self {
        self.shared = Some(store);
        self
    }

    /// How long one process may hold the probe before another may take it (when the prober
    /// died): the cooldown, at least 30 s.
    fn probe_lease(&self) -> Duration {
        self.cooldown.max(Duration::from_secs(30))
    }

    fn shared(&self) -> Option<Arc<dyn SharedBreakers>> {
        self.shared.clone().or_else(|| {
            SHARED
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock cannot leave Inner inconsistent (plain fields).
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current state.
    pub fn state(&self) -> BreakerState {
        self.lock().state
    }

    fn transition(&self, inner: &mut Inner, to: BreakerState, reason: &str) {
        let from = inner.state;
        if from == to {
            return;
        }
        inner.state = to;
        if let Some(entry) = live().iter_mut().find(|(id, _, _)| *id == self.id) {
            entry.2 = to;
        }
        match to {
            BreakerState::Open => tracing::warn!(
                target: "enforce_external::breaker",
                validator = %self.name, %from, %to, reason,
                failures = inner.consecutive_failures,
                cooldown_ms = u64::try_from(self.cooldown.as_millis()).unwrap_or(u64::MAX),
                "circuit OPEN: {} is skipped until the cooldown ends (answers go out unvalidated or unavailable, as its fail_mode says)",
                self.name
            ),
            BreakerState::HalfOpen => tracing::info!(
                target: "enforce_external::breaker",
                validator = %self.name, %from, %to,
                "circuit HALF-OPEN: probing whether {} is reachable", self.name
            ),
            BreakerState::Closed => tracing::info!(
                target: "enforce_external::breaker",
                validator = %self.name, %from, %to,
                "circuit CLOSED: {} is reachable", self.name
            ),
        }
    }

    /// Asks to make a call. With a shared store, the store's state decides first: open
    /// somewhere means open here, and only the process that wins the probe may call after the
    /// cooldown. A store that does not answer leaves the decision to the local state.
    pub async fn acquire(&self) -> Result<Permit<'_>, Refused> {
        if let Some(shared) = self.shared() {
            match self.acquire_shared(shared.as_ref()).await {
                Ok(Some(decided)) => return decided,
                Ok(None) => {}
                Err(e) => tracing::debug!(
                    target: "enforce_external::breaker",
                    validator = %self.name, error = %e, "shared state unavailable: local breaker decides"
                ),
            }
        }
        self.acquire_local()
    }

    /// The shared store's decision, or `None` to let the local state decide.
    async fn acquire_shared(
        &self,
        shared: &dyn SharedBreakers,
    ) -> Result<Option<Result<Permit<'_>, Refused>>, SharedError> {
        let remote = shared.opened_at(&self.name).await?;
        let (unpublished_open, local_probe) = {
            let inner = self.lock();
            (
                inner.state != BreakerState::Closed && !inner.published,
                inner.probe_in_flight,
            )
        };
        let Some(at_ms) = remote else {
            if unpublished_open {
                // Opened here while the store was away: write it now (resync).
                let at_ms = self.lock().opened_at_ms;
                shared.open(&self.name, at_ms).await?;
                self.lock().published = true;
                return Ok(None);
            }
            // Closed everywhere (another process's probe closed it, or it never opened).
            let mut inner = self.lock();
            if inner.state != BreakerState::Closed && !inner.probe_in_flight {
                inner.consecutive_failures = 0;
                self.transition(
                    &mut inner,
                    BreakerState::Closed,
                    "closed by another replica",
                );
            }
            return Ok(None);
        };
        let since = Duration::from_millis(unix_ms().saturating_sub(at_ms));
        {
            let mut inner = self.lock();
            inner.opened_at_ms = at_ms;
            inner.opened_at = Instant::now().checked_sub(since).or(Some(Instant::now()));
            inner.published = true;
            if inner.state == BreakerState::Closed {
                self.transition(&mut inner, BreakerState::Open, "opened by another replica");
            }
        }
        if since < self.cooldown {
            let left = self.cooldown - since;
            return Ok(Some(Err(self.refused(
                BreakerState::Open,
                format!("no call for another {} ms", left.as_millis()),
            ))));
        }
        if local_probe {
            return Ok(Some(Err(self.refused(
                BreakerState::HalfOpen,
                "a probe call is running".into(),
            ))));
        }
        if !shared.try_probe(&self.name, self.probe_lease()).await? {
            return Ok(Some(Err(self.refused(
                BreakerState::HalfOpen,
                "a probe call is running on another replica".into(),
            ))));
        }
        let mut inner = self.lock();
        if inner.probe_in_flight {
            // A local call took the probe while we asked the store; it stays the only one.
            return Ok(Some(Err(self.refused(
                BreakerState::HalfOpen,
                "a probe call is running".into(),
            ))));
        }
        self.transition(&mut inner, BreakerState::HalfOpen, "cooldown over");
        inner.probe_in_flight = true;
        Ok(Some(Ok(Permit {
            breaker: self,
            reported: false,
        })))
    }

    fn refused(&self, state: BreakerState, detail: String) -> Refused {
        Refused {
            name: self.name.clone(),
            state,
            detail,
        }
    }

    fn acquire_local(&self) -> Result<Permit<'_>, Refused> {
        let mut inner = self.lock();
        match inner.state {
            BreakerState::Closed => {}
            BreakerState::Open => {
                let since = inner.opened_at.map_or(self.cooldown, |t| t.elapsed());
                if since < self.cooldown {
                    let left = self.cooldown - since;
                    return Err(self.refused(
                        BreakerState::Open,
                        format!("no call for another {} ms", left.as_millis()),
                    ));
                }
                self.transition(&mut inner, BreakerState::HalfOpen, "cooldown over");
                inner.probe_in_flight = true;
            }
            BreakerState::HalfOpen => {
                if inner.probe_in_flight {
                    return Err(
                        self.refused(BreakerState::HalfOpen, "a probe call is running".into())
                    );
                }
                inner.probe_in_flight = true;
            }
        }
        Ok(Permit {
            breaker: self,
            reported: false,
        })
    }

    fn record(&self, ok: bool, reason: &str) -> Change {
        let mut inner = self.lock();
        let was_probe = inner.state == BreakerState::HalfOpen;
        if was_probe {
            inner.probe_in_flight = false;
        }
        if ok {
            inner.consecutive_failures = 0;
            self.transition(&mut inner, BreakerState::Closed, "call succeeded");
            // Only a probe closes the breaker for everyone; an ordinary success says nothing
            // about a breaker another process opened meanwhile.
            return if was_probe {
                Change::Closed
            } else {
                Change::None
            };
        }
        inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
        if was_probe || inner.consecutive_failures >= self.threshold {
            inner.opened_at = Some(Instant::now());
            inner.opened_at_ms = unix_ms();
            inner.published = false;
            self.transition(&mut inner, BreakerState::Open, reason);
            Change::Opened(inner.opened_at_ms)
        } else {
            tracing::debug!(
                target: "enforce_external::breaker",
                validator = %self.name, reason,
                failures = inner.consecutive_failures, "external call failed"
            );
            Change::None
        }
    }

    /// Writes a change to the shared store, if there is one; a failure leaves it for the next
    /// call (an open state stays unpublished, a close is taken back by the store's open state).
    async fn publish(&self, change: Change) {
        let Some(shared) = self.shared() else { return };
        let result = match change {
            Change::None => return,
            Change::Opened(at_ms) => shared.open(&self.name, at_ms).await.map(|()| {
                let mut inner = self.lock();
                if inner.opened_at_ms == at_ms {
                    inner.published = true;
                }
            }),
            Change::Closed => shared.close(&self.name).await,
        };
        if let Err(e) = result {
            tracing::debug!(
                target: "enforce_external::breaker",
                validator = %self.name, error = %e, "shared state not written: retried at the next call"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;

    #[tokio::test]
    async fn opens_after_threshold_and_success_resets_the_count() {
        let b = CircuitBreaker::new("x", 3, Duration::from_secs(60));
        b.acquire().await.unwrap().failure("a").await;
        b.acquire().await.unwrap().failure("b").await;
        b.acquire().await.unwrap().success().await;
        b.acquire().await.unwrap().failure("c").await;
        b.acquire().await.unwrap().failure("d").await;
        assert_eq!(b.state(), BreakerState::Closed);
        b.acquire().await.unwrap().failure("e").await;
        assert_eq!(b.state(), BreakerState::Open);
        let refused = b.acquire().await.err().unwrap();
        assert!(refused.to_string().contains("is open"), "{refused}");
    }

    #[tokio::test]
    async fn failed_probe_reopens_and_abandoned_probe_counts_as_failure() {
        let b = CircuitBreaker::new("x", 1, Duration::from_millis(10));
        b.acquire().await.unwrap().failure("down").await;
        tokio::time::sleep(Duration::from_millis(15)).await;
        b.acquire().await.unwrap().failure("still down").await;
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.acquire().await.is_err());
        tokio::time::sleep(Duration::from_millis(15)).await;
        drop(b.acquire().await.unwrap());
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::sleep(Duration::from_millis(15)).await;
        b.acquire().await.unwrap().success().await;
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[tokio::test]
    async fn live_states_follow_transitions_and_drop() {
        let name = "states-probe-unique";
        let find = || {
            super::states()
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s)
        };
        let breaker = CircuitBreaker::new(name, 1, Duration::from_secs(60));
        assert_eq!(find(), Some(BreakerState::Closed));
        breaker.acquire().await.unwrap().failure("down").await;
        assert_eq!(find(), Some(BreakerState::Open));
        drop(breaker);
        assert_eq!(find(), None);
    }

    /// An in-memory store standing in for Redis; `down` makes every operation fail.
    #[derive(Default)]
    struct MemoryStore {
        open: Mutex<HashMap<String, u64>>,
        probe: Mutex<HashMap<String, Instant>>,
        down: AtomicBool,
    }

    impl MemoryStore {
        fn check(&self) -> Result<(), SharedError> {
            if self.down.load(Ordering::Relaxed) {
                Err(SharedError("down".into()))
            } else {
                Ok(())
            }
        }
    }

    #[async_trait]
    impl SharedBreakers for MemoryStore {
        async fn opened_at(&self, name: &str) -> Result<Option<u64>, SharedError> {
            self.check()?;
            Ok(self.open.lock().unwrap().get(name).copied())
        }
        async fn open(&self, name: &str, at_ms: u64) -> Result<(), SharedError> {
            self.check()?;
            self.open.lock().unwrap().insert(name.into(), at_ms);
            self.probe.lock().unwrap().remove(name);
            Ok(())
        }
        async fn try_probe(&self, name: &str, lease: Duration) -> Result<bool, SharedError> {
            self.check()?;
            let mut probes = self.probe.lock().unwrap();
            if probes
                .get(name)
                .is_some_and(|until| *until > Instant::now())
            {
                return Ok(false);
            }
            probes.insert(name.into(), Instant::now() + lease);
            Ok(true)
        }
        async fn close(&self, name: &str) -> Result<(), SharedError> {
            self.check()?;
            self.open.lock().unwrap().remove(name);
            self.probe.lock().unwrap().remove(name);
            Ok(())
        }
    }

    fn replicas(store: &Arc<MemoryStore>, cooldown_ms: u64) -> (CircuitBreaker, CircuitBreaker) {
        let cooldown = Duration::from_millis(cooldown_ms);
        let a = CircuitBreaker::new("shared", 2, cooldown).with_shared(store.clone());
        let b = CircuitBreaker::new("shared", 2, cooldown).with_shared(store.clone());
        (a, b)
    }

    #[tokio::test]
    async fn replicas_open_probe_once_and_close_together() {
        let store = Arc::new(MemoryStore::default());
        let (a, b) = replicas(&store, 40);
        a.acquire().await.unwrap().failure("down").await;
        a.acquire().await.unwrap().failure("down").await;
        assert_eq!(a.state(), BreakerState::Open);
        // B never failed, yet refuses: the breaker is open everywhere.
        let refused = b.acquire().await.expect_err("open on b too");
        assert_eq!(refused.state, BreakerState::Open, "{refused}");
        assert_eq!(b.state(), BreakerState::Open);
        tokio::time::sleep(Duration::from_millis(50)).await;
        // After the cooldown exactly one of them probes.
        let probe = a.acquire().await.expect("a wins the probe");
        let refused = b.acquire().await.expect_err("b must not probe too");
        assert!(refused.detail.contains("another replica"), "{refused}");
        probe.success().await;
        assert_eq!(a.state(), BreakerState::Closed);
        // The probe closed it for B as well.
        b.acquire().await.expect("closed on b").success().await;
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[tokio::test]
    async fn a_store_outage_falls_back_to_local_state_and_resyncs() {
        let store = Arc::new(MemoryStore::default());
        let (a, b) = replicas(&store, 60_000);
        store.down.store(true, Ordering::Relaxed);
        a.acquire().await.unwrap().failure("down").await;
        a.acquire().await.unwrap().failure("down").await;
        assert_eq!(
            a.state(),
            BreakerState::Open,
            "the local breaker still works"
        );
        assert!(
            b.acquire().await.is_ok(),
            "b cannot know while the store is down"
        );
        store.down.store(false, Ordering::Relaxed);
        assert!(store.open.lock().unwrap().is_empty());
        // A's next call writes its open state; then B sees it.
        assert!(a.acquire().await.is_err());
        assert!(store.open.lock().unwrap().contains_key("shared"));
        assert!(b.acquire().await.is_err(), "open on b after the resync");
    }

    #[tokio::test]
    async fn an_abandoned_shared_probe_reopens_for_everyone() {
        let store = Arc::new(MemoryStore::default());
        // A cool-down far longer than the steps below take on a loaded machine: the reopened
        // breaker must not cool down again before A asks.
        let (a, b) = replicas(&store, 400);
        a.acquire().await.unwrap().failure("down").await;
        a.acquire().await.unwrap().failure("down").await;
        tokio::time::sleep(Duration::from_millis(450)).await;
        drop(b.acquire().await.expect("b probes"));
        // The drop publishes in the background.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let refused = a.acquire().await.expect_err("reopened");
        assert_eq!(refused.state, BreakerState::Open, "{refused}");
    }
}
