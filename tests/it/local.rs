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

/// `enforce run` of `profile` in `config` on the test model `model`: one thread, `seed`,
/// temperature 0.7, at most 96 tokens, then `rest` (flags and the prompt).
#[cfg(feature = "local")]
fn run_city(
    dir: &std::path::Path,
    (config, profile): (&std::path::Path, &str),
    model: &std::path::Path,
    seed: &str,
    rest: &[&str],
) -> Output {
    let mut args = vec![
        "run",
        "-c",
        config.to_str().unwrap(),
        "-p",
        profile,
        "--runner",
        "local",
        "--model",
        model.to_str().unwrap(),
        "--threads",
        "1",
        "--seed",
        seed,
        "--temperature",
        "0.7",
        "--max-tokens",
        "96",
    ];
    args.extend_from_slice(rest);
    enforce_in(dir, &args)
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
    let out = run_city(
        dir.path(),
        (&config, "city"),
        &model,
        "3",
        &["Give the largest city of Japan and its population as JSON."],
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

/// The re-ask rung `constrained` on the real test model: the city JSON contract of
/// `examples/eval/` with `reask: [constrained]`. The first answer is free (and fails on these
/// cases: prose, or JSON cut at the token limit, which gets a free re-ask with more room
/// first); the constrained re-ask gives valid JSON.
#[cfg(feature = "local")]
#[test]
fn the_constrained_rung_repairs_free_answers_on_the_test_model() {
    use crate::repo;
    use serde_json::Value;
    let Some(model) = enforce_testkit::models::test_gguf() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let example = std::fs::read_to_string(repo().join("examples/eval/enforce.yaml")).unwrap();
    let mut yaml: serde_yaml_ng::Value = serde_yaml_ng::from_str(&example).unwrap();
    yaml["profiles"]["city_json"]["reask"] = serde_yaml_ng::from_str("[constrained]").unwrap();
    let config = dir.path().join("enforce.yaml");
    std::fs::write(&config, serde_yaml_ng::to_string(&yaml).unwrap()).unwrap();
    let cases: Vec<Value> = std::fs::read_to_string(repo().join("examples/eval/city-json.jsonl"))
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|case: &Value| {
            ["city-paris", "city-toronto", "city-vienna"].contains(&case["id"].as_str().unwrap())
        })
        .collect();
    assert_eq!(cases.len(), 3);
    for case in &cases {
        let audit = dir
            .path()
            .join(format!("{}.jsonl", case["id"].as_str().unwrap()));
        let prompt = case["prompt"].as_str().unwrap();
        let audit_flag = ["--audit", audit.to_str().unwrap(), prompt];
        let out = run_city(dir.path(), (&config, "city_json"), &model, "7", &audit_flag);
        let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
        assert_eq!(out.status.code(), Some(0), "{case}\n{stdout}\n{stderr}");
        let record: Value =
            serde_json::from_str(std::fs::read_to_string(&audit).unwrap().trim()).unwrap();
        assert_eq!(record["status"], "passed", "{record}");
        assert_eq!(record["warnings"], serde_json::json!([]), "{record}");
        let attempts = record["attempts"].as_array().unwrap();
        let (last, before) = attempts.split_last().unwrap();
        assert!(!before.is_empty(), "the free first answer fails: {record}");
        // Every free answer failed, and only a truncated one got a re-ask before the rung.
        for (i, attempt) in before.iter().enumerate() {
            assert!(attempt["reask"].is_null(), "{record}");
            assert!(
                !attempt["issues"].as_array().unwrap().is_empty(),
                "{record}"
            );
            let after_truncation = i > 0 && before[i - 1]["finish_reason"] == "length";
            assert_eq!(
                !attempt["more_room"].is_null(),
                after_truncation,
                "{record}"
            );
        }
        assert_eq!(last["reask"], "constrained", "{record}");
        let answer: Value = serde_json::from_str(stdout.trim())
            .unwrap_or_else(|e| panic!("not JSON ({e}): {stdout}"));
        assert!(
            answer["name"].as_str().is_some_and(|n| !n.is_empty()),
            "{answer}"
        );
        assert!(answer["population"].is_u64(), "{answer}");
    }
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
