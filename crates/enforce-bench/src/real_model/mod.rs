//! `enforce-bench real-model`: the real-model section of BENCHMARKS.md. `enforce eval` with the
//! local runner (llama.cpp in-process) on every contract of `examples/eval/`, one eval per arm,
//! then the peers' own re-ask loops against the same model, served by `enforce serve` as a plain
//! relay (a profile without validators) whose audit log counts every call's tokens.
//!
//! Each model gets its own part of the section, so a run on one model (the small test model in
//! minutes, the larger ones in hours) leaves the others' parts as they were. With `--reuse`, an
//! arm measured before with the very same command is read back instead of run again (its table
//! row says when it was measured): a long run can be finished in pieces.
//!
//! Blocking code, like `peers.rs`: it starts processes and waits for them.

mod peer_loops;
mod render;

use crate::peers;
use anyhow::{anyhow, Context as _};
use enforce_core::strategy::StrategyStats;
use enforce_eval::summary::ArmSummary;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// Options of the real-model run.
#[derive(Debug, Clone, clap::Args)]
pub struct RealModelArgs {
    /// The `enforce` binary, built with the feature `local`.
    #[arg(long)]
    pub enforce_bin: PathBuf,
    /// The GGUF model file.
    #[arg(long)]
    pub gguf: PathBuf,
    /// Where results, configs and logs go (the peers' virtualenvs are shared with `peers`).
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The report whose real-model section is replaced.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// The eval examples (datasets and their `enforce.yaml`).
    #[arg(long, default_value = "examples/eval")]
    pub eval_dir: PathBuf,
    /// Arms of every eval (`constrained` runs only on contracts with a JSON Schema: the others
    /// have no grammar to constrain to; `escalate` only with `--escalate-gguf`).
    #[arg(long, default_value = DEFAULT_ARMS)]
    pub arms: String,
    /// The model the `escalate` arm re-asks (`enforce eval --escalate-model`), a larger GGUF
    /// than `--gguf`.
    #[arg(long)]
    pub escalate_gguf: Option<PathBuf>,
    /// Only these contracts, by profile name (comma-separated; every contract by default).
    #[arg(long)]
    pub contracts: Option<String>,
    /// The first seed (request i gets SEED + i, in every arm and for every peer).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// The first seed of the evals the arm `auto` learns from (the arms of [`LEARNING_ARMS`],
    /// with `--stats`); by default --seed + 1000, so `auto` is measured on seeds it did not
    /// learn from.
    #[arg(long)]
    pub train_seed: Option<u64>,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f64,
    /// Most tokens per answer, for every contract (by default each contract's own: 256, and
    /// more for the code and ADR contracts, whose answers are longer).
    #[arg(long)]
    pub max_tokens: Option<u64>,
    /// llama.cpp threads per generation.
    #[arg(long, default_value_t = 1)]
    pub threads: u32,
    /// Requests at once (each generation runs on its own thread).
    #[arg(long, default_value_t = 2)]
    pub concurrency: u32,
    /// Re-asks of the peers' loops (`max_retries`, `retries`, `num_reasks`); enforce's come from
    /// the profiles of `examples/eval/enforce.yaml` (`max_retries: 2`), so keep the two equal.
    #[arg(long, default_value_t = 2)]
    pub retries: u32,
    /// Skip the peers (enforce's eval only).
    #[arg(long)]
    pub no_peers: bool,
    /// Only the first N cases of every dataset (all by default).
    #[arg(long)]
    pub cases: Option<usize>,
    /// Read back an arm measured before with the same command (same binary path, model,
    /// dataset and flags) instead of running it again.
    #[arg(long)]
    pub reuse: bool,
    /// Where each measured arm's record goes (`MODEL/CONTRACT/ARM.json`: its summary and the
    /// command that ran it), the records `--reuse` reads back; by default under `--work-dir`.
    /// A directory in the repository keeps them across machines, so a run of many hours can be
    /// finished in pieces.
    #[arg(long)]
    pub records: Option<PathBuf>,
    /// The part of the section this run writes, beside the model's own (a name without spaces,
    /// e.g. `strategies`): other arms measured on the same model then leave the model's part
    /// as it is. By default the model's part.
    #[arg(long, value_parser = part_name)]
    pub part: Option<String>,
}

/// A `--part` name: it goes into the section's markers, which a space would break.
fn part_name(name: &str) -> Result<String, String> {
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == ':') {
        return Err(format!(
            "`{name}`: a part's name is one word (no spaces or colons)"
        ));
    }
    Ok(name.to_string())
}

/// The arms measured unless `--arms` says otherwise.
pub const DEFAULT_ARMS: &str =
    "none,resample,feedback,ladder,constrained,reason-format,escalate,auto";

/// The evals `auto` learns from, on the training seeds: the arms whose re-asks are each one
/// strategy `auto` can choose (`ladder`'s first rung is `constrained`, run only where the
/// contract gives a constraint).
pub const LEARNING_ARMS: [&str; 4] = ["resample", "feedback", "reason-format", "ladder"];

/// One contract of `examples/eval/`: its dataset and profile.
#[derive(Debug)]
struct Contract {
    name: &'static str,
    dataset: &'static str,
    profile: &'static str,
    /// The answer is JSON with a schema: `constrained` has a grammar to apply.
    json: bool,
    /// Most tokens per answer unless `--max-tokens` says otherwise.
    max_tokens: u64,
}

const CONTRACTS: &[Contract] = &[
    Contract {
        name: "bare JSON matching a schema",
        dataset: "city-json.jsonl",
        profile: "city_json",
        json: true,
        max_tokens: 256,
    },
    Contract {
        name: "three sections, ≤ 150 words",
        dataset: "sections.jsonl",
        profile: "sections",
        json: false,
        max_tokens: 256,
    },
    Contract {
        name: "Python in a fence that compiles",
        dataset: "python.jsonl",
        profile: "python",
        json: false,
        max_tokens: 256,
    },
    Contract {
        name: "a step marker at the end",
        dataset: "step.yaml",
        profile: "step",
        json: false,
        max_tokens: 256,
    },
    Contract {
        name: "a Python function that passes the case's tests",
        dataset: "code.jsonl",
        profile: "code",
        json: false,
        max_tokens: 384,
    },
    Contract {
        name: "an architecture decision record (the built-in ADR checks)",
        dataset: "adr.jsonl",
        profile: "adr",
        json: false,
        max_tokens: 512,
    },
];

/// What one arm's eval measured, and how.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct ArmRun {
    /// The arm's entry of the eval's summary.json.
    summary: ArmSummary,
    /// The command that ran it.
    command: String,
    /// Its wall time.
    wall_s: f64,
    /// When it ran (UTC).
    measured: String,
    /// Read back from an earlier run (`--reuse`), not run now.
    #[serde(skip)]
    reused: bool,
    /// A learning run's strategy statistics (`enforce eval --stats`), kept in the record so
    /// that `auto` can learn from an arm read back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stats: Option<StrategyStats>,
}

/// How one eval of an arm differs from the measured runs: the learning runs of `auto` have
/// their own seeds, name and statistics file; `auto` reads the learned statistics.
#[derive(Debug, Clone)]
struct Variant {
    /// The record's and the output directory's name.
    name: String,
    /// The first seed.
    seed: u64,
    /// `--stats` (a file in the output directory) for a learning run.
    learns: bool,
    /// `--stats-from FILE` for `auto`.
    stats_from: Option<PathBuf>,
}

impl Variant {
    /// A measured run of `arm` on the usual seeds.
    fn measured(args: &RealModelArgs, arm: &str) -> Self {
        Variant {
            name: arm.to_string(),
            seed: args.seed,
            learns: false,
            stats_from: None,
        }
    }
}

/// The statistics file a learning run writes in its output directory.
const LEARNED: &str = "learned-stats.json";

/// The evals of one contract: one run per arm.
struct ContractRun {
    contract: &'static Contract,
    max_tokens: u64,
    arms: Vec<ArmRun>,
    /// Arms not run on this contract, with why.
    skipped: Vec<String>,
    /// The learning runs of `auto` (on the training seeds), when it ran.
    learned: Vec<ArmRun>,
}

pub fn run(args: RealModelArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let work = absolute(&args.work_dir)?;
    std::fs::create_dir_all(&work)?;
    if !args.gguf.is_file() {
        return Err(anyhow!(
            "no model at {} (cargo xtask models installs it; --bench-model the larger ones)",
            args.gguf.display()
        ));
    }
    let load_before = peers::loadavg();
    let mut runs = Vec::new();
    let mut failures = Vec::new();
    for contract in chosen_contracts(&args)? {
        match eval_contract(&args, &work, contract) {
            Ok(run) => runs.push(run),
            Err(e) => failures.push(format!("{}: {e:#}", contract.name)),
        }
    }
    let mut peer_runs = Vec::new();
    let runs_json = runs.iter().any(|r| r.contract.json);
    if !args.no_peers && runs_json {
        match peer_loops::run(&args, &work) {
            Ok(found) => peer_runs = found,
            Err(e) => failures.push(format!("peers: {e:#}")),
        }
    }
    let part = render::model_part(
        &args,
        &runs,
        &peer_runs,
        &failures,
        &load_before,
        started.elapsed(),
    );
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(
        &args.out,
        render::splice_model(&old, &part_key(&args), &part),
    )?;
    eprintln!(
        "bench: wrote {}'s part of the real-model section of {} in {:.0} s",
        part_key(&args),
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The GGUF's file name without `.gguf`: the model's name in the section.
fn model_name(args: &RealModelArgs) -> String {
    args.gguf
        .file_stem()
        .map_or("model".into(), |n| n.to_string_lossy().into_owned())
}

/// The key of the part this run writes: the model's name, with `/PART` for `--part`.
fn part_key(args: &RealModelArgs) -> String {
    match &args.part {
        Some(part) => format!("{}/{part}", model_name(args)),
        None => model_name(args),
    }
}

fn chosen_contracts(args: &RealModelArgs) -> anyhow::Result<Vec<&'static Contract>> {
    let Some(list) = &args.contracts else {
        return Ok(CONTRACTS.iter().collect());
    };
    list.split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|profile| {
            CONTRACTS
                .iter()
                .find(|c| c.profile == profile)
                .ok_or_else(|| {
                    let known: Vec<&str> = CONTRACTS.iter().map(|c| c.profile).collect();
                    anyhow!("no contract `{profile}` (known: {})", known.join(", "))
                })
        })
        .collect()
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    })
}

/// The sampling flags every request gets, enforce's and the peers', from the first seed `seed`.
fn sampling(args: &RealModelArgs, seed: u64, max_tokens: u64) -> Vec<String> {
    vec![
        "--seed".into(),
        seed.to_string(),
        "--temperature".into(),
        args.temperature.to_string(),
        "--max-tokens".into(),
        max_tokens.to_string(),
    ]
}

fn eval_contract(
    args: &RealModelArgs,
    work: &Path,
    contract: &'static Contract,
) -> anyhow::Result<ContractRun> {
    let max_tokens = args.max_tokens.unwrap_or(contract.max_tokens);
    let dataset = dataset_in(args, work, contract.dataset)?;
    let mut run = ContractRun {
        contract,
        max_tokens,
        arms: Vec::new(),
        skipped: Vec::new(),
        learned: Vec::new(),
    };
    for arm in args
        .arms
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        if arm.split('+').any(|w| w == "constrained") && !contract.json {
            run.skipped.push(format!(
                "`{arm}`: this contract has no JSON Schema to constrain decoding to"
            ));
            continue;
        }
        if escalates(arm) && args.escalate_gguf.is_none() {
            run.skipped.push(format!(
                "`{arm}`: no escalation model (--escalate-gguf; `cargo xtask bench-peers --real-model --escalate-model NAME`)"
            ));
            continue;
        }
        let mut variant = Variant::measured(args, arm);
        if learns_elsewhere(arm) {
            if run.learned.is_empty() {
                run.learned = learn(args, work, contract, &dataset, max_tokens)?;
            }
            variant.stats_from = Some(learned_stats(args, work, contract, &run.learned)?);
        }
        let ruled = under_rules(arm, contract);
        run.arms.push(eval_arm(
            args, work, contract, &dataset, max_tokens, &ruled, &variant,
        )?);
    }
    Ok(run)
}

/// The arm `enforce eval` runs for `arm` on `contract`: `auto` decodes under the contract's
/// JSON Schema where it has one (`auto+constrained`), as a user with a schema configures it.
/// Constraining decoding is a rule of `reask: auto`, not one of its bets, so `auto` without it
/// would be measured with the rule switched off.
fn under_rules(arm: &str, contract: &Contract) -> String {
    let constrained = arm.split('+').any(|w| w == "constrained");
    if learns_elsewhere(arm) && contract.json && !constrained {
        format!("{arm}+constrained")
    } else {
        arm.to_string()
    }
}

/// Whether `arm` chooses by learned statistics (its words include `auto`).
fn learns_elsewhere(arm: &str) -> bool {
    arm.split('+').any(|w| w == "auto")
}

/// The learning runs of `auto`: each of [`LEARNING_ARMS`] (the `ladder` only where the
/// contract has a constraint) on the training seeds, with `--stats`.
fn learn(
    args: &RealModelArgs,
    work: &Path,
    contract: &Contract,
    dataset: &Path,
    max_tokens: u64,
) -> anyhow::Result<Vec<ArmRun>> {
    let seed = args.train_seed.unwrap_or(args.seed.saturating_add(1000));
    LEARNING_ARMS
        .iter()
        .filter(|arm| contract.json || **arm != "ladder")
        .map(|arm| {
            let variant = Variant {
                name: format!("learn-{arm}"),
                seed,
                learns: true,
                stats_from: None,
            };
            eval_arm(args, work, contract, dataset, max_tokens, arm, &variant)
        })
        .collect()
}

/// The statistics of the learning runs, added up into one file in the contract's work
/// directory, for `--stats-from`.
fn learned_stats(
    args: &RealModelArgs,
    work: &Path,
    contract: &Contract,
    learned: &[ArmRun],
) -> anyhow::Result<PathBuf> {
    let mut stats = StrategyStats::default();
    for run in learned {
        let found = run.stats.as_ref().ok_or_else(|| {
            anyhow!(
                "the learning run `{}` has no statistics (rerun without --reuse)",
                run.command
            )
        })?;
        stats.merge(found);
    }
    let dir = contract_dir(args, work, contract);
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("auto-stats.json");
    std::fs::write(&path, stats.to_json())?;
    Ok(path)
}

/// Where a contract's evals go under the work dir.
fn contract_dir(args: &RealModelArgs, work: &Path, contract: &Contract) -> PathBuf {
    work.join("real-model")
        .join(model_name(args))
        .join(contract.profile)
}

/// One arm of one contract: `enforce eval` into a directory of its own, or the result of the
/// same command read back (`--reuse`).
fn eval_arm(
    args: &RealModelArgs,
    work: &Path,
    contract: &Contract,
    dataset: &Path,
    max_tokens: u64,
    arm: &str,
    variant: &Variant,
) -> anyhow::Result<ArmRun> {
    let dir = contract_dir(args, work, contract);
    let out = dir.join(&variant.name);
    let mut cmd = eval_command(args, contract, dataset, max_tokens, arm, variant, &out);
    let command = peers::describe(&cmd);
    let records = match &args.records {
        Some(records) => absolute(records)?,
        None => work.join("real-model"),
    }
    .join(model_name(args))
    .join(contract.profile);
    let record = records.join(format!("{}.json", variant.name));
    if args.reuse {
        if let Some(mut earlier) = read_back(&record, &command) {
            eprintln!("bench: reused {} ({})", record.display(), earlier.measured);
            earlier.reused = true;
            return Ok(earlier);
        }
    }
    // A fresh run: a resumed one would mix settings of two runs.
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    std::fs::create_dir_all(&dir)?;
    let log = dir.join(format!("{}.log", variant.name));
    cmd.stderr(Stdio::from(std::fs::File::create(&log)?));
    eprintln!("bench: {command}");
    let started = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {command}"))?;
    if !status.success() {
        return Err(anyhow!(
            "{command} failed ({status}); see {}",
            log.display()
        ));
    }
    let summary_path = out.join("summary.json");
    let arm_summary = first_arm(&std::fs::read_to_string(&summary_path)?)
        .with_context(|| format!("{} is not an eval's summary", summary_path.display()))?;
    let stats = if variant.learns {
        Some(learned_by(&out, &command)?)
    } else {
        None
    };
    let run = ArmRun {
        summary: arm_summary,
        command,
        wall_s: started.elapsed().as_secs_f64(),
        measured: peers::version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        reused: false,
        stats,
    };
    std::fs::create_dir_all(&records)?;
    std::fs::write(&record, serde_json::to_vec_pretty(&run)?)?;
    Ok(run)
}

/// The `enforce eval` of `arm` on `contract` (as `variant` runs it) into `out`.
fn eval_command(
    args: &RealModelArgs,
    contract: &Contract,
    dataset: &Path,
    max_tokens: u64,
    arm: &str,
    variant: &Variant,
    out: &Path,
) -> Command {
    let mut cmd = Command::new(&args.enforce_bin);
    cmd.arg("eval")
        .arg(dataset)
        .arg("--config")
        .arg(args.eval_dir.join("enforce.yaml"))
        .arg("--profile")
        .arg(contract.profile)
        .arg("--arms")
        .arg(arm)
        .args(sampling(args, variant.seed, max_tokens))
        .arg("--concurrency")
        .arg(args.concurrency.to_string())
        .arg("--runner")
        .arg("local")
        .arg("--model")
        .arg(&args.gguf)
        .arg("--threads")
        .arg(args.threads.to_string());
    if let Some(larger) = args.escalate_gguf.as_ref().filter(|_| escalates(arm)) {
        cmd.arg("--escalate-model").arg(larger);
    }
    if variant.learns {
        cmd.arg("--stats").arg(out.join(LEARNED));
    }
    if let Some(stats) = &variant.stats_from {
        cmd.arg("--stats-from").arg(stats);
    }
    cmd.arg("-o")
        .arg(out)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null());
    cmd
}

/// The statistics a learning run (`command`) wrote in its output directory `out`.
fn learned_by(out: &Path, command: &str) -> anyhow::Result<StrategyStats> {
    let path = out.join(LEARNED);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("{command} wrote no statistics at {}", path.display()))?;
    StrategyStats::from_json(&text)
        .with_context(|| format!("{} is not a statistics file", path.display()))
}

/// The first arm of an eval's summary.json. Only the arm is read: the rest of the summary
/// (the setup, the pairs, the provenance) differs between versions of `enforce`, and a run of
/// many hours may be finished by another build.
fn first_arm(summary_json: &str) -> anyhow::Result<ArmSummary> {
    #[derive(Deserialize)]
    struct Arms {
        arms: Vec<ArmSummary>,
    }
    let arms: Arms = serde_json::from_str(summary_json)?;
    arms.arms
        .into_iter()
        .next()
        .ok_or_else(|| anyhow!("the summary has no arm"))
}

/// Whether `arm` re-asks another model (its words include `escalate`).
fn escalates(arm: &str) -> bool {
    arm.split('+').any(|w| w == "escalate")
}

/// The arm recorded at `record` when it was run by exactly `command`.
fn read_back(record: &Path, command: &str) -> Option<ArmRun> {
    let text = std::fs::read_to_string(record).ok()?;
    let run: ArmRun = match serde_json::from_str(&text) {
        Ok(run) => run,
        Err(e) => {
            eprintln!("bench: {} cannot be read back: {e}", record.display());
            return None;
        }
    };
    (run.command == command).then_some(run)
}

/// The dataset `name` of the examples, or its first `--cases` cases written to the work dir.
fn dataset_in(args: &RealModelArgs, work: &Path, name: &str) -> anyhow::Result<PathBuf> {
    let path = args.eval_dir.join(name);
    let Some(n) = args.cases else {
        return Ok(path);
    };
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let subset = if name.ends_with(".jsonl") {
        let mut kept: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        kept.truncate(n);
        kept.join("\n") + "\n"
    } else {
        let mut yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&text)?;
        if let Some(tests) = yaml.get_mut("tests").and_then(|t| t.as_sequence_mut()) {
            tests.truncate(n);
        }
        serde_yaml_ng::to_string(&yaml)?
    };
    let out = work.join(format!("first-{n}-{name}"));
    std::fs::write(&out, subset)?;
    Ok(out)
}

#[cfg(test)]
mod tests;
