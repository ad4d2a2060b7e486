//! Reason-then-format on the real model: a free call without the grammar, then the format
//! call with it, whose answer alone is validated.

use crate::shared_runner;
use enforce_core::policy::FirstAttempt;
use enforce_core::runner::Role;
use enforce_core::{
    async_trait, Ask, Context, Enforcer, Issue, Policy, ReplyStream, Request, Runner, Status,
    Validation, Validator,
};
use serde_json::{json, Value};
use std::sync::Mutex;

/// Records every request it passes on to the model, and the answers.
struct Recorder<'r> {
    inner: &'r dyn Runner,
    asked: Mutex<Vec<Request>>,
}

impl Runner for Recorder<'_> {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        self.asked.lock().unwrap().push(ask.request.clone());
        self.inner.ask(ask)
    }
}

/// The contract: a JSON object with an integer `answer`.
struct IntegerAnswer;

#[async_trait]
impl Validator for IntegerAnswer {
    fn name(&self) -> &str {
        "integer_answer"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        let value: Option<Value> = serde_json::from_str(response).ok();
        Ok(match value.as_ref().and_then(|v| v.get("answer")) {
            Some(answer) if answer.is_i64() || answer.is_u64() => vec![],
            _ => vec![Issue::error(
                "integer_answer",
                "NO_INTEGER_ANSWER",
                "Answer with a JSON object holding an integer `answer`.",
            )],
        })
    }
}

#[tokio::test]
async fn reason_then_format_asks_freely_then_with_the_grammar_and_validates_the_second() {
    let Some(model) = shared_runner() else {
        return;
    };
    let schema = json!({
        "type": "object",
        "properties": {"answer": {"type": "integer", "minimum": 0, "maximum": 1000}},
        "required": ["answer"],
        "additionalProperties": false
    });
    let mut request = Request::prompt("What is 2 + 3? Reply as JSON: {\"answer\": N}.");
    request.params = json!({
        "max_tokens": 48, "seed": 5, "temperature": 0,
        "response_format": {"type": "json_schema", "json_schema": {"name": "contract", "schema": schema}}
    })
    .as_object()
    .cloned()
    .unwrap();
    request.constraint_params = vec!["response_format".into()];
    let recorder = Recorder {
        inner: model,
        asked: Mutex::new(Vec::new()),
    };
    let policy = Policy::builder()
        .max_retries(0)
        .first_attempt(FirstAttempt::ReasonThenFormat)
        .build();
    let outcome = Enforcer::new(vec![Box::new(IntegerAnswer)])
        .with_policy(policy)
        .run(&recorder, &request, &Context::new())
        .await;

    let asked = recorder.asked.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "a free call and a format call");
    assert!(!asked[0].params.contains_key("response_format"));
    assert!(asked[0]
        .last_user_text()
        .is_some_and(|t| t.contains("plain words")));
    assert_eq!(
        asked[1].params["response_format"],
        request.params["response_format"]
    );
    let attempt = &outcome.attempts[0];
    let free = attempt.free_answer.expect("the free call is audited");
    // The format call carries the free answer the model gave.
    let given = &asked[1].messages[asked[1].messages.len() - 2];
    assert_eq!(given.role, Role::Assistant);
    assert_eq!(given.content.len(), free.response_bytes);
    // The grammar makes the second answer fit, and it is that answer the validator judged.
    assert_eq!(outcome.status, Status::Passed, "{outcome:?}");
    let response = outcome.response.as_deref().expect("an answer");
    assert_eq!(attempt.response_bytes, response.len());
    assert_ne!(given.content, response, "the free answer is not the answer");
    let value: Value = serde_json::from_str(response).expect("JSON");
    assert!(value["answer"].is_u64(), "{response}");
    let usage = attempt.usage.expect("usage");
    let free_usage = free.usage.expect("free usage");
    assert!(
        usage.output_tokens > free_usage.output_tokens,
        "both calls count: {usage:?} vs {free_usage:?}"
    );
}
