//! Part of `cargo xtask test`: the plugin template (`plugins/template`) built as a plugin author
//! builds it, outside the enforce workspace, and used by the `enforce` binary the tests built.
//!
//! The template is copied to a temporary directory outside the repository, its SDK dependency
//! pointed at this checkout's `crates/enforce-plugin-abi` by path, and it is tested and built
//! there with its own `Cargo.lock` (resolved from what cargo already has, else from the
//! registry). Then `enforce plugins --dir` must list its validator and `enforce check` must
//! report its issue as a rustc-style diagnostic. The build shares the workspace's target
//! directory and dev profile settings, so the dependencies the plugins were built with are
//! reused.

use crate::{cargo, root, target_dir, with_workspace_profile, Result};
use std::path::Path;
use std::process::{Command, Output};

/// The SDK dependency as the template declares it (right for `plugins/template`).
const SDK_DEPENDENCY: &str = "enforce-plugin-abi = { path = \"../../crates/enforce-plugin-abi\" }";

/// The library the template builds (its package `no-hedging`).
fn library_name() -> String {
    format!(
        "{}no_hedging{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    )
}

/// Copies, tests, builds and uses the template; removes the copy when it passed.
pub(crate) fn check() -> Result<()> {
    let work = std::env::temp_dir().join(format!("enforce-plugin-template-{}", std::process::id()));
    if work.starts_with(root()) {
        return Err(format!(
            "the temporary directory {} is inside the workspace; set TMPDIR elsewhere",
            work.display()
        ));
    }
    let _ = std::fs::remove_dir_all(&work);
    eprintln!(
        "xtask: building plugins/template outside the workspace, in {}",
        work.display()
    );
    copy_template(&root().join("plugins/template"), &work)?;
    let sdk = root().join("crates/enforce-plugin-abi");
    point_sdk_at(&work.join("Cargo.toml"), &sdk)?;

    cargo_in(&work, &["test"])?;
    cargo_in(&work, &["build"])?;
    if !work.join("Cargo.lock").is_file() {
        return Err("the template's build wrote no Cargo.lock of its own".into());
    }
    let library = target_dir().join("debug").join(library_name());
    let plugins = work.join("plugins");
    std::fs::create_dir_all(&plugins)
        .map_err(|e| format!("cannot create {}: {e}", plugins.display()))?;
    std::fs::copy(&library, plugins.join(library_name()))
        .map_err(|e| format!("cannot copy {}: {e}", library.display()))?;

    let enforce = target_dir().join("debug").join("enforce");
    let listed = enforce_in(&work, &enforce, &["plugins", "--dir", "plugins"])?;
    expect_output(
        &listed,
        true,
        &["plugin no-hedging 0.1.0", "validator no_hedging"],
    )?;

    std::fs::write(
        work.join("enforce.yaml"),
        "plugin_dirs: [plugins]\nvalidators:\n  hedging:\n    type: no_hedging\nprofiles:\n  letter:\n    validators: [hedging]\n",
    )
    .map_err(|e| format!("cannot write enforce.yaml: {e}"))?;
    std::fs::write(
        work.join("draft.md"),
        "Guten Tag.\nDas klappt vielleicht.\n",
    )
    .map_err(|e| format!("cannot write draft.md: {e}"))?;
    let checked = enforce_in(
        &work,
        &enforce,
        &[
            "check",
            "--config",
            "enforce.yaml",
            "--profile",
            "letter",
            "draft.md",
        ],
    )?;
    // Exit 1: the file fails; the issue is shown as rustc shows an error, pointing at the word.
    if checked.status.code() != Some(1) {
        return Err(format!(
            "enforce check with the template plugin exited with {} instead of 1:\n{}",
            checked.status,
            both(&checked)
        ));
    }
    expect_output(
        &checked,
        false,
        &[
            "draft.md:2: error[HEDGING] `vielleicht` weakens the statement.",
            " --> draft.md:2:12",
            "2 | Das klappt vielleicht.",
            "^^^^^^^^^^ HEDGING",
        ],
    )?;
    let _ = std::fs::remove_dir_all(&work);
    eprintln!(
        "xtask: plugins/template built outside the workspace, listed and used by enforce check"
    );
    Ok(())
}

/// Copies the template's sources (not a `target/` or `Cargo.lock` left by an in-tree build).
fn copy_template(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name();
        if name == "target" || name == "Cargo.lock" {
            continue;
        }
        let path = entry.path();
        if path.is_dir() {
            copy_template(&path, &to.join(&name))?;
        } else {
            std::fs::copy(&path, to.join(&name))
                .map_err(|e| format!("cannot copy {}: {e}", path.display()))?;
        }
    }
    Ok(())
}

/// Replaces the template's relative SDK path by `sdk`'s absolute one.
fn point_sdk_at(manifest: &Path, sdk: &Path) -> Result<()> {
    let text = std::fs::read_to_string(manifest)
        .map_err(|e| format!("cannot read {}: {e}", manifest.display()))?;
    if !text.contains(SDK_DEPENDENCY) {
        return Err(format!(
            "plugins/template/Cargo.toml no longer declares `{SDK_DEPENDENCY}`: update xtask/src/template.rs"
        ));
    }
    let absolute = format!(
        "enforce-plugin-abi = {{ path = {:?} }}",
        sdk.display().to_string()
    );
    std::fs::write(manifest, text.replace(SDK_DEPENDENCY, &absolute))
        .map_err(|e| format!("cannot write {}: {e}", manifest.display()))
}

/// Runs cargo `args` in the copy, offline first (every crate it needs is normally cached by the
/// workspace's build), then, if that cannot resolve, with the registry.
fn cargo_in(work: &Path, args: &[&str]) -> Result<()> {
    let attempt = |offline: bool| -> Result<bool> {
        let mut cmd = cargo();
        cmd.current_dir(work)
            .args(args)
            .args(offline.then_some("--offline"))
            .env("CARGO_TARGET_DIR", target_dir());
        with_workspace_profile(&mut cmd);
        eprintln!("xtask: running {cmd:?} in {}", work.display());
        cmd.status()
            .map(|s| s.success())
            .map_err(|e| format!("cannot start cargo: {e}"))
    };
    if attempt(true)? || attempt(false)? {
        Ok(())
    } else {
        Err(format!(
            "cargo {} of the plugin template failed",
            args.join(" ")
        ))
    }
}

fn enforce_in(work: &Path, enforce: &Path, args: &[&str]) -> Result<Output> {
    let mut cmd = Command::new(enforce);
    cmd.current_dir(work)
        .args(args)
        // Only the template's plugin: no user plugin directories.
        .env_remove("ENFORCE_PLUGIN_PATH")
        .env("XDG_DATA_HOME", work.join("no-user-data"));
    cmd.output().map_err(|e| {
        format!(
            "cannot run {} (built by cargo test): {e}",
            enforce.display()
        )
    })
}

fn both(output: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn expect_output(output: &Output, must_succeed: bool, expected: &[&str]) -> Result<()> {
    let text = both(output);
    if must_succeed && !output.status.success() {
        return Err(format!("enforce failed ({}):\n{text}", output.status));
    }
    for line in expected {
        if !text.contains(line) {
            return Err(format!(
                "expected `{line}` in the output of enforce:\n{text}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Splits a Markdown file into its fenced code blocks: (language, body).
    fn code_blocks(markdown: &str) -> Vec<(String, String)> {
        let mut blocks = Vec::new();
        let mut current: Option<(String, String)> = None;
        for line in markdown.lines() {
            match (&mut current, line.strip_prefix("```")) {
                (None, Some(language)) => {
                    current = Some((language.trim().to_string(), String::new()))
                }
                (Some(_), Some("")) => blocks.extend(current.take()),
                (Some((_, body)), _) => {
                    body.push_str(line);
                    body.push('\n');
                }
                (None, None) => {}
            }
        }
        blocks
    }

    /// The guide shows the template's code, not a copy that can drift: its `Cargo.toml` block is
    /// the template's manifest, and its two Rust blocks together are the template's `src/lib.rs`.
    #[test]
    fn the_plugin_guide_shows_the_templates_files() {
        let guide = std::fs::read_to_string(root().join("plugins/README.md")).unwrap();
        let blocks = code_blocks(&guide);
        let manifest = std::fs::read_to_string(root().join("plugins/template/Cargo.toml")).unwrap();
        let lib = std::fs::read_to_string(root().join("plugins/template/src/lib.rs")).unwrap();
        let toml: Vec<&String> = blocks
            .iter()
            .filter(|(l, _)| l == "toml")
            .map(|(_, b)| b)
            .collect();
        let rust: Vec<&String> = blocks
            .iter()
            .filter(|(l, _)| l == "rust")
            .map(|(_, b)| b)
            .collect();
        assert_eq!(
            toml,
            [&manifest],
            "plugins/README.md's Cargo.toml differs from the template's"
        );
        assert_eq!(
            rust.len(),
            2,
            "the guide has the validator and its tests as Rust blocks"
        );
        assert_eq!(
            format!("{}\n{}", rust[0], rust[1]),
            lib,
            "plugins/README.md's code differs from plugins/template/src/lib.rs"
        );
    }

    #[test]
    fn the_template_declares_the_sdk_as_the_outside_build_expects() {
        let manifest = std::fs::read_to_string(root().join("plugins/template/Cargo.toml")).unwrap();
        assert!(manifest.contains(SDK_DEPENDENCY));
    }
}
