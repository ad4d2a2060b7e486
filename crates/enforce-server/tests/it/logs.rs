//! The proxy's log lines an operator greps for: one warning per failed attempt, the info line of
//! an applied fallback, and "returning unvalidated". Each test captures the logs of its own
//! thread (a current-thread runtime, a scoped subscriber), so tests running in parallel do not
//! see each other's lines.

use crate::common::*;
use enforce_core::{Enforcer, FailMode, Policy, ScriptedRunner};
use enforce_server::{FailureResponse, ModelOptions, ServerConfig};
use std::sync::Arc;

const GOOD: &str = "Because it is faster.\n<!-- STEP: why -->";
const BAD: &str = "Because it is faster.";

type Logs = enforce_testkit::LogBuffer;

/// Serves `texts` under `enforcer` and `options`, sends one request, returns the logs.
async fn logs_of(texts: Vec<&'static str>, enforcer: Enforcer, options: ModelOptions) -> Logs {
    // The process-wide subscriber first: with it every callsite is enabled, so this thread's
    // scoped subscriber sees the events even when another test's thread hit them first.
    crate::hostile_input::captured_logs();
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::INFO)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    let runner = Arc::new(ScriptedRunner::texts(texts));
    let h = Harness::start(server_with(
        ServerConfig::default(),
        runner,
        enforcer,
        options,
    ))
    .await;
    let resp = h.chat(user_body(false)).await;
    assert!(resp.status().is_success(), "{}", resp.status());
    logs
}

#[tokio::test]
async fn one_warning_per_failed_attempt_then_returning_unvalidated() {
    let options = ModelOptions {
        on_unresolved: FailureResponse::Return,
        ..ModelOptions::default()
    };
    // Three answers, each without a marker: no progress after the second ends the loop.
    let logs = logs_of(
        vec![BAD, "still bad", "bad again"],
        marker_enforcer_retries(false, 2),
        options,
    )
    .await;
    let failed = logs.lines_with("failed: MISSING_STEP_MARKER");
    assert_eq!(failed.len(), 2, "{}", logs.text());
    assert!(failed[0].contains("WARN"), "{}", failed[0]);
    assert!(
        failed[0].contains("attempt 1/3 failed: MISSING_STEP_MARKER"),
        "{}",
        failed[0]
    );
    assert!(
        failed[1].contains("attempt 2/3 failed: MISSING_STEP_MARKER"),
        "{}",
        failed[1]
    );
    let unvalidated = logs.lines_with("returning unvalidated");
    assert_eq!(unvalidated.len(), 1, "{}", logs.text());
    assert!(unvalidated[0].contains("WARN"), "{}", unvalidated[0]);
}

#[tokio::test]
async fn a_passing_answer_logs_no_failed_attempt() {
    let logs = logs_of(vec![GOOD], marker_enforcer(false), ModelOptions::default()).await;
    assert!(logs.lines_with("failed:").is_empty(), "{}", logs.text());
    assert!(logs.lines_with("returning unvalidated").is_empty());
}

#[tokio::test]
async fn an_applied_fallback_is_an_info_line_with_the_codes() {
    let enforcer = marker_enforcer(false).with_policy(
        Policy::builder()
            .max_retries(0)
            .fallback("A safe answer.\n<!-- STEP: done -->")
            .build(),
    );
    let logs = logs_of(vec![BAD], enforcer, ModelOptions::default()).await;
    let applied = logs.lines_with("applied fallback for issues: MISSING_STEP_MARKER");
    assert_eq!(applied.len(), 1, "{}", logs.text());
    assert!(applied[0].contains("INFO"), "{}", applied[0]);
    // A fallback is not "unvalidated": it passed the profile's checks.
    assert!(logs.lines_with("returning unvalidated").is_empty());
}

/// A deterministic repair is logged like the template fallback: at info, with the codes
/// it fixed.
#[tokio::test]
async fn a_repair_is_an_info_line_with_the_codes_it_fixed() {
    let enforcer = marker_enforcer(true).with_policy(Policy::builder().max_retries(0).build());
    let logs = logs_of(vec![BAD], enforcer, ModelOptions::default()).await;
    let applied = logs.lines_with("applied fallback for issues: MISSING_STEP_MARKER");
    assert_eq!(applied.len(), 1, "{}", logs.text());
    assert!(applied[0].contains("INFO"), "{}", applied[0]);
    assert!(applied[0].contains("kind=\"repair\""), "{}", applied[0]);
}

#[tokio::test]
async fn a_skipped_check_is_logged_as_returning_unvalidated() {
    let enforcer = Enforcer::new(vec![Box::new(Down)])
        .with_policy(Policy::builder().on_unavailable(FailMode::Open).build());
    let logs = logs_of(vec![GOOD], enforcer, ModelOptions::default()).await;
    let lines = logs.lines_with("returning unvalidated: some checks did not run");
    assert_eq!(lines.len(), 1, "{}", logs.text());
    assert!(lines[0].contains("external"), "{}", lines[0]);
}
