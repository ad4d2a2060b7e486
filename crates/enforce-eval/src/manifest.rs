//! `eval.json`: what one run of an eval was asked to run — its setup (with the shard), the
//! arms, the whole dataset's case ids and digests of the dataset and the configuration. It is
//! written before the trials run, so `--merge` can tell the parts of one sharded eval from
//! parts of different evals and knows which trials each part owes, even of a part that died.

use super::provenance::Provenance;
use super::shard::Shard;
use super::summary::{self, Setup, Summary};
use super::trials::{self, Trial, TrialKey};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The file's name in the output directory.
pub const MANIFEST: &str = "eval.json";

/// What one run of an eval ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// The setup, as `summary.json` has it.
    pub setup: Setup,
    /// The arms, in the order of `--arms`.
    pub arms: Vec<String>,
    /// The id of every case of the whole dataset, in its order.
    pub cases: Vec<String>,
    /// FNV-1a digest of the dataset file: parts must have read the same cases, wherever the
    /// file was.
    pub dataset_digest: String,
    /// FNV-1a digest of the configuration file as written (`${VAR}` unexpanded, so secrets and
    /// per-machine values stay out); `None` without one.
    pub config_digest: Option<String>,
    /// What ran it: enforce's version, the runner and model, the machine. Not compared
    /// between the parts of a sharded eval (they may run on different machines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
}

impl Manifest {
    /// The summary of `trials` of this eval, with its provenance.
    pub fn summarise(self, trials: &[Trial]) -> Summary {
        let mut summary = summary::build(self.setup, &self.arms, trials);
        summary.provenance = self.provenance;
        summary
    }

    /// The part of the dataset this run took.
    pub fn shard(&self) -> Shard {
        self.setup.shard.unwrap_or(Shard::WHOLE)
    }

    /// The trials of its part: every arm and repeat of each case it holds (and that is on its
    /// side of a split), with the seeds of the whole dataset.
    pub fn keys(&self) -> Vec<TrialKey> {
        let shard = self.shard();
        let mut keys = Vec::new();
        for (position, case) in self.cases.iter().enumerate() {
            let on_side = self.setup.split.is_none_or(|side| side.holds(position));
            if !shard.holds(position) || !on_side {
                continue;
            }
            for repeat in 0..self.setup.repeats {
                let seed = trials::seed_of(self.setup.seed, self.setup.repeats, position, repeat);
                keys.extend(self.arms.iter().map(|arm| TrialKey {
                    arm: arm.clone(),
                    case: case.clone(),
                    repeat,
                    seed,
                }));
            }
        }
        keys
    }

    /// Writes `eval.json` in `dir`, unless `dir` holds another shard of the same eval: two
    /// parts appending to one `attempts.jsonl` would leave records the merge cannot attribute.
    pub fn claim(&self, dir: &Path) -> Result<(), String> {
        if let Ok(previous) = Manifest::read(dir) {
            if previous.shard() != self.shard() && previous.difference(self).is_none() {
                return Err(format!(
                    "{} holds shard {} of this eval; give each shard its own -o",
                    dir.display(),
                    previous.shard()
                ));
            }
        }
        self.write(dir)
    }

    /// Writes `eval.json` in `dir`.
    pub fn write(&self, dir: &Path) -> Result<(), String> {
        let path = dir.join(MANIFEST);
        let json = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        std::fs::write(&path, format!("{json}\n"))
            .map_err(|e| format!("cannot write {}: {e}", path.display()))
    }

    /// Reads the `eval.json` of `dir`.
    pub fn read(dir: &Path) -> Result<Manifest, String> {
        let path = dir.join(MANIFEST);
        let text = std::fs::read_to_string(&path).map_err(|e| {
            format!(
                "cannot read {}: {e} (is {} the -o directory of an `enforce eval`?)",
                path.display(),
                dir.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The first field two runs differ in, other than their shard and the dataset's path
    /// (the dataset's content is compared by its digest): `setup.seed (40 vs 41)`.
    pub fn difference(&self, other: &Manifest) -> Option<String> {
        let theirs = other.compared();
        self.compared().into_iter().find_map(|(field, mine)| {
            let their = theirs.get(&field).unwrap_or(&Value::Null);
            (mine != *their).then(|| format!("{field} ({} vs {})", brief(&mine), brief(their)))
        })
    }

    /// The fields compared between parts, by name (`arms`, `setup.seed`, ...).
    fn compared(&self) -> BTreeMap<String, Value> {
        let Ok(Value::Object(mut fields)) = serde_json::to_value(self) else {
            return BTreeMap::new();
        };
        let mut compared = BTreeMap::new();
        if let Some(Value::Object(setup)) = fields.remove("setup") {
            for (name, value) in setup {
                if name != "shard" && name != "dataset" {
                    compared.insert(format!("setup.{name}"), value);
                }
            }
        }
        fields.remove("provenance");
        compared.extend(fields);
        compared
    }
}

/// The digest `eval.json` keeps of a file (the dataset).
pub fn file_digest(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok(enforce_core::outcome::fnv1a_hex(&String::from_utf8_lossy(
        &bytes,
    )))
}

/// A value as JSON, cut to a readable length.
fn brief(value: &Value) -> String {
    const MOST: usize = 60;
    let text = value.to_string();
    if text.chars().count() <= MOST {
        return text;
    }
    let cut: String = text.chars().take(MOST).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn manifest(shard: Option<Shard>) -> Manifest {
        Manifest {
            setup: Setup {
                dataset: "cases.jsonl".into(),
                cases: 5,
                repeats: 2,
                seed: 40,
                profile: "j".into(),
                runner: "openai".into(),
                model: Some("m".into()),
                params: Map::new(),
                shard,
                split: None,
            },
            arms: vec!["none".into(), "feedback".into()],
            cases: (1..=5).map(|i| format!("case-{i}")).collect(),
            dataset_digest: "d".into(),
            config_digest: Some("c".into()),
            provenance: None,
        }
    }

    #[test]
    fn a_part_owes_every_arm_and_repeat_of_its_cases_with_the_whole_runs_seeds() {
        let whole = manifest(None).keys();
        assert_eq!(whole.len(), 5 * 2 * 2);
        let parts: Vec<Vec<TrialKey>> = (0..2)
            .map(|index| manifest(Some(Shard { index, count: 2 })).keys())
            .collect();
        assert_eq!(parts[0].len(), 3 * 2 * 2);
        assert!(parts[1]
            .iter()
            .all(|k| k.case == "case-2" || k.case == "case-4"));
        let mut joined: Vec<TrialKey> = parts.concat();
        let mut expected = whole.clone();
        joined.sort_by_key(|k| (k.seed, k.arm.clone()));
        expected.sort_by_key(|k| (k.seed, k.arm.clone()));
        assert_eq!(joined, expected);
        let seed_of_case_4 = whole.iter().find(|k| k.case == "case-4").map(|k| k.seed);
        assert_eq!(seed_of_case_4, Some(40 + 3 * 2));
    }

    #[test]
    fn parts_differ_only_in_what_matters() {
        let a = manifest(Some(Shard { index: 0, count: 2 }));
        let mut b = manifest(Some(Shard { index: 1, count: 2 }));
        b.setup.dataset = "/mnt/elsewhere/cases.jsonl".into();
        assert_eq!(a.difference(&b), None);
        b.setup.seed = 41;
        assert_eq!(a.difference(&b).as_deref(), Some("setup.seed (40 vs 41)"));
        let mut c = manifest(None);
        c.dataset_digest = "e".into();
        assert_eq!(
            a.difference(&c).as_deref(),
            Some("dataset_digest (\"d\" vs \"e\")")
        );
        let mut d = manifest(None);
        d.arms.push("resample".into());
        let said = a.difference(&d).expect("the arms differ");
        assert!(said.starts_with("arms ("), "{said}");
    }
}
