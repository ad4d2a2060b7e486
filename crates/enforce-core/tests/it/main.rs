//! The integration tests of enforce-core in one test binary (one link instead of one per
//! file; new test files become modules here): `cargo test -p enforce-core --test it`.

mod audit_json;
mod auto;
mod chooser;
mod compose;
mod early_abort;
mod input_stage;
mod ladder;
mod live;
mod loop_paths;
mod loop_rules;
mod seeds;
mod strategies;
mod tool_calls;
mod wrappers;

/// The request most tests send.
fn req() -> enforce_core::Request {
    enforce_core::Request::prompt("Write it.")
}
