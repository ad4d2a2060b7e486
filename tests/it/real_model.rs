//! `enforce eval` with the local runner on the real test model (SmolLM2-135M-Instruct, skipped
//! when it is not installed: `cargo xtask models`): every arm on a slice of the JSON contract of
//! `examples/eval/`. The summary must agree with the audit records, no re-asking arm may pass a
//! case that one attempt and a repair (`none`) did not (the seed makes the first attempt the same
//! in every arm), and no delivered answer may be a cut fragment.

#[cfg(feature = "local")]
#[test]
fn eval_runs_every_arm_on_the_real_model_and_agrees_with_its_audit_records() {
    use crate::{repo, text, BIN};
    use serde_json::Value;
    use std::collections::BTreeMap;

    let Some(model) = enforce_testkit::models::test_gguf() else {
        return;
    };
    let dir = tempfile::tempdir().expect("temp dir");
    let all = std::fs::read_to_string(repo().join("examples/eval/city-json.jsonl"))
        .expect("the JSON contract's dataset");
    let slice: String = all
        .lines()
        .filter(|l| !l.trim().is_empty())
        .take(2)
        .map(|l| format!("{l}\n"))
        .collect();
    let dataset = dir.path().join("cities.jsonl");
    std::fs::write(&dataset, slice).expect("dataset written");
    let results = dir.path().join("results");
    let arms = [
        "none",
        "resample",
        "feedback",
        "feedback+abort",
        "repair-first",
    ];
    let out = std::process::Command::new(BIN)
        .arg("eval")
        .arg(&dataset)
        .arg("--config")
        .arg(repo().join("examples/eval/enforce.yaml"))
        .args(["--profile", "city_json", "--arms", &arms.join(",")])
        .args(["--seed", "7", "--temperature", "0.7", "--max-tokens", "48"])
        .args(["--runner", "local", "--threads", "1", "--model"])
        .arg(&model)
        .arg("-o")
        .arg(&results)
        .env_remove("ENFORCE_CONFIG")
        .env_remove("ENFORCE_MODEL")
        .output()
        .expect("the enforce binary runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}\n{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let summary: Value = serde_json::from_str(
        &std::fs::read_to_string(results.join("summary.json")).expect("summary.json"),
    )
    .expect("summary JSON");
    let records: Vec<Value> = std::fs::read_to_string(results.join("attempts.jsonl"))
        .expect("attempts.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("an audit record"))
        .collect();
    assert_eq!(records.len(), 2 * arms.len());

    let valid = |r: &Value| r["status"] == "passed" || r["status"] == "repaired";
    let mut by_case: BTreeMap<(String, String), bool> = BTreeMap::new();
    for arm in arms {
        let mine: Vec<&Value> = records.iter().filter(|r| r["eval"]["arm"] == arm).collect();
        let a = summary["arms"]
            .as_array()
            .and_then(|list| list.iter().find(|a| a["arm"] == arm))
            .unwrap_or_else(|| panic!("{arm} in the summary"));
        assert_eq!(a["trials"], mine.len() as u64, "{arm}");
        let k = mine.iter().filter(|r| valid(r)).count() as u64;
        assert_eq!(a["valid"]["k"], k, "{arm}");
        let sum = |field: &str| -> u64 {
            mine.iter()
                .map(|r| r["usage"][field].as_u64().unwrap_or(0))
                .sum()
        };
        assert_eq!(a["completion_tokens"], sum("output_tokens"), "{arm}");
        assert_eq!(a["prompt_tokens"], sum("input_tokens"), "{arm}");
        assert!(
            sum("output_tokens") > 0,
            "the local runner counts tokens: {arm}"
        );
        for r in &mine {
            // The last allowed attempt always runs to its end: what is delivered is whole.
            let attempts = r["attempts"].as_array().expect("attempts");
            let last = attempts.last().expect("one attempt at least");
            assert!(
                last["cut"].is_null(),
                "{arm}: the answer delivered was cut: {r}"
            );
            let case = r["eval"]["case"].as_str().expect("case").to_string();
            by_case.insert((arm.to_string(), case), valid(r));
        }
    }
    // The first attempt is the same in every arm: asking again never ends worse than not asking.
    for ((arm, case), &ok) in &by_case {
        if by_case.get(&("none".to_string(), case.clone())) == Some(&true) {
            assert!(
                ok,
                "{arm} lost {case}, which one attempt and a repair passed"
            );
        }
    }
}
