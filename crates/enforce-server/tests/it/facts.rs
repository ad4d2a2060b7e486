//! Facts per request: `enforce.context` in the body (openai SDKs' `extra_body`) and the
//! `X-Enforce-Context` header reach validators and fallback templates; `enforce` never reaches
//! the runner; bad facts are a 400 before any model call.

use crate::common::{server_with, Harness};
use enforce_core::{
    async_trait, scripted::ScriptedCall, Context, Enforcer, Issue, Policy, Runner, ScriptedRunner,
    Validation, Validator,
};
use enforce_server::{ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

/// Fails an answer that does not name the company the request's facts give.
struct NamesCompany;

#[async_trait]
impl Validator for NamesCompany {
    fn name(&self) -> &str {
        "names_company"
    }
    async fn validate(&self, response: &str, context: &Context) -> Validation {
        let Some(company) = context.get_str("company_name") else {
            return Ok(vec![Issue::error(
                "names_company",
                "NO_COMPANY_FACT",
                "The request carried no company_name.",
            )]);
        };
        Ok(if response.contains(company) {
            Vec::new()
        } else {
            vec![Issue::error(
                "names_company",
                "COMPANY_NAME_MISSING",
                format!("The answer does not name {company}."),
            )]
        })
    }
}

fn setup(answers: Vec<&'static str>) -> (Arc<ScriptedRunner>, Enforcer) {
    let runner = Arc::new(ScriptedRunner::texts(answers));
    let enforcer = Enforcer::new(vec![Box::new(NamesCompany)]).with_policy(
        Policy::builder()
            .max_retries(0)
            .fallback("{{company_name}} will answer you personally.")
            .build(),
    );
    (runner, enforcer)
}

fn body(extra: Value) -> Value {
    let mut body = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "Who builds it?"}],
        "temperature": 0.2,
    });
    if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
        b.extend(e);
    }
    body
}

async fn post(h: &Harness, body: &Value, header: Option<&str>) -> reqwest::Response {
    let headers: Vec<(&str, &str)> = header
        .map(|v| ("X-Enforce-Context", v))
        .into_iter()
        .collect();
    h.post("/v1/chat/completions", body, &headers).await
}

fn status(resp: &reqwest::Response) -> String {
    resp.headers()
        .get("x-enforce-status")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[tokio::test]
async fn body_facts_reach_validators_and_are_not_forwarded() {
    let (runner, enforcer) = setup(vec!["ACME builds it."]);
    let server = server_with(
        ServerConfig::default(),
        runner.clone() as Arc<dyn Runner>,
        enforcer,
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = post(
        &h,
        &body(json!({"enforce": {"context": {"company_name": "ACME", "tags": ["a", "b"]}}})),
        None,
    )
    .await;
    assert_eq!(resp.status(), 200);
    assert_eq!(status(&resp), "passed");
    let calls = runner.calls();
    let ScriptedCall::Ask { request } = &calls[0] else {
        panic!("first call is an ask: {calls:?}");
    };
    assert!(
        !request.params.contains_key("enforce"),
        "{:?}",
        request.params
    );
    assert_eq!(
        request.params["temperature"], 0.2,
        "other fields still pass"
    );
    h.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn header_facts_count_and_the_body_wins_on_a_shared_key() {
    let (runner, enforcer) = setup(vec!["Globex builds it."; 2]);
    let server = server_with(
        ServerConfig::default(),
        runner as Arc<dyn Runner>,
        enforcer,
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = post(&h, &body(json!({})), Some(r#"{"company_name": "Globex"}"#)).await;
    assert_eq!(status(&resp), "passed", "the header's fact was used");
    let resp = post(
        &h,
        &body(json!({"enforce": {"context": {"company_name": "ACME"}}})),
        Some(r#"{"company_name": "Globex"}"#),
    )
    .await;
    assert_eq!(status(&resp), "unresolved", "the body's fact won");
    h.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn fallback_templates_render_request_facts() {
    let (runner, enforcer) = setup(vec!["Somebody builds it."]);
    let server = server_with(
        ServerConfig::default(),
        runner as Arc<dyn Runner>,
        enforcer,
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let resp = post(
        &h,
        &body(json!({"enforce": {"context": {"company_name": "ACME"}}})),
        None,
    )
    .await;
    assert_eq!(resp.status(), 200);
    let json: Value = resp.json().await.expect("json");
    assert_eq!(
        json["choices"][0]["message"]["content"],
        "ACME will answer you personally."
    );
    h.shutdown().await.expect("shutdown");
}

#[tokio::test]
async fn bad_facts_are_a_400_before_any_model_call() {
    let config = ServerConfig {
        max_context_bytes: 64,
        ..ServerConfig::default()
    };
    let (runner, enforcer) = setup(vec!["ACME builds it."]);
    let server = server_with(
        config,
        runner.clone() as Arc<dyn Runner>,
        enforcer,
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let long = "x".repeat(100);
    let cases: Vec<(Value, Option<&str>, &str)> = vec![
        (body(json!({})), Some("{broken"), "not valid JSON"),
        (body(json!({})), Some(r#"["a"]"#), "must be a JSON object"),
        (
            body(json!({"enforce": {"context": "ACME"}})),
            None,
            "must be a JSON object",
        ),
        (
            body(json!({"enforce": {"context": {"company": {"name": "ACME"}}}})),
            None,
            "value of `company`",
        ),
        (
            body(json!({"enforce": {"context": {"company_name": long}}})),
            None,
            "larger than this proxy accepts",
        ),
    ];
    for (request, header, expected) in cases {
        let resp = post(&h, &request, header).await;
        assert_eq!(resp.status(), 400, "{expected}");
        let json: Value = resp.json().await.expect("json");
        assert_eq!(json["error"]["type"], "invalid_request_error");
        let message = json["error"]["message"].as_str().unwrap_or_default();
        assert!(message.contains(expected), "{message}");
    }
    assert!(runner.calls().is_empty(), "no model call for bad facts");
    h.shutdown().await.expect("shutdown");
}
