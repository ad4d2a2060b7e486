//! One module per subcommand. Each exposes `Args` (clap) and `run(args) -> ExitCode`.

pub mod check;
pub mod plugins;
pub mod validators;
