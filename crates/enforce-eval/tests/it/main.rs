//! enforce-eval through its public API: an `Eval` on a profile of a configuration and an
//! in-process model.

mod eval;
mod strategy_stats;
