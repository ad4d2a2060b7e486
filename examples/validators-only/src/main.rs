//! A service that needs only JSON-Schema and regex checks depends on `enforce-validators`
//! alone: no tokio, no process or HTTP checker, no YAML (`cargo tree -p
//! enforce-example-validators-only -e normal`; `cargo xtask ci` checks it).
//!
//! `cargo run -p enforce-example-validators-only -- '{"title": "x"}'` prints the issues.

use enforce_core::{Context, Issue, Validator};
use enforce_validators::json::JsonValidator;
use enforce_validators::pattern::{Pattern, Rule};
use serde_json::json;

/// The checks this service applies to a model's answer.
fn validators() -> Result<Vec<Box<dyn Validator>>, enforce_validators::BuildError> {
    let answer = JsonValidator::new("answer").with_schema(&json!({
        "type": "object",
        "required": ["title"],
        "properties": {"title": {"type": "string", "minLength": 1}}
    }))?;
    let no_scores = Pattern::new(
        "no_scores",
        vec![Rule::new(r"\d+ ?%", "NO_PERCENT")?],
        Vec::new(),
    );
    Ok(vec![Box::new(answer), Box::new(no_scores)])
}

/// Every issue of every validator for `text`.
fn check(text: &str) -> Result<Vec<Issue>, enforce_validators::BuildError> {
    let context = Context::new();
    let mut issues = Vec::new();
    for validator in validators()? {
        // The generic validators never wait on I/O: one poll finishes them.
        let verdict = block_on(validator.validate(text, &context));
        issues.extend(verdict.unwrap_or_default());
    }
    Ok(issues)
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    let mut f = std::pin::pin!(f);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    loop {
        if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
    }
}

fn main() -> std::process::ExitCode {
    let text = std::env::args().nth(1).unwrap_or_default();
    match check(&text) {
        Ok(issues) if issues.is_empty() => {
            println!("ok");
            std::process::ExitCode::SUCCESS
        }
        Ok(issues) => {
            for issue in issues {
                println!("{issue}");
            }
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cannot build the validators: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check;

    #[test]
    fn schema_and_pattern_checks_run_without_a_runtime() {
        assert!(check(r#"{"title": "Plan"}"#).unwrap().is_empty());
        let codes: Vec<String> = check(r#"{"title": "Up 12 %"}"#)
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect();
        assert_eq!(codes, ["NO_PERCENT"]);
        let codes: Vec<String> = check(r#"{"name": 1}"#)
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect();
        assert_eq!(codes, ["SCHEMA_VIOLATION"]);
    }
}
