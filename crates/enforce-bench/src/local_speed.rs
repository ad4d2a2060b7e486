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
//! A fourth side, with `--native-harness PATH`: the runner built for this CPU, a second build
//! of this harness (`RUSTFLAGS="-C target-cpu=native"`) run as a subprocess per answer
//! (`native.rs`), so the instruction set the shipped build leaves out is measured beside it.
//!
//! Blocking code, like `peers.rs`: it starts processes and waits for them.

mod local;
mod native;
mod node;
mod render;

use crate::peers::{describe, loadavg, machine};
use crate::section::{LOCAL_SPEED, REAL_MODEL};
use anyhow::{anyhow, Context as _};
use enforce_core::Message;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

pub use native::{answer, AnswerArgs};
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
    /// This harness built with `RUSTFLAGS="-C target-cpu=native"`: times the runner built for
    /// this CPU as a fourth side (`cargo xtask bench-peers --local-speed --native` builds it).
    #[arg(long)]
    pub native_harness: Option<PathBuf>,
}

/// One timed generation: the prompt read and the answer sampled. The subprocess sides print
/// it as one JSON line.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
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
    /// enforce's local runner (`enforce-runner-local`, llama.cpp linked in), as shipped: built
    /// without `target-cpu`, for AVX2.
    Runner,
    /// The same runner built for this CPU (`-C target-cpu=native`, llama.cpp's `GGML_NATIVE`).
    RunnerNative,
    /// llama.cpp through node-llama-cpp, the best CPU variant it has for this CPU.
    Llama,
    /// llama.cpp through node-llama-cpp, held to the CPU variant of the runner's build.
    LlamaRunnerIsa,
}

/// Every side, in the order of a round that starts with the runner.
const SIDES: [Side; 4] = [
    Side::Runner,
    Side::RunnerNative,
    Side::Llama,
    Side::LlamaRunnerIsa,
];

/// What is asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
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
    /// The harness built for this CPU, or why that side was not measured.
    pub native: Result<String, String>,
    /// The commands of the subprocess sides (the reference, the harness built for this CPU),
    /// one per side, model and answer.
    pub commands: Vec<String>,
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

/// The messages of `answer`.
fn messages(answer: Answer) -> Vec<Message> {
    match answer {
        Answer::Text => text_messages(),
        Answer::CityGrammar => city_messages(),
    }
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

/// One answer a subprocess side times.
pub struct Job<'a> {
    /// The GGUF, as an absolute path.
    pub gguf: PathBuf,
    pub answer: Answer,
    pub prompts: &'a node::Prompts,
    pub args: &'a LocalSpeedArgs,
}

/// What times the sides other than the in-process runner: a command per answer, or why the
/// side is not measured.
struct Subprocesses {
    prompts: node::Prompts,
    reference: Result<node::Peer, String>,
    runner_isa: Result<node::Peer, String>,
    native: Result<native::Harness, String>,
}

impl Subprocesses {
    fn prepare(args: &LocalSpeedArgs, work: &Path, grammar: &str) -> anyhow::Result<Self> {
        let reference = node::install(work);
        let runner_isa = reference
            .as_ref()
            .map_err(Clone::clone)
            .and_then(node::Peer::runner_isa);
        let native = native::Harness::find(args.native_harness.as_deref());
        for why in [reference.as_ref().err(), runner_isa.as_ref().err()]
            .into_iter()
            .chain([native.as_ref().err()])
            .flatten()
        {
            eprintln!("bench: {why}");
        }
        let prompts = node::Prompts::write(
            work,
            &chatml(&text_messages()),
            &chatml(&city_messages()),
            grammar,
        )?;
        Ok(Subprocesses {
            prompts,
            reference,
            runner_isa,
            native,
        })
    }

    /// The command that times `side`'s `answer` of `gguf`; `None` for the in-process runner
    /// and for a side that is not measured.
    fn command(
        &self,
        side: Side,
        gguf: &Path,
        answer: Answer,
        args: &LocalSpeedArgs,
    ) -> Option<Command> {
        let job = Job {
            gguf: std::path::absolute(gguf).unwrap_or_else(|_| gguf.to_path_buf()),
            answer,
            prompts: &self.prompts,
            args,
        };
        match side {
            Side::Runner => None,
            Side::RunnerNative => Some(self.native.as_ref().ok()?.command(&job)),
            Side::Llama => Some(self.reference.as_ref().ok()?.command(&job)),
            Side::LlamaRunnerIsa => Some(self.runner_isa.as_ref().ok()?.command(&job)),
        }
    }
}

/// Every round on `gguf`: each side's timings, and the first round's subprocess commands.
fn time_model(
    gguf: &Path,
    args: &LocalSpeedArgs,
    grammar: &str,
    subprocesses: &Subprocesses,
    commands: &mut Vec<String>,
) -> ModelRun {
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
                let gbnf = (answer == Answer::CityGrammar).then_some(grammar);
                if side == Side::Runner {
                    if let Ok(runner) = &runner {
                        let timing = runner.time(messages(answer), args.max_tokens, gbnf);
                        run.record(side, answer, timing);
                    }
                } else if let Some(cmd) = subprocesses.command(side, gguf, answer, args) {
                    if round == 0 {
                        commands.push(describe(&cmd));
                    }
                    run.record(side, answer, time_subprocess(cmd));
                }
            }
        }
        eprintln!("bench: {} round {} done", run.model, round + 1);
    }
    run
}

/// Runs `cmd` and reads the timing it prints (its last line), like `llama.mjs` and the
/// harness's `local-speed-answer` do.
fn time_subprocess(mut cmd: Command) -> anyhow::Result<Timing> {
    let program = Path::new(cmd.get_program())
        .file_name()
        .map(|name| name.to_string_lossy().into_owned())
        .unwrap_or_default();
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {program}"))?;
    if !out.status.success() {
        return Err(anyhow!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .last()
        .ok_or_else(|| anyhow!("{program} printed nothing"))?;
    serde_json::from_str(line).with_context(|| format!("{program} printed {line:?}"))
}

pub fn run(args: LocalSpeedArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    std::fs::create_dir_all(&args.work_dir)?;
    let work = std::path::absolute(&args.work_dir)?;
    let grammar = city_grammar(&args.eval_dir)?;
    let load_before = loadavg();
    let subprocesses = Subprocesses::prepare(&args, &work, &grammar)?;
    let mut commands = Vec::new();
    let runs: Vec<ModelRun> = args
        .gguf
        .iter()
        .map(|gguf| time_model(gguf, &args, &grammar, &subprocesses, &mut commands))
        .collect();
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
        reference: subprocesses.reference.map(|peer| peer.version),
        runner_isa: subprocesses.runner_isa.map(|_| ()),
        native: subprocesses.native.map(|harness| harness.describe()),
        commands,
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
    if args.native_harness.is_some() {
        command.push_str(" --native");
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
    fn a_subprocess_timing_is_its_last_line_and_a_failure_names_the_program() {
        let t = Timing {
            prompt_tokens: 3,
            tokens: 4,
            first_s: 0.5,
            rest_s: 1.5,
            rest_cpu_s: None,
        };
        // What `local-speed-answer` prints, after a line of its own.
        let printed = serde_json::to_string(&t).unwrap();
        let mut ok = Command::new("sh");
        ok.args(["-c", &format!("echo loading; echo '{printed}'")]);
        assert_eq!(time_subprocess(ok).unwrap(), t);
        let mut failing = Command::new("sh");
        failing.args(["-c", "echo broken >&2; exit 3"]);
        let e = format!("{:#}", time_subprocess(failing).unwrap_err());
        assert!(e.starts_with("sh failed") && e.contains("broken"), "{e}");
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
