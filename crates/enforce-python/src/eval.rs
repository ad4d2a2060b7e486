//! `enforce_llm.eval()`: `enforce eval` with a Python callable as the model, returning the
//! summary as a dict (`summary.json`).

use crate::model::PyModel;
use crate::{load, to_python};
use enforce_core::Runner;
use enforce_eval::{strategy_stats, Arm, ConfigFile, Eval, EvalError, Event, Observer, Shard};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

/// Runs `dataset` (JSONL, one case a line, or promptfoo-style YAML, as for `enforce eval`)
/// through a profile once per arm, with `model(messages)` as the model (a plain callable, as
/// for `Profile.run`), and returns the summary as a dict: what `summary.json` holds (per arm:
/// `valid`, `first_attempt_passed`, outcomes, tokens, time; per issue code; every pair of
/// arms compared).
///
/// `arms` is a comma-separated string or a list of arms (`none`, `resample`, `feedback`,
/// `feedback+abort`, `repair-first`, ...). Each (case, repeat) has the seed `seed` + its index,
/// the same in every arm (in the records: a Python model is not given it). `concurrency`
/// trials run at once, on threads of their own. With `output_dir` the eval writes what
/// `enforce eval -o` writes there (and resumes the trials already recorded there); without,
/// nothing is written.
///
/// With `stats` (a path) the re-asks the trials measured are added to that statistics file
/// (created when missing), as `enforce eval --stats` adds them; `stats_from` (a path) is the
/// statistics file the arm `auto` chooses by (required by it), as `--stats-from`. The model
/// is unnamed: the statistics are keyed by the empty model name.
///
/// Raises `ConfigError` for the configuration, `ValueError` for bad input (the dataset, an
/// arm, an unknown profile), `OSError` when the results cannot be written.
#[pyfunction]
#[pyo3(signature = (
    dataset, model, config = None, profile = None, arms = None, repeats = 1, seed = 0,
    concurrency = 1, output_dir = None, judge = None, stats = None, stats_from = None
))]
#[allow(clippy::too_many_arguments)]
pub fn eval<'py>(
    py: Python<'py>,
    dataset: PathBuf,
    model: Py<PyAny>,
    config: Option<PathBuf>,
    profile: Option<String>,
    arms: Option<&Bound<'py, PyAny>>,
    repeats: u32,
    seed: u64,
    concurrency: usize,
    output_dir: Option<PathBuf>,
    judge: Option<Py<PyAny>>,
    stats: Option<PathBuf>,
    stats_from: Option<PathBuf>,
) -> PyResult<Bound<'py, PyAny>> {
    if repeats == 0 || concurrency == 0 {
        return Err(PyValueError::new_err(
            "repeats and concurrency must be at least 1",
        ));
    }
    let arms = Arm::parse_list(&arm_list(arms)?).map_err(to_py_error)?;
    let stats_from = match stats_from {
        Some(path) => Some(Arc::new(
            strategy_stats::read(&path)
                .map_err(PyValueError::new_err)?
                .ok_or_else(|| {
                    PyValueError::new_err(format!("stats_from {}: no such file", path.display()))
                })?,
        )),
        None => None,
    };
    let (profiles, source) = load::profiles(py, config.as_deref(), judge)?;
    let eval = Eval {
        dataset,
        profile: profile.unwrap_or_else(|| profiles.default_name().to_string()),
        arms,
        repeats,
        seed,
        params: serde_json::Map::new(),
        concurrency,
        shard: Shard::WHOLE,
        output: output_dir,
        runner_kind: "python".into(),
        model: None,
        // A Python callable: nothing about its model is known here (provenance says `python`).
        runner_provenance: None,
        config: source.map(|s| ConfigFile {
            path: s.path().display().to_string(),
            text: s.original_text().to_string(),
        }),
        stats,
        stats_from,
        split: None,
    };
    let model = Arc::new(PyModel::new(model));
    let runner: Arc<dyn Runner> = Arc::clone(&model) as Arc<dyn Runner>;
    let notes = Arc::new(Mutex::new(Vec::new()));
    let summary = py.detach(|| {
        // A Python model is given the messages only: no decoding constraint reaches it.
        eval.run(
            &profiles,
            runner,
            &|_, _, _| None,
            observer(Arc::clone(&notes)),
        )
    });
    if let Some(interrupt) = model.take_interrupt() {
        return Err(interrupt);
    }
    load::warn(py, notes.lock().map(|n| n.clone()).unwrap_or_default())?;
    to_python(py, &summary.map_err(to_py_error)?)
}

/// `arms` as the comma-separated list [`Arm::parse_list`] reads: a string as it is, a list of
/// strings joined, the default arms without one.
fn arm_list(arms: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    let Some(arms) = arms.filter(|a| !a.is_none()) else {
        return Ok(enforce_eval::arms::DEFAULT.to_string());
    };
    if let Ok(text) = arms.extract::<String>() {
        return Ok(text);
    }
    arms.extract::<Vec<String>>()
        .map(|list| list.join(","))
        .map_err(|_| PyValueError::new_err("arms must be a string or a list of strings"))
}

/// The events a caller should hear of, as warnings raised when the eval returns: records of
/// another eval in `output_dir`, left out of the summary.
fn observer(notes: Arc<Mutex<Vec<String>>>) -> Observer {
    Arc::new(move |event| {
        if matches!(
            event,
            Event::OtherRecords { .. } | Event::AutoWithoutData { .. }
        ) {
            if let Ok(mut notes) = notes.lock() {
                notes.push(event.to_string());
            }
        }
    })
}

fn to_py_error(error: EvalError) -> PyErr {
    match error {
        EvalError::Input(message) => PyValueError::new_err(message),
        runtime @ EvalError::Runtime(_) => PyRuntimeError::new_err(runtime.to_string()),
        other => PyOSError::new_err(other.to_string()),
    }
}
