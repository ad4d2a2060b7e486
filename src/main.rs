//! The `enforce` command line: check LLM output, run the enforcement loop, serve the proxy.

mod auto;
mod commands;
mod config;
mod decode;
mod escalation;
mod live_stats;
mod plugin_host;
mod runner_options;
mod usage;

use clap::{Parser, Subcommand};

/// mimalloc, not the system allocator (feature `mimalloc`, on by default): `enforce serve`
/// allocates on every request, and glibc's malloc and free were a fifth of its instructions per
/// request (docs/performance.md).
#[cfg(feature = "mimalloc")]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Makes mimalloc give memory back to the OS as soon as it is freed (its `purge_delay` 0)
/// unless `MIMALLOC_PURGE_DELAY` says otherwise. With its default delay, pages freed are
/// returned only when the thread that freed them allocates again, so a proxy gone quiet after
/// a burst of large requests kept the whole burst's memory (RELIABILITY.md, "Hostile clients").
#[cfg(feature = "mimalloc")]
fn return_freed_memory_at_once() {
    use std::ffi::{c_int, c_long};
    /// `mi_option_purge_delay` in mimalloc.h's `mi_option_t` (the Rust bindings do not name it).
    const MI_OPTION_PURGE_DELAY: c_int = 15;
    extern "C" {
        fn mi_option_set(option: c_int, value: c_long);
    }
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: sets one option of the allocator linked in above, before any other thread
        // runs (mimalloc's option setters are not thread-safe); the option is read at each purge.
        unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) }
    }
}
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
    /// Ask a model through a runner and enforce a profile on its answer.
    Run(commands::run::Args),
    /// Show the whole loop on a built-in scripted model (no LLM needed).
    Demo(commands::demo::Args),
    /// Serve the OpenAI-compatible enforcement proxy (`/v1/chat/completions`).
    Serve(commands::serve::Args),
    /// List the plugin libraries found: file, plugin name, version, validators, or the load error.
    Plugins(commands::plugins::Args),
    /// List the validator types available to profiles: built-ins and plugin validators.
    Validators(commands::validators::Args),
    /// Tools for the configuration file: `enforce config schema` prints its JSON Schema.
    Config(commands::config::Args),
    /// Summarise audit files: outcomes over time, issue codes, re-ask fixes, spend, latency.
    #[command(long_about = commands::report::ABOUT)]
    Report(commands::report::Args),
    /// Does enforcing pay, on your model? Compare re-ask strategies (arms) on a dataset.
    #[command(long_about = commands::eval::about())]
    Eval(commands::eval::Args),
}

fn main() -> ExitCode {
    #[cfg(feature = "mimalloc")]
    return_freed_memory_at_once();
    match Cli::parse().command {
        Command::Check(args) => commands::check::run(args),
        Command::Run(args) => commands::run::run(args),
        Command::Demo(args) => commands::demo::run(args),
        Command::Serve(args) => commands::serve::run(args),
        Command::Plugins(args) => commands::plugins::run(args),
        Command::Validators(args) => commands::validators::run(args),
        Command::Config(args) => commands::config::run(args),
        Command::Report(args) => commands::report::run(args),
        Command::Eval(args) => commands::eval::run(args),
    }
}
