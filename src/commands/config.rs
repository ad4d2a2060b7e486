//! `enforce config`: tools for the configuration file. `enforce config schema` prints the JSON
//! Schema of `enforce.yaml`; `enforce config explain` the resolved contract of a served model
//! (see [`super::explain`]).
//!
//! Exit codes of `schema`: 0 printed, 2 the output could not be written.

use std::io::Write;
use std::process::ExitCode;

/// Arguments of `enforce config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

/// The subcommands of `enforce config`.
#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the JSON Schema of enforce.yaml (for editor completion and checks).
    #[command(long_about = SCHEMA_ABOUT)]
    Schema(SchemaArgs),
    /// Print the contract a served model enforces and where each value comes from.
    // Boxed: with the model flags it is much larger than `Schema`.
    #[command(long_about = super::explain::EXPLAIN_ABOUT)]
    Explain(Box<super::explain::ExplainArgs>),
}

const SCHEMA_ABOUT: &str = "\
Print the JSON Schema of enforce.yaml (JSON Schema draft 7) to standard output.

The schema is generated from the types the configuration is parsed into: every section \
(validators, profiles, defaults, runner, models, server), the options of every built-in \
validator type, defaults and allowed values. Validator types added by plugins are accepted \
with any options.

Editors complete and check keys with it. With the YAML language server (VS Code's YAML \
extension, Neovim, Helix, ...), save the schema next to the file:

  enforce config schema > enforce.schema.json

and make this the file's first line (the path is relative to the file):

  # yaml-language-server: $schema=enforce.schema.json

enforce's repository ships the same schema as schema/enforce.schema.json.

Some checks stay with `enforce check --config FILE`: profiles naming validators that do not \
exist, regex syntax, files and directories that must exist, plugin types.";

/// Arguments of `enforce config schema`.
#[derive(Debug, clap::Args)]
struct SchemaArgs {}

/// Runs `enforce config`.
pub fn run(args: Args) -> ExitCode {
    match args.command {
        Command::Schema(SchemaArgs {}) => print_schema(),
        Command::Explain(args) => super::explain::run(*args),
    }
}

fn print_schema() -> ExitCode {
    let schema = crate::config::schema();
    let mut text = match serde_json::to_string_pretty(&schema) {
        Ok(text) => text,
        Err(e) => {
            eprintln!("error: cannot serialize the schema: {e}");
            return ExitCode::from(2);
        }
    };
    text.push('\n');
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: cannot write the schema: {e}");
            ExitCode::from(2)
        }
    }
}
