//! `enforce run --runner local`: a GGUF model in the binary's own process. With the feature
//! `local` against the test model (skipped when it is not installed: `cargo xtask models`);
//! without it, the error that says how to build it.

use crate::{text, BIN};
use std::process::{Command, Output};

fn enforce_in(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new(BIN)
        .args(args)
        .current_dir(dir)
        .env_remove("ENFORCE_CONFIG")
        .env_remove("ENFORCE_MODEL")
        .output()
        .expect("the enforce binary runs")
}

/// A profile without validators, so the answer's content does not decide the exit code.
fn free_profile(dir: &std::path::Path) -> std::path::PathBuf {
    let config = dir.join("enforce.yaml");
    std::fs::write(&config, "profiles:\n  free:\n    validators: []\n").unwrap();
    config
}

#[cfg(feature = "local")]
#[test]
fn enforce_run_asks_a_local_gguf_model() {
    let Some(model) = enforce_testkit::models::test_gguf() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = free_profile(dir.path());
    let audit = dir.path().join("audit.jsonl");
    let args = [
        "run",
        "--config",
        config.to_str().unwrap(),
        "--profile",
        "free",
        "--runner",
        "local",
        "--model",
        model.to_str().unwrap(),
        "--threads",
        "1",
        "--seed",
        "3",
        "--temperature",
        "0.5",
        "--max-tokens",
        "12",
        "--audit",
        audit.to_str().unwrap(),
        "Name three fruits.",
    ];
    let out = enforce_in(dir.path(), &args);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(!stdout.trim().is_empty(), "{stderr}");
    assert!(stderr.contains("runner local"), "{stderr}");
    let record: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(&audit).unwrap().trim()).unwrap();
    assert_eq!(record["runner"], "local");
    assert_eq!(record["model"], "SmolLM2-135M-Instruct.Q4_1.gguf");
    let usage = &record["outcome"]["attempts"][0]["usage"];
    let usage = if usage.is_null() {
        &record["attempts"][0]["usage"]
    } else {
        usage
    };
    let output_tokens = usage["output_tokens"].as_u64().expect("usage recorded");
    assert!((1..=12).contains(&output_tokens), "{record}");
    // The same seed gives the same answer, in a new process too.
    let again = enforce_in(dir.path(), &args);
    assert_eq!(text(&again.stdout), stdout);
}

#[cfg(feature = "local")]
#[test]
fn a_missing_model_file_is_a_runner_failure_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = free_profile(dir.path());
    let out = enforce_in(
        dir.path(),
        &[
            "run",
            "-c",
            config.to_str().unwrap(),
            "-p",
            "free",
            "--model",
            "missing.gguf",
            "hi",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("missing.gguf"), "{stderr}");
}

/// `decode: constrained` on the real test model: the profile's own city schema goes to
/// llguidance, so the first answer is JSON of that shape within its bounds (one thread, fixed
/// seed).
#[cfg(feature = "local")]
#[test]
fn decode_constrained_gives_city_json_on_the_test_model() {
    let Some(model) = enforce_testkit::models::test_gguf() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("enforce.yaml");
    std::fs::write(
        &config,
        r#"
validators:
  city_json:
    type: json
    bare: true
    schema:
      type: object
      properties:
        city: {type: string, maxLength: 24}
        population: {type: integer, minimum: 0, maximum: 100000000}
      required: [city, population]
      additionalProperties: false
profiles:
  city:
    validators: [city_json]
    max_retries: 0
    decode: constrained
"#,
    )
    .unwrap();
    let out = enforce_in(
        dir.path(),
        &[
            "run",
            "-c",
            config.to_str().unwrap(),
            "-p",
            "city",
            "--model",
            model.to_str().unwrap(),
            "--threads",
            "1",
            "--seed",
            "3",
            "--temperature",
            "0.7",
            "--max-tokens",
            "96",
            "Give the largest city of Japan and its population as JSON.",
        ],
    );
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let value: serde_json::Value =
        serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
    assert!(value["city"].is_string(), "{value}");
    let population = value["population"].as_u64();
    assert!(population.is_some_and(|p| p <= 100_000_000), "{value}");
    // llguidance takes the numeric bounds: no note that the decoder leaves them out.
    assert!(!stderr.contains("population.minimum"), "{stderr}");
}

#[cfg(not(feature = "local"))]
#[test]
fn without_the_feature_the_local_runner_says_how_to_build_it() {
    let dir = tempfile::tempdir().unwrap();
    let config = free_profile(dir.path());
    let out = enforce_in(
        dir.path(),
        &[
            "run",
            "-c",
            config.to_str().unwrap(),
            "--runner",
            "local",
            "--model",
            "m.gguf",
            "hi",
        ],
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("--features local"), "{stderr}");
}
