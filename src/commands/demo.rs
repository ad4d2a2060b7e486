//! `enforce demo`: the whole loop against a built-in scripted model, no LLM needed.

use clap::Args as ClapArgs;
use enforce_config::{ProfileSet, Registry};
use enforce_core::{Context, Event, Issue, Request, ScriptedRunner};
use std::process::ExitCode;

/// The request the demo sends.
const REQUEST: &str = "Write an ADR (adr_id ADR-042) deciding how we cache validated answers. \
End with the workflow step marker.";

/// The scripted model's first answer: the acceptance criteria section and the step marker are
/// missing. A macro, so the second answer can extend it with `concat!`.
macro_rules! first_answer {
    () => {
        "\
---
adr_id: ADR-042
title: Cache validated answers
status: proposed
---
# ADR-042: Cache validated answers

## Kontext
Validating and re-asking costs time; identical requests arrive often.

## Entscheidung
Cache each validated answer for one hour, keyed by profile and request digest.
"
    };
}
const FIRST_ANSWER: &str = first_answer!();

/// The second answer: the section is there now, the step marker still is not.
const SECOND_ANSWER: &str = concat!(
    first_answer!(),
    "
## Akzeptanzkriterien
- [ ] A repeated request within the hour is answered from the cache.
- [ ] Only answers with status passed or repaired are cached.
- [ ] The cache can be switched off per profile.
"
);

/// Show the enforcement loop on a built-in scripted model: two answers, feedback, a repair.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// Also print the audit record (one JSON line) at the end.
    #[arg(long)]
    pub json: bool,
}

fn print_issues(issues: &[Issue]) {
    if issues.is_empty() {
        println!("  no issues");
    }
    for issue in issues {
        let at = issue
            .line
            .map(|l| format!(" (line {l})"))
            .unwrap_or_default();
        println!(
            "  {:<7} {}{at}: {}",
            issue.severity.as_str(),
            issue.code,
            issue.message
        );
        if let Some(hint) = &issue.hint {
            println!("          hint: {hint}");
        }
    }
}

fn indent(text: &str) -> String {
    text.trim_end()
        .lines()
        .map(|l| format!("  │ {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Runs `enforce demo`.
pub fn run(args: Args) -> ExitCode {
    demo(&args).unwrap_or_else(|message| {
        eprintln!("enforce demo: {message}");
        ExitCode::from(2)
    })
}

/// The demo's exit code, or why it could not run.
fn demo(args: &Args) -> Result<ExitCode, String> {
    let profiles = ProfileSet::builtin(&Registry::builtin(), None)
        .map_err(|e| format!("cannot build the built-in profiles: {e}"))?;
    let profile = (profiles.get("adr")).ok_or("the built-in `adr` profile is missing")?;
    // One re-ask, so the demo shows asking, then repairing once asking is spent.
    let mut policy = profile.policy().clone();
    policy.max_retries = 1;
    let enforcer = profile.enforcer().with_policy(policy);
    let runner = ScriptedRunner::texts([FIRST_ANSWER, SECOND_ANSWER]);

    println!("enforce demo: the enforcement loop against a built-in scripted model (no LLM)");
    println!(
        "profile `adr`: {} · at most {} attempts, then deterministic repairs",
        profile.validator_names().join(", "),
        enforcer.max_attempts()
    );
    println!("\nrequest:\n{}", indent(REQUEST));

    let observer = |event: &Event<'_>| match *event {
        Event::Asking {
            attempt,
            max_attempts,
        } => println!("\n── attempt {attempt}/{max_attempts}: asking the model"),
        Event::Validated {
            attempt,
            response,
            issues,
        } => {
            println!("answer {attempt}:\n{}", indent(response));
            println!("issues:");
            print_issues(issues);
        }
        Event::Retrying { feedback, .. } => {
            println!("feedback sent to the model:\n{}", indent(feedback));
        }
        Event::Repaired { validator } => {
            println!("\n── repair: `{validator}` fixed the last answer deterministically");
        }
        _ => {}
    };
    let runtime = super::current_thread_runtime()?;
    let outcome = runtime.block_on(enforcer.run_observed(
        &runner,
        &Request::prompt(REQUEST),
        &Context::new(),
        &observer,
    ));

    println!("\n── outcome: {}", outcome.summary());
    if !outcome.warnings.is_empty() {
        println!("warnings:");
        print_issues(&outcome.warnings);
    }
    if let Some(text) = &outcome.response {
        println!("final response:\n{}", indent(text));
    }
    if args.json {
        // The same record `enforce run --audit` and the proxy write.
        let record = enforce_core::AuditRecord::new("demo", &outcome)
            .profile(profile.name())
            .runner("scripted");
        println!("{}", record.to_json_line());
    }
    Ok(if outcome.status.is_success() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
