//! `reask: auto`: each re-ask takes the chooser's strategy, the audit says why; without a
//! chooser or without data the fallback ladder asks; `constrained` and `escalate` are
//! candidates only when they apply; the statistics count what a run's re-asks achieved.

use crate::req;
use crate::seeds::NeedsTitle;
use enforce_core::enforcer::REASK_AUTO_NO_CHOOSER;
use enforce_core::policy::{AutoReask, Ladder, Reask};
use enforce_core::scripted::ScriptedCall;
use enforce_core::strategy::{
    ChosenBy, StatsKey, StrategyStats, Tally, ThompsonChooser, ThompsonSettings,
};
use enforce_core::{
    Context, Enforcer, Outcome, Policy, Reply, Request, RunnerError, ScriptedRunner, Status, Usage,
};
use serde_json::json;
use std::sync::Arc;

/// The statistics key of `code` and `strategy` for model `m` under profile `p`.
pub(crate) fn key(code: &str, strategy: Reask) -> StatsKey {
    StatsKey {
        model: "m".into(),
        profile: "p".into(),
        code: code.into(),
        strategy,
    }
}

/// `attempts` re-asks, `valid` of them valid (and fixed), `tokens_each` tokens each.
pub(crate) fn tally_of(attempts: u64, valid: u64, tokens_each: u64) -> Tally {
    Tally {
        attempts,
        fixed: valid,
        valid,
        tokens: tokens_each * attempts,
        tokens_counted: attempts,
        runner_us: 0,
    }
}

fn tally(attempts: u64, valid: u64) -> Tally {
    tally_of(attempts, valid, 100)
}

/// Statistics in which `best` fixes NO_TITLE far more often than feedback.
fn stats_favouring(best: Reask) -> StrategyStats {
    let mut stats = StrategyStats::default();
    stats.add(key("NO_TITLE", Reask::Feedback), tally(40, 4));
    stats.add(key("NO_TITLE", best), tally(40, 36));
    stats
}

fn chooser(stats: &StrategyStats) -> Arc<ThompsonChooser> {
    let mut settings = ThompsonSettings::default();
    settings.explore = false;
    Arc::new(ThompsonChooser::new(stats, "m", "p", settings))
}

fn auto_policy(strategies: &[Reask]) -> Policy {
    Policy::builder()
        .max_retries(2)
        .reask(Reask::Feedback)
        .reask_auto(AutoReask::among(strategies.iter().copied()))
        .build()
}

fn enforcer(policy: Policy) -> Enforcer {
    Enforcer::new(vec![Box::new(NeedsTitle)]).with_policy(policy)
}

fn warnings(outcome: &Outcome, code: &str) -> usize {
    outcome.warnings.iter().filter(|w| w.code == code).count()
}

/// Runs `policy` with the chooser over `stats` on `request`, asking a model that fails once
/// and then passes.
async fn fail_once(
    policy: Policy,
    stats: &StrategyStats,
    request: &Request,
) -> (ScriptedRunner, Outcome) {
    let runner = ScriptedRunner::texts(["no", "a title"]);
    let outcome = enforcer(policy)
        .with_chooser(chooser(stats))
        .run(&runner, request, &Context::new())
        .await;
    (runner, outcome)
}

#[tokio::test]
async fn auto_takes_the_strategy_the_statistics_favour_and_the_audit_says_why() {
    let (runner, outcome) = fail_once(
        auto_policy(&[Reask::Feedback, Reask::Resample]),
        &stats_favouring(Reask::Resample),
        &req(),
    )
    .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let second = &outcome.attempts[1];
    assert_eq!(second.reask, Some(Reask::Resample));
    // A resample is a fresh ask: no feedback was sent.
    assert!(matches!(runner.calls()[1], ScriptedCall::Ask { .. }));
    let reason = second.reask_choice.as_ref().expect("a reason");
    assert_eq!(reason.by, ChosenBy::Mean);
    assert_eq!(reason.codes, ["NO_TITLE"]);
    let compared: Vec<(Reask, u64, u64)> = reason
        .compared
        .iter()
        .map(|c| (c.strategy, c.attempts, c.valid))
        .collect();
    assert_eq!(
        compared,
        [(Reask::Feedback, 40, 4), (Reask::Resample, 40, 36)]
    );
    assert!(reason.compared[1].mean > reason.compared[0].mean);
    // In the audit line, with the rates compared; the first attempt has no choice.
    let line: serde_json::Value = serde_json::from_str(&outcome.to_json_line()).unwrap();
    assert!(line["attempts"][0].get("reask_choice").is_none(), "{line}");
    assert_eq!(line["attempts"][1]["reask_choice"]["by"], "mean");
    assert_eq!(
        line["attempts"][1]["reask_choice"]["compared"][1]["strategy"],
        "resample"
    );
    let back: Outcome = serde_json::from_value(line).unwrap();
    assert_eq!(back.attempts[1].reask_choice, second.reask_choice);
}

#[tokio::test]
async fn a_ladder_records_no_choice() {
    let (_, outcome) = fail_once(
        Policy::builder().reask(Reask::Resample).build(),
        &stats_favouring(Reask::FeedbackFresh),
        &req(),
    )
    .await;
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Resample));
    assert!(outcome.attempts.iter().all(|a| a.reask_choice.is_none()));
    assert!(!outcome.to_json_line().contains("reask_choice"));
}

#[tokio::test]
async fn without_a_chooser_auto_takes_the_ladder_and_warns_once() {
    let runner = ScriptedRunner::texts(["no", "still no", "a title"]);
    let policy = Policy::builder()
        .max_retries(2)
        .stop_on_no_progress(false)
        .reask(Ladder::new(vec![Reask::FeedbackFresh, Reask::Resample]).unwrap())
        .reask_auto(AutoReask::default())
        .build();
    let outcome = enforcer(policy).run(&runner, &req(), &Context::new()).await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let strategies: Vec<_> = outcome.attempts.iter().map(|a| a.reask).collect();
    assert_eq!(
        strategies,
        [None, Some(Reask::FeedbackFresh), Some(Reask::Resample)]
    );
    for attempt in &outcome.attempts[1..] {
        let reason = attempt.reask_choice.as_ref().expect("a reason");
        assert_eq!(reason.by, ChosenBy::NoChooser);
        assert!(reason.compared.is_empty());
    }
    assert_eq!(warnings(&outcome, REASK_AUTO_NO_CHOOSER), 1, "{outcome:?}");
}

#[tokio::test]
async fn without_data_for_the_code_auto_takes_the_ladder_without_a_warning() {
    let mut stats = StrategyStats::default();
    stats.add(key("OTHER_CODE", Reask::Resample), tally(40, 40));
    let (_, outcome) = fail_once(
        auto_policy(&[Reask::Feedback, Reask::Resample]),
        &stats,
        &req(),
    )
    .await;
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Feedback));
    let reason = outcome.attempts[1].reask_choice.as_ref().unwrap();
    assert_eq!(reason.by, ChosenBy::NoData);
    assert_eq!(warnings(&outcome, REASK_AUTO_NO_CHOOSER), 0);
}

/// The request as a caller whose contract gives a decoding constraint sends it.
fn constrained_request() -> Request {
    let mut request = req();
    request
        .params
        .insert("response_format".into(), json!({"type": "json_object"}));
    request.constraint_params = vec!["response_format".into()];
    request
}

fn sent_constraint(runner: &ScriptedRunner) -> Vec<bool> {
    runner
        .calls()
        .iter()
        .map(|call| match call {
            ScriptedCall::Ask { request } | ScriptedCall::FollowUp { request, .. } => {
                request.params.contains_key("response_format")
            }
            _ => false,
        })
        .collect()
}

#[tokio::test]
async fn constrained_is_a_candidate_only_with_a_constraint_and_then_constrains_its_reasks_only() {
    let stats = stats_favouring(Reask::Constrained);
    let policy = auto_policy(&[Reask::Feedback, Reask::Constrained]);

    // No constraint in the request: `constrained` is not compared.
    let (_, outcome) = fail_once(policy.clone(), &stats, &req()).await;
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Feedback));
    let reason = outcome.attempts[1].reask_choice.as_ref().unwrap();
    assert!(reason
        .compared
        .iter()
        .all(|c| c.strategy != Reask::Constrained));

    // With one: chosen, and only its re-ask carries the constraint.
    let (runner, outcome) = fail_once(policy, &stats, &constrained_request()).await;
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Constrained));
    assert_eq!(sent_constraint(&runner), [false, true]);

    // Without `constrained` among the strategies (`decode: constrained`), every ask keeps it.
    let (runner, _) = fail_once(
        auto_policy(&[Reask::Feedback, Reask::Resample]),
        &stats_favouring(Reask::Resample),
        &constrained_request(),
    )
    .await;
    assert_eq!(sent_constraint(&runner), [true, true]);
}

#[tokio::test]
async fn escalate_is_a_candidate_only_with_an_escalation_model() {
    let stats = stats_favouring(Reask::Escalate);
    let policy = auto_policy(&[Reask::Feedback, Reask::Escalate]);
    let (_, outcome) = fail_once(policy.clone(), &stats, &req()).await;
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Feedback));

    let main = ScriptedRunner::texts(["no"]);
    let big = Arc::new(ScriptedRunner::texts(["a title"]));
    let outcome = enforcer(policy)
        .with_chooser(chooser(&stats))
        .with_escalation("big", big.clone())
        .run(&main, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.attempts[1].reask, Some(Reask::Escalate));
    assert_eq!(outcome.attempts[1].escalated_to.as_deref(), Some("big"));
    assert_eq!(big.calls().len(), 1);
}

fn reply(text: &str, tokens: u64) -> Result<Reply, RunnerError> {
    Ok(Reply {
        usage: Some(Usage {
            input_tokens: tokens / 2,
            output_tokens: tokens - tokens / 2,
        }),
        ..Reply::text(text)
    })
}

#[tokio::test]
async fn the_statistics_count_each_reask_about_the_answer_before_it() {
    // Attempt 1 fails, attempt 2 (feedback) fails again, the runner fails attempt 3, and
    // attempt 4 (resample, asked about attempt 2's answer) passes.
    let runner = ScriptedRunner::new([
        reply("no", 10),
        reply("still no", 20),
        Err(RunnerError::Timeout { after_ms: 5 }),
        reply("a title", 30),
    ]);
    let policy = Policy::builder()
        .max_retries(3)
        .stop_on_no_progress(false)
        .reask(Ladder::new(vec![Reask::Feedback, Reask::Resample]).unwrap())
        .build();
    let outcome = enforcer(policy).run(&runner, &req(), &Context::new()).await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert!(outcome.attempts[2].runner_error.is_some(), "{outcome:?}");

    let mut stats = StrategyStats::default();
    stats.record("m", "p", &outcome);
    let feedback = stats.get(&key("NO_TITLE", Reask::Feedback)).copied();
    let resample = stats.get(&key("NO_TITLE", Reask::Resample)).copied();
    let feedback = feedback.expect("the feedback re-ask is counted");
    let resample = resample.expect("the resample re-ask is counted");
    assert_eq!(
        (feedback.attempts, feedback.fixed, feedback.valid),
        (1, 0, 0)
    );
    assert_eq!((feedback.tokens, feedback.tokens_counted), (20, 1));
    assert_eq!(
        (resample.attempts, resample.fixed, resample.valid),
        (1, 1, 1)
    );
    assert_eq!(resample.tokens, 30);
    assert_eq!(stats.iter().count(), 2, "the failed call counts nowhere");

    // The file round-trips, and merging adds up.
    let mut merged = StrategyStats::from_json(&stats.to_json()).unwrap();
    assert_eq!(merged, stats);
    merged.merge(&stats);
    let twice = merged.get(&key("NO_TITLE", Reask::Resample)).unwrap();
    assert_eq!((twice.attempts, twice.valid, twice.tokens), (2, 2, 60));
}

#[test]
fn a_statistics_file_of_another_version_or_shape_is_refused() {
    let err = StrategyStats::from_json(r#"{"version": 2, "rows": [{"new": "shape"}]}"#)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("version 2") && err.contains("version 1"),
        "{err}"
    );
    let err = StrategyStats::from_json(r#"{"version": 1, "rows": [{"model": "m"}]}"#)
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing field"), "{err}");
    assert!(StrategyStats::from_json("[]").is_err());
    let empty = StrategyStats::from_json(r#"{"version": 1}"#).unwrap();
    assert!(empty.is_empty());
}
