//! `examples/per-type.yaml` end to end: the real `enforce serve`, configured only through the
//! environment, in front of a mock upstream, a mock judge/classifier (both OpenAI-compatible),
//! the toy gRPC parser of enforce-testkit and a retrieval service that reformulates. Each
//! request type takes its own path: CODE_GENERATION through the parser with one trace-guided
//! re-ask, RETRIEVAL through the relevance gate with one reformulation, CONVERSATIONAL and
//! PLATFORM through nothing, and a request without a type through the classifier.

use crate::repo;
use crate::serve::{client, temp_dir, Proxy};
use enforce_testkit::sse::ParsedStream;
use enforce_testkit::{MockOpenAi, MockReply, MockScript, ToyParser};
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The retrieval service: records each reformulation request; answers a broader question with
/// new documents, or 503 while `failing`.
#[derive(Clone, Default)]
struct Retrieval {
    seen: Arc<Mutex<Vec<Value>>>,
    failing: Arc<AtomicBool>,
}

async fn reformulate(
    axum::extract::State(r): axum::extract::State<Retrieval>,
    axum::Json(body): axum::Json<Value>,
) -> (axum::http::StatusCode, axum::Json<Value>) {
    r.seen.lock().unwrap().push(body);
    if r.failing.load(Ordering::SeqCst) {
        return (
            axum::http::StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(json!({"error": "index rebuilding"})),
        );
    }
    (
        axum::http::StatusCode::OK,
        axum::Json(json!({
            "question": "How do I compute a SHA-256 hash in AVAP?",
            "context": ["encodeSHA256(text, target) stores the SHA-256 digest of text in target."],
        })),
    )
}

impl Retrieval {
    async fn start(&self) -> String {
        let app = axum::Router::new()
            .route("/reformulate", axum::routing::post(reformulate))
            .with_state(self.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/reformulate", listener.local_addr().unwrap());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        url
    }
}

struct Layer {
    proxy: Proxy,
    upstream: MockOpenAi,
    judge: MockOpenAi,
    parser: Option<ToyParser>,
    retrieval: Retrieval,
    audit: PathBuf,
    records: usize,
}

impl Layer {
    async fn start() -> Layer {
        let upstream = MockOpenAi::start(MockScript::new()).await.unwrap();
        let judge = MockOpenAi::start(MockScript::new()).await.unwrap();
        let parser = ToyParser::start().await.unwrap();
        let retrieval = Retrieval::default();
        let retrieval_url = retrieval.start().await;
        let dir = temp_dir("per-type");
        let audit = dir.join("audit.jsonl");
        let env: BTreeMap<String, String> = [
            ("UPSTREAM_URL", upstream.url()),
            ("UPSTREAM_MODEL", "mock-model".to_string()),
            ("JUDGE_URL", judge.url()),
            ("JUDGE_MODEL", "mock-judge".to_string()),
            ("AVAP_PARSER_URL", parser.url()),
            (
                "AVAP_PARSER_PROTO",
                ToyParser::proto_path().display().to_string(),
            ),
            ("RETRIEVAL_URL", retrieval_url),
            // Seed-style: seconds, as the per-type layer names them.
            ("AVAP_PARSER_TIMEOUT", "2".to_string()),
            ("PARSER_CB_COOLDOWN", "30".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        let config = repo().join("examples/per-type.yaml");
        let proxy = Proxy::start_with_env(
            &[
                "--config",
                config.to_str().unwrap(),
                "--audit-log",
                audit.to_str().unwrap(),
            ],
            env,
        );
        Layer {
            proxy,
            upstream,
            judge,
            parser: Some(parser),
            retrieval,
            audit,
            records: 0,
        }
    }

    /// Asks with `question` (and the RAG `system` prompt, and `metadata.type` when given);
    /// returns the response's profile header, its body and the request's audit record.
    async fn ask(
        &mut self,
        kind: Option<&str>,
        system: &str,
        question: &str,
    ) -> (String, Value, Value) {
        let (resp, record) = self.send(kind, system, question, false).await;
        let profile = resp.headers()["x-enforce-profile"]
            .to_str()
            .unwrap()
            .to_string();
        (profile, resp.json().await.unwrap(), record)
    }

    /// Sends the request [`ask`](Self::ask) describes, streamed or not; returns the response
    /// (status 200 checked) and the request's audit record.
    async fn send(
        &mut self,
        kind: Option<&str>,
        system: &str,
        question: &str,
        stream: bool,
    ) -> (reqwest::Response, Value) {
        let mut body = json!({
            "model": "avap-assistant",
            "stream": stream,
            "messages": [
                {"role": "system", "content": system},
                {"role": "user", "content": question},
            ],
        });
        if let Some(kind) = kind {
            body["metadata"] = json!({ "type": kind });
        }
        let resp = client()
            .post(self.proxy.url("/chat/completions"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
        self.records += 1;
        let record = wait_for_record(&self.audit, self.records).await;
        (resp, record)
    }
}

/// The `n`-th audit record (1-based), waiting for the writer.
async fn wait_for_record(audit: &Path, n: usize) -> Value {
    for _ in 0..200 {
        if let Ok(text) = std::fs::read_to_string(audit) {
            if let Some(line) = text.lines().nth(n - 1) {
                return serde_json::from_str(line).unwrap();
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("no audit record {n} in {}", audit.display());
}

const RAG_SYSTEM: &str =
    "Answer from the documentation.\n<context>\naddVar(name, value) sets a variable.\n</context>";

fn avap(code: &str) -> String {
    format!("Here is the code:\n```avap\n{code}\n```\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_per_type_layer_routes_each_request_type_to_its_checks() {
    let mut layer = Layer::start().await;

    // CODE_GENERATION: the parser rejects getSHA256 (line 4 of the answer), the re-ask
    // carries its trace, the second answer passes.
    layer
        .upstream
        .push(MockReply::text(avap("addVar(x, 1)\ngetSHA256(x)")));
    layer
        .upstream
        .push(MockReply::text(avap("addVar(x, 1)\nencodeSHA256(x, h)")));
    let (profile, body, record) = layer
        .ask(Some("CODE_GENERATION"), "You write AVAP.", "Hash x.")
        .await;
    assert_eq!(profile, "code_generation");
    assert_eq!(body["enforcement"]["status"], "passed", "{body}");
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2);
    let issue = &record["attempts"][0]["issues"][0];
    assert_eq!(issue["line"], 4, "{record}");
    assert!(
        issue["message"].as_str().unwrap().contains("getSHA256"),
        "{issue}"
    );
    let reask = layer.upstream.chat_requests()[1].last_user().unwrap();
    assert!(
        reask.contains("getSHA256"),
        "the trace drives the re-ask: {reask}"
    );
    assert_eq!(record["route"]["profile"], "code_generation", "{record}");
    assert_eq!(layer.parser.as_ref().unwrap().calls(), 2);
    assert!(layer.judge.chat_requests().is_empty(), "no judge for code");

    // CODE_GENERATION failing twice: one re-ask only (max_retries 1), returned unresolved.
    for _ in 0..2 {
        layer.upstream.push(MockReply::text(avap("readParam(x)")));
    }
    let (_, body, record) = layer
        .ask(Some("CODE_GENERATION"), "You write AVAP.", "Read x.")
        .await;
    assert_eq!(body["enforcement"]["status"], "unresolved", "{body}");
    assert_eq!(record["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(
        record["stop_reason"]["reason"], "retries_exhausted",
        "{record}"
    );

    // RETRIEVAL with relevant context: the judge says YES, the model answers the question as
    // asked.
    layer.judge.push(MockReply::text("YES"));
    layer
        .upstream
        .push(MockReply::text("Use addVar(name, value)."));
    let (profile, body, record) = layer
        .ask(
            Some("RETRIEVAL"),
            RAG_SYSTEM,
            "How do I set a variable with addVar?",
        )
        .await;
    assert_eq!(profile, "retrieval");
    assert_eq!(body["enforcement"]["input"]["action"], "none", "{body}");
    assert_eq!(record["input"]["passed"], true);
    let judged = layer.judge.chat_requests().last().unwrap().messages();
    let prompt = &judged.last().unwrap().1;
    assert!(
        prompt.contains("How do I set a variable") && prompt.contains("addVar(name, value) sets"),
        "{prompt}"
    );
    assert!(layer.retrieval.seen.lock().unwrap().is_empty());

    // RETRIEVAL with irrelevant context: the judge says NO, the retrieval service is asked once,
    // the model gets its question and documents.
    layer.judge.push(MockReply::text("NO"));
    layer
        .upstream
        .push(MockReply::text("Use encodeSHA256(text, target)."));
    let (_, body, record) = layer
        .ask(Some("RETRIEVAL"), RAG_SYSTEM, "How do I hash a string?")
        .await;
    assert_eq!(
        body["enforcement"]["input"]["action"], "reformulated",
        "{body}"
    );
    assert_eq!(record["input"]["issues"][0]["code"], "CONTEXT_NOT_RELEVANT");
    assert_eq!(record["input"]["reformulation"]["hook"], "http");
    let sent = layer.retrieval.seen.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0]["question"], "How do I hash a string?");
    assert_eq!(sent[0]["context"], "addVar(name, value) sets a variable.");
    let asked = layer.upstream.chat_requests().last().unwrap().messages();
    assert_eq!(
        asked.last().unwrap().1,
        "How do I compute a SHA-256 hash in AVAP?"
    );
    assert!(
        asked[0].1.contains("encodeSHA256(text, target) stores"),
        "{asked:?}"
    );
    assert!(
        !asked[0].1.contains("addVar(name, value) sets"),
        "{asked:?}"
    );

    // The retrieval service down: the original request is answered, and the audit says why.
    layer.retrieval.failing.store(true, Ordering::SeqCst);
    layer.judge.push(MockReply::text("NO"));
    layer
        .upstream
        .push(MockReply::text("The documentation does not say."));
    let (_, body, record) = layer
        .ask(Some("RETRIEVAL"), RAG_SYSTEM, "How do I hash a string?")
        .await;
    assert_eq!(body["enforcement"]["status"], "passed");
    assert_eq!(
        record["input"]["action"], "reformulation_failed",
        "{record}"
    );
    assert!(record["input"]["reformulation"]["error"]
        .as_str()
        .unwrap()
        .contains("503"));
    let asked = layer.upstream.chat_requests().last().unwrap().messages();
    assert_eq!(asked.last().unwrap().1, "How do I hash a string?");

    // CONVERSATIONAL and PLATFORM: no check, no judge, no parser.
    let (judge_calls, parser_calls) = (
        layer.judge.chat_requests().len(),
        layer.parser.as_ref().unwrap().calls(),
    );
    for kind in ["CONVERSATIONAL", "PLATFORM"] {
        layer
            .upstream
            .push(MockReply::text("getSHA256 is not a command, sorry."));
        let (profile, body, record) = layer.ask(Some(kind), "Be kind.", "Hi!").await;
        assert_eq!(profile, "conversational");
        assert_eq!(body["enforcement"]["status"], "passed");
        assert!(record.get("input").is_none(), "{record}");
    }
    assert_eq!(layer.judge.chat_requests().len(), judge_calls);
    assert_eq!(layer.parser.as_ref().unwrap().calls(), parser_calls);

    // No type: the classifier labels it RETRIEVAL, then the relevance gate runs.
    layer.judge.push(MockReply::text("RETRIEVAL"));
    layer.judge.push(MockReply::text("YES"));
    layer
        .upstream
        .push(MockReply::text("Use addVar(name, value)."));
    let (profile, _, record) = layer
        .ask(None, RAG_SYSTEM, "How do I set a variable with addVar?")
        .await;
    assert_eq!(profile, "retrieval", "{record}");
    assert_eq!(record["route"]["by"], "classify", "{record}");
    assert_eq!(record["route"]["name"], "classified_retrieval", "{record}");
    assert_eq!(record["input"]["passed"], true);

    // The parser down: the code goes out unvalidated, marked with the status its
    // `unavailable_status` names (the seed's PARSER_UNAVAILABLE, not the name's
    // AVAP_PARSER_UNAVAILABLE), in the header and the `enforcement` object, streamed and not.
    drop(layer.parser.take());
    for stream in [false, true] {
        layer.upstream.push(MockReply::text(avap("getSHA256(x)")));
        let (resp, record) = layer
            .send(
                Some("CODE_GENERATION"),
                "You write AVAP.",
                "Hash x.",
                stream,
            )
            .await;
        let header = resp.headers().get("x-enforce-validation-status").cloned();
        let text = resp.text().await.unwrap();
        let enforcement = if stream {
            let parsed = ParsedStream::parse(&text);
            let with = parsed
                .events
                .iter()
                .rev()
                .find(|e| e.get("enforcement").is_some());
            with.expect("a chunk carries the enforcement object")["enforcement"].clone()
        } else {
            serde_json::from_str::<Value>(&text).unwrap()["enforcement"].clone()
        };
        if let Some(header) = header {
            assert_eq!(header, "PARSER_UNAVAILABLE", "stream: {stream}");
        } else {
            assert!(stream, "a whole answer carries x-enforce-validation-status");
        }
        assert_eq!(enforcement["validated"], false, "{text}");
        assert_eq!(
            enforcement["unchecked_validators"][0], "avap_parser",
            "{text}"
        );
        assert_eq!(
            enforcement["validation_status"], "PARSER_UNAVAILABLE",
            "{text}"
        );
        assert_eq!(
            enforcement["warnings"][0]["code"], "VALIDATOR_UNAVAILABLE",
            "{text}"
        );
        assert_eq!(
            record["unavailable_statuses"]["avap_parser"], "PARSER_UNAVAILABLE",
            "{record}"
        );
    }
}
