//! `enforce-bench local-speed-answer` on the real test model: the subprocess the local-speed
//! run starts for the harness built for this CPU prints a timing the run can read.
#![cfg(feature = "local")]

use std::process::Command;

#[derive(serde::Deserialize)]
struct Timing {
    prompt_tokens: u64,
    tokens: u64,
    first_s: f64,
    rest_s: f64,
    rest_cpu_s: Option<f64>,
}

/// Runs the hidden subcommand on the test model and reads the JSON line it prints last.
fn answer(extra: &[&str]) -> Option<Timing> {
    let model = enforce_testkit::models::test_gguf()?;
    let out = Command::new(env!("CARGO_BIN_EXE_enforce-bench"))
        .args(["local-speed-answer", "--gguf"])
        .arg(model)
        .args(["--threads", "1", "--max-tokens", "12"])
        .args(extra)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    Some(serde_json::from_str(stdout.lines().last().unwrap()).unwrap())
}

#[test]
fn one_timed_answer_prints_its_timing() {
    let Some(t) = answer(&["--answer", "text"]) else {
        return;
    };
    assert!(
        t.prompt_tokens > 10,
        "the storyteller prompt: {}",
        t.prompt_tokens
    );
    assert_eq!(t.tokens, 12, "a long story fills --max-tokens");
    assert!(t.first_s > 0.0 && t.rest_s > 0.0);
    assert!(
        t.rest_cpu_s.is_some_and(|s| s > 0.0),
        "the generating thread's CPU time"
    );
}

#[test]
fn the_grammar_answer_follows_the_grammar_file() {
    if enforce_testkit::models::test_gguf().is_none() {
        return;
    }
    let dir = std::env::temp_dir().join(format!("local-speed-answer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let grammar = dir.join("yes.gbnf");
    std::fs::write(&grammar, "root ::= \"yes\"").unwrap();
    let grammar = grammar.to_string_lossy().into_owned();
    let t = answer(&["--answer", "city-grammar", "--grammar", &grammar]).unwrap();
    // Unconstrained, the city answer fills --max-tokens; "yes" is at most three tokens.
    assert!((1..=3).contains(&t.tokens), "{} tokens", t.tokens);
    let _ = std::fs::remove_dir_all(&dir);
}
