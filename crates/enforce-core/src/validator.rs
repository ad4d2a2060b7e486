//! The [`Validator`] trait: one check of one response.

use crate::partial::PartialCheck;
use crate::{Context, Issue, Reply};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::ops::Range;
use std::sync::Arc;

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

    /// Checks a whole reply: its text and its tool calls. The loop calls this one.
    ///
    /// The default is for text validators: it validates the text, and passes a reply that only
    /// calls tools (a step marker, a length or a structure rule has nothing to judge there).
    /// Validators of tool calls override it.
    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        if reply.only_tool_calls() {
            return Ok(Vec::new());
        }
        self.validate(&reply.text, context).await
    }

    /// Tries a deterministic repair. `issues` are the errors this validator raised on
    /// `response`. Returns the repaired text, or `None` when this validator cannot repair it.
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        let _ = (response, context, issues);
        None
    }

    /// Starts following one answer while the model writes it, for early abort: a checker that
    /// reports **definite** errors on a prefix (see [`PartialCheck`]). `None` (the default):
    /// this validator judges whole answers only, and never cuts one short.
    ///
    /// The loop asks for one checker per attempt, so a checker may keep its place in the text
    /// instead of rescanning the whole prefix on every call.
    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        let _ = context;
        None
    }

    /// `true` when [`repair`](Validator::repair) fixes `issue` (one of this validator's
    /// errors) without asking the model again. The loop does not cut an answer short for such
    /// an error: the answer runs to its end, where the repair can fix it. Default `false`.
    fn repair_fixes(&self, issue: &Issue) -> bool {
        let _ = issue;
        false
    }

    /// This validator's own answer to "what if I am unavailable?", overriding the policy's.
    /// For a group, the answer for members that have none of their own.
    fn fail_mode(&self) -> Option<FailMode> {
        None
    }

    /// The literal status a deployment reports when this validator gives no verdict (failed
    /// open or closed, switched off), e.g. `PARSER_UNAVAILABLE`; the outcome records it in
    /// [`Outcome::unavailable_statuses`](crate::Outcome::unavailable_statuses). `None` (the
    /// default): the deployment's own name for it (the proxy's `<NAME>_UNAVAILABLE`).
    fn unavailable_status(&self) -> Option<&str> {
        None
    }

    /// The validators this one is made of, when it only groups others (`Vec`, `Option`).
    ///
    /// The loop then validates, repairs and reports each member as if it had been listed on its
    /// own: issues carry the member's name, a member's repair gets the member's errors, and a
    /// member without verdict is judged by its own fail mode, else the group's, else the
    /// policy's. `None` (the default): the loop runs this validator as one.
    fn members(&self) -> Option<Vec<&dyn Validator>> {
        None
    }

    /// `false` for a check of the request's facts alone, whose verdict is the same whatever
    /// the response says (e.g. a validator pointed at a context value). The policy's fallback
    /// text is not held to such checks: it is what answers a request that failed them. Every
    /// other validator judges the fallback like an answer. Default `true`.
    fn reads_response(&self) -> bool {
        true
    }

    /// `true` for a validator that reads the request itself, not only the response and the
    /// facts (an LLM judge asking whether the answer stays within the retrieved sources). The
    /// loop then gives it a context that also holds the question, the system prompt and the
    /// retrieved context under the [`keys`](crate::keys). Default `false`: the loop adds nothing.
    fn reads_request(&self) -> bool {
        false
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

/// A group: the members in order. It has no name of its own (empty); its members' issues carry
/// the members' names.
///
/// In the loop each member counts as if listed on its own (see [`Validator::members`]). Called
/// directly (or through a wrapper that is not a group), it validates every member; a member
/// without verdict and without a fail mode of its own makes the whole group [`Unavailable`],
/// and the caller's fail mode decides. Its repair runs each member's repair, in order, with
/// that member's own issues.
#[async_trait]
impl<V: Validator> Validator for Vec<V> {
    fn name(&self) -> &str {
        ""
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        validate_group(self, &Reply::text(response), context).await
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        validate_group(self, reply, context).await
    }

    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        repair_group(self, response, context, issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        GroupCheck::start(self, context)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        group_repair_fixes(self, issue)
    }

    fn members(&self) -> Option<Vec<&dyn Validator>> {
        Some(self.iter().map(|v| v as &dyn Validator).collect())
    }

    fn reads_response(&self) -> bool {
        self.iter().any(Validator::reads_response)
    }

    fn reads_request(&self) -> bool {
        self.iter().any(Validator::reads_request)
    }
}

/// A validator that may be left out: `None` checks nothing, `Some(v)` is `v` (same name, same
/// fail mode), e.g. a validator that only exists when its configuration is given.
#[async_trait]
impl<V: Validator> Validator for Option<V> {
    fn name(&self) -> &str {
        self.as_ref().map_or("", |v| v.name())
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        match self {
            Some(v) => v.validate(response, context).await,
            None => Ok(Vec::new()),
        }
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        match self {
            Some(v) => v.validate_reply(reply, context).await,
            None => Ok(Vec::new()),
        }
    }

    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        self.as_ref()?.repair(response, context, issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        self.as_ref()?.partial_check(context)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        self.as_ref().is_some_and(|v| v.repair_fixes(issue))
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.as_ref()?.fail_mode()
    }

    fn unavailable_status(&self) -> Option<&str> {
        self.as_ref()?.unavailable_status()
    }

    fn members(&self) -> Option<Vec<&dyn Validator>> {
        Some(self.iter().map(|v| v as &dyn Validator).collect())
    }

    fn reads_response(&self) -> bool {
        self.as_ref().is_some_and(|v| v.reads_response())
    }

    fn reads_request(&self) -> bool {
        self.as_ref().is_some_and(|v| v.reads_request())
    }
}

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

/// The methods an adapter with an `inner` validator forwards unchanged: it is that validator
/// except where the adapter says otherwise (its fail mode, its unavailable status).
macro_rules! forward_to_inner {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }

        fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
            self.inner.repair(response, context, issues)
        }

        fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
            self.inner.partial_check(context)
        }

        fn repair_fixes(&self, issue: &Issue) -> bool {
            self.inner.repair_fixes(issue)
        }

        fn reads_response(&self) -> bool {
            self.inner.reads_response()
        }

        fn reads_request(&self) -> bool {
            self.inner.reads_request()
        }

        fn members(&self) -> Option<Vec<&dyn Validator>> {
            self.inner.members()
        }
    };
}

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

    fn unavailable_status(&self) -> Option<&str> {
        self.inner.unavailable_status()
    }

    forward_to_inner!();
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
    async fn validate(&self, response: &str, context: &Context) -> Validation {
        self.inner.validate(response, context).await
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        self.inner.validate_reply(reply, context).await
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.inner.fail_mode()
    }

    fn unavailable_status(&self) -> Option<&str> {
        Some(&self.status)
    }

    forward_to_inner!();
}

/// One validator the loop runs on its own, with the fail mode its groups hand down.
#[derive(Clone, Copy)]
pub(crate) struct Leaf<'a> {
    pub(crate) validator: &'a dyn Validator,
    inherited: Option<FailMode>,
}

impl Leaf<'_> {
    /// The leaf's own fail mode, else its nearest group's, else `default` (the policy's).
    fn fail_mode(&self, default: FailMode) -> FailMode {
        self.validator
            .fail_mode()
            .or(self.inherited)
            .unwrap_or(default)
    }
}

/// Appends the validators `validator` stands for: itself, or its members' leaves.
pub(crate) fn push_leaves<'a>(
    validator: &'a dyn Validator,
    inherited: Option<FailMode>,
    out: &mut Vec<Leaf<'a>>,
) {
    match validator.members() {
        Some(members) => {
            let inherited = validator.fail_mode().or(inherited);
            for member in members {
                push_leaves(member, inherited, out);
            }
        }
        None => out.push(Leaf {
            validator,
            inherited,
        }),
    }
}

/// What every leaf found in one text: the issues in leaf order, and which are whose.
#[derive(Debug, Default, Clone)]
pub(crate) struct Found {
    pub(crate) issues: Vec<Issue>,
    /// `issues[by_leaf[i].clone()]` came from leaf `i`.
    by_leaf: Vec<Range<usize>>,
}

impl Found {
    /// Issues that belong to no leaf's repair (those that cut an answer short).
    pub(crate) fn unattributed(issues: Vec<Issue>) -> Self {
        Found {
            issues,
            by_leaf: Vec::new(),
        }
    }

    /// Puts `issue` (one of no leaf) before all others.
    pub(crate) fn insert_first(&mut self, issue: Issue) {
        self.issues.insert(0, issue);
        for range in &mut self.by_leaf {
            *range = range.start.saturating_add(1)..range.end.saturating_add(1);
        }
    }

    /// The errors leaf `index` raised.
    fn errors_of(&self, index: usize) -> Vec<Issue> {
        self.by_leaf
            .get(index)
            .and_then(|range| self.issues.get(range.clone()))
            .unwrap_or_default()
            .iter()
            .filter(|i| i.is_error())
            .cloned()
            .collect()
    }
}

/// The verdict of all leaves on one text.
pub(crate) enum Verdict {
    Found(Found),
    Unavailable(UnavailableValidator),
}

/// Runs every leaf on `reply`, stamping each leaf's name on its unnamed issues. A leaf without
/// verdict that fails open becomes a `VALIDATOR_UNAVAILABLE` warning; one that fails closed
/// ends the verdict.
pub(crate) async fn validate_leaves(
    leaves: &[Leaf<'_>],
    reply: &Reply,
    context: &Context,
    default: FailMode,
    mut on_ran: Option<&mut (dyn FnMut(LeafRun<'_>) + Send)>,
) -> Verdict {
    let mut found = Found {
        issues: Vec::new(),
        by_leaf: Vec::with_capacity(leaves.len()),
    };
    for leaf in leaves {
        let start = found.issues.len();
        let name = leaf.validator.name();
        // The clock is read only for a listener (see `Observer::wants_validator_runs`).
        let started = on_ran.is_some().then(std::time::Instant::now);
        let mut no_verdict = None;
        match leaf.validator.validate_reply(reply, context).await {
            Ok(issues) => found
                .issues
                .extend(issues.into_iter().map(|i| i.or_validator(name))),
            Err(unavailable) => match leaf.fail_mode(default) {
                FailMode::Closed => {
                    if let (Some(report), Some(started)) = (on_ran.as_mut(), started) {
                        report(LeafRun {
                            validator: name,
                            issues: &[],
                            unavailable: Some(&unavailable.reason),
                            elapsed: started.elapsed(),
                        });
                    }
                    return Verdict::Unavailable(UnavailableValidator {
                        validator: name.to_string(),
                        reason: unavailable.reason,
                    });
                }
                FailMode::Open => {
                    found.issues.push(
                        Issue::warning(
                            name,
                            VALIDATOR_UNAVAILABLE,
                            format!("not checked: {}", unavailable.reason),
                        )
                        .with_hint(
                            "the validator failed open; the response was passed without this check",
                        ),
                    );
                    no_verdict = Some(unavailable.reason);
                }
            },
        }
        if let (Some(report), Some(started)) = (on_ran.as_mut(), started) {
            report(LeafRun {
                validator: name,
                issues: &found.issues[start..],
                unavailable: no_verdict.as_deref(),
                elapsed: started.elapsed(),
            });
        }
        found.by_leaf.push(start..found.issues.len());
    }
    Verdict::Found(found)
}

/// One validator run as [`validate_leaves`] reports it to a listener.
pub(crate) struct LeafRun<'a> {
    pub validator: &'a str,
    pub issues: &'a [Issue],
    pub unavailable: Option<&'a str>,
    pub elapsed: std::time::Duration,
}

/// Runs the repair of every leaf that raised an error on `text`, in leaf order, each with its
/// own errors, telling `on_applied` the name of each whose repair changed the text. Returns
/// the repaired text and those names.
pub(crate) fn repair_leaves(
    leaves: &[Leaf<'_>],
    text: &str,
    context: &Context,
    found: &Found,
    mut on_applied: impl FnMut(&str),
) -> (String, Vec<String>) {
    let mut current = text.to_string();
    let mut applied = Vec::new();
    for (index, leaf) in leaves.iter().enumerate() {
        let own = found.errors_of(index);
        if own.is_empty() {
            continue;
        }
        if let Some(repaired) = leaf.validator.repair(&current, context, &own) {
            if repaired != current {
                let name = leaf.validator.name();
                on_applied(name);
                applied.push(name.to_string());
                current = repaired;
            }
        }
    }
    (current, applied)
}

/// A group validated on its own, outside the loop: see the `Vec` impl.
async fn validate_group(group: &dyn Validator, reply: &Reply, context: &Context) -> Validation {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    // Without the policy at hand, a member that has no answer of its own passes "no verdict"
    // up, and the caller's fail mode decides.
    match validate_leaves(&leaves, reply, context, FailMode::Closed, None).await {
        Verdict::Found(found) => Ok(found.issues),
        Verdict::Unavailable(u) => Err(Unavailable::new(format!("{}: {}", u.validator, u.reason))),
    }
}

/// A group's repair outside the loop: each member's repair with the issues carrying its name.
fn repair_group(
    group: &dyn Validator,
    text: &str,
    context: &Context,
    issues: &[Issue],
) -> Option<String> {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    let mut current = text.to_string();
    for leaf in &leaves {
        let name = leaf.validator.name();
        let own: Vec<Issue> = issues
            .iter()
            .filter(|i| i.validator == name)
            .cloned()
            .collect();
        if own.is_empty() {
            continue;
        }
        if let Some(repaired) = leaf.validator.repair(&current, context, &own) {
            current = repaired;
        }
    }
    (current != text).then_some(current)
}

/// A group's answer to [`Validator::repair_fixes`]: the member the issue names answers.
fn group_repair_fixes(group: &dyn Validator, issue: &Issue) -> bool {
    let mut leaves = Vec::new();
    push_leaves(group, None, &mut leaves);
    leaves
        .iter()
        .any(|leaf| leaf.validator.name() == issue.validator && leaf.validator.repair_fixes(issue))
}

/// The checkers of a group's members, for a group checked as one (inside a wrapper that is
/// not a group): each member's issues carry its name.
pub(crate) struct GroupCheck<'a> {
    members: Vec<(&'a str, Box<dyn PartialCheck + 'a>)>,
}

impl<'a> GroupCheck<'a> {
    /// A checker over the members of `group` that have one; `None` when none has.
    pub(crate) fn start(
        group: &'a dyn Validator,
        context: &'a Context,
    ) -> Option<Box<dyn PartialCheck + 'a>> {
        let mut leaves = Vec::new();
        push_leaves(group, None, &mut leaves);
        let members: Vec<_> = leaves
            .into_iter()
            .filter_map(|leaf| {
                let check = leaf.validator.partial_check(context)?;
                Some((leaf.validator.name(), check))
            })
            .collect();
        if members.is_empty() {
            None
        } else {
            Some(Box::new(GroupCheck { members }))
        }
    }
}

#[async_trait]
impl PartialCheck for GroupCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        let mut found = Vec::new();
        for (name, check) in &mut self.members {
            found.extend(
                check
                    .check(prefix)
                    .await
                    .into_iter()
                    .map(|i| i.or_validator(name)),
            );
        }
        found
    }
}
