//! `enforce-bench python`: enforce called from Python (the `enforce-llm` wheel) against the
//! Python peers in the same run, and the Python section of BENCHMARKS.md.
//!
//! - the cost of one check from Python (scenario 1's regex rule, a profile without validators,
//!   the module-level `check`) and `Guard.validate` on the same rule and strings, in the same
//!   interpreter (Guardrails' virtualenv, with the wheel installed into it);
//! - the JSON-schema re-ask loop (scenario 2: the proxy's `person` profile, the mocks) through
//!   `enforce_llm.Enforcer` with an openai call as the model, and Instructor's and Guardrails'
//!   own loops against the same mocks.

use crate::peers::{self, command, describe, output_json, python, quiet_env, Pinning};
use crate::results::{Results, PEERS};
use crate::section::PYTHON;
use anyhow::{anyhow, Context as _};
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

/// The targets for the Python package: a check well under the cost of a model call, and far
/// cheaper than the peers' own check of the same rule.
const TARGET_CHECK_US: f64 = 5.0;
const TARGET_RATIO_GUARD: f64 = 100.0;

/// Options of the Python run.
#[derive(Debug, Clone, clap::Args)]
pub struct PythonArgs {
    /// The `enforce-llm` wheel to measure (`cargo xtask wheels`: the `dist` profile).
    #[arg(long)]
    pub wheel: PathBuf,
    /// Where the virtualenvs and configs go (the full run's: the peers are installed once).
    #[arg(long)]
    pub work_dir: PathBuf,
    /// The report whose Python section is replaced.
    #[arg(long, default_value = "BENCHMARKS.md")]
    pub out: PathBuf,
    /// Strings checked per pass (scenario 1's).
    #[arg(long, default_value_t = 20_000)]
    pub strings: usize,
    /// Strings through Guard.validate.
    #[arg(long, default_value_t = 2000)]
    pub guard_strings: usize,
    /// Runs per loop measurement.
    #[arg(long, default_value_t = 100)]
    pub loop_runs: usize,
}

/// The loops measured: (library as peers.py names it, virtualenv, shown name).
const LOOPS: &[(&str, &str, &str)] = &[
    ("enforce-llm", "instructor", "enforce-llm (`Enforcer.run`)"),
    ("instructor", "instructor", "Instructor"),
    ("guardrails", "guardrails", "Guardrails AI"),
];

/// The virtualenv of the check comparison: Guardrails', so both run in one interpreter.
const CHECK_VENV: &str = "guardrails";

pub fn run(args: PythonArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let work = std::path::absolute(&args.work_dir)?;
    std::fs::create_dir_all(&work)?;
    let script = work.join("peers.py");
    std::fs::write(&script, peers::PEERS_PY)?;
    let load_before = peers::loadavg();
    let (pin, _) = Pinning::detect();
    let mut r = Results::default();
    let mut failures = Vec::new();

    // Guardrails and Instructor as the full run installs them, each with the wheel added.
    let mut ready = Vec::new();
    for peer in PEERS.iter().filter(|p| LOOPS.iter().any(|l| l.1 == p.venv)) {
        let installed =
            peers::install(&work, peer).and_then(|()| install_wheel(&work, peer.venv, &args.wheel));
        match installed {
            Ok(()) => ready.push(peer.venv),
            Err(e) => failures.push(format!("{}: {e:#}", peer.name)),
        }
    }
    let versions = ready
        .first()
        .map(|venv| {
            let a = vec![
                script.to_string_lossy().to_string(),
                "versions".into(),
                "enforce-llm".into(),
                "guardrails-ai".into(),
                "instructor".into(),
                "openai".into(),
            ];
            output_json(command(&[], &python(&work, venv), &a), &mut r).ok()
        })
        .unwrap_or_default();
    let mut versions = versions.unwrap_or(Value::Null);
    // The other venv's packages (instructor is only in its own).
    if let Some(venv) = ready.get(1) {
        let a = vec![
            script.to_string_lossy().to_string(),
            "versions".into(),
            "guardrails-ai".into(),
            "instructor".into(),
        ];
        if let (Ok(Value::Object(more)), Some(all)) = (
            output_json(command(&[], &python(&work, venv), &a), &mut r),
            versions.as_object_mut(),
        ) {
            for (k, v) in more {
                if !v.is_null() {
                    all.insert(k, v);
                }
            }
        }
    }
    r.commands.clear();

    let mut check = None;
    if ready.contains(&CHECK_VENV) {
        let a = vec![
            script.to_string_lossy().to_string(),
            "python-check".into(),
            args.strings.to_string(),
            args.guard_strings.to_string(),
        ];
        let mut cmd = command(&pin.sut, &python(&work, CHECK_VENV), &a);
        quiet_env(&mut cmd);
        match output_json(cmd, &mut r) {
            Ok(v) => check = Some(v),
            Err(e) => failures.push(format!("python-check: {e:#}")),
        }
    }

    let config = work.join("enforce-bench.yaml");
    std::fs::write(&config, peers::PERSON_CONFIG)?;
    let mock = |mode: &str, r: &mut Results| {
        let a = vec!["mock".to_string(), "--mode".into(), mode.into()];
        peers::start_printing_address(&std::env::current_exe()?, &pin.driver, &a, r)
            .map(|(child, addr)| (child, format!("http://{addr}/v1")))
    };
    let mut loops = Vec::new();
    match (mock("ok", &mut r), mock("fail-first", &mut r)) {
        (Ok((_ok, ok_url)), Ok((_ff, ff_url))) => {
            for (lib, venv, name) in LOOPS {
                if !ready.contains(venv) {
                    continue;
                }
                let a = vec![
                    script.to_string_lossy().to_string(),
                    "loop".into(),
                    lib.to_string(),
                    ok_url.clone(),
                    ff_url.clone(),
                    args.loop_runs.to_string(),
                    config.to_string_lossy().to_string(),
                ];
                let mut cmd = command(&pin.sut, &python(&work, venv), &a);
                quiet_env(&mut cmd);
                match output_json(cmd, &mut r) {
                    Ok(v) => loops.push((*name, v)),
                    Err(e) => failures.push(format!("{name} loop: {e:#}")),
                }
            }
        }
        (ok, ff) => {
            for e in [ok.err(), ff.err()].into_iter().flatten() {
                failures.push(format!("mock: {e:#}"));
            }
        }
    }

    let section = render(
        &args,
        &Measured {
            check: check.as_ref(),
            loops: &loops,
            versions: &versions,
            commands: &r.commands,
            failures: &failures,
            load_before: &load_before,
            seconds: started.elapsed().as_secs_f64(),
        },
    );
    let old = std::fs::read_to_string(&args.out).unwrap_or_default();
    std::fs::write(&args.out, PYTHON.splice(&old, &section))?;
    eprintln!(
        "bench: wrote the Python section of {} in {:.0} s",
        args.out.display(),
        started.elapsed().as_secs_f64()
    );
    if check.is_none() {
        return Err(anyhow!(
            "the check comparison did not run: {}",
            failures.join("; ")
        ));
    }
    Ok(())
}

/// The wheel under test into `venv` (no dependencies: it has none), replacing an older one.
fn install_wheel(work: &Path, venv: &str, wheel: &Path) -> anyhow::Result<()> {
    let mut pip = Command::new(python(work, venv));
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        "--no-deps",
        "--force-reinstall",
    ])
    .arg(wheel);
    let out = pip
        .output()
        .with_context(|| format!("cannot run {}", describe(&pip)))?;
    if !out.status.success() {
        return Err(anyhow!(
            "{} failed: {}",
            describe(&pip),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// Everything the section shows.
struct Measured<'a> {
    check: Option<&'a Value>,
    loops: &'a [(&'a str, Value)],
    versions: &'a Value,
    commands: &'a [String],
    failures: &'a [String],
    load_before: &'a str,
    seconds: f64,
}

fn num(v: &Value, key: &str) -> Option<f64> {
    v.get(key)?.as_f64().filter(|x| x.is_finite())
}

fn us(ns: Option<f64>) -> String {
    ns.map_or("–".into(), |ns| format!("{:.2} µs", ns / 1e3))
}

fn render(args: &PythonArgs, m: &Measured<'_>) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "{}", PYTHON.begin);
    let _ = writeln!(
        s,
        "## Python: enforce-llm against Guardrails and Instructor\n"
    );
    let _ = writeln!(
        s,
        "Generated by `cargo xtask bench-peers --python` on {}; do not edit by hand. The run took {:.0} s; load average before: {}, after: {} (a shared machine: every time here is an upper bound, read the ratios). This section is measured on its own; the sections above come from the full run named at the top.\n",
        peers::version_of("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
        m.seconds,
        m.load_before,
        peers::loadavg(),
    );
    let _ = writeln!(
        s,
        "The wheel: `{}` (built by `cargo xtask wheels`, `dist` profile), installed into each peer's virtualenv. Versions: {}.\n",
        args.wheel
            .file_name()
            .map_or("?".into(), |n| n.to_string_lossy().to_string()),
        m.versions
            .as_object()
            .map(|o| o
                .iter()
                .map(|(k, v)| format!("{k} {}", v.as_str().unwrap_or("–")))
                .collect::<Vec<_>>()
                .join(", "))
            .unwrap_or_else(|| "–".into())
    );
    if let Some(c) = m.check {
        let check_ns = num(c, "regex_ns_per_check");
        let guard_ns = num(c, "guard_ns_per_validate");
        let ratio = match (guard_ns, check_ns) {
            (Some(g), Some(e)) if e > 0.0 => Some(g / e),
            _ => None,
        };
        let _ = writeln!(s, "### One check, called from Python\n");
        let _ = writeln!(
            s,
            "Scenario 1's regex rule (an e-mail address is forbidden) over its {} strings, median of 5 passes, in one interpreter; `Guard.validate` over the first {} of them. enforce flagged {}, Python's `re` {}, Guardrails {} of its {}.\n",
            num(c, "strings").unwrap_or(0.0),
            num(c, "guard_strings").unwrap_or(0.0),
            num(c, "flagged").unwrap_or(0.0),
            num(c, "python_regex_flagged").unwrap_or(0.0),
            num(c, "guard_flagged").map_or("–".into(), |x| x.to_string()),
            num(c, "guard_strings").unwrap_or(0.0),
        );
        let _ = writeln!(s, "| call | per call |");
        let _ = writeln!(s, "|---|---|");
        let _ = writeln!(
            s,
            "| `Profile.check(text)`, the regex rule | **{}** |",
            us(check_ns)
        );
        let _ = writeln!(
            s,
            "| `Profile.check(text)`, a profile without validators (the package's own cost: the call, the bookkeeping, the `Outcome`) | {} |",
            us(num(c, "empty_ns_per_check"))
        );
        let _ = writeln!(
            s,
            "| `enforce_llm.check(text, profile=, config=)` (looks the file up on each call) | {} |",
            us(num(c, "module_check_ns"))
        );
        let _ = writeln!(
            s,
            "| Python's own `re.search` (the floor of any Python validator) | {} |",
            us(num(c, "python_regex_ns_per_string"))
        );
        let _ = writeln!(
            s,
            "| Guardrails `Guard.validate(text)`, the same rule as a Guardrails validator | {} |",
            us(guard_ns)
        );
        let _ = writeln!(
            s,
            "| the JSON-schema loop with a scripted model (wrong once, then right): `Enforcer.run`, no HTTP | {:.1} µs |",
            num(c, "scripted_loop_us").unwrap_or(f64::NAN)
        );
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "| target | measured | verdict |\n|---|---|---|\n| a check from Python < {TARGET_CHECK_US} µs | {} | {} |\n| ≥ {TARGET_RATIO_GUARD}× faster than `Guard.validate` | {} | {} |\n",
            us(check_ns),
            match check_ns {
                Some(ns) if ns / 1e3 < TARGET_CHECK_US => "**met**",
                Some(_) => "**missed**",
                None => "not measured",
            },
            ratio.map_or("–".into(), |x| format!("{x:.0}×")),
            match ratio {
                Some(x) if x >= TARGET_RATIO_GUARD => "**met**",
                Some(_) => "**missed**",
                None => "not measured",
            },
        );
    }
    if !m.loops.is_empty() {
        let _ = writeln!(s, "### The JSON-schema re-ask loop, from Python\n");
        let _ = writeln!(s, "Each library's own loop against the mocks of scenario 2 (`ok`: valid at once; `fail-first`: invalid until the request carries feedback), median of {} runs after 20 warm-up runs, each model call an `openai` client request. enforce-llm runs the proxy's `person` profile (the same JSON Schema) with the request as its model callable.\n", args.loop_runs);
        let _ = writeln!(s, "| library | one bare call | valid at once | one re-ask | loop's own cost (valid at once − bare call) | passed after one re-ask |");
        let _ = writeln!(s, "|---|---|---|---|---|---|");
        for (name, v) in m.loops {
            let raw = num(v, "raw_call_ms");
            let ok = num(v, "ok_ms");
            let _ = writeln!(
                s,
                "| {name} | {} | {} | {} | {} | {}/{} |",
                ms(raw),
                ms(ok),
                ms(num(v, "fail_first_ms")),
                match (ok, raw) {
                    (Some(o), Some(r)) => format!("{:.3} ms", o - r),
                    _ => "–".into(),
                },
                num(v, "fail_first_passed_after_one_reask").unwrap_or(0.0),
                num(v, "runs").unwrap_or(0.0),
            );
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "Commands:\n");
    for c in m.commands {
        let _ = writeln!(s, "- `{c}`");
    }
    let _ = writeln!(s);
    if !m.failures.is_empty() {
        let _ = writeln!(s, "### Not measured\n");
        for f in m.failures {
            let _ = writeln!(s, "- {f}");
        }
        let _ = writeln!(s);
    }
    let _ = writeln!(s, "{}", PYTHON.end);
    s
}

fn ms(x: Option<f64>) -> String {
    x.map_or("–".into(), |x| format!("{x:.3} ms"))
}
