use super::super::read;
use super::*;
use enforce_core::{Attempt, Issue, Outcome, StopReason};

fn attempt(number: u32, codes: &[&str]) -> Attempt {
    Attempt {
        number,
        response_bytes: 10,
        response_digest: "0".repeat(16),
        issues: codes
            .iter()
            .map(|code| Issue::error("v", *code, "message"))
            .collect(),
        runner_us: 1000,
        validation_us: 10,
        usage: None,
        cost_usd: None,
        session_id: None,
        repairs: Vec::new(),
        cut: None,
        finish_reason: None,
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

/// A record as `enforce serve` writes it: the serialized outcome plus time and profile.
fn record(status: Status, attempts: Vec<Attempt>, ts: Option<&str>) -> Record {
    let outcome = Outcome {
        status,
        stop_reason: StopReason::RetriesExhausted,
        response: Some("text".into()),
        tool_calls: Vec::new(),
        issues: Vec::new(),
        warnings: Vec::new(),
        attempts,
        input: None,
        fallback_used: false,
        session_id: None,
        usage: None,
        cost_usd: None,
        total_us: 2000,
        runner_us: 1500,
        unavailable_statuses: Default::default(),
    };
    let mut value = serde_json::to_value(&outcome).expect("serializes");
    if let Some(ts) = ts {
        value["ts"] = ts.into();
        value["profile"] = "chat".into();
    }
    serde_json::from_value(value).expect("reads as a record")
}

fn report_of(records: &[Record], options: Options) -> Report {
    let mut aggregator = Aggregator::new(options);
    for r in records {
        aggregator.add(r);
    }
    aggregator.finish(Vec::new(), None)
}

fn fixes<'a>(report: &'a Report, code: &str) -> &'a CodeFixes {
    report
        .reask_fixes
        .iter()
        .find(|f| f.code == code)
        .expect("the code was re-asked")
}

#[test]
fn routes_and_input_checks_are_counted() {
    let with = |route: Option<(&str, &str, &str)>, action: Option<&str>| {
        let mut value = serde_json::to_value(Outcome::interrupted(
            StopReason::InputRejected,
            Vec::new(),
            std::time::Duration::ZERO,
        ))
        .expect("serializes");
        if let Some((name, profile, by)) = route {
            value["route"] = serde_json::json!({"name": name, "profile": profile, "by": by});
        }
        if let Some(action) = action {
            value["input"] =
                serde_json::json!({"passed": false, "action": action, "issues": [], "us": 1});
        }
        serde_json::from_value::<Record>(value).expect("reads as a record")
    };
    let records = [
        with(Some(("code", "code_generation", "field")), None),
        with(Some(("code", "code_generation", "field")), None),
        with(Some(("rag", "retrieval", "classify")), Some("reformulated")),
        with(Some(("rag", "retrieval", "classify")), Some("none")),
        with(Some(("rag", "retrieval", "classify")), Some("reformulated")),
        with(None, None),
    ];
    let report = report_of(&records, Options::default());
    let routes: Vec<(&str, &str, &str, u64)> = report
        .routes
        .iter()
        .map(|r| {
            (
                r.route.as_str(),
                r.profile.as_str(),
                r.by.as_str(),
                r.requests,
            )
        })
        .collect();
    assert_eq!(
        routes,
        vec![
            ("rag", "retrieval", "classify", 3),
            ("code", "code_generation", "field", 2)
        ]
    );
    let actions: Vec<(&str, u64)> = report
        .input_checks
        .iter()
        .map(|c| (c.name.as_str(), c.count))
        .collect();
    assert_eq!(actions, vec![("reformulated", 2), ("none", 1)]);
    let table = super::super::tables::routes(&report, 10);
    assert_eq!(table.note.as_deref(), Some("5 of 6 request(s) routed"));
    let text = super::super::text::render(&report, 10);
    assert!(
        text.contains("Input checks\n  (3 request(s) checked before the model)"),
        "{text}"
    );
}

#[test]
fn requests_are_counted_by_key_and_by_limits_of_their_own() {
    let with = |key: Option<&str>, limits: bool| {
        let mut value = serde_json::to_value(Outcome::interrupted(
            StopReason::InputRejected,
            Vec::new(),
            std::time::Duration::ZERO,
        ))
        .expect("serializes");
        if let Some(key) = key {
            value["key"] = serde_json::json!(key);
        }
        if limits {
            value["request_limits"] = serde_json::json!(
                {"max_retries": {"asked": 0, "applied": 0, "from": "request"}}
            );
        }
        serde_json::from_value::<Record>(value).expect("reads as a record")
    };
    let records = [
        with(Some("support-app"), true),
        with(Some("ops"), false),
        with(Some("support-app"), false),
        with(Some("support-app"), true),
        with(None, true),
        with(None, false),
    ];
    let report = report_of(&records, Options::default());
    let keys: Vec<(&str, u64)> = report
        .keys
        .iter()
        .map(|k| (k.name.as_str(), k.count))
        .collect();
    assert_eq!(keys, vec![("support-app", 3), ("ops", 1)]);
    assert_eq!(report.request_limits, 3);
    let table = super::super::tables::keys(&report, 10);
    assert_eq!(
        table.note.as_deref(),
        Some("4 of 6 request(s) made with a named key; 3 set their own limits")
    );
    let text = super::super::text::render(&report, 10);
    assert!(text.contains("support-app"), "{text}");
}

#[test]
fn a_fix_needs_the_code_gone_next_time_and_a_successful_end() {
    let records = [
        // A gone after attempt 1, request passed: fixed. B stays: re-asked, not fixed.
        record(
            Status::Passed,
            vec![
                attempt(1, &["A", "B", "A"]),
                attempt(2, &["B"]),
                attempt(3, &[]),
            ],
            None,
        ),
        // A gone after attempt 1, but the request ended unresolved: not a fix.
        record(
            Status::Unresolved,
            vec![attempt(1, &["A"]), attempt(2, &["C"])],
            None,
        ),
    ];
    let report = report_of(&records, Options::default());
    let a = fixes(&report, "A");
    assert_eq!(
        (a.reasked, a.fixed),
        (2, 1),
        "A twice in one attempt counts once"
    );
    assert_eq!(a.by_attempt.len(), 1);
    let b = fixes(&report, "B");
    assert_eq!((b.reasked, b.fixed), (2, 1));
    let by: Vec<(u32, u64, u64)> = b
        .by_attempt
        .iter()
        .map(|x| (x.attempt, x.reasked, x.fixed))
        .collect();
    assert_eq!(by, vec![(1, 1, 0), (2, 1, 1)]);
    // C was in the last attempt: nobody asked again.
    assert!(report.reask_fixes.iter().all(|f| f.code != "C"));
    // Found counts every occurrence; requests counts each request once.
    let found_a = report
        .issue_codes
        .iter()
        .find(|c| c.code == "A")
        .expect("A");
    assert_eq!((found_a.occurrences, found_a.requests), (3, 2));
    assert_eq!(found_a.profile, UNKNOWN_PROFILE);
}

#[test]
fn warnings_are_never_counted_as_reasked() {
    let mut first = attempt(1, &[]);
    first.issues.push(Issue::warning("v", "STYLE", "message"));
    let report = report_of(
        &[record(Status::Passed, vec![first, attempt(2, &[])], None)],
        Options::default(),
    );
    assert!(report.reask_fixes.is_empty());
    assert_eq!(report.issue_codes[0].severity, Severity::Warning);
}

#[test]
fn percentiles_are_nearest_rank() {
    let p = Percentiles::of((1..=10).rev().collect());
    assert_eq!((p.count, p.p50, p.p90, p.p99, p.max), (10, 5, 9, 10, 10));
    assert_eq!(Percentiles::of(Vec::new()), Percentiles::default());
    let one = Percentiles::of(vec![7]);
    assert_eq!((one.p50, one.p99), (7, 7));
}

#[test]
fn buckets_follow_the_span_and_weeks_start_on_monday() {
    assert_eq!(Bucket::for_span(2 * DAY_MS), Bucket::Hour);
    assert_eq!(Bucket::for_span(2 * DAY_MS + 1), Bucket::Day);
    assert_eq!(Bucket::for_span(200 * DAY_MS), Bucket::Week);
    // 2026-11-26 is a Thursday; its week began on Monday 2026-11-23.
    let thursday = read::parse_time_ms("2026-11-26T15:00:00Z").expect("time");
    assert_eq!(
        format_time_ms(Bucket::Week.start_of(thursday)),
        "2026-11-23T00:00:00Z"
    );
}

#[test]
fn empty_buckets_between_records_are_listed_and_since_leaves_records_out() {
    let records = [
        record(Status::Passed, vec![], Some("2026-11-20T10:00:00Z")),
        record(Status::Aborted, vec![], Some("2026-11-23T10:00:00Z")),
        record(Status::Passed, vec![], None),
    ];
    let report = report_of(&records, Options::default());
    let days: Vec<(&str, u64)> = report
        .over_time
        .buckets
        .iter()
        .map(|b| (&b.start[..10], b.outcomes.total))
        .collect();
    assert_eq!(
        days,
        vec![
            ("2026-11-20", 1),
            ("2026-11-21", 0),
            ("2026-11-22", 0),
            ("2026-11-23", 1)
        ]
    );
    assert_eq!(report.over_time.undated, 1);
    assert_eq!(report.outcomes.total, 3);

    let since = read::parse_time_ms("2026-11-21T00:00:00Z");
    let report = report_of(
        &records,
        Options {
            since_ms: since,
            bucket: Some(Bucket::Hour),
        },
    );
    assert_eq!(report.outcomes.total, 1);
    assert_eq!(report.outcomes.aborted, 1);
    assert_eq!(report.input.before_since, 1);
    assert_eq!(report.input.undated_left_out, 1);
    assert_eq!(report.over_time.bucket, Some(Bucket::Hour));
    assert_eq!(report.over_time.buckets[0].start, "2026-11-23T10:00:00Z");
}
