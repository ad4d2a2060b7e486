//! One module per subcommand. Each exposes `Args` (clap) and `run(args) -> ExitCode`.

pub mod check;
pub mod config;
pub mod demo;
pub mod eval;
pub mod explain;
pub mod model_flags;
pub mod plugins;
pub mod report;
pub mod run;
pub mod serve;
pub mod session_file;
pub mod validators;

/// What a command prints on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// For people: diagnostics, a listing or tables.
    Text,
    /// One JSON document.
    Json,
}
