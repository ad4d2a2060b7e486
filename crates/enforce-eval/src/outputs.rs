//! The results of a finished eval in its output directory, whether its trials ran here or were
//! merged from the parts of a sharded eval: `summary.json`, `junit.xml` and `report.html`.

use super::manifest::Manifest;
use super::summary::Summary;
use super::trials::Trial;
use super::{html, junit};
use std::path::Path;

/// The audit records, one per trial.
pub const ATTEMPTS: &str = "attempts.jsonl";
/// The answers, one per attempt.
pub const ANSWERS: &str = "answers.jsonl";

/// Summarises `trials` of the eval `manifest` describes and writes the files (the JUnit test
/// cases in the order of the dataset).
pub fn finish(dir: &Path, manifest: Manifest, trials: &[Trial]) -> Result<Summary, String> {
    let (arms, cases) = (manifest.arms.clone(), manifest.cases.clone());
    let summary = manifest.summarise(trials);
    let (arms, cases) = (&arms, &cases);
    let write = |name: &str, text: &str| write_file(&dir.join(name), text);
    let json = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
    write("summary.json", &format!("{json}\n"))?;
    write("junit.xml", &junit::render(arms, cases, trials))?;
    let page = html::render(&summary).map_err(|e| e.to_string())?;
    write("report.html", &page)?;
    Ok(summary)
}

/// Writes `text` to `path`; the error names the file.
pub fn write_file(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}
