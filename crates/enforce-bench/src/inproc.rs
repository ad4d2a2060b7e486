//! enforce's side of scenarios 1 (validators only) and 2 (the loop), run in this process.

use crate::stats::median;
use enforce_config::{ProfileSet, Registry};
use enforce_core::Ask;
use enforce_core::{Context, Enforcer, Request, Runner, Status, Validator};
use enforce_runner::{OpenAiConfig, OpenAiRunner};
use enforce_validators::json::JsonValidator;
use enforce_validators::pattern::{Pattern, Rule};
use serde::Serialize;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::Instant;

/// The regex rule every implementation applies (an e-mail address is forbidden).
pub const EMAIL_REGEX: &str = r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}";

/// The contract of the loop scenario, as JSON Schema.
pub fn person_schema() -> Value {
    json!({"type": "object", "required": ["name", "age"],
           "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}})
}

/// The 10,000 strings of scenario 1: every third one holds an address.
pub fn strings(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i % 3 == 0 {
                format!("Message {i}: please write to user{i}@example.com about the invoice.")
            } else {
                format!("Message {i}: the invoice for order {i} is attached, thank you.")
            }
        })
        .collect()
}

/// Scenario 1 figures.
#[derive(Debug, Serialize)]
pub struct ValidatorFigures {
    pub strings: usize,
    pub regex_ns_per_string: f64,
    pub regex_flagged: usize,
    pub adr_us_per_document: f64,
    pub adr_errors: usize,
}

/// Runs scenario 1: the median of 5 passes over the strings, and of 200 ADR checks.
pub async fn validators(
    n: usize,
    adr_path: PathBuf,
    root: PathBuf,
) -> anyhow::Result<ValidatorFigures> {
    let pattern = Pattern::new(
        "no_email",
        vec![Rule::new(EMAIL_REGEX, "FORBIDDEN_PATTERN")?],
        vec![],
    );
    let ctx = Context::new();
    let inputs = strings(n);
    let mut passes = Vec::new();
    let mut flagged = 0;
    for _ in 0..5 {
        flagged = 0;
        let t = Instant::now();
        for s in &inputs {
            if pattern
                .validate(s, &ctx)
                .await
                .map(|i| !i.is_empty())
                .unwrap_or(false)
            {
                flagged += 1;
            }
        }
        passes.push(t.elapsed().as_secs_f64() * 1e9 / n as f64);
    }
    let adr = std::fs::read_to_string(&adr_path)?;
    let profiles = ProfileSet::builtin(&Registry::builtin(), Some(root))?;
    let enforcer = profiles
        .enforcer("adr")
        .ok_or_else(|| anyhow::anyhow!("no adr profile"))?;
    let mut adr_times = Vec::new();
    let mut adr_errors = 0;
    for _ in 0..200 {
        let t = Instant::now();
        let outcome = enforcer
            .check(&adr, &ctx, enforce_core::Check::Report)
            .await;
        adr_times.push(t.elapsed().as_secs_f64() * 1e6);
        adr_errors = outcome.issues.iter().filter(|i| i.is_error()).count();
    }
    Ok(ValidatorFigures {
        strings: n,
        regex_ns_per_string: median(&passes),
        regex_flagged: flagged,
        adr_us_per_document: median(&adr_times),
        adr_errors,
    })
}

/// Scenario 2 figures (milliseconds per run, medians).
#[derive(Debug, Serialize)]
pub struct LoopFigures {
    pub runs: usize,
    pub raw_call_ms: f64,
    pub ok_ms: f64,
    pub fail_first_ms: f64,
    pub ok_passed: usize,
    pub fail_first_passed_after_one_reask: usize,
}

fn runner(base_url: &str) -> anyhow::Result<OpenAiRunner> {
    Ok(OpenAiRunner::new(OpenAiConfig {
        base_url: base_url.to_string(),
        model: "mock".into(),
        api_key: Some("sk-bench".into()),
        ..OpenAiConfig::default()
    })?)
}

/// Runs scenario 2 against an `ok` mock and a `fail-first` mock (base URLs up to `/v1`).
pub async fn looped(
    ok_url: &str,
    fail_first_url: &str,
    runs: usize,
) -> anyhow::Result<LoopFigures> {
    let request = Request::prompt("Who is Ada? Answer as JSON with name and age.");
    let enforcer = Enforcer::new(vec![Box::new(
        JsonValidator::new("person").with_schema(&person_schema())?,
    )]);
    let ctx = Context::new();
    let ok = runner(ok_url)?;
    let ff = runner(fail_first_url)?;
    for _ in 0..30 {
        let _ = ok.ask(Ask::new(&request)).reply().await;
        let _ = enforcer.run(&ff, &request, &ctx).await;
    }
    let mut raw = Vec::new();
    for _ in 0..runs {
        let t = Instant::now();
        ok.ask(Ask::new(&request)).reply().await?;
        raw.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let (mut ok_t, mut ok_passed) = (Vec::new(), 0);
    for _ in 0..runs {
        let t = Instant::now();
        let o = enforcer.run(&ok, &request, &ctx).await;
        ok_t.push(t.elapsed().as_secs_f64() * 1e3);
        ok_passed += usize::from(o.status == Status::Passed && o.attempts.len() == 1);
    }
    let (mut ff_t, mut ff_passed) = (Vec::new(), 0);
    for _ in 0..runs {
        let t = Instant::now();
        let o = enforcer.run(&ff, &request, &ctx).await;
        ff_t.push(t.elapsed().as_secs_f64() * 1e3);
        ff_passed += usize::from(o.status == Status::Passed && o.attempts.len() == 2);
    }
    Ok(LoopFigures {
        runs,
        raw_call_ms: median(&raw),
        ok_ms: median(&ok_t),
        fail_first_ms: median(&ff_t),
        ok_passed,
        fail_first_passed_after_one_reask: ff_passed,
    })
}
