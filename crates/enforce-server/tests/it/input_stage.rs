//! The input stage through the proxy: a rejected request is a 400 with no model call, a
//! reformulated one says so in `enforcement.input`, a body pointer finds the retrieved context,
//! and streams carry the same verdicts.

use crate::common::{server_with, Harness};
use enforce_core::{
    async_trait, context::keys, input::ContextSource, input::InputStage, input::OnInputFailure,
    input::Reformulation, input::Reformulator, scripted::ScriptedCall, Context, Enforcer, Issue,
    Runner, ScriptedRunner, Validation, Validator,
};
use enforce_server::{ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

/// Fails a request whose retrieved context does not mention a word of the question.
struct Relevance;

#[async_trait]
impl Validator for Relevance {
    fn name(&self) -> &str {
        "relevance"
    }
    async fn validate(&self, question: &str, context: &Context) -> Validation {
        let retrieved = context
            .get(keys::RETRIEVED_CONTEXT)
            .map(enforce_core::input::retrieved_text)
            .unwrap_or_default()
            .to_lowercase();
        let relevant = question
            .split_whitespace()
            .any(|w| w.len() > 3 && retrieved.contains(&w.to_lowercase()));
        Ok(if relevant {
            Vec::new()
        } else {
            vec![Issue::error(
                "",
                "CONTEXT_NOT_RELEVANT",
                "The retrieved context does not cover the question.",
            )]
        })
    }
}

struct Rewrite;

#[async_trait]
impl Reformulator for Rewrite {
    fn kind(&self) -> &str {
        "test"
    }
    async fn reformulate(&self, _: &Context, _: &[Issue]) -> Result<Reformulation, String> {
        Ok(Reformulation {
            question: Some("How do hashes work?".into()),
            context: None,
        })
    }
}

fn harness_parts(on_failure: OnInputFailure) -> (Arc<ScriptedRunner>, Enforcer) {
    let runner = Arc::new(ScriptedRunner::texts(["Hashes map data to digests."; 2]));
    let stage = InputStage::new(vec![Box::new(Relevance)])
        .on_failure(on_failure)
        .context_source(ContextSource::Pointer("/metadata/context".into()))
        .reformulator(Arc::new(Rewrite));
    (runner, Enforcer::new(vec![]).with_input(stage))
}

fn body(question: &str, stream: bool) -> Value {
    json!({
        "model": "m",
        "stream": stream,
        "messages": [{"role": "user", "content": question}],
        "metadata": {"context": ["Hashing turns data into a digest."]},
    })
}

async fn post(h: &Harness, body: &Value) -> reqwest::Response {
    h.post("/v1/chat/completions", body, &[]).await
}

async fn start(on_failure: OnInputFailure) -> (Arc<ScriptedRunner>, Harness) {
    let (runner, enforcer) = harness_parts(on_failure);
    let server = server_with(
        ServerConfig::default(),
        runner.clone() as Arc<dyn Runner>,
        enforcer,
        ModelOptions::default(),
    );
    (runner, Harness::start(server).await)
}

#[tokio::test]
async fn a_relevant_request_passes_with_its_input_verdict() {
    let (runner, h) = start(OnInputFailure::Reject).await;
    let resp = post(&h, &body("Explain hashing please", false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["enforcement"]["input"]["passed"], true);
    assert_eq!(v["enforcement"]["input"]["action"], "none");
    assert_eq!(runner.calls().len(), 1);
    h.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_rejected_request_is_a_400_without_a_model_call() {
    let (runner, h) = start(OnInputFailure::Reject).await;
    let resp = post(&h, &body("What colour is the sky?", false)).await;
    assert_eq!(resp.status(), 400);
    let v: Value = resp.json().await.expect("json");
    assert_eq!(v["error"]["code"], "input_rejected");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("CONTEXT_NOT_RELEVANT"),
        "{v}"
    );
    assert_eq!(v["enforcement"]["input"]["action"], "rejected");
    assert!(runner.calls().is_empty());

    // Streamed: an error event, still without a model call.
    let text = post(&h, &body("What colour is the sky?", true))
        .await
        .text()
        .await
        .expect("body");
    assert!(text.contains("input_rejected"), "{text}");
    assert!(runner.calls().is_empty());
    h.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn a_reformulated_request_reaches_the_model_rewritten() {
    let (runner, h) = start(OnInputFailure::Reformulate).await;
    let resp = post(&h, &body("What colour is the sky?", false)).await;
    assert_eq!(resp.status(), 200);
    let v: Value = resp.json().await.expect("json");
    let input = &v["enforcement"]["input"];
    assert_eq!(input["action"], "reformulated", "{v}");
    assert_eq!(input["reformulation"]["question"], "How do hashes work?");
    let calls = runner.calls();
    let ScriptedCall::Ask { request } = &calls[0] else {
        panic!("an ask: {calls:?}")
    };
    assert_eq!(
        request.messages.last().unwrap().content,
        "How do hashes work?"
    );
    h.shutdown().await.expect("shutdown");
}
