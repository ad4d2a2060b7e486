//! The `enforce` command line: check LLM output, run the enforcement loop, serve the proxy.

mod commands;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Make LLM output meet a contract: validate, re-ask with feedback, repair, report.
#[derive(Debug, Parser)]
#[command(name = "enforce", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// One subcommand per module under `src/commands/`.
#[derive(Debug, Subcommand)]
enum Command {}

#[allow(unreachable_code)] // no subcommand has landed yet
fn main() -> ExitCode {
    match Cli::parse().command {}
}
