//! `enforce-bench peers`: installs the peers, starts the mock and every target, drives them with
//! the same plan, and writes BENCHMARKS.md. Blocking code throughout: it only starts processes
//! and waits for them.

use crate::report;
use crate::results::{Peer, Results, PEERS, RELAY};
use anyhow::{anyhow, Context as _};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Options of the full run.
#[derive(Debug, Clone, clap::Args)]
pub struct PeersArgs {
    /// The `enforce` binary (release build).
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
    /// one costs more than a proxy's own work (see PROXY-PROFILE.md). The loop yields to any
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

/// Where the target (`sut`) and the driver run: one core each when `taskset` can pin.
pub(crate) struct Pinning {
    pub(crate) sut: Vec<String>,
    pub(crate) driver: Vec<String>,
}

impl Pinning {
    pub(crate) fn detect() -> (Self, bool) {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let taskset = Command::new("taskset")
            .arg("-V")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if taskset && cores >= 2 {
            (
                Pinning {
                    sut: vec!["taskset".into(), "-c".into(), "0".into()],
                    driver: vec!["taskset".into(), "-c".into(), "1".into()],
                },
                true,
            )
        } else {
            (
                Pinning {
                    sut: vec![],
                    driver: vec![],
                },
                false,
            )
        }
    }
}

/// One `SCHED_IDLE` busy loop on each pinned core (see `PeersArgs::let_cores_idle`), started
/// with the same pinning as the processes it keeps company; the guards stop them when the run
/// ends.
pub(crate) fn keep_cores_awake(pin: &Pinning, r: &mut Results) -> Vec<Guarded> {
    let chrt = Command::new("chrt")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !chrt {
        r.cores_awake = "no: `chrt` is missing; idle cores halted".into();
        return Vec::new();
    }
    let spin: Vec<String> = ["-i", "0", "sh", "-c", "while :; do :; done"]
        .map(String::from)
        .to_vec();
    let mut spinners = Vec::new();
    for cores in [&pin.sut, &pin.driver] {
        let mut cmd = command(cores, Path::new("chrt"), &spin);
        match cmd.stdout(Stdio::null()).stderr(Stdio::null()).spawn() {
            Ok(child) => spinners.push(Guarded(child)),
            Err(e) => {
                r.cores_awake = format!("no: cannot start `chrt` ({e}); idle cores halted");
                return spinners;
            }
        }
    }
    r.cores_awake = "yes: a `SCHED_IDLE` busy loop on each core (`taskset -c N chrt -i 0 sh -c 'while :; do :; done'`) keeps idle vCPUs from halting between requests; it yields to every other task (`--let-cores-idle` turns it off)".into();
    spinners
}

pub(crate) fn command(prefix: &[String], program: &Path, args: &[String]) -> Command {
    let mut cmd = match prefix.first() {
        Some(first) => {
            let mut c = Command::new(first);
            c.args(&prefix[1..]).arg(program);
            c
        }
        None => Command::new(program),
    };
    cmd.args(args);
    cmd
}

/// A command as BENCHMARKS.md shows it, runnable from a checkout (see [`repo_relative`]).
pub(crate) fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().to_string();
    for a in cmd.get_args() {
        s.push(' ');
        s.push_str(&a.to_string_lossy());
    }
    repo_relative(&s)
}

/// `text` with the paths of this machine made relative: the target directory (where the
/// harness itself runs from, `<target>/release/enforce-bench`) as `target/`, the repository
/// (the working directory) as nothing.
pub(crate) fn repo_relative(text: &str) -> String {
    let mut s = text.to_string();
    let target = std::env::current_exe()
        .ok()
        .and_then(|exe| Some(exe.parent()?.parent()?.to_path_buf()));
    if let Some(target) = target {
        s = s.replace(&format!("{}/", target.display()), "target/");
    }
    if let Ok(root) = std::env::current_dir() {
        s = s
            .replace(&format!("{}/", root.display()), "")
            .replace(&root.display().to_string(), ".");
    }
    s
}

/// A child that is killed when dropped.
pub(crate) struct Guarded(pub(crate) Child);

impl Drop for Guarded {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(crate) fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

pub(crate) fn output_json(mut cmd: Command, results: &mut Results) -> anyhow::Result<Value> {
    results.commands.push(describe(&cmd));
    eprintln!("bench: {}", describe(&cmd));
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", describe(&cmd)))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'));
    match (out.status.success(), line) {
        (true, Some(l)) => Ok(serde_json::from_str(l)?),
        _ => Err(anyhow!(
            "{} failed ({}): {}",
            describe(&cmd),
            out.status,
            tail(&String::from_utf8_lossy(&out.stderr), 6)
        )),
    }
}

fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    all[all.len().saturating_sub(lines)..].join(" | ")
}

pub(crate) fn python(work: &Path, venv: &str) -> PathBuf {
    work.join(format!("venv-{venv}")).join("bin").join("python")
}

/// Installs one peer unless its marker says the same pins are there; the error is the reason
/// it is unsupported.
pub(crate) fn install(work: &Path, peer: &Peer) -> anyhow::Result<()> {
    let venv = work.join(format!("venv-{}", peer.venv));
    let reqs: Vec<String> = peer.requirements.iter().map(|r| r.to_string()).collect();
    let marker = venv.join(".bench-installed");
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(reqs.join(" ").as_str()) {
        return Ok(());
    }
    if !python(work, peer.venv).exists() {
        let st = Command::new("python3")
            .arg("-m")
            .arg("venv")
            .arg(&venv)
            .status()?;
        if !st.success() {
            return Err(anyhow!("python3 -m venv failed: {st}"));
        }
    }
    eprintln!("bench: installing {} ({})", peer.name, reqs.join(" "));
    let out = Command::new(venv.join("bin").join("pip"))
        .args(["install", "--disable-pip-version-check", "-q"])
        .args(&reqs)
        .env("PIP_NO_INPUT", "1")
        .output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = err.lines().filter(|l| l.starts_with("ERROR")).collect();
        let reason = lines
            .iter()
            .map(|l| l.chars().take(240).collect::<String>())
            .collect::<Vec<_>>()
            .join(" / ");
        return Err(anyhow!(
            "pip install {} failed: {}",
            reqs.join(" "),
            if reason.is_empty() {
                tail(&err, 3)
            } else {
                reason
            }
        ));
    }
    std::fs::write(marker, reqs.join(" "))?;
    Ok(())
}

/// Environment that turns the peers' telemetry off and keeps them offline.
pub(crate) fn quiet_env(cmd: &mut Command) {
    for (k, v) in [
        ("LITELLM_LOCAL_MODEL_COST_MAP", "True"),
        ("LITELLM_TELEMETRY", "False"),
        ("TENSORZERO_DISABLE_PSEUDONYMOUS_USAGE_ANALYTICS", "1"),
        ("GUARDRAILS_RUN_SYNC", "true"),
        ("OTEL_SDK_DISABLED", "true"),
        ("DO_NOT_TRACK", "1"),
        ("HF_HUB_OFFLINE", "1"),
        ("OPENAI_API_KEY", "sk-bench"),
        ("NO_PROXY", "127.0.0.1,localhost"),
    ] {
        cmd.env(k, v);
    }
    cmd.env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy");
}

pub(crate) fn start_mock(
    me: &Path,
    pin: &[String],
    mode: &str,
    (chunks, gap_ms): (usize, u64),
    results: &mut Results,
) -> anyhow::Result<(Guarded, String)> {
    let (child, addr) = start_printing_address(
        me,
        pin,
        &[
            "mock".into(),
            "--mode".into(),
            mode.into(),
            "--chunks".into(),
            chunks.to_string(),
            "--gap-ms".into(),
            gap_ms.to_string(),
        ],
        results,
    )?;
    Ok((child, format!("http://{addr}/v1")))
}

/// Starts an `enforce-bench` server that prints its address on its first line.
pub(crate) fn start_printing_address(
    me: &Path,
    pin: &[String],
    args: &[String],
    results: &mut Results,
) -> anyhow::Result<(Guarded, String)> {
    let mut cmd = command(pin, me, args);
    results.commands.push(describe(&cmd));
    let mut child = Guarded(cmd.stdout(Stdio::piped()).spawn()?);
    let stdout = child
        .0
        .stdout
        .take()
        .ok_or_else(|| anyhow!("{} has no stdout", args[0]))?;
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line)?;
    let addr = line.trim().to_string();
    if addr.is_empty() {
        return Err(anyhow!("{} did not print its address", args[0]));
    }
    Ok((child, addr))
}

/// The byte relay on the SUT core in front of the `ok` mock: what any proxy costs here.
fn proxy_relay(
    me: &Path,
    pin: &Pinning,
    ok_url: &str,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let upstream = ok_url
        .trim_start_matches("http://")
        .trim_end_matches("/v1")
        .to_string();
    let (child, addr) = start_printing_address(
        me,
        &pin.sut,
        &["relay".into(), "--upstream".into(), upstream],
        r,
    )?;
    drive_both(
        r,
        drive,
        RELAY,
        &format!("http://{addr}/v1/chat/completions"),
        "mock",
        "sk-bench",
        child.0.id(),
    );
    Ok(())
}

pub(crate) fn wait_http(url: &str, key: Option<&str>, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        let mut cmd = Command::new("curl");
        cmd.args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
        ]);
        if let Some(k) = key {
            cmd.arg("-H").arg(format!("Authorization: Bearer {k}"));
        }
        if let Ok(out) = cmd.arg(url).output() {
            if String::from_utf8_lossy(&out.stdout).starts_with('2') {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

fn read_first_line(child: &mut Child, timeout: Duration) -> anyhow::Result<String> {
    let stdout = child.stdout.take().ok_or_else(|| anyhow!("no stdout"))?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        // The gateway logs to stdout too: the launcher's line is the JSON one.
        let mut reader = BufReader::new(stdout);
        let mut line = String::new();
        while reader.read_line(&mut line).map(|n| n > 0).unwrap_or(false) {
            if line.trim_start().starts_with('{') {
                break;
            }
            line.clear();
        }
        let _ = tx.send(line);
    });
    rx.recv_timeout(timeout)
        .map_err(|_| anyhow!("no output within {timeout:?}"))
}

pub(crate) fn machine() -> BTreeMap<String, String> {
    let mut m = BTreeMap::new();
    let cpu = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    if let Some(model) = cpu
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split_once(':'))
    {
        m.insert("cpu".into(), model.1.trim().to_string());
    }
    m.insert(
        "cores".into(),
        std::thread::available_parallelism()
            .map(|n| n.get().to_string())
            .unwrap_or_default(),
    );
    let mem = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    if let Some(l) = mem.lines().find(|l| l.starts_with("MemTotal")) {
        m.insert(
            "memory".into(),
            l.trim_start_matches("MemTotal:").trim().to_string(),
        );
    }
    if let Ok(o) = Command::new("uname").args(["-sr"]).output() {
        m.insert(
            "kernel".into(),
            String::from_utf8_lossy(&o.stdout).trim().to_string(),
        );
    }
    m
}

pub(crate) fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

pub(crate) fn version_of(cmd: &str, args: &[&str]) -> String {
    Command::new(cmd)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

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
    match drive_on(
        &pin.sut,
        &mut r,
        &format!("{ok_url}/chat/completions"),
        "mock",
        "sk-bench",
        false,
        ok_pid,
    ) {
        Ok(v) => r.mock_capacity = Some(v),
        Err(e) => r
            .unsupported
            .insert("mock capacity check".into(), e.to_string())
            .map(|_| ())
            .unwrap_or(()),
    }

    // Scenario 3: the proxy.
    for stream in [false, true] {
        match drive(
            &mut r,
            &format!("{ok_url}/chat/completions"),
            "mock",
            "sk-bench",
            stream,
            ok_pid,
        ) {
            Ok(v) => {
                r.proxy.insert(("direct".into(), stream), v);
            }
            Err(e) => {
                r.unsupported
                    .insert(format!("direct stream={stream}"), e.to_string());
            }
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
    match output_json(command(&pin.sut, &me, &a), &mut r) {
        Ok(v) => {
            r.loops.insert("enforce".into(), v);
        }
        Err(e) => {
            r.unsupported.insert("enforce loop".into(), e.to_string());
        }
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
        match output_json(cmd, &mut r) {
            Ok(v) => {
                r.loops.insert(name.into(), v);
            }
            Err(e) => {
                r.unsupported.insert(format!("{name} loop"), e.to_string());
            }
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
    match output_json(command(&pin.sut, &me, &a), &mut r) {
        Ok(v) => r.validators_rust = Some(v),
        Err(e) => {
            r.unsupported
                .insert("enforce validators".into(), e.to_string());
        }
    }
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
        match output_json(cmd, &mut r) {
            Ok(v) => r.validators_python = Some(v),
            Err(e) => {
                r.unsupported
                    .insert("Python validators".into(), e.to_string());
            }
        }
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
    match output_json(command(&[], &me, &a), &mut r) {
        Ok(v) => r.streaming = Some(v),
        Err(e) => {
            r.unsupported
                .insert("enforce streaming".into(), e.to_string());
        }
    }

    r.load_after = loadavg();
    r.duration_s = started.elapsed().as_secs_f64();
    let mut text = report::render(&r);
    // The real-model, Python and surfaces sections are measured by runs of their own (the
    // surfaces one right after this run, by main): keep the last ones.
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    for markers in [
        crate::section::REAL_MODEL,
        crate::section::PYTHON,
        crate::section::SURFACES,
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

type Drive<'a> = dyn Fn(&mut Results, &str, &str, &str, bool, u32) -> anyhow::Result<Value> + 'a;

fn drive_both(
    r: &mut Results,
    drive: &Drive<'_>,
    name: &str,
    url: &str,
    model: &str,
    key: &str,
    pid: u32,
) {
    for stream in [false, true] {
        match drive(r, url, model, key, stream, pid) {
            Ok(v) => {
                r.proxy.insert((name.to_string(), stream), v);
            }
            Err(e) => {
                r.unsupported
                    .insert(format!("{name} stream={stream}"), e.to_string());
            }
        }
    }
}

pub(crate) const PERSON_CONFIG: &str = r#"# enforce serve for the benchmark: one model whose profile checks the JSON answer.
validators:
  person:
    type: json
    bare: false
    schema:
      type: object
      required: [name, age]
      properties:
        name: {type: string}
        age: {type: integer}
profiles:
  person:
    validators: [person]
"#;

fn proxy_enforce(
    args: &PeersArgs,
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let (child, base) = start_enforce(&args.enforce_bin, pin, ok_url, work, r)?;
    drive_both(
        r,
        drive,
        "enforce",
        &format!("{base}/v1/chat/completions"),
        "mock",
        "sk-bench",
        child.0.id(),
    );
    Ok(())
}

/// Starts `enforce serve` on the SUT core in front of the `ok` mock (model `mock`, profile
/// `person`, key `sk-bench`); the process and its base URL (without `/v1`), once healthy.
pub(crate) fn start_enforce(
    enforce_bin: &Path,
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
) -> anyhow::Result<(Guarded, String)> {
    let cfg = work.join("enforce-bench.yaml");
    std::fs::write(&cfg, PERSON_CONFIG)?;
    let port = free_port()?;
    let a: Vec<String> = vec![
        "serve".into(),
        "--config".into(),
        cfg.to_string_lossy().to_string(),
        "--listen".into(),
        format!("127.0.0.1:{port}"),
        "--upstream-url".into(),
        ok_url.into(),
        "--upstream-model".into(),
        "mock".into(),
        "--upstream-key".into(),
        "sk-bench".into(),
        "--profile".into(),
        "person".into(),
        "--model-id".into(),
        "mock".into(),
        "--api-key".into(),
        "sk-bench".into(),
    ];
    let mut cmd = command(&pin.sut, enforce_bin, &a);
    cmd.env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            work.join("enforce-serve.log"),
        )?));
    r.commands.push(describe(&cmd));
    let child = Guarded(cmd.spawn()?);
    let base = format!("http://127.0.0.1:{port}");
    if !wait_http(&format!("{base}/healthz"), None, Duration::from_secs(20)) {
        return Err(anyhow!(
            "enforce serve did not become healthy (see enforce-serve.log)"
        ));
    }
    Ok((child, base))
}

fn proxy_tensorzero(
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    script: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let cfg = work.join("tensorzero.toml");
    std::fs::write(
        &cfg,
        format!(
            "[gateway]\nobservability.enabled = false\n\n[models.mock]\nrouting = [\"mock\"]\n\n[models.mock.providers.mock]\ntype = \"openai\"\nmodel_name = \"mock\"\napi_base = \"{ok_url}/\"\napi_key_location = \"none\"\n"
        ),
    )?;
    let a = vec![
        script.to_string_lossy().to_string(),
        "tensorzero-gateway".into(),
        cfg.to_string_lossy().to_string(),
    ];
    let mut cmd = command(&pin.sut, &python(work, "tensorzero"), &a);
    quiet_env(&mut cmd);
    cmd.stdout(Stdio::piped())
        .stderr(Stdio::from(std::fs::File::create(
            work.join("tensorzero.log"),
        )?));
    r.commands.push(describe(&cmd));
    let mut child = Guarded(cmd.spawn()?);
    let line = read_first_line(&mut child.0, Duration::from_secs(60))
        .map_err(|e| anyhow!("gateway did not start: {e} (see tensorzero.log)"))?;
    let v: Value = serde_json::from_str(line.trim()).map_err(|_| {
        anyhow!(
            "gateway did not start: {} (see tensorzero.log)",
            line.trim()
        )
    })?;
    let base = v["base_url"]
        .as_str()
        .unwrap_or_default()
        .trim_end_matches('/')
        // Some launcher versions report the OpenAI-compatible prefix as part of the base URL.
        .trim_end_matches("/openai/v1")
        .to_string();
    wait_http(&format!("{base}/health"), None, Duration::from_secs(20));
    let pid = child.0.id();
    drive_both(
        r,
        drive,
        "TensorZero",
        &format!("{base}/openai/v1/chat/completions"),
        "tensorzero::model_name::mock",
        "sk-bench",
        pid,
    );
    Ok(())
}

fn proxy_litellm(
    pin: &Pinning,
    ok_url: &str,
    work: &Path,
    r: &mut Results,
    drive: &Drive<'_>,
) -> anyhow::Result<()> {
    let cfg = work.join("litellm.yaml");
    std::fs::write(
        &cfg,
        format!(
            "model_list:\n  - model_name: mock\n    litellm_params:\n      model: openai/mock\n      api_base: {ok_url}\n      api_key: sk-bench\nlitellm_settings:\n  telemetry: false\n  drop_params: true\ngeneral_settings:\n  master_key: sk-bench-master\n"
        ),
    )?;
    let port = free_port()?;
    let bin = work.join("venv-litellm").join("bin").join("litellm");
    let a: Vec<String> = vec![
        "--config".into(),
        cfg.to_string_lossy().to_string(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        port.to_string(),
        "--num_workers".into(),
        "1".into(),
    ];
    let mut cmd = command(&pin.sut, &bin, &a);
    quiet_env(&mut cmd);
    cmd.stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(
            work.join("litellm.log"),
        )?));
    r.commands.push(describe(&cmd));
    let child = Guarded(cmd.spawn()?);
    let base = format!("http://127.0.0.1:{port}");
    if !wait_http(
        &format!("{base}/health/liveliness"),
        None,
        Duration::from_secs(120),
    ) {
        return Err(anyhow!(
            "LiteLLM proxy did not become live within 120 s (see litellm.log)"
        ));
    }
    drive_both(
        r,
        drive,
        "LiteLLM",
        &format!("{base}/v1/chat/completions"),
        "mock",
        "sk-bench-master",
        child.0.id(),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_show_paths_relative_to_the_repository() {
        let root = std::env::current_dir().unwrap();
        let mut cmd = Command::new(root.join("examples").join("x"));
        cmd.arg("--config")
            .arg(root.join("a.yaml"))
            .arg("--root")
            .arg(&root);
        assert_eq!(describe(&cmd), "examples/x --config a.yaml --root .");
    }
}
