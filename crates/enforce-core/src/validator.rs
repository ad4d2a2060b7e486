//! The [`Validator`] trait: one check of one response.

use crate::partial::PartialCheck;
use crate::{Context, Issue, Reply};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::sync::Arc;

mod group;
mod leaves;
use group::validate_group;
pub(crate) use leaves::{
    push_leaves, repair_leaves, validate_leaves, Found, Leaf, LeafRun, Verdict,
};

/// Code of the warning recorded when a fail-open validator gives no verdict.
pub const VALIDATOR_UNAVAILABLE: &str = "VALIDATOR_UNAVAILABLE";

/// Code of the warning a validator raises when it is switched off by its configuration (e.g. an
/// external checker with `timeout_ms: 0`): the response was not checked by it, and says so.
pub const VALIDATOR_DISABLED: &str = "VALIDATOR_DISABLED";

/// A validator that gave no verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnavailableValidator {
    /// The validator's name.
    pub validator: String,
    /// Why it gave no verdict.
    pub reason: String,
}

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
// Exhaustive on purpose: open or closed is the whole question.
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
/// The [`Enforcer`](crate::Enforcer) runs its validators in order. `validate` is async because
/// some checks do I/O (external commands, HTTP); built-in text checks do only their scan and
/// return a ready future.
///
/// Issues returned with an empty `validator` (built with [`Issue::new`]) get this validator's
/// [`name`](Validator::name) from the loop, so repairs and reports find them without every
/// validator spelling its name out.
///
/// Validators compose: a `Vec` of validators and an `Option` of one are validators too, and
/// [`ValidatorExt`] adds adapters (`with_fail_mode`, `boxed`). The loop looks through a group
/// ([`members`](Validator::members)) and treats each member as if it had been listed on its own.
///
/// ```
/// use enforce_core::{async_trait, Check, Context, Enforcer, Issue, Severity, Status,
///                    Validation, Validator};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// /// Every answer must end with a full stop; the repair adds one.
/// struct FullStop;
///
/// #[async_trait]
/// impl Validator for FullStop {
///     fn name(&self) -> &str { "full_stop" }
///     async fn validate(&self, response: &str, _: &Context) -> Validation {
///         Ok(if response.trim_end().ends_with('.') { vec![] } else {
///             // No validator name: the loop fills in "full_stop".
///             vec![Issue::new(Severity::Error, "NO_FULL_STOP", "The answer does not end with '.'.")]
///         })
///     }
///     fn repair(&self, response: &str, _: &Context, issues: &[Issue]) -> Option<String> {
///         assert!(issues.iter().all(|i| i.validator == "full_stop"));
///         Some(format!("{}.", response.trim_end()))
///     }
/// }
///
/// let enforcer = Enforcer::new(vec![Box::new(FullStop)]);
/// let outcome = block_on(enforcer.check("Done", &Context::new(), Check::Repair));
/// assert_eq!(outcome.status, Status::Repaired);
/// assert_eq!(outcome.response.as_deref(), Some("Done."));
/// assert_eq!(outcome.attempts[0].issues[0].validator, "full_stop");
/// ```
#[async_trait]
pub trait Validator: Send + Sync {
    /// The name issues carry and configs refer to (`step_marker`, `adr_structure`, ...).
    fn name(&self) -> &str;

    /// Checks `response` and returns every issue found (empty: it passed), or [`Unavailable`].
    async fn validate(&self, response: &str, context: &Context) -> Validation;

    /// The validator this one wraps, for an adapter that changes only some of its answers
    /// ([`WithFailMode`], a scope). Every provided method the adapter does not override
    /// answers as the wrapped validator does, so an adapter cannot lose one by forgetting to
    /// forward it; it overrides exactly what it changes (an adapter that changes the verdict
    /// overrides [`validate_reply`](Validator::validate_reply), which the loop calls, and an
    /// adapter that must not be opened up as a group overrides
    /// [`members`](Validator::members)). `None` (the default): not an adapter.
    fn wrapped(&self) -> Option<&dyn Validator> {
        None
    }

    /// Checks a whole reply: its text and its tool calls. The loop calls this one.
    ///
    /// The default is for text validators: it validates the text, and passes a reply that only
    /// calls tools (a step marker, a length or a structure rule has nothing to judge there).
    /// Validators of tool calls override it.
    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        if let Some(wrapped) = self.wrapped() {
            return wrapped.validate_reply(reply, context).await;
        }
        if reply.only_tool_calls() {
            return Ok(Vec::new());
        }
        self.validate(&reply.text, context).await
    }

    /// Tries a deterministic repair. `issues` are the errors this validator raised on
    /// `response`. Returns the repaired text, or `None` when this validator cannot repair it.
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        self.wrapped()?.repair(response, context, issues)
    }

    /// Starts following one answer while the model writes it, for early abort: a checker that
    /// reports **definite** errors on a prefix (see [`PartialCheck`]). `None` (the default):
    /// this validator judges whole answers only, and never cuts one short.
    ///
    /// The loop asks for one checker per attempt, so a checker may keep its place in the text
    /// instead of rescanning the whole prefix on every call.
    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        self.wrapped()?.partial_check(context)
    }

    /// `true` when [`repair`](Validator::repair) fixes `issue` (one of this validator's
    /// errors) without asking the model again. The loop does not cut an answer short for such
    /// an error: the answer runs to its end, where the repair can fix it. Default `false`.
    fn repair_fixes(&self, issue: &Issue) -> bool {
        self.wrapped().is_some_and(|v| v.repair_fixes(issue))
    }

    /// This validator's own answer to "what if I am unavailable?", overriding the policy's.
    /// For a group, the answer for members that have none of their own.
    fn fail_mode(&self) -> Option<FailMode> {
        self.wrapped()?.fail_mode()
    }

    /// The literal status a deployment reports when this validator gives no verdict (failed
    /// open or closed, switched off), e.g. `PARSER_UNAVAILABLE`; the outcome records it in
    /// [`Outcome::unavailable_statuses`](crate::Outcome::unavailable_statuses). `None` (the
    /// default): the deployment's own name for it (the proxy's `<NAME>_UNAVAILABLE`).
    fn unavailable_status(&self) -> Option<&str> {
        self.wrapped()?.unavailable_status()
    }

    /// The validators this one is made of, when it only groups others (`Vec`, `Option`).
    ///
    /// The loop then validates, repairs and reports each member as if it had been listed on its
    /// own: issues carry the member's name, a member's repair gets the member's errors, and a
    /// member without verdict is judged by its own fail mode, else the group's, else the
    /// policy's. `None` (the default): the loop runs this validator as one.
    fn members(&self) -> Option<Vec<&dyn Validator>> {
        self.wrapped()?.members()
    }

    /// `false` for a check of the request's facts alone, whose verdict is the same whatever
    /// the response says (e.g. a validator pointed at a context value). The policy's fallback
    /// text is not held to such checks: it is what answers a request that failed them. Every
    /// other validator judges the fallback like an answer. Default `true`.
    fn reads_response(&self) -> bool {
        self.wrapped().is_none_or(|v| v.reads_response())
    }

    /// `true` for a validator that reads the request itself, not only the response and the
    /// facts (an LLM judge asking whether the answer stays within the retrieved sources). The
    /// loop then gives it a context that also holds the question, the system prompt and the
    /// retrieved context under the [`keys`](crate::context::keys). Default `false`: the loop
    /// adds nothing.
    fn reads_request(&self) -> bool {
        self.wrapped().is_some_and(|v| v.reads_request())
    }
}

impl fmt::Debug for dyn Validator + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.members() {
            Some(members) => f.debug_list().entries(members).finish(),
            None => f
                .debug_struct("Validator")
                .field("name", &self.name())
                .finish_non_exhaustive(),
        }
    }
}

/// Forwards every method, so a shared or boxed validator is the validator itself.
macro_rules! forward_validator {
    ($($pointer:ident)::+) => {
        #[async_trait]
        impl<V: Validator + ?Sized> Validator for $($pointer)::+<V> {
            fn name(&self) -> &str {
                (**self).name()
            }
            fn wrapped(&self) -> Option<&dyn Validator> {
                (**self).wrapped()
            }
            async fn validate(&self, response: &str, context: &Context) -> Validation {
                (**self).validate(response, context).await
            }
            async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
                (**self).validate_reply(reply, context).await
            }
            fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
                (**self).repair(response, context, issues)
            }
            fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
                (**self).partial_check(context)
            }
            fn repair_fixes(&self, issue: &Issue) -> bool {
                (**self).repair_fixes(issue)
            }
            fn fail_mode(&self) -> Option<FailMode> {
                (**self).fail_mode()
            }
            fn unavailable_status(&self) -> Option<&str> {
                (**self).unavailable_status()
            }
            fn members(&self) -> Option<Vec<&dyn Validator>> {
                (**self).members()
            }
            fn reads_response(&self) -> bool {
                (**self).reads_response()
            }
            fn reads_request(&self) -> bool {
                (**self).reads_request()
            }
        }
    };
}

forward_validator!(Box);
forward_validator!(Arc);

/// Adapters for any [`Validator`], in the manner of iterator adapters.
///
/// ```
/// use enforce_core::{Enforcer, FailMode, Validator, ValidatorExt};
/// # use enforce_core::{async_trait, Context, Validation};
/// # struct Spelling;
/// # #[async_trait]
/// # impl Validator for Spelling {
/// #     fn name(&self) -> &str { "spelling" }
/// #     async fn validate(&self, _: &str, _: &Context) -> Validation { Ok(vec![]) }
/// # }
/// # struct Grammar;
/// # #[async_trait]
/// # impl Validator for Grammar {
/// #     fn name(&self) -> &str { "grammar" }
/// #     async fn validate(&self, _: &str, _: &Context) -> Validation { Ok(vec![]) }
/// # }
/// // Both style checks may be skipped when their service is down.
/// let style = vec![Spelling.boxed(), Grammar.boxed()].with_fail_mode(FailMode::Open);
/// let enforcer = Enforcer::new(vec![style.boxed()]);
/// assert_eq!(enforcer.validators()[0].fail_mode(), Some(FailMode::Open));
/// ```
pub trait ValidatorExt: Validator {
    /// Answers "what if this validator is unavailable?" with `mode`, whatever the validator or
    /// the policy says. For a group, `mode` applies to every member without a fail mode of its
    /// own.
    ///
    /// (Named `with_fail_mode`, not `fail_mode`, so it never shadows [`Validator::fail_mode`].)
    fn with_fail_mode(self, mode: FailMode) -> WithFailMode<Self>
    where
        Self: Sized,
    {
        WithFailMode { inner: self, mode }
    }

    /// Names the literal status reported when this validator gives no verdict (see
    /// [`Validator::unavailable_status`]). The status is the caller's to check: the
    /// configuration accepts upper-case letters, digits and underscores
    /// ([`is_status_name`]).
    fn with_unavailable_status(self, status: impl Into<String>) -> WithUnavailableStatus<Self>
    where
        Self: Sized,
    {
        WithUnavailableStatus {
            inner: self,
            status: status.into(),
        }
    }

    /// Boxes the validator, for a `Vec<Box<dyn Validator>>`.
    fn boxed(self) -> Box<dyn Validator>
    where
        Self: Sized + 'static,
    {
        Box::new(self)
    }
}

impl<V: Validator + ?Sized> ValidatorExt for V {}

/// A validator with its fail mode overridden: see [`ValidatorExt::with_fail_mode`].
#[derive(Debug, Clone)]
pub struct WithFailMode<V> {
    inner: V,
    mode: FailMode,
}

impl<V> WithFailMode<V> {
    /// The wrapped validator.
    pub fn inner(&self) -> &V {
        &self.inner
    }

    /// The fail mode it answers with.
    pub fn mode(&self) -> FailMode {
        self.mode
    }

    /// Unwraps the validator.
    pub fn into_inner(self) -> V {
        self.inner
    }
}

#[async_trait]
impl<V: Validator> Validator for WithFailMode<V> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn wrapped(&self) -> Option<&dyn Validator> {
        Some(&self.inner)
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        if self.inner.members().is_some() {
            // A direct call of a group: members without a mode of their own get this one.
            return validate_group(self, &Reply::text(response), context).await;
        }
        self.inner.validate(response, context).await
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        if self.inner.members().is_some() {
            return validate_group(self, reply, context).await;
        }
        self.inner.validate_reply(reply, context).await
    }

    fn fail_mode(&self) -> Option<FailMode> {
        Some(self.mode)
    }
}

/// `true` for a status name: non-empty, upper-case ASCII letters, digits and underscores
/// (`PARSER_UNAVAILABLE`), the shape of the statuses the proxy reports.
pub fn is_status_name(status: &str) -> bool {
    !status.is_empty()
        && status
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
}

/// A validator with a literal unavailable status: see [`ValidatorExt::with_unavailable_status`].
#[derive(Debug, Clone)]
pub struct WithUnavailableStatus<V> {
    inner: V,
    status: String,
}

impl<V> WithUnavailableStatus<V> {
    /// The wrapped validator.
    pub fn inner(&self) -> &V {
        &self.inner
    }

    /// Unwraps the validator.
    pub fn into_inner(self) -> V {
        self.inner
    }
}

#[async_trait]
impl<V: Validator> Validator for WithUnavailableStatus<V> {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn wrapped(&self) -> Option<&dyn Validator> {
        Some(&self.inner)
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        self.inner.validate(response, context).await
    }

    fn unavailable_status(&self) -> Option<&str> {
        Some(&self.status)
    }
}
