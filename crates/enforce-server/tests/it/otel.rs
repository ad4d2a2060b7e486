//! OpenTelemetry traces and audit logs (feature `otel`): the proxy exports to an OTLP/HTTP
//! receiver that the test runs itself on 127.0.0.1, which decodes each protobuf body and keeps
//! the spans and log records.

use crate::common::{marker_enforcer_retries, Harness};
use axum::body::Bytes;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use enforce_core::Runner;
use enforce_runner::{OpenAiConfig, OpenAiRunner};
use enforce_server::{KeyGrant, Model, ModelOptions, OtlpConfig, Server, ServerConfig};
use enforce_testkit::{MockOpenAi, MockReply, MockScript};
use opentelemetry_proto::tonic::collector::logs::v1::{
    ExportLogsServiceRequest, ExportLogsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};

/// What the receiver got: each export's headers and decoded body.
#[derive(Default)]
struct Received {
    exports: Vec<(HeaderMap, ExportTraceServiceRequest)>,
    logs: Vec<ExportLogsServiceRequest>,
}

/// An OTLP/HTTP receiver on a free loopback port; stops with the test's runtime.
struct Receiver {
    url: String,
    received: Arc<Mutex<Received>>,
}

/// A route that decodes an export `E`, keeps it with `keep` and answers `A`, as a receiver
/// does.
fn export_route<E, A>(
    received: &Arc<Mutex<Received>>,
    keep: fn(&mut Received, HeaderMap, E),
) -> axum::routing::MethodRouter
where
    E: Message + Default + Send + 'static,
    A: Message + Default,
{
    let store = received.clone();
    post(move |headers: HeaderMap, body: Bytes| {
        let store = store.clone();
        async move {
            let Ok(request) = E::decode(body) else {
                return (StatusCode::BAD_REQUEST, Vec::new());
            };
            keep(&mut store.lock().unwrap(), headers, request);
            (StatusCode::OK, A::default().encode_to_vec())
        }
    })
}

impl Receiver {
    async fn start() -> Receiver {
        let received = Arc::new(Mutex::new(Received::default()));
        let app = axum::Router::new()
            .route(
                "/v1/traces",
                export_route::<_, ExportTraceServiceResponse>(&received, |r, headers, e| {
                    r.exports.push((headers, e))
                }),
            )
            .route(
                "/v1/logs",
                export_route::<_, ExportLogsServiceResponse>(&received, |r, _, e| r.logs.push(e)),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Receiver {
            url: format!("http://{addr}"),
            received,
        }
    }

    fn log_records(&self) -> Vec<LogRecord> {
        let received = self.received.lock().unwrap();
        received
            .logs
            .iter()
            .flat_map(|r| &r.resource_logs)
            .flat_map(|r| &r.scope_logs)
            .flat_map(|s| s.log_records.clone())
            .collect()
    }

    fn spans(&self) -> Vec<Span> {
        let received = self.received.lock().unwrap();
        received
            .exports
            .iter()
            .flat_map(|(_, r)| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| s.spans.clone())
            .collect()
    }
}

fn attr<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a any_value::Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v: &AnyValue| v.value.as_ref())
}

fn string(span: &Span, key: &str) -> String {
    match attr(&span.attributes, key) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => panic!("{}: {key} is not a string: {other:?}", span.name),
    }
}

fn int(span: &Span, key: &str) -> i64 {
    match attr(&span.attributes, key) {
        Some(any_value::Value::IntValue(n)) => *n,
        other => panic!("{}: {key} is not an int: {other:?}", span.name),
    }
}

fn boolean(span: &Span, key: &str) -> bool {
    match attr(&span.attributes, key) {
        Some(any_value::Value::BoolValue(b)) => *b,
        other => panic!("{}: {key} is not a bool: {other:?}", span.name),
    }
}

fn strings(span: &Span, key: &str) -> Vec<String> {
    match attr(&span.attributes, key) {
        Some(any_value::Value::ArrayValue(array)) => array
            .values
            .iter()
            .map(|v| match &v.value {
                Some(any_value::Value::StringValue(s)) => s.clone(),
                other => panic!("{key} holds a non-string {other:?}"),
            })
            .collect(),
        other => panic!("{}: {key} is not an array: {other:?}", span.name),
    }
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn openai_runner(base: &str) -> Arc<dyn Runner> {
    Arc::new(
        OpenAiRunner::new(OpenAiConfig {
            base_url: base.to_string(),
            model: "mock-model".into(),
            ..OpenAiConfig::default()
        })
        .expect("runner"),
    )
}

/// A configuration exporting to `receiver`, auditing into `dir`.
fn traced_config(receiver: &Receiver, dir: &tempfile::TempDir) -> ServerConfig {
    let mut otlp = OtlpConfig::to_endpoint(&receiver.url).expect("endpoint");
    otlp.service_name = "enforce-under-test".into();
    otlp.headers
        .insert("x-collector-key".into(), "k-123".into());
    ServerConfig {
        audit_log: Some(dir.path().join("audit.jsonl")),
        audit_fsync: enforce_server::FsyncPolicy::Always,
        otlp: Some(otlp),
        ..ServerConfig::default()
    }
}

/// A proxy in front of `mock` exporting to `receiver`, auditing into `dir`.
fn traced_server(
    mock: &MockOpenAi,
    receiver: &Receiver,
    dir: &tempfile::TempDir,
    repairs: bool,
    max_retries: u32,
) -> Server {
    let config = traced_config(receiver, dir);
    let model = marker_model(mock, repairs, max_retries);
    Server::builder(config).model(model).build().unwrap()
}

/// Model `m` in front of `mock`, held to the step marker.
fn marker_model(mock: &MockOpenAi, repairs: bool, max_retries: u32) -> Model {
    Model::new(
        "m",
        openai_runner(&mock.url()),
        Arc::new(marker_enforcer_retries(repairs, max_retries)),
    )
    .with_upstream_model("mock-model")
}

/// Asks `model` through the chat surface.
async fn chat(harness: &Harness, model: &str) -> reqwest::Response {
    harness
        .client
        .post(harness.url("/v1/chat/completions"))
        .json(&json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap()
}

/// `service.name` of an export's resource.
fn service_name(resource: Option<&Resource>) -> String {
    match attr(&resource.expect("a resource").attributes, "service.name") {
        Some(any_value::Value::StringValue(name)) => name.clone(),
        other => panic!("service.name: {other:?}"),
    }
}

fn audit(dir: &tempfile::TempDir) -> Value {
    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    serde_json::from_str(text.lines().last().expect("an audit line")).unwrap()
}

const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CALLER_SPAN: &str = "00f067aa0ba902b7";

#[tokio::test]
async fn a_reasked_request_exports_request_attempt_and_validator_spans() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("An answer without the marker."),
        MockReply::text("An answer.\n<!-- STEP: why -->"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::start(traced_server(&mock, &receiver, &dir, false, 2)).await;
    let response = harness
        .client
        .post(harness.url("/v1/chat/completions"))
        .header("traceparent", format!("00-{TRACE_ID}-{CALLER_SPAN}-01"))
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    harness.shutdown().await.unwrap();
    // The graceful stop flushed the batch: everything is here, no waiting.
    let spans = receiver.spans();
    let audit = audit(&dir);
    assert_eq!(audit["status"], "passed");

    {
        let received = receiver.received.lock().unwrap();
        let (headers, first) = &received.exports[0];
        assert_eq!(headers["content-type"], "application/x-protobuf");
        assert_eq!(headers["x-collector-key"], "k-123");
        let resource = first.resource_spans[0].resource.as_ref();
        assert_eq!(service_name(resource), "enforce-under-test");
    }

    let requests = named(&spans, "chat_completion");
    assert_eq!(requests.len(), 1, "one request span: {spans:#?}");
    let request = requests[0];
    // The caller's traceparent is the parent: the proxy joins the caller's trace.
    assert_eq!(hex(&request.trace_id), TRACE_ID);
    assert_eq!(hex(&request.parent_span_id), CALLER_SPAN);
    assert_eq!(string(request, "enforce.status"), "passed");
    assert_eq!(string(request, "enforce.model"), "m");
    assert_eq!(int(request, "enforce.attempts"), 2);
    assert!(strings(request, "enforce.issue_codes").is_empty());

    let attempts = named(&spans, "chat mock-model");
    assert_eq!(attempts.len(), 2, "one span per attempt: {spans:#?}");
    let mut attempts = attempts;
    attempts.sort_by_key(|s| int(s, "enforce.attempt"));
    for (i, attempt) in attempts.iter().enumerate() {
        assert_eq!(attempt.trace_id, request.trace_id);
        assert_eq!(
            attempt.parent_span_id, request.span_id,
            "attempt under the request"
        );
        assert_eq!(int(attempt, "enforce.attempt"), i as i64 + 1);
        assert_eq!(string(attempt, "gen_ai.operation.name"), "chat");
        assert_eq!(string(attempt, "gen_ai.request.model"), "mock-model");
        // Token usage as the upstream reported it, the same the audit recorded.
        let usage = &audit["attempts"][i]["usage"];
        assert!(usage["output_tokens"].as_i64().unwrap() > 0, "{usage}");
        assert_eq!(
            int(attempt, "gen_ai.usage.input_tokens"),
            usage["input_tokens"].as_i64().unwrap()
        );
        assert_eq!(
            int(attempt, "gen_ai.usage.output_tokens"),
            usage["output_tokens"].as_i64().unwrap()
        );
        assert!(attempt.start_time_unix_nano >= request.start_time_unix_nano);
        assert!(attempt.end_time_unix_nano <= request.end_time_unix_nano);
    }
    assert_eq!(
        strings(attempts[0], "enforce.issue_codes"),
        ["MISSING_STEP_MARKER"]
    );
    assert_eq!(string(attempts[0], "enforce.attempt.status"), "rejected");
    assert!(strings(attempts[1], "enforce.issue_codes").is_empty());
    assert_eq!(string(attempts[1], "enforce.attempt.status"), "passed");
    assert!(attempts[1].start_time_unix_nano >= attempts[0].end_time_unix_nano);

    let validators = named(&spans, "validate step_marker");
    assert_eq!(
        validators.len(),
        2,
        "one span per validator run: {spans:#?}"
    );
    for (attempt, codes) in attempts.iter().zip([vec!["MISSING_STEP_MARKER"], vec![]]) {
        let under: Vec<_> = validators
            .iter()
            .filter(|v| v.parent_span_id == attempt.span_id)
            .collect();
        assert_eq!(under.len(), 1, "the validator run under its attempt");
        assert_eq!(strings(under[0], "enforce.issue_codes"), codes);
        assert_eq!(string(under[0], "enforce.validator"), "step_marker");
        assert!(!boolean(under[0], "enforce.repaired"));
        assert!(under[0].start_time_unix_nano >= attempt.start_time_unix_nano);
    }
    assert_eq!(spans.len(), 5, "nothing else: {spans:#?}");
}

#[tokio::test]
async fn a_repaired_stream_traces_the_repair_and_the_recheck() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("No marker here.")))
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let harness = Harness::start(traced_server(&mock, &receiver, &dir, true, 0)).await;
    let response = harness
        .chat(json!({"model": "m", "stream": true,
                     "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(response.status(), 200);
    let _ = response.text().await.unwrap();
    harness.shutdown().await.unwrap();
    let spans = receiver.spans();

    let request = named(&spans, "chat_completion")[0];
    assert_eq!(string(request, "enforce.status"), "repaired");
    assert!(boolean(request, "enforce.stream"));
    // No caller trace: the request span is a root.
    assert!(request.parent_span_id.is_empty());
    let attempts = named(&spans, "chat mock-model");
    assert_eq!(attempts.len(), 1);
    let attempt = attempts[0];
    assert_eq!(attempt.parent_span_id, request.span_id);
    let repairs: Vec<_> = attempt
        .events
        .iter()
        .filter(|e| e.name == "repair")
        .collect();
    assert_eq!(repairs.len(), 1, "{:?}", attempt.events);
    let mut runs = named(&spans, "validate step_marker");
    runs.sort_by_key(|s| s.start_time_unix_nano);
    assert_eq!(runs.len(), 2, "the response and its repair: {spans:#?}");
    assert!(runs.iter().all(|r| r.parent_span_id == attempt.span_id));
    assert!(!boolean(runs[0], "enforce.repaired"));
    assert_eq!(
        strings(runs[0], "enforce.issue_codes"),
        ["MISSING_STEP_MARKER"]
    );
    assert!(boolean(runs[1], "enforce.repaired"));
    assert!(strings(runs[1], "enforce.issue_codes").is_empty());
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Forbids a word; its partial check reports the word once it is complete, so a streamed
/// answer is cut there.
struct Forbidden;

impl Forbidden {
    fn issue() -> enforce_core::Issue {
        enforce_core::Issue::error("forbidden", "FORBIDDEN_WORD", "Acme is not to be named.")
    }
    fn found(text: &str) -> bool {
        text.contains("Acme ")
    }
}

#[enforce_core::async_trait]
impl enforce_core::Validator for Forbidden {
    fn name(&self) -> &str {
        "forbidden"
    }
    async fn validate(
        &self,
        response: &str,
        _: &enforce_core::Context,
    ) -> enforce_core::Validation {
        Ok(if Self::found(response) {
            vec![Self::issue()]
        } else {
            vec![]
        })
    }
    fn partial_check<'a>(
        &'a self,
        _: &'a enforce_core::Context,
    ) -> Option<Box<dyn enforce_core::PartialCheck + 'a>> {
        Some(Box::new(ForbiddenCheck))
    }
}

struct ForbiddenCheck;

#[enforce_core::async_trait]
impl enforce_core::PartialCheck for ForbiddenCheck {
    async fn check(&mut self, prefix: &str) -> Vec<enforce_core::Issue> {
        if Forbidden::found(prefix) {
            vec![Forbidden::issue()]
        } else {
            vec![]
        }
    }
}

#[tokio::test]
async fn an_attempt_cut_short_is_marked_on_its_span() {
    const BAD: &str = "We recommend Acme products: a fine choice for a long list of reasons.";
    let receiver = Receiver::start().await;
    let runner =
        enforce_core::ScriptedRunner::texts([BAD, "We recommend a local supplier."]).streamed(4);
    let enforcer = enforce_core::Enforcer::new(vec![Box::new(Forbidden)]).with_policy(
        enforce_core::Policy::builder()
            .early_abort(true)
            .partial_check_bytes(8)
            .build(),
    );
    let config = ServerConfig {
        otlp: Some(OtlpConfig::to_endpoint(&receiver.url).unwrap()),
        ..ServerConfig::default()
    };
    let server = Server::builder(config)
        .model(Model::new("m", Arc::new(runner), Arc::new(enforcer)))
        .build()
        .unwrap();
    let harness = Harness::start(server).await;
    let response = harness
        .chat(json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(response.status(), 200);
    harness.shutdown().await.unwrap();
    let spans = receiver.spans();

    // Without an upstream model name the attempts are named after the public id.
    let mut attempts = named(&spans, "chat m");
    attempts.sort_by_key(|s| int(s, "enforce.attempt"));
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    assert_eq!(string(attempts[0], "enforce.attempt.status"), "cut");
    assert_eq!(
        strings(attempts[0], "enforce.issue_codes"),
        ["FORBIDDEN_WORD"]
    );
    let cut = int(attempts[0], "enforce.cut_bytes");
    assert!(cut > 0 && cut < BAD.len() as i64, "cut at {cut}");
    assert_eq!(string(attempts[1], "enforce.attempt.status"), "passed");
    // The cut answer was never validated whole: only the second attempt has a validator run.
    let runs = named(&spans, "validate forbidden");
    assert_eq!(runs.len(), 1, "{spans:#?}");
    assert_eq!(runs[0].parent_span_id, attempts[1].span_id);
    let request = named(&spans, "chat_completion")[0];
    assert_eq!(string(request, "enforce.status"), "passed");
}

#[tokio::test]
async fn the_request_span_names_the_key_the_profile_and_the_limits_as_the_audit_does() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(
        MockScript::new().replies([MockReply::text("An answer without the marker.")]),
    )
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        key_grants: vec![KeyGrant {
            name: "ops".into(),
            key: "k-ops".into(),
            models: None,
            profiles: None,
        }],
        ..traced_config(&receiver, &dir)
    };
    let model = Model::new(
        "m",
        openai_runner(&mock.url()),
        Arc::new(marker_enforcer_retries(false, 2)),
    )
    .with_profile("markers")
    .with_options(ModelOptions {
        request_limits: true,
        ..ModelOptions::default()
    });
    let harness = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    let response = harness
        .client
        .post(harness.url("/v1/chat/completions"))
        .bearer_auth("k-ops")
        .header("X-Enforce-Max-Retries", "0")
        .header("X-Enforce-Token-Budget", "900")
        .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    harness.shutdown().await.unwrap();
    let spans = receiver.spans();
    let audit = audit(&dir);
    let request = named(&spans, "chat_completion")[0];
    assert_eq!(string(request, "enforce.key"), "ops");
    assert_eq!(audit["key"], "ops");
    // The model's own profile (neither routed nor named by a header), as in the audit.
    assert_eq!(string(request, "enforce.profile"), "markers");
    assert_eq!(audit["profile"], "markers");
    let limits = &audit["request_limits"];
    assert_eq!(
        int(request, "enforce.request.max_retries"),
        limits["max_retries"]["applied"].as_i64().unwrap()
    );
    assert_eq!(int(request, "enforce.request.max_retries"), 0);
    assert_eq!(
        int(request, "enforce.request.token_budget"),
        limits["token_budget"]["applied"].as_i64().unwrap()
    );
    assert_eq!(int(request, "enforce.request.token_budget"), 900);
}

#[tokio::test]
async fn the_request_span_names_the_route_and_surface_it_came_in_on() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("One. <!-- STEP: a -->"),
        MockReply::text("Two. <!-- STEP: a -->"),
        MockReply::text("Three. <!-- STEP: a -->"),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let model = Model::new(
        "m",
        openai_runner(&mock.url()),
        Arc::new(marker_enforcer_retries(false, 0)),
    );
    let harness = Harness::start(
        Server::builder(traced_config(&receiver, &dir))
            .model(model)
            .build()
            .unwrap(),
    )
    .await;
    let requests = [
        (
            "/v1/chat/completions",
            json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
        ),
        ("/v1/responses", json!({"model": "m", "input": "hi"})),
        (
            "/v1/messages",
            json!({"model": "m", "max_tokens": 100, "messages": [{"role": "user", "content": "hi"}]}),
        ),
    ];
    for (path, body) in &requests {
        let response = harness
            .client
            .post(harness.url(path))
            .json(body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    harness.shutdown().await.unwrap();
    let spans = receiver.spans();
    let mut seen: Vec<(String, String)> = named(&spans, "chat_completion")
        .iter()
        .map(|span| (string(span, "http.route"), string(span, "enforce.surface")))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("/v1/chat/completions".to_string(), "chat".to_string()),
            ("/v1/messages".to_string(), "messages".to_string()),
            ("/v1/responses".to_string(), "responses".to_string()),
        ]
    );
}

fn body(record: &LogRecord) -> String {
    match record.body.as_ref().and_then(|b| b.value.as_ref()) {
        Some(any_value::Value::StringValue(s)) => s.clone(),
        other => panic!("the body is not a string: {other:?}"),
    }
}

fn log_attribute(record: &LogRecord, key: &str) -> Option<String> {
    match attr(&record.attributes, key) {
        Some(any_value::Value::StringValue(s)) => Some(s.clone()),
        None => None,
        other => panic!("{key} is not a string: {other:?}"),
    }
}

#[tokio::test]
async fn every_audit_record_is_also_an_otlp_log_record() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(MockScript::new().replies([
        MockReply::text("An answer.\n<!-- STEP: why -->"),
        MockReply::text("No marker, and no re-ask left."),
    ]))
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = traced_config(&receiver, &dir);
    config.otlp = config.otlp.map(OtlpConfig::with_audit_logs);
    let model = marker_model(&mock, false, 0).with_profile("markers");
    let harness = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    for model in ["m", "m", "no-such-model"] {
        chat(&harness, model).await;
    }
    harness.shutdown().await.unwrap();

    let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let records = receiver.log_records();
    assert_eq!(records.len(), lines.len(), "one log record per audit line");
    let statuses: Vec<Value> = lines
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap()["status"].clone())
        .collect();
    assert_eq!(statuses, ["passed", "unresolved", "refused"]);
    {
        let received = receiver.received.lock().unwrap();
        let resource = received.logs[0].resource_logs[0].resource.as_ref();
        assert_eq!(service_name(resource), "enforce-under-test");
    }
    for line in lines {
        let audit: Value = serde_json::from_str(line).unwrap();
        let record = records
            .iter()
            .find(|r| body(r) == line)
            .unwrap_or_else(|| panic!("no log record has the body {line}"));
        assert_eq!(record.event_name, "enforce.audit");
        for (attribute, field) in [
            ("enforce.request_id", "request_id"),
            ("enforce.status", "status"),
            ("enforce.model", "model"),
            ("enforce.profile", "profile"),
            ("enforce.reason", "reason"),
        ] {
            assert_eq!(
                log_attribute(record, attribute).as_deref(),
                audit[field].as_str(),
                "{attribute} of {line}"
            );
        }
        let (number, text) = match audit["status"].as_str() {
            Some("passed") => (9, "INFO"),
            _ => (13, "WARN"),
        };
        assert_eq!(
            (record.severity_number, record.severity_text.as_str()),
            (number, text)
        );
    }
    // The refusal names the model it asked for; the enforcements their request and profile.
    let refused = records
        .iter()
        .find(|r| log_attribute(r, "enforce.status").as_deref() == Some("refused"))
        .unwrap();
    assert_eq!(
        log_attribute(refused, "enforce.model").as_deref(),
        Some("no-such-model")
    );
    assert_eq!(
        log_attribute(refused, "enforce.reason").as_deref(),
        Some("unknown_model")
    );
    let passed = records
        .iter()
        .find(|r| log_attribute(r, "enforce.status").as_deref() == Some("passed"))
        .unwrap();
    assert!(log_attribute(passed, "enforce.request_id").is_some_and(|id| !id.is_empty()));
    assert_eq!(
        log_attribute(passed, "enforce.profile").as_deref(),
        Some("markers")
    );
}

#[tokio::test]
async fn audit_logs_flow_without_an_audit_file() {
    let receiver = Receiver::start().await;
    let mock = MockOpenAi::start(
        MockScript::new().replies([MockReply::text("An answer.\n<!-- STEP: why -->")]),
    )
    .await
    .unwrap();
    let config = ServerConfig {
        audit_log: None,
        otlp: Some(
            OtlpConfig::to_endpoint(&receiver.url)
                .unwrap()
                .with_audit_logs(),
        ),
        ..ServerConfig::default()
    };
    let model = marker_model(&mock, false, 0);
    let harness = Harness::start(Server::builder(config).model(model).build().unwrap()).await;
    assert_eq!(chat(&harness, "m").await.status(), 200);
    harness.shutdown().await.unwrap();
    let records = receiver.log_records();
    assert_eq!(records.len(), 1, "{records:#?}");
    let line: Value = serde_json::from_str(&body(&records[0])).unwrap();
    assert_eq!(line["status"], "passed");
    assert_eq!(line["model"], "m");
}
