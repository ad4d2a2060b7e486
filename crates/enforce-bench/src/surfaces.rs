//! `enforce-bench surfaces`: the proxy's added latency on every API surface (chat
//! completions, responses, messages) at c=1, above the relay floor. Writes its own section of
//! BENCHMARKS.md (`cargo xtask bench-peers --surfaces`); the full peers run measures it too.
//!
//! One mock, one byte relay, one HTTP relay and one `enforce serve` stay up for the whole run;
//! each round measures the relays and then every surface (plain and streamed), each with
//! `sequential` requests on one keep-alive connection. A target's figure above the floor is the
//! median over the rounds of (its p50 − the byte relay's p50 in the same round): interleaved
//! rounds spread a passing disturbance of the machine over every target instead of landing on
//! one, and a round's difference cancels what moved the whole round.

use crate::load::Surface;
use crate::peers::{
    command, keep_cores_awake, loadavg, machine, output_json, start_enforce, start_mock,
    start_printing_address, Guarded, Pinning,
};
use crate::results::Results;
use crate::section::SURFACES;
use crate::stats::{median, rounds};
use serde_json::Value;
use std::path::PathBuf;
use std::time::Instant;

/// The bound on the proxy's added latency above the relay floor, per surface, at c=1 (ms).
pub const TARGET_ABOVE_FLOOR_MS: f64 = 0.05;

impl SurfacesArgs {
    /// The surfaces run that follows a full peers run, on its binary, folders and cores.
    pub fn after_peers(peers: &crate::peers::PeersArgs) -> Self {
        SurfacesArgs {
            enforce_bin: peers.enforce_bin.clone(),
            work_dir: peers.work_dir.clone(),
            out: peers.out.clone(),
            rounds: 5,
            sequential: 400,
            let_cores_idle: peers.let_cores_idle,
            baseline_bin: None,
        }
    }
}

/// Which binary a row measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Binary {
    /// `--enforce-bin`.
    Measured,
    /// `--baseline-bin`.
    Baseline,
}

impl Binary {
    fn label(self) -> &'static str {
        match self {
            Binary::Measured => "enforce",
            Binary::Baseline => "baseline",
        }
    }
}

/// One row of the table: a binary on a surface, plain or streamed.
#[derive(Debug, Clone, Copy)]
struct Row {
    binary: Binary,
    surface: Surface,
    stream: bool,
}

/// Options of the surfaces run.
#[derive(Debug, Clone, clap::Args)]
pub struct SurfacesArgs {
    /// The `enforce` binary (the `dist` build).
    #[arg(long)]
    pub enforce_bin: PathBuf,
    /// Where configs and logs go.
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The report whose surfaces section is replaced.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// Measuring rounds (each: the relay, then every surface plain and streamed).
    #[arg(long, default_value_t = 5)]
    pub rounds: usize,
    /// Sequential requests per target and round.
    #[arg(long, default_value_t = 400)]
    pub sequential: usize,
    /// Let idle cores halt (see `enforce-bench peers --help`).
    #[arg(long)]
    pub let_cores_idle: bool,
    /// Another `enforce` binary (e.g. the last release) measured side by side in the same run:
    /// every round asks both, in alternating order, and the table has a row per binary.
    #[arg(long)]
    pub baseline_bin: Option<PathBuf>,
}

/// What one surfaces run measured.
struct Measured {
    /// The byte relay's p50 per round (ms).
    relay: Vec<f64>,
    /// The HTTP relay's p50 per round (ms).
    http_relay: Vec<f64>,
    /// `(binary, surface, stream)` → the p50 per round (ms).
    enforce: Vec<(Row, Vec<f64>)>,
    /// The answer cache's models ([`crate::cache::MODELS`]) → the p50 per round (ms).
    cache: [Vec<f64>; 3],
    commands: Vec<String>,
    cores_awake: String,
    pinned: bool,
    load_before: String,
    load_after: String,
    seconds: f64,
}

/// Runs the measurement and replaces the surfaces section of `args.out`.
pub fn run(args: SurfacesArgs) -> anyhow::Result<()> {
    let section = section(&args)?;
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, SURFACES.splice(&old, &section))?;
    eprintln!(
        "bench: wrote the surfaces section of {}",
        args.out.display()
    );
    Ok(())
}

/// Measures and renders the section (with its markers).
pub fn section(args: &SurfacesArgs) -> anyhow::Result<String> {
    let measured = measure(args)?;
    Ok(render(args, &measured))
}

fn measure(args: &SurfacesArgs) -> anyhow::Result<Measured> {
    let started = Instant::now();
    let me = std::env::current_exe()?;
    std::fs::create_dir_all(&args.work_dir)?;
    let (pin, pinned) = Pinning::detect();
    let mut r = Results {
        load_before: loadavg(),
        ..Results::default()
    };
    let _spinners = if pinned && !args.let_cores_idle {
        keep_cores_awake(&pin, &mut r)
    } else {
        r.cores_awake = "no".into();
        Vec::new()
    };
    let load_before = loadavg();
    let (_mock, ok_url) = start_mock(&me, &pin.driver, "ok", (10, 1), &mut r)?;
    let upstream = ok_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let (relay, relay_addr) = start_printing_address(
        &me,
        &pin.sut,
        &["relay".into(), "--upstream".into(), upstream.clone()],
        &mut r,
    )?;
    let (http_relay, http_relay_addr) = start_printing_address(
        &me,
        &pin.sut,
        &[
            "relay".into(),
            "--http".into(),
            "--upstream".into(),
            upstream.clone(),
        ],
        &mut r,
    )?;
    let mut proxies = vec![(
        Binary::Measured,
        start_enforce(&args.enforce_bin, &pin, &ok_url, &args.work_dir, &mut r)?,
    )];
    if let Some(baseline) = &args.baseline_bin {
        let work = args.work_dir.join("baseline");
        std::fs::create_dir_all(&work)?;
        let started = start_enforce(baseline, &pin, &ok_url, &work, &mut r)?;
        proxies.push((Binary::Baseline, started));
    }
    let (cached, cached_base) =
        crate::cache::start(&args.enforce_bin, &pin, &ok_url, &args.work_dir, &mut r)?;
    let drive_model =
        |r: &mut Results, url: &str, model: &str, surface: Surface, stream: bool, pid: u32| {
            let mut a: Vec<String> = [
                "load",
                "--url",
                url,
                "--surface",
                surface.name(),
                "--model",
                model,
                "--key",
                "sk-bench",
                "--pid",
            ]
            .map(String::from)
            .to_vec();
            a.push(pid.to_string());
            a.extend(["--sequential".into(), args.sequential.to_string()]);
            a.extend(["--concurrency", "0", "--rate", "0"].map(String::from));
            if stream {
                a.push("--stream".into());
            }
            let report = output_json(command(&pin.driver, &me, &a), r)?;
            p50_of(&report)
        };
    let drive = |r: &mut Results, url: &str, surface: Surface, stream: bool, pid: u32| {
        drive_model(r, url, "mock", surface, stream, pid)
    };
    let mut cache_p50: [Vec<f64>; 3] = Default::default();
    let mut relay_p50 = Vec::new();
    let mut http_relay_p50 = Vec::new();
    let mut enforce_p50: Vec<(Row, Vec<f64>)> = proxies
        .iter()
        .flat_map(|(binary, _)| {
            Surface::ALL.iter().flat_map(move |surface| {
                [false, true].map(|stream| {
                    let row = Row {
                        binary: *binary,
                        surface: *surface,
                        stream,
                    };
                    (row, Vec::new())
                })
            })
        })
        .collect();
    let relay_url = format!("http://{relay_addr}/v1/chat/completions");
    let http_relay_url = format!("http://{http_relay_addr}/v1/chat/completions");
    for round in 0..args.rounds.max(1) {
        relay_p50.push(drive(
            &mut r,
            &relay_url,
            Surface::Chat,
            false,
            relay.0.id(),
        )?);
        http_relay_p50.push(drive(
            &mut r,
            &http_relay_url,
            Surface::Chat,
            false,
            http_relay.0.id(),
        )?);
        // With a baseline, the binaries take turns going first, so neither always runs on
        // the cooler (or warmer) half of a round.
        let order: Vec<&(Binary, (Guarded, String))> = if round % 2 == 0 {
            proxies.iter().collect()
        } else {
            proxies.iter().rev().collect()
        };
        for (binary, (process, base)) in order {
            for (row, p50s) in enforce_p50
                .iter_mut()
                .filter(|(row, _)| row.binary == *binary)
            {
                let url = format!("{base}/v1{}", row.surface.path());
                p50s.push(drive(
                    &mut r,
                    &url,
                    row.surface,
                    row.stream,
                    process.0.id(),
                )?);
            }
        }
        let url = format!("{cached_base}/v1{}", Surface::Chat.path());
        for (model, p50s) in crate::cache::MODELS.iter().zip(&mut cache_p50) {
            p50s.push(drive_model(
                &mut r,
                &url,
                model,
                Surface::Chat,
                false,
                cached.0.id(),
            )?);
        }
    }
    // The commands once: every round repeats them.
    let mut commands = Vec::new();
    for c in r.commands {
        if !commands.contains(&c) {
            commands.push(c);
        }
    }
    Ok(Measured {
        relay: relay_p50,
        http_relay: http_relay_p50,
        enforce: enforce_p50,
        cache: cache_p50,
        commands,
        cores_awake: r.cores_awake,
        pinned,
        load_before,
        load_after: loadavg(),
        seconds: started.elapsed().as_secs_f64(),
    })
}

/// The sequential phase's p50 of a load report; an error when a request failed.
fn p50_of(report: &Value) -> anyhow::Result<f64> {
    let phase = &report["sequential"];
    if phase["errors"].as_u64().unwrap_or(0) > 0 {
        anyhow::bail!("requests failed: {}", phase["first_error"]);
    }
    phase["p50_ms"]
        .as_f64()
        .ok_or_else(|| anyhow::anyhow!("no p50 in {report}"))
}

/// The median over the rounds of `p50s[i] − floor[i]`.
fn above_floor(p50s: &[f64], floor: &[f64]) -> f64 {
    let differences: Vec<f64> = p50s.iter().zip(floor).map(|(p, f)| p - f).collect();
    median(&differences)
}

fn render(args: &SurfacesArgs, m: &Measured) -> String {
    let floor = median(&m.relay);
    let mut s = format!("{}\n## The proxy on every surface\n\n", SURFACES.begin);
    s.push_str(&format!(
        "`cargo xtask bench-peers --surfaces` (and the full run): `enforce serve` with the `person` profile (the same JSON Schema check as scenario 3) in front of the same mock, asked in each API's own request shape at c=1: {} rounds, each {} sequential requests on one keep-alive connection (after 30 warm-up requests) to the relay and then to every surface, plain and streamed; the p50 columns are the medians of the rounds' p50s. *Above the floor* = the median over the rounds of (the target's p50 − the byte relay's p50 in that round): the relay passes the chat request to the mock untouched, and every surface makes that same chat exchange with the mock. The *HTTP relay* row (`enforce-bench relay --http`: axum's server and hyper's pooled client passing the request and the answer on, nothing parsed or checked) is not a target: it shows what reading and writing HTTP on both sides costs on this machine, before any proxy logic. Streamed rows are held until the answer passed, so their exchange is the same as the plain ones'.\n\n",
        args.rounds.max(1),
        args.sequential
    ));
    s.push_str(&format!(
        "Load average before / after: {} / {} ({} cores{}; pinned: {}; cores kept awake: {}). Run time {:.0} s.\n\n",
        m.load_before,
        m.load_after,
        machine().get("cores").cloned().unwrap_or_default(),
        machine()
            .get("cpu")
            .map(|c| format!(", {c}"))
            .unwrap_or_default(),
        if m.pinned { "yes" } else { "no" },
        m.cores_awake.split(':').next().unwrap_or_default(),
        m.seconds
    ));
    s.push_str("| target | stream | c=1 p50 ms (rounds) | above the floor ms | target | verdict |\n|---|---|---|---|---|---|\n");
    s.push_str(&format!(
        "| relay (floor) | no | {floor:.3} ({}) | 0 | – | – |\n",
        rounds(&m.relay)
    ));
    s.push_str(&format!(
        "| HTTP relay (axum + hyper, no checks) | no | {:.3} ({}) | {:.3} | – | – |\n",
        median(&m.http_relay),
        rounds(&m.http_relay),
        above_floor(&m.http_relay, &m.relay)
    ));
    for (row, p50s) in &m.enforce {
        let (surface, stream) = (row.surface, row.stream);
        let p50 = median(p50s);
        let above = above_floor(p50s, &m.relay);
        let verdict = if above <= TARGET_ABOVE_FLOOR_MS {
            "met"
        } else {
            "**missed**"
        };
        s.push_str(&format!(
            "| {} {} (`{}`) | {} | {p50:.3} ({}) | {above:.3} | ≤ {TARGET_ABOVE_FLOOR_MS} | {verdict} |\n",
            row.binary.label(),
            surface.name(),
            surface.path(),
            if stream { "yes" } else { "no" },
            rounds(p50s),
        ));
    }
    s.push_str(&crate::cache::render(&m.cache));
    s.push_str("\nCommands:\n\n```sh\n");
    for c in &m.commands {
        s.push_str(c);
        s.push('\n');
    }
    s.push_str("```\n");
    s.push_str(SURFACES.end);
    s.push('\n');
    s
}
