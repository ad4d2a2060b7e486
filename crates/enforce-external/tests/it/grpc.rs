//! The gRPC target of the `external` validator against enforce-testkit's in-process toy parser
//! (`protos/parser.proto` of enforce-testkit, read at run time): verdicts, traces mapped to
//! response lines, the deadline, a server that is down and the breaker, TLS with a private CA,
//! and the configuration mistakes refused at start-up.

use enforce_config::{BuildEnv, Registry};
use enforce_core::{Check, Context, Enforcer, Status, Validator};
use enforce_testkit::{ToyParser, ToyParserOptions};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// enforce-testkit's directory: the configuration's base, holding `protos/parser.proto`.
fn testkit_dir() -> PathBuf {
    ToyParser::proto_path()
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap()
}

/// A `type: external` spec calling the toy parser at `url`; `extra` is merged at the top.
fn spec(url: &str, extra: Value) -> Value {
    let mut spec = json!({
        "type": "external",
        "grpc": {
            "url": url,
            "proto": "protos/parser.proto",
            "method": "toy.Parser/Validate",
            "request": {"code_field": "code", "fields": {"language": "avap"}},
            "response": {"valid_field": "valid", "trace_field": "trace"}
        },
        "blocks": "avap",
        "timeout_ms": 2000
    });
    if let (Some(base), Value::Object(more)) = (spec.as_object_mut(), extra) {
        base.extend(more);
    }
    spec
}

fn build_in(dir: &Path, spec: &Value) -> Box<dyn Validator> {
    Registry::builtin()
        .build("parser", spec, &BuildEnv::new(dir))
        .unwrap_or_else(|e| panic!("{e}"))
}

fn build_error(dir: &Path, spec: &Value) -> enforce_validators::BuildError {
    match Registry::builtin().build("parser", spec, &BuildEnv::new(dir)) {
        Ok(_) => panic!("built: {spec}"),
        Err(e) => e,
    }
}

const GOOD: &str = "Here it is:\n```avap\naddVar(x, 1)\naddResult(x)\n```\n";
const BAD: &str =
    "Here it is:\n```avap\naddVar(x, 1)\ngetSHA256(x)\naddResult(x)\nreturnResult(x)\n```\n";

#[tokio::test]
async fn valid_code_passes_and_the_fixed_fields_arrive() {
    let parser = ToyParser::start().await.unwrap();
    let v = build_in(&testkit_dir(), &spec(&parser.url(), json!({})));
    let issues = v.validate(GOOD, &Context::new()).await.unwrap();
    assert!(issues.is_empty(), "{issues:?}");
    let requests = parser.requests();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].code, "addVar(x, 1)\naddResult(x)\n");
    assert_eq!(requests[0].language, "avap");
    // No block of the language: CODE_BLOCK_MISSING, and no call.
    let issues = v.validate("no code here", &Context::new()).await.unwrap();
    assert_eq!(issues[0].code, "CODE_BLOCK_MISSING", "{issues:?}");
    assert_eq!(parser.calls(), 1);
}

/// `context_field`: the request context arrives as JSON in that string field.
#[tokio::test]
async fn the_request_context_arrives_in_the_context_field() {
    let parser = ToyParser::start().await.unwrap();
    let mut spec = spec(&parser.url(), json!({}));
    spec["grpc"]["request"] = json!({"code_field": "code", "context_field": "language"});
    let v = build_in(&testkit_dir(), &spec);
    let context = Context::new().with("tests", "assert f(1) == 2");
    v.validate(GOOD, &context).await.unwrap();
    let requests = parser.requests();
    let sent: Value = serde_json::from_str(&requests[0].language).expect("JSON");
    assert_eq!(sent, json!({"tests": "assert f(1) == 2"}));
    let mut taken = spec.clone();
    taken["grpc"]["request"] = json!({"code_field": "code", "context_field": "code"});
    let e = build_error(&testkit_dir(), &taken);
    assert!(e.to_string().contains("already the code_field"), "{e}");
}

#[tokio::test]
async fn the_trace_becomes_issues_at_response_lines() {
    let parser = ToyParser::start().await.unwrap();
    let v = build_in(&testkit_dir(), &spec(&parser.url(), json!({})));
    let issues = v.validate(BAD, &Context::new()).await.unwrap();
    let got: Vec<(Option<u32>, &str)> = issues
        .iter()
        .map(|i| (i.line, i.message.as_str()))
        .collect();
    // Block lines 2 and 4; the block's fence is response line 2.
    assert_eq!(
        got,
        vec![
            (
                Some(4),
                "unknown command 'getSHA256' (expected a known command)"
            ),
            (
                Some(6),
                "unknown command 'returnResult' (expected a known command)"
            ),
        ]
    );
    assert!(issues.iter().all(|i| i.code == "EXTERNAL_CHECK_FAILED"));
    assert!(issues[0]
        .hint
        .as_deref()
        .is_some_and(|h| h.contains("parser")));
    // In the loop, the failed check is what the model is asked to fix.
    let out = Enforcer::new(vec![v])
        .check(BAD, &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Unresolved);
}

#[tokio::test]
async fn an_enum_verdict_and_a_descriptor_set() {
    let parser = ToyParser::start().await.unwrap();
    // The descriptor set protoc would write (`-o parser.pb --include_imports`), made here.
    let dir = tempfile::tempdir().unwrap();
    let set = protox::compile([ToyParser::proto_path()], [testkit_dir().join("protos")]).unwrap();
    std::fs::write(
        dir.path().join("parser.pb"),
        prost::Message::encode_to_vec(&set),
    )
    .unwrap();
    // `grpc://` as in the layer's AVAP_PARSER_URL: plain HTTP/2.
    let mut s = spec(&parser.url().replace("http://", "grpc://"), json!({}));
    s["grpc"].as_object_mut().unwrap().remove("proto");
    s["grpc"]["descriptor_set"] = json!("parser.pb");
    s["grpc"]["response"] =
        json!({"valid_field": "verdict", "valid_value": "VALID", "trace_field": "trace"});
    let v = build_in(dir.path(), &s);
    assert!(v.validate(GOOD, &Context::new()).await.unwrap().is_empty());
    let issues = v.validate(BAD, &Context::new()).await.unwrap();
    assert_eq!(issues.len(), 2, "{issues:?}");
    assert_eq!(issues[0].line, Some(4));
    // An invalid answer without a trace still fails, and says what the checker answered.
    s["grpc"]["response"] = json!({"valid_field": "verdict", "valid_value": "VALID"});
    let v = build_in(dir.path(), &s);
    let issues = v.validate(BAD, &Context::new()).await.unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert!(
        issues[0].message.contains("verdict = INVALID"),
        "{}",
        issues[0].message
    );
}

#[tokio::test]
async fn the_deadline_makes_the_checker_unavailable_per_fail_mode() {
    let parser = ToyParser::start_with(ToyParserOptions {
        delay: Duration::from_secs(3),
        ..Default::default()
    })
    .await
    .unwrap();
    let v = build_in(
        &testkit_dir(),
        &spec(
            &parser.url(),
            json!({"timeout_ms": 200, "fail_mode": "open"}),
        ),
    );
    let started = Instant::now();
    let err = v.validate(GOOD, &Context::new()).await.unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(2), "{err}");
    assert!(err.reason.contains("within 200 ms"), "{err}");

    let out = Enforcer::new(vec![v])
        .check(GOOD, &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.warnings[0].code, "VALIDATOR_UNAVAILABLE");
    let closed = build_in(
        &testkit_dir(),
        &spec(
            &parser.url(),
            json!({"timeout_ms": 200, "fail_mode": "closed"}),
        ),
    );
    let out = Enforcer::new(vec![closed])
        .check(GOOD, &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Unavailable);
}

#[tokio::test]
async fn a_server_that_is_down_opens_the_breaker_and_is_not_called_while_open() {
    // A port nobody listens on.
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let v = build_in(
        &testkit_dir(),
        &spec(
            &format!("http://127.0.0.1:{port}"),
            json!({"failure_threshold": 2, "cooldown_ms": 600000}),
        ),
    );
    for _ in 0..2 {
        let err = v.validate(GOOD, &Context::new()).await.unwrap_err();
        assert!(!err.reason.contains("is open"), "{err}");
    }
    let err = v.validate(GOOD, &Context::new()).await.unwrap_err();
    assert!(err.reason.contains("is open"), "{err}");

    // The same with a server that answers too late: it is called until the breaker opens, then
    // not any more.
    let slow = ToyParser::start_with(ToyParserOptions {
        delay: Duration::from_secs(2),
        ..Default::default()
    })
    .await
    .unwrap();
    let v = build_in(
        &testkit_dir(),
        &spec(
            &slow.url(),
            json!({"timeout_ms": 150, "failure_threshold": 2, "cooldown_ms": 600000}),
        ),
    );
    for _ in 0..2 {
        assert!(v.validate(GOOD, &Context::new()).await.is_err());
    }
    assert_eq!(slow.calls(), 2);
    let started = Instant::now();
    let err = v.validate(GOOD, &Context::new()).await.unwrap_err();
    assert!(err.reason.contains("is open"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(100));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(slow.calls(), 2, "no call while the breaker is open");
}

#[tokio::test]
async fn tls_with_a_private_ca() {
    let parser = ToyParser::start_with(ToyParserOptions {
        tls: true,
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(parser.url().starts_with("https://127.0.0.1:"));
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(ToyParser::proto_path(), dir.path().join("parser.proto")).unwrap();
    std::fs::write(dir.path().join("ca.pem"), parser.ca_pem().unwrap()).unwrap();
    let mut s = spec(&parser.url(), json!({"ca_file": "ca.pem"}));
    s["grpc"]["proto"] = json!("parser.proto");
    let v = build_in(dir.path(), &s);
    assert!(v.validate(GOOD, &Context::new()).await.unwrap().is_empty());
    assert_eq!(v.validate(BAD, &Context::new()).await.unwrap().len(), 2);
    // Without the CA the self-signed certificate is not trusted: no verdict.
    s.as_object_mut().unwrap().remove("ca_file");
    let v = build_in(dir.path(), &s);
    assert!(v.validate(GOOD, &Context::new()).await.is_err());
    assert_eq!(parser.calls(), 2);
}

/// Each mistake is refused at start-up, with the key it is at and a message naming it.
#[test]
fn configuration_mistakes_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(ToyParser::proto_path(), dir.path().join("parser.proto")).unwrap();
    std::fs::write(
        dir.path().join("broken.proto"),
        "syntax = \"proto3\";\nmessage A { string a = 1 }\n",
    )
    .unwrap();
    std::fs::write(dir.path().join("junk.pb"), b"\xff\xff\xff not a descriptor").unwrap();
    let url = "http://127.0.0.1:50051";
    let base = || {
        let mut s = spec(url, json!({}));
        s["grpc"]["proto"] = json!("parser.proto");
        s
    };
    let cases: Vec<(&str, Value, &str, &str)> = vec![
        (
            "missing proto",
            json!({"proto": "nowhere.proto"}),
            "grpc.proto",
            "nowhere.proto",
        ),
        (
            "malformed proto",
            json!({"proto": "broken.proto"}),
            "grpc.proto",
            "cannot compile",
        ),
        (
            "junk descriptor set",
            json!({"proto": null, "descriptor_set": "junk.pb"}),
            "grpc.descriptor_set",
            "not a descriptor set",
        ),
        (
            "both sources",
            json!({"descriptor_set": "junk.pb"}),
            "grpc",
            "exactly one of 'proto' and 'descriptor_set'",
        ),
        (
            "unknown service",
            json!({"method": "avap.Parser/Validate"}),
            "grpc.method",
            "no service 'avap.Parser' in the descriptors (services: toy.Parser)",
        ),
        (
            "unknown method",
            json!({"method": "toy.Parser/Check"}),
            "grpc.method",
            "no method 'Check' (methods: Validate, ValidateMany)",
        ),
        (
            "not service/method",
            json!({"method": "Validate"}),
            "grpc.method",
            "package.Service/Method",
        ),
        (
            "streaming method",
            json!({"method": "toy.Parser/ValidateMany"}),
            "grpc.method",
            "only unary methods",
        ),
        (
            "unknown code field",
            json!({"request": {"code_field": "source"}}),
            "grpc.request.code_field",
            "toy.ValidateRequest has no field 'source' (its fields: code, language)",
        ),
        (
            "unknown fixed field",
            json!({"request": {"code_field": "code", "fields": {"colour": "red"}}}),
            "grpc.request.fields",
            "colour",
        ),
        (
            "fixed field of the wrong type",
            json!({"request": {"code_field": "code", "fields": {"language": [1]}}}),
            "grpc.request.fields",
            "toy.ValidateRequest",
        ),
        (
            "code field among the fixed ones",
            json!({"request": {"code_field": "code", "fields": {"code": "x"}}}),
            "grpc.request.fields",
            "is the code_field",
        ),
        (
            "unknown valid field",
            json!({"response": {"valid_field": "ok"}}),
            "grpc.response.valid_field",
            "toy.ValidateResponse has no field 'ok'",
        ),
        (
            "enum without valid_value",
            json!({"response": {"valid_field": "verdict"}}),
            "grpc.response.valid_value",
            "toy.Verdict",
        ),
        (
            "unknown enum value",
            json!({"response": {"valid_field": "verdict", "valid_value": "OK"}}),
            "grpc.response.valid_value",
            "toy.Verdict has no value 'OK' (its values: VERDICT_UNSPECIFIED, VALID, INVALID)",
        ),
        (
            "string without valid_value",
            json!({"response": {"valid_field": "language"}}),
            "grpc.response.valid_value",
            "'language' is a string",
        ),
        (
            "trace field not a string",
            json!({"response": {"valid_field": "valid", "trace_field": "valid"}}),
            "grpc.response.trace_field",
            "'valid' is a bool",
        ),
        (
            "unknown scheme",
            json!({"url": "ftp://127.0.0.1:1"}),
            "grpc.url",
            "only http://, https://",
        ),
    ];
    for (name, change, key, message) in cases {
        let mut s = base();
        for (k, v) in change.as_object().unwrap() {
            if v.is_null() {
                s["grpc"].as_object_mut().unwrap().remove(k);
            } else {
                s["grpc"][k] = v.clone();
            }
        }
        let err = build_error(dir.path(), &s);
        assert_eq!(err.key, key, "{name}: {err}");
        assert!(err.message.contains(message), "{name}: {err}");
    }
    // Keys beside `grpc:`.
    let mut s = base();
    s["ca_file"] = json!("missing.pem");
    assert_eq!(build_error(dir.path(), &s).key, "ca_file");
    std::fs::write(dir.path().join("ca.pem"), "no certificate here").unwrap();
    s["ca_file"] = json!("ca.pem");
    assert_eq!(build_error(dir.path(), &s).key, "ca_file");
    let mut s = base();
    s["url"] = json!("http://127.0.0.1:1/");
    let err = build_error(dir.path(), &s);
    assert!(err.message.contains("exactly one of"), "{err}");
    let mut s = base();
    s["grpc"]["colour"] = json!("red");
    assert!(build_error(dir.path(), &s).message.contains("colour"));
}

/// A validator outlives the runtime of its first call (a CLI may build one runtime per run):
/// its channel, whose worker died with that runtime, is made anew.
#[test]
fn a_validator_outlives_the_runtime_of_its_first_call() {
    // The parser on a runtime of its own thread, up until `stop`; it reports its call count.
    let (url_tx, url_rx) = std::sync::mpsc::channel();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let parser = ToyParser::start().await.unwrap();
            url_tx.send(parser.url()).unwrap();
            let _ = stopped.await;
            parser.calls()
        })
    });
    let url = url_rx.recv().unwrap();
    let v = build_in(&testkit_dir(), &spec(&url, json!({})));
    for _ in 0..3 {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let issues = rt.block_on(v.validate(GOOD, &Context::new())).unwrap();
        assert!(issues.is_empty(), "{issues:?}");
    }
    stop.send(()).unwrap();
    assert_eq!(server.join().unwrap(), 3);
}
