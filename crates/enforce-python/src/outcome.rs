//! `Outcome` and `Issue` as Python sees them. The fields are read from the core's
//! [`enforce_core::Outcome`] when asked for, so a check that nobody inspects costs no more
//! than its verdict.

use pyo3::prelude::*;

/// One finding of one validator: `code` is stable (grep for it, count it), `message` says
/// what is wrong, `hint` what to do, `line`/`column` where (1-based) when known, `severity`
/// is `error` or `warning`.
#[pyclass(frozen, get_all, module = "enforce_llm")]
#[derive(Debug, Clone)]
pub struct Issue {
    /// Stable upper-case issue code, e.g. `FORBIDDEN_PATTERN`.
    code: String,
    /// What is wrong.
    message: String,
    /// How to fix it, when the validator knows.
    hint: Option<String>,
    /// 1-based line in the text.
    line: Option<u32>,
    /// 1-based column (in characters) within `line`.
    column: Option<u32>,
    /// `error` or `warning`.
    severity: &'static str,
    /// The validator that found it.
    validator: String,
    /// `False` for a hard abort: asking the model again cannot help.
    repairable: bool,
}

impl Issue {
    fn new(issue: &enforce_core::Issue) -> Self {
        Issue {
            code: issue.code.clone(),
            message: issue.message.clone(),
            hint: issue.hint.clone(),
            line: issue.line,
            column: issue.column,
            severity: issue.severity.as_str(),
            validator: issue.validator.clone(),
            repairable: issue.repairable,
        }
    }
}

#[pymethods]
impl Issue {
    fn __repr__(&self) -> String {
        let place = self.line.map(|l| format!(", line={l}")).unwrap_or_default();
        format!(
            "Issue({} {}: {:?}{place})",
            self.severity, self.code, self.message
        )
    }
}

/// The verdict of a check or a run.
///
/// - `status`: `passed`, `repaired`, `unresolved`, `unavailable` or `aborted` (stable strings).
/// - `ok`: `True` for `passed` and `repaired` (also the outcome's truth value).
/// - `answer`: the text that passed or was repaired, else the last answer as it came (check
///   `ok` before using it), or `None` when there was none.
/// - `issues`: the errors left in `answer`, then the warnings about it.
/// - `attempts`: how many answers the model gave (0 for a check without a model).
/// - `to_json()`: the whole audit record, as `enforce` writes it.
#[pyclass(frozen, module = "enforce_llm")]
#[derive(Debug)]
pub struct Outcome {
    inner: enforce_core::Outcome,
}

impl Outcome {
    /// The Python view of `inner`.
    pub fn new(inner: enforce_core::Outcome) -> Self {
        Outcome { inner }
    }
}

#[pymethods]
impl Outcome {
    /// `passed`, `repaired`, `unresolved`, `unavailable` or `aborted`.
    #[getter]
    fn status(&self) -> &'static str {
        self.inner.status.as_str()
    }

    /// `True` when the answer meets the contract (`passed` or `repaired`).
    #[getter]
    fn ok(&self) -> bool {
        self.inner.status.is_success()
    }

    fn __bool__(&self) -> bool {
        self.ok()
    }

    /// The final text (see the class documentation), or `None`.
    #[getter]
    fn answer(&self) -> Option<&str> {
        self.inner.response.as_deref()
    }

    /// The errors left in `answer`, then the warnings about it.
    #[getter]
    fn issues(&self) -> Vec<Issue> {
        self.inner
            .issues
            .iter()
            .chain(&self.inner.warnings)
            .map(Issue::new)
            .collect()
    }

    /// The issue codes of `issues`, in order.
    #[getter]
    fn codes(&self) -> Vec<&str> {
        self.inner
            .issues
            .iter()
            .chain(&self.inner.warnings)
            .map(|i| i.code.as_str())
            .collect()
    }

    /// How many answers the model gave (0 for a check without a model).
    #[getter]
    fn attempts(&self) -> usize {
        if self.inner.stop_reason == enforce_core::StopReason::CheckOnly {
            0
        } else {
            self.inner.attempts.len()
        }
    }

    /// Why the loop stopped: `clean`, `retries_exhausted`, `hard_abort`, `no_progress`,
    /// `budget`, `runner_failed`, `validator_unavailable`, `check_only`, ...
    #[getter]
    fn stop_reason(&self) -> String {
        serde_json::to_value(&self.inner.stop_reason)
            .ok()
            .and_then(|v| v.get("reason").and_then(|r| r.as_str()).map(str::to_string))
            .unwrap_or_default()
    }

    /// The validators whose repairs made `answer` (empty unless `status` is `repaired`).
    #[getter]
    fn repairs(&self) -> Vec<String> {
        if self.inner.status != enforce_core::Status::Repaired {
            return Vec::new();
        }
        self.inner
            .attempts
            .iter()
            .rev()
            .find(|a| !a.repairs.is_empty())
            .map(|a| a.repairs.clone())
            .unwrap_or_default()
    }

    /// The model's failure that ended the loop (the callable's exception as
    /// `Type: message`), or `None`.
    #[getter]
    fn error(&self) -> Option<String> {
        self.inner.runner_error().map(|e| e.to_string())
    }

    /// The audit record of the whole enforcement as one JSON line (every attempt, its issues,
    /// timings and repairs), as `enforce` writes it.
    fn to_json(&self) -> String {
        self.inner.to_json_line()
    }

    fn __repr__(&self) -> String {
        format!(
            "Outcome(status={:?}, issues={:?}, attempts={})",
            self.status(),
            self.codes(),
            self.attempts()
        )
    }
}
