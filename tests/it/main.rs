//! The end-to-end tests of the `enforce` binary and the property tests, in one test binary
//! (one link instead of one per file): `cargo test -p enforce --test it`.

mod audit_shape;
mod check;
mod cli_run_demo;
mod config_env;
mod config_explain;
mod config_schema;
mod crash_safety;
mod docs_samples;
mod eval;
mod eval_examples;
mod grafana;
mod kubernetes;
mod local;
mod memory_bound;
mod per_type;
mod plugins;
mod properties;
mod prose_serve;
mod real_answers;
mod real_model;
mod replicas;
mod report;
mod serve;
mod serve_auto;
mod serve_routes;

/// The `enforce` binary under test.
const BIN: &str = env!("CARGO_BIN_EXE_enforce");

/// The repository root (the `enforce` package), where `examples/` and `schema/` live.
fn repo() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Captured stdout or stderr as text (lossy UTF-8).
fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

use futures_executor::block_on;
