//! Profiles as the CLI loads them: `enforce.yaml` (or the built-in profiles), the plugins of the
//! usual directories, errors with file:line:key. Loaded profiles are kept per (file, profile)
//! and loaded again when the file or the `reask: auto` statistics file it names changes, so a
//! call per check costs a `stat` or two, not a parse.
//!
//! The runners of validators that ask a model (`llm_judge`) live in crates this package does
//! not link: from Python, the judge is a callable (`judge=`), the runner of every such
//! validator of the profile; without one, such a validator is a `ConfigError` that says so.

use crate::model::PyModel;
use crate::ConfigError as PyConfigError;
use enforce_config::config::{Config, ConfigError, ConfigSource, ValidationSections};
use enforce_config::{BuildEnv, BuildError, Profile, ProfileSet, Registry, RunnerFactory};
use enforce_core::{Enforcer, Runner};
use enforce_plugin_host::{plugin_search_path_from_env, PluginHost};
use pyo3::exceptions::{PyRuntimeWarning, PyTypeError};
use pyo3::prelude::*;
use std::collections::HashMap;
use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

/// The file the CLI reads when no configuration is named.
const DEFAULT_CONFIG_FILE: &str = "enforce.yaml";

/// One profile, ready to use.
#[derive(Debug)]
pub struct Loaded {
    /// Its name.
    pub name: String,
    /// Its validators, policy and loop.
    pub enforcer: Arc<Enforcer>,
}

/// A file's modification time and size.
type Stamp = Option<(SystemTime, u64)>;

/// A file a loaded profile was built from, stamped before it was read (a write in between
/// makes the next call load it again).
type Source = (PathBuf, Stamp);

type Key = (Option<PathBuf>, Option<String>);

/// The profiles loaded so far, each with the files it was built from: the configuration file
/// and the `reask: auto` statistics file it names (an eval adds to that one).
type Cache = Mutex<HashMap<Key, (Vec<Source>, Arc<Loaded>)>>;

fn cache() -> &'static Cache {
    static CACHE: std::sync::OnceLock<Cache> = std::sync::OnceLock::new();
    CACHE.get_or_init(Default::default)
}

/// Whether each of `sources` is as it was when it was read.
fn unchanged(sources: &[Source]) -> bool {
    sources.iter().all(|(path, seen)| stamp(path) == *seen)
}

fn stamp(path: &Path) -> Stamp {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// The runners of `llm_judge` validators: the Python callable given as `judge=`, or, without
/// one, an error that says how to give it.
struct JudgeRunners(Option<Py<PyAny>>);

impl RunnerFactory for JudgeRunners {
    fn runner(&self, _config: &serde_json::Value) -> Result<Arc<dyn Runner>, String> {
        match &self.0 {
            Some(judge) => Ok(Arc::new(PyModel::new(Python::attach(|py| {
                judge.clone_ref(py)
            })))),
            None => Err(
                "this validator asks a model, and from Python its `runner:` is not built \
                 (the runners are not part of the package): pass `judge=`, a callable \
                 `judge(messages) -> str`, to Profile, Enforcer, check or repair"
                    .into(),
            ),
        }
    }
}

/// A judge is called from inside a check, where no event loop of the caller's can be waited
/// on: an `async def` judge is refused at once rather than failing every verdict later.
fn refuse_async_judge(py: Python<'_>, judge: &Bound<'_, PyAny>) -> PyResult<()> {
    if !judge.is_callable() {
        return Err(PyTypeError::new_err(
            "judge must be a callable judge(messages) -> str",
        ));
    }
    let is_async: bool = py
        .import("inspect")?
        .call_method1("iscoroutinefunction", (judge,))?
        .extract()?;
    if is_async {
        return Err(PyTypeError::new_err(
            "judge must be a plain function returning str (or an iterator of str), not an \
             `async def` function: llm_judge verdicts are asked from inside the check",
        ));
    }
    Ok(())
}

/// The judge given, if any (`None` passed from Python is none), refused when it is async.
fn judge_of(py: Python<'_>, judge: Option<Py<PyAny>>) -> PyResult<Option<Py<PyAny>>> {
    let judge = judge.filter(|j| !j.is_none(py));
    if let Some(judge) = &judge {
        refuse_async_judge(py, judge.bind(py))?;
    }
    Ok(judge)
}

/// The profile `profile` of `config` (see `Profile` in lib.rs for the defaults), from the
/// cache while the file is unchanged. Plugin load failures and name clashes are Python
/// `RuntimeWarning`s, as the CLI prints them as warnings. With a `judge`, the profile is built
/// for it and not cached (the caller keeps it: a `Profile` or an `Enforcer`).
pub fn profile(
    py: Python<'_>,
    profile: Option<&str>,
    config: Option<&Path>,
    judge: Option<Py<PyAny>>,
) -> PyResult<Arc<Loaded>> {
    let judge = judge_of(py, judge)?;
    let file = config_file(config);
    // The same relative name means another file after a change of directory.
    let file = file.map(|f| std::path::absolute(&f).unwrap_or(f));
    let key = (file.clone(), profile.map(str::to_string));
    let cached = judge.is_none();
    if cached {
        let hit = cache().lock().ok().and_then(|c| {
            let (sources, loaded) = c.get(&key)?;
            unchanged(sources).then(|| Arc::clone(loaded))
        });
        if let Some(loaded) = hit {
            return Ok(loaded);
        }
    }
    let config_source = file.as_deref().map(|f| (f.to_path_buf(), stamp(f)));
    let mut warnings = Vec::new();
    let loaded = load(profile, file.as_deref(), JudgeRunners(judge), &mut warnings);
    warn(py, warnings)?;
    let (loaded, stats_source) = loaded.map_err(|e| PyConfigError::new_err(e.to_string()))?;
    let loaded = Arc::new(loaded);
    if cached {
        if let Ok(mut cache) = cache().lock() {
            let sources = config_source.into_iter().chain(stats_source).collect();
            cache.insert(key, (sources, Arc::clone(&loaded)));
        }
    }
    Ok(loaded)
}

/// `profile` of `file`, with the `reask: auto` statistics file its chooser reads, if any.
fn load(
    profile: Option<&str>,
    file: Option<&Path>,
    judges: JudgeRunners,
    warnings: &mut Vec<String>,
) -> Result<(Loaded, Option<Source>), ConfigError> {
    let (profiles, source) = profile_set(file, judges, warnings)?;
    let name = profile
        .unwrap_or_else(|| profiles.default_name())
        .to_string();
    let Some(found) = profiles.get(&name) else {
        return Err(ConfigError {
            file: file.map(Path::to_path_buf),
            line: None,
            column: None,
            key: None,
            message: format!(
                "no profile named '{name}' (profiles: {})",
                profiles.names().collect::<Vec<_>>().join(", ")
            ),
        });
    };
    let stats_source = found
        .reask_auto()
        .and_then(|auto| auto.stats.as_deref())
        .map(|path| (path.to_path_buf(), stamp(path)));
    let enforcer = with_chooser(found, source.as_ref())?;
    let loaded = Loaded {
        enforcer: Arc::new(enforcer),
        name,
    };
    Ok((loaded, stats_source))
}

/// The model name a Python model's `reask: auto` statistics are under: a callable names no
/// model, and `enforce_llm.eval(stats=...)` writes its statistics under this same name.
const CALLABLE_MODEL: &str = "";

/// `profile`'s enforcer; with `reask: auto` and a statistics file (`reask_auto.stats`), with
/// the chooser over them, as the CLI gives it. An unreadable file is an error located at the
/// key that names it.
fn with_chooser(profile: &Profile, source: Option<&ConfigSource>) -> Result<Enforcer, ConfigError> {
    let enforcer = profile.enforcer();
    let Some(auto) = profile.reask_auto() else {
        return Ok(enforcer);
    };
    let stats = auto.read_stats().map_err(|e| match source {
        Some(source) => source.build_error(e),
        None => unlocated(e),
    })?;
    Ok(match stats {
        Some(stats) => {
            let chooser = auto.chooser(&stats, CALLABLE_MODEL, profile.name());
            enforcer.with_chooser(Arc::new(chooser))
        }
        None => enforcer,
    })
}

/// Every profile of `config` (see `Profile` in lib.rs for the default file), not cached: for
/// `eval`, whose cases may name their own profiles. Warnings as for [`profile`]; also the
/// configuration file the profiles come from, if any.
pub fn profiles(
    py: Python<'_>,
    config: Option<&Path>,
    judge: Option<Py<PyAny>>,
) -> PyResult<(ProfileSet, Option<ConfigSource>)> {
    let judge = judge_of(py, judge)?;
    let file = config_file(config);
    let mut warnings = Vec::new();
    let loaded = profile_set(file.as_deref(), JudgeRunners(judge), &mut warnings);
    warn(py, warnings)?;
    loaded.map_err(|e| PyConfigError::new_err(e.to_string()))
}

/// The configuration file named, else `./enforce.yaml` when it exists.
fn config_file(config: Option<&Path>) -> Option<PathBuf> {
    match config {
        Some(path) => Some(path.to_path_buf()),
        None => Some(PathBuf::from(DEFAULT_CONFIG_FILE)).filter(|p| p.exists()),
    }
}

/// `warnings` as Python `RuntimeWarning`s: plugin load failures and name clashes, as the CLI
/// prints them as warnings.
pub fn warn(py: Python<'_>, warnings: Vec<String>) -> PyResult<()> {
    for warning in warnings {
        let message = CString::new(warning.replace('\0', " ")).unwrap_or_default();
        PyErr::warn(py, &py.get_type::<PyRuntimeWarning>(), &message, 1)?;
    }
    Ok(())
}

/// The profiles of `file` (the built-in ones without a file) with the plugins of the usual
/// directories, and the file's source.
fn profile_set(
    file: Option<&Path>,
    judges: JudgeRunners,
    warnings: &mut Vec<String>,
) -> Result<(ProfileSet, Option<ConfigSource>), ConfigError> {
    // The binary's own sections (`runner`, `models`, `server`) are accepted unread, so one
    // file serves the CLI, the proxy and Python.
    let (source, config) = match file {
        Some(path) => {
            let source = ConfigSource::read(path)?;
            let parsed: ValidationSections = source.parse()?;
            (Some(source), Config::from(parsed))
        }
        None => (None, Config::default()),
    };
    let base = source.as_ref().map(ConfigSource::base_dir);
    let plugin_dirs: Vec<PathBuf> = config
        .plugin_dirs
        .iter()
        .map(|d| match &base {
            Some(base) if d.is_relative() => base.join(d),
            _ => d.clone(),
        })
        .collect();
    let host = PluginHost::load_dirs(&plugin_search_path_from_env(&plugin_dirs));
    for failure in host.failures() {
        warnings.push(format!(
            "plugin {} not loaded: {}",
            failure.path.display(),
            failure.error
        ));
    }
    let mut registry = Registry::builtin();
    for conflict in host.register_into(&mut registry) {
        warnings.push(conflict.to_string());
    }
    let profiles = match &source {
        None => ProfileSet::builtin(&registry, None).map_err(unlocated)?,
        Some(source) => {
            let env = BuildEnv::new(source.base_dir()).with_runners(Arc::new(judges));
            ProfileSet::from_config(&config, &registry, &env).map_err(|e| source.build_error(e))?
        }
    };
    Ok((profiles, source))
}

/// An error of the built-in profiles, which come from no file.
fn unlocated(e: BuildError) -> ConfigError {
    ConfigError {
        file: None,
        line: None,
        column: None,
        key: Some(e.key),
        message: e.message,
    }
}
