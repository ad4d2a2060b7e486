//! The rules of the loop that a real model's answers exposed: no cut fragment is ever the
//! answer, progress is judged on (code, line, message), truncation is an issue, cut attempts
//! carry an estimated usage, `repair: first`, `reask: resample | feedback_fresh`, and the
//! feedback after a cut names what the partial answer still misses.

use crate::early_abort::{Forbidden, BAD, GOOD};
use crate::req;
use enforce_core::{
    async_trait, enforcer::FINISH_REASON, enforcer::TRUNCATED, policy::BudgetKind, policy::Reask,
    policy::RepairWhen, runner::FinishReason, scripted::ScriptedCall, Budget, Context, Enforcer,
    Issue, Message, Policy, Reply, Request, Role, ScriptedRunner, Status, StopReason, Usage,
    Validation, Validator,
};

fn every(bytes: usize) -> Policy {
    Policy::builder().partial_check_bytes(bytes).build()
}

/// Requires `word`; no partial check (it can only judge whole answers); the repair appends it
/// when `repairs`.
struct Requires {
    word: &'static str,
    line: fn(&str) -> Option<u32>,
    repairs: bool,
}

impl Requires {
    fn new(word: &'static str) -> Self {
        Requires {
            word,
            line: |_| None,
            repairs: false,
        }
    }
}

#[async_trait]
impl Validator for Requires {
    fn name(&self) -> &str {
        "requires"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains(self.word) {
            vec![]
        } else {
            let mut issue = Issue::error(
                "requires",
                "MISSING_WORD",
                format!("\"{}\" is missing.", self.word),
            );
            issue.line = (self.line)(response);
            vec![issue]
        })
    }
    fn repair(&self, response: &str, _: &Context, _: &[Issue]) -> Option<String> {
        self.repairs
            .then(|| format!("{} {}", response.trim_end(), self.word))
    }
    fn repair_fixes(&self, _: &Issue) -> bool {
        self.repairs
    }
}

#[tokio::test]
async fn a_budget_stop_right_after_a_cut_never_delivers_the_fragment() {
    // No earlier whole answer: no response at all (and the fallback, when there is one).
    let tight = Policy::builder()
        .partial_check_bytes(8)
        .budget(Budget {
            max_tokens: Some(1),
            ..Budget::default()
        })
        .build();
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
    let outcome = Enforcer::new(vec![Box::new(Forbidden::new("Acme"))])
        .with_policy(tight.clone())
        .run(&runner, &req(), &Context::new())
        .await;
    assert!(outcome.attempts[0].cut.is_some());
    assert_eq!(
        outcome.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::Tokens
        }
    );
    assert_eq!(outcome.status, Status::Unresolved);
    assert_eq!(outcome.response, None, "never the part received");

    // An earlier whole answer: that one is the outcome's response. The first answer ends
    // with the word (nothing follows it, so only the whole check sees it); the second is cut.
    let ends_with_term = "We recommend Acme";
    let runner = ScriptedRunner::texts([ends_with_term, BAD, GOOD]).streamed(4);
    // The whole answer reports no usage; the cut one does: the budget ends at the cut.
    let outcome = Enforcer::new(vec![Box::new(Forbidden::new("Acme"))])
        .with_policy(tight)
        .run(&runner, &req(), &Context::new())
        .await;
    assert!(outcome.attempts[0].cut.is_none(), "{outcome:?}");
    assert!(outcome.attempts[1].cut.is_some(), "{outcome:?}");
    assert!(matches!(outcome.stop_reason, StopReason::Budget { .. }));
    assert_eq!(outcome.response.as_deref(), Some(ends_with_term));
}

#[tokio::test]
async fn progress_is_a_different_set_of_code_line_and_message() {
    // The same code at another line is progress: the loop asks again.
    let moving = Requires {
        line: |t| u32::try_from(t.len()).ok(),
        ..Requires::new("title")
    };
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let outcome = Enforcer::new(vec![Box::new(moving)])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 3);

    // The same code, line and message twice: no progress.
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.stop_reason, StopReason::NoProgress);
    assert_eq!(outcome.attempts.len(), 2);
}

#[tokio::test]
async fn a_truncated_answer_is_an_issue_listed_first_and_audited() {
    let truncated = Reply {
        finish_reason: Some(FinishReason::Length),
        ..Reply::text("{\"a\": [1, 2")
    };
    let runner = ScriptedRunner::new([Ok(truncated), Ok(Reply::text("title"))]);
    let mut request = req();
    request
        .params
        .insert("max_tokens".into(), serde_json::json!(16));
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .run(&runner, &request, &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let first = &outcome.attempts[0];
    assert_eq!(first.finish_reason, Some(FinishReason::Length));
    assert_eq!(first.issues[0].code, TRUNCATED);
    assert_eq!(first.issues[0].validator, FINISH_REASON);
    assert!(first.issues[0].is_error());
    let record: serde_json::Value = serde_json::from_str(&outcome.to_json_line()).unwrap();
    assert_eq!(record["attempts"][0]["finish_reason"], "length");
    assert!(record["attempts"][1].get("finish_reason").is_none());

    // A truncated answer that passes every validator passes, with a warning.
    let runner = ScriptedRunner::new([Ok(Reply {
        finish_reason: Some(FinishReason::Length),
        ..Reply::text("title and more")
    })]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.warnings[0].code, TRUNCATED);
}

/// The re-ask after `truncated` (asked with `request` under `policy`): the request sent and
/// the outcome.
async fn reask_after_truncation(
    truncated: Reply,
    request: &Request,
    policy: Policy,
) -> (Request, enforce_core::Outcome) {
    let runner = ScriptedRunner::new([Ok(truncated), Ok(Reply::text("title"))]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .with_policy(policy)
        .run(&runner, request, &Context::new())
        .await;
    match &runner.calls()[1] {
        ScriptedCall::Ask { request } => (request.clone(), outcome),
        other => panic!("a fresh ask, not feedback: {other:?}"),
    }
}

#[tokio::test]
async fn a_truncated_answer_is_reasked_with_more_room_and_a_shorter_instruction() {
    let truncated = Reply {
        finish_reason: Some(FinishReason::Length),
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: 16,
        }),
        ..Reply::text("{\"a\": [1, 2")
    };
    let mut request = req();
    request
        .params
        .insert("max_tokens".into(), serde_json::json!(16));
    let (sent, outcome) =
        reask_after_truncation(truncated.clone(), &request, Policy::default()).await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(sent.params["max_tokens"], 32, "twice the limit it hit");
    assert_eq!(
        sent.messages[..request.messages.len()],
        request.messages[..]
    );
    let instruction = &sent.messages[request.messages.len()..];
    assert_eq!(instruction.len(), 1, "{instruction:?}");
    assert!(
        instruction[0].content.contains("more briefly"),
        "{instruction:?}"
    );
    assert!(
        !instruction[0].content.contains("MISSING_WORD"),
        "no feedback about the symptoms: {instruction:?}"
    );
    assert_eq!(outcome.attempts[1].more_room, Some(32));
    assert_eq!(
        outcome.attempts[1].reask, None,
        "no rung of the ladder was used"
    );

    // Within the token budget: 40 - 26 spent leaves 14, less than the 16 it had; never less.
    let budget = Budget {
        max_tokens: Some(40),
        ..Budget::default()
    };
    let policy = Policy::builder().budget(budget).build();
    let (sent, _) = reask_after_truncation(truncated.clone(), &request, policy).await;
    assert_eq!(sent.params["max_tokens"], 16);
    let budget = Budget {
        max_tokens: Some(50),
        ..Budget::default()
    };
    let policy = Policy::builder().budget(budget).build();
    let (sent, _) = reask_after_truncation(truncated.clone(), &request, policy).await;
    assert_eq!(sent.params["max_tokens"], 24, "what the budget has left");

    // No limit in the request: the tokens the answer used were the limit.
    let (sent, _) = reask_after_truncation(truncated, &req(), Policy::default()).await;
    assert_eq!(sent.params["max_tokens"], 32);
}

#[tokio::test]
async fn a_cut_attempt_without_a_usage_report_counts_an_estimate_that_budgets_see() {
    let runner = ScriptedRunner::texts([BAD, GOOD])
        .streamed(4)
        .without_usage();
    let outcome = Enforcer::new(vec![Box::new(Forbidden::new("Acme"))])
        .with_policy(every(8))
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let cut = &outcome.attempts[0];
    assert!(cut.cut.is_some());
    assert!(cut.usage_estimated);
    let usage = cut.usage.expect("an estimate");
    // One token per streamed delta; the prompt's bytes / 4.
    assert_eq!(
        usage.output_tokens,
        runner.delivered()[0].div_ceil(4) as u64
    );
    assert_eq!(usage.input_tokens, "Write it.".len().div_ceil(4) as u64);
    assert!(!outcome.attempts[1].usage_estimated);
    assert_eq!(outcome.usage, Some(usage), "the outcome's spend counts it");
    let record: serde_json::Value = serde_json::from_str(&outcome.to_json_line()).unwrap();
    assert_eq!(record["attempts"][0]["usage_estimated"], true);
    assert!(record["attempts"][1].get("usage_estimated").is_none());

    // A token budget sees the estimate: the cut alone spends it.
    let runner = ScriptedRunner::texts([BAD, GOOD])
        .streamed(4)
        .without_usage();
    let policy = Policy::builder()
        .partial_check_bytes(8)
        .budget(Budget {
            max_tokens: Some(usage.total()),
            ..Budget::default()
        })
        .build();
    let outcome = Enforcer::new(vec![Box::new(Forbidden::new("Acme"))])
        .with_policy(policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(
        outcome.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::Tokens
        }
    );
}

#[tokio::test]
async fn repair_first_returns_a_clean_repair_without_a_reask() {
    let repairs = || Requires {
        repairs: true,
        ..Requires::new("END")
    };
    let runner = ScriptedRunner::texts(["text", "text END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs())])
        .with_policy(Policy::builder().repair(RepairWhen::First).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Repaired);
    assert_eq!(outcome.response.as_deref(), Some("text END"));
    assert_eq!(runner.calls().len(), 1, "no re-ask");
    assert_eq!(outcome.attempts[0].repairs, vec!["requires"]);

    // `last` (the default) re-asks first.
    let runner = ScriptedRunner::texts(["text", "text END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs())])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(runner.calls().len(), 2);

    // A repair that does not make the answer clean is not returned: the loop re-asks.
    let runner = ScriptedRunner::texts(["text", "title END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs()), Box::new(Requires::new("title"))])
        .with_policy(Policy::builder().repair(RepairWhen::First).build())
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(runner.calls().len(), 2);
}

#[tokio::test]
async fn repair_first_codes_repair_those_codes_before_a_reask_and_only_those() {
    let repairs = || Requires {
        repairs: true,
        ..Requires::new("END")
    };
    let first_for = |codes: &[&str]| {
        Policy::builder()
            .repair_first_codes(codes.iter().copied())
            .build()
    };
    // The attempt's only error has a listed code: repaired at once, with `repair: last`.
    let runner = ScriptedRunner::texts(["text", "text END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs())])
        .with_policy(first_for(&["MISSING_WORD"]))
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Repaired);
    assert_eq!(runner.calls().len(), 1, "no re-ask");

    // Another code is listed: the loop re-asks as `last` does.
    let runner = ScriptedRunner::texts(["text", "text END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs())])
        .with_policy(first_for(&["INVALID_JSON"]))
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(runner.calls().len(), 2);

    // An error with a code not listed beside it: re-asked, though the listed one repairs.
    let other = Forbidden::new("Acme");
    let runner = ScriptedRunner::texts(["text Acme", "text END"]);
    let outcome = Enforcer::new(vec![Box::new(repairs()), Box::new(other)])
        .with_policy(first_for(&["MISSING_WORD"]))
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(runner.calls().len(), 2);
}

#[tokio::test]
async fn an_earlier_answer_a_repair_makes_clean_beats_an_unresolved_last_one() {
    // The first answer only lacks what the repair adds; the re-asks go wrong in a way no
    // repair fixes. Asking again must not end worse than one attempt and a repair.
    let repairs = || Requires {
        repairs: true,
        ..Requires::new("END")
    };
    let runner = ScriptedRunner::texts(["title", "x", "y"]);
    let outcome = Enforcer::new(vec![Box::new(repairs()), Box::new(Requires::new("title"))])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(runner.calls().len(), 3);
    assert_eq!(outcome.status, Status::Repaired, "{outcome:?}");
    assert_eq!(outcome.response.as_deref(), Some("title END"));
    assert!(outcome.issues.is_empty(), "{:?}", outcome.issues);
    assert_eq!(
        outcome.attempts[0].repairs,
        vec!["requires"],
        "the repair is audited on attempt 1"
    );

    // With nothing repairable anywhere it stays unresolved, on the last answer (the same
    // error twice: no progress).
    let runner = ScriptedRunner::texts(["a", "b", "c"]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Unresolved);
    assert_eq!(outcome.response.as_deref(), Some("b"));
}

fn seeded() -> Request {
    let mut request = req();
    request.params.insert("seed".into(), serde_json::json!(41));
    request
        .params
        .insert("temperature".into(), serde_json::json!(0.7));
    request
}

#[tokio::test]
async fn resample_asks_the_original_request_again_with_the_seed_advanced() {
    let runner = ScriptedRunner::texts(["a", "bb", "ccc"]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .with_policy(Policy::builder().reask(Reask::Resample).build())
        .run(&runner, &seeded(), &Context::new())
        .await;
    assert_eq!(outcome.attempts.len(), 3, "{outcome:?}");
    let seeds: Vec<serde_json::Value> = runner
        .calls()
        .iter()
        .map(|call| match call {
            ScriptedCall::Ask { request } => {
                assert_eq!(request.messages, seeded().messages, "the original messages");
                assert_eq!(request.params["temperature"], 0.7);
                request.params["seed"].clone()
            }
            other => panic!("a fresh ask, not a follow-up: {other:?}"),
        })
        .collect();
    assert_eq!(seeds, vec![41, 42, 43]);
}

#[tokio::test]
async fn feedback_fresh_sends_the_feedback_without_the_failed_answer() {
    let runner = ScriptedRunner::texts(["the failed answer", "title"]);
    let outcome = Enforcer::new(vec![Box::new(Requires::new("title"))])
        .with_policy(Policy::builder().reask(Reask::FeedbackFresh).build())
        .run(&runner, &seeded(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let calls = runner.calls();
    let ScriptedCall::Ask { request } = &calls[1] else {
        panic!("a fresh ask: {calls:?}")
    };
    let original = seeded().messages;
    assert_eq!(request.messages[..original.len()], original[..]);
    assert_eq!(request.messages.len(), original.len() + 1);
    let feedback: &Message = &request.messages[original.len()];
    assert_eq!(feedback.role, Role::User);
    assert!(feedback.content.contains("[MISSING_WORD]"), "{feedback:?}");
    assert!(request
        .messages
        .iter()
        .all(|m| !m.content.contains("the failed answer")));
    assert_eq!(request.params["seed"], 42, "a new draw");
}

#[tokio::test]
async fn feedback_after_a_cut_lists_what_a_full_check_of_the_part_still_misses() {
    let runner =
        ScriptedRunner::texts([BAD, "Sources: none. We recommend a local supplier."]).streamed(4);
    let outcome = Enforcer::new(vec![
        Box::new(Forbidden::new("Acme")),
        Box::new(Requires::new("Sources:")),
    ])
    .with_policy(every(8))
    .run(&runner, &req(), &Context::new())
    .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let feedback = runner.calls()[1].feedback().unwrap().to_string();
    assert!(feedback.contains("[FORBIDDEN]"), "{feedback}");
    assert!(
        feedback.contains("[MISSING_WORD] \"Sources:\" is missing."),
        "{feedback}"
    );
    // The attempt's audit keeps the errors that cut it.
    assert_eq!(outcome.attempts[0].issues.len(), 1);
}

/// A code's own retry budget stops the re-asks of answers with that error early (one
/// regeneration, then the end), while errors of other codes keep the profile's budget.
#[tokio::test]
async fn a_code_s_retry_budget_limits_the_reasks_of_that_code_only() {
    let run = |policy: Policy| async move {
        let runner = ScriptedRunner::texts(["a", "b", "c", "d END"]);
        let outcome = Enforcer::new(vec![Box::new(Requires::new("END"))])
            .with_policy(policy)
            .run(&runner, &req(), &Context::new())
            .await;
        (outcome, runner.calls().len())
    };
    // Resampled, so the same error twice is no reason to stop: only the budgets count.
    let base = || Policy::builder().max_retries(3).reask(Reask::Resample);
    let (limited, calls) = run(base().max_retries_for("MISSING_WORD", 1).build()).await;
    assert_eq!(calls, 2, "one regeneration, then no more");
    assert_eq!(limited.status, Status::Unresolved);
    assert_eq!(limited.stop_reason, StopReason::RetriesExhausted);

    let (other, calls) = run(base().max_retries_for("INVALID_JSON", 1).build()).await;
    assert_eq!(calls, 4, "another code's budget does not apply");
    assert_eq!(other.status, Status::Passed);

    // The profile's own limit still holds below a code's larger budget.
    let (capped, calls) = run(base()
        .max_retries(1)
        .max_retries_for("MISSING_WORD", 5)
        .build())
    .await;
    assert_eq!(calls, 2);
    assert_eq!(capped.status, Status::Unresolved);
}
