//! `enforce eval`: does enforcing pay, on your model? Runs a dataset through a profile once
//! per arm (no re-ask, resample, feedback, early abort, repair first...) with the same seeds,
//! and compares valid answers, spend and time.
//!
//! `dataset` reads the cases, `arms` the strategies, `trials` runs them and keeps their audit
//! records (resume), `summary` counts, `stats` gives intervals and tests, `junit` and `html`
//! write the other outputs (`outputs` all of them). `shard` picks the part of the dataset a
//! run of a sharded eval takes, `manifest` records what a run ran, `merge` joins the parts.

mod answers;
mod arms;
mod dataset;
mod html;
mod junit;
mod manifest;
mod merge;
mod outputs;
mod shard;
mod stats;
mod summary;
mod trials;

use crate::config::LoadedConfig;
use crate::decode;
use crate::runner_options::{model_of, RunnerOptions, SamplingOptions};
use crate::usage::{unknown_profile, UsageError};
use arms::Arm;
use clap::Args as ClapArgs;
use enforce_core::{Enforcer, Runner};
use manifest::Manifest;
use merge::MergeError;
use outputs::{ANSWERS, ATTEMPTS};
use shard::Shard;
use std::collections::{HashMap, HashSet};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use trials::{Plan, Sink, Trial};

/// Exit code: usage or configuration error.
const EXIT_USAGE: u8 = 2;
/// Exit code: the eval stopped on an I/O error after it began.
const EXIT_IO: u8 = 1;

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
  summary.json    per arm: first-attempt pass rate, valid rate after each attempt with 95 % Wilson
                  intervals, outcomes, tokens and time per valid answer; per issue code how often
                  it occurs and each arm fixes it; every pair of arms compared (sign test)
  answers.jsonl   every attempt's answer as the model wrote it (before repairs; `cut`: the part
                  received before early abort), one line each in the format of
                  tests/fixtures/real-answers/ (id arm/case/repeat/attempt, contract = the
                  profile, config, prompt, answer, finish_reason, source)
  junit.xml       one test case per case × arm × repeat; a failure is an answer not valid
  report.html     one self-contained page with the charts
  eval.json       what the run was asked to run (setup, shard, arms, case ids, digests of the
                  dataset and the configuration), for --merge
The tables go to stdout, a progress bar to stderr (when it is a terminal).

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

Exit codes: 0 the eval ran (whatever the answers), 1 it stopped writing its results, 2 usage or \
configuration error.";

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
    #[arg(
        long,
        default_value = "none,resample,feedback,feedback+abort,repair-first"
    )]
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
        return run_merge(args);
    }
    let Some(dataset_path) = &args.dataset else {
        return Err(UsageError("give a DATASET, or --merge DIR...".into()));
    };
    let shard = args.shard.unwrap_or(Shard::WHOLE);
    let arms = Arm::parse_list(&args.arms)?;
    let cases = dataset::read(dataset_path)?;
    let loaded = LoadedConfig::load(args.config.as_deref())?;
    let (registry, _host) = crate::plugin_host::registry_with_plugins(&loaded);
    let mut profiles = loaded.profiles(&registry, args.root.clone())?;
    let escalation = args.runner.escalation(loaded.config.runner.clone())?;
    crate::escalation::connect(&mut profiles, &loaded, escalation)?;
    let profile_name = args
        .profile
        .clone()
        .unwrap_or_else(|| profiles.default_name().to_string());
    let profile_names: Vec<String> = cases
        .iter()
        .map(|c| c.profile.clone().unwrap_or_else(|| profile_name.clone()))
        .collect();
    let runner_config = args.runner.runner_config(loaded.config.runner.clone())?;
    // An enforcer per (profile, arm), shared by the cases.
    let mut built: HashMap<(String, usize), Arc<Enforcer>> = HashMap::new();
    let mut enforcers = Vec::with_capacity(cases.len());
    let mut constrained = Vec::with_capacity(cases.len());
    let mut noted = HashSet::new();
    for (case, name) in cases.iter().zip(&profile_names) {
        let profile = profiles.get(name).ok_or_else(|| {
            let whose = match case.profile {
                Some(_) => format!(" (case `{}`)", case.id),
                None => String::new(),
            };
            unknown_profile(&profiles, name, &whose)
        })?;
        if let Some(arm) = arms.iter().find(|arm| arm.escalates()) {
            if profile.enforcer().escalation().is_none() {
                return Err(UsageError(format!(
                    "arm `{}` escalates, but profile `{name}` has no escalation model: give --escalate-model MODEL or the profile's `escalate_to`",
                    arm.name
                )));
            }
        }
        let per_arm = (0..arms.len())
            .map(|a| {
                Arc::clone(built.entry((name.clone(), a)).or_insert_with(|| {
                    Arc::new(
                        profile
                            .enforcer()
                            .with_policy(arms[a].policy(profile.policy())),
                    )
                }))
            })
            .collect();
        enforcers.push(per_arm);
        let per_arm: Vec<_> = arms
            .iter()
            .map(|arm| {
                let policy = arm.policy(profile.policy());
                decode::for_profile(profile, &policy, &runner_config, arm.constrained)
            })
            .collect();
        for note in per_arm.iter().flatten().flat_map(|c| &c.notes) {
            if noted.insert((name.clone(), note.clone())) {
                eprintln!("enforce eval: profile `{name}`: constrained decoding: {note}");
            }
        }
        constrained.push(per_arm);
    }
    let runner: Arc<dyn Runner> = Arc::from(runner_config.build()?);

    // The seed goes in per request (see `Plan::request`); without --seed the first is 0.
    let params = SamplingOptions {
        seed: None,
        ..args.sampling.clone()
    }
    .params();
    let plan = Arc::new(Plan {
        cases,
        arms,
        enforcers,
        constrained,
        profiles: profile_names,
        repeats: args.repeats,
        seed: args.sampling.seed.unwrap_or(0),
        params,
        runner_kind: runner_config.kind().to_string(),
        model: model_of(&runner_config).map(str::to_string),
        config: loaded
            .source
            .as_ref()
            .map(|s| s.path().display().to_string()),
    });

    let attempts_path = prepare_output(&args.output)?;
    let config_text = loaded.source.as_ref().map(|s| s.original_text());
    let manifest = manifest_of(&plan, dataset_path, profile_name, shard, config_text)?;
    manifest.claim(&args.output)?;
    if let Some(part) = shard.part() {
        let held = (0..plan.cases.len()).filter(|&c| shard.holds(c)).count();
        eprintln!(
            "enforce eval: shard {part}: {held} of the dataset's {} case(s)",
            plan.cases.len()
        );
    }
    let (mut trials, ignored) = resumed(&manifest, &attempts_path)?;
    if ignored > 0 {
        eprintln!(
            "enforce eval: {ignored} record(s) in {} belong to another eval (other arms, cases \
             or seeds) and are left out of this summary",
            attempts_path.display()
        );
    }
    let done = trials::done(&trials);
    let pending: Vec<_> = plan
        .jobs()
        .into_iter()
        .filter(|&job| shard.holds(job.case) && !done.contains(&plan.key(job)))
        .collect();
    if !trials.is_empty() {
        eprintln!(
            "enforce eval: resuming: {} trial(s) already in {}, {} to run",
            trials.len(),
            attempts_path.display(),
            pending.len()
        );
    }

    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&attempts_path)
        .map_err(|e| UsageError(format!("cannot write {}: {e}", attempts_path.display())))?;
    let answers_path = args.output.join(ANSWERS);
    let answers = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&answers_path)
        .map_err(|e| UsageError(format!("cannot write {}: {e}", answers_path.display())))?;
    let progress = progress_bar(pending.len() as u64);
    let bar = progress.clone();
    let sink = Sink {
        file: Some(file),
        answers: Some(answers),
        on_trial: Box::new(move |trial: &Trial| {
            bar.set_message(format!("{} {}", trial.key.arm, trial.key.case));
            bar.inc(1);
        }),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| UsageError(format!("cannot start the async runtime: {e}")))?;
    let concurrency = args.concurrency as usize;
    let new = runtime.block_on(trials::run_all(
        Arc::clone(&plan),
        runner,
        pending,
        concurrency,
        sink,
    ));
    progress.finish_and_clear();
    let new = match new {
        Ok(new) => new,
        Err(e) => {
            eprintln!(
                "enforce eval: stopped: cannot record a trial in {}: {e} (rerun to resume)",
                attempts_path.display()
            );
            return Ok(EXIT_IO);
        }
    };
    trials.extend(new);

    let Manifest {
        setup, arms, cases, ..
    } = manifest;
    if let Err(message) = outputs::finish(&args.output, setup, &arms, &cases, &trials) {
        eprintln!("enforce eval: {message}");
        return Ok(EXIT_IO);
    }
    eprintln!(
        "enforce eval: wrote {} (summary.json, junit.xml, report.html, {ATTEMPTS}, {ANSWERS})",
        args.output.display()
    );
    Ok(0)
}

/// What this run runs, for `eval.json` and the summary.
fn manifest_of(
    plan: &Plan,
    dataset: &Path,
    profile: String,
    shard: Shard,
    config_text: Option<&str>,
) -> Result<Manifest, UsageError> {
    Ok(Manifest {
        setup: summary::Setup {
            dataset: dataset.display().to_string(),
            cases: plan.cases.len(),
            repeats: plan.repeats,
            seed: plan.seed,
            profile,
            runner: plan.runner_kind.clone(),
            model: plan.model.clone(),
            params: plan.params.clone(),
            shard: shard.part(),
        },
        arms: plan.arms.iter().map(|a| a.name.clone()).collect(),
        cases: plan.cases.iter().map(|c| c.id.clone()).collect(),
        dataset_digest: manifest::file_digest(dataset)?,
        config_digest: config_text.map(enforce_core::outcome::fnv1a_hex),
    })
}

/// `--merge`: the parts' directories joined into `-o`.
fn run_merge(args: &Args) -> Result<u8, UsageError> {
    match merge::merge(&args.merge, &args.output) {
        Ok(()) => Ok(0),
        Err(MergeError::Refused(message)) => Err(UsageError(message)),
        Err(MergeError::Write(message)) => {
            eprintln!("enforce eval: {message}");
            Ok(EXIT_IO)
        }
    }
}

/// Creates the output directory; returns the path of `attempts.jsonl` after checking that it
/// can be written.
fn prepare_output(dir: &Path) -> Result<PathBuf, UsageError> {
    std::fs::create_dir_all(dir).map_err(|e| {
        UsageError(format!(
            "cannot create the output directory {}: {e}",
            dir.display()
        ))
    })?;
    let path = dir.join(ATTEMPTS);
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| UsageError(format!("cannot write {}: {e}", path.display())))?;
    Ok(path)
}

/// The trials of this run already recorded (one per key, the first), and how many records
/// belong to another eval (or another shard of this one).
fn resumed(manifest: &Manifest, path: &Path) -> Result<(Vec<Trial>, usize), UsageError> {
    let recorded = trials::resume(path)
        .map_err(|e| UsageError(format!("cannot read {}: {e}", path.display())))?;
    let wanted: HashSet<_> = manifest.keys().into_iter().collect();
    let (kept, ignored) = trials::select(recorded, &wanted);
    Ok((kept.into_iter().map(|(_, trial)| trial).collect(), ignored))
}

fn progress_bar(len: u64) -> indicatif::ProgressBar {
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) = indicatif::ProgressStyle::with_template(
        "{bar:30} {pos}/{len} trials, {elapsed} (eta {eta}) {msg}",
    ) {
        bar.set_style(style);
    }
    bar
}

#[cfg(test)]
mod tests;
