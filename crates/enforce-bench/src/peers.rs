//! `enforce-bench peers`: installs the peers, starts the mock and every target, drives them with
//! the same plan, and writes BENCHMARKS.md. Blocking code throughout: it only starts processes
//! and waits for them.

use crate::report;
use crate::results::{Results, PEERS, RELAY};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

mod harness;
mod proxies;
pub(crate) use harness::*;
use proxies::{proxy_enforce, proxy_litellm, proxy_relay, proxy_tensorzero};
pub(crate) use proxies::{serve, start_enforce, Served, PERSON_CONFIG};

/// Options of the full run.
#[derive(Debug, Clone, clap::Args)]
pub struct PeersArgs {
    /// The `enforce` binary (the `dist` build).
    #[arg(long)]
    pub enforce_bin: PathBuf,
    /// Where the virtualenvs, configs and logs go.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The report to write.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// Seconds of each c=10 phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Requests per second of the fixed-rate phase.
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Stream chunks per answer.
    #[arg(long, default_value_t = 10)]
    pub chunks: usize,
    /// Milliseconds between stream chunks.
    #[arg(long, default_value_t = 1)]
    pub gap_ms: u64,
    /// Runs per loop measurement.
    #[arg(long, default_value_t = 200)]
    pub loop_runs: usize,
    /// Strings through Guard.validate (Guardrails is slow; the per-string figure is what counts).
    #[arg(long, default_value_t = 2000)]
    pub guard_strings: usize,
    /// Let idle cores halt. By default a `SCHED_IDLE` busy loop runs on each pinned core, so
    /// that no core sleeps between two requests: on a VM that halts idle vCPUs at once, waking
    /// one costs more than a proxy's own work (docs/performance.md). The loop yields to any
    /// other task, so it takes no CPU from the targets.
    #[arg(long)]
    pub let_cores_idle: bool,
    /// Scenario 4: tokens a second of the paced upstream.
    #[arg(long, default_value_t = 50)]
    pub stream_tokens_per_sec: u32,
    /// Scenario 4: tokens per answer.
    #[arg(long, default_value_t = 600)]
    pub stream_answer_tokens: usize,
    /// Scenario 4: requests per case and setting.
    #[arg(long, default_value_t = 3)]
    pub stream_runs: usize,
}

pub(crate) const PEERS_PY: &str = include_str!("../python/peers.py");

/// Runs everything and writes the report.
pub fn run(args: PeersArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let me = std::env::current_exe()?;
    let work = args.work_dir.clone();
    std::fs::create_dir_all(&work)?;
    let script = work.join("peers.py");
    std::fs::write(&script, PEERS_PY)?;
    let (pin, pinned) = Pinning::detect();
    let mut r = Results {
        machine: machine(),
        pinned,
        started: version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        load_before: loadavg(),
        ..Results::default()
    };
    let _spinners = if pinned && !args.let_cores_idle {
        keep_cores_awake(&pin, &mut r)
    } else {
        r.cores_awake = if pinned {
            "no (`--let-cores-idle`): idle cores halt between requests".into()
        } else {
            "no: not pinned".into()
        };
        Vec::new()
    };
    r.settings = json!({"seconds": args.seconds, "rate": args.rate, "chunks": args.chunks, "gap_ms": args.gap_ms, "loop_runs": args.loop_runs, "guard_strings": args.guard_strings});
    r.versions.insert(
        "enforce".into(),
        version_of(&args.enforce_bin.to_string_lossy(), &["--version"]),
    );
    r.versions
        .insert("rustc".into(), version_of("rustc", &["--version"]));

    // Peers.
    let mut available = BTreeMap::new();
    for peer in PEERS {
        match install(&work, peer) {
            Ok(()) => {
                let mut a = vec![script.to_string_lossy().to_string(), "versions".into()];
                a.extend(peer.packages.iter().map(|p| p.to_string()));
                if let Ok(v) = output_json(command(&[], &python(&work, peer.venv), &a), &mut r) {
                    for (k, v) in v.as_object().into_iter().flatten() {
                        r.versions.insert(
                            format!("{k} ({})", peer.venv),
                            v.as_str().unwrap_or("?").to_string(),
                        );
                    }
                }
                available.insert(peer.venv, ());
            }
            Err(e) => {
                eprintln!("bench: {} unsupported: {e}", peer.name);
                r.unsupported.insert(peer.name.to_string(), e.to_string());
            }
        }
    }
    r.commands.clear();

    let (_ok_mock, ok_url) =
        start_mock(&me, &pin.driver, "ok", (args.chunks, args.gap_ms), &mut r)?;
    let (_ff_mock, ff_url) = start_mock(
        &me,
        &pin.driver,
        "fail-first",
        (args.chunks, args.gap_ms),
        &mut r,
    )?;
    let ok_pid = _ok_mock.0.id();

    // Mock capacity: the mock alone, at c=10, measured by the same driver. `cores` is where the
    // driver runs: for the capacity check it is the SUT core (idle then), so the mock has its
    // core to itself, as it does when a proxy under test sits in between.
    let drive_on = |cores: &[String],
                    r: &mut Results,
                    url: &str,
                    model: &str,
                    key: &str,
                    stream: bool,
                    pid: u32|
     -> anyhow::Result<Value> {
        let a: Vec<String> = vec![
            "load".into(),
            "--url".into(),
            url.into(),
            "--model".into(),
            model.into(),
            "--key".into(),
            key.into(),
            "--pid".into(),
            pid.to_string(),
            "--seconds".into(),
            args.seconds.to_string(),
            "--rate".into(),
            args.rate.to_string(),
        ];
        let mut a = a;
        if stream {
            a.push("--stream".into());
        }
        output_json(command(cores, &me, &a), r)
    };
    let drive = |r: &mut Results, url: &str, model: &str, key: &str, stream: bool, pid: u32| {
        drive_on(&pin.driver, r, url, model, key, stream, pid)
    };
    let ok_chat = format!("{ok_url}/chat/completions");
    let capacity = drive_on(
        &pin.sut, &mut r, &ok_chat, "mock", "sk-bench", false, ok_pid,
    );
    r.mock_capacity = r.measured("mock capacity check", capacity);

    // Scenario 3: the proxy.
    for stream in [false, true] {
        let direct = drive(&mut r, &ok_chat, "mock", "sk-bench", stream, ok_pid);
        if let Some(v) = r.measured(format!("direct stream={stream}"), direct) {
            r.proxy.insert(("direct".into(), stream), v);
        }
    }
    if let Err(e) = proxy_relay(&me, &pin, &ok_url, &mut r, &drive) {
        r.unsupported.insert(RELAY.into(), e.to_string());
    }
    if let Err(e) = proxy_enforce(&args, &pin, &ok_url, &work, &mut r, &drive) {
        r.unsupported.insert("enforce serve".into(), e.to_string());
    }
    if available.contains_key("tensorzero") {
        if let Err(e) = proxy_tensorzero(&pin, &ok_url, &work, &script, &mut r, &drive) {
            r.unsupported.insert("TensorZero".into(), e.to_string());
        }
    }
    if available.contains_key("litellm") {
        if let Err(e) = proxy_litellm(&pin, &ok_url, &work, &mut r, &drive) {
            r.unsupported.insert("LiteLLM proxy".into(), e.to_string());
        }
    }

    // Scenario 2: the loop.
    let a = vec![
        "loop".into(),
        "--ok-url".into(),
        ok_url.clone(),
        "--fail-first-url".into(),
        ff_url.clone(),
        "--runs".into(),
        args.loop_runs.to_string(),
    ];
    let looped = output_json(command(&pin.sut, &me, &a), &mut r);
    if let Some(v) = r.measured("enforce loop", looped) {
        r.loops.insert("enforce".into(), v);
    }
    for (lib, venv, name) in [
        ("instructor", "instructor", "Instructor"),
        ("pydantic-ai", "pydanticai", "Pydantic AI"),
        ("guardrails", "guardrails", "Guardrails AI"),
    ] {
        if !available.contains_key(venv) {
            continue;
        }
        let a = vec![
            script.to_string_lossy().to_string(),
            "loop".into(),
            lib.into(),
            ok_url.clone(),
            ff_url.clone(),
            (args.loop_runs / 2).max(20).to_string(),
        ];
        let mut cmd = command(&pin.sut, &python(&work, venv), &a);
        quiet_env(&mut cmd);
        let looped = output_json(cmd, &mut r);
        if let Some(v) = r.measured(format!("{name} loop"), looped) {
            r.loops.insert(name.into(), v);
        }
    }

    // Scenario 1: validators only.
    let root = std::env::current_dir()?;
    let adr = root
        .join("examples")
        .join("adr-0007-validate-llm-output.md");
    let a = vec![
        "validators".into(),
        "--adr".into(),
        adr.to_string_lossy().to_string(),
        "--root".into(),
        root.to_string_lossy().to_string(),
    ];
    let checked = output_json(command(&pin.sut, &me, &a), &mut r);
    r.validators_rust = r.measured("enforce validators", checked);
    let py_venv = ["guardrails", "litellm", "instructor"]
        .into_iter()
        .find(|v| available.contains_key(v));
    if let Some(venv) = py_venv {
        let a = vec![
            script.to_string_lossy().to_string(),
            "validators".into(),
            "10000".into(),
            adr.to_string_lossy().to_string(),
            args.guard_strings.to_string(),
        ];
        let mut cmd = command(&pin.sut, &python(&work, venv), &a);
        quiet_env(&mut cmd);
        let checked = output_json(cmd, &mut r);
        r.validators_python = r.measured("Python validators", checked);
    }

    // Scenario 4: streaming (enforce only).
    let a = vec![
        "stream".into(),
        "--tokens-per-sec".into(),
        args.stream_tokens_per_sec.to_string(),
        "--answer-tokens".into(),
        args.stream_answer_tokens.to_string(),
        "--runs".into(),
        args.stream_runs.to_string(),
    ];
    let streamed = output_json(command(&[], &me, &a), &mut r);
    r.streaming = r.measured("enforce streaming", streamed);

    r.load_after = loadavg();
    r.duration_s = started.elapsed().as_secs_f64();
    let mut text = report::render(&r);
    // The real-model, Python, surfaces and local-speed sections are measured by runs of their own (the
    // surfaces one right after this run, by main): keep the last ones.
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    for markers in [
        crate::section::REAL_MODEL,
        crate::section::PYTHON,
        crate::section::SURFACES,
        crate::section::LOCAL_SPEED,
    ] {
        if let Some(section) = markers.section_of(&old) {
            text = markers.splice(&text, section);
        }
    }
    drop(_spinners);
    std::fs::write(&args.out, text)?;
    eprintln!(
        "bench: wrote {} in {:.0} s",
        args.out.display(),
        r.duration_s
    );
    Ok(())
}
