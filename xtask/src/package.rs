//! `cargo xtask package` (part of `ci`): `cargo package` for every publishable crate at once, so
//! a crate that would not build from its `.crate` file (a file outside it, a path dependency
//! without a version, a dependency cycle through dev-dependencies) fails here, not at publish.
//!
//! `cargo package -p A -p B …` packages the crates in dependency order and verifies each against
//! the ones packaged before it through a temporary local registry (cargo ≥ 1.90), so nothing has
//! to be on crates.io yet. The verification builds use the workspace's target directory and the
//! workspace's dev profile settings, so dependencies already built by `clippy` or `test` with
//! the same features are reused.

use crate::{cargo, locked, root, run, say, with_workspace_profile, Result};

/// Publishable packages whose default features are not built by the verification: the local
/// runner's default `llama` compiles llama.cpp from C++ (minutes on two cores), which `ci`
/// already builds and tests through `enforce/local`. Its package is still made and its
/// manifest and lock file checked; its code is built without the feature.
const VERIFY_WITHOUT_DEFAULTS: &[&str] = &["enforce-runner-local"];

/// A workspace package as `cargo package` needs to know it.
#[derive(Debug, PartialEq)]
pub(crate) struct Publishable {
    pub(crate) name: String,
    /// Whether it has a `default` feature.
    pub(crate) has_default_features: bool,
}

/// The workspace packages without `publish = false`, from `cargo metadata`.
pub(crate) fn publishable() -> Result<Vec<Publishable>> {
    Ok(publishable_in(&crate::workspace_metadata()?))
}

/// The manifest of the workspace package `name`.
#[cfg(test)]
pub(crate) fn manifest_of(name: &str) -> Result<std::path::PathBuf> {
    crate::workspace_packages()?
        .into_iter()
        .find(|(n, _)| n == name)
        .map(|(_, manifest)| manifest)
        .ok_or_else(|| format!("no workspace package {name}"))
}

/// The publishable packages of a `cargo metadata` document: `publish` is `null` for "anywhere"
/// and a list of registries otherwise (`[]` for `publish = false`).
fn publishable_in(meta: &serde_json::Value) -> Vec<Publishable> {
    let mut packages: Vec<Publishable> = meta["packages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|pkg| {
            pkg["publish"].is_null() || pkg["publish"].as_array().is_some_and(|r| !r.is_empty())
        })
        .filter_map(|pkg| {
            Some(Publishable {
                name: pkg["name"].as_str()?.to_string(),
                has_default_features: pkg["features"]
                    .get("default")
                    .and_then(|d| d.as_array())
                    .is_some_and(|d| !d.is_empty()),
            })
        })
        .collect();
    packages.sort_by(|a, b| a.name.cmp(&b.name));
    packages
}

/// The feature flags of the verification: every package's defaults but those listed in
/// `VERIFY_WITHOUT_DEFAULTS`.
fn feature_args(packages: &[Publishable]) -> Vec<String> {
    let defaults: Vec<String> = packages
        .iter()
        .filter(|p| p.has_default_features && !VERIFY_WITHOUT_DEFAULTS.contains(&p.name.as_str()))
        .map(|p| format!("{}/default", p.name))
        .collect();
    let mut args = vec!["--no-default-features".to_string()];
    if !defaults.is_empty() {
        args.push("--features".into());
        args.push(defaults.join(","));
    }
    args
}

/// Packages every publishable crate and checks that the packages compile.
///
/// By default (`ci`): `cargo package --no-verify` (manifests, versions of path dependencies,
/// lock files resolved through cargo's temporary local registry), then the `.crate` files are
/// unpacked into one throwaway workspace, each other's dependencies patched to the unpacked
/// copies, and `cargo check`ed there: a file left out of a package, or a dependency only the
/// workspace provided, fails. With `--verify`, cargo's own verification instead: a full debug
/// build of every package on its own, in dependency order (measured at about 15 minutes on the
/// two-core CI machine, most of it rebuilding dependencies per package; for before a release).
pub(crate) fn check(args: &[String]) -> Result<()> {
    let full = args.iter().any(|a| a == "--verify");
    if let Some(other) = args.iter().find(|a| *a != "--verify") {
        return Err(format!(
            "package: unknown argument `{other}` (only --verify)"
        ));
    }
    let packages = publishable()?;
    if packages.is_empty() {
        return Err("no publishable package in the workspace".into());
    }
    let package = |offline: bool| {
        let mut cmd = cargo();
        // A working tree with uncommitted changes is what is being checked, locally and on CI.
        cmd.args(["package", "--allow-dirty"]).args(locked());
        for p in &packages {
            cmd.args(["-p", &p.name]);
        }
        if full {
            cmd.args(feature_args(&packages));
        } else {
            cmd.arg("--no-verify");
        }
        if offline {
            cmd.arg("--offline");
        }
        with_workspace_profile(&mut cmd);
        run(cmd)
    };
    say(&format!(
        "xtask: packaging {}",
        packages
            .iter()
            .map(|p| p.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ));
    // Offline first: every package's lock file resolves from what the workspace's build
    // downloaded (seconds instead of an index update per package); the registry only if not.
    if package(true).is_err() {
        say("xtask: packaging offline failed; again with the registry");
        package(false)?;
    }
    if full {
        return Ok(());
    }
    check_unpacked(&packages)
}

/// Unpacks the `.crate` files into `target/package/unpacked` as one workspace and runs `cargo
/// check` on it.
fn check_unpacked(packages: &[Publishable]) -> Result<()> {
    let packaged = crate::target_dir().join("package");
    let dir = packaged.join("unpacked");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let version = workspace_version()?;
    let mut members = Vec::new();
    for p in packages {
        let name = format!("{}-{version}", p.name);
        let file = packaged.join(format!("{name}.crate"));
        let mut tar = std::process::Command::new("tar");
        // `-m`: the files get the time of unpacking, not the archive's, so cargo never takes
        // a changed package for one it checked before.
        tar.arg("-xmzf").arg(&file).arg("-C").arg(&dir);
        run(tar)?;
        members.push((p.name.clone(), name));
    }
    let mut manifest = String::from(
        "# Written by `cargo xtask package`: the packaged crates, as crates.io would serve them.\n\
         [workspace]\nresolver = \"2\"\nmembers = [\n",
    );
    for (_, dir_name) in &members {
        manifest.push_str(&format!("    \"{dir_name}\",\n"));
    }
    manifest.push_str("]\n\n[patch.crates-io]\n");
    for (name, dir_name) in &members {
        manifest.push_str(&format!("{name} = {{ path = \"{dir_name}\" }}\n"));
    }
    // The root's own patches (vendor/) too, so the lock file copied below resolves as it does
    // in the workspace.
    for (name, path) in root_patches()? {
        manifest.push_str(&format!("{name} = {{ path = {:?} }}\n", root().join(path)));
    }
    std::fs::write(dir.join("Cargo.toml"), manifest)
        .map_err(|e| format!("cannot write the unpacked workspace: {e}"))?;
    // The workspace's lock file: the same dependency versions as every other build, nothing
    // to download.
    std::fs::copy(root().join("Cargo.lock"), dir.join("Cargo.lock"))
        .map_err(|e| format!("cannot copy Cargo.lock: {e}"))?;
    let mut check = cargo();
    check
        .current_dir(&dir)
        .args(["check", "--workspace", "--offline"])
        .env("CARGO_TARGET_DIR", crate::target_dir())
        .args(feature_args(packages));
    with_workspace_profile(&mut check);
    run(check)
}

/// The root manifest's `[patch.crates-io]` entries: crate name and path, relative to the root.
fn root_patches() -> Result<Vec<(String, String)>> {
    let text = std::fs::read_to_string(root().join("Cargo.toml"))
        .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    Ok(patches_in(&text))
}

fn patches_in(manifest: &str) -> Vec<(String, String)> {
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[patch.crates-io]")
        .skip(1)
        .take_while(|l| !l.trim_start().starts_with('['))
        .filter_map(|l| {
            let (name, rest) = l.split_once('=')?;
            let path = rest.split("path = \"").nth(1)?.split('"').next()?;
            Some((name.trim().to_string(), path.to_string()))
        })
        .collect()
}

/// `[workspace.package] version`, which every publishable crate uses.
fn workspace_version() -> Result<String> {
    let text = std::fs::read_to_string(root().join("Cargo.toml"))
        .map_err(|e| format!("cannot read Cargo.toml: {e}"))?;
    text.lines()
        .skip_while(|l| l.trim() != "[workspace.package]")
        .find_map(|l| l.trim().strip_prefix("version = "))
        .map(|v| v.trim_matches('"').to_string())
        .ok_or_else(|| "no version in [workspace.package]".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn publish_false_packages_are_left_out_and_defaults_kept_but_the_local_runners() {
        let meta = json!({"packages": [
            {"name": "enforce-testkit", "publish": [], "features": {}},
            {"name": "enforce-core", "publish": null, "features": {"config-schema": []}},
            {"name": "enforce-runner-local", "publish": null, "features": {"default": ["llama"]}},
            {"name": "enforce", "publish": null, "features": {"default": ["otel", "grpc"]}},
            {"name": "internal", "publish": ["my-registry"], "features": {"default": []}},
        ]});
        let packages = publishable_in(&meta);
        let names: Vec<&str> = packages.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "enforce",
                "enforce-core",
                "enforce-runner-local",
                "internal"
            ]
        );
        assert_eq!(
            feature_args(&packages),
            ["--no-default-features", "--features", "enforce/default"]
        );
    }

    #[test]
    fn the_root_patches_are_read_from_their_section_only() {
        let manifest = "[workspace]\nmembers = []\n\n[patch.crates-io]\n# why\nfoo = { path = \"vendor/foo\" }\nbar-baz = { path = \"vendor/bar\", version = \"1\" }\n\n[profile.dev]\ndebug = { path = \"no\" }\n";
        assert_eq!(
            patches_in(manifest),
            [
                ("foo".to_string(), "vendor/foo".to_string()),
                ("bar-baz".to_string(), "vendor/bar".to_string())
            ]
        );
        assert!(patches_in("[workspace]\n").is_empty());
    }

    /// The crates a Rust user would depend on are publishable, the test-only ones are not.
    #[test]
    fn the_workspace_publishes_the_library_crates_and_no_test_crate() {
        let names: Vec<String> = publishable()
            .expect("cargo metadata")
            .into_iter()
            .map(|p| p.name)
            .collect();
        for library in [
            "enforce",
            "enforce-core",
            "enforce-validators",
            "enforce-plugin-abi",
        ] {
            assert!(names.iter().any(|n| n == library), "{library} in {names:?}");
        }
        for name in &names {
            assert!(
                !name.contains("test") && !name.contains("bench") && name != "xtask",
                "{name} is test-only and must say `publish = false`"
            );
        }
    }
}
