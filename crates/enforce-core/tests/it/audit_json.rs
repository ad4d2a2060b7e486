//! The audit record (`AuditRecord`: its header, then `Outcome::to_json_line`, serde of
//! `Outcome`) is a public contract: log shippers and dashboards parse it. These tests pin its exact shape (field names, order,
//! nesting) for every kind of stop, and that it reads back into the same `Outcome`.

use crate::req;
use enforce_core::{
    async_trait, AuditRecord, Budget, Context, Enforcer, FailMode, Issue, Outcome, Policy, Reply,
    RunnerError, ScriptedRunner, StopReason, Unavailable, Usage, Validation, Validator,
};

/// Errors unless the text contains "title"; warns about "!"; repair prepends a title.
struct Titled;

#[async_trait]
impl Validator for Titled {
    fn name(&self) -> &str {
        "titled"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        let mut issues = Vec::new();
        if !response.contains("title") {
            issues.push(
                Issue::error("titled", "MISSING_TITLE", "No title.")
                    .with_hint("Start with 'title:'.")
                    .at(2, 5),
            );
        }
        if response.contains('!') {
            issues.push(Issue::warning("titled", "LOUD", "Too loud."));
        }
        Ok(issues)
    }
    fn repair(&self, response: &str, _: &Context, _: &[Issue]) -> Option<String> {
        Some(format!("title: {response}"))
    }
}

/// Never gives a verdict.
struct Down;

#[async_trait]
impl Validator for Down {
    fn name(&self) -> &str {
        "down"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Err(Unavailable::new("checker not reachable"))
    }
    fn fail_mode(&self) -> Option<FailMode> {
        Some(FailMode::Closed)
    }
}

fn titled() -> Enforcer {
    Enforcer::new(vec![Box::new(Titled)])
}

/// Sets every timing field to 0: timings differ from run to run, the shape must not.
fn without_timings(line: &str) -> String {
    let mut out = line.to_string();
    for key in ["\"total_us\":", "\"runner_us\":", "\"validation_us\":"] {
        let mut from = 0;
        while let Some(found) = out[from..].find(key) {
            let start = from + found + key.len();
            let end = out[start..]
                .find(|c: char| !c.is_ascii_digit())
                .map_or(out.len(), |n| start + n);
            out.replace_range(start..end, "0");
            from = start;
        }
    }
    out
}

/// The line has the expected shape and reads back into the same outcome.
fn assert_audit(outcome: &Outcome, expected: &str) {
    let line = outcome.to_json_line();
    assert_eq!(without_timings(&line), expected);
    let back: Outcome = serde_json::from_str(&line).expect("the audit line reads back");
    assert_eq!(&back, outcome);
    assert_eq!(back.to_json_line(), line);
}

#[tokio::test]
async fn passed_after_a_re_ask() {
    let runner = ScriptedRunner::new([
        Ok(Reply {
            session_id: Some("s-1".into()),
            usage: Some(Usage {
                input_tokens: 10,
                output_tokens: 5,
            }),
            cost_usd: Some(0.5),
            ..Reply::text("nothing!")
        }),
        Ok(Reply::text("title: x!")),
    ]);
    let out = titled().run(&runner, &req(), &Context::new()).await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"passed","stop_reason":{"reason":"clean"},"response":"title: x!","issues":[],"#,
            r#""warnings":[{"validator":"titled","code":"LOUD","message":"Too loud.","hint":null,"severity":"warning","repairable":true,"line":null,"column":null}],"#,
            r#""attempts":[{"number":1,"response_bytes":8,"response_digest":"72a7edd0bd10f211","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5},"#,
            r#"{"validator":"titled","code":"LOUD","message":"Too loud.","hint":null,"severity":"warning","repairable":true,"line":null,"column":null}],"#,
            r#""runner_us":0,"validation_us":0,"usage":{"input_tokens":10,"output_tokens":5},"cost_usd":0.5,"session_id":"s-1","repairs":[]},"#,
            r#"{"number":2,"response_bytes":9,"response_digest":"08adb6a0d80052b8","#,
            r#""issues":[{"validator":"titled","code":"LOUD","message":"Too loud.","hint":null,"severity":"warning","repairable":true,"line":null,"column":null}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[],"reask":"feedback"}],"#,
            r#""fallback_used":false,"runner_error":null,"unavailable":null,"session_id":"s-1","#,
            r#""usage":{"input_tokens":10,"output_tokens":5},"cost_usd":0.5,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[tokio::test]
async fn repaired_after_retries() {
    let runner = ScriptedRunner::texts(["a", "b"]);
    let mut policy = Policy::default();
    policy.max_retries = 1;
    let out = titled()
        .with_policy(policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"repaired","stop_reason":{"reason":"retries_exhausted"},"response":"title: b","issues":[],"warnings":[],"#,
            r#""attempts":[{"number":1,"response_bytes":1,"response_digest":"af63dc4c8601ec8c","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[]},"#,
            r#"{"number":2,"response_bytes":1,"response_digest":"af63df4c8601f1a5","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":["titled"],"reask":"feedback"}],"#,
            r#""fallback_used":false,"runner_error":null,"unavailable":null,"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[tokio::test]
async fn budget_stop_with_fallback() {
    let runner = ScriptedRunner::texts(["a", "bb", "ccc"]);
    let mut policy = Policy::default();
    policy.max_retries = 5;
    policy.budget = Budget {
        max_attempts: Some(1),
        ..Budget::default()
    };
    policy.fallback = Some("Sorry, {{who}}.".into());
    /// Fails every text with a code of its own, except the apology; no repair.
    struct NoRepair;
    #[async_trait]
    impl Validator for NoRepair {
        fn name(&self) -> &str {
            "no_repair"
        }
        async fn validate(&self, response: &str, _: &Context) -> Validation {
            if response.starts_with("Sorry") {
                return Ok(Vec::new());
            }
            Ok(vec![Issue::error(
                "no_repair",
                format!("BAD_{}", response.len()),
                "bad",
            )])
        }
    }
    let out = Enforcer::new(vec![Box::new(NoRepair)])
        .with_policy(policy)
        .run(&runner, &req(), &Context::new().with("who", "Ann"))
        .await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"unresolved","stop_reason":{"reason":"budget","budget":"attempts"},"response":"Sorry, Ann.","#,
            r#""issues":[{"validator":"no_repair","code":"BAD_1","message":"bad","hint":null,"severity":"error","repairable":true,"line":null,"column":null}],"warnings":[],"#,
            r#""attempts":[{"number":1,"response_bytes":1,"response_digest":"af63dc4c8601ec8c","#,
            r#""issues":[{"validator":"no_repair","code":"BAD_1","message":"bad","hint":null,"severity":"error","repairable":true,"line":null,"column":null}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[]}],"#,
            r#""fallback_used":true,"runner_error":null,"unavailable":null,"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[tokio::test]
async fn a_fallback_that_fails_validation_is_reported_not_used() {
    let runner = ScriptedRunner::texts(["no"]);
    let mut policy = Policy::default();
    policy.max_retries = 0;
    /// Titled without its repair: rejects the fallback too (it has no title).
    struct Strict;
    #[async_trait]
    impl Validator for Strict {
        fn name(&self) -> &str {
            "titled"
        }
        async fn validate(&self, response: &str, context: &Context) -> Validation {
            Titled.validate(response, context).await
        }
    }
    policy.fallback = Some("Sorry.".into());
    let out = Enforcer::new(vec![Box::new(Strict)])
        .with_policy(policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"unresolved","stop_reason":{"reason":"retries_exhausted"},"response":"no","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}],"#,
            r#""warnings":[{"validator":"fallback","code":"FALLBACK_INVALID","message":"The fallback text was not used: it fails validation: MISSING_TITLE (No title.).","#,
            r#""hint":"Fix the profile's fallback template so that it passes its own validators.","severity":"warning","repairable":false,"line":null,"column":null}],"#,
            r#""attempts":[{"number":1,"response_bytes":2,"response_digest":"08b35907b5589afa","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[]}],"#,
            r#""fallback_used":false,"runner_error":null,"unavailable":null,"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[tokio::test]
async fn an_interrupted_run_keeps_the_attempts_made_so_far() {
    // What a caller that stops the loop from outside (the proxy's deadline) writes: the
    // attempts it saw recorded, summed.
    let runner = ScriptedRunner::new([
        Ok(Reply {
            usage: Some(Usage {
                input_tokens: 3,
                output_tokens: 4,
            }),
            cost_usd: Some(0.25),
            session_id: Some("s-9".into()),
            ..Reply::text("no")
        }),
        Ok(Reply::text("title")),
    ]);
    let recorded = std::sync::Mutex::new(Vec::new());
    let observer = |event: &enforce_core::Event<'_>| {
        if let enforce_core::Event::Recorded { attempt } = event {
            recorded.lock().unwrap().push((*attempt).clone());
        }
    };
    let full = titled()
        .run_observed(&runner, &req(), &Context::new(), &observer)
        .await;
    let mut attempts = recorded.into_inner().unwrap();
    assert_eq!(
        attempts, full.attempts,
        "the events carry the audited attempts"
    );
    attempts.truncate(1);
    for (reason, tag) in [
        (StopReason::DeadlineExceeded, "deadline_exceeded"),
        (StopReason::Panicked, "panicked"),
        (StopReason::ClientDisconnected, "client_disconnected"),
    ] {
        let out = Outcome::interrupted(
            reason,
            attempts.clone(),
            std::time::Duration::from_millis(2),
        );
        let expected = format!(
            concat!(
                r#"{{"status":"aborted","stop_reason":{{"reason":"{}"}},"response":null,"issues":[],"warnings":[],"#,
                r#""attempts":[{{"number":1,"response_bytes":2,"response_digest":"08b35907b5589afa","#,
                r#""issues":[{{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}}],"#,
                r#""runner_us":0,"validation_us":0,"usage":{{"input_tokens":3,"output_tokens":4}},"cost_usd":0.25,"session_id":"s-9","repairs":[]}}],"#,
                r#""fallback_used":false,"runner_error":null,"unavailable":null,"session_id":"s-9","#,
                r#""usage":{{"input_tokens":3,"output_tokens":4}},"cost_usd":0.25,"total_us":0,"runner_us":0}}"#,
            ),
            tag
        );
        assert_audit(&out, &expected);
        assert_eq!(out.total_us, 2000);
        assert_eq!(out.runner_us, attempts[0].runner_us);
    }
}

#[tokio::test]
async fn the_audit_record_puts_its_header_before_the_outcome() {
    let runner = ScriptedRunner::texts(["title"]);
    let out = titled().run(&runner, &req(), &Context::new()).await;
    let at = std::time::UNIX_EPOCH + std::time::Duration::from_millis(1_795_471_800_123);
    let line = AuditRecord::new("chatcmpl-1", &out)
        .at(at)
        .model("m")
        .profile("chat")
        .chat_id("c-1")
        .runner("openai")
        .to_json_line();
    let head = r#"{"ts":"2026-11-23T22:10:00.123Z","request_id":"chatcmpl-1","model":"m","profile":"chat","chat_id":"c-1","runner":"openai","#;
    assert_eq!(
        without_timings(&line),
        format!("{head}{}", &without_timings(&out.to_json_line())[1..])
    );
    // Unknown model and profile: null; unknown chat and runner: left out. The outcome reads
    // back.
    let line = AuditRecord::new("r", &out).at(at).to_json_line();
    assert!(line.starts_with(r#"{"ts":"2026-11-23T22:10:00.123Z","request_id":"r","model":null,"profile":null,"status":"passed","#), "{line}");
    let back: Outcome = serde_json::from_str(&line).expect("the outcome reads back");
    assert_eq!(back, out);
}

#[tokio::test]
async fn runner_failure_keeps_its_error_beside_the_stop_reason() {
    let runner = ScriptedRunner::new([
        Ok(Reply::text("no")),
        // Could not start: asking again cannot help, so the loop stops here.
        Err(RunnerError::Process {
            message: "spawn failed".into(),
            exit_code: None,
        }),
    ]);
    let out = titled().run(&runner, &req(), &Context::new()).await;
    assert_audit(
        &out,
        concat!(
            // The earlier answer is repaired: a valid answer, though the runner failed.
            r#"{"status":"repaired","stop_reason":{"reason":"runner_failed"},"response":"title: no","#,
            r#""issues":[],"warnings":[],"#,
            r#""attempts":[{"number":1,"response_bytes":2,"response_digest":"08b35907b5589afa","#,
            r#""issues":[{"validator":"titled","code":"MISSING_TITLE","message":"No title.","hint":"Start with 'title:'.","severity":"error","repairable":true,"line":2,"column":5}],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":["titled"]},"#,
            r#"{"number":2,"response_bytes":0,"response_digest":"cbf29ce484222325","issues":[],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[],"#,
            r#""runner_error":{"kind":"process","message":"spawn failed","exit_code":null},"reask":"feedback"}],"#,
            r#""fallback_used":false,"runner_error":{"kind":"process","message":"spawn failed","exit_code":null},"unavailable":null,"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );

    let runner = ScriptedRunner::new([Err(RunnerError::Upstream {
        status: Some(401),
        message: "bad key".into(),
    })]);
    let out = titled().run(&runner, &req(), &Context::new()).await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"aborted","stop_reason":{"reason":"runner_failed"},"response":null,"issues":[],"warnings":[],"#,
            r#""attempts":[{"number":1,"response_bytes":0,"response_digest":"cbf29ce484222325","issues":[],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[],"#,
            r#""runner_error":{"kind":"upstream","status":401,"message":"bad key"}}],"#,
            r#""fallback_used":false,"runner_error":{"kind":"upstream","status":401,"message":"bad key"},"unavailable":null,"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[tokio::test]
async fn unavailable_validator_sits_beside_the_stop_reason() {
    let runner = ScriptedRunner::texts(["title"]);
    let out = Enforcer::new(vec![Box::new(Titled), Box::new(Down)])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_audit(
        &out,
        concat!(
            r#"{"status":"unavailable","stop_reason":{"reason":"validator_unavailable"},"response":"title","issues":[],"warnings":[],"#,
            r#""attempts":[{"number":1,"response_bytes":5,"response_digest":"da31296c0c1b6029","issues":[],"#,
            r#""runner_us":0,"validation_us":0,"usage":null,"cost_usd":null,"session_id":null,"repairs":[]}],"#,
            r#""fallback_used":false,"runner_error":null,"unavailable":{"validator":"down","reason":"checker not reachable"},"session_id":null,"#,
            r#""usage":null,"cost_usd":null,"total_us":0,"runner_us":0}"#,
        ),
    );
}

#[test]
fn stop_reason_on_its_own_is_its_tag() {
    // The proxy puts the stop reason into every response's `enforcement` object.
    for (reason, json) in [
        (StopReason::Clean, r#"{"reason":"clean"}"#),
        (
            StopReason::RetriesExhausted,
            r#"{"reason":"retries_exhausted"}"#,
        ),
        (StopReason::HardAbort, r#"{"reason":"hard_abort"}"#),
        (StopReason::NoProgress, r#"{"reason":"no_progress"}"#),
        (
            StopReason::Budget {
                budget: enforce_core::policy::BudgetKind::WallTime,
            },
            r#"{"reason":"budget","budget":"wall_time"}"#,
        ),
        (StopReason::CheckOnly, r#"{"reason":"check_only"}"#),
        (
            StopReason::DeadlineExceeded,
            r#"{"reason":"deadline_exceeded"}"#,
        ),
        (StopReason::Panicked, r#"{"reason":"panicked"}"#),
        (
            StopReason::ClientDisconnected,
            r#"{"reason":"client_disconnected"}"#,
        ),
    ] {
        assert_eq!(serde_json::to_string(&reason).unwrap(), json);
    }
}

#[test]
fn a_record_whose_stop_reason_and_details_disagree_is_refused() {
    let base =
        r#""response":null,"issues":[],"warnings":[],"attempts":[],"total_us":0,"runner_us":0"#;
    let read = |head: &str| serde_json::from_str::<Outcome>(&format!("{{{head},{base}}}"));
    let error = read(r#""status":"aborted","stop_reason":{"reason":"runner_failed"}"#)
        .expect_err("no runner_error");
    assert!(
        error.to_string().contains("needs `runner_error`"),
        "{error}"
    );
    let error = read(r#""status":"unavailable","stop_reason":{"reason":"validator_unavailable"}"#)
        .expect_err("no unavailable");
    assert!(error.to_string().contains("needs `unavailable`"), "{error}");
    let error = read(
        r#""status":"passed","stop_reason":{"reason":"clean"},"runner_error":{"kind":"timeout","after_ms":1}"#,
    )
    .expect_err("stray runner_error");
    assert!(error.to_string().contains("not `runner_failed`"), "{error}");
    let error = read(
        r#""status":"passed","stop_reason":{"reason":"clean"},"unavailable":{"validator":"v","reason":"r"}"#,
    )
    .expect_err("stray unavailable");
    assert!(
        error.to_string().contains("not `validator_unavailable`"),
        "{error}"
    );
    // Older records may leave out every optional field.
    let minimal = read(r#""status":"passed","stop_reason":{"reason":"clean"}"#).expect("minimal");
    assert_eq!(minimal.stop_reason, StopReason::Clean);
}

#[test]
fn runner_failure_and_unavailable_validator_live_in_the_stop_reason() {
    let error = RunnerError::Timeout { after_ms: 7 };
    let reason = StopReason::RunnerFailed {
        error: error.clone(),
    };
    assert_eq!(reason.runner_error(), Some(&error));
    assert_eq!(reason.unavailable(), None);
    assert_eq!(
        serde_json::to_string(&reason).unwrap(),
        r#"{"reason":"runner_failed"}"#
    );
    let reason = StopReason::ValidatorUnavailable {
        unavailable: enforce_core::validator::UnavailableValidator {
            validator: "down".into(),
            reason: "no".into(),
        },
    };
    assert_eq!(
        reason.unavailable().map(|u| u.validator.as_str()),
        Some("down")
    );
    assert_eq!(reason.runner_error(), None);
    assert_eq!(
        serde_json::to_string(&reason).unwrap(),
        r#"{"reason":"validator_unavailable"}"#
    );
}
