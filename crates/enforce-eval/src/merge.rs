//! `enforce eval --merge DIR...`: the results of a whole eval from the output directories of
//! its shards. The parts' `eval.json` must describe one eval split into parts 0..N, each part
//! given once and complete; their audit records are then summarised as one run's are, and the
//! merged directory is itself the output of a whole run (it can be merged or resumed).

use super::manifest::Manifest;
use super::outputs::{self, write_file, ANSWERS, ATTEMPTS};
use super::provenance::add_machines;
use super::shard::Shard;
use super::strategy_stats;
use super::summary::Summary;
use super::trials::{self, Trial, TrialKey};
use super::EvalError;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};

/// One part: its directory and what it ran.
struct Part {
    dir: PathBuf,
    manifest: Manifest,
}

/// Merges the parts in `dirs` (the output directories of every shard of one eval) into
/// `output`, as the outputs of the whole eval; returns its summary. [`EvalError::Input`] when
/// the parts do not make one whole eval or cannot be read (nothing is written then).
pub fn merge(dirs: &[PathBuf], output: &Path) -> Result<Summary, EvalError> {
    let mut parts = dirs
        .iter()
        .map(|dir| {
            Manifest::read(dir).map(|manifest| Part {
                dir: dir.clone(),
                manifest,
            })
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(EvalError::Input)?;
    one_eval(&parts).map_err(EvalError::Input)?;
    every_shard_once(&parts).map_err(EvalError::Input)?;
    parts.sort_by_key(|part| part.manifest.shard());
    let mut records = Vec::new();
    for part in &parts {
        records.extend(records_of(part).map_err(EvalError::Input)?);
    }
    if let Some(part) = parts.iter().find(|part| same_dir(&part.dir, output)) {
        return Err(EvalError::Input(format!(
            "-o {} is one of the parts; merge into a directory of its own",
            part.dir.display()
        )));
    }
    std::fs::create_dir_all(output).map_err(|e| {
        EvalError::Input(format!(
            "cannot create the output directory {}: {e}",
            output.display()
        ))
    })?;
    write(&parts, records, output).map_err(EvalError::Output)
}

/// Every part ran the same eval as the first.
fn one_eval(parts: &[Part]) -> Result<(), String> {
    let Some((first, rest)) = parts.split_first() else {
        return Err("--merge needs the output directory of every part".into());
    };
    for part in rest {
        if let Some(field) = first.manifest.difference(&part.manifest) {
            return Err(format!(
                "{} and {} are not parts of one eval: they differ in {field}",
                first.dir.display(),
                part.dir.display()
            ));
        }
    }
    Ok(())
}

/// The parts split the dataset the same way and each part is given once.
fn every_shard_once(parts: &[Part]) -> Result<(), String> {
    let mut by_index: BTreeMap<u32, &Path> = BTreeMap::new();
    let Some(first) = parts.first() else {
        return Ok(());
    };
    let count = first.manifest.shard().count;
    for part in parts {
        let shard = part.manifest.shard();
        if shard.count != count {
            return Err(format!(
                "{} is shard {} but {} is shard {shard}: the parts split the dataset into \
                 different numbers of parts",
                first.dir.display(),
                first.manifest.shard(),
                part.dir.display()
            ));
        }
        if let Some(earlier) = by_index.insert(shard.index, &part.dir) {
            return Err(format!(
                "shard {shard} is given twice: {} and {}",
                earlier.display(),
                part.dir.display()
            ));
        }
    }
    let missing: Vec<String> = (0..count)
        .filter(|index| !by_index.contains_key(index))
        .map(|index| Shard { index, count }.to_string())
        .collect();
    if missing.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "shard {} missing: give the -o directory of every part, 0/{count} to {}/{count}",
            missing.join(", "),
            count - 1
        ))
    }
}

/// The audit records of the trials a part owes (its lines and trials); an error when some
/// are not there yet.
fn records_of(part: &Part) -> Result<Vec<(String, Trial)>, String> {
    let path = part.dir.join(ATTEMPTS);
    let text = std::fs::read_to_string(&path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let wanted: HashSet<TrialKey> = part.manifest.keys().into_iter().collect();
    let (kept, _other_evals) = trials::select(trials::records(&text).0, &wanted);
    if kept.len() < wanted.len() {
        return Err(format!(
            "{}: shard {} has {} of its {} trials; it stopped early: rerun its command with the \
             same -o to finish it, then merge",
            part.dir.display(),
            part.manifest.shard(),
            kept.len(),
            wanted.len()
        ));
    }
    Ok(kept)
}

/// Whether `a` and `b` name the same existing directory.
fn same_dir(a: &Path, b: &Path) -> bool {
    match (a.canonicalize(), b.canonicalize()) {
        (Ok(a), Ok(b)) => a == b,
        _ => false,
    }
}

/// Writes the merged directory: `eval.json` of the whole eval, the records, the answers and
/// the summaries.
fn write(parts: &[Part], records: Vec<(String, Trial)>, output: &Path) -> Result<Summary, String> {
    let Some(first) = parts.first() else {
        return Err("--merge needs the output directory of every part".into());
    };
    let mut whole = first.manifest.clone();
    whole.setup.shard = None;
    if let Some(provenance) = &mut whole.provenance {
        for part in &parts[1..] {
            if let Some(theirs) = &part.manifest.provenance {
                add_machines(&mut provenance.machines, &theirs.machines);
            }
        }
    }
    whole.write(output)?;
    let (lines, trials): (Vec<String>, Vec<Trial>) = records.into_iter().unzip();
    let attempts: String = lines.iter().map(|line| format!("{line}\n")).collect();
    write_file(&output.join(ATTEMPTS), &attempts)?;
    let mut answers = String::new();
    for part in parts {
        let path = part.dir.join(ANSWERS);
        match std::fs::read_to_string(&path) {
            Ok(text) => answers.push_str(&text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        }
    }
    write_file(&output.join(ANSWERS), &answers)?;
    let dirs: Vec<&Path> = parts.iter().map(|part| part.dir.as_path()).collect();
    strategy_stats::carry_added(&dirs, output)?;
    outputs::finish(output, whole, &trials)
}
