//! The strategy statistics of an eval (`enforce eval --stats FILE`): what each re-ask of its
//! trials achieved, per model, profile, issue code and strategy, added to the statistics file
//! `reask: auto` chooses by (and the arm `auto` reads with `--stats-from`).
//!
//! The output directory remembers which trials were added to which file
//! (`stats-added.json`), so a rerun that resumes a finished eval adds none of them twice,
//! while several evals (other seeds, other datasets) add up in one file.

use crate::arms::Arm;
use crate::atomic::write_atomically;
use crate::manifest::Manifest;
use crate::outputs::ATTEMPTS;
use crate::trials::{self, Trial, TrialKey};
use crate::EvalError;
use enforce_core::strategy::StrategyStats;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// The file in an output directory that lists, per statistics file, the trials added to it.
pub const ADDED: &str = "stats-added.json";

/// What [`add_trials`] did: trials whose re-asks were added, and trials left out because an
/// earlier run with the same output directory (or a part it merges) had added them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    /// Trials added now.
    pub added: usize,
    /// Trials already in the file.
    pub already: usize,
}

/// The re-asks of `trials` of `model` (the runner's model name, empty when it names none),
/// each under its trial's profile. Trials of an arm with the word `constrained` are left
/// out: that arm constrains every attempt whatever the profile says, so its re-asks would
/// credit a strategy with what the constraint did (where the profile itself decodes
/// constrained, every other arm's re-asks are constrained too and say it).
pub fn measured(trials: &[Trial], model: &str) -> StrategyStats {
    let mut stats = StrategyStats::default();
    for trial in trials.iter().filter(|t| !forces_constraint(&t.key.arm)) {
        stats.record(model, &trial.profile, &trial.outcome);
    }
    stats
}

/// Whether the arm named `arm` constrains decoding by itself (the word `constrained`).
fn forces_constraint(arm: &str) -> bool {
    Arm::parse(arm).is_ok_and(|arm| arm.constrained)
}

/// Reads the statistics file at `path`; `None` when there is none yet. The error names the
/// file.
pub fn read(path: &Path) -> Result<Option<StrategyStats>, String> {
    match std::fs::read_to_string(path) {
        Ok(text) => StrategyStats::from_json(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(format!(
            "cannot read the statistics file {}: {e}",
            path.display()
        )),
    }
}

/// Adds the re-asks of `trials` to the statistics file at `path` (created when missing; the
/// whole file rewritten through a temporary file and a rename, so a crash loses nothing).
/// With an output directory `dir`, the trials its `stats-added.json` lists for this file are
/// left out, and the added ones listed there.
pub fn add_trials(
    path: &Path,
    trials: &[Trial],
    model: &str,
    dir: Option<&Path>,
) -> Result<Added, EvalError> {
    let mut listed = match dir {
        Some(dir) => read_added(dir).map_err(EvalError::Output)?,
        None => BTreeMap::new(),
    };
    let file = identity(path);
    let done: HashSet<&TrialKey> = listed.get(&file).into_iter().flatten().collect();
    let new: Vec<Trial> = trials
        .iter()
        .filter(|t| !done.contains(&t.key))
        .cloned()
        .collect();
    let already = trials.len() - new.len();
    if new.is_empty() {
        return Ok(Added { added: 0, already });
    }
    let mut total = read(path).map_err(EvalError::Output)?.unwrap_or_default();
    total.merge(&measured(&new, model));
    write_atomically(path, &total.to_json()).map_err(|e| {
        EvalError::Output(format!(
            "cannot write the statistics file {}: {e}",
            path.display()
        ))
    })?;
    if let Some(dir) = dir {
        let keys = listed.entry(file).or_default();
        keys.extend(new.iter().map(|t| t.key.clone()));
        write_added(dir, &listed).map_err(EvalError::Output)?;
    }
    Ok(Added {
        added: new.len(),
        already,
    })
}

/// Adds the trials recorded in the output directory `dir` of a finished eval (or of a merge)
/// to the statistics file at `path`, as [`add_trials`] does.
pub fn add_output(dir: &Path, path: &Path) -> Result<Added, EvalError> {
    let manifest = Manifest::read(dir).map_err(EvalError::Input)?;
    let attempts = dir.join(ATTEMPTS);
    let text = std::fs::read_to_string(&attempts)
        .map_err(|e| EvalError::Input(format!("cannot read {}: {e}", attempts.display())))?;
    let wanted: HashSet<TrialKey> = manifest.keys().into_iter().collect();
    let (kept, _other_evals) = trials::select(trials::records(&text).0, &wanted);
    let trials: Vec<Trial> = kept.into_iter().map(|(_, trial)| trial).collect();
    let model = manifest.setup.model.clone().unwrap_or_default();
    add_trials(path, &trials, &model, Some(dir))
}

/// Lists in `output`'s `stats-added.json` every trial the `parts` (output directories of the
/// shards of one eval) list in theirs, so that `--merge --stats` adds none a part added.
pub(crate) fn carry_added(parts: &[&Path], output: &Path) -> Result<(), String> {
    let mut listed = read_added(output)?;
    for part in parts {
        for (file, keys) in read_added(part)? {
            let known = listed.entry(file).or_default();
            let mut seen: HashSet<TrialKey> = known.iter().cloned().collect();
            known.extend(keys.into_iter().filter(|key| seen.insert(key.clone())));
        }
    }
    if listed.is_empty() {
        return Ok(());
    }
    write_added(output, &listed)
}

/// How `stats-added.json` names a statistics file: the canonical path of its directory (which
/// exists before the file does) joined with its name.
fn identity(path: &Path) -> String {
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let dir = parent
        .canonicalize()
        .unwrap_or_else(|_| parent.to_path_buf());
    match path.file_name() {
        Some(name) => dir.join(name).display().to_string(),
        None => PathBuf::from(path).display().to_string(),
    }
}

fn read_added(dir: &Path) -> Result<BTreeMap<String, Vec<TrialKey>>, String> {
    let path = dir.join(ADDED);
    match std::fs::read_to_string(&path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
        Err(e) => Err(format!("cannot read {}: {e}", path.display())),
    }
}

fn write_added(dir: &Path, listed: &BTreeMap<String, Vec<TrialKey>>) -> Result<(), String> {
    let path = dir.join(ADDED);
    let json = serde_json::to_string(listed).map_err(|e| e.to_string())?;
    write_atomically(&path, &json).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
