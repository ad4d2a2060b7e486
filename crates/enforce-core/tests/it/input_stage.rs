//! The input stage: checks of the request before the first model call.

use enforce_core::{
    async_trait, context::keys, input::ContextSource, input::InputAction, input::InputStage,
    input::OnInputFailure, input::Reformulation, input::Reformulator, input::RunnerReformulator,
    scripted::ScriptedCall, Context, Enforcer, FailMode, Issue, Message, Outcome, Request,
    RunnerError, ScriptedRunner, Status, StopReason, Unavailable, Validation, Validator,
    ValidatorExt,
};
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Fails a question that does not mention "hash"; records the contexts it saw.
#[derive(Default)]
struct Relevance {
    seen: Mutex<Vec<Context>>,
}

#[async_trait]
impl Validator for Relevance {
    fn name(&self) -> &str {
        "relevance"
    }
    async fn validate(&self, text: &str, context: &Context) -> Validation {
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(context.clone());
        }
        Ok(if text.contains("hash") {
            Vec::new()
        } else {
            vec![Issue::error(
                "",
                "CONTEXT_NOT_RELEVANT",
                "The sources do not cover this.",
            )]
        })
    }
}

/// Always without a verdict.
struct Down;

#[async_trait]
impl Validator for Down {
    fn name(&self) -> &str {
        "judge"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Err(Unavailable::new("connection refused"))
    }
}

/// A reformulation hook with a fixed answer.
struct FixedHook(Result<Reformulation, String>);

#[async_trait]
impl Reformulator for FixedHook {
    fn kind(&self) -> &str {
        "test"
    }
    async fn reformulate(
        &self,
        context: &Context,
        issues: &[Issue],
    ) -> Result<Reformulation, String> {
        assert_eq!(context.get_str(keys::QUESTION), Some("What about colours?"));
        assert_eq!(issues[0].code, "CONTEXT_NOT_RELEVANT");
        self.0.clone()
    }
}

fn rag_request(question: &str) -> Request {
    Request {
        messages: vec![
            Message::system("Use the sources.\n<context>\nSHA-256 chunk\n</context>"),
            Message::user(question),
        ],
        ..Request::default()
    }
}

fn section() -> ContextSource {
    ContextSource::Section {
        start: "<context>".into(),
        end: "</context>".into(),
    }
}

fn asked(runner: &ScriptedRunner) -> Vec<Request> {
    runner
        .calls()
        .into_iter()
        .map(|call| match call {
            ScriptedCall::Ask { request } | ScriptedCall::FollowUp { request, .. } => request,
            other => panic!("unexpected call {other:?}"),
        })
        .collect()
}

fn record(outcome: &Outcome) -> Value {
    serde_json::from_str(&outcome.to_json_line()).expect("audit JSON")
}

#[tokio::test]
async fn a_relevant_question_passes_and_the_validator_sees_the_request() {
    let relevance = Arc::new(Relevance::default());
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Arc::clone(&relevance))]).context_source(section()),
    );
    let runner = ScriptedRunner::texts(["Use encodeSHA256."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("How do I hash?"),
            &Context::new().with("team", "a"),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let input = outcome.input.as_ref().expect("input record");
    assert!(input.passed);
    assert_eq!(input.action, InputAction::None);
    let seen = relevance.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.get_str(keys::QUESTION), Some("How do I hash?"));
    assert_eq!(seen.get_str(keys::RETRIEVED_CONTEXT), Some("SHA-256 chunk"));
    assert_eq!(seen.get_str("team"), Some("a"));
    assert_eq!(record(&outcome)["input"]["action"], "none");
    // The request goes out as it came.
    assert_eq!(asked(&runner)[0], rag_request("How do I hash?"));
}

#[tokio::test]
async fn reject_asks_no_model() {
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())]).on_failure(OnInputFailure::Reject),
    );
    let runner = ScriptedRunner::texts(["never sent"]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    assert!(runner.calls().is_empty());
    assert_eq!(outcome.status, Status::Aborted);
    assert_eq!(outcome.stop_reason, StopReason::InputRejected);
    assert!(outcome.attempts.is_empty() && outcome.response.is_none());
    let json = record(&outcome);
    assert_eq!(json["stop_reason"]["reason"], "input_rejected");
    assert_eq!(json["input"]["action"], "rejected");
    assert_eq!(json["input"]["passed"], false);
    assert_eq!(json["input"]["issues"][0]["code"], "CONTEXT_NOT_RELEVANT");
    // The record reads back.
    let back: Outcome = serde_json::from_str(&outcome.to_json_line()).expect("reads back");
    assert_eq!(back, outcome);
}

#[tokio::test]
async fn hint_appends_the_note_then_generates() {
    let note = "The sources may not answer this: say so instead of guessing.";
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())])
            .on_failure(OnInputFailure::Hint(note.into())),
    );
    let runner = ScriptedRunner::texts(["The sources do not say."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(
        outcome.input.as_ref().map(|i| i.action),
        Some(InputAction::Hinted)
    );
    let sent = asked(&runner);
    assert_eq!(
        sent[0].messages[1].content,
        format!("What about colours?\n\n{note}")
    );
    assert_eq!(sent[0].messages[0], rag_request("").messages[0]);
}

#[tokio::test]
async fn reformulate_generates_with_the_new_question_and_context() {
    let hook = FixedHook(Ok(Reformulation {
        question: Some("How are colours hashed?".into()),
        context: Some(Value::from(vec!["colour chunk"])),
    }));
    let relevance = Arc::new(Relevance::default());
    let enforcer = Enforcer::new(vec![Box::new(ReadsRequest)]).with_input(
        InputStage::new(vec![Box::new(Arc::clone(&relevance))])
            .on_failure(OnInputFailure::Reformulate)
            .context_source(section())
            .reformulator(Arc::new(hook)),
    );
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let sent = asked(&runner);
    assert_eq!(sent.len(), 1, "one generation, no second input check");
    assert_eq!(sent[0].messages[1].content, "How are colours hashed?");
    assert_eq!(
        sent[0].messages[0].content,
        "Use the sources.\n<context>\ncolour chunk\n</context>"
    );
    assert_eq!(
        relevance.seen.lock().unwrap().len(),
        1,
        "the input is checked once"
    );
    let input = outcome.input.as_ref().expect("input record");
    assert_eq!(input.action, InputAction::Reformulated);
    let r = input.reformulation.as_ref().expect("reformulation");
    assert_eq!(r.hook, "test");
    assert_eq!(r.question.as_deref(), Some("How are colours hashed?"));
    assert!(r.context_changed && r.error.is_none());
    assert_eq!(record(&outcome)["input"]["reformulation"]["hook"], "test");
}

/// An output validator that reads the request: it must see the reformulated question.
struct ReadsRequest;

#[async_trait]
impl Validator for ReadsRequest {
    fn name(&self) -> &str {
        "grounded"
    }
    async fn validate(&self, _: &str, context: &Context) -> Validation {
        Ok(match context.get_str(keys::QUESTION) {
            Some(q) if !q.is_empty() => Vec::new(),
            _ => vec![Issue::error("", "NO_QUESTION", "The question was not given.").hard_abort()],
        }
        .into_iter()
        .chain(match context.get_str(keys::RETRIEVED_CONTEXT) {
            Some("colour chunk") | None => None,
            Some(other) => Some(Issue::error("", "STALE_CONTEXT", other).hard_abort()),
        })
        .collect())
    }
    fn reads_request(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn a_failing_hook_generates_with_the_original_and_says_so() {
    let hook = FixedHook(Err("retrieval service answered 503".into()));
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())])
            .on_failure(OnInputFailure::Reformulate)
            .reformulator(Arc::new(hook)),
    );
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(asked(&runner)[0], rag_request("What about colours?"));
    let input = outcome.input.as_ref().expect("input record");
    assert_eq!(input.action, InputAction::ReformulationFailed);
    let r = input.reformulation.as_ref().expect("reformulation");
    assert_eq!(r.error.as_deref(), Some("retrieval service answered 503"));
    assert_eq!(
        record(&outcome)["input"]["reformulation"]["error"],
        "retrieval service answered 503"
    );
}

#[tokio::test]
async fn an_empty_reformulation_counts_as_a_failed_hook() {
    let hook = FixedHook(Ok(Reformulation::default()));
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())])
            .on_failure(OnInputFailure::Reformulate)
            .reformulator(Arc::new(hook)),
    );
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    let input = outcome.input.expect("input record");
    assert_eq!(input.action, InputAction::ReformulationFailed);
    assert_eq!(asked(&runner)[0], rag_request("What about colours?"));
}

#[tokio::test]
async fn the_runner_reformulator_asks_with_its_template() {
    let model = Arc::new(ScriptedRunner::texts(["  How are colours hashed?\n"]));
    let hook = RunnerReformulator::new(
        Arc::clone(&model) as Arc<dyn enforce_core::Runner>,
        "Rewrite for search. Question: {{question}} Found: {{context}} Why: {{issues}} Team: {{team}}",
    );
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())])
            .on_failure(OnInputFailure::Reformulate)
            .context_source(section())
            .reformulator(Arc::new(hook)),
    );
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new().with("team", "blue"),
        )
        .await;
    let prompt = &asked(&model)[0].messages[0].content;
    assert_eq!(
        prompt,
        "Rewrite for search. Question: What about colours? Found: SHA-256 chunk Why: The sources do not cover this. Team: blue"
    );
    assert_eq!(
        asked(&runner)[0].messages[1].content,
        "How are colours hashed?"
    );
    assert_eq!(
        outcome.input.map(|i| i.action),
        Some(InputAction::Reformulated)
    );
}

#[tokio::test]
async fn the_runner_reformulator_fails_on_a_model_error() {
    let model = Arc::new(ScriptedRunner::new([Err(RunnerError::Protocol {
        message: "down".into(),
    })]));
    let enforcer = Enforcer::new(vec![]).with_input(
        InputStage::new(vec![Box::new(Relevance::default())])
            .on_failure(OnInputFailure::Reformulate)
            .reformulator(Arc::new(RunnerReformulator::new(model, "{{question}}"))),
    );
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(
            &runner,
            &rag_request("What about colours?"),
            &Context::new(),
        )
        .await;
    let input = outcome.input.expect("input record");
    assert_eq!(input.action, InputAction::ReformulationFailed);
    assert!(input.reformulation.unwrap().error.unwrap().contains("down"));
}

#[tokio::test]
async fn a_fail_closed_input_validator_without_verdict_asks_no_model() {
    let enforcer = Enforcer::new(vec![]).with_input(InputStage::new(vec![Box::new(
        Down.with_fail_mode(FailMode::Closed),
    )]));
    let runner = ScriptedRunner::texts(["never sent"]);
    let outcome = enforcer
        .run(&runner, &rag_request("How do I hash?"), &Context::new())
        .await;
    assert!(runner.calls().is_empty());
    assert_eq!(outcome.status, Status::Unavailable);
    assert_eq!(outcome.input.as_ref().map(|i| i.passed), Some(false));
    assert_eq!(
        outcome
            .stop_reason
            .unavailable()
            .map(|u| u.validator.as_str()),
        Some("judge")
    );
}

#[tokio::test]
async fn a_fail_closed_input_validator_s_unavailable_status_is_recorded() {
    let enforcer = Enforcer::new(vec![]).with_input(InputStage::new(vec![Box::new(
        Down.with_fail_mode(FailMode::Closed)
            .with_unavailable_status("JUDGE_DOWN"),
    )]));
    let outcome = enforcer
        .run(
            &ScriptedRunner::texts(["never sent"]),
            &rag_request("How do I hash?"),
            &Context::new(),
        )
        .await;
    assert_eq!(outcome.status, Status::Unavailable);
    assert_eq!(outcome.unavailable_status("judge"), Some("JUDGE_DOWN"));
}

#[tokio::test]
async fn a_fail_open_input_validator_without_verdict_lets_the_request_through() {
    let enforcer = Enforcer::new(vec![]).with_input(InputStage::new(vec![Box::new(
        Down.with_fail_mode(FailMode::Open),
    )]));
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = enforcer
        .run(&runner, &rag_request("How do I hash?"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let input = outcome.input.expect("input record");
    assert!(input.passed);
    assert_eq!(
        input.issues[0].code,
        enforce_core::validator::VALIDATOR_UNAVAILABLE
    );
}

#[tokio::test]
async fn without_an_input_stage_the_record_has_no_input() {
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = Enforcer::new(vec![])
        .run(&runner, &rag_request("q"), &Context::new())
        .await;
    assert!(outcome.input.is_none());
    assert!(record(&outcome).get("input").is_none());
}

#[tokio::test]
async fn output_validators_that_read_the_request_see_it_without_an_input_stage() {
    let runner = ScriptedRunner::texts(["Answer."]);
    let outcome = Enforcer::new(vec![Box::new(ReadsRequest)])
        .run(&runner, &Request::prompt("q"), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed, "{:?}", outcome.issues);
}
