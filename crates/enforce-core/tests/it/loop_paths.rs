//! One test per path through the enforcement loop.

use crate::req;
use enforce_core::{
    async_trait, policy::BudgetKind, scripted::ScriptedCall, validator::VALIDATOR_UNAVAILABLE,
    Budget, Check, Context, Enforcer, Event, FailMode, Issue, Observer, Policy, Reply, Runner,
    RunnerError, ScriptedRunner, Status, StopReason, Unavailable, Usage, Validation, Validator,
    ValidatorExt,
};
use enforce_core::{Ask, ReplyStream};
use std::sync::Mutex;
use std::time::Duration;

type CheckFn = dyn Fn(&str) -> Vec<Issue> + Send + Sync;
type RepairFn = dyn Fn(&str) -> Option<String> + Send + Sync;

/// A validator made of closures.
struct FnValidator {
    name: &'static str,
    check: Box<CheckFn>,
    repair: Option<Box<RepairFn>>,
}

impl FnValidator {
    fn new(name: &'static str, check: impl Fn(&str) -> Vec<Issue> + Send + Sync + 'static) -> Self {
        FnValidator {
            name,
            check: Box::new(check),
            repair: None,
        }
    }
    fn with_repair(
        mut self,
        repair: impl Fn(&str) -> Option<String> + Send + Sync + 'static,
    ) -> Self {
        self.repair = Some(Box::new(repair));
        self
    }
}

#[async_trait]
impl Validator for FnValidator {
    fn name(&self) -> &str {
        self.name
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok((self.check)(response))
    }
    fn repair(&self, response: &str, _: &Context, issues: &[Issue]) -> Option<String> {
        assert!(
            issues.iter().all(|i| i.validator == self.name),
            "repair gets only its own issues"
        );
        self.repair.as_ref().and_then(|r| r(response))
    }
}

/// Requires the text to end with "END"; repair appends it.
fn ends_with_end() -> FnValidator {
    FnValidator::new("ends_with_end", |t| {
        if t.trim_end().ends_with("END") {
            vec![]
        } else {
            vec![Issue::error(
                "ends_with_end",
                "MISSING_END",
                "The answer does not end with END.",
            )
            .with_hint("Write END on the last line.")
            .at_line(1)]
        }
    })
    .with_repair(|t| Some(format!("{}\nEND", t.trim_end())))
}

/// Requires the word "title".
fn has_title() -> FnValidator {
    FnValidator::new("has_title", |t| {
        if t.contains("title") {
            vec![]
        } else {
            vec![
                Issue::error("has_title", "MISSING_TITLE", "No title given.")
                    .with_hint("Add a line starting with 'title:'.")
                    .at_line(2),
            ]
        }
    })
}

/// Every text fails with a code derived from the text itself, so attempts differ.
fn code_from_text() -> FnValidator {
    FnValidator::new("code_from_text", |t| {
        vec![Issue::error(
            "code_from_text",
            format!("BAD_{}", t.len()),
            "always fails",
        )]
    })
}

/// A validator that never gives a verdict.
struct Down {
    mode: Option<FailMode>,
}

#[async_trait]
impl Validator for Down {
    fn name(&self) -> &str {
        "down"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Err(Unavailable::new("checker not reachable"))
    }
    fn fail_mode(&self) -> Option<FailMode> {
        self.mode
    }
}

fn enforcer(validators: Vec<Box<dyn Validator>>) -> Enforcer {
    Enforcer::new(validators)
}

fn with_policy(validators: Vec<Box<dyn Validator>>, edit: impl FnOnce(&mut Policy)) -> Enforcer {
    let mut policy = Policy::default();
    edit(&mut policy);
    Enforcer::new(validators).with_policy(policy)
}

#[tokio::test]
async fn passes_first_time() {
    let runner = ScriptedRunner::texts(["title: x\nEND"]);
    let e = enforcer(vec![Box::new(ends_with_end()), Box::new(has_title())]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.stop_reason, StopReason::Clean);
    assert_eq!(out.response.as_deref(), Some("title: x\nEND"));
    assert_eq!(out.attempts.len(), 1);
    assert!(out.issues.is_empty() && out.warnings.is_empty());
    assert_eq!(runner.calls().len(), 1);
    assert!(matches!(runner.calls()[0], ScriptedCall::Ask { .. }));
}

#[tokio::test]
async fn passes_after_feedback_that_names_every_error() {
    let runner = ScriptedRunner::texts(["nothing useful", "title: x\nEND"]);
    let e = enforcer(vec![Box::new(ends_with_end()), Box::new(has_title())]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.attempts.len(), 2);
    assert_eq!(out.attempts[0].issues.len(), 2);
    assert!(out.attempts[1].issues.is_empty());

    let calls = runner.calls();
    let feedback = calls[1].feedback().expect("second call is a follow-up");
    for needle in [
        "MISSING_END",
        "The answer does not end with END.",
        "Write END on the last line.",
        "(line 1)",
        "MISSING_TITLE",
        "No title given.",
        "Add a line starting with 'title:'.",
        "(line 2)",
    ] {
        assert!(
            feedback.contains(needle),
            "feedback lacks {needle:?}:\n{feedback}"
        );
    }
    match &calls[1] {
        ScriptedCall::FollowUp { previous, .. } => assert_eq!(previous, "nothing useful"),
        other => panic!("expected a follow-up, got {other:?}"),
    }
}

#[tokio::test]
async fn warnings_alone_pass_without_retry() {
    let warn = FnValidator::new("style", |_| {
        vec![Issue::warning("style", "TOO_CHATTY", "Long.")]
    });
    let runner = ScriptedRunner::texts(["fine END", "never asked"]);
    let e = enforcer(vec![Box::new(warn), Box::new(ends_with_end())]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(runner.calls().len(), 1);
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(out.warnings[0].code, "TOO_CHATTY");
    assert!(out.issues.is_empty());
}

#[tokio::test]
async fn hard_abort_skips_remaining_retries() {
    let hard = FnValidator::new("sanitised", |_| {
        vec![Issue::error("sanitised", "INVALID_SANITISATION", "bad flag").hard_abort()]
    });
    let runner = ScriptedRunner::texts(["one", "two", "three"]);
    let e = enforcer(vec![Box::new(hard)]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.stop_reason, StopReason::HardAbort);
    assert_eq!(runner.calls().len(), 1, "no re-ask after a hard abort");
    assert_eq!(out.response.as_deref(), Some("one"));
    assert_eq!(out.codes(), vec!["INVALID_SANITISATION"]);
}

#[tokio::test]
async fn hard_abort_goes_straight_to_the_fallback_template() {
    // The model's answers are rejected; the fallback (validated too) is not.
    let hard = FnValidator::new("sanitised", |text| {
        if text.ends_with("could not be described.") {
            return Vec::new();
        }
        vec![Issue::error("sanitised", "INVALID_SANITISATION", "bad flag").hard_abort()]
    });
    let runner = ScriptedRunner::texts(["one", "two"]);
    let e = with_policy(vec![Box::new(hard)], |p| {
        p.fallback = Some("{{company_name}} could not be described.".into())
    });
    let ctx = Context::new().with("company_name", "ACME GmbH");
    let out = e.run(&runner, &req(), &ctx).await;
    assert_eq!(out.status, Status::Aborted);
    assert!(out.fallback_used);
    assert_eq!(
        out.response.as_deref(),
        Some("ACME GmbH could not be described.")
    );
    assert_eq!(runner.calls().len(), 1);
}

#[tokio::test]
async fn repair_succeeds_after_retries_are_spent() {
    let runner = ScriptedRunner::texts(["title a", "title b"]);
    let e = with_policy(
        vec![Box::new(has_title()), Box::new(ends_with_end())],
        |p| p.max_retries = 1,
    );
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Repaired);
    assert_eq!(out.stop_reason, StopReason::RetriesExhausted);
    assert_eq!(out.response.as_deref(), Some("title b\nEND"));
    assert_eq!(out.attempts.len(), 2);
    assert_eq!(out.attempts[1].repairs, vec!["ends_with_end".to_string()]);
    assert!(out.attempts[0].repairs.is_empty());
    assert!(out.issues.is_empty());
}

#[tokio::test]
async fn failed_repair_leaves_the_last_response_unresolved() {
    // The repair fixes END but the title is still missing, so nothing repaired is passed on.
    let runner = ScriptedRunner::texts(["first", "second"]);
    let e = with_policy(
        vec![Box::new(ends_with_end()), Box::new(has_title())],
        |p| p.max_retries = 1,
    );
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Unresolved);
    assert_eq!(out.response.as_deref(), Some("second"));
    let mut codes = out.codes();
    codes.sort();
    assert_eq!(codes, vec!["MISSING_END", "MISSING_TITLE"]);
    assert_eq!(out.attempts[1].repairs, vec!["ends_with_end".to_string()]);
    assert!(!out.fallback_used);
}

#[tokio::test]
async fn no_progress_stops_early() {
    let runner = ScriptedRunner::texts(["a", "b", "c", "d", "e"]);
    let e = with_policy(vec![Box::new(has_title())], |p| p.max_retries = 4);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.stop_reason, StopReason::NoProgress);
    assert_eq!(out.status, Status::Unresolved);
    assert_eq!(
        out.attempts.len(),
        2,
        "stops after the second identical failure"
    );
    assert_eq!(runner.calls().len(), 2);
}

#[tokio::test]
async fn token_budget_stops_the_loop() {
    let reply = |t: &str| {
        Ok(Reply {
            usage: Some(Usage {
                input_tokens: 60,
                output_tokens: 40,
            }),
            cost_usd: Some(0.01),
            ..Reply::text(t)
        })
    };
    let runner = ScriptedRunner::new([reply("a"), reply("bb"), reply("ccc"), reply("dddd")]);
    let e = with_policy(vec![Box::new(code_from_text())], |p| {
        p.max_retries = 5;
        p.budget = Budget {
            max_tokens: Some(150),
            ..Budget::default()
        };
    });
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(
        out.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::Tokens
        }
    );
    assert_eq!(out.attempts.len(), 2);
    assert_eq!(out.usage.map(|u| u.total()), Some(200));
    assert!((out.cost_usd.unwrap_or_default() - 0.02).abs() < 1e-9);
    assert_eq!(out.status, Status::Unresolved);
}

#[tokio::test]
async fn cost_and_attempt_budgets_stop_the_loop() {
    let costly = |t: &str| {
        Ok(Reply {
            cost_usd: Some(0.5),
            ..Reply::text(t)
        })
    };
    let runner = ScriptedRunner::new([costly("a"), costly("bb"), costly("ccc")]);
    let e = with_policy(vec![Box::new(code_from_text())], |p| {
        p.max_retries = 5;
        p.budget.max_cost_usd = Some(0.9);
    });
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(
        out.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::Cost
        }
    );
    assert_eq!(out.attempts.len(), 2);

    let runner = ScriptedRunner::texts(["a", "bb", "ccc", "dddd"]);
    let e = with_policy(vec![Box::new(code_from_text())], |p| {
        p.max_retries = 5;
        p.budget.max_attempts = Some(3);
    });
    assert_eq!(e.max_attempts(), 3);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(
        out.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::Attempts
        }
    );
    assert_eq!(out.attempts.len(), 3);
}

/// Answers after a delay, with a different text each time.
struct SlowRunner {
    delay: Duration,
    calls: Mutex<u32>,
}

impl Runner for SlowRunner {
    fn ask<'a>(&'a self, _: Ask<'a>) -> ReplyStream<'a> {
        ReplyStream::whole(async move {
            tokio::time::sleep(self.delay).await;
            let mut n = self.calls.lock().unwrap();
            *n += 1;
            Ok(Reply::text("x".repeat(*n as usize)))
        })
    }
}

#[tokio::test]
async fn wall_time_budget_stops_the_loop() {
    let runner = SlowRunner {
        delay: Duration::from_millis(40),
        calls: Mutex::new(0),
    };
    let e = with_policy(vec![Box::new(code_from_text())], |p| {
        p.max_retries = 10;
        p.budget.max_wall_ms = Some(60);
    });
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(
        out.stop_reason,
        StopReason::Budget {
            budget: BudgetKind::WallTime
        }
    );
    // 40 ms per attempt against 60 ms: the budget check before the third ask stops it.
    assert_eq!(out.attempts.len(), 2);
    assert!(
        out.runner_us >= 80_000,
        "runner time is accounted: {}",
        out.runner_us
    );
    assert!(out.total_us >= out.runner_us);
}

#[tokio::test]
async fn a_lasting_runner_error_on_attempt_two_keeps_attempt_one() {
    // A 4xx is not something another call changes: the loop stops at once.
    let error = RunnerError::Upstream {
        status: Some(400),
        message: "bad request".into(),
    };
    let runner = ScriptedRunner::new([
        Ok(Reply {
            session_id: Some("s-1".into()),
            ..Reply::text("nothing END")
        }),
        Err(error.clone()),
    ]);
    let e = enforcer(vec![Box::new(has_title())]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(
        out.stop_reason,
        StopReason::RunnerFailed {
            error: error.clone()
        }
    );
    assert_eq!(out.runner_error(), Some(&error));
    assert_eq!(out.attempts.len(), 2, "the failed call is audited");
    assert_eq!(out.attempts[0].issues[0].code, "MISSING_TITLE");
    assert_eq!(out.attempts[1].runner_error.as_ref(), Some(&error));
    assert_eq!(out.attempts[1].response_bytes, 0);
    assert_eq!(out.response.as_deref(), Some("nothing END"));
    assert_eq!(out.codes(), vec!["MISSING_TITLE"]);
    assert_eq!(out.session_id.as_deref(), Some("s-1"));
}

#[tokio::test]
async fn a_lasting_runner_error_on_the_first_ask_has_no_response() {
    let error = RunnerError::Process {
        message: "no such binary".into(),
        exit_code: None,
    };
    let runner = ScriptedRunner::new([Err(error.clone()), Ok(Reply::text("title"))]);
    let out = enforcer(vec![Box::new(has_title())])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.response, None);
    assert_eq!(out.attempts.len(), 1);
    assert_eq!(out.runner_error(), Some(&error));
    assert_eq!(runner.calls().len(), 1, "not asked again");
}

#[tokio::test]
async fn a_runner_error_during_a_reask_is_a_failed_attempt_and_a_later_pass_wins() {
    let runner = ScriptedRunner::new([
        Ok(Reply::text("nothing")),
        Err(RunnerError::Timeout { after_ms: 10 }),
        Ok(Reply::text("title")),
    ]);
    let out = enforcer(vec![Box::new(has_title())])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(out.status, Status::Passed, "{out:?}");
    assert_eq!(out.response.as_deref(), Some("title"));
    assert_eq!(out.attempts.len(), 3);
    assert_eq!(
        out.attempts[1].runner_error,
        Some(RunnerError::Timeout { after_ms: 10 })
    );
    // The third call re-asks about the answer of the first, with the same feedback.
    let calls = runner.calls();
    assert_eq!(calls[1].feedback(), calls[2].feedback());
    assert!(calls[2].feedback().unwrap().contains("MISSING_TITLE"));
}

#[tokio::test]
async fn a_runner_error_on_the_first_ask_ends_the_loop_as_before() {
    // The runner's own retries were spent on it; the loop does not retry a failing upstream.
    let busy = RunnerError::Upstream {
        status: Some(503),
        message: "busy".into(),
    };
    let runner = ScriptedRunner::new([Err(busy.clone()), Ok(Reply::text("title"))]);
    let out = enforcer(vec![Box::new(has_title())])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.runner_error(), Some(&busy));
    assert_eq!(out.response, None);
    assert_eq!(out.attempts.len(), 1, "the failed ask is audited");
    assert_eq!(out.attempts[0].runner_error.as_ref(), Some(&busy));
    assert_eq!(runner.calls().len(), 1);
}

#[tokio::test]
async fn runner_errors_until_no_attempt_remains_give_the_best_earlier_answer_or_the_fallback() {
    let script = || {
        ScriptedRunner::new([
            Ok(Reply::text("nothing")),
            Err(RunnerError::Timeout { after_ms: 10 }),
            Err(RunnerError::Protocol {
                message: "stream broke".into(),
            }),
        ])
    };
    let broke = RunnerError::Protocol {
        message: "stream broke".into(),
    };
    let out = enforcer(vec![Box::new(has_title())])
        .run(&script(), &req(), &Context::new())
        .await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.runner_error(), Some(&broke));
    assert_eq!(out.attempts.len(), 3);
    assert_eq!(
        out.response.as_deref(),
        Some("nothing"),
        "the best earlier answer"
    );
    assert_eq!(out.codes(), vec!["MISSING_TITLE"]);
    assert!(!out.fallback_used);

    let e = with_policy(vec![Box::new(has_title())], |p| {
        p.fallback = Some("title: sorry".into())
    });
    let out = e.run(&script(), &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Aborted);
    assert_eq!(out.runner_error(), Some(&broke));
    assert!(out.fallback_used);
    assert_eq!(out.response.as_deref(), Some("title: sorry"));
}

#[tokio::test]
async fn unavailable_validator_fail_open_passes_with_a_warning() {
    let runner = ScriptedRunner::texts(["title END"]);
    let e = with_policy(
        vec![Box::new(Down { mode: None }), Box::new(has_title())],
        |p| p.on_unavailable = FailMode::Open,
    );
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(out.warnings[0].code, VALIDATOR_UNAVAILABLE);
    assert_eq!(out.warnings[0].validator, "down");
    assert!(out.warnings[0].message.contains("checker not reachable"));
}

#[tokio::test]
async fn unavailable_validator_fail_closed_stops_with_unavailable() {
    let runner = ScriptedRunner::texts(["title END", "never"]);
    let e = enforcer(vec![Box::new(Down { mode: None }), Box::new(has_title())]);
    let out = e.run(&runner, &req(), &Context::new()).await;
    assert_eq!(out.status, Status::Unavailable);
    assert!(matches!(
        out.stop_reason,
        StopReason::ValidatorUnavailable { .. }
    ));
    let which = out.unavailable().expect("names the validator");
    assert_eq!(which.validator, "down");
    assert_eq!(which.reason, "checker not reachable");
    assert_eq!(runner.calls().len(), 1);
}

#[tokio::test]
async fn a_validator_s_unavailable_status_is_recorded_open_and_closed() {
    for mode in [FailMode::Open, FailMode::Closed] {
        let e = enforcer(vec![
            Down { mode: Some(mode) }
                .with_unavailable_status("CHECKER_DOWN")
                .boxed(),
            has_title().with_unavailable_status("NEVER_SHOWN").boxed(),
        ]);
        let out = e
            .run(
                &ScriptedRunner::texts(["title END"]),
                &req(),
                &Context::new(),
            )
            .await;
        assert_eq!(
            out.unavailable_status("down"),
            Some("CHECKER_DOWN"),
            "{mode:?}"
        );
        // Only a validator that gave no verdict is listed.
        assert_eq!(out.unavailable_statuses.len(), 1, "{mode:?}");
        let line: serde_json::Value = serde_json::from_str(&out.to_json_line()).unwrap();
        assert_eq!(line["unavailable_statuses"]["down"], "CHECKER_DOWN");
        let read: enforce_core::Outcome = serde_json::from_value(line).unwrap();
        assert_eq!(read.unavailable_statuses, out.unavailable_statuses);
    }
    // Without one, nothing is recorded (and the record has no such key).
    let out = enforcer(vec![Box::new(Down { mode: None })])
        .run(
            &ScriptedRunner::texts(["title END"]),
            &req(),
            &Context::new(),
        )
        .await;
    assert!(out.unavailable_statuses.is_empty());
    assert!(!out.to_json_line().contains("unavailable_statuses"));
}

#[tokio::test]
async fn a_validator_can_override_the_policy_fail_mode() {
    let runner = ScriptedRunner::texts(["title END"]);
    let e = with_policy(
        vec![Box::new(Down {
            mode: Some(FailMode::Closed),
        })],
        |p| p.on_unavailable = FailMode::Open,
    );
    assert_eq!(
        e.run(&runner, &req(), &Context::new()).await.status,
        Status::Unavailable
    );

    let runner = ScriptedRunner::texts(["title END"]);
    let e = enforcer(vec![Box::new(Down {
        mode: Some(FailMode::Open),
    })]);
    assert_eq!(
        e.run(&runner, &req(), &Context::new()).await.status,
        Status::Passed
    );
}

#[tokio::test]
async fn follow_up_continues_the_session_of_the_previous_reply() {
    let runner = ScriptedRunner::new([
        Ok(Reply {
            session_id: Some("first".into()),
            ..Reply::text("no")
        }),
        Ok(Reply {
            session_id: Some("second".into()),
            ..Reply::text("title")
        }),
    ]);
    let out = enforcer(vec![Box::new(has_title())])
        .run(&runner, &req(), &Context::new())
        .await;
    match &runner.calls()[1] {
        ScriptedCall::FollowUp { session_id, .. } => {
            assert_eq!(session_id.as_deref(), Some("first"))
        }
        other => panic!("expected follow-up, got {other:?}"),
    }
    assert_eq!(out.session_id.as_deref(), Some("second"));
    assert_eq!(out.attempts[0].session_id.as_deref(), Some("first"));
}

#[tokio::test]
async fn observer_sees_ask_validate_retry_repair_finish() {
    #[derive(Default)]
    struct Log(Mutex<Vec<String>>);
    impl Observer for Log {
        fn on_event(&self, event: &Event<'_>) {
            let line = match event {
                Event::Asking {
                    attempt,
                    max_attempts,
                } => format!("ask {attempt}/{max_attempts}"),
                Event::Validated {
                    attempt, issues, ..
                } => format!("validated {attempt}: {}", issues.len()),
                Event::Retrying {
                    attempt, issues, ..
                } => format!("retry {attempt}: {}", issues[0].code),
                Event::Repaired { validator } => format!("repaired {validator}"),
                Event::Finished { status } => format!("finished {status}"),
                Event::Recorded { attempt } => format!("recorded {}", attempt.number),
                _ => "other".into(),
            };
            self.0.lock().unwrap().push(line);
        }
    }
    let log = Log::default();
    let runner = ScriptedRunner::texts(["a", "bb"]);
    let e = with_policy(vec![Box::new(ends_with_end())], |p| p.max_retries = 1);
    let out = e.run_observed(&runner, &req(), &Context::new(), &log).await;
    assert_eq!(out.status, Status::Repaired);
    assert_eq!(
        *log.0.lock().unwrap(),
        vec![
            "ask 1/2",
            "validated 1: 1",
            "recorded 1",
            "retry 2: MISSING_END",
            "ask 2/2",
            "validated 2: 1",
            "recorded 2",
            "repaired ends_with_end",
            "finished repaired"
        ]
    );
}

/// Logs `ValidatorRan` events (and the attempt boundaries) of an observer that asks for them.
#[derive(Default)]
struct RunLog(Mutex<Vec<String>>);

impl Observer for RunLog {
    fn on_event(&self, event: &Event<'_>) {
        let line = match event {
            Event::Asking { attempt, .. } => format!("ask {attempt}"),
            Event::ValidatorRan {
                attempt,
                validator,
                issues,
                unavailable,
                repaired,
                ..
            } => {
                let codes: Vec<&str> = issues.iter().map(|i| i.code.as_str()).collect();
                let named = issues.iter().all(|i| i.validator == *validator);
                format!(
                    "ran {attempt} {validator} [{}]{}{}{}",
                    codes.join(","),
                    if named { "" } else { " UNNAMED" },
                    unavailable
                        .map(|r| format!(" unavailable: {r}"))
                        .unwrap_or_default(),
                    if *repaired { " repaired" } else { "" },
                )
            }
            Event::Validated { attempt, .. } => format!("validated {attempt}"),
            Event::Finished { status } => format!("finished {status}"),
            _ => return,
        };
        self.0.lock().unwrap().push(line);
    }

    fn wants_validator_runs(&self) -> bool {
        true
    }
}

#[tokio::test]
async fn an_observer_that_asks_sees_every_validator_run_in_order() {
    let log = RunLog::default();
    // Attempt 1 fails both, attempt 2 fails only ends_with_end, whose repair fixes it.
    let runner = ScriptedRunner::texts(["a", "title"]);
    let e = with_policy(
        vec![Box::new(ends_with_end()), Box::new(has_title())],
        |p| p.max_retries = 1,
    );
    let out = e.run_observed(&runner, &req(), &Context::new(), &log).await;
    assert_eq!(out.status, Status::Repaired);
    assert_eq!(
        *log.0.lock().unwrap(),
        vec![
            "ask 1",
            "ran 1 ends_with_end [MISSING_END]",
            "ran 1 has_title [MISSING_TITLE]",
            "validated 1",
            "ask 2",
            "ran 2 ends_with_end [MISSING_END]",
            "ran 2 has_title []",
            "validated 2",
            "ran 2 ends_with_end [] repaired",
            "ran 2 has_title [] repaired",
            "finished repaired",
        ]
    );
}

#[tokio::test]
async fn validator_runs_report_a_validator_without_verdict() {
    let log = RunLog::default();
    let runner = ScriptedRunner::texts(["title END"]);
    let e = enforcer(vec![Box::new(has_title()), Box::new(Down { mode: None })]);
    let out = e.run_observed(&runner, &req(), &Context::new(), &log).await;
    assert_eq!(out.status, Status::Unavailable);
    assert_eq!(
        *log.0.lock().unwrap(),
        vec![
            "ask 1",
            "ran 1 has_title []",
            "ran 1 down [] unavailable: checker not reachable",
            "finished unavailable",
        ]
    );

    let log = RunLog::default();
    let runner = ScriptedRunner::texts(["title END"]);
    let e = with_policy(vec![Box::new(Down { mode: None })], |p| {
        p.on_unavailable = FailMode::Open
    });
    e.run_observed(&runner, &req(), &Context::new(), &log).await;
    assert_eq!(
        log.0.lock().unwrap()[1],
        format!("ran 1 down [{VALIDATOR_UNAVAILABLE}] unavailable: checker not reachable")
    );
}

#[tokio::test]
async fn check_reports_and_fixes_without_a_runner() {
    let e = with_policy(
        vec![Box::new(ends_with_end()), Box::new(has_title())],
        |p| p.fallback = Some("never used by check".into()),
    );
    let ctx = Context::new();

    let ok = e.check("title\nEND", &ctx, Check::Report).await;
    assert_eq!(ok.status, Status::Passed);

    let bad = e.check("title", &ctx, Check::Report).await;
    assert_eq!(bad.status, Status::Unresolved);
    assert_eq!(bad.stop_reason, StopReason::CheckOnly);
    assert_eq!(bad.codes(), vec!["MISSING_END"]);
    assert_eq!(
        bad.response.as_deref(),
        Some("title"),
        "no fallback in a check"
    );
    assert!(!bad.fallback_used);

    let fixed = e.check("title", &ctx, Check::Repair).await;
    assert_eq!(fixed.status, Status::Repaired);
    assert_eq!(fixed.response.as_deref(), Some("title\nEND"));

    let unfixable = e.check("nothing", &ctx, Check::Repair).await;
    assert_eq!(unfixable.status, Status::Unresolved);
    assert_eq!(unfixable.response.as_deref(), Some("nothing"));
}

#[tokio::test]
async fn outcome_is_one_json_record() {
    let runner = ScriptedRunner::texts(["x", "title END"]);
    let out = enforcer(vec![Box::new(has_title())])
        .run(&runner, &req(), &Context::new())
        .await;
    let line = out.to_json_line();
    assert!(!line.contains('\n'));
    let v: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["status"], "passed");
    assert_eq!(v["stop_reason"]["reason"], "clean");
    assert_eq!(v["attempts"].as_array().unwrap().len(), 2);
    assert_eq!(v["attempts"][0]["issues"][0]["code"], "MISSING_TITLE");
    assert_eq!(v["attempts"][0]["response_bytes"], 1);
    let back: enforce_core::Outcome = serde_json::from_str(&line).unwrap();
    assert_eq!(back.status, Status::Passed);
    assert_eq!(out.summary(), "passed after 2 attempt(s)");
}

#[tokio::test]
async fn a_json_fallback_stays_json_with_a_quote_in_a_fact() {
    // Answers must be a JSON object naming the company in "text".
    let json_only = || {
        FnValidator::new("json", |text| {
            match serde_json::from_str::<serde_json::Value>(text) {
                Ok(v)
                    if v["text"]
                        .as_str()
                        .is_some_and(|t| t.contains("Müller \"Bau\"")) =>
                {
                    Vec::new()
                }
                Ok(_) => vec![Issue::error("json", "NO_COMPANY", "no company")],
                Err(e) => vec![Issue::error("json", "INVALID_JSON", e.to_string())],
            }
        })
    };
    let template =
        r#"{"text": "Die {{company_name}} beschreibt {{n}} Maßnahmen.", "tags": {{tags}}}"#;
    let ctx = Context::new()
        .with("company_name", "Müller \"Bau\" GmbH")
        .with("n", 3)
        .with("tags", vec!["a", "b"]);
    let run = |format: enforce_core::policy::AnswerFormat| {
        let e = with_policy(vec![Box::new(json_only())], |p| {
            p.max_retries = 0;
            p.fallback = Some(template.into());
            p.answer_format = format;
        });
        let ctx = ctx.clone();
        async move {
            e.run(&ScriptedRunner::texts(["not json"]), &req(), &ctx)
                .await
        }
    };
    let out = run(enforce_core::policy::AnswerFormat::Json).await;
    assert!(out.fallback_used, "{:?}", out.warnings);
    let v: serde_json::Value = serde_json::from_str(out.response.as_deref().unwrap()).unwrap();
    assert_eq!(v["text"], "Die Müller \"Bau\" GmbH beschreibt 3 Maßnahmen.");
    assert_eq!(v["tags"], serde_json::json!(["a", "b"]));
    assert!(out.warnings.is_empty());

    // Rendered as plain text, the quote breaks the JSON: the fallback is refused, the last
    // answer stays with its own status and issues, and the outcome says why.
    let out = run(enforce_core::policy::AnswerFormat::Text).await;
    assert!(!out.fallback_used);
    assert_eq!(out.status, Status::Unresolved);
    assert_eq!(out.response.as_deref(), Some("not json"));
    assert_eq!(out.codes(), vec!["INVALID_JSON"]);
    assert_eq!(out.warnings.len(), 1);
    assert_eq!(
        out.warnings[0].code,
        enforce_core::enforcer::FALLBACK_INVALID
    );
    assert!(
        out.warnings[0].message.contains("INVALID_JSON"),
        "{}",
        out.warnings[0].message
    );
}

#[tokio::test]
async fn a_fallback_that_cannot_be_validated_is_not_used() {
    /// Rejects the model's answers; has no verdict on anything else (fail-closed).
    struct DownForFallback;
    #[async_trait]
    impl Validator for DownForFallback {
        fn name(&self) -> &str {
            "checker"
        }
        async fn validate(&self, response: &str, _: &Context) -> Validation {
            if response == "answer" {
                Ok(vec![Issue::error("checker", "BAD", "bad")])
            } else {
                Err(Unavailable::new("checker gone"))
            }
        }
    }
    let e = with_policy(vec![Box::new(DownForFallback)], |p| {
        p.max_retries = 0;
        p.fallback = Some("Sorry.".into());
    });
    let out = e
        .run(&ScriptedRunner::texts(["answer"]), &req(), &Context::new())
        .await;
    assert_eq!(out.status, Status::Unresolved);
    assert!(!out.fallback_used);
    assert_eq!(out.response.as_deref(), Some("answer"));
    assert_eq!(
        out.warnings[0].code,
        enforce_core::enforcer::FALLBACK_INVALID
    );
    assert!(out.warnings[0]
        .message
        .contains("checker unavailable: checker gone"));
}
