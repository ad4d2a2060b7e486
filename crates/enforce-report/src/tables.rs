//! The report's tables, built once from the [`Report`] and shown by both renderers: the
//! terminal (`text`) and the HTML page, where each sits under its chart.

use super::aggregate::{Bucket, Percentiles, Report, StatusCounts, STATUSES};
pub use crate::render::table::Table;

/// A percentage with no decimals, or `-` for an empty whole.
pub fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".into()
    } else {
        format!("{:.0}%", part as f64 * 100.0 / whole as f64)
    }
}

/// Microseconds as milliseconds, 1 decimal.
pub fn ms(us: u64) -> String {
    format!("{:.1}", us as f64 / 1000.0)
}

/// The notes given, joined with "; ".
fn notes<const N: usize>(parts: [Option<String>; N]) -> Option<String> {
    parts
        .into_iter()
        .flatten()
        .reduce(|a, b| format!("{a}; {b}"))
}

/// "N more not shown" when a list was cut to `limit` rows.
fn cut_note(len: usize, limit: usize) -> Option<String> {
    (len > limit).then(|| format!("{} more not shown (--top)", len - limit))
}

fn status_cells(counts: &StatusCounts) -> Vec<String> {
    let mut cells = vec![counts.total.to_string()];
    cells.extend(STATUSES.iter().map(|s| counts.get(*s).to_string()));
    cells.push(percent(counts.passed + counts.repaired, counts.total));
    cells
}

const STATUS_HEADERS: [&str; 7] = [
    "requests",
    "passed",
    "repaired",
    "unresolved",
    "unavailable",
    "aborted",
    "met",
];

/// Outcomes, all and per profile.
pub fn outcomes(report: &Report) -> Table {
    let mut headers = vec!["profile"];
    headers.extend(STATUS_HEADERS);
    let mut table = Table::new("Outcomes", &headers, 1..8).note(Some(
        "met: passed or repaired, the answer meets the contract".into(),
    ));
    let mut all = vec!["all".to_string()];
    all.extend(status_cells(&report.outcomes));
    table.rows.push(all);
    for p in &report.profiles {
        let mut row = vec![p.profile.clone()];
        row.extend(status_cells(&p.outcomes));
        table.rows.push(row);
    }
    table
}

/// How a bucket's start reads: the hour, or the day.
pub fn bucket_label(start: &str, bucket: Option<Bucket>) -> String {
    match bucket {
        // "2026-11-23T22:00:00Z" → "2026-11-23 22:00"
        Some(Bucket::Hour) => start
            .get(..16)
            .map_or_else(|| start.to_string(), |s| s.replace('T', " ")),
        _ => start.get(..10).unwrap_or(start).to_string(),
    }
}

/// Outcomes over time, the latest `limit` buckets.
pub fn over_time(report: &Report, limit: usize) -> Table {
    let series = &report.over_time;
    let bucket = series.bucket.map_or("time", |b| match b {
        Bucket::Hour => "hour (UTC)",
        Bucket::Day => "day (UTC)",
        Bucket::Week => "week from (UTC)",
    });
    let mut headers = vec![bucket];
    headers.extend(STATUS_HEADERS);
    let skip = series.buckets.len().saturating_sub(limit);
    let mut table = Table::new("Outcomes over time", &headers, 1..8).note(notes([
        (series.undated > 0).then(|| {
            format!(
                "{} request(s) without a time, from older proxy lines, are in no bucket",
                series.undated
            )
        }),
        (skip > 0).then(|| format!("{skip} earlier bucket(s) not shown (--top)")),
    ]));
    for b in &series.buckets[skip..] {
        let mut row = vec![bucket_label(&b.start, series.bucket)];
        row.extend(status_cells(&b.outcomes));
        table.rows.push(row);
    }
    table
}

/// The most frequent issue codes.
pub fn issue_codes(report: &Report, limit: usize) -> Table {
    let mut table = Table::new(
        "Top issue codes",
        &[
            "profile",
            "validator",
            "code",
            "severity",
            "found",
            "requests",
        ],
        4..6,
    )
    .note(notes([
        Some("found: over every attempt; requests: with the code in any attempt".into()),
        cut_note(report.issue_codes.len(), limit),
    ]));
    for c in report.issue_codes.iter().take(limit) {
        table.rows.push(vec![
            c.profile.clone(),
            c.validator.clone(),
            c.code.clone(),
            c.severity.as_str().to_string(),
            c.occurrences.to_string(),
            c.requests.to_string(),
        ]);
    }
    table
}

/// How often a re-ask fixed each error code.
pub fn reask_fixes(report: &Report, limit: usize) -> Table {
    let mut table = Table::new(
        "Re-ask fixes",
        &[
            "validator",
            "code",
            "re-asked",
            "fixed",
            "rate",
            "by attempt (n→n+1: fixed/re-asked)",
        ],
        2..5,
    )
    .note(notes([
        Some(
            "fixed: the next attempt no longer had the code and the request ended passed or \
             repaired"
                .into(),
        ),
        cut_note(report.reask_fixes.len(), limit),
    ]));
    for f in report.reask_fixes.iter().take(limit) {
        let by_attempt: Vec<String> = f
            .by_attempt
            .iter()
            .map(|a| format!("{}→{}: {}/{}", a.attempt, a.attempt + 1, a.fixed, a.reasked))
            .collect();
        table.rows.push(vec![
            f.validator.clone(),
            f.code.clone(),
            f.reasked.to_string(),
            f.fixed.to_string(),
            percent(f.fixed, f.reasked),
            by_attempt.join(", "),
        ]);
    }
    table
}

/// Which strategy fixed which issue code, at what token cost.
pub fn strategies(report: &Report, limit: usize) -> Table {
    let mut table = Table::new(
        "Re-ask strategies",
        &[
            "strategy",
            "chosen",
            "code",
            "re-asks",
            "fixed",
            "rate",
            "tokens",
            "tokens per fix",
        ],
        3..8,
    )
    .note(notes([
        Some(
            "fixed: the re-ask's answer no longer had the code; chosen: the ladder's rung, or \
             why reask: auto took it; tokens per fix over the re-asks that reported usage"
                .into(),
        ),
        cut_note(report.strategies.len(), limit),
    ]));
    for s in report.strategies.iter().take(limit) {
        table.rows.push(vec![
            s.strategy.clone(),
            s.chosen.clone(),
            s.code.clone(),
            s.reasks.to_string(),
            s.fixed.to_string(),
            percent(s.fixed, s.reasks),
            s.tokens.to_string(),
            s.tokens_per_fix
                .map_or_else(|| "-".to_string(), |t| format!("{t:.0}")),
        ]);
    }
    table
}

/// Repairs applied, by validator.
pub fn repairs(report: &Report, limit: usize) -> Table {
    let r = &report.repairs;
    let mut table = Table::new("Repairs applied", &["validator", "repairs"], 1..2).note(notes([
        Some(format!(
            "{} request(s) had a repair applied; {} ended repaired",
            r.requests, report.outcomes.repaired
        )),
        cut_note(r.by_validator.len(), limit),
    ]));
    for v in r.by_validator.iter().take(limit) {
        table.rows.push(vec![v.name.clone(), v.count.to_string()]);
    }
    table
}

/// Requests by number of attempts.
pub fn attempts(report: &Report) -> Table {
    let a = &report.attempts;
    let mut table = Table::new(
        "Attempts per request",
        &["attempts", "requests", "share"],
        0..3,
    )
    .note(Some(format!(
        "{} attempt(s) for {} request(s), {:.2} per request",
        a.total, report.outcomes.total, a.mean
    )));
    for d in &a.distribution {
        table.rows.push(vec![
            d.attempts.to_string(),
            d.requests.to_string(),
            percent(d.requests, report.outcomes.total),
        ]);
    }
    table
}

/// Tokens and cost, first attempts against re-asks.
pub fn spend(report: &Report) -> Table {
    let mut table = Table::new(
        "Spend: first attempts and re-asks",
        &[
            "",
            "attempts",
            "with usage",
            "input tokens",
            "output tokens",
            "with cost",
            "cost USD",
        ],
        1..7,
    )
    .note(Some(
        "as the runners reported them; attempts without usage or cost add nothing".into(),
    ));
    let s = &report.spend;
    let total_cost = s.first_attempts.cost_usd + s.reasks.cost_usd;
    for (name, part) in [
        ("first attempts", &s.first_attempts),
        ("re-asks", &s.reasks),
    ] {
        table.rows.push(vec![
            name.to_string(),
            part.attempts.to_string(),
            part.with_usage.to_string(),
            part.input_tokens.to_string(),
            part.output_tokens.to_string(),
            part.with_cost.to_string(),
            format!("{:.4}", part.cost_usd),
        ]);
    }
    if total_cost > 0.0 {
        table.note = Some(format!(
            "{}; re-asks are {:.0}% of the cost",
            table.note.unwrap_or_default(),
            s.reasks.cost_usd * 100.0 / total_cost
        ));
    }
    table
}

fn percentile_row(name: &str, p: &Percentiles) -> Vec<String> {
    vec![
        name.to_string(),
        p.count.to_string(),
        ms(p.p50),
        ms(p.p90),
        ms(p.p99),
        ms(p.max),
    ]
}

/// Latency percentiles.
pub fn latency(report: &Report) -> Table {
    let l = &report.latency;
    let mut table = Table::new(
        "Latency (ms)",
        &["", "requests", "p50", "p90", "p99", "max"],
        1..6,
    )
    .note(Some(
        "total = upstream (waiting on the model) + enforce (validation, repairs, bookkeeping)"
            .into(),
    ));
    table.rows.push(percentile_row("total", &l.total));
    table.rows.push(percentile_row("upstream", &l.upstream));
    table.rows.push(percentile_row("enforce", &l.own));
    table
}

/// Early cuts of streamed attempts, by code.
pub fn cuts(report: &Report, limit: usize) -> Table {
    let c = &report.cuts;
    let note = if c.attempts == 0 {
        "no attempt was cut early".to_string()
    } else {
        format!(
            "{} attempt(s) cut early, after {} bytes (p50), {} (p90); {} output token(s) \
             generated before the cuts ({} attempt(s) counted by enforce: usage_estimated)",
            c.attempts, c.bytes.p50, c.bytes.p90, c.output_tokens, c.estimated_usage
        )
    };
    let mut table = Table::new("Early cuts", &["code", "cuts"], 1..2).note(Some(note));
    for v in c.by_code.iter().take(limit) {
        table.rows.push(vec![v.name.clone(), v.count.to_string()]);
    }
    table
}

/// Requests by the route the proxy picked.
pub fn routes(report: &Report, limit: usize) -> Table {
    let routed: u64 = report.routes.iter().map(|r| r.requests).sum();
    let note = format!("{routed} of {} request(s) routed", report.outcomes.total);
    let mut table =
        Table::new("Routes", &["route", "profile", "by", "requests"], 3..4).note(Some(note));
    for r in report.routes.iter().take(limit) {
        table.rows.push(vec![
            r.route.clone(),
            r.profile.clone(),
            r.by.clone(),
            r.requests.to_string(),
        ]);
    }
    table
}

/// Requests by what the input stage did before the model call.
pub fn input_checks(report: &Report) -> Table {
    let checked: u64 = report.input_checks.iter().map(|c| c.count).sum();
    let note = format!("{checked} request(s) checked before the model");
    let mut table = Table::new("Input checks", &["action", "requests"], 1..2).note(Some(note));
    for c in &report.input_checks {
        table.rows.push(vec![c.name.clone(), c.count.to_string()]);
    }
    table
}

/// Requests by the API key that made them, and how many set their own limits.
pub fn keys(report: &Report, limit: usize) -> Table {
    let named: u64 = report.keys.iter().map(|k| k.count).sum();
    let note = format!(
        "{named} of {} request(s) made with a named key; {} set their own limits",
        report.outcomes.total, report.request_limits
    );
    let mut table = Table::new("Keys", &["key", "requests"], 1..2).note(Some(note));
    for k in report.keys.iter().take(limit) {
        table.rows.push(vec![k.name.clone(), k.count.to_string()]);
    }
    table
}

/// The lines above the tables: what was read, skipped and left out.
pub fn input_summary(report: &Report) -> Vec<String> {
    let i = &report.input;
    let mut lines = vec![format!(
        "{} file(s), {} line(s), {} record(s), {} invalid line(s) skipped; {} request(s) counted",
        report.files.len(),
        i.lines,
        i.records,
        i.invalid,
        i.counted
    )];
    if i.refused > 0 {
        lines.push(format!(
            "  {} refused request(s) (refused before any enforcement: not counted)",
            i.refused
        ));
    }
    for f in report.files.iter().filter(|f| f.invalid > 0) {
        let at: Vec<String> = f.invalid_lines.iter().map(u64::to_string).collect();
        let more = if f.invalid as usize > f.invalid_lines.len() {
            ", ..."
        } else {
            ""
        };
        lines.push(format!(
            "  {}: {} invalid line(s) at {}{more}",
            f.path,
            f.invalid,
            at.join(", ")
        ));
    }
    for f in &report.files {
        if let Some(error) = &f.error {
            lines.push(format!("  {error}"));
        }
    }
    if let Some(since) = &report.since {
        lines.push(format!(
            "since {since}: {} older request(s) and {} without a time left out",
            i.before_since, i.undated_left_out
        ));
    }
    lines
}
