//! What the validators that call a model or an endpoint (`llm_judge`, `embedding_relevance`)
//! share with `external`: the same options with the same meaning — `timeout_ms` (0 switches
//! the validator off, never silently), `failure_threshold` and `cooldown_ms` of a
//! [`CircuitBreaker`], and `fail_mode` — wrapped around one call in a [`Guard`].
//!
//! A call that fails, times out or answers something unusable (no verdict, wrong vector count)
//! counts towards the breaker and makes the validator [`Unavailable`]; the loop then applies
//! the fail mode.

use crate::breaker::CircuitBreaker;
use enforce_core::{validator::VALIDATOR_DISABLED, FailMode, Issue, Unavailable};
use enforce_validators::BuildError;
use std::future::Future;
use std::time::Duration;

/// Default `failure_threshold`: consecutive failures that open the breaker.
pub const DEFAULT_FAILURE_THRESHOLD: u32 = 3;
/// Default `cooldown_ms`: how long an open breaker waits before one probe call.
pub const DEFAULT_COOLDOWN_MS: u64 = 30_000;

/// [`DEFAULT_FAILURE_THRESHOLD`], for serde defaults.
pub(crate) fn default_threshold() -> u32 {
    DEFAULT_FAILURE_THRESHOLD
}

/// [`DEFAULT_COOLDOWN_MS`], for serde defaults.
pub(crate) fn default_cooldown_ms() -> u64 {
    DEFAULT_COOLDOWN_MS
}

/// Milliseconds from a key in milliseconds or its twin in seconds (`timeout_ms` /
/// `timeout_s`): at most one may be given; `default` when neither is. Seconds may be
/// fractional (`0.5`); they suit deployments whose environment speaks seconds
/// (`timeout_s: ${AVAP_PARSER_TIMEOUT:-2}`).
pub(crate) fn millis_of(
    ms: Option<u64>,
    seconds: Option<f64>,
    key: &str,
    default: u64,
) -> Result<u64, BuildError> {
    match (ms, seconds) {
        (Some(_), Some(_)) => Err(BuildError::at(
            format!("{key}_s"),
            format!("give either '{key}_ms' or '{key}_s', not both"),
        )),
        (Some(ms), None) => Ok(ms),
        (None, Some(s)) if !s.is_finite() || s < 0.0 => Err(BuildError::at(
            format!("{key}_s"),
            "seconds must be a number of at least 0",
        )),
        // Rounded to whole milliseconds; at most u64::MAX ms (`as` saturates).
        (None, Some(s)) => Ok((s * 1000.0).round() as u64),
        (None, None) => Ok(default),
    }
}

/// A timeout, a circuit breaker and a fail mode around the calls of one validator.
#[derive(Debug)]
pub struct Guard {
    name: String,
    timeout: Duration,
    breaker: CircuitBreaker,
    fail_mode: Option<FailMode>,
}

impl Guard {
    /// A guard for validator `name`: calls end after `timeout` (zero switches the validator
    /// off), the breaker opens after `failure_threshold` consecutive failures and probes again
    /// after `cooldown`.
    pub fn new(
        name: &str,
        timeout: Duration,
        failure_threshold: u32,
        cooldown: Duration,
        fail_mode: Option<FailMode>,
    ) -> Result<Self, BuildError> {
        if failure_threshold == 0 {
            return Err(BuildError::at("failure_threshold", "must be at least 1"));
        }
        Ok(Guard {
            name: name.to_string(),
            timeout,
            breaker: CircuitBreaker::new(name, failure_threshold, cooldown),
            fail_mode,
        })
    }

    /// The guard of configuration options in milliseconds.
    pub fn from_options(
        name: &str,
        timeout_ms: u64,
        failure_threshold: u32,
        cooldown_ms: u64,
        fail_mode: Option<FailMode>,
    ) -> Result<Self, BuildError> {
        Self::new(
            name,
            Duration::from_millis(timeout_ms),
            failure_threshold,
            Duration::from_millis(cooldown_ms),
            fail_mode,
        )
    }

    /// A guard with the given timeout and the default breaker, without a fail mode of its own.
    pub fn with_timeout(name: &str, timeout: Duration) -> Self {
        Guard {
            name: name.to_string(),
            timeout,
            breaker: CircuitBreaker::new(
                name,
                DEFAULT_FAILURE_THRESHOLD,
                Duration::from_millis(DEFAULT_COOLDOWN_MS),
            ),
            fail_mode: None,
        }
    }

    /// The breaker guarding the calls.
    pub fn breaker(&self) -> &CircuitBreaker {
        &self.breaker
    }

    /// The validator's own fail mode, if configured.
    pub fn fail_mode(&self) -> Option<FailMode> {
        self.fail_mode
    }

    /// The timeout of one call.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sets the timeout of one call (zero switches the validator off).
    pub(crate) fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Replaces the breaker: open after `threshold` consecutive failures, probe after
    /// `cooldown`.
    pub(crate) fn set_breaker(&mut self, threshold: u32, cooldown: Duration) {
        self.breaker = CircuitBreaker::new(self.name.clone(), threshold, cooldown);
    }

    /// Sets the validator's own fail mode.
    pub(crate) fn set_fail_mode(&mut self, mode: FailMode) {
        self.fail_mode = Some(mode);
    }

    /// `call` cut at the timeout, for a validator that makes several calls under one breaker
    /// permit (the `external` validator, one call per code block).
    pub(crate) async fn within_timeout<T>(
        &self,
        call: impl Future<Output = Result<T, Unavailable>>,
    ) -> Result<T, Unavailable> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(Unavailable::new(self.timed_out())),
        }
    }

    /// Why a call that ran out of time gave no verdict.
    fn timed_out(&self) -> String {
        format!(
            "{} did not answer within {} ms",
            self.name,
            self.timeout.as_millis()
        )
    }

    /// The warning a switched-off validator (`timeout_ms: 0`) returns instead of a verdict, so
    /// the outcome says this check did not run; `None` when it is on.
    pub fn disabled_issue(&self) -> Option<Issue> {
        self.timeout.is_zero().then(|| {
            Issue::warning(
                &self.name,
                VALIDATOR_DISABLED,
                "not checked: the validator is switched off (timeout_ms: 0)",
            )
            .with_hint("the response was passed without this check")
        })
    }

    /// Runs `call` if the breaker allows it, within the timeout. An error of the call (its
    /// text says what failed), a timeout or an open breaker make the validator unavailable;
    /// the breaker learns how the call went.
    pub async fn call<T, F>(&self, call: F) -> Result<T, Unavailable>
    where
        F: Future<Output = Result<T, String>>,
    {
        let permit = self
            .breaker
            .acquire()
            .await
            .map_err(|refused| Unavailable::new(refused.to_string()))?;
        let failed = match tokio::time::timeout(self.timeout, call).await {
            Ok(Ok(value)) => {
                permit.success().await;
                return Ok(value);
            }
            Ok(Err(reason)) => format!("{}: {reason}", self.name),
            Err(_) => self.timed_out(),
        };
        permit.failure(&failed).await;
        Err(Unavailable::new(failed))
    }
}

/// The first `max_chars` characters of `text` and whether anything was cut.
pub(crate) fn cap_chars(text: &str, max_chars: usize) -> (&str, bool) {
    match text.char_indices().nth(max_chars) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

/// `text` cut to `max_chars` characters, with `…` where it was cut; for quoting an answer in
/// a message.
pub(crate) fn excerpt(text: &str, max_chars: usize) -> String {
    match cap_chars(text.trim(), max_chars) {
        (kept, true) => format!("{kept}…"),
        (kept, false) => kept.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::breaker::BreakerState;

    #[tokio::test]
    async fn errors_and_timeouts_open_the_breaker_and_say_why() {
        let guard = Guard::new(
            "g",
            Duration::from_millis(20),
            2,
            Duration::from_secs(60),
            None,
        )
        .unwrap();
        let err = guard
            .call(async { Err::<(), _>("boom".to_string()) })
            .await
            .unwrap_err();
        assert_eq!(err.reason, "g: boom");
        let err = guard
            .call(async {
                tokio::time::sleep(Duration::from_millis(200)).await;
                Ok::<_, String>(())
            })
            .await
            .unwrap_err();
        assert!(err.reason.contains("within 20 ms"), "{err}");
        assert_eq!(guard.breaker().state(), BreakerState::Open);
        let err = guard.call(async { Ok::<_, String>(1) }).await.unwrap_err();
        assert!(err.reason.contains("is open"), "{err}");
    }

    #[test]
    fn zero_threshold_is_a_config_error_and_caps_count_characters() {
        let e = Guard::from_options("g", 1, 0, 1, None).unwrap_err();
        assert_eq!(e.key, "failure_threshold");
        assert_eq!(cap_chars("äöü", 2), ("äö", true));
        assert_eq!(cap_chars("äöü", 3), ("äöü", false));
        assert_eq!(excerpt("  abcdef ", 3), "abc…");
    }
}
