//! The Python packages: `cargo xtask wheels` builds both wheels with maturin, and `cargo xtask
//! test` builds both (debug), installs them into a venv under target/ and runs pytest.
//!
//! - `python/enforce-llm`: the library (PyO3, abi3), crate `crates/enforce-python`.
//! - `python/enforce-cli`: the `enforce` binary (`bindings = "bin"`), the root package.
//!
//! maturin and pytest come from PyPI, installed by these steps into `target/python-venv`.
//! Without python3, its venv module or pip, the Python tests print "skipped: ..." and pass.

use crate::{root, run, say, target_dir, timed, without_package_env, Result, DIST};
use std::env;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the venv gets from PyPI (maturin's floor: the first to set
/// `PYO3_BUILD_EXTENSION_MODULE`, which PyO3 0.26+ needs instead of a feature).
const MATURIN: &str = "maturin>=1.9.4,<2";
const PYTEST: &str = "pytest>=7";

/// The two wheels: the folder of each pyproject.toml, below the repository.
const LIBRARY: &str = "python/enforce-llm";
const CLI: &str = "python/enforce-cli";

fn venv_dir() -> PathBuf {
    target_dir().join("python-venv")
}

fn venv_bin(name: &str) -> PathBuf {
    venv_dir().join("bin").join(name)
}

/// Why Python tests cannot run here, or `None` when a venv with pip is (now) in
/// target/python-venv.
fn ensure_venv() -> Option<String> {
    let python = venv_bin("python");
    if python.is_file() && quiet(Command::new(&python).args(["-m", "pip", "--version"])) {
        return None;
    }
    if !quiet(Command::new("python3").arg("--version")) {
        return Some("python3 not found".into());
    }
    // A venv without pip (Debian's python3 without python3-venv/ensurepip) is of no use.
    let _ = std::fs::remove_dir_all(venv_dir());
    let created = Command::new("python3")
        .args(["-m", "venv"])
        .arg(venv_dir())
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !created || !quiet(Command::new(&python).args(["-m", "pip", "--version"])) {
        let _ = std::fs::remove_dir_all(venv_dir());
        return Some(
            "python3 cannot make a venv with pip (install the Debian package python3-venv)".into(),
        );
    }
    None
}

/// `true` when `cmd` runs and succeeds (its output discarded).
fn quiet(cmd: &mut Command) -> bool {
    cmd.stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Installs `requirements` into the venv unless `probe` (a module name) imports already.
fn pip_install(probe: &str, requirements: &[&str]) -> Result<()> {
    let python = venv_bin("python");
    if quiet(Command::new(&python).args(["-c", &format!("import {probe}")])) {
        return Ok(());
    }
    let mut pip = Command::new(&python);
    pip.args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ])
    .args(requirements);
    run(pip)
}

/// Builds the wheel of `project` (a folder with a pyproject.toml) into target/wheels (with the
/// `dist` profile; a debug build into target/wheels/debug: the two have the same file name) and
/// returns its path.
fn build_wheel(project: &str, dist: bool) -> Result<PathBuf> {
    let out = if dist {
        target_dir().join("wheels")
    } else {
        target_dir().join("wheels").join("debug")
    };
    let mut maturin = Command::new(venv_bin("maturin"));
    without_package_env(&mut maturin);
    maturin
        .current_dir(root().join(project))
        .args(["build", "--quiet", "--out"])
        .arg(&out)
        .arg("--interpreter")
        .arg(venv_bin("python"))
        .env("CARGO_TARGET_DIR", target_dir());
    if dist {
        maturin.args(["--profile", DIST]);
    }
    if env::var_os("CI").is_some() {
        maturin.arg("--locked");
    }
    run(maturin)?;
    newest_wheel(&out, &distribution(project))
}

/// The distribution's file-name prefix: `python/enforce-llm` → `enforce_llm-`.
fn distribution(project: &str) -> String {
    let name = Path::new(project)
        .file_name()
        .map(|n| n.to_string_lossy().replace('-', "_"))
        .unwrap_or_default();
    format!("{name}-")
}

fn newest_wheel(dir: &Path, prefix: &str) -> Result<PathBuf> {
    std::fs::read_dir(dir)
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with(prefix) && name.ends_with(".whl")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .ok_or_else(|| format!("no {prefix}*.whl in {}", dir.display()))
}

/// `cargo xtask wheels [--dev]`: both wheels into target/wheels (the `dist` profile, as they
/// ship; `--dev` builds the debug profile into target/wheels/debug, quicker, for trying them out).
pub fn wheels(args: &[String]) -> Result<()> {
    let dist = match args {
        [] => true,
        [flag] if flag == "--dev" => false,
        _ => return Err("usage: cargo xtask wheels [--dev]".into()),
    };
    maturin_ready()?;
    for project in [LIBRARY, CLI] {
        let wheel = build_wheel(project, dist)?;
        println!("{}", wheel.display());
    }
    Ok(())
}

/// The library wheel, `dist` build, for `cargo xtask bench-peers --python`.
pub fn dist_library_wheel() -> Result<PathBuf> {
    maturin_ready()?;
    build_wheel(LIBRARY, true)
}

/// The venv with maturin in it, or why there cannot be one.
fn maturin_ready() -> Result<()> {
    if let Some(why) = ensure_venv() {
        return Err(format!("{why}: maturin cannot be installed"));
    }
    pip_install("maturin", &[MATURIN])
}

/// `cargo xtask pytest`, part of `cargo xtask test`: both wheels (debug builds) installed into
/// the venv and the pytest suite in python/tests run against them (the library's API, the CLI
/// wheel's `enforce` command and path helper, the LICENSE files of both wheels). Prints why and
/// passes when Python, its venv module or PyPI are missing.
pub fn pytest() -> Result<()> {
    match library_wheel_for_tests()? {
        Some(library) => pytest_with(&library),
        None => Ok(()),
    }
}

/// The first half of [`pytest`], which needs no test binary (`cargo xtask test` runs it while
/// the tests run): the venv with maturin and pytest, and the library wheel. `None`, after
/// saying why, when the Python tests cannot run here.
pub fn library_wheel_for_tests() -> Result<Option<PathBuf>> {
    if let Some(why) = ensure_venv() {
        say(&format!(
            "xtask: skipped: {why}: the Python package tests (python/tests) did not run"
        ));
        return Ok(None);
    }
    if let Err(e) = timed("maturin and pytest install", || {
        pip_install("maturin, pytest", &[MATURIN, PYTEST])
    }) {
        say(&format!(
            "xtask: skipped: maturin and pytest could not be installed from PyPI ({e}): the \
             Python package tests (python/tests) did not run"
        ));
        return Ok(None);
    }
    timed("enforce-llm wheel", || build_wheel(LIBRARY, false)).map(Some)
}

/// The second half of [`pytest`]: the CLI wheel, both wheels installed, pytest.
pub fn pytest_with(library: &Path) -> Result<()> {
    let cli = timed("enforce-cli wheel", || build_wheel(CLI, false))?;
    let mut install = Command::new(venv_bin("python"));
    install
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "--no-deps",
            "--force-reinstall",
        ])
        .arg(library)
        .arg(&cli);
    run(install)?;
    let mut pytest = Command::new(venv_bin("python"));
    pytest
        .current_dir(root())
        .args(["-m", "pytest", "-q", "python/tests"])
        // The suite tests the installed wheels, never a source tree on the path.
        .env_remove("PYTHONPATH")
        // The wheels the suite opens to check what they hold; with these set, a wheel that
        // is not installed fails its tests instead of skipping them.
        .env(LIBRARY_WHEEL_VAR, library)
        .env(CLI_WHEEL_VAR, &cli);
    timed("pytest", || run(pytest))
}

/// The paths of the wheels under test, for python/tests (see `pytest`).
const LIBRARY_WHEEL_VAR: &str = "ENFORCE_TEST_LLM_WHEEL";
const CLI_WHEEL_VAR: &str = "ENFORCE_TEST_CLI_WHEEL";
