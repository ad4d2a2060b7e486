//! The plumbing of the peer benchmark: pinning to cores, commands and their output, installs
//! into venvs, starting processes and waiting for their ports, the machine's description.

use crate::results::{Peer, Results};
use anyhow::{anyhow, Context as _};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

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
/// harness itself runs from, `<target>/dist/enforce-bench`) as `target/`, the repository
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

pub(super) fn read_first_line(child: &mut Child, timeout: Duration) -> anyhow::Result<String> {
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
