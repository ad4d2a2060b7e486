//! The code and ADR contracts of `examples/eval/`: their datasets' shape, and the code
//! contract's checker (`run_tests.py`) run as the `external` validator runs it — the answer in
//! a file, the case's context as JSON in `ENFORCE_CONTEXT`.

use crate::{repo, text, BIN};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Command, Output};

fn cases(dataset: &str) -> Vec<Value> {
    let path = repo().join("examples/eval").join(dataset);
    std::fs::read_to_string(&path)
        .expect("the dataset")
        .lines()
        .enumerate()
        .map(|(i, line)| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{dataset} line {}: {e}", i + 1))
        })
        .collect()
}

fn ids_are_unique(dataset: &str, cases: &[Value]) {
    let ids: BTreeSet<&str> = cases
        .iter()
        .map(|c| c["id"].as_str().expect("every case has an id"))
        .collect();
    assert_eq!(ids.len(), cases.len(), "{dataset}: an id repeats");
}

/// Every code case names its function with a signature, asks for a ```python block, and
/// carries 3–5 assert lines that call that function.
#[test]
fn every_code_case_names_its_function_and_carries_its_asserts() {
    let cases = cases("code.jsonl");
    assert!(cases.len() >= 30, "{} code cases", cases.len());
    ids_are_unique("code.jsonl", &cases);
    for case in &cases {
        let id = &case["id"];
        let prompt = case["prompt"].as_str().expect("a prompt");
        assert!(prompt.contains("```python"), "{id}: {prompt}");
        let name = function_named(prompt).unwrap_or_else(|| panic!("{id}: no `name(...)`"));
        let tests = case["context"]["tests"].as_array().expect("context.tests");
        assert!(
            (3..=5).contains(&tests.len()),
            "{id}: {} asserts",
            tests.len()
        );
        for test in tests {
            let test = test.as_str().expect("an assert line");
            assert!(
                test.contains("assert ") && test.contains(&format!("{name}(")),
                "{id}: {test}"
            );
        }
    }
}

/// Every ADR case asks for a distinct decision in the shape the `adr` profile checks.
#[test]
fn every_adr_case_asks_for_one_decision_in_the_checked_shape() {
    let cases = cases("adr.jsonl");
    assert!(cases.len() >= 20, "{} ADR cases", cases.len());
    ids_are_unique("adr.jsonl", &cases);
    let mut decisions = BTreeSet::new();
    for case in &cases {
        let prompt = case["prompt"].as_str().expect("a prompt");
        for asked in [
            "adr_id",
            "## Context",
            "## Decision",
            "## Acceptance Criteria",
            "<!-- STEP: generate -->",
        ] {
            assert!(prompt.contains(asked), "{}: no {asked}", case["id"]);
        }
        let decision = prompt.split(". Context:").next().expect("the decision");
        assert!(
            decisions.insert(decision.to_string()),
            "repeated: {decision}"
        );
    }
}

/// The function a prompt names: the identifier in "`name(args) -> type`".
fn function_named(prompt: &str) -> Option<&str> {
    let signature = prompt.split('`').nth(1)?;
    let (name, rest) = signature.split_once('(')?;
    let is_name = !name.is_empty() && name.chars().all(|c| c == '_' || c.is_ascii_alphanumeric());
    (is_name && rest.contains(')')).then_some(name)
}

/// The reference solutions the tests answer code cases with, by case id.
fn reference() -> BTreeMap<String, String> {
    let path = repo().join("tests/fixtures/eval/code-reference.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the reference")).expect("JSON")
}

/// The case's context as the external validator hands it over.
fn context_of(id: &str) -> String {
    let case = cases("code.jsonl")
        .into_iter()
        .find(|c| c["id"] == id)
        .unwrap_or_else(|| panic!("no case {id}"));
    case["context"].to_string()
}

/// `run_tests.py ANSWER` with the case's context in `ENFORCE_CONTEXT`.
fn run_tests(answer_file: &Path, context: &str, extra: &[&str]) -> Output {
    Command::new("python3")
        .arg(repo().join("examples/eval/run_tests.py"))
        .arg(answer_file)
        .args(extra)
        .env("ENFORCE_CONTEXT", context)
        .env_remove("ENFORCE_CONTEXT_FILE")
        .output()
        .expect("python3 runs")
}

fn fenced(code: &str) -> String {
    format!("Here it is:\n\n```python\n{code}\n```\n\nIt handles the edge cases.\n")
}

/// A right answer passes; a wrong one fails with the first failing assert and what the
/// function returned, without a line (the assert is not a line of the answer).
#[test]
fn the_checker_passes_a_right_answer_and_names_the_failing_assert_of_a_wrong_one() {
    let dir = tempfile::tempdir().expect("temp dir");
    let reference = reference();
    let wrong = [
        ("add-ints", "def add(a, b):\n    return a - b", "add(2, 3) returned -1, expected 5"),
        (
            "roman-to-int",
            "def roman_to_int(numeral):\n    v = {'I': 1, 'V': 5, 'X': 10, 'L': 50, 'C': 100, 'D': 500, 'M': 1000}\n    return sum(v[c] for c in numeral)",
            "roman_to_int('IV') returned 6, expected 4",
        ),
    ];
    for (id, wrong_code, said) in wrong {
        let context = context_of(id);
        let answer = dir.path().join(format!("{id}.md"));
        std::fs::write(&answer, fenced(&reference[id])).expect("answer");
        let out = run_tests(&answer, &context, &[]);
        assert_eq!(out.status.code(), Some(0), "{id}: {}", text(&out.stdout));

        std::fs::write(&answer, fenced(wrong_code)).expect("answer");
        let out = run_tests(&answer, &context, &[]);
        let report = text(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{id}: {report}");
        assert!(
            report.starts_with("AssertionError: assert "),
            "{id}: {report}"
        );
        assert!(report.contains(said), "{id}: {report}");
        assert!(!report.contains("File \""), "{id}: {report}");
    }
}

/// An error raised in the answer's code is reported at the answer's line (through enforce's
/// parser: `enforce check` with the case's tests as context); an endless loop is stopped by
/// the timeout and names the assert it was running; no tests in the context is a clear error.
#[test]
fn the_checker_places_errors_of_the_answers_code_and_stops_an_endless_loop() {
    let dir = tempfile::tempdir().expect("temp dir");
    let answer = dir.path().join("answer.md");
    // Line 5 of the answer: the fence opens on line 3.
    std::fs::write(&answer, fenced("def add(a, b):\n    return a + delimiter")).expect("answer");
    let tests = r#"tests=["assert add(2, 3) == 5"]"#;
    let out = Command::new(BIN)
        .args(["check", "--config"])
        .arg(repo().join("examples/eval/enforce.yaml"))
        .args(["--profile", "code", "--format", "json", "--context", tests])
        .arg(&answer)
        .env_remove("ENFORCE_CONFIG")
        .output()
        .expect("enforce check runs");
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}{}", text(&out.stderr));
    let report: Value = serde_json::from_str(stdout.trim()).expect("JSON");
    let issues = report["results"][0]["issues"].as_array().expect("issues");
    assert_eq!(issues.len(), 1, "{stdout}");
    assert_eq!(issues[0]["line"], 5, "{stdout}");
    let message = issues[0]["message"].as_str().expect("message");
    assert!(
        message.starts_with("NameError: name 'delimiter' is not defined"),
        "{message}"
    );
    assert!(message.contains("assert add(2, 3) == 5"), "{message}");

    // The answer's own failing assert (line 8 of the answer) names itself and what it saw.
    let own_check =
        "def add(a, b):\n    return a * b\n\nassert add(2, 2) == 4\nassert add(2, 3) == 5";
    std::fs::write(&answer, fenced(own_check)).expect("answer");
    let out = run_tests(&answer, &context_of("add-ints"), &[]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(
        report.contains(&format!("File \"{}\", line 8,", answer.display())),
        "{report}"
    );
    let own = "the answer's own assert add(2, 3) == 5 failed: add(2, 3) returned 6, expected 5";
    assert!(report.contains(own), "{report}");

    std::fs::write(
        &answer,
        fenced("def add(a, b):\n    while True:\n        pass"),
    )
    .expect("answer");
    let started = std::time::Instant::now();
    // Long enough for a Python process to start on a loaded machine, far below the default.
    let out = run_tests(&answer, &context_of("add-ints"), &["--timeout", "2"]);
    let report = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{report}");
    assert!(report.starts_with("TimeoutError: "), "{report}");
    assert!(report.contains("assert add(2, 3) == 5"), "{report}");
    assert!(started.elapsed() < std::time::Duration::from_secs(10));

    // A large context arrives in a file instead.
    let context_file = dir.path().join("context.json");
    std::fs::write(&context_file, context_of("add-ints")).expect("context");
    let out = Command::new("python3")
        .arg(repo().join("examples/eval/run_tests.py"))
        .arg(&answer)
        .args(["--timeout", "0.5"])
        .env_remove("ENFORCE_CONTEXT")
        .env("ENFORCE_CONTEXT_FILE", &context_file)
        .output()
        .expect("python3 runs");
    assert!(
        text(&out.stdout).starts_with("TimeoutError: "),
        "{}",
        text(&out.stdout)
    );

    let out = run_tests(&answer, "{}", &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stdout).contains("no `tests`"),
        "{}",
        text(&out.stdout)
    );
}

/// One answer, one verdict: an answer whose result depends on the order of a set of strings
/// (which Python varies from process to process unless hashing is fixed) is judged the same way
/// every time. The answer Qwen2.5-Coder-0.5B gave to `remove-duplicates` passed in one arm of a
/// benchmark and failed in another before the checker fixed the hashing.
#[test]
fn the_checker_judges_an_answer_that_relies_on_set_order_the_same_every_time() {
    let dir = tempfile::tempdir().expect("temp dir");
    let answer = dir.path().join("set-order.md");
    std::fs::write(
        &answer,
        fenced("def remove_duplicates(items):\n    return list(set(items))"),
    )
    .expect("answer");
    let context = context_of("remove-duplicates");
    let verdicts: BTreeSet<Option<i32>> = (0..8)
        .map(|_| run_tests(&answer, &context, &[]).status.code())
        .collect();
    assert_eq!(verdicts.len(), 1, "verdicts: {verdicts:?}");
}
