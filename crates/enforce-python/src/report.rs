//! `enforce_llm.report()`: the summary of audit files, as `enforce report --format json`
//! prints it, as a dict.

use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyString;
use std::path::PathBuf;

/// Reads the audit files at `path` (one path, or a list of paths: a log and its rotated,
/// possibly gzip'd, predecessors) and returns the report as a dict: the `enforce report
/// --format json` document. `since` (an RFC 3339 UTC time, a date or a span back from now like
/// `24h`) leaves out older records.
#[pyfunction]
#[pyo3(signature = (path, since = None))]
pub fn report<'py>(
    py: Python<'py>,
    path: &Bound<'py, PyAny>,
    since: Option<&str>,
) -> PyResult<Bound<'py, PyAny>> {
    let paths = paths_from(path)?;
    let since_ms = since
        .map(enforce_report::read::parse_since)
        .transpose()
        .map_err(PyValueError::new_err)?;
    let options = enforce_report::Options {
        since_ms,
        bucket: None,
    };
    let report = py
        .detach(|| enforce_report::summarize(&paths, options))
        .map_err(|e| PyOSError::new_err(e.to_string()))?;
    crate::to_python(py, &report)
}

/// One path (`str` or `os.PathLike`) or a list of them.
fn paths_from(path: &Bound<'_, PyAny>) -> PyResult<Vec<PathBuf>> {
    if path.is_instance_of::<PyString>() {
        return Ok(vec![path.extract()?]);
    }
    if let Ok(one) = path.extract::<PathBuf>() {
        return Ok(vec![one]);
    }
    path.extract::<Vec<PathBuf>>().map_err(|_| {
        PyValueError::new_err("path must be a path (str or os.PathLike) or a list of paths")
    })
}
