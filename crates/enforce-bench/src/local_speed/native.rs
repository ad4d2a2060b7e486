//! The local runner built for this CPU: a second build of this harness made with
//! `RUSTFLAGS="-C target-cpu=native"` (so llama-cpp-sys-2 builds llama.cpp with `GGML_NATIVE`),
//! run as a subprocess per answer. Its hidden subcommand `local-speed-answer` loads the model
//! (not timed), times one answer the way the in-process side does (`local.rs`) and prints the
//! `Timing` as `llama.mjs` does.

use super::{local, messages, Answer, Job};
use crate::peers::describe;
use anyhow::bail;
use clap::ValueEnum as _;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The subcommand of the harness that times one answer.
const SUBCOMMAND: &str = "local-speed-answer";

/// Options of `enforce-bench local-speed-answer`.
#[derive(Debug, Clone, clap::Args)]
pub struct AnswerArgs {
    /// The GGUF model file.
    #[arg(long)]
    pub gguf: PathBuf,
    /// What is asked.
    #[arg(long, value_enum)]
    pub answer: Answer,
    /// llama.cpp threads.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Most tokens sampled (the end-of-generation token included).
    #[arg(long, default_value_t = 200)]
    pub max_tokens: u32,
    /// The GBNF grammar of the city answer (given with `--answer city-grammar` only).
    #[arg(long)]
    pub grammar: Option<PathBuf>,
}

/// `enforce-bench local-speed-answer`: times one answer and prints its timing as one JSON line.
pub fn answer(args: AnswerArgs) -> anyhow::Result<()> {
    let grammar = match (args.answer, &args.grammar) {
        (Answer::CityGrammar, Some(path)) => Some(std::fs::read_to_string(path)?),
        (Answer::Text, None) => None,
        (Answer::CityGrammar, None) => bail!("--answer city-grammar needs --grammar"),
        (Answer::Text, Some(_)) => bail!("--grammar goes with --answer city-grammar only"),
    };
    let runner = local::open(&args.gguf, args.threads)?;
    let timing = runner.time(messages(args.answer), args.max_tokens, grammar.as_deref())?;
    println!("{}", serde_json::to_string(&timing)?);
    Ok(())
}

/// A harness built for this CPU.
pub struct Harness {
    path: PathBuf,
}

impl Harness {
    /// The harness at `path`; `Err` says why the side is not measured, and how to add it.
    pub fn find(path: Option<&Path>) -> Result<Harness, String> {
        let Some(path) = path else {
            return Err(
                "not asked for: `cargo xtask bench-peers --local-speed --native` adds \
                        it (or `--native-harness PATH` to an enforce-bench built with \
                        `RUSTFLAGS=\"-C target-cpu=native\"`)"
                    .into(),
            );
        };
        if !path.is_file() {
            return Err(format!("{} is not a file", path.display()));
        }
        Ok(Harness {
            path: std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf()),
        })
    }

    /// The harness's path, relative to the repository where it is in it.
    pub fn describe(&self) -> String {
        describe(&Command::new(&self.path))
    }

    /// The command that times `job`.
    pub fn command(&self, job: &Job) -> Command {
        let mut cmd = Command::new(&self.path);
        cmd.arg(SUBCOMMAND)
            .arg("--gguf")
            .arg(&job.gguf)
            .arg("--threads")
            .arg(job.args.threads.to_string())
            .arg("--max-tokens")
            .arg(job.args.max_tokens.to_string());
        if let Some(value) = job.answer.to_possible_value() {
            cmd.arg("--answer").arg(value.get_name());
        }
        if job.answer == Answer::CityGrammar {
            cmd.arg("--grammar").arg(job.prompts.grammar());
        }
        cmd
    }
}

#[cfg(test)]
mod tests {
    use super::super::{node::Prompts, LocalSpeedArgs};
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(subcommand)]
        command: Sub,
    }

    #[derive(clap::Subcommand)]
    enum Sub {
        LocalSpeedAnswer(AnswerArgs),
    }

    #[derive(Parser)]
    struct LocalSpeedCli {
        #[command(flatten)]
        args: LocalSpeedArgs,
    }

    fn args() -> LocalSpeedArgs {
        let argv = ["x", "--gguf", "m.gguf", "--work-dir", "w", "--threads", "3"];
        LocalSpeedCli::try_parse_from(argv).unwrap().args
    }

    #[test]
    fn the_harness_reads_back_the_command_it_is_given() {
        let dir = std::env::temp_dir().join(format!("enforce-bench-native-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let prompts = Prompts::write(&dir, "t", "c", "root ::= \"{}\"").unwrap();
        let harness = Harness {
            path: PathBuf::from("/h/enforce-bench"),
        };
        for answer in super::super::ANSWERS {
            let args = args();
            let job = Job {
                gguf: PathBuf::from("/m/a.gguf"),
                answer,
                prompts: &prompts,
                args: &args,
            };
            let cmd = harness.command(&job);
            let argv = std::iter::once(cmd.get_program()).chain(cmd.get_args());
            let Sub::LocalSpeedAnswer(read) = Cli::try_parse_from(argv).unwrap().command;
            assert_eq!(read.answer, answer);
            assert_eq!(read.gguf, Path::new("/m/a.gguf"));
            assert_eq!((read.threads, read.max_tokens), (3, 200));
            assert_eq!(
                read.grammar.as_deref(),
                (answer == Answer::CityGrammar).then(|| prompts.grammar())
            );
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_missing_harness_says_how_to_add_it() {
        let why = Harness::find(None).err().unwrap();
        assert!(why.contains("--native"), "{why}");
        let why = Harness::find(Some(Path::new("/no/such/harness")))
            .err()
            .unwrap();
        assert!(why.contains("/no/such/harness"), "{why}");
    }
}
