//! # enforce-python
//!
//! The native half of the Python package `enforce_llm` (PyPI `enforce-llm`): the profiles of
//! `enforce.yaml` and the built-in ones, validation and repairs, the re-ask loop with a Python
//! callable as the model, and the report of audit files, all in this process. The Python half
//! (`python/enforce-llm/enforce_llm/__init__.py`) adds the `Enforcer` class, which adapts
//! `async` callables and async iterators to the synchronous callable this module drives.
//!
//! Built by maturin (`cargo xtask wheels`) as an abi3 extension module for CPython 3.9 and
//! later; its tests are the pytest suite in `python/tests`, run by `cargo xtask test`.
#![deny(missing_docs)]

mod eval;
mod load;
mod model;
mod outcome;
mod report;

use enforce_core::{Check, Context, Enforcer, Message, Request};
use outcome::{Issue, Outcome};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

pyo3::create_exception!(
    enforce_llm,
    ConfigError,
    PyValueError,
    "A configuration file or profile that cannot be used. The message is the one the `enforce` \
     CLI prints: `file:line:column: key: what is wrong` when the place is known."
);

/// The runtime the loop and the validators run on: one per process, started on first use. The
/// loop runs on the calling thread (`block_on`); its worker serves what validators spawn
/// (plugin calls on blocking threads, HTTP requests, timers).
fn runtime() -> PyResult<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Runtime, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("enforce-llm")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| {
            pyo3::exceptions::PyRuntimeError::new_err(format!(
                "cannot start the async runtime: {e}"
            ))
        })
}

/// A profile loaded from the built-in ones or a configuration file: validators, policy and
/// the loop, ready to check text or to ask a model.
///
/// `Profile(profile=None, config=None)`: `config` is the path of an `enforce.yaml` (default:
/// `./enforce.yaml` when it exists, else the built-in profiles `chat` and `adr`); `profile`
/// names one of its profiles (default: the configuration's default, else `chat`). Plugins load
/// from the configuration's `plugin_dirs`, `ENFORCE_PLUGIN_PATH` and the per-user directory,
/// as for the CLI. A file is read again when it changes.
///
/// `judge` is the model of the profile's `llm_judge` validators (their `runner:` is what the
/// CLI and the proxy ask): a callable `judge(messages) -> str` (or an iterator of `str`), given
/// the judge's question as a list of message dicts. Without it such a validator is a
/// `ConfigError`.
///
/// Raises `ConfigError` with the CLI's `file:line:column: key: message`.
#[pyclass(frozen, module = "enforce_llm._native")]
struct Profile {
    loaded: Arc<load::Loaded>,
}

#[pymethods]
impl Profile {
    #[new]
    #[pyo3(signature = (profile = None, config = None, judge = None))]
    fn new(
        py: Python<'_>,
        profile: Option<String>,
        config: Option<PathBuf>,
        judge: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        Ok(Profile {
            loaded: load::profile(py, profile.as_deref(), config.as_deref(), judge)?,
        })
    }

    /// The profile's name.
    #[getter]
    fn name(&self) -> &str {
        &self.loaded.name
    }

    /// The names of the profile's validators, in the order they run.
    #[getter]
    fn validators(&self) -> Vec<String> {
        self.loaded
            .enforcer
            .validators()
            .iter()
            .map(|v| v.name().to_string())
            .collect()
    }

    /// Validates `text` without a model; `context` (a dict of JSON values) is what the
    /// validators may read (e.g. `company_name`). `status` is `passed` or `unresolved`
    /// (`unavailable` when a fail-closed validator gave no verdict).
    #[pyo3(signature = (text, context = None))]
    fn check(
        &self,
        py: Python<'_>,
        text: String,
        context: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Outcome> {
        check_text(py, &self.loaded.enforcer, text, context, Check::Report)
    }

    /// Validates `text` and applies the deterministic repairs of the validators that found
    /// errors: `status` is `repaired` and `answer` the repaired text when that made it clean.
    #[pyo3(signature = (text, context = None))]
    fn repair(
        &self,
        py: Python<'_>,
        text: String,
        context: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Outcome> {
        check_text(py, &self.loaded.enforcer, text, context, Check::Repair)
    }

    /// Runs the loop: asks `model` with `messages` (a prompt string or a list of
    /// `{"role", "content"}` dicts), validates each answer, asks again with the feedback while
    /// the policy allows, repairs, and returns the outcome.
    ///
    /// `model(messages)` gets the conversation as a list of dicts (a re-ask holds the previous
    /// answer and a user message with the feedback) and returns the answer as a string, or an
    /// iterator of string chunks; the loop stops consuming it (and calls its `close()`) when
    /// an early abort cuts the answer. An exception from `model` is a failed attempt
    /// (`outcome.error`); `KeyboardInterrupt` and `SystemExit` propagate.
    #[pyo3(signature = (messages, model, context = None))]
    fn run(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        model: Py<PyAny>,
        context: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Outcome> {
        let request = request_from(py, messages)?;
        let context = context_from(py, context)?;
        let runner = model::PyModel::new(model);
        let enforcer = Arc::clone(&self.loaded.enforcer);
        let runtime = runtime()?;
        let outcome = py.detach(|| runtime.block_on(enforcer.run(&runner, &request, &context)));
        if let Some(interrupt) = runner.take_interrupt() {
            return Err(interrupt);
        }
        Ok(Outcome::new(outcome))
    }

    fn __repr__(&self) -> String {
        format!("Profile({:?})", self.loaded.name)
    }
}

/// Validates `text` against a profile without a model. See `Profile` for `profile`, `config`,
/// `context` and `judge` (with a `judge`, the file is loaded on each call: keep a `Profile`).
#[pyfunction]
#[pyo3(signature = (text, profile = None, config = None, context = None, judge = None))]
fn check(
    py: Python<'_>,
    text: String,
    profile: Option<String>,
    config: Option<PathBuf>,
    context: Option<&Bound<'_, PyAny>>,
    judge: Option<Py<PyAny>>,
) -> PyResult<Outcome> {
    let loaded = load::profile(py, profile.as_deref(), config.as_deref(), judge)?;
    check_text(py, &loaded.enforcer, text, context, Check::Report)
}

/// Validates `text` and applies the repairs. See `Profile.repair` and `check`.
#[pyfunction]
#[pyo3(signature = (text, profile = None, config = None, context = None, judge = None))]
fn repair(
    py: Python<'_>,
    text: String,
    profile: Option<String>,
    config: Option<PathBuf>,
    context: Option<&Bound<'_, PyAny>>,
    judge: Option<Py<PyAny>>,
) -> PyResult<Outcome> {
    let loaded = load::profile(py, profile.as_deref(), config.as_deref(), judge)?;
    check_text(py, &loaded.enforcer, text, context, Check::Repair)
}

fn check_text(
    py: Python<'_>,
    enforcer: &Arc<Enforcer>,
    text: String,
    context: Option<&Bound<'_, PyAny>>,
    mode: Check,
) -> PyResult<Outcome> {
    let context = context_from(py, context)?;
    let runtime = runtime()?;
    let outcome = py.detach(|| runtime.block_on(enforcer.check(&text, &context, mode)));
    Ok(Outcome::new(outcome))
}

/// A prompt string, or a list of message dicts (`role`: system, user, assistant or tool;
/// `content`: str), as a request.
fn request_from(py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<Request> {
    if let Ok(prompt) = messages.cast::<PyString>() {
        return Ok(Request::prompt(prompt.to_cow()?));
    }
    let messages: Vec<Message> = from_json(py, messages, "messages").map_err(|e| {
        PyValueError::new_err(format!(
            "messages must be a prompt string or a list of {{\"role\", \"content\"}} dicts: {e}"
        ))
    })?;
    if messages.is_empty() {
        return Err(PyValueError::new_err("messages is an empty list"));
    }
    Ok(Request {
        messages,
        ..Request::default()
    })
}

/// A dict of JSON values as the validators' context.
fn context_from(py: Python<'_>, context: Option<&Bound<'_, PyAny>>) -> PyResult<Context> {
    let mut out = Context::new();
    let Some(context) = context.filter(|c| !c.is_none()) else {
        return Ok(out);
    };
    if !context.is_instance_of::<PyDict>() {
        return Err(PyValueError::new_err("context must be a dict"));
    }
    let map: serde_json::Map<String, serde_json::Value> =
        from_json(py, context, "context").map_err(PyValueError::new_err)?;
    for (key, value) in map {
        out.insert(key, value);
    }
    Ok(out)
}

/// A Python value read as `T` through its JSON form (`json.dumps`), so every JSON-able value
/// works and the error names what did not fit.
fn from_json<T: serde::de::DeserializeOwned>(
    py: Python<'_>,
    value: &Bound<'_, PyAny>,
    what: &str,
) -> Result<T, String> {
    let json = py
        .import("json")
        .and_then(|json| json.call_method1("dumps", (value,)))
        .map_err(|e| format!("{what} is not JSON-serializable: {e}"))?;
    let text: String = json.extract().map_err(|e: PyErr| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| e.to_string())
}

/// `value` as the Python value of its JSON form (dicts, lists, str, int, float, bool, None).
fn to_python<'py, T: serde::Serialize>(py: Python<'py>, value: &T) -> PyResult<Bound<'py, PyAny>> {
    let json = serde_json::to_string(value)
        .map_err(|e| PyValueError::new_err(format!("cannot serialize the result: {e}")))?;
    py.import("json")?.call_method1("loads", (json,))
}

/// The native module `enforce_llm._native`.
#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Profile>()?;
    m.add_class::<Outcome>()?;
    m.add_class::<Issue>()?;
    m.add_function(wrap_pyfunction!(check, m)?)?;
    m.add_function(wrap_pyfunction!(repair, m)?)?;
    m.add_function(wrap_pyfunction!(report::report, m)?)?;
    m.add_function(wrap_pyfunction!(eval::eval, m)?)?;
    m.add("ConfigError", m.py().get_type::<ConfigError>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    Ok(())
}
