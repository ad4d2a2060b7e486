//! The verdict in words and data, the same on every surface: the `enforcement` object, the
//! `validation_status` and what a failure means for the person waiting ([`outcome_failure`],
//! [`runner_failure`]). A surface only wraps these in its own envelope.

use crate::error::ApiError;
use axum::http::StatusCode;
use enforce_core::{Issue, Outcome, RunnerError, Status, StopReason};
use serde::Serialize;
use serde_json::{json, Value};

/// The delivered answer (the last attempt's) stopped at the token limit (the upstream's
/// `finish_reason: length`): every surface says so in its own words (chat `length`, Responses
/// `incomplete`, Messages `max_tokens`), repaired or not, since its text ends where the limit
/// cut it.
pub(crate) fn cut_at_token_limit(outcome: &Outcome) -> bool {
    outcome
        .attempts
        .last()
        .is_some_and(|a| a.finish_reason == Some(enforce_core::runner::FinishReason::Length))
}

fn issue_json(issue: &Issue) -> Value {
    serde_json::to_value(IssueBody::of(issue)).unwrap_or_default()
}

/// An issue as the `enforcement` object lists it.
#[derive(Serialize)]
struct IssueBody<'a> {
    code: &'a str,
    hint: &'a Option<String>,
    line: Option<u32>,
    message: &'a str,
    severity: &'static str,
    validator: &'a str,
}

impl<'a> IssueBody<'a> {
    fn of(issue: &'a Issue) -> Self {
        IssueBody {
            code: &issue.code,
            hint: &issue.hint,
            line: issue.line,
            message: &issue.message,
            severity: issue.severity.as_str(),
            validator: &issue.validator,
        }
    }
}

/// The per-type layer's `validation_status` of an outcome, one value per case (documented in
/// README's "How each answer was checked"):
///
/// | value | when |
/// |---|---|
/// | `""` | passed or repaired, every check ran |
/// | `<NAME>_UNAVAILABLE` | a validator gave no verdict (failed open or closed, switched off, breaker open): its `unavailable_status` when configured, else its name upper-cased, e.g. `PARSER_UNAVAILABLE` for `parser` |
/// | `INVALID_UNRESOLVED` | the checks ran and the answer still failed them (unresolved, aborted, or replaced by a fallback) |
pub fn validation_status(outcome: &Outcome) -> String {
    let unavailable = |name: &str| match outcome.unavailable_status(name) {
        Some(status) => status.to_string(),
        None => format!("{}_UNAVAILABLE", name.to_ascii_uppercase()),
    };
    if outcome.status == Status::Unavailable {
        return outcome
            .unavailable()
            .map_or_else(|| unavailable("VALIDATOR"), |u| unavailable(&u.validator));
    }
    if outcome.status.is_success() && !outcome.fallback_used {
        return outcome
            .unchecked_validators()
            .first()
            .map_or_else(String::new, |name| unavailable(name));
    }
    "INVALID_UNRESOLVED".to_string()
}

/// The `enforcement` object added to completions, finish chunks and errors.
pub fn enforcement_json(outcome: &Outcome) -> Value {
    serde_json::to_value(Enforcement::of(outcome)).unwrap_or_default()
}

/// The `enforcement` object, typed: an answer body serializes it as it writes itself.
#[derive(Serialize)]
pub(crate) struct Enforcement<'a> {
    attempts: usize,
    fallback_used: bool,
    /// The input stage's verdict, only for profiles that have one.
    #[serde(skip_serializing_if = "Option::is_none")]
    input: Option<Value>,
    issues: Vec<IssueBody<'a>>,
    repairs: Vec<&'a str>,
    /// How the request was routed, when it was.
    #[serde(skip_serializing_if = "Option::is_none")]
    route: Option<&'a Value>,
    status: &'static str,
    stop_reason: &'a StopReason,
    unchecked_validators: Vec<&'a str>,
    /// Passed or repaired with every check run; `false` says someone must not trust it blindly.
    validated: bool,
    validation_status: String,
    warnings: Vec<IssueBody<'a>>,
}

impl<'a> Enforcement<'a> {
    /// The object for `outcome`.
    pub(crate) fn of(outcome: &'a Outcome) -> Self {
        let unchecked = outcome.unchecked_validators();
        Enforcement {
            attempts: outcome.attempts.len(),
            fallback_used: outcome.fallback_used,
            input: outcome.input.as_ref().map(|input| {
                let mut check = json!({
                    "passed": input.passed,
                    "action": input.action,
                    "issues": input.issues.iter().map(issue_json).collect::<Vec<_>>(),
                });
                if let (Some(r), Value::Object(c)) = (&input.reformulation, &mut check) {
                    c.insert(
                        "reformulation".into(),
                        json!({
                            "hook": r.hook,
                            "question": r.question,
                            "context_changed": r.context_changed,
                            "error": r.error,
                        }),
                    );
                }
                check
            }),
            issues: outcome.issues.iter().map(IssueBody::of).collect(),
            repairs: outcome
                .attempts
                .iter()
                .flat_map(|a| a.repairs.iter().map(String::as_str))
                .collect(),
            route: None,
            status: outcome.status.as_str(),
            stop_reason: &outcome.stop_reason,
            validated: outcome.status.is_success()
                && !outcome.fallback_used
                && unchecked.is_empty(),
            unchecked_validators: unchecked,
            validation_status: validation_status(outcome),
            warnings: outcome.warnings.iter().map(IssueBody::of).collect(),
        }
    }

    /// With how the request was routed (nothing when it was not).
    pub(crate) fn routed(self, route: Option<&'a Value>) -> Self {
        Enforcement { route, ..self }
    }
}

fn describe_issues(issues: &[Issue]) -> String {
    let mut lines = Vec::with_capacity(issues.len());
    for issue in issues {
        let mut line = format!("- {}: {}", issue.code, issue.message.trim_end_matches('.'));
        if let Some(l) = issue.line {
            line.push_str(&format!(" (line {l})"));
        }
        line.push('.');
        if let Some(hint) = &issue.hint {
            line.push_str(&format!(" {}", hint.trim()));
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// What a runner failure means for the person waiting, and the HTTP status it maps to.
pub fn runner_failure(error: &RunnerError, attempt: usize) -> ApiError {
    let when = if attempt > 1 {
        format!(" while re-asking (attempt {attempt})")
    } else {
        String::new()
    };
    match error {
        RunnerError::Timeout { after_ms } => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
            format!(
                "The model did not answer in time{when} (gave up after {:.1} s). Please try again; if it keeps happening, ask for a shorter answer.",
                *after_ms as f64 / 1000.0
            ),
        ),
        RunnerError::Upstream { status, message } => upstream_failure(*status, message, &when),
        RunnerError::Busy {
            status,
            message,
            retry_after_secs,
        } => upstream_busy(*status, message, *retry_after_secs, &when),
        RunnerError::Process { message, .. } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "runner_failed",
            format!(
                "The model could not be run{when}: {}. Please tell the administrator of this proxy.",
                message.trim().trim_end_matches('.')
            ),
        ),
        RunnerError::Protocol { message } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_protocol_error",
            format!(
                "The model's reply was cut off or could not be read{when}: {}. Please try again.",
                without_urls(message).trim().trim_end_matches('.')
            ),
        ),
        // The model cannot serve this at all (missing or broken model file, a prompt longer
        // than its context): retrying will not help, the operator or the client must act.
        RunnerError::Unavailable { message } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream_error",
            "model_unavailable",
            format!(
                "The model cannot answer this request{when}: {}.",
                message.trim().trim_end_matches('.')
            ),
        ),
        // A kind of failure enforce-core learns later: still the runner's fault, in its words.
        other => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "runner_failed",
            format!("The model could not answer{when}: {other}. Please try again."),
        ),
    }
}

/// An upstream that answered with an error, or not at all.
fn upstream_failure(status: Option<u16>, message: &str, when: &str) -> ApiError {
    match status {
    // A success status with a broken body: the connection dropped mid-answer.
    Some(200..=299) => ApiError::new(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        "upstream_cut_off",
        format!(
            "The model's answer was cut off before it was complete{when} ({}). Please try again.",
            without_urls(message).trim().trim_end_matches('.')
        ),
    ),
    // No answer at all (refused connection, DNS, TLS): the reason names the internal
    // upstream address, which stays in the log and the audit record.
    None => ApiError::new(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        "upstream_error",
        format!("Cannot reach the model server{when}. Please try again in a moment."),
    ),
    Some(status) => ApiError::new(
        StatusCode::BAD_GATEWAY,
        "upstream_error",
        "upstream_error",
        format!(
            "The model server reported an error{when} (HTTP {status}): {}. Please try again in a moment.",
            message.trim().trim_end_matches('.')
        ),
    ),
    }
}

/// An upstream too busy to answer now: the client is told so with the upstream's own wait, and
/// its SDK's retry (429 and 503 with `Retry-After`) comes back when the upstream can answer.
/// Anthropic's 529 is a 503 here: clients that are not Anthropic's know no 529.
fn upstream_busy(
    status: u16,
    message: &str,
    retry_after_secs: Option<u64>,
    when: &str,
) -> ApiError {
    let (http, kind, code, what) = if status == 429 {
        (
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "upstream_rate_limited",
            "is limiting how often it may be asked",
        )
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream_error",
            "upstream_overloaded",
            "is overloaded",
        )
    };
    let wait = match retry_after_secs {
        Some(secs) => format!(" after {secs} s"),
        None => " in a moment".to_string(),
    };
    ApiError {
        retry_after: retry_after_secs,
        ..ApiError::new(
            http,
            kind,
            code,
            format!(
                "The model server {what} (HTTP {status}){when}: {}. Please try again{wait}.",
                message.trim().trim_end_matches('.')
            ),
        )
    }
}

/// `message` without the URLs in it: an HTTP client's error names the internal upstream
/// address (`… for url (http://10.0.0.5:8000/v1/chat/completions)`), which a client of the
/// proxy has no business knowing.
fn without_urls(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = ["http://", "https://"]
        .iter()
        .filter_map(|scheme| rest.find(scheme))
        .min()
    {
        let before = &rest[..start];
        let before = before.strip_suffix(" for url (").unwrap_or(before);
        out.push_str(before);
        let after = &rest[start..];
        let end = after
            .find(|c: char| c.is_whitespace() || c == ')')
            .unwrap_or(after.len());
        let closing = before.len() < rest[..start].len() && after[end..].starts_with(')');
        if !closing {
            out.push_str("the model server");
        }
        rest = &after[end + usize::from(closing)..];
    }
    out.push_str(rest);
    out
}

/// The error for an enforcement that ended without a deliverable answer.
pub fn outcome_failure(outcome: &Outcome) -> ApiError {
    let attempts = outcome.attempts.len();
    let mut error = if let Some(runner_error) = outcome.runner_error() {
        // The failed attempt is recorded: its own number is the one that failed.
        let failed = outcome.attempts.last().map_or(1, |a| a.number as usize);
        runner_failure(runner_error, failed)
    } else if outcome.stop_reason == StopReason::InputRejected {
        let errors: Vec<Issue> = outcome
            .input
            .iter()
            .flat_map(|i| i.issues.iter().filter(|i| i.is_error()).cloned())
            .collect();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "input_rejected",
            format!(
                "The request was not sent to the model because it did not pass the input checks:\n{}",
                describe_issues(&errors)
            ),
        )
    } else if outcome.status == Status::Unavailable {
        let (who, why) = outcome
            .unavailable()
            .map(|u| (u.validator.as_str(), u.reason.as_str()))
            .unwrap_or(("a validator", "no verdict"));
        ApiError {
            retry_after: Some(5),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "enforcement_error",
                "validator_unavailable",
                format!(
                    "The answer could not be checked because the check `{who}` is unavailable ({why}), so it was not shown. Please try again in a moment."
                ),
            )
        }
    } else if outcome.response.is_none() {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "no_answer",
            "The model gave no answer. Please try again.",
        )
    } else {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "enforcement_error",
            "enforcement_unresolved",
            format!(
                "The model's answer still broke the required format after {attempts} attempt(s), so it was not shown. What was wrong:\n{}\nPlease try again or rephrase your request.",
                describe_issues(&outcome.issues)
            ),
        )
    };
    error.enforcement = Some(Box::new(enforcement_json(outcome)));
    error.enforce_status = Some(outcome.status.as_str());
    error
}

/// Outcomes for the surfaces' rendering tests.
#[cfg(test)]
pub(crate) mod fixtures {
    use enforce_core::{
        runner::FinishReason, runner::ToolCall, Attempt, Outcome, Status, StopReason,
    };

    /// An attempt that stopped for `finish_reason`, repaired by `repairs`.
    pub(crate) fn attempt(finish_reason: Option<FinishReason>, repairs: &[&str]) -> Attempt {
        Attempt {
            number: 1,
            response_bytes: 1,
            response_digest: String::new(),
            issues: Vec::new(),
            runner_us: 0,
            validation_us: 0,
            usage: None,
            cost_usd: None,
            session_id: None,
            repairs: repairs.iter().map(|r| r.to_string()).collect(),
            cut: None,
            finish_reason,
            usage_estimated: false,
            runner_error: None,
            seed: None,
            reask: None,
            more_room: None,
            free_answer: None,
            escalated_to: None,
            reask_choice: None,
        }
    }

    /// An outcome of `attempts` calling `calls`, with no issues, usage or time.
    pub(crate) fn outcome(status: Status, calls: Vec<ToolCall>, attempts: Vec<Attempt>) -> Outcome {
        Outcome {
            status,
            stop_reason: StopReason::Clean,
            response: Some("x".into()),
            tool_calls: calls,
            issues: Vec::new(),
            warnings: Vec::new(),
            attempts,
            input: None,
            fallback_used: false,
            session_id: None,
            usage: None,
            cost_usd: None,
            total_us: 0,
            runner_us: 0,
            unavailable_statuses: Default::default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::{attempt, outcome};
    use super::*;
    use enforce_core::{Attempt, Status};

    #[test]
    fn urls_are_cut_from_what_a_client_reads() {
        let cases = [
            (
                "error decoding response body for url (http://10.0.0.5:8000/v1/chat)",
                "error decoding response body",
            ),
            (
                "broke at https://up.internal/v1 then",
                "broke at the model server then",
            ),
            ("no address here", "no address here"),
        ];
        for (message, shown) in cases {
            assert_eq!(without_urls(message), shown);
        }
        let unreachable = RunnerError::Upstream {
            status: None,
            message: "cannot connect to http://10.0.0.5:8000/v1/chat/completions".into(),
        };
        let api = runner_failure(&unreachable, 1);
        assert!(!api.message.contains("10.0.0.5"), "{}", api.message);
        assert_eq!(api.status, StatusCode::BAD_GATEWAY);
    }

    /// A model that cannot serve the request (the local runner's missing file) is a 503 that
    /// names what is missing, not a generic failure.
    #[test]
    fn an_unavailable_model_is_a_503_naming_the_cause() {
        let error = RunnerError::Unavailable {
            message: "model file /m/x.gguf not found".into(),
        };
        let api = runner_failure(&error, 1);
        assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(api.code, "model_unavailable");
        assert!(
            api.message.contains("/m/x.gguf not found"),
            "{}",
            api.message
        );
    }

    /// The runner-failure message numbers the attempt that failed: a failing first ask is
    /// not a re-ask, and a failure on the second attempt says attempt 2.
    #[test]
    fn a_runner_failure_names_the_attempt_that_failed() {
        let error = RunnerError::Timeout { after_ms: 1500 };
        let failed_after = |count: u32| {
            let attempts = (1..=count)
                .map(|number| Attempt {
                    number,
                    runner_error: (number == count).then(|| error.clone()),
                    ..attempt(None, &[])
                })
                .collect();
            let outcome = Outcome {
                stop_reason: StopReason::RunnerFailed {
                    error: error.clone(),
                },
                response: None,
                ..outcome(Status::Aborted, Vec::new(), attempts)
            };
            outcome_failure(&outcome).message
        };
        let first = failed_after(1);
        assert!(!first.contains("re-asking"), "{first}");
        assert!(
            first.starts_with("The model did not answer in time (gave up"),
            "{first}"
        );
        let second = failed_after(2);
        assert!(second.contains("while re-asking (attempt 2)"), "{second}");
    }

    /// The `enforcement` object holds the issues, warnings, repairs, the stop reason, the
    /// route when one was taken.
    #[test]
    fn the_enforcement_object_holds_the_verdict() {
        let mut issue = Issue::error("json", "INVALID_JSON", "Not JSON.");
        issue.hint = Some("Answer with one JSON object.".into());
        issue.line = Some(3);
        let mut warning = Issue::warning("terms", "TERM", "A \"quoted\" word.");
        warning.validator = "terms".into();
        let repaired = attempt(None, &["strip_fences"]);
        let outcome = Outcome {
            issues: vec![issue.clone()],
            warnings: vec![warning.clone()],
            ..outcome(
                Status::Unresolved,
                Vec::new(),
                vec![repaired.clone(), repaired],
            )
        };
        let issue_value = |i: &Issue| {
            json!({
                "validator": i.validator,
                "code": i.code,
                "message": i.message,
                "hint": i.hint,
                "severity": i.severity.as_str(),
                "line": i.line,
            })
        };
        let route = json!({"name": "r", "profile": "p", "by": "field"});
        let expected = json!({
            "status": "unresolved",
            "validated": false,
            "unchecked_validators": Vec::<String>::new(),
            "stop_reason": outcome.stop_reason,
            "attempts": 2,
            "issues": [issue_value(&issue)],
            "warnings": [issue_value(&warning)],
            "repairs": ["strip_fences", "strip_fences"],
            "fallback_used": false,
            "validation_status": "INVALID_UNRESOLVED",
            "route": route,
        });
        let routed = Enforcement::of(&outcome).routed(Some(&route));
        assert_eq!(serde_json::to_value(&routed).expect("serializes"), expected);
        let mut unrouted = expected.clone();
        unrouted.as_object_mut().expect("object").remove("route");
        assert_eq!(enforcement_json(&outcome), unrouted);
    }

    #[test]
    fn a_validator_without_verdict_is_named_by_its_own_status_when_it_has_one() {
        let mut closed = outcome(Status::Unavailable, Vec::new(), vec![attempt(None, &[])]);
        closed.stop_reason = StopReason::ValidatorUnavailable {
            unavailable: enforce_core::validator::UnavailableValidator {
                validator: "avap_parser".into(),
                reason: "down".into(),
            },
        };
        let mut open = outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]);
        open.warnings = vec![Issue::warning(
            "avap_parser",
            enforce_core::validator::VALIDATOR_UNAVAILABLE,
            "not checked: down",
        )];
        for mut unchecked in [closed, open] {
            assert_eq!(validation_status(&unchecked), "AVAP_PARSER_UNAVAILABLE");
            unchecked
                .unavailable_statuses
                .insert("avap_parser".into(), "PARSER_UNAVAILABLE".into());
            assert_eq!(validation_status(&unchecked), "PARSER_UNAVAILABLE");
            assert_eq!(
                enforcement_json(&unchecked)["validation_status"],
                "PARSER_UNAVAILABLE"
            );
        }
    }

    /// A first answer that passed every check: one attempt, nothing wrong, validated; a
    /// route, a second attempt, a repair or a fallback each show.
    #[test]
    fn a_clean_first_pass_is_validated_with_nothing_to_report() {
        let clean = outcome(Status::Passed, Vec::new(), vec![attempt(None, &[])]);
        let expected = json!({
            "attempts": 1, "fallback_used": false, "issues": [], "repairs": [],
            "status": "passed", "stop_reason": {"reason": "clean"},
            "unchecked_validators": [], "validated": true, "validation_status": "",
            "warnings": [],
        });
        assert_eq!(enforcement_json(&clean), expected);
        let route = json!({"name": "r"});
        let second = outcome(
            Status::Passed,
            Vec::new(),
            vec![attempt(None, &[]), attempt(None, &[])],
        );
        let repaired = outcome(Status::Repaired, Vec::new(), vec![attempt(None, &["trim"])]);
        let fallback = Outcome {
            fallback_used: true,
            ..clean.clone()
        };
        let differs = |enforcement: Enforcement<'_>, key: &str, value: Value| {
            let mut expected = expected.clone();
            expected[key] = value;
            let written = serde_json::to_value(&enforcement).expect("serializes");
            assert_eq!(written, expected, "{key}");
        };
        differs(
            Enforcement::of(&clean).routed(Some(&route)),
            "route",
            route.clone(),
        );
        differs(Enforcement::of(&second), "attempts", json!(2));
        let mut repaired_value = serde_json::to_value(Enforcement::of(&repaired)).expect("JSON");
        assert_eq!(repaired_value["repairs"], json!(["trim"]));
        assert_eq!(repaired_value["status"], "repaired");
        repaired_value["repairs"] = json!([]);
        repaired_value["status"] = json!("passed");
        assert_eq!(repaired_value, expected);
        let fallback_value = serde_json::to_value(Enforcement::of(&fallback)).expect("JSON");
        assert_eq!(fallback_value["fallback_used"], true);
        assert_eq!(fallback_value["validated"], false);
    }
}
