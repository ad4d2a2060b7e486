//! One module per subcommand. Each exposes `Args` (clap) and `run(args) -> ExitCode`.

use std::process::ExitCode;

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

/// `done`, or exit code 2 when the output of `what` could not be written (said on stderr,
/// except for a closed pipe: `| head` is no error worth a word).
pub fn after_printing(printed: std::io::Result<()>, what: &str, done: ExitCode) -> ExitCode {
    match printed {
        Ok(()) => done,
        Err(e) => {
            if e.kind() != std::io::ErrorKind::BrokenPipe {
                eprintln!("error: cannot write the {what}: {e}");
            }
            ExitCode::from(2)
        }
    }
}

/// The runtime of a command that waits on one thing at a time.
pub fn current_thread_runtime() -> Result<tokio::runtime::Runtime, String> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the async runtime: {e}"))
}
