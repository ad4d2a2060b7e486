//! The harness's tests: arms read back, auto's learning runs, the part written.

use super::*;

#[test]
fn auto_decodes_under_the_schema_where_the_contract_has_one() {
    let json = CONTRACTS.iter().find(|c| c.json).expect("a JSON contract");
    let prose = CONTRACTS
        .iter()
        .find(|c| !c.json)
        .expect("a contract without a schema");
    assert_eq!(under_rules("auto", json), "auto+constrained");
    assert_eq!(under_rules("auto+constrained", json), "auto+constrained");
    assert_eq!(under_rules("auto", prose), "auto");
    assert_eq!(under_rules("feedback", json), "feedback");
}

fn args(dir: &Path) -> RealModelArgs {
    RealModelArgs {
        enforce_bin: "enforce".into(),
        gguf: dir.join("Tiny-Model.Q4.gguf"),
        work_dir: dir.to_path_buf(),
        out: dir.join("BENCHMARKS.md"),
        eval_dir: "examples/eval".into(),
        arms: "none,constrained".into(),
        escalate_gguf: None,
        contracts: None,
        seed: 42,
        train_seed: None,
        temperature: 0.7,
        max_tokens: None,
        threads: 1,
        concurrency: 2,
        retries: 2,
        no_peers: true,
        cases: None,
        reuse: true,
        records: None,
        part: None,
    }
}

/// A record of `arm` measured earlier by `command`.
fn measured_then(arm: &str, command: String) -> ArmRun {
    ArmRun {
        summary: ArmSummary {
            arm: arm.into(),
            ..ArmSummary::default()
        },
        command,
        wall_s: 1.0,
        measured: "then".into(),
        reused: false,
        stats: None,
    }
}

#[test]
fn contracts_are_chosen_by_profile_and_an_unknown_one_is_named() {
    let dir = std::env::temp_dir();
    let mut a = args(&dir);
    assert_eq!(chosen_contracts(&a).unwrap().len(), CONTRACTS.len());
    a.contracts = Some("code, city_json".into());
    let chosen: Vec<&str> = chosen_contracts(&a)
        .unwrap()
        .iter()
        .map(|c| c.profile)
        .collect();
    assert_eq!(chosen, ["code", "city_json"]);
    a.contracts = Some("poems".into());
    let e = chosen_contracts(&a).unwrap_err().to_string();
    assert!(e.contains("poems") && e.contains("city_json"), "{e}");
    assert_eq!(model_name(&a), "Tiny-Model.Q4");
}

#[test]
fn escalate_runs_only_with_a_larger_model_and_asks_it() {
    let dir = std::env::temp_dir().join(format!("real-model-esc-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut a = args(&dir);
    a.arms = "escalate,feedback+escalate".into();
    let code = chosen_contracts(&a).unwrap()[4];
    let run = eval_contract(&a, &dir, code).unwrap();
    assert!(run.arms.is_empty());
    assert_eq!(run.skipped.len(), 2, "{:?}", run.skipped);
    assert!(
        run.skipped[0].contains("no escalation model"),
        "{:?}",
        run.skipped
    );
    // With a larger model the arm runs, and its command names that model: a record of
    // that command is read back (`--reuse`), so nothing is run here.
    a.escalate_gguf = Some(dir.join("Larger.Q4.gguf"));
    a.arms = "escalate".into();
    a.reuse = true;
    let command = format!(
        "enforce eval examples/eval/code.jsonl --config examples/eval/enforce.yaml --profile code --arms escalate --seed 42 --temperature 0.7 --max-tokens 384 --concurrency 2 --runner local --model {} --threads 1 --escalate-model {} -o {}",
        a.gguf.display(),
        dir.join("Larger.Q4.gguf").display(),
        dir.join("real-model/Tiny-Model.Q4/code/escalate").display()
    );
    let record = dir.join("real-model/Tiny-Model.Q4/code");
    std::fs::create_dir_all(&record).unwrap();
    let earlier = measured_then("escalate", command);
    std::fs::write(
        record.join("escalate.json"),
        serde_json::to_vec(&earlier).unwrap(),
    )
    .unwrap();
    let run = eval_contract(&a, &dir, code).unwrap();
    assert!(run.skipped.is_empty(), "{:?}", run.skipped);
    assert!(
        run.arms[0].reused,
        "the command differs: {:?}",
        run.arms[0].command
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn records_go_where_told_and_a_part_is_written_beside_the_models_own() {
    let dir = std::env::temp_dir().join(format!("real-model-part-{}", std::process::id()));
    let records = dir.join("kept");
    let mut a = args(&dir);
    a.records = Some(records.clone());
    a.arms = "none".into();
    let city = chosen_contracts(&a).unwrap()[0];
    let command = format!(
        "enforce eval examples/eval/city-json.jsonl --config examples/eval/enforce.yaml --profile city_json --arms none --seed 42 --temperature 0.7 --max-tokens 256 --concurrency 2 --runner local --model {} --threads 1 -o {}",
        a.gguf.display(),
        dir.join("real-model/Tiny-Model.Q4/city_json/none").display()
    );
    let at = records.join("Tiny-Model.Q4/city_json");
    std::fs::create_dir_all(&at).unwrap();
    let earlier = measured_then("none", command);
    std::fs::write(at.join("none.json"), serde_json::to_vec(&earlier).unwrap()).unwrap();
    // Read back from the records directory, not from under the work dir.
    let run = eval_contract(&a, &dir, city).unwrap();
    assert!(run.arms[0].reused);

    a.part = Some("strategies".into());
    assert_eq!(part_key(&a), "Tiny-Model.Q4/strategies");
    let part = render::model_part(&a, &[run], &[], &[], "0", Default::default());
    assert!(part.contains("### Tiny-Model.Q4: strategies"), "{part}");
    assert!(part.contains("--part strategies"), "{part}");
    let own =
        "<!-- real-model:Tiny-Model.Q4:begin -->\nOWN\n<!-- real-model:Tiny-Model.Q4:end -->\n";
    let once = render::splice_model("# B\n", "Tiny-Model.Q4", own);
    let both = render::splice_model(&once, &part_key(&a), &part);
    assert!(
        both.contains("OWN") && both.contains("strategies"),
        "{both}"
    );
    assert!(part_name("two words").is_err() && part_name("a:b").is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// The record of `name` (`arm` run by `command`) written where `--reuse` reads it back.
fn record(at: &Path, name: &str, arm: &str, command: String, stats: Option<StrategyStats>) {
    let earlier = ArmRun {
        stats,
        ..measured_then(arm, command)
    };
    std::fs::create_dir_all(at).unwrap();
    std::fs::write(
        at.join(format!("{name}.json")),
        serde_json::to_vec(&earlier).unwrap(),
    )
    .unwrap();
}

/// The command the city contract's `arm` runs as with `seed`, for the test model.
fn city_command(a: &RealModelArgs, arm: &str, seed: u64) -> String {
    format!(
        "enforce eval examples/eval/city-json.jsonl --config examples/eval/enforce.yaml --profile city_json --arms {arm} --seed {seed} --temperature 0.7 --max-tokens 256 --concurrency 2 --runner local --model {} --threads 1",
        a.gguf.display()
    )
}

/// The record of the learning run of `arm` in `at`, with `stats`.
fn learning_record(a: &RealModelArgs, at: &Path, arm: &str, stats: Option<StrategyStats>) {
    let name = format!("learn-{arm}");
    let out = at.join(&name);
    let command = format!(
        "{} --stats {} -o {}",
        city_command(a, arm, 1042),
        out.join(LEARNED).display(),
        out.display()
    );
    record(at, &name, arm, command, stats);
}

#[test]
fn auto_learns_on_the_training_seeds_and_reads_what_they_measured() {
    use enforce_core::policy::Reask;
    use enforce_core::strategy::{StatsKey, Tally};
    let dir = std::env::temp_dir().join(format!("real-model-auto-{}", std::process::id()));
    let mut a = args(&dir);
    a.arms = "auto".into();
    let city = chosen_contracts(&a).unwrap()[0];
    let at = dir.join("real-model/Tiny-Model.Q4/city_json");
    let mut expected = StrategyStats::default();
    for (i, arm) in LEARNING_ARMS.iter().enumerate() {
        let mut stats = StrategyStats::default();
        let key = StatsKey {
            model: "Tiny-Model.Q4.gguf".into(),
            profile: "city_json".into(),
            code: "INVALID_JSON".into(),
            strategy: Reask::ALL[i],
        };
        let tally = Tally {
            attempts: 10 + i as u64,
            valid: i as u64,
            ..Tally::default()
        };
        stats.add(key, tally);
        expected.merge(&stats);
        learning_record(&a, &at, arm, Some(stats));
    }
    let learned = at.join("auto-stats.json");
    // On the JSON contract `auto` decodes under the schema: its command says so.
    let auto = format!(
        "{} --stats-from {} -o {}",
        city_command(&a, "auto+constrained", 42),
        learned.display(),
        at.join("auto").display()
    );
    record(&at, "auto", "auto", auto, None);
    // Everything is read back: nothing runs, and the learned statistics add up.
    let run = eval_contract(&a, &dir, city).unwrap();
    assert_eq!(run.learned.len(), LEARNING_ARMS.len());
    assert!(run.arms[0].reused, "{}", run.arms[0].command);
    let written = std::fs::read_to_string(&learned).unwrap();
    assert_eq!(StrategyStats::from_json(&written).unwrap(), expected);

    // A learning record without statistics cannot teach `auto`: a clear error.
    learning_record(&a, &at, "resample", None);
    let Err(e) = eval_contract(&a, &dir, city) else {
        panic!("a learning record without statistics was taken");
    };
    assert!(e.to_string().contains("has no statistics"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_the_first_arm_of_a_summary_is_read_so_another_builds_summary_reads() {
    // The shape of an earlier build's summary.json: pairs without the fields of today's.
    let older = r#"{"setup": {"dataset": "d.jsonl"}, "arms": [{"arm": "none", "valid": {"k": 3, "n": 4, "rate": 0.75, "low": 0.3, "high": 0.95}}], "issue_codes": [], "pairs": [{"a": "none", "b": "feedback", "p_value": 0.5}]}"#;
    let arm = first_arm(older).unwrap();
    assert_eq!((arm.arm.as_str(), arm.valid.rate.k), ("none", 3));
    assert!(first_arm(r#"{"arms": []}"#).is_err());
    assert!(first_arm("{}").is_err());
}

#[test]
fn an_arm_is_read_back_only_for_the_same_command() {
    let dir = std::env::temp_dir().join(format!("real-model-reuse-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("none.json");
    // A record written before the summary had its later fields: they read as defaults.
    let older = serde_json::json!({
        "summary": {"arm": "none", "valid": {"k": 3, "n": 4, "rate": 0.75, "low": 0.3, "high": 0.95}},
        "command": "enforce eval a --arms none",
        "wall_s": 3.0,
        "measured": "2026-12-02 04:00 UTC",
    });
    std::fs::write(&record, serde_json::to_vec(&older).unwrap()).unwrap();
    let back = read_back(&record, "enforce eval a --arms none").unwrap();
    assert_eq!(back.measured, "2026-12-02 04:00 UTC");
    assert_eq!(
        (back.summary.arm.as_str(), back.summary.valid.rate.k),
        ("none", 3)
    );
    assert_eq!(back.summary.escalated_attempts, 0);
    assert!(read_back(&record, "enforce eval a --arms none --seed 7").is_none());
    assert!(read_back(&dir.join("absent.json"), "x").is_none());
    let _ = std::fs::remove_dir_all(&dir);
}
