//! The strategies beyond asking the same runner again: reason-then-format (a free answer,
//! then the same answer in the contract's format), escalate (the re-ask goes to a second
//! model) and constrained (a resample with the decoding constraint, which the other rungs
//! then leave out).

use crate::req;
use crate::seeds::NeedsTitle;
use enforce_core::enforcer::{CONSTRAINT_UNAVAILABLE, ESCALATION_NO_TARGET};
use enforce_core::policy::{FirstAttempt, Ladder, Reask};
use enforce_core::runner::Role;
use enforce_core::scripted::ScriptedCall;
use enforce_core::{
    async_trait, Ask, Context, Enforcer, Issue, Policy, Reply, ReplyStream, Request, Runner,
    ScriptedRunner, Status, StopReason, Usage, Validation, Validator,
};
use serde_json::json;
use std::sync::{Arc, Mutex};

/// A small model that knows the answer (4) but loses it to the format instruction: asked
/// with the decoding constraint (`response_format`) it writes the format with a wrong value,
/// unless the conversation already holds its plain answer, which it then copies; asked
/// without the constraint it answers in plain words, correctly.
#[derive(Default)]
struct StrainedByFormat {
    asks: Mutex<Vec<Request>>,
}

impl StrainedByFormat {
    fn asks(&self) -> Vec<Request> {
        self.asks.lock().unwrap().clone()
    }
}

impl Runner for StrainedByFormat {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let request = ask.request.clone();
        self.asks.lock().unwrap().push(request.clone());
        let constrained = request.params.contains_key("response_format");
        let reasoned = request
            .messages
            .iter()
            .any(|m| m.role == Role::Assistant && m.content.contains("is 4"));
        let text = match (constrained, reasoned) {
            (false, _) => "Two and two is 4.",
            (true, true) => r#"{"answer": 4}"#,
            (true, false) => r#"{"answer": 5}"#,
        };
        let reply = Reply {
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 5,
            }),
            ..Reply::text(text)
        };
        ReplyStream::whole(async move { Ok(reply) })
    }
}

/// The contract: `{"answer": 4}`, nothing else.
struct AnswerIsFour;

#[async_trait]
impl Validator for AnswerIsFour {
    fn name(&self) -> &str {
        "answer"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(match serde_json::from_str::<serde_json::Value>(response) {
            Ok(value) if value == json!({"answer": 4}) => vec![],
            Ok(_) => vec![Issue::error(
                "answer",
                "WRONG_ANSWER",
                "The answer is wrong.",
            )],
            Err(_) => vec![Issue::error("answer", "NOT_JSON", "Answer as JSON.")],
        })
    }
}

/// The request as a caller with `decode: constrained` sends it.
fn constrained_request() -> Request {
    let mut request = Request::prompt("What is two and two? Answer as {\"answer\": N}.");
    request
        .params
        .insert("response_format".into(), json!({"type": "json_object"}));
    request.params.insert("temperature".into(), json!(0.2));
    request.constraint_params = vec!["response_format".into()];
    request
}

fn enforcer(policy: Policy) -> Enforcer {
    Enforcer::new(vec![Box::new(AnswerIsFour)]).with_policy(policy)
}

#[tokio::test]
async fn reason_then_format_gets_the_answer_that_feedback_loses_to_the_format() {
    let model = StrainedByFormat::default();
    let feedback = enforcer(
        Policy::builder()
            .max_retries(2)
            .reask(Reask::Feedback)
            .build(),
    )
    .run(&model, &constrained_request(), &Context::new())
    .await;
    assert_ne!(feedback.status, Status::Passed, "{feedback:?}");

    let model = StrainedByFormat::default();
    let policy = Policy::builder()
        .max_retries(2)
        .reask(Reask::ReasonThenFormat)
        .build();
    let outcome = enforcer(policy)
        .run(&model, &constrained_request(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.response.as_deref(), Some(r#"{"answer": 4}"#));
    let asks = model.asks();
    assert_eq!(
        asks.len(),
        3,
        "a first ask, then the free and the format call"
    );
    // The free call: no constraint, the other parameters kept, an instruction to answer
    // in plain words.
    let free = &asks[1];
    assert!(!free.params.contains_key("response_format"), "{free:?}");
    assert_eq!(free.params["temperature"], json!(0.2));
    assert!(free.constraint_params.is_empty());
    assert!(free.last_user_text().unwrap().contains("plain words"));
    // The format call: the constraint, the free answer, and the feedback on attempt 1.
    let format = &asks[2];
    assert_eq!(
        format.params["response_format"],
        json!({"type": "json_object"})
    );
    let last = format.messages.last().unwrap();
    assert_eq!(last.role, Role::User);
    assert!(last.content.contains("The answer is wrong."), "{last:?}");
    let answered = &format.messages[format.messages.len() - 2];
    assert_eq!(
        (answered.role, answered.content.as_str()),
        (Role::Assistant, "Two and two is 4.")
    );
    // One attempt in the audit, its rung named, both calls in its usage.
    assert_eq!(outcome.attempts.len(), 2);
    let second = &outcome.attempts[1];
    assert_eq!(second.reask, Some(Reask::ReasonThenFormat));
    let free = second.free_answer.expect("the free call is recorded");
    assert_eq!(free.response_bytes, "Two and two is 4.".len());
    assert_eq!(
        second.usage,
        Some(Usage {
            input_tokens: 20,
            output_tokens: 10
        })
    );
    assert_eq!(
        outcome.usage.map(|u| u.total()),
        Some(45),
        "three calls count"
    );
}

#[tokio::test]
async fn the_free_call_counts_in_the_token_budget() {
    let model = StrainedByFormat::default();
    let policy = Policy::builder()
        .max_retries(3)
        .reask(Reask::ReasonThenFormat)
        .budget(enforce_core::Budget {
            max_tokens: Some(15),
            ..enforce_core::Budget::default()
        })
        .build();
    // The first attempt spends 15 tokens: no re-ask is left.
    let outcome = enforcer(policy)
        .run(&model, &constrained_request(), &Context::new())
        .await;
    assert!(
        matches!(outcome.stop_reason, StopReason::Budget { .. }),
        "{outcome:?}"
    );
    assert_eq!(model.asks().len(), 1);

    // A first attempt that reasons first spends 30 over two calls.
    let model = StrainedByFormat::default();
    let policy = Policy::builder()
        .max_retries(3)
        .first_attempt(FirstAttempt::ReasonThenFormat)
        .budget(enforce_core::Budget {
            max_tokens: Some(40),
            ..enforce_core::Budget::default()
        })
        .build();
    let outcome = enforcer(policy)
        .run(&model, &constrained_request(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 1);
    assert_eq!(outcome.attempts[0].reask, None);
    assert!(outcome.attempts[0].free_answer.is_some());
    assert_eq!(outcome.usage.map(|u| u.total()), Some(30));
}

#[tokio::test]
async fn a_first_attempt_that_reasons_first_makes_two_calls() {
    let model = StrainedByFormat::default();
    let policy = Policy::builder()
        .max_retries(0)
        .first_attempt(FirstAttempt::ReasonThenFormat)
        .build();
    let outcome = enforcer(policy)
        .run(&model, &constrained_request(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let asks = model.asks();
    assert_eq!(asks.len(), 2);
    assert!(!asks[0].params.contains_key("response_format"));
    assert!(asks[1].params.contains_key("response_format"));
    // No feedback on a first attempt: only the format instruction.
    assert!(!asks[1].last_user_text().unwrap().contains("rejected"));
}

#[tokio::test]
async fn a_failed_free_call_is_a_failed_attempt() {
    let runner = ScriptedRunner::new([Err(enforce_core::RunnerError::Protocol {
        message: "broken".into(),
    })]);
    let policy = Policy::builder()
        .first_attempt(FirstAttempt::ReasonThenFormat)
        .build();
    let outcome = enforcer(policy)
        .run(&runner, &constrained_request(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Aborted, "{outcome:?}");
    assert_eq!(runner.calls().len(), 1);
    assert_eq!(outcome.attempts.len(), 1);
    assert!(outcome.attempts[0].runner_error.is_some());
}

#[tokio::test]
async fn escalate_asks_the_escalation_model_with_feedback_and_says_so() {
    let main = ScriptedRunner::texts(["no heading", "never asked"]);
    let big = Arc::new(ScriptedRunner::texts(["title: done"]));
    let policy = Policy::builder()
        .max_retries(2)
        .reask(enforce_core::policy::Ladder::from(Reask::Escalate))
        .build();
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy)
        .with_escalation("big-model", big.clone())
        .run(&main, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    assert_eq!(main.calls().len(), 1);
    let calls = big.calls();
    assert_eq!(calls.len(), 1);
    assert!(
        matches!(&calls[0], ScriptedCall::FollowUp { previous, .. } if previous == "no heading"),
        "{calls:?}"
    );
    let audited: Vec<_> = outcome
        .attempts
        .iter()
        .map(|a| (a.reask, a.escalated_to.as_deref()))
        .collect();
    assert_eq!(
        audited,
        [(None, None), (Some(Reask::Escalate), Some("big-model"))]
    );
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let line = outcome.to_json_line();
    assert!(line.contains(r#""escalated_to":"big-model""#), "{line}");
}

#[tokio::test]
async fn escalate_without_a_target_asks_the_main_model_and_warns() {
    let main = ScriptedRunner::texts(["no heading", "still none", "title: done"]);
    let policy = Policy::builder()
        .max_retries(2)
        .reask(Reask::Escalate)
        .stop_on_no_progress(false)
        .build();
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy)
        .run(&main, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let kinds: Vec<bool> = main
        .calls()
        .iter()
        .map(|c| c.feedback().is_some())
        .collect();
    assert_eq!(kinds, [false, true, true], "re-asks with feedback");
    assert!(outcome.attempts.iter().all(|a| a.escalated_to.is_none()));
    let warned: Vec<_> = outcome.warnings.iter().map(|w| w.code.as_str()).collect();
    assert_eq!(warned, [ESCALATION_NO_TARGET], "said once");
}

/// Per call: whether it carried the constraint (`response_format`, named in
/// `constraint_params`), and whether it was a follow-up.
fn constrained_calls(runner: &ScriptedRunner) -> Vec<(bool, bool)> {
    runner
        .calls()
        .iter()
        .map(|call| {
            let (request, follow_up) = match call {
                ScriptedCall::Ask { request } => (request, false),
                ScriptedCall::FollowUp { request, .. } => (request, true),
                other => panic!("an unknown call: {other:?}"),
            };
            let sent = request.params.contains_key("response_format");
            assert_eq!(
                sent,
                !request.constraint_params.is_empty(),
                "the constraint and its names travel together: {request:?}"
            );
            assert_eq!(request.params["temperature"], json!(0.2), "{request:?}");
            (sent, follow_up)
        })
        .collect()
}

fn ladder(rungs: &[Reask]) -> Ladder {
    Ladder::new(rungs.to_vec()).expect("rungs")
}

/// The outcome of asking `runner` for `request` under [`NeedsTitle`], with `max_retries`
/// re-asks on the ladder `rungs`.
async fn titled(
    runner: &ScriptedRunner,
    request: &Request,
    max_retries: u32,
    rungs: &[Reask],
) -> enforce_core::Outcome {
    let policy = Policy::builder()
        .max_retries(max_retries)
        .reask(ladder(rungs))
        .build();
    let outcome = Enforcer::new(vec![Box::new(NeedsTitle)])
        .with_policy(policy)
        .run(runner, request, &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    outcome
}

/// The rung of every attempt, as the audit names it.
fn rungs_of(outcome: &enforce_core::Outcome) -> Vec<Option<Reask>> {
    outcome.attempts.iter().map(|a| a.reask).collect()
}

#[tokio::test]
async fn only_the_constrained_rung_sends_the_constraint() {
    let runner = ScriptedRunner::texts(["a", "bb", "ccc", "title"]);
    let rungs = [Reask::Constrained, Reask::Resample, Reask::Feedback];
    let outcome = titled(&runner, &constrained_request(), 3, &rungs).await;
    // The first answer is free, the first re-ask constrained, then free again.
    assert_eq!(
        constrained_calls(&runner),
        [(false, false), (true, false), (false, false), (false, true)]
    );
    let audited: Vec<_> = rungs.into_iter().map(Some).collect();
    assert_eq!(rungs_of(&outcome)[1..], audited);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    let line = outcome.to_json_line();
    assert!(line.contains(r#""reask":"constrained""#), "{line}");
}

#[tokio::test]
async fn without_a_constrained_rung_every_attempt_keeps_the_constraint() {
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let rungs = [Reask::Resample, Reask::Feedback];
    titled(&runner, &constrained_request(), 2, &rungs).await;
    assert_eq!(
        constrained_calls(&runner),
        [(true, false), (true, false), (true, true)]
    );
}

#[tokio::test]
async fn a_constrained_rung_without_a_constraint_resamples_and_warns_once() {
    let runner = ScriptedRunner::texts(["a", "bb", "title"]);
    let outcome = titled(&runner, &req(), 2, &[Reask::Constrained]).await;
    let calls = runner.calls();
    assert!(
        calls.iter().all(
            |c| matches!(c, ScriptedCall::Ask { request } if request.messages == req().messages)
        ),
        "fresh asks of the original request: {calls:?}"
    );
    assert_eq!(calls.len(), 3);
    let warned: Vec<_> = outcome.warnings.iter().map(|w| w.code.as_str()).collect();
    assert_eq!(warned, [CONSTRAINT_UNAVAILABLE], "said once");
    assert_eq!(
        rungs_of(&outcome),
        [None, Some(Reask::Constrained), Some(Reask::Constrained)]
    );
}

#[tokio::test]
async fn a_truncated_answer_gets_room_before_the_constrained_rung() {
    let cut = Reply {
        finish_reason: Some(enforce_core::runner::FinishReason::Length),
        ..Reply::text("a tit")
    };
    let runner = ScriptedRunner::new([
        Ok(cut),
        Ok(Reply::text("no heading")),
        Ok(Reply::text("title")),
    ]);
    let mut request = constrained_request();
    request.params.insert("max_tokens".into(), json!(16));
    let outcome = titled(&runner, &request, 2, &[Reask::Constrained]).await;
    assert_eq!(
        constrained_calls(&runner),
        [(false, false), (false, false), (true, false)]
    );
    let room: Vec<_> = outcome.attempts.iter().map(|a| a.more_room).collect();
    assert_eq!(room, [None, Some(32), None]);
    assert_eq!(rungs_of(&outcome), [None, None, Some(Reask::Constrained)]);
}

#[tokio::test]
async fn reason_then_format_keeps_the_constraint_for_its_format_call_beside_a_constrained_rung() {
    let model = StrainedByFormat::default();
    let policy = Policy::builder()
        .max_retries(1)
        .first_attempt(FirstAttempt::ReasonThenFormat)
        .reask(ladder(&[Reask::Constrained]))
        .build();
    let outcome = enforcer(policy)
        .run(&model, &constrained_request(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let constrained: Vec<bool> = model
        .asks()
        .iter()
        .map(|r| r.params.contains_key("response_format"))
        .collect();
    assert_eq!(constrained, [false, true]);
}
