//! `enforce report` end to end on the fixture audit files in `tests/fixtures/audit/` (their
//! README lists every record and the numbers they make).

use super::{repo, text, BIN};
use serde_json::Value;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The fixture as an operator has it after two rotations: the live log, the last one plain,
/// the one before gzip'd (made here, so the repository holds no binary).
fn rotated_logs(dir: &Path) -> Vec<PathBuf> {
    let fixtures = repo().join("tests/fixtures/audit");
    let live = dir.join("audit.jsonl");
    let previous = dir.join("audit.jsonl.1");
    let oldest = dir.join("audit.jsonl.2.gz");
    std::fs::copy(fixtures.join("audit.jsonl"), &live).expect("copy");
    std::fs::copy(fixtures.join("audit.jsonl.1"), &previous).expect("copy");
    let plain = std::fs::read(fixtures.join("audit.jsonl.2")).expect("fixture");
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&plain).expect("in memory");
    std::fs::write(&oldest, gz.finish().expect("in memory")).expect("write");
    vec![live, previous, oldest]
}

fn report(args: &[&str], files: &[PathBuf]) -> Output {
    Command::new(BIN)
        .arg("report")
        .args(args)
        .args(files)
        .output()
        .expect("enforce runs")
}

fn json_report(args: &[&str], files: &[PathBuf]) -> Value {
    let out = report(&[&["--format", "json"], args].concat(), files);
    assert!(out.status.success(), "{}", text(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON document")
}

#[test]
fn every_fixture_record_is_an_outcome_as_enforce_core_reads_it() {
    // The fixture must stay realistic: each whole line is an audit record of today's shape
    // (plus the time/profile fields the front ends add), the others are the torn ones.
    let dir = repo().join("tests/fixtures/audit");
    let mut records = 0;
    for name in ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"] {
        for line in std::fs::read_to_string(dir.join(name))
            .expect("fixture")
            .lines()
        {
            if let Ok(value) = serde_json::from_str::<Value>(line) {
                serde_json::from_value::<enforce_core::Outcome>(value)
                    .unwrap_or_else(|e| panic!("{name}: {e}: {line}"));
                records += 1;
            }
        }
    }
    assert_eq!(records, 11);
}

#[test]
fn numbers_match_the_fixture() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = rotated_logs(dir.path());
    let r = json_report(&[], &files);

    // Three torn or foreign lines, one per file, skipped and pointed at.
    assert_eq!(r["input"]["lines"], 14);
    assert_eq!(r["input"]["records"], 11);
    assert_eq!(r["input"]["invalid"], 3);
    let invalid: Vec<&Value> = r["files"]
        .as_array()
        .expect("files")
        .iter()
        .map(|f| &f["invalid_lines"])
        .collect();
    assert_eq!(
        invalid,
        [
            &serde_json::json!([7]),
            &serde_json::json!([3]),
            &serde_json::json!([2])
        ]
    );
    assert_eq!(r["files"][2]["gzip"], true);

    let o = &r["outcomes"];
    let statuses: Vec<u64> = [
        "total",
        "passed",
        "repaired",
        "unresolved",
        "unavailable",
        "aborted",
    ]
    .iter()
    .map(|k| o[k].as_u64().expect("count"))
    .collect();
    assert_eq!(statuses, [11, 6, 2, 1, 1, 1]);
    let profiles: Vec<(&str, u64)> = r["profiles"]
        .as_array()
        .expect("profiles")
        .iter()
        .map(|p| {
            (
                p["profile"].as_str().expect("name"),
                p["outcomes"]["total"].as_u64().expect("n"),
            )
        })
        .collect();
    assert_eq!(profiles, [("(unknown)", 2), ("adr", 2), ("chat", 7)]);

    // Days (the records span 2026-11-19 to -23); the two old proxy lines have no time.
    let t = &r["over_time"];
    assert_eq!(t["bucket"], "day");
    assert_eq!(t["undated"], 2);
    let days: Vec<(String, u64)> = t["buckets"]
        .as_array()
        .expect("buckets")
        .iter()
        .map(|b| {
            (
                b["start"].as_str().expect("start")[..10].to_string(),
                b["outcomes"]["total"].as_u64().expect("n"),
            )
        })
        .collect();
    let expected = [
        ("2026-11-19", 1),
        ("2026-11-20", 3),
        ("2026-11-21", 1),
        ("2026-11-22", 2),
        ("2026-11-23", 2),
    ];
    assert_eq!(days, expected.map(|(d, n)| (d.to_string(), n)));

    let codes: Vec<(String, u64, u64)> = r["issue_codes"]
        .as_array()
        .expect("codes")
        .iter()
        .map(|c| {
            (
                format!(
                    "{} {}/{} {}",
                    c["profile"].as_str().expect("p"),
                    c["validator"].as_str().expect("v"),
                    c["code"].as_str().expect("c"),
                    c["severity"].as_str().expect("s")
                ),
                c["occurrences"].as_u64().expect("n"),
                c["requests"].as_u64().expect("n"),
            )
        })
        .collect();
    assert_eq!(
        codes[0],
        (
            "adr step_marker/MISSING_STEP_MARKER error".to_string(),
            3,
            1
        )
    );
    assert!(codes.contains(&(
        "chat step_marker/MISSING_STEP_MARKER error".to_string(),
        2,
        2
    )));
    assert!(codes.contains(&(
        "(unknown) step_marker/MISSING_STEP_MARKER error".to_string(),
        2,
        1
    )));
    assert!(codes.contains(&("adr adr_structure/MISSING_SECTION error".to_string(), 2, 2)));
    assert!(codes.contains(&("adr file_refs/UNKNOWN_PATH warning".to_string(), 1, 1)));
    assert_eq!(codes.len(), 6);

    // MISSING_STEP_MARKER: re-asked after attempt 1 in four requests (fixed in the two that
    // passed), after attempt 2 once (not fixed: the repair did it). MISSING_SECTION: fixed in
    // the repaired ADR, gone but not "fixed" in the unresolved one.
    let fixes = r["reask_fixes"].as_array().expect("fixes");
    assert_eq!(
        fixes.len(),
        2,
        "MISSING_ADR_FIELD was in a last attempt; warnings never count"
    );
    assert_eq!(fixes[0]["code"], "MISSING_STEP_MARKER");
    assert_eq!(
        (fixes[0]["reasked"].as_u64(), fixes[0]["fixed"].as_u64()),
        (Some(5), Some(2))
    );
    assert_eq!(
        fixes[0]["by_attempt"],
        serde_json::json!([{"attempt": 1, "reasked": 4, "fixed": 2}, {"attempt": 2, "reasked": 1, "fixed": 0}])
    );
    assert_eq!(fixes[1]["code"], "MISSING_SECTION");
    assert_eq!(
        (fixes[1]["reasked"].as_u64(), fixes[1]["fixed"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(fixes[1]["rate"], 0.5);

    assert_eq!(r["repairs"]["requests"], 2);
    assert_eq!(
        r["repairs"]["by_validator"],
        serde_json::json!([{"name": "step_marker", "count": 2}])
    );

    assert_eq!(r["attempts"]["total"], 16);
    assert_eq!(
        r["attempts"]["distribution"],
        serde_json::json!([
            {"attempts": 0, "requests": 1}, {"attempts": 1, "requests": 5},
            {"attempts": 2, "requests": 4}, {"attempts": 3, "requests": 1}
        ])
    );

    let first = &r["spend"]["first_attempts"];
    let reasks = &r["spend"]["reasks"];
    let tokens = |p: &Value| {
        [
            &p["attempts"],
            &p["with_usage"],
            &p["input_tokens"],
            &p["output_tokens"],
            &p["with_cost"],
        ]
        .map(|v| v.as_u64().expect("n"))
    };
    assert_eq!(tokens(first), [10, 7, 920, 405, 5]);
    assert_eq!(tokens(reasks), [6, 5, 1000, 420, 4]);
    assert!((first["cost_usd"].as_f64().expect("cost") - 0.0139).abs() < 1e-9);
    assert!((reasks["cost_usd"].as_f64().expect("cost") - 0.0237).abs() < 1e-9);

    // Nearest-rank over the eleven requests (µs).
    let pct = |p: &Value| {
        [&p["count"], &p["p50"], &p["p90"], &p["p99"], &p["max"]].map(|v| v.as_u64().expect("n"))
    };
    let l = &r["latency"];
    assert_eq!(
        pct(&l["total"]),
        [11, 1_800_000, 9_000_000, 30_000_000, 30_000_000]
    );
    assert_eq!(
        pct(&l["upstream"]),
        [11, 1_700_000, 8_700_000, 30_000_000, 30_000_000]
    );
    assert_eq!(pct(&l["own"]), [11, 50_000, 100_000, 300_000, 300_000]);

    assert_eq!(r["cuts"]["attempts"], 1);
    assert_eq!(
        r["cuts"]["by_code"],
        serde_json::json!([{"name": "MISSING_STEP_MARKER", "count": 1}])
    );
    assert_eq!(r["cuts"]["bytes"]["p50"], 512);
    // What the cut attempts spent, and how much of that is enforce's own count.
    assert_eq!(r["cuts"]["output_tokens"], 20);
    assert_eq!(r["cuts"]["estimated_usage"], 1);
}

#[test]
fn since_leaves_out_older_and_undated_records_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = rotated_logs(dir.path());
    let r = json_report(&["--since", "2026-11-21"], &files);
    assert_eq!(r["since"], "2026-11-21T00:00:00Z");
    assert_eq!(r["input"]["counted"], 5);
    assert_eq!(r["input"]["before_since"], 4);
    assert_eq!(r["input"]["undated_left_out"], 2);
    assert_eq!(r["outcomes"]["passed"], 1);
    assert_eq!(r["outcomes"]["repaired"], 1);

    let out = report(&["--since", "2026-11-21T00:00:00Z"], &files);
    let stdout = text(&out.stdout);
    assert!(
        stdout.contains("4 older request(s) and 2 without a time left out"),
        "{stdout}"
    );

    let out = report(&["--since", "soon"], &files);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("24h"), "{}", text(&out.stderr));
}

#[test]
fn text_report_is_a_set_of_compact_tables() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = rotated_logs(dir.path());
    let out = report(&[], &files);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for title in [
        "Outcomes\n",
        "Outcomes over time",
        "Top issue codes",
        "Re-ask fixes",
        "Repairs applied",
        "Attempts per request",
        "Spend: first attempts and re-asks",
        "Latency (ms)",
        "Early cuts",
    ] {
        assert!(stdout.contains(title), "{title} missing:\n{stdout}");
    }
    assert!(stdout.contains("3 file(s), 14 line(s), 11 record(s), 3 invalid line(s) skipped"));
    assert!(
        stdout.contains("audit.jsonl: 1 invalid line(s) at 7"),
        "{stdout}"
    );
    let all = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("all "))
        .expect("all row");
    let cells: Vec<&str> = all.split_whitespace().collect();
    assert_eq!(cells, ["all", "11", "6", "2", "1", "1", "1", "73%"]);
    let fix = stdout
        .lines()
        .find(|l| l.contains("MISSING_STEP_MARKER") && l.contains("→"))
        .expect("fix row");
    assert!(
        fix.contains("1→2: 2/4, 2→3: 0/1") && fix.contains("40%"),
        "{fix}"
    );
    // --top cuts the long tables and says so.
    let out = report(&["--top", "2"], &files);
    assert!(
        text(&out.stdout).contains("4 more not shown (--top)"),
        "{}",
        text(&out.stdout)
    );
}

#[test]
fn html_report_is_one_self_contained_page_with_one_svg_per_chart() {
    let dir = tempfile::tempdir().expect("temp dir");
    let files = rotated_logs(dir.path());
    let page = dir.path().join("report.html");
    let out = report(&["--html", page.to_str().expect("utf-8 path")], &files);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let html = std::fs::read_to_string(&page).expect("written");
    assert!(html.starts_with("<!DOCTYPE html>"));
    let figures = html.matches("<figure").count();
    assert_eq!(figures, 13, "one figure per chart");
    assert_eq!(html.matches("<svg").count(), figures, "one SVG per chart");
    assert_eq!(html.matches("</svg>").count(), figures);
    assert_eq!(
        html.matches("<table>").count(),
        figures,
        "a table under each chart"
    );
    for figure in html.split("<figure").skip(1) {
        let svg_at = figure.find("<svg").expect("svg");
        let table_at = figure.find("<table>").expect("table");
        assert!(svg_at < table_at, "the table comes under its chart");
    }
    // Nothing is fetched: no URL of any scheme, no script, no external resource. (The
    // fixture's foreign line holds an http:// URL; skipped lines never reach the page.)
    for needle in [
        "http:", "https:", "//", "<script", "src=", "href=", "url(", "@import",
    ] {
        assert!(!html.contains(needle), "the page holds {needle}");
    }
    assert!(html.contains("MISSING_STEP_MARKER"));
    assert!(html.contains("2026-11-22"));
}

#[test]
fn an_unreadable_file_is_a_usage_error_and_help_explains_every_option() {
    let out = report(&[], &[PathBuf::from("/nonexistent/audit.jsonl")]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("cannot open /nonexistent/audit.jsonl"));

    let out = Command::new(BIN)
        .args(["report", "--help"])
        .output()
        .expect("runs");
    let help = text(&out.stdout);
    for option in [
        "--since",
        "--format",
        "--html",
        "--bucket",
        "--top",
        "gzip",
        "torn",
        "(unknown)",
    ] {
        assert!(help.contains(option), "--help lacks {option}:\n{help}");
    }
}
