//! The `enforce` command line: check LLM output, run the enforcement loop, serve the proxy.

mod commands;
mod config;

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
enum Command {
    /// Check files (or stdin) against a profile, without a model; optionally repair them.
    Check(commands::check::Args),
}

fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Check(args) => commands::check::run(args),
    }
}
