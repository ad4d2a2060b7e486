//! `enforce-bench local-speed`: the local runner's tokens/s beside llama.cpp's own, on the same
//! GGUF, prompt, threads and greedy sampling, prompt processing and generation counted apart.
//! Writes its section of BENCHMARKS.md (`cargo xtask bench-peers --local-speed`).
//!
//! The reference is llama.cpp through node-llama-cpp (its prebuilt binaries, installed by npm
//! into the work directory). Each round times, for every model, the runner and the reference
//! one after the other, the order swapped every round, so a load that comes and goes lands on
//! both; each side answers a long free-text prompt and, with the GBNF grammar of the city
//! contract, a JSON one.
//!
//! Blocking code, like `peers.rs`: it starts processes and waits for them.

mod local;
mod node;
mod render;

use crate::peers::{describe, loadavg, machine};
use crate::section::{LOCAL_SPEED, REAL_MODEL};
use anyhow::{anyhow, Context as _};
use enforce_core::Message;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::time::Instant;

pub use render::render;

/// Options of the local-speed run.
#[derive(Debug, Clone, clap::Args)]
pub struct LocalSpeedArgs {
    /// A GGUF model file (repeat for more models).
    #[arg(long, required = true)]
    pub gguf: Vec<PathBuf>,
    /// Rounds; every round times each side once per model and answer.
    #[arg(long, default_value_t = 3)]
    pub rounds: usize,
    /// llama.cpp threads, on both sides.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Most tokens sampled per answer (the end-of-generation token included).
    #[arg(long, default_value_t = 200)]
    pub max_tokens: u32,
    /// Where node-llama-cpp is installed (`node-llama-cpp/` in it) and the prompts are written.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The report whose local-speed section is replaced.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// The eval examples: the city contract's schema is read from their `enforce.yaml`.
    #[arg(long, default_value = "examples/eval")]
    pub eval_dir: PathBuf,
}

/// One timed generation: the prompt read and the answer sampled.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct Timing {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Answer tokens streamed (an end-of-generation token is not one).
    pub tokens: u64,
    /// Seconds from the request to the first answer token: the context made, the prompt
    /// read, one token sampled.
    pub first_s: f64,
    /// Seconds from the first answer token to the last.
    pub rest_s: f64,
    /// CPU seconds the generation used from the first answer token to the last (the runner's
    /// generating thread; the reference's whole process): unlike `rest_s`, it does not grow
    /// while other work holds the core.
    #[serde(default)]
    pub rest_cpu_s: Option<f64>,
}

impl Timing {
    /// Prompt tokens a second, to the first answer token.
    pub fn prompt_rate(&self) -> f64 {
        self.prompt_tokens as f64 / self.first_s
    }

    /// Answer tokens a second after the first; `None` with fewer than two tokens.
    pub fn generation_rate(&self) -> Option<f64> {
        per_second(self.tokens, self.rest_s)
    }

    /// Answer tokens a CPU-second after the first.
    pub fn generation_cpu_rate(&self) -> Option<f64> {
        per_second(self.tokens, self.rest_cpu_s?)
    }
}

/// The tokens after the first over `seconds`; `None` with fewer than two tokens.
fn per_second(tokens: u64, seconds: f64) -> Option<f64> {
    (tokens >= 2 && seconds > 0.0).then(|| (tokens - 1) as f64 / seconds)
}

/// Who generates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// enforce's local runner (`enforce-runner-local`, llama.cpp linked in).
    Runner,
    /// llama.cpp through node-llama-cpp, the best CPU variant it has for this CPU.
    Llama,
    /// llama.cpp through node-llama-cpp, held to the CPU variant of the runner's build.
    LlamaRunnerIsa,
}

/// Every side, in the order of a round that starts with the runner.
const SIDES: [Side; 3] = [Side::Runner, Side::Llama, Side::LlamaRunnerIsa];

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// A long free-text answer.
    Text,
    /// A JSON answer under the city contract's grammar.
    CityGrammar,
}

const ANSWERS: [Answer; 2] = [Answer::Text, Answer::CityGrammar];

/// The timings of one side on one answer, a round each.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub side: Side,
    pub answer: Answer,
    pub timings: Vec<Timing>,
}

/// Everything measured on one model.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelRun {
    /// The GGUF's file name.
    pub model: String,
    pub rows: Vec<Row>,
    /// Why a side or an answer has no figures.
    pub failures: Vec<String>,
}

impl ModelRun {
    fn record(&mut self, side: Side, answer: Answer, timing: anyhow::Result<Timing>) {
        match timing {
            Ok(timing) => match self
                .rows
                .iter_mut()
                .find(|r| r.side == side && r.answer == answer)
            {
                Some(row) => row.timings.push(timing),
                None => self.rows.push(Row {
                    side,
                    answer,
                    timings: vec![timing],
                }),
            },
            Err(e) => {
                let e = format!("{:?} {:?}: {e:#}", side, answer);
                if !self.failures.contains(&e) {
                    self.failures.push(e);
                }
            }
        }
    }
}

/// What the section says besides the figures.
#[derive(Debug, Clone, PartialEq)]
pub struct Setting {
    pub command: String,
    pub date: String,
    pub rounds: usize,
    pub threads: u32,
    pub max_tokens: u32,
    pub machine: String,
    pub load_before: String,
    pub load_after: String,
    pub seconds: f64,
    /// The runner's llama.cpp (the `llama-cpp-sys-2` crate that vendors it).
    pub runner_llama: String,
    /// How the harness, and so the runner's Rust code, was compiled.
    pub build: String,
    /// node-llama-cpp and the llama.cpp release it ships, or why it was skipped.
    pub reference: Result<String, String>,
    /// Whether the reference was also run with the runner's instruction set, or why not.
    pub runner_isa: Result<(), String>,
    /// The commands that ran the reference, one per model and answer.
    pub reference_commands: Vec<String>,
}

/// The fixed prompt of a free-text answer long enough to reach `max_tokens`.
fn text_messages() -> Vec<Message> {
    vec![
        Message::system(
            "You are a storyteller. You write long, vivid stories with many details about \
             places, weather, sounds and the thoughts of the characters. You never stop early \
             and you never summarise.",
        ),
        Message::user(
            "Write a long story about a lighthouse keeper on a small island who finds a \
             message in a bottle after a storm. Describe the island, the sea, the storm, the \
             keeper's daily work and what the message says.",
        ),
    ]
}

/// The fixed prompt of the city contract's JSON answer.
fn city_messages() -> Vec<Message> {
    vec![
        Message::system("You answer with one JSON object and nothing else."),
        Message::user(
            "Give the city of Lyon as a JSON object with its name, its country and its \
             population.",
        ),
    ]
}

/// `messages` in ChatML, the template of the measured models (SmolLM2, Qwen2.5), ending where
/// the assistant's answer starts: the reference's prompt. The runner applies the GGUF's own
/// template to the same messages; the prompt-token columns of both sides show they agree.
fn chatml(messages: &[Message]) -> String {
    let mut s = String::new();
    for m in messages {
        let role = serde_json::to_value(m.role).unwrap_or(Value::Null);
        s.push_str(&format!(
            "<|im_start|>{}\n{}<|im_end|>\n",
            role.as_str().unwrap_or("user"),
            m.content
        ));
    }
    s.push_str("<|im_start|>assistant\n");
    s
}

/// The GBNF grammar of the city contract's JSON Schema (`validators.city.schema`).
fn city_grammar(eval_dir: &Path) -> anyhow::Result<String> {
    let path = eval_dir.join("enforce.yaml");
    let yaml: Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?,
    )?;
    let schema = yaml
        .pointer("/validators/city/schema")
        .ok_or_else(|| anyhow!("{} has no validators.city.schema", path.display()))?;
    Ok(enforce_runner_local::json_schema_to_gbnf(schema).gbnf)
}

pub fn run(args: LocalSpeedArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.work_dir)?;
    let work = std::path::absolute(&args.work_dir)?;
    let grammar = city_grammar(&args.eval_dir)?;
    let load_before = loadavg();
    let reference = node::install(&work);
    let runner_isa = reference
        .as_ref()
        .map_err(Clone::clone)
        .and_then(node::Peer::runner_isa);
    for why in [&reference, &runner_isa]
        .into_iter()
        .filter_map(|r| r.as_ref().err())
    {
        eprintln!("bench: {why}");
    }
    let prompts = node::Prompts::write(
        &work,
        &chatml(&text_messages()),
        &chatml(&city_messages()),
        &grammar,
    )?;
    let mut runs = Vec::new();
    let mut reference_commands = Vec::new();
    for gguf in &args.gguf {
        let mut run = ModelRun {
            model: gguf
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| gguf.display().to_string()),
            ..ModelRun::default()
        };
        let runner = local::open(gguf, args.threads);
        if let Err(e) = &runner {
            run.failures.push(format!("the local runner: {e:#}"));
        }
        for round in 0..args.rounds.max(1) {
            // The side that goes first alternates, so neither always meets a cold cache or
            // the same phase of the machine's other work.
            let mut order = SIDES;
            if round % 2 == 1 {
                order.reverse();
            }
            for side in order {
                for answer in ANSWERS {
                    let messages = match answer {
                        Answer::Text => text_messages(),
                        Answer::CityGrammar => city_messages(),
                    };
                    let gbnf = (answer == Answer::CityGrammar).then_some(grammar.as_str());
                    let peer = match side {
                        Side::Runner => None,
                        Side::Llama => reference.as_ref().ok(),
                        Side::LlamaRunnerIsa => runner_isa.as_ref().ok(),
                    };
                    match (side, &runner, peer) {
                        (Side::Runner, Ok(runner), _) => {
                            run.record(side, answer, runner.time(messages, args.max_tokens, gbnf))
                        }
                        (_, _, Some(peer)) => {
                            let cmd = peer.command(gguf, &prompts, answer, &args);
                            let line = describe(&cmd);
                            if round == 0 {
                                reference_commands.push(line);
                            }
                            run.record(side, answer, node::time(cmd));
                        }
                        _ => {}
                    }
                }
            }
            eprintln!("bench: {} round {} done", run.model, round + 1);
        }
        runs.push(run);
    }
    let m = machine();
    let setting = Setting {
        command: reproduce(&args),
        date: crate::peers::version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        rounds: args.rounds.max(1),
        threads: args.threads,
        max_tokens: args.max_tokens,
        machine: format!(
            "{} cores, {}",
            m.get("cores").cloned().unwrap_or_default(),
            m.get("cpu").cloned().unwrap_or_default()
        ),
        load_before,
        load_after: loadavg(),
        seconds: started.elapsed().as_secs_f64(),
        runner_llama: local::llama_version(),
        build: if cfg!(debug_assertions) {
            "a debug build of the harness: the runner's Rust code unoptimised (llama.cpp itself \
             is compiled optimised in every profile), which can only slow the runner"
                .into()
        } else {
            "the harness built optimised (`cargo xtask` builds it with `--profile dist`)".into()
        },
        reference: reference.map(|peer| peer.version),
        runner_isa: runner_isa.map(|_| ()),
        reference_commands,
    };
    let section = render(&setting, &runs);
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(
        &args.out,
        LOCAL_SPEED.splice_after(&old, &section, &REAL_MODEL),
    )?;
    eprintln!(
        "bench: wrote the local-speed section of {} in {:.0} s",
        args.out.display(),
        setting.seconds
    );
    Ok(())
}

/// The command that reproduces the section: the flags that change what is measured.
fn reproduce(args: &LocalSpeedArgs) -> String {
    let mut command = "cargo xtask bench-peers --local-speed".to_string();
    for gguf in &args.gguf {
        command.push_str(&format!(
            " --gguf {}",
            crate::peers::repo_relative(&gguf.display().to_string())
        ));
    }
    if args.rounds != 3 {
        command.push_str(&format!(" --rounds {}", args.rounds));
    }
    if args.threads != 1 {
        command.push_str(&format!(" --threads {}", args.threads));
    }
    if args.max_tokens != 200 {
        command.push_str(&format!(" --max-tokens {}", args.max_tokens));
    }
    command
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_count_the_prompt_and_the_answer_apart() {
        let t = Timing {
            prompt_tokens: 50,
            tokens: 11,
            first_s: 0.5,
            rest_s: 2.0,
            rest_cpu_s: Some(1.0),
        };
        assert_eq!(t.prompt_rate(), 100.0);
        assert_eq!(t.generation_rate(), Some(5.0), "10 tokens after the first");
        assert_eq!(t.generation_cpu_rate(), Some(10.0));
        let one = Timing { tokens: 1, ..t };
        assert_eq!(one.generation_rate(), None);
    }

    #[test]
    fn chatml_ends_where_the_answer_starts() {
        let text = chatml(&[Message::system("s"), Message::user("u")]);
        assert_eq!(
            text,
            "<|im_start|>system\ns<|im_end|>\n<|im_start|>user\nu<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn a_failure_is_kept_once_and_timings_gather_per_row() {
        let t = Timing {
            prompt_tokens: 1,
            tokens: 2,
            first_s: 1.0,
            rest_s: 1.0,
            rest_cpu_s: None,
        };
        let mut run = ModelRun::default();
        run.record(Side::Runner, Answer::Text, Ok(t));
        run.record(Side::Runner, Answer::Text, Ok(t));
        run.record(Side::Llama, Answer::Text, Err(anyhow!("boom")));
        run.record(Side::Llama, Answer::Text, Err(anyhow!("boom")));
        assert_eq!(run.rows.len(), 1);
        assert_eq!(run.rows[0].timings.len(), 2);
        assert_eq!(run.failures.len(), 1, "{:?}", run.failures);
    }
}
