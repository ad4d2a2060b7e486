//! The [`Validator`] trait: one check of one response.

use crate::{Context, Issue};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A validator could not give a verdict because something outside the process failed (a
/// checker command hung, an HTTP endpoint is down, a circuit breaker is open).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("validator unavailable: {reason}")]
pub struct Unavailable {
    /// Why no verdict could be given.
    pub reason: String,
}

impl Unavailable {
    /// An `Unavailable` with the given reason.
    pub fn new(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
        }
    }
}

/// What the loop does when a validator is [`Unavailable`].
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Carry on as if the validator had passed, recording a `VALIDATOR_UNAVAILABLE` warning.
    Open,
    /// Stop with status `unavailable`: no unchecked response is passed on.
    #[default]
    Closed,
}

/// The result of one validation: the issues found, or no verdict.
pub type Validation = Result<Vec<Issue>, Unavailable>;

/// One check of a response, with an optional deterministic repair.
///
/// Validators compose at run time: the [`Enforcer`](crate::Enforcer) holds a
/// `Vec<Box<dyn Validator>>` and runs them in order. `validate` is async because some checks do
/// I/O (external commands, HTTP); built-in text checks do only their scan and return a ready
/// future.
#[async_trait]
pub trait Validator: Send + Sync {
    /// The name issues carry and configs refer to (`step_marker`, `adr_structure`, ...).
    fn name(&self) -> &str;

    /// Checks `response` and returns every issue found (empty: it passed), or [`Unavailable`].
    async fn validate(&self, response: &str, context: &Context) -> Validation;

    /// Tries a deterministic repair. `issues` are the issues this validator raised on `response`.
    /// Returns the repaired text, or `None` when this validator cannot repair it.
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        let _ = (response, context, issues);
        None
    }

    /// This validator's own answer to "what if I am unavailable?", overriding the policy's.
    fn fail_mode(&self) -> Option<FailMode> {
        None
    }
}

#[async_trait]
impl<V: Validator + ?Sized> Validator for Box<V> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn validate(&self, response: &str, context: &Context) -> Validation {
        (**self).validate(response, context).await
    }
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        (**self).repair(response, context, issues)
    }
    fn fail_mode(&self) -> Option<FailMode> {
        (**self).fail_mode()
    }
}

#[async_trait]
impl<V: Validator + ?Sized> Validator for Arc<V> {
    fn name(&self) -> &str {
        (**self).name()
    }
    async fn validate(&self, response: &str, context: &Context) -> Validation {
        (**self).validate(response, context).await
    }
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        (**self).repair(response, context, issues)
    }
    fn fail_mode(&self) -> Option<FailMode> {
        (**self).fail_mode()
    }
}
