//! # enforce-eval
//!
//! Does enforcing pay, on your model? An [`Eval`] runs a dataset through an
//! [enforce](enforce_core) profile once per arm (a re-ask strategy: no re-ask, resample,
//! feedback, early abort, repair first, constrained decoding...) with the same seeds, and
//! compares valid answers, spend and time in a [`Summary`].
//!
//! The dataset is read from JSONL (one case a line) or promptfoo-style YAML; the arms are
//! parsed from their words ([`Arm::parse_list`], [`arms::WORDS`]); the profiles come from an
//! [`enforce_config::ProfileSet`] and the model is any [`enforce_core::Runner`]. With an output
//! directory the eval writes `attempts.jsonl` (one audit record per trial, written as each ends,
//! so a rerun resumes), `answers.jsonl`, `summary.json`, `junit.xml`, `report.html` and
//! `eval.json` (what it ran, so the parts of a sharded eval can be [`merge`]d).
//!
//! The `enforce eval` command and the Python package (`enforce_llm.eval`) are its front ends;
//! the benchmark reads its [`Summary`] back.
#![deny(missing_docs)]

mod answers;
pub mod arms;
pub mod atomic;
pub mod clustered;
pub mod cost;
mod dataset;
mod error;
mod html;
mod junit;
mod manifest;
mod merge;
mod outputs;
pub mod provenance;
mod run;
pub mod shard;
pub mod split;
mod split_run;
pub mod stats;
pub mod strategy_stats;
pub mod summary;
pub mod tables;
mod trials;

pub use arms::Arm;
pub use error::EvalError;
pub use merge::merge;
pub use outputs::{ANSWERS, ATTEMPTS};
pub use run::{ConfigFile, Constrain, Eval, Event, Observer};
pub use shard::Shard;
pub use split::{Side, Split, SplitSide};
pub use split_run::{run_split, LEARNED, LEARN_DIR};
pub use summary::Summary;
pub use trials::{Trial, TrialKey};

#[cfg(test)]
mod tests;
