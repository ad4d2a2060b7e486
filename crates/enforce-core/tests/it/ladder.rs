//! The strategy ladder: one rung per re-ask, the last repeating; no progress climbs to the
//! next rung (or ends the loop with `stop_on_no_progress`); a byte-identical repeat is no
//! progress; the audit names the rung of every attempt.

use crate::req;
use crate::seeds::NeedsTitle;
use enforce_core::{
    async_trait, policy::Ladder, policy::Reask, scripted::ScriptedCall, Context, Enforcer, Issue,
    Policy, ScriptedRunner, Status, StopReason, Validation, Validator,
};

fn ladder(rungs: &[Reask]) -> Ladder {
    Ladder::new(rungs.to_vec()).expect("rungs")
}

/// `follow_up` or `ask` per call.
fn kinds(runner: &ScriptedRunner) -> Vec<&'static str> {
    runner
        .calls()
        .iter()
        .map(|call| match call {
            ScriptedCall::Ask { .. } => "ask",
            ScriptedCall::FollowUp { .. } => "follow_up",
            _ => "other",
        })
        .collect()
}

#[tokio::test]
async fn each_reask_takes_the_next_rung_and_the_last_repeats() {
    let runner = ScriptedRunner::texts(["a", "bb", "ccc", "title"]);
    let policy = Policy::builder()
        .max_retries(3)
        .reask(ladder(&[Reask::FeedbackFresh, Reask::Feedback]))
        .build();
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy.clone())
        .run(&runner, &req(), &Context::new())
        .await;
    // The same error three times: no progress on the feedback rung ends it once every rung
    // was tried, so the second feedback re-ask never happens.
    assert_eq!(outcome.stop_reason, StopReason::NoProgress, "{outcome:?}");
    assert_eq!(kinds(&runner), ["ask", "ask", "follow_up"]);
    let rungs: Vec<_> = outcome.attempts.iter().map(|a| a.reask).collect();
    assert_eq!(
        rungs,
        [None, Some(Reask::FeedbackFresh), Some(Reask::Feedback)]
    );

    // With progress (a new error each time), the last rung repeats.
    let runner = ScriptedRunner::texts(["a", "bb", "ccc", "title"]);
    let outcome = Enforcer::new(vec![Box::new(Counted)])
        .with_policy(policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(kinds(&runner), ["ask", "ask", "follow_up", "follow_up"]);
}

/// An error naming the answer's length, so every different answer is progress.
struct Counted;

#[async_trait]
impl Validator for Counted {
    fn name(&self) -> &str {
        "counted"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("title") {
            vec![]
        } else {
            vec![Issue::error(
                "counted",
                format!("NO_TITLE_{}", response.len()),
                "Title.",
            )]
        })
    }
}

#[tokio::test]
async fn no_progress_climbs_to_the_next_rung_and_ends_the_loop_on_the_last() {
    let rungs = ladder(&[Reask::Feedback, Reask::Resample]);
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(Policy::builder().reask(rungs.clone()).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(kinds(&runner), ["ask", "follow_up", "ask"]);
    let audited: Vec<_> = outcome.attempts.iter().map(|a| a.reask).collect();
    assert_eq!(
        audited,
        [None, Some(Reask::Feedback), Some(Reask::Resample)]
    );

    // On the last (here the only) rung no progress ends the loop...
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(Policy::builder().reask(Reask::Feedback).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::NoProgress, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 2);

    // ...unless the policy makes every attempt, as the seed documents' loop does.
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let policy = Policy::builder()
        .reask(Reask::Feedback)
        .max_retries(2)
        .stop_on_no_progress(false)
        .build();
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 3);
    assert_eq!(kinds(&runner), ["ask", "follow_up", "follow_up"]);
}

#[tokio::test]
async fn a_byte_identical_repeat_is_no_progress_even_when_resampled() {
    let runner = ScriptedRunner::texts(["same", "same", "title"]);
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(Policy::builder().reask(Reask::Resample).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::NoProgress, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 2);

    // Different answers with the same error are independent draws: the loop goes on.
    let runner = ScriptedRunner::texts(["one", "two", "title"]);
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(Policy::builder().reask(Reask::Resample).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
}

#[test]
fn a_ladder_reads_one_strategy_or_a_list_and_never_an_empty_one() {
    let one: Ladder = serde_json::from_str("\"resample\"").unwrap();
    assert_eq!(one.rungs(), [Reask::Resample]);
    let many: Ladder = serde_json::from_str("[\"feedback\", \"resample\"]").unwrap();
    assert_eq!(many.rungs(), [Reask::Feedback, Reask::Resample]);
    assert!(serde_json::from_str::<Ladder>("[]").is_err());
    assert_eq!(serde_json::to_string(&one).unwrap(), "\"resample\"");
    assert_eq!(
        serde_json::to_string(&many).unwrap(),
        "[\"feedback\",\"resample\"]"
    );
}
