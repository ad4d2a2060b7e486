//! A circuit breaker for validators that call something outside the process.
//!
//! closed → (N consecutive failures) → open → (cooldown) → half-open → (probe succeeds) →
//! closed, or (probe fails) → open again. While open, no call is made. Every state change is
//! logged with `tracing` (target `enforce_external::breaker`).
//!
//! ```
//! use enforce_external::breaker::{BreakerState, CircuitBreaker};
//! use std::time::Duration;
//! let breaker = CircuitBreaker::new("lint", 2, Duration::from_millis(20));
//! for _ in 0..2 {
//!     breaker.acquire().unwrap().failure("exit 127");
//! }
//! assert_eq!(breaker.state(), BreakerState::Open);
//! assert!(breaker.acquire().is_err());           // open: no call is made
//! std::thread::sleep(Duration::from_millis(30));
//! let probe = breaker.acquire().unwrap();        // cooldown over: one probe
//! assert_eq!(breaker.state(), BreakerState::HalfOpen);
//! assert!(breaker.acquire().is_err());           // only one probe at a time
//! probe.success();
//! assert_eq!(breaker.state(), BreakerState::Closed);
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Every live breaker's id, name and state, so a server can export them as metrics without
/// knowing which validators own breakers.
static LIVE: Mutex<Vec<(u64, String, BreakerState)>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(0);

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
    probe_in_flight: bool,
}

/// See the [module docs](self).
#[derive(Debug)]
pub struct CircuitBreaker {
    id: u64,
    name: String,
    threshold: u32,
    cooldown: Duration,
    inner: Mutex<Inner>,
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
    pub fn success(mut self) {
        self.reported = true;
        self.breaker.record(true, "");
    }

    /// The call failed (no verdict); `reason` is logged.
    pub fn failure(mut self, reason: &str) {
        self.reported = true;
        self.breaker.record(false, reason);
    }
}

impl Drop for Permit<'_> {
    fn drop(&mut self) {
        if !self.reported {
            self.breaker.record(false, "call abandoned");
        }
    }
}

impl CircuitBreaker {
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
            inner: Mutex::new(Inner {
                state: BreakerState::Closed,
                consecutive_failures: 0,
                opened_at: None,
                probe_in_flight: false,
            }),
        }
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
                "circuit breaker opened"
            ),
            BreakerState::HalfOpen => tracing::info!(
                target: "enforce_external::breaker",
                validator = %self.name, %from, %to, "circuit breaker half-open: probing"
            ),
            BreakerState::Closed => tracing::info!(
                target: "enforce_external::breaker",
                validator = %self.name, %from, %to, "circuit breaker closed"
            ),
        }
    }

    /// Asks to make a call.
    pub fn acquire(&self) -> Result<Permit<'_>, Refused> {
        let mut inner = self.lock();
        match inner.state {
            BreakerState::Closed => {}
            BreakerState::Open => {
                let since = inner.opened_at.map_or(self.cooldown, |t| t.elapsed());
                if since < self.cooldown {
                    let left = self.cooldown - since;
                    return Err(Refused {
                        name: self.name.clone(),
                        state: BreakerState::Open,
                        detail: format!("no call for another {} ms", left.as_millis()),
                    });
                }
                self.transition(&mut inner, BreakerState::HalfOpen, "cooldown over");
                inner.probe_in_flight = true;
            }
            BreakerState::HalfOpen => {
                if inner.probe_in_flight {
                    return Err(Refused {
                        name: self.name.clone(),
                        state: BreakerState::HalfOpen,
                        detail: "a probe call is running".into(),
                    });
                }
                inner.probe_in_flight = true;
            }
        }
        Ok(Permit {
            breaker: self,
            reported: false,
        })
    }

    fn record(&self, ok: bool, reason: &str) {
        let mut inner = self.lock();
        let was_probe = inner.state == BreakerState::HalfOpen;
        if was_probe {
            inner.probe_in_flight = false;
        }
        if ok {
            inner.consecutive_failures = 0;
            self.transition(&mut inner, BreakerState::Closed, "call succeeded");
            return;
        }
        inner.consecutive_failures = inner.consecutive_failures.saturating_add(1);
        if was_probe || inner.consecutive_failures >= self.threshold {
            inner.opened_at = Some(Instant::now());
            if inner.state == BreakerState::Open {
                return;
            }
            self.transition(&mut inner, BreakerState::Open, reason);
        } else {
            tracing::debug!(
                target: "enforce_external::breaker",
                validator = %self.name, reason,
                failures = inner.consecutive_failures, "external call failed"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_threshold_and_success_resets_the_count() {
        let b = CircuitBreaker::new("x", 3, Duration::from_secs(60));
        b.acquire().unwrap().failure("a");
        b.acquire().unwrap().failure("b");
        b.acquire().unwrap().success();
        b.acquire().unwrap().failure("c");
        b.acquire().unwrap().failure("d");
        assert_eq!(b.state(), BreakerState::Closed);
        b.acquire().unwrap().failure("e");
        assert_eq!(b.state(), BreakerState::Open);
        let refused = b.acquire().err().unwrap();
        assert!(refused.to_string().contains("is open"), "{refused}");
    }

    #[test]
    fn failed_probe_reopens_and_abandoned_probe_counts_as_failure() {
        let b = CircuitBreaker::new("x", 1, Duration::from_millis(10));
        b.acquire().unwrap().failure("down");
        std::thread::sleep(Duration::from_millis(15));
        b.acquire().unwrap().failure("still down");
        assert_eq!(b.state(), BreakerState::Open);
        assert!(b.acquire().is_err());
        std::thread::sleep(Duration::from_millis(15));
        drop(b.acquire().unwrap());
        assert_eq!(b.state(), BreakerState::Open);
        std::thread::sleep(Duration::from_millis(15));
        b.acquire().unwrap().success();
        assert_eq!(b.state(), BreakerState::Closed);
    }

    #[test]
    fn live_states_follow_transitions_and_drop() {
        let name = "states-probe-unique";
        let find = || {
            super::states()
                .into_iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s)
        };
        let breaker = CircuitBreaker::new(name, 1, Duration::from_secs(60));
        assert_eq!(find(), Some(BreakerState::Closed));
        breaker.acquire().unwrap().failure("down");
        assert_eq!(find(), Some(BreakerState::Open));
        drop(breaker);
        assert_eq!(find(), None);
    }
}
