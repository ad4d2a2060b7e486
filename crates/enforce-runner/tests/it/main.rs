//! The integration tests of enforce-runner in one test binary (one link instead of one per
//! file): `cargo test -p enforce-runner --test it`.

mod anthropic_http;
mod claude_cli;
mod claude_real;
mod command_runner;
mod common;
mod openai_http;
mod openai_responses_api;
mod openai_stream;
mod streaming;
