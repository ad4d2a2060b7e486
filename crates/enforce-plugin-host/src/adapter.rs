//! [`HostedValidator`]: a plugin validator behind enforce-core's [`Validator`] trait.

use enforce_core::{
    async_trait, Context, FailMode, Issue, PartialCheck, Severity, Unavailable, Validation,
    Validator,
};
use enforce_plugin_abi::abi_stable::std_types::{ROption, RSlice, RStr, RString};
use enforce_plugin_abi::{
    v1_0, PluginError, PluginErrorKind, PluginIssue, PluginSeverity, ValidatorBox,
};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

/// Issue code raised when a plugin validator panics. The panic is caught at the plugin boundary;
/// the host keeps running.
pub const PLUGIN_PANIC: &str = "PLUGIN_PANIC";

/// How long a plugin call may take unless configured otherwise.
pub const DEFAULT_CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// Where plugin calls run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// On a separate thread from a small pool of detached threads, bounded by the timeout: a
    /// slow or stuck plugin never stalls the async runtime, nor keeps the process from exiting.
    #[default]
    BlockingThread,
    /// On the calling thread, without a timeout: no thread hand-off, for fast plugins you trust.
    Inline,
}

/// How a [`HostedValidator`] calls its plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallOptions {
    /// Longest a call may take before the validator counts as unavailable.
    pub timeout: Duration,
    /// Where calls run.
    pub isolation: Isolation,
    /// The validator's own fail mode when it is unavailable (`None`: the policy's).
    pub fail_mode: Option<FailMode>,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            timeout: DEFAULT_CALL_TIMEOUT,
            isolation: Isolation::BlockingThread,
            fail_mode: None,
        }
    }
}

/// A validator built by a plugin, usable wherever enforce expects a [`Validator`].
///
/// Issues come back with `validator` set to this validator's [`name`](Validator::name). A panic
/// inside the plugin becomes one hard-abort error issue with code [`PLUGIN_PANIC`]; any other
/// plugin error, and a call that exceeds the timeout, make the validator
/// [`Unavailable`] (handled by the fail mode like any unreachable validator).
pub struct HostedValidator {
    name: String,
    validator: String,
    plugin: String,
    object: PluginObject,
    options: CallOptions,
}

/// A plugin's validator object, of the interface version the plugin was built for.
#[derive(Clone)]
pub(crate) enum PluginObject {
    /// Built for 1.0: no partial check.
    V1_0(Arc<v1_0::ValidatorBox>),
    /// Built for this interface.
    Current(Arc<ValidatorBox>),
}

type Issues = enforce_plugin_abi::abi_stable::std_types::RVec<PluginIssue>;

impl PluginObject {
    fn validate(&self, response: &str, context_json: &str) -> Result<Issues, PluginError> {
        let (response, context_json) = (RStr::from(response), RStr::from(context_json));
        match self {
            PluginObject::V1_0(o) => o.validate(response, context_json).into_result(),
            PluginObject::Current(o) => o.validate(response, context_json).into_result(),
        }
    }

    fn repair(
        &self,
        response: &str,
        context_json: &str,
        issues: &[PluginIssue],
    ) -> Result<ROption<RString>, PluginError> {
        let (response, context_json) = (RStr::from(response), RStr::from(context_json));
        let issues = RSlice::from_slice(issues);
        match self {
            PluginObject::V1_0(o) => o.repair(response, context_json, issues).into_result(),
            PluginObject::Current(o) => o.repair(response, context_json, issues).into_result(),
        }
    }

    /// `None`: no partial check (a 1.0 plugin, or a validator without one).
    fn validate_partial(
        &self,
        prefix: &str,
        context_json: &str,
    ) -> Result<Option<Issues>, PluginError> {
        match self {
            PluginObject::V1_0(_) => Ok(None),
            PluginObject::Current(o) => o
                .validate_partial(RStr::from(prefix), RStr::from(context_json))
                .into_result()
                .map(ROption::into_option),
        }
    }
}

impl std::fmt::Debug for HostedValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostedValidator")
            .field("name", &self.name)
            .field("validator", &self.validator)
            .field("plugin", &self.plugin)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// Why a call on another thread gave no answer.
enum CallFailure {
    TimedOut,
    Lost(String),
}

impl HostedValidator {
    pub(crate) fn new(
        name: String,
        validator: String,
        plugin: String,
        object: PluginObject,
        options: CallOptions,
    ) -> Self {
        HostedValidator {
            name,
            validator,
            plugin,
            object,
            options,
        }
    }

    /// The name of the plugin that built it.
    pub fn plugin(&self) -> &str {
        &self.plugin
    }

    /// How calls are made.
    pub fn options(&self) -> &CallOptions {
        &self.options
    }

    /// Calls the plugin on the current thread, without isolation or timeout.
    ///
    /// This is what every mode eventually runs; [`Validator::validate`] adds the blocking
    /// thread and the timeout.
    pub fn validate_now(&self, response: &str, context: &Context) -> Validation {
        let context_json = context_json(context);
        let result = self.object.validate(response, &context_json);
        self.verdict(result)
    }

    fn verdict(&self, result: Result<Issues, PluginError>) -> Validation {
        match result {
            Ok(issues) => Ok(issues.into_iter().map(|i| self.to_core(i)).collect()),
            Err(err) if err.kind == PluginErrorKind::Panic => {
                Ok(vec![self.panic_issue(&err.message)])
            }
            Err(err) => Err(Unavailable::new(format!(
                "plugin validator `{}` (plugin `{}`): {err}",
                self.validator, self.plugin
            ))),
        }
    }

    fn panic_issue(&self, message: &str) -> Issue {
        Issue::error(
            self.name.as_str(),
            PLUGIN_PANIC,
            format!(
                "The plugin validator `{}` (plugin `{}`) panicked: {message}",
                self.validator, self.plugin
            ),
        )
        .with_hint(
            "This is a bug in the plugin, not in the response; report it to the plugin's author.",
        )
        .hard_abort()
    }

    fn to_core(&self, issue: PluginIssue) -> Issue {
        Issue {
            validator: self.name.clone(),
            code: issue.code.into_string(),
            message: issue.message.into_string(),
            hint: issue.hint.into_option().map(RString::into_string),
            severity: match issue.severity {
                PluginSeverity::Error => Severity::Error,
                PluginSeverity::Warning => Severity::Warning,
            },
            repairable: issue.repairable,
            line: issue.line.into_option(),
            column: issue.column.into_option(),
        }
    }

    fn to_plugin(issue: &Issue) -> PluginIssue {
        PluginIssue {
            validator: RString::from(issue.validator.as_str()),
            code: RString::from(issue.code.as_str()),
            message: RString::from(issue.message.as_str()),
            hint: ROption::from(issue.hint.as_deref().map(RString::from)),
            severity: match issue.severity {
                Severity::Error => PluginSeverity::Error,
                Severity::Warning => PluginSeverity::Warning,
            },
            repairable: issue.repairable,
            line: ROption::from(issue.line),
            column: ROption::from(issue.column),
        }
    }

    fn unavailable(&self, failure: CallFailure) -> Unavailable {
        match failure {
            CallFailure::TimedOut => Unavailable::new(format!(
                "plugin validator `{}` (plugin `{}`) did not answer within {} ms",
                self.validator,
                self.plugin,
                self.options.timeout.as_millis()
            )),
            CallFailure::Lost(why) => Unavailable::new(format!(
                "plugin validator `{}` (plugin `{}`): {why}",
                self.validator, self.plugin
            )),
        }
    }

    /// Runs `call` on a pool thread, bounded by the timeout: awaited inside a Tokio runtime,
    /// waited for on this thread outside one.
    async fn isolated<T: Send + 'static>(
        &self,
        call: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, CallFailure> {
        if tokio::runtime::Handle::try_current().is_err() {
            return on_pool_thread(call, self.options.timeout);
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        crate::pool::execute(move || {
            // The caller may have given up (timeout); nothing to do then.
            let _ = tx.send(call());
        })
        .map_err(|e| CallFailure::Lost(format!("cannot start a call thread: {e}")))?;
        match tokio::time::timeout(self.options.timeout, rx).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(CallFailure::Lost(
                "the call thread ended without an answer".into(),
            )),
            Err(_) => Err(CallFailure::TimedOut),
        }
    }
}

/// Runs `call` on a pool thread and blocks this thread for at most `timeout`.
fn on_pool_thread<T: Send + 'static>(
    call: impl FnOnce() -> T + Send + 'static,
    timeout: Duration,
) -> Result<T, CallFailure> {
    let (tx, rx) = mpsc::sync_channel(1);
    crate::pool::execute(move || {
        // The caller may have given up (timeout); nothing to do then.
        let _ = tx.send(call());
    })
    .map_err(|e| CallFailure::Lost(format!("cannot start a call thread: {e}")))?;
    match rx.recv_timeout(timeout) {
        Ok(value) => Ok(value),
        Err(mpsc::RecvTimeoutError::Timeout) => Err(CallFailure::TimedOut),
        Err(mpsc::RecvTimeoutError::Disconnected) => Err(CallFailure::Lost(
            "the call thread ended without an answer".into(),
        )),
    }
}

fn context_json(context: &Context) -> String {
    if context.is_empty() {
        return "{}".to_string();
    }
    // A JSON object always serializes; the fallback only guards the impossible case.
    serde_json::to_string(context.as_map()).unwrap_or_else(|_| "{}".to_string())
}

#[async_trait]
impl Validator for HostedValidator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        if self.options.isolation == Isolation::Inline {
            return self.validate_now(response, context);
        }
        let object = self.object.clone();
        let response = response.to_string();
        let context_json = context_json(context);
        let result = self
            .isolated(move || object.validate(&response, &context_json))
            .await;
        match result {
            Ok(result) => self.verdict(result),
            Err(failure) => Err(self.unavailable(failure)),
        }
    }

    /// Repairs through the plugin. `repair` is synchronous in enforce-core, so with
    /// [`Isolation::BlockingThread`] the calling thread waits (at most the timeout) for a
    /// separate thread. A panic, an error or a timeout all mean "no repair".
    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        let plugin_issues: Vec<PluginIssue> = issues.iter().map(Self::to_plugin).collect();
        let context_json = context_json(context);
        let result = match self.options.isolation {
            Isolation::Inline => self.object.repair(response, &context_json, &plugin_issues),
            Isolation::BlockingThread => {
                let object = self.object.clone();
                let response = response.to_string();
                on_pool_thread(
                    move || object.repair(&response, &context_json, &plugin_issues),
                    self.options.timeout,
                )
                .ok()?
            }
        };
        result.ok()?.into_option().map(RString::into_string)
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.options.fail_mode
    }

    /// The plugin's partial check (interface 1.1). Whether it has one shows at the first call:
    /// a validator without one (every plugin built for 1.0) answers "none" and is not asked
    /// again for this answer.
    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(PluginPartial {
            validator: self,
            context_json: context_json(context),
            active: true,
        }))
    }
}

/// The partial check of a [`HostedValidator`]. The boundary keeps no state, so each call hands
/// the plugin the whole prefix: O(prefix) per check.
struct PluginPartial<'a> {
    validator: &'a HostedValidator,
    context_json: String,
    /// `false` once the plugin said it has no partial check, or failed one.
    active: bool,
}

impl PluginPartial<'_> {
    async fn call(&self, prefix: &str) -> Option<Issues> {
        let v = self.validator;
        let result = if v.options.isolation == Isolation::Inline {
            v.object.validate_partial(prefix, &self.context_json)
        } else {
            let object = v.object.clone();
            let prefix = prefix.to_string();
            let context_json = self.context_json.clone();
            v.isolated(move || object.validate_partial(&prefix, &context_json))
                .await
                .ok()?
        };
        result.ok()?
    }
}

#[async_trait]
impl PartialCheck for PluginPartial<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        if !self.active {
            return Vec::new();
        }
        match self.call(prefix).await {
            Some(issues) => issues
                .into_iter()
                .map(|i| self.validator.to_core(i))
                .collect(),
            // No partial check, or no verdict (a panic, an error, a timeout): a check that
            // cannot answer never cuts an answer short.
            None => {
                self.active = false;
                Vec::new()
            }
        }
    }
}
