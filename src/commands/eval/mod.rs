//! `enforce eval`: does enforcing pay, on your model? Runs a dataset through a profile once
//! per arm (no re-ask, resample, feedback, early abort, repair first...) with the same seeds,
//! and compares valid answers, spend and time.
//!
//! The work is the `enforce_eval` crate's (datasets, arms, trials, statistics, outputs); this
//! command loads `enforce.yaml`, its plugins and the runner, turns the flags into an
//! [`Eval`], shows the progress and prints the tables.

mod gates;
mod runner_provenance;

use crate::config::LoadedConfig;
use crate::decode;
use crate::runner_options::{model_of, RunnerOptions, SamplingOptions};
use crate::usage::UsageError;
use clap::Args as ClapArgs;
use enforce_config::Profile;
use enforce_core::{Policy, Runner};
use enforce_eval::{
    arms, strategy_stats, tables, Arm, ConfigFile, Eval, EvalError, Event, Observer, Shard, Split,
    Summary, ANSWERS, ATTEMPTS,
};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// Exit code: usage or configuration error.
const EXIT_USAGE: u8 = 2;
/// Exit code: the eval stopped on an I/O error after it began.
const EXIT_IO: u8 = 1;
/// Exit code: an arm missed a `--fail-under` or `--max-tokens-per-valid` gate.
const EXIT_GATE: u8 = 3;

/// The long help; the arms' words come from [`arms::WORDS`].
pub fn about() -> String {
    let width = arms::WORDS
        .iter()
        .map(|(word, _)| word.len())
        .max()
        .unwrap_or(0);
    let words: String = arms::WORDS
        .iter()
        .map(|(word, meaning)| format!("  {word:<width$} {meaning}\n"))
        .collect();
    format!("{ABOUT_START}{words}{ABOUT_END}")
}

const ABOUT_START: &str = "\
Does enforcing pay, on your model? Run a dataset through a profile once per arm (a re-ask \
strategy) with the same seeds, and compare valid answers (passed or repaired), tokens and time.

Every request carries params.seed = SEED + the index of (case, repeat), the same in every arm, \
so with a seeded model the first attempt is identical in every arm and the arms differ only in \
what they do after it (the openai runner sends the seed upstream; the command runner has no \
way to pass it on).

Arms (--arms, comma-separated; each arm is words joined by `+`):\n";

const ABOUT_END: &str = "\
The arm changes only the profile's policy; its validators and max_retries stay.

DATASET is JSONL, one case a line: {\"prompt\": \"...\"} or {\"messages\": [{\"role\": \"user\", \
\"content\": \"...\"}]}, with optional \"id\" (default case-<n>), \"context\" (an object of facts \
for placeholders and validators) and \"profile\". A .yaml/.yml file is read as promptfoo-style \
YAML: `prompts:` with {{var}} placeholders, `tests:` with `vars` (or a `prompt` var).

Outputs, in the -o directory:
  attempts.jsonl  one audit record per trial (the shape of `enforce serve`'s audit log, plus
                  \"eval\": {arm, case, repeat, seed}); `enforce report` reads it. A rerun with the
                  same -o resumes: the trials recorded there (same arm, case id, repeat and
                  seed) are not run again.
  summary.json    per arm: first-attempt pass rate, valid rate after each attempt with 95 %
                  intervals (clustered by case), outcomes, tokens and time per valid answer,
                  valid answers per 1,000 tokens, blind resampling at equal tokens, pass@t; per
                  issue code how often it occurs and each arm fixes it; every pair of arms
                  compared (sign test over cases, Holm-adjusted p, minimum detectable effect);
                  the provenance (enforce version, runner and model, the GGUF file's sha256,
                  sampling, seeds, digests, machine; never a key)
  answers.jsonl   every attempt's answer as the model wrote it (before repairs; `cut`: the part
                  received before early abort), one line each in the format of
                  tests/fixtures/real-answers/ (id arm/case/repeat/attempt, contract = the
                  profile, config, prompt, answer, finish_reason, source)
  junit.xml       one test case per case × arm × repeat; a failure is an answer not valid
  report.html     one self-contained page with the charts
  eval.json       what the run was asked to run (setup, shard, arms, case ids, digests of the
                  dataset and the configuration, provenance), for --merge
The tables go to stdout, a progress bar to stderr (when it is a terminal).

Statistics: with --repeats N a case's repeats count as one cluster: each interval is Wilson's \
on the trials divided by the design effect (the between-case variance of the rate over the \
binomial one; one repeat gives the plain Wilson interval). Pairs of arms are compared with the \
exact sign test over cases, its p adjusted by Holm's method for the number of pairs (read `p \
(Holm)` against 0.05), and MDE, the smallest difference of valid rates the run would detect \
with 80 % power at α 0.05: (1.96 + 0.84) · s / √cases, s the spread of the per-case \
differences, at least the 6 one-sided cases the sign test needs over the cases (\"-\": too few \
cases).

Cost-matched: \"resample at equal tok\" is how many valid answers blind resampling would give \
with the arm's tokens. From the run's blind samples (first attempts of arms that ask plainly, \
every attempt of an arm that only resamples, one per case and seed), each case's pass \
probability gets a Beta prior fitted to the spread between cases; resampling until valid, at \
most K attempts, gives 1 − E[(1 − p)^K] valid answers per trial for t · Σ_{j<K} E[(1 − p)^j] \
tokens (t: tokens per attempt), with K set so the tokens equal the arm's.

Learning reask: auto: --stats FILE adds what every arm's re-asks achieved (per model, \
profile, issue code and strategy; not an arm with `constrained`, which constrains every attempt) to the statistics file `reask_auto.stats` reads, once the \
eval is done or merged; an existing file is added to (several evals add up; a rerun into the \
same -o, or a merge, adds no trial twice: stats-added.json lists them), written through a \
temporary file and a rename; the file is not locked, so give it to --merge rather than to \
shards running at once. The arm `auto` chooses by --stats-from FILE, statistics another eval \
learned: learn on other seeds (e.g. --seed 1042 --stats s.json), then measure `auto` on yours \
(--seed 42 --stats-from s.json), so it is never measured on answers it learned from; or split \
the cases with --split K/N (the other arms learn on K of every N cases, every arm is measured \
on the rest).

CI gates: --fail-under ARM=RATE and --max-tokens-per-valid ARM=N (each repeatable) check the \
arms once every output is written; each gate missed is printed with the arm, the measured \
figure and the threshold, and the exit code is 3. A gate on an arm the eval does not run is a \
usage error.

Scaling out: --shard I/N runs part I of N, I from 0 to N-1 (as a Kubernetes indexed Job's \
JOB_COMPLETION_INDEX): the cases at positions I, I+N, I+2N... of the dataset (counted from 0), \
in every arm and repeat, with the seeds the whole run sends. Give each part its own -o, then \
`enforce eval --merge DIR... -o OUT` writes the outputs of the whole eval. It refuses parts of \
different evals (naming what differs: dataset, configuration, arms, seed, ...), a part given \
twice or missing, and a part that stopped early (rerun its command to finish it).

Example (a llama.cpp or Ollama server; see examples/eval/):
  enforce eval examples/eval/city-json.jsonl -c examples/eval/enforce.yaml -p city_json \\
    --arms none,resample,feedback,feedback+abort,repair-first --repeats 1 --seed 42 \\
    --temperature 0.7 --max-tokens 256 --runner openai --base-url http://localhost:8080/v1 \\
    --model smollm2 -o results/

Exit codes: 0 the eval ran (whatever the answers) and met every gate, 1 it stopped writing its \
results, 2 usage or configuration error (a gate naming an arm not run included), 3 an arm \
missed a --fail-under or --max-tokens-per-valid gate (the outputs are written).";

/// Run a dataset through a profile once per arm and compare.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The dataset: JSONL (one case a line) or promptfoo-style YAML; not with --merge.
    #[arg(required_unless_present = "merge")]
    pub dataset: Option<PathBuf>,
    /// Configuration file (profiles, validators, `runner:` section); default `./enforce.yaml`
    /// when it exists.
    #[arg(long, short = 'c', env = "ENFORCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Profile to enforce (default: the configuration's default, else `chat`); a case's
    /// `profile` wins.
    #[arg(long, short = 'p')]
    pub profile: Option<String>,
    /// Arms to compare, comma-separated (see above).
    #[arg(long, default_value = arms::DEFAULT)]
    pub arms: String,
    /// Runs per case and arm (each with its own seed).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeats: u32,
    /// Requests run at once.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub concurrency: u32,
    #[command(flatten)]
    pub sampling: SamplingOptions,
    /// Directory for the results (created; an existing one is resumed).
    #[arg(long, short = 'o', value_name = "DIR", default_value = "results")]
    pub output: PathBuf,
    /// Root for path-checking validators (default: the current directory).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// Run only part I of N of the dataset, I from 0 (as JOB_COMPLETION_INDEX): the cases at
    /// positions I, I+N, I+2N..., every arm and repeat, with the whole run's seeds.
    #[arg(long, value_name = "I/N", conflicts_with = "merge")]
    pub shard: Option<Shard>,
    /// Run nothing: merge the -o directories of every part of a sharded eval into -o, as the
    /// outputs of the whole eval.
    #[arg(long, value_name = "DIR", num_args = 1.., conflicts_with = "dataset")]
    pub merge: Vec<PathBuf>,
    /// Exit 3 when ARM's valid rate is under RATE, a fraction (feedback=0.9) or a percentage
    /// (feedback=90%); repeatable. The outputs are written first.
    #[arg(long, value_name = "ARM=RATE")]
    pub fail_under: Vec<gates::RateGate>,
    /// Exit 3 when ARM's tokens (prompt + completion) per valid answer exceed N; repeatable.
    #[arg(long, value_name = "ARM=N")]
    pub max_tokens_per_valid: Vec<gates::TokenGate>,
    /// Once the eval is done (or merged), add what each re-ask strategy achieved per model,
    /// profile and issue code to this statistics file, the one `reask_auto.stats` and
    /// --stats-from read; created when missing, added to when it exists (several evals add
    /// up; a rerun into the same -o adds no trial twice). Written to a temporary file and
    /// renamed, so a crash loses nothing.
    #[arg(long, value_name = "FILE")]
    pub stats: Option<PathBuf>,
    /// The statistics the arm `auto` chooses by: a file --stats wrote in another eval (other
    /// seeds or cases, so `auto` is not measured on what it learned from). Required by `auto`.
    #[arg(long, value_name = "FILE", conflicts_with = "merge")]
    pub stats_from: Option<PathBuf>,
    /// Learn `auto` on K of every N cases, measure every arm on the others: the cases at
    /// positions i (from 0) with i mod N < K learn. The arms other than `auto` run on them into
    /// -o's learn/ (their statistics in learn/learned-stats.json), then every arm runs on the
    /// other cases, `auto` choosing by those statistics; -o's summary is of those cases.
    #[arg(long, value_name = "K/N", conflicts_with_all = ["merge", "stats_from"])]
    pub split: Option<Split>,
    #[command(flatten)]
    pub runner: RunnerOptions,
}

/// Runs `enforce eval`.
pub fn run(args: Args) -> ExitCode {
    match execute(&args) {
        Ok(code) => ExitCode::from(code),
        Err(UsageError(message)) => {
            eprintln!("enforce eval: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn execute(args: &Args) -> Result<u8, UsageError> {
    if !args.merge.is_empty() {
        let merged = enforce_eval::merge(&args.merge, &args.output).and_then(|summary| {
            if let Some(path) = &args.stats {
                let added = strategy_stats::add_output(&args.output, path)?;
                eprintln!("enforce eval: {}", Event::StatsAdded { path, added });
            }
            Ok(summary)
        });
        return finished(
            merged,
            &format!("merged {} part(s) into", args.merge.len()),
            args,
        );
    }
    let Some(dataset) = &args.dataset else {
        return Err(UsageError("give a DATASET, or --merge DIR...".into()));
    };
    let arms = Arm::parse_list(&args.arms)?;
    let stats_from = match &args.stats_from {
        Some(path) => Some(Arc::new(strategy_stats::read(path)?.ok_or_else(|| {
            UsageError(format!("--stats-from {}: no such file", path.display()))
        })?)),
        None => None,
    };
    let names: Vec<String> = arms.iter().map(|a| a.name.clone()).collect();
    if let Some(message) = gates::unknown_arm(&args.fail_under, &args.max_tokens_per_valid, &names)
    {
        return Err(UsageError(message));
    }
    let loaded = LoadedConfig::load(args.config.as_deref())?;
    let (registry, _host) = crate::plugin_host::registry_with_plugins(&loaded);
    let mut profiles = loaded.profiles(&registry, args.root.clone())?;
    let escalation = args.runner.escalation(loaded.config.runner.clone())?;
    crate::escalation::connect(&mut profiles, &loaded, escalation)?;
    let runner_config = args.runner.runner_config(loaded.config.runner.clone())?;
    let runner: Arc<dyn Runner> = Arc::from(runner_config.build()?);
    let eval = Eval {
        dataset: dataset.clone(),
        profile: args
            .profile
            .clone()
            .unwrap_or_else(|| profiles.default_name().to_string()),
        arms,
        repeats: args.repeats,
        // The seed goes in per request; without --seed the first is 0.
        seed: args.sampling.seed.unwrap_or(0),
        params: SamplingOptions {
            seed: None,
            ..args.sampling.clone()
        }
        .params(),
        concurrency: args.concurrency as usize,
        shard: args.shard.unwrap_or(Shard::WHOLE),
        output: Some(args.output.clone()),
        runner_kind: runner_config.kind().to_string(),
        model: model_of(&runner_config).map(str::to_string),
        runner_provenance: Some(runner_provenance::runner_provenance(&runner_config)),
        config: loaded.source.as_ref().map(|s| ConfigFile {
            path: s.path().display().to_string(),
            text: s.original_text().to_string(),
        }),
        stats: args.stats.clone(),
        stats_from,
        split: None,
    };
    let constrain = |profile: &Profile, policy: &Policy, forced: bool| {
        decode::for_profile(profile, policy, &runner_config, forced)
    };
    let progress = progress_bar();
    let observer = observer(progress.clone());
    let result = match args.split {
        Some(split) => {
            enforce_eval::run_split(eval, split, &profiles, runner, &constrain, observer)
        }
        None => eval.run(&profiles, runner, &constrain, observer),
    };
    progress.finish_and_clear();
    finished(result, "wrote", args)
}

/// The exit code of a finished eval or merge: the tables on stdout, what was written and the
/// gates missed (exit 3), or the error (exit 2 for bad input, 1 for a failure after the eval
/// began).
fn finished(result: Result<Summary, EvalError>, done: &str, args: &Args) -> Result<u8, UsageError> {
    match result {
        Ok(summary) => {
            print!("{}", tables::text(&summary));
            eprintln!(
                "enforce eval: {done} {} (summary.json, junit.xml, report.html, {ATTEMPTS}, \
                 {ANSWERS})",
                args.output.display()
            );
            let (rates, tokens) = (&args.fail_under, &args.max_tokens_per_valid);
            // A merge learns its arms from the parts.
            let names: Vec<String> = summary.arms.iter().map(|a| a.arm.clone()).collect();
            if let Some(message) = gates::unknown_arm(rates, tokens, &names) {
                return Err(UsageError(message));
            }
            let missed = gates::failures(&summary.arms, rates, tokens);
            for message in &missed {
                eprintln!("enforce eval: {message}");
            }
            Ok(if missed.is_empty() { 0 } else { EXIT_GATE })
        }
        Err(e) if e.is_input() => Err(UsageError(e.to_string())),
        Err(e) => {
            eprintln!("enforce eval: {e}");
            Ok(EXIT_IO)
        }
    }
}

/// The eval's events on stderr: the progress bar, and the notes in words.
fn observer(bar: indicatif::ProgressBar) -> Observer {
    Arc::new(move |event| match event {
        Event::Started { pending } => {
            // A split eval starts twice: the learning cases, then the measured ones.
            bar.set_position(0);
            bar.set_length(pending as u64);
        }
        Event::Trial(trial) => {
            bar.set_message(format!("{} {}", trial.key.arm, trial.key.case));
            bar.inc(1);
        }
        note => bar.suspend(|| eprintln!("enforce eval: {note}")),
    })
}

fn progress_bar() -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(0);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {pos}/{len} trials, {elapsed} (eta {eta}) {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}
