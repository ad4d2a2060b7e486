//! The plugin libraries built by `cargo xtask build-plugins`, for tests that load plugins.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The directory holding the built plugin libraries.
///
/// `cargo xtask test` builds them and sets `ENFORCE_TEST_PLUGIN_DIR`. Under a plain
/// `cargo test` the variable is unset and the plugins are built here, once per test binary,
/// through `cargo xtask build-plugins` in a separate target directory (the outer `cargo test`
/// holds the lock on the normal one).
pub fn plugin_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        if let Some(dir) = std::env::var_os("ENFORCE_TEST_PLUGIN_DIR") {
            return PathBuf::from(dir);
        }
        // The workspace root: this crate lives in crates/enforce-testkit.
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let target = root.join("target").join("test-plugins");
        eprintln!(
            "ENFORCE_TEST_PLUGIN_DIR is not set: building the plugins into {} \
             (run `cargo xtask test` to reuse the normal build)",
            target.display()
        );
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| env!("CARGO").to_string());
        let status = Command::new(cargo)
            .args(["run", "--quiet", "-p", "xtask", "--", "build-plugins"])
            .env("CARGO_TARGET_DIR", &target)
            .current_dir(&root)
            .status()
            .expect("cannot start cargo to build the test plugins");
        assert!(
            status.success(),
            "building the test plugins failed: {status}"
        );
        target.join("plugins")
    })
}

/// The path of the plugin library of the package `package` (e.g. `enforce-plugin-german-prose`).
pub fn library(package: &str) -> PathBuf {
    let file = format!(
        "{}{}{}",
        std::env::consts::DLL_PREFIX,
        package.replace('-', "_"),
        std::env::consts::DLL_SUFFIX
    );
    let path = plugin_dir().join(file);
    assert!(path.is_file(), "missing plugin library {}", path.display());
    path
}

/// Copies the given plugin libraries into a fresh directory.
pub fn dir_with(packages: &[&str]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    for package in packages {
        let lib = library(package);
        let name = lib.file_name().expect("library file name");
        std::fs::copy(&lib, dir.path().join(name)).expect("copy plugin library");
    }
    dir
}
