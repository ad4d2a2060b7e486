//! An eval with a train/test split (`--split K/N`): the arms other than `auto` run on the
//! learning cases and write their statistics, then every arm runs on the other cases, `auto`
//! choosing by those statistics.

use crate::run::{Constrain, Eval, Observer};
use crate::split::{Side, Split, SplitSide};
use crate::strategy_stats;
use crate::{EvalError, Summary};
use enforce_config::ProfileSet;
use enforce_core::Runner;
use std::sync::Arc;

/// Where, under the output directory, the learning side's outputs go.
pub const LEARN_DIR: &str = "learn";
/// The statistics file the learning side writes in [`LEARN_DIR`].
pub const LEARNED: &str = "learned-stats.json";

/// Runs `eval` split by `split`: its arms other than `auto` on the learning cases (outputs
/// in `learn/` under the output directory, statistics in `learn/learned-stats.json`), then
/// every arm on the other cases with `auto` choosing by those statistics. Returns the
/// measuring side's summary (the learning side's is in `learn/summary.json`). Both sides
/// resume as any eval does. [`EvalError::Input`] without an output directory, or unless the
/// arms are `auto` and at least one other.
pub fn run_split(
    eval: Eval,
    split: Split,
    profiles: &ProfileSet,
    runner: Arc<dyn Runner>,
    constrain: Constrain<'_>,
    observer: Observer,
) -> Result<Summary, EvalError> {
    let learning: Vec<_> = eval.arms.iter().filter(|arm| !arm.auto).cloned().collect();
    if learning.is_empty() || learning.len() == eval.arms.len() {
        return Err(EvalError::Input(format!(
            "--split {split} measures the arm `auto` on cases the other arms did not learn on: \
             give --arms with `auto` and at least one other arm"
        )));
    }
    let Some(output) = &eval.output else {
        return Err(EvalError::Input(format!(
            "--split {split} keeps what the learning cases taught in the output directory: give one"
        )));
    };
    let dir = output.join(LEARN_DIR);
    let file = dir.join(LEARNED);
    let learn = Eval {
        arms: learning,
        output: Some(dir),
        stats: Some(file.clone()),
        stats_from: None,
        split: Some(SplitSide {
            split,
            side: Side::Learn,
        }),
        ..eval.clone()
    };
    learn.run(
        profiles,
        Arc::clone(&runner),
        constrain,
        Arc::clone(&observer),
    )?;
    let learned = strategy_stats::read(&file)
        .map_err(EvalError::Output)?
        .unwrap_or_default();
    let measure = Eval {
        stats_from: Some(Arc::new(learned)),
        split: Some(SplitSide {
            split,
            side: Side::Measure,
        }),
        ..eval
    };
    measure.run(profiles, runner, constrain, observer)
}
