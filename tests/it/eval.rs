//! End-to-end tests of `enforce eval` against the mock OpenAI-compatible server (answers that
//! depend only on the conversation, so every arm sees the same first answer) and the command
//! runner.

use crate::{repo, text, BIN};
use enforce_testkit::{MockOpenAi, MockScript, Then};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const CONFIG: &str = r#"
validators:
  ok_json:
    type: json
    schema: {type: object, required: [ok]}
profiles:
  j:
    validators: [ok_json]
    max_retries: 2
"#;

/// Two of six cases answer valid JSON at once (the mock echoes the prompt); the others only
/// after feedback.
const DATASET: &str = r#"{"prompt": "{\"ok\": 1}"}
{"id": "two", "prompt": "{\"ok\": 2}"}
{"prompt": "nope 3"}
{"prompt": "{\"x\": 4}"}
{"prompt": "nope 5", "context": {"n": 5}}
{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "nope 6"}]}
"#;

fn mock_script() -> MockScript {
    MockScript::new().then(Then::FailFirst {
        invalid: "{{last_user}}".into(),
        valid: "{\"ok\": true}".into(),
        marker: "Fix these".into(),
    })
}

fn enforce(args: &[String]) -> Output {
    Command::new(BIN)
        .args(args)
        .env_remove("ENFORCE_CONFIG")
        .env_remove("ENFORCE_MODEL")
        .env_remove("ENFORCE_BASE_URL")
        .output()
        .expect("the enforce binary runs")
}

/// Runs the binary off the async runtime, so the mock server keeps serving meanwhile.
async fn enforce_async(args: Vec<String>) -> Output {
    tokio::task::spawn_blocking(move || enforce(&args))
        .await
        .expect("the blocking task finishes")
}

struct Setup {
    dir: tempfile::TempDir,
}

impl Setup {
    fn new() -> Setup {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("enforce.yaml"), CONFIG).expect("config");
        std::fs::write(dir.path().join("cases.jsonl"), DATASET).expect("dataset");
        Setup { dir }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn args(&self, url: &str, out: &str, extra: &[&str]) -> Vec<String> {
        let mut args: Vec<String> = [
            "eval",
            self.path("cases.jsonl").to_str().expect("utf-8"),
            "-c",
            self.path("enforce.yaml").to_str().expect("utf-8"),
            "-p",
            "j",
            "--runner",
            "openai",
            "--base-url",
            url,
            "--model",
            "m",
            "--seed",
            "40",
            "--temperature",
            "0.7",
            "--max-tokens",
            "64",
            "-o",
            self.path(out).to_str().expect("utf-8"),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        args.extend(extra.iter().map(|s| s.to_string()));
        args
    }
}

fn records(path: &Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .expect("attempts.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("each line is JSON"))
        .collect()
}

fn summary(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("summary.json")).expect("summary.json");
    serde_json::from_str(&text).expect("JSON")
}

/// The summary without wall times and provenance (they differ from run to run: the mock's
/// port is in the base URL).
fn without_times(mut summary: Value) -> Value {
    summary
        .as_object_mut()
        .expect("an object")
        .remove("provenance");
    for arm in summary["arms"].as_array_mut().expect("arms") {
        arm.as_object_mut()
            .expect("object")
            .retain(|k, _| !k.starts_with("wall_ms"));
    }
    summary
}

fn arm<'a>(summary: &'a Value, name: &str) -> &'a Value {
    summary["arms"]
        .as_array()
        .expect("arms")
        .iter()
        .find(|a| a["arm"] == name)
        .expect("the arm is there")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eval_writes_every_output_and_its_numbers_agree_with_the_audit_records() {
    let setup = Setup::new();
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let out = enforce_async(setup.args(
        &mock.url(),
        "results",
        &[
            "--arms",
            "none,feedback,feedback+abort",
            "--repeats",
            "2",
            "--concurrency",
            "3",
        ],
    ))
    .await;
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for words in [
        "Valid answers per arm",
        "feedback+abort",
        "Spend per valid answer",
        "INVALID_JSON",
    ] {
        assert!(stdout.contains(words), "{words} in\n{stdout}");
    }
    let results = setup.path("results");
    let records = records(&results.join("attempts.jsonl"));
    assert_eq!(records.len(), 3 * 6 * 2);

    // Every request carried the seed of its (case, repeat) and the sampling options; the seed
    // is the same in every arm.
    let mut seeds: BTreeMap<(String, u64), BTreeSet<u64>> = BTreeMap::new();
    for r in &records {
        let e = &r["eval"];
        let key = (
            e["case"].as_str().expect("case").to_string(),
            e["repeat"].as_u64().expect("repeat"),
        );
        seeds
            .entry(key)
            .or_default()
            .insert(e["seed"].as_u64().expect("seed"));
        assert_eq!(r["profile"], "j");
        assert_eq!(r["model"], "m");
    }
    assert_eq!(seeds.len(), 12);
    assert!(seeds.values().all(|s| s.len() == 1), "{seeds:?}");
    let all: BTreeSet<u64> = seeds.values().flatten().copied().collect();
    assert_eq!(all, (40..52).collect());
    let sent = mock.chat_requests();
    assert!(sent
        .iter()
        .all(|r| r.body["temperature"] == 0.7 && r.body["max_tokens"] == 64));
    let sent_seeds: BTreeSet<u64> = sent
        .iter()
        .filter_map(|r| r.body["seed"].as_u64())
        .collect();
    assert!(sent_seeds.is_superset(&all), "{sent_seeds:?}");

    // The summary agrees with the records, arm by arm.
    let s = summary(&results);
    for name in ["none", "feedback", "feedback+abort"] {
        let mine: Vec<&Value> = records
            .iter()
            .filter(|r| r["eval"]["arm"] == name)
            .collect();
        let a = arm(&s, name);
        assert_eq!(a["trials"], mine.len() as u64);
        for status in ["passed", "repaired", "unresolved", "aborted", "unavailable"] {
            let n = mine.iter().filter(|r| r["status"] == status).count() as u64;
            assert_eq!(a["outcomes"][status], n, "{name} {status}");
        }
        let valid = mine
            .iter()
            .filter(|r| r["status"] == "passed" || r["status"] == "repaired")
            .count() as u64;
        assert_eq!(a["valid"]["k"], valid, "{name}");
        let sum = |field: &str| -> u64 {
            mine.iter()
                .map(|r| r["usage"][field].as_u64().unwrap_or(0))
                .sum()
        };
        assert_eq!(a["prompt_tokens"], sum("input_tokens"), "{name}");
        assert_eq!(a["completion_tokens"], sum("output_tokens"), "{name}");
        assert!(sum("output_tokens") > 0, "the mock reports usage");
        let attempts: usize = mine
            .iter()
            .map(|r| r["attempts"].as_array().map_or(0, Vec::len))
            .sum();
        assert_eq!(a["attempts"], attempts as u64);
        let per_valid = a["completion_tokens_per_valid"]
            .as_f64()
            .expect("some valid");
        assert!((per_valid - sum("output_tokens") as f64 / valid as f64).abs() < 1e-9);
    }
    // Two of six cases pass at once; feedback fixes the rest.
    assert_eq!(arm(&s, "none")["valid"]["k"], 4);
    assert_eq!(arm(&s, "none")["first_attempt_passed"]["k"], 4);
    assert_eq!(arm(&s, "feedback")["valid"]["k"], 12);
    assert_eq!(arm(&s, "feedback")["valid_after_attempts"][0]["k"], 4);
    assert_eq!(arm(&s, "feedback")["valid_after_attempts"][1]["k"], 12);
    let pair = &s["pairs"][0];
    assert_eq!(
        (pair["a"].as_str(), pair["b"].as_str()),
        (Some("none"), Some("feedback"))
    );
    assert_eq!(
        (pair["only_a"].as_u64(), pair["only_b"].as_u64()),
        (Some(0), Some(8))
    );
    let code = s["issue_codes"]
        .as_array()
        .expect("codes")
        .iter()
        .find(|c| c["code"] == "INVALID_JSON")
        .expect("INVALID_JSON counted");
    assert_eq!(code["arms"][0]["first_attempt"], 6, "{code}");
    assert_eq!(code["arms"][0]["fixed"], 0, "{code}");
    assert_eq!(code["arms"][1]["fixed"], 6, "{code}");

    // JUnit: a test case per trial, a failure per answer that is not valid.
    let junit = std::fs::read_to_string(results.join("junit.xml")).expect("junit.xml");
    assert_eq!(junit.matches("<testcase ").count(), 36);
    assert_eq!(junit.matches("<failure ").count(), 36 - 4 - 12 - 12);
    assert!(junit.contains("INVALID_JSON"));

    // One self-contained page with charts.
    let page = std::fs::read_to_string(results.join("report.html")).expect("report.html");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.matches("<svg").count() >= 4);
    assert!(!page.contains("<script") && !page.contains("<link"));

    // `enforce report` reads the attempts.
    let report = enforce(&[
        "report".into(),
        "--format".into(),
        "json".into(),
        results
            .join("attempts.jsonl")
            .to_str()
            .expect("utf-8")
            .into(),
    ]);
    assert!(report.status.success(), "{}", text(&report.stderr));
    let r: Value = serde_json::from_slice(&report.stdout).expect("JSON");
    assert_eq!(r["input"]["records"], 36);
    assert_eq!(r["input"]["invalid"], 0);
    let passed: u64 = ["none", "feedback", "feedback+abort"]
        .iter()
        .map(|a| arm(&s, a)["outcomes"]["passed"].as_u64().expect("n"))
        .sum();
    assert_eq!(r["outcomes"]["passed"], passed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_eval_resumes_and_runs_only_what_is_missing() {
    let setup = Setup::new();
    let arms = ["--arms", "none,feedback", "--repeats", "2"];
    let full_mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let full = enforce_async(setup.args(&full_mock.url(), "full", &arms)).await;
    assert_eq!(full.status.code(), Some(0), "{}", text(&full.stderr));

    // The same eval, cut off: half of its lines, then a torn one.
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let cut = enforce_async(setup.args(&mock.url(), "cut", &arms)).await;
    assert_eq!(cut.status.code(), Some(0), "{}", text(&cut.stderr));
    let attempts = setup.path("cut").join("attempts.jsonl");
    let text_before = std::fs::read_to_string(&attempts).expect("attempts");
    let lines: Vec<&str> = text_before.lines().collect();
    let keep = lines.len() / 2;
    let torn = &lines[keep][..lines[keep].len() / 2];
    std::fs::write(&attempts, format!("{}\n{torn}", lines[..keep].join("\n"))).expect("cut");
    let kept: Vec<Value> = lines[..keep]
        .iter()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let key = |r: &Value| {
        (
            r["eval"]["arm"].as_str().expect("arm").to_string(),
            r["eval"]["case"].as_str().expect("case").to_string(),
            r["eval"]["repeat"].as_u64().expect("repeat"),
        )
    };
    let kept_keys: BTreeSet<_> = kept.iter().map(key).collect();
    let missing: Vec<Value> = records(&setup.path("full").join("attempts.jsonl"))
        .into_iter()
        .filter(|r| !kept_keys.contains(&key(r)))
        .collect();
    assert_eq!(missing.len(), lines.len() - keep);
    let expected_calls: usize = missing
        .iter()
        .map(|r| r["attempts"].as_array().map_or(0, Vec::len))
        .sum();

    let again_mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let again = enforce_async(setup.args(&again_mock.url(), "cut", &arms)).await;
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert!(
        text(&again.stderr).contains("resuming"),
        "{}",
        text(&again.stderr)
    );
    assert_eq!(again_mock.chat_requests().len(), expected_calls);
    let resumed = records(&attempts);
    assert_eq!(
        resumed.len(),
        lines.len(),
        "the torn line is gone, every trial once"
    );
    let resumed_keys: BTreeSet<_> = resumed.iter().map(key).collect();
    assert_eq!(resumed_keys.len(), lines.len());
    assert_eq!(
        without_times(summary(&setup.path("cut"))),
        without_times(summary(&setup.path("full")))
    );
}

/// `junit.xml` without its `time` attributes (wall clock, different in every run).
fn without_junit_times(xml: &str) -> String {
    let mut out = String::new();
    let mut rest = xml;
    while let Some(start) = rest.find(" time=\"") {
        out.push_str(&rest[..start]);
        let after = &rest[start + " time=\"".len()..];
        rest = after.find('"').map_or("", |end| &after[end + 1..]);
    }
    out.push_str(rest);
    out
}

/// The chat requests a mock received, as sorted JSON texts (the order depends on timing).
fn sorted_bodies(mock: &MockOpenAi) -> Vec<String> {
    let mut bodies: Vec<String> = mock
        .chat_requests()
        .iter()
        .map(|r| r.body.to_string())
        .collect();
    bodies.sort();
    bodies
}

const SHARDED: [&str; 4] = ["--arms", "none,feedback", "--repeats", "2"];

/// Runs part `index` of 3 into `shard-<index>`.
async fn run_shard(setup: &Setup, url: &str, index: u32, extra: &[&str]) {
    let shard = format!("{index}/3");
    let mut args: Vec<&str> = SHARDED.to_vec();
    args.extend(["--shard", shard.as_str()]);
    args.extend(extra);
    let out = enforce_async(setup.args(url, &format!("shard-{index}"), &args)).await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

fn merge_cmd(setup: &Setup, parts: &[&str], out: &str) -> Output {
    let mut args = vec!["eval".to_string(), "--merge".to_string()];
    args.extend(parts.iter().map(|p| setup.path(p).display().to_string()));
    args.extend(["-o".to_string(), setup.path(out).display().to_string()]);
    enforce(&args)
}

/// Three shards, merged, give what one run gives: the same requests to the model (seeds
/// included), and the same summary.json (statistics included), junit.xml and records. Wall
/// times are left out of the comparison (`wall_ms*` in the summary, `time` in the JUnit):
/// they are the clock's, different in any two runs. Nothing else is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_and_merged_equals_one_run() {
    let setup = Setup::new();
    let whole_mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let whole_stats = setup.path("whole-stats.json");
    let mut whole_args = SHARDED.to_vec();
    whole_args.extend(["--stats", whole_stats.to_str().expect("utf-8")]);
    let whole = enforce_async(setup.args(&whole_mock.url(), "whole", &whole_args)).await;
    assert_eq!(whole.status.code(), Some(0), "{}", text(&whole.stderr));
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    for index in 0..3 {
        run_shard(&setup, &mock.url(), index, &[]).await;
    }
    assert_eq!(sorted_bodies(&mock), sorted_bodies(&whole_mock));
    // Round robin: shard 1/3 holds the 2nd and 5th case, every arm and repeat.
    let part: BTreeSet<String> = records(&setup.path("shard-1").join("attempts.jsonl"))
        .iter()
        .map(|r| r["eval"]["case"].as_str().expect("case").to_string())
        .collect();
    assert_eq!(
        part,
        BTreeSet::from(["two".to_string(), "case-5".to_string()])
    );
    assert_eq!(
        summary(&setup.path("shard-1"))["setup"]["shard"]["index"],
        1
    );

    let merged_stats = setup.path("merged-stats.json");
    let mut merge_args = vec!["eval".to_string(), "--merge".to_string()];
    for part in ["shard-2", "shard-0", "shard-1"] {
        merge_args.push(setup.path(part).display().to_string());
    }
    merge_args.extend(["-o".to_string(), setup.path("merged").display().to_string()]);
    merge_args.extend(["--stats".to_string(), merged_stats.display().to_string()]);
    let merged = enforce(&merge_args);
    assert_eq!(merged.status.code(), Some(0), "{}", text(&merged.stderr));
    // The merged trials measure what the whole run's measured (time aside: the clock's).
    let stats_of = |path: &Path| -> Value {
        let text = std::fs::read_to_string(path).expect("a statistics file");
        let mut stats: Value = serde_json::from_str(&text).expect("JSON");
        for row in stats["rows"].as_array_mut().expect("rows") {
            row.as_object_mut().expect("a row").remove("runner_us");
        }
        stats
    };
    let stats = stats_of(&whole_stats);
    assert_eq!(stats_of(&merged_stats), stats);
    let feedback_reasks = records(&setup.path("whole").join("attempts.jsonl"))
        .iter()
        .flat_map(|r| r["attempts"].as_array().cloned().unwrap_or_default())
        .filter(|a| a["reask"] == "feedback")
        .count() as u64;
    let counted: u64 = stats["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|row| row["strategy"] == "feedback" && row["model"] == "m")
        .map(|row| row["attempts"].as_u64().expect("attempts"))
        .sum();
    assert!(feedback_reasks > 0);
    assert_eq!(counted, feedback_reasks);
    assert!(text(&merged.stdout).contains("Valid answers per arm"));
    let (whole_dir, merged_dir) = (setup.path("whole"), setup.path("merged"));
    let merged_summary = summary(&merged_dir);
    assert_eq!(
        without_times(merged_summary.clone()),
        without_times(summary(&whole_dir))
    );
    // The statistics are there to compare: intervals and a sign test on discordant pairs.
    assert!(
        merged_summary["arms"][0]["valid"]["high"]
            .as_f64()
            .expect("an interval")
            < 1.0
    );
    assert_eq!(merged_summary["pairs"][0]["only_b"], 8);
    let junit = |dir: &Path| {
        without_junit_times(&std::fs::read_to_string(dir.join("junit.xml")).expect("junit"))
    };
    assert_eq!(junit(&merged_dir), junit(&whole_dir));
    assert_eq!(junit(&merged_dir).matches("<testcase ").count(), 24);
    let outcomes = |dir: &Path| -> BTreeMap<String, Value> {
        records(&dir.join("attempts.jsonl"))
            .into_iter()
            .map(|r| (r["eval"].to_string(), r["status"].clone()))
            .collect()
    };
    assert_eq!(outcomes(&merged_dir), outcomes(&whole_dir));
    let answers = |dir: &Path| {
        std::fs::read_to_string(dir.join("answers.jsonl"))
            .expect("answers")
            .lines()
            .count()
    };
    assert_eq!(answers(&merged_dir), answers(&whole_dir));
    let page = std::fs::read_to_string(merged_dir.join("report.html")).expect("report.html");
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert_eq!(
        merged_summary["provenance"]["machines"][0]["os"],
        std::env::consts::OS
    );

    // The gates apply to a merge: the whole eval's rates, and its arms.
    let gated = |out: &str, gate: &str| {
        let mut args: Vec<String> = ["eval", "--merge"].iter().map(|s| s.to_string()).collect();
        args.extend((0..3).map(|i| setup.path(&format!("shard-{i}")).display().to_string()));
        args.extend(["-o".into(), setup.path(out).display().to_string()]);
        args.extend(["--fail-under".into(), gate.into()]);
        enforce(&args)
    };
    let missed = gated("merged-gated", "none=50%");
    assert_eq!(missed.status.code(), Some(3), "{}", text(&missed.stderr));
    assert!(text(&missed.stderr).contains("arm `none`: valid rate 33.3% (4 of 12)"));
    let unknown = gated("merged-unknown", "resample=0.5");
    assert_eq!(unknown.status.code(), Some(2), "{}", text(&unknown.stderr));
}

/// A merge names what keeps the parts from making one eval, and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_refuses_parts_that_are_not_one_whole_eval() {
    let setup = Setup::new();
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    for index in 0..3 {
        run_shard(&setup, &mock.url(), index, &[]).await;
    }
    // Part 2 of another eval: one repeat, not two.
    let out = enforce_async(setup.args(
        &mock.url(),
        "2-other",
        &[
            "--arms",
            "none,feedback",
            "--repeats",
            "1",
            "--shard",
            "2/3",
        ],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    // Part 1, stopped early: three of its eight records.
    let early = setup.path("shard-early");
    std::fs::create_dir_all(&early).expect("dir");
    for file in ["eval.json", "answers.jsonl"] {
        std::fs::copy(setup.path("shard-1").join(file), early.join(file)).expect("copy");
    }
    let lines: Vec<String> = std::fs::read_to_string(setup.path("shard-1").join("attempts.jsonl"))
        .expect("attempts")
        .lines()
        .take(3)
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(early.join("attempts.jsonl"), lines.concat()).expect("write");

    for (parts, out, words) in [
        (&["shard-0", "shard-1"][..], "m1", "shard 2/3 missing"),
        (
            &["shard-0", "shard-1", "shard-1"][..],
            "m2",
            "shard 1/3 is given twice",
        ),
        (
            &["shard-0", "shard-1", "2-other"][..],
            "m3",
            "not parts of one eval: they differ in setup.repeats (2 vs 1)",
        ),
        (
            &["shard-0", "shard-early", "shard-2"][..],
            "m4",
            "has 3 of its 8 trials",
        ),
        (
            &["shard-0", "shard-1", "shard-2"][..],
            "shard-0",
            "is one of the parts",
        ),
        (&["shard-0", "nowhere"][..], "m5", "eval.json"),
    ] {
        let merged = merge_cmd(&setup, parts, out);
        let stderr = text(&merged.stderr);
        assert_eq!(merged.status.code(), Some(2), "{parts:?}: {stderr}");
        assert!(stderr.contains(words), "{words} in {stderr}");
        assert!(!setup.path(out).join("summary.json").exists() || out == "shard-0");
    }
    // Two parts cannot share a directory.
    let shared = enforce_async(setup.args(
        &mock.url(),
        "shard-0",
        &[
            "--arms",
            "none,feedback",
            "--repeats",
            "2",
            "--shard",
            "1/3",
        ],
    ))
    .await;
    let stderr = text(&shared.stderr);
    assert_eq!(shared.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds shard 0/3 of this eval"), "{stderr}");
    // A whole run's directory is a part too: 0/1.
    let merged = merge_cmd(&setup, &["shard-0", "shard-1", "shard-2"], "whole");
    assert_eq!(merged.status.code(), Some(0), "{}", text(&merged.stderr));
    let again = merge_cmd(&setup, &["whole"], "again");
    assert_eq!(again.status.code(), Some(0), "{}", text(&again.stderr));
    assert_eq!(
        without_times(summary(&setup.path("again"))),
        without_times(summary(&setup.path("whole")))
    );
}

#[test]
fn an_impossible_shard_is_a_usage_error() {
    let setup = Setup::new();
    for (shard, words) in [
        ("3/2", "counted from 0"),
        ("0/0", "at least 1"),
        ("junk", "expected I/N"),
    ] {
        let args = setup.args("http://127.0.0.1:9", "out", &["--shard", shard]);
        let out = enforce(&args);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{shard}: {stderr}");
        assert!(stderr.contains(words), "{words} in {stderr}");
    }
    let both = enforce(&setup.args("http://127.0.0.1:9", "out", &["--merge", "a"]));
    assert_eq!(both.status.code(), Some(2), "a dataset and --merge");
}

fn eval_cmd(args: &[&str]) -> Output {
    let args: Vec<String> = std::iter::once("eval")
        .chain(args.iter().copied())
        .map(str::to_string)
        .collect();
    enforce(&args)
}

#[test]
fn bad_input_is_a_clear_usage_error() {
    let setup = Setup::new();
    let config = setup.path("enforce.yaml");
    let config = config.to_str().expect("utf-8");
    let cases = setup.path("cases.jsonl");
    let cases = cases.to_str().expect("utf-8");
    std::fs::write(setup.path("empty.jsonl"), "\n\n").expect("write");
    std::fs::write(
        setup.path("bad.jsonl"),
        "{\"prompt\": \"a\"}\n{\"prompt\": 3}\n",
    )
    .expect("write");
    std::fs::write(setup.path("file"), "").expect("write");
    let out_dir = setup.path("out");
    let out_dir = out_dir.to_str().expect("utf-8");
    let unwritable = setup.path("file").join("sub");
    let unwritable = unwritable.to_str().expect("utf-8");
    let runner = ["--runner", "command", "--command", "cat"];
    let cases_for = |dataset: &str, profile: &str, arms: &str, out: &str| -> Vec<String> {
        let mut v: Vec<String> = [
            dataset, "-c", config, "-p", profile, "--arms", arms, "-o", out,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        v.extend(runner.iter().map(|s| s.to_string()));
        v
    };
    let empty = setup.path("empty.jsonl");
    let bad = setup.path("bad.jsonl");
    let missing_stats = setup.path("missing-stats.json").display().to_string();
    let bad_stats = setup.path("bad-stats.json").display().to_string();
    std::fs::write(&bad_stats, "{\"version\": 99, \"rows\": []}").expect("write");
    let missing = setup.path("missing.jsonl");
    for (args, words) in [
        (
            cases_for(missing.to_str().expect("utf-8"), "j", "none", out_dir),
            "cannot read the dataset",
        ),
        (
            cases_for(empty.to_str().expect("utf-8"), "j", "none", out_dir),
            "has no cases",
        ),
        (
            cases_for(bad.to_str().expect("utf-8"), "j", "none", out_dir),
            "bad.jsonl:2:",
        ),
        (
            cases_for(cases, "nope", "none", out_dir),
            "no profile named `nope`",
        ),
        (
            cases_for(cases, "j", "none,feedbak", out_dir),
            "unknown word `feedbak`",
        ),
        (
            cases_for(cases, "j", "none", unwritable),
            "cannot create the output directory",
        ),
        (
            cases_for(cases, "j", "none,auto", out_dir),
            "--stats-from FILE",
        ),
        (
            [
                cases_for(cases, "j", "none,feedback", out_dir),
                vec!["--split".into(), "1/2".into()],
            ]
            .concat(),
            "give --arms with `auto` and at least one other arm",
        ),
        (
            [
                cases_for(cases, "j", "auto", out_dir),
                vec!["--stats-from".into(), missing_stats.clone()],
            ]
            .concat(),
            "no such file",
        ),
        (
            [
                cases_for(cases, "j", "none", out_dir),
                vec!["--stats".into(), bad_stats.clone()],
            ]
            .concat(),
            "statistics file version 99",
        ),
    ] {
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = eval_cmd(&argv);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{argv:?}: {stderr}");
        assert!(stderr.contains(words), "{words} in {stderr}");
        assert!(stderr.starts_with("enforce eval: "), "{stderr}");
    }

    let help = eval_cmd(&["--help"]);
    let help = text(&help.stdout);
    for words in [
        "--arms",
        "repair-first",
        "fresh",
        "resample",
        "attempts.jsonl",
        "summary.json",
        "junit.xml",
        "report.html",
        "--concurrency",
        "--seed",
        "--runner",
        "--base-url",
        "--temperature",
        "--max-tokens",
        "--shard",
        "JOB_COMPLETION_INDEX",
        "--merge",
        "eval.json",
        "--stats",
        "--stats-from",
        "reask: auto",
        "--split",
        "Example",
        "enforce eval examples/eval/",
    ] {
        assert!(help.contains(words), "{words} in --help:\n{help}");
    }
}

/// The ADR every case of `examples/eval/adr.jsonl` asks for, as the `adr` profile wants it.
const GOOD_ADR: &str = "---\nadr_id: ADR-0042\ntitle: Keep sessions in Redis\nstatus: Proposed\n---\n\n## Context\nLogins are lost on restarts.\n\n## Decision\nSessions live in Redis.\n\n## Acceptance Criteria\n- [ ] a restart keeps users logged in\n- [ ] any server serves any user\n- [ ] sessions expire after 30 minutes\n\n<!-- STEP: generate -->\n";

/// What the command runner answers an example dataset's cases with.
enum GoodAnswer {
    /// The same answer to every case.
    Fixed(&'static str),
    /// The answer of a command that reads the case's prompt.
    Command(String),
}

/// Every example dataset loads with its profile, and an answer meeting the contract passes it
/// (no model: the command runner prints a fixed answer, or for the code contract the reference
/// solution of the function the prompt names). So every code case's asserts hold for a correct
/// function, reaching the checker through the case's context.
#[test]
fn every_example_dataset_and_profile_loads_and_a_good_answer_passes() {
    use GoodAnswer::{Command, Fixed};
    let examples = repo().join("examples/eval");
    let dir = tempfile::tempdir().expect("temp dir");
    let reference = repo().join("tests/fixtures/eval/reference_answer.py");
    let good = [
        ("city-json.jsonl", "city_json", 20, Fixed("{\"name\": \"Paris\", \"country\": \"France\", \"population\": 2100000}")),
        ("sections.jsonl", "sections", 20, Fixed("## Summary\nWater matters.\n\n## Details\nDrink it.\n\n## Next steps\nRefill the glass.")),
        ("python.jsonl", "python", 20, Fixed("```python\ndef add(a, b):\n    return a + b\n```")),
        ("step.yaml", "step", 20, Fixed("The sky is blue.\n<!-- STEP: done -->")),
        ("code.jsonl", "code", 30, Command(format!("python3 '{}'", reference.display()))),
        ("adr.jsonl", "adr", 20, Fixed(GOOD_ADR)),
    ];
    let mut seen = BTreeSet::new();
    for (dataset, profile, at_least, answer) in good {
        seen.insert(dataset.to_string());
        let out_dir = dir.path().join(profile);
        let command = match answer {
            Fixed(answer) => {
                let answer_file = dir.path().join(format!("{profile}.txt"));
                std::fs::write(&answer_file, answer).expect("answer");
                format!("cat >/dev/null; cat '{}'", answer_file.display())
            }
            Command(command) => command,
        };
        let out = eval_cmd(&[
            examples.join(dataset).to_str().expect("utf-8"),
            "-c",
            examples.join("enforce.yaml").to_str().expect("utf-8"),
            "-p",
            profile,
            "--arms",
            "none",
            "--concurrency",
            "4",
            "--runner",
            "command",
            "--command",
            &command,
            "-o",
            out_dir.to_str().expect("utf-8"),
        ]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{dataset}: {}",
            text(&out.stderr)
        );
        let s = summary(&out_dir);
        let none = arm(&s, "none");
        let n = none["trials"].as_u64().expect("trials");
        assert!(n >= at_least, "{dataset} has {n} cases");
        assert_eq!(none["first_attempt_passed"]["k"], n, "{dataset}: {s}");
    }
    // No dataset left untested.
    let present: BTreeSet<String> = std::fs::read_dir(&examples)
        .expect("examples/eval")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n != "enforce.yaml" && (n.ends_with(".jsonl") || n.ends_with(".yaml")))
        .collect();
    assert_eq!(present, seen);
}

/// The arm `constrained` sends the profile's schema as a `json_schema` response format (not
/// strict: the schema leaves extra keys open, which OpenAI's strict mode refuses), says so
/// once, and records the note in that arm's audit warnings; the other arm sends none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_constrained_arm_sends_the_profiles_schema_to_the_runner() {
    let setup = Setup::new();
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let out = enforce_async(setup.args(
        &mock.url(),
        "constrained",
        &["--arms", "none,none+constrained"],
    ))
    .await;
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        stderr.matches("strict mode").count(),
        1,
        "the note is said once: {stderr}"
    );
    let formats: Vec<Value> = mock
        .chat_requests()
        .iter()
        .map(|r| r.body["response_format"].clone())
        .collect();
    let constrained: Vec<&Value> = formats.iter().filter(|f| !f.is_null()).collect();
    assert_eq!(formats.len(), 12, "6 cases, 2 arms, no re-ask");
    assert_eq!(constrained.len(), 6, "{formats:?}");
    for format in constrained {
        assert_eq!(format["type"], "json_schema");
        assert_eq!(format["json_schema"]["strict"], false);
        assert_eq!(
            format["json_schema"]["schema"],
            serde_json::json!({"type": "object", "required": ["ok"]})
        );
    }
    for record in records(&setup.path("constrained").join("attempts.jsonl")) {
        let noted = record["warnings"]
            .as_array()
            .expect("warnings")
            .iter()
            .any(|w| w["code"] == "DECODE_NOT_CONSTRAINED");
        assert_eq!(
            noted,
            record["eval"]["arm"] == "none+constrained",
            "{record}"
        );
    }
}

/// The last user message of a request the mock received.
fn last_user(body: &Value) -> String {
    body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "user")
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_string()
}

/// The arm `reason-format` asks twice per attempt, the first attempt included: a free call
/// without the decoding constraint, then the format call with it; the audit records the free
/// call on every attempt, and the feedback reaches the format call of the re-ask.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_reason_format_arm_asks_freely_then_for_the_format() {
    let setup = Setup::new();
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let out = enforce_async(setup.args(
        &mock.url(),
        "reasoned",
        &["--arms", "reason-format+constrained"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let sent = mock.chat_requests();
    // The mock answers the format call after feedback: every case takes two attempts.
    assert_eq!(sent.len(), 6 * 2 * 2);
    for request in &sent {
        let free = last_user(&request.body).contains("plain words");
        assert_eq!(
            request.body["response_format"].is_null(),
            free,
            "only the format call is constrained: {}",
            request.body
        );
    }
    let records = records(&setup.path("reasoned").join("attempts.jsonl"));
    assert_eq!(records.len(), 6);
    for record in &records {
        assert_eq!(record["status"], "passed", "{record}");
        let attempts = record["attempts"].as_array().expect("attempts");
        assert_eq!(attempts.len(), 2, "{record}");
        assert!(
            attempts.iter().all(|a| a["free_answer"].is_object()),
            "{record}"
        );
        assert_eq!(attempts[1]["reask"], "reason_then_format");
    }
    let s = summary(&setup.path("reasoned"));
    assert_eq!(arm(&s, "reason-format+constrained")["valid"]["k"], 6);
}

/// The arm `escalate` re-asks with feedback, then asks `--escalate-model` (the same runner
/// flags, another model); the summary counts the attempts it answered, as the audit and the
/// upstream saw them. Without an escalation model the arm is refused, and a profile's
/// `escalate_to` naming no model is a configuration error naming the models.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_escalate_arm_asks_the_escalation_model_and_counts_it() {
    let setup = Setup::new();
    // Echo: feedback never helps, so every failing case climbs to the escalation.
    let mock = MockOpenAi::start(MockScript::new().then(enforce_testkit::Then::Echo))
        .await
        .expect("mock");
    let out = enforce_async(setup.args(
        &mock.url(),
        "escalated",
        &["--arms", "feedback,escalate", "--escalate-model", "big"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let to_big = mock
        .chat_requests()
        .iter()
        .filter(|r| r.body["model"] == "big")
        .count() as u64;
    let records = records(&setup.path("escalated").join("attempts.jsonl"));
    let audited = |arm: &str| -> u64 {
        records
            .iter()
            .filter(|r| r["eval"]["arm"] == arm)
            .flat_map(|r| r["attempts"].as_array().expect("attempts").iter())
            .filter(|a| a["escalated_to"] == "big")
            .count() as u64
    };
    let s = summary(&setup.path("escalated"));
    // The four cases that fail at first: attempt 2 feedback, attempt 3 the escalation.
    assert_eq!(to_big, 4);
    assert_eq!(audited("escalate"), 4);
    assert_eq!(arm(&s, "escalate")["escalated_attempts"], 4);
    assert_eq!(audited("feedback"), 0);
    assert_eq!(arm(&s, "feedback")["escalated_attempts"], 0);
    assert!(
        text(&out.stdout).contains("escalated"),
        "{}",
        text(&out.stdout)
    );

    let refused = enforce_async(setup.args(&mock.url(), "refused", &["--arms", "escalate"])).await;
    assert_eq!(refused.status.code(), Some(2));
    assert!(
        text(&refused.stderr).contains("--escalate-model"),
        "{}",
        text(&refused.stderr)
    );

    let unknown = format!("{CONFIG}    escalate_to: bigger\nmodels:\n  - id: small\n");
    std::fs::write(setup.path("enforce.yaml"), unknown).expect("config");
    let refused = enforce_async(setup.args(&mock.url(), "unknown", &["--arms", "feedback"])).await;
    let stderr = text(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    for words in ["escalate_to", "no model `bigger`", "models: small"] {
        assert!(stderr.contains(words), "{words} in {stderr}");
    }
}

/// The CI gates: an eval whose arm's valid rate drops under `--fail-under`, or whose tokens
/// per valid answer exceed `--max-tokens-per-valid`, exits 3 after writing every output and
/// names the arm, the measured figure and the threshold; gates met exit 0; a gate on an arm
/// not run is a usage error (exit 2) before anything runs. The summary says what produced it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gates_fail_the_run_when_an_arm_drops_under_them() {
    let setup = Setup::new();
    let mock = MockOpenAi::start(mock_script()).await.expect("mock");
    let run = |out: &'static str, gates: &[&str]| {
        let mut extra = vec!["--arms", "none,feedback"];
        extra.extend_from_slice(gates);
        enforce_async(setup.args(&mock.url(), out, &extra))
    };
    // `none`: 2 of 6 valid; `feedback`: 6 of 6.
    let met = run(
        "met",
        &["--fail-under", "feedback=100%", "--fail-under", "none=0.3"],
    )
    .await;
    assert_eq!(met.status.code(), Some(0), "{}", text(&met.stderr));

    let failed = run(
        "failed",
        &["--fail-under", "none=50%", "--fail-under", "feedback=0.9"],
    )
    .await;
    let stderr = text(&failed.stderr);
    assert_eq!(failed.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("arm `none`: valid rate 33.3% (2 of 6) is under --fail-under 50.0%"),
        "{stderr}"
    );
    assert!(!stderr.contains("arm `feedback`"), "{stderr}");
    let failed_summary = summary(&setup.path("failed"));
    assert_eq!(arm(&failed_summary, "none")["valid"]["k"], 2);

    // The token ceiling, around what `feedback` spent per valid answer.
    let s = summary(&setup.path("met"));
    let feedback = arm(&s, "feedback");
    let per_valid = feedback["prompt_tokens_per_valid"].as_f64().expect("usage")
        + feedback["completion_tokens_per_valid"]
            .as_f64()
            .expect("usage");
    let under = format!("feedback={}", (per_valid - 1.0).floor());
    let over = format!("feedback={}", per_valid.ceil());
    let tight = enforce_async(setup.args(
        &mock.url(),
        "tight",
        &["--arms", "none,feedback", "--max-tokens-per-valid", &under],
    ))
    .await;
    let stderr = text(&tight.stderr);
    assert_eq!(tight.status.code(), Some(3), "{stderr}");
    assert!(
        stderr.contains("arm `feedback`: ")
            && stderr.contains("tokens per valid answer is over --max-tokens-per-valid"),
        "{stderr}"
    );
    let loose = enforce_async(setup.args(
        &mock.url(),
        "loose",
        &["--arms", "none,feedback", "--max-tokens-per-valid", &over],
    ))
    .await;
    assert_eq!(loose.status.code(), Some(0), "{}", text(&loose.stderr));

    // An arm not run: a usage error, nothing run.
    let requests = mock.chat_requests().len();
    let unknown = run("unknown", &["--fail-under", "resample=0.5"]).await;
    let stderr = text(&unknown.stderr);
    assert_eq!(unknown.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("`resample`") && stderr.contains("none, feedback"),
        "{stderr}"
    );
    assert_eq!(mock.chat_requests().len(), requests, "nothing ran");
    let bad = run("bad", &["--fail-under", "none=90"]).await;
    assert_eq!(bad.status.code(), Some(2), "{}", text(&bad.stderr));

    // Provenance: the runner, the model and where it was served, the seeds, the digests, the
    // machine; no key.
    let p = &s["provenance"];
    assert_eq!(p["runner"]["kind"], "openai");
    assert_eq!(p["runner"]["model"], "m");
    assert_eq!(p["runner"]["base_url"].as_str(), Some(mock.url().as_str()));
    assert_eq!(
        (p["seeds"]["first"].as_u64(), p["seeds"]["last"].as_u64()),
        (Some(40), Some(45))
    );
    assert_eq!(p["sampling"]["temperature"], 0.7);
    assert_eq!(p["enforce_version"], env!("CARGO_PKG_VERSION"));
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(setup.path("met").join("eval.json")).expect("eval.json"),
    )
    .expect("JSON");
    assert_eq!(p["config_digest"], manifest["config_digest"]);
    assert_eq!(p["dataset_digest"], manifest["dataset_digest"]);
    assert_eq!(p["machines"][0]["arch"], std::env::consts::ARCH);
    let page = std::fs::read_to_string(setup.path("met").join("report.html")).expect("page");
    assert!(
        page.contains("Provenance") && page.contains("pass@t"),
        "the page has both"
    );
}
