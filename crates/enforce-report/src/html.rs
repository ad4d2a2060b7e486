//! The HTML report: one self-contained page (inline CSS and SVG; no script, no font, no link
//! to anywhere), one figure per chart with its table beneath.

use super::aggregate::{Report, STATUSES};
use super::tables;
use crate::render::chart::{self, ChartError, Layout, Series};
use crate::render::html::{escape, figure, page_start, status_color, BLUE, GREY, ORANGE, TEAL};
use std::fmt::Write as _;

fn status_series(counts: &[&super::aggregate::StatusCounts]) -> Vec<Series> {
    STATUSES
        .iter()
        .map(|&status| Series {
            name: status.as_str().to_string(),
            color: status_color(status),
            values: counts.iter().map(|c| c.get(status) as f64).collect(),
        })
        .collect()
}

/// The whole page. `top` cuts the longer tables and charts (time buckets are all shown).
pub fn render(report: &Report, top: usize) -> Result<String, ChartError> {
    let mut out = page_start("enforce report");
    for line in tables::input_summary(report) {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(line.trim()));
    }

    let series = &report.over_time;
    let labels: Vec<String> = series
        .buckets
        .iter()
        .map(|b| tables::bucket_label(&b.start, series.bucket))
        .collect();
    let counts: Vec<_> = series.buckets.iter().map(|b| &b.outcomes).collect();
    let svg = chart::columns(
        "Outcomes over time",
        "requests",
        &labels,
        &status_series(&counts),
        Layout::Stacked,
    )?;
    figure(
        &mut out,
        "over-time",
        &svg,
        &tables::over_time(report, usize::MAX),
    );

    let labels: Vec<String> = report.profiles.iter().map(|p| p.profile.clone()).collect();
    let counts: Vec<_> = report.profiles.iter().map(|p| &p.outcomes).collect();
    let svg = chart::columns(
        "Outcomes by profile",
        "requests",
        &labels,
        &status_series(&counts),
        Layout::Stacked,
    )?;
    figure(&mut out, "outcomes", &svg, &tables::outcomes(report));

    let codes = &report.issue_codes[..report.issue_codes.len().min(top)];
    let svg = chart::bars(
        "Top issue codes",
        "found (over every attempt)",
        &codes
            .iter()
            .map(|c| format!("{} {}/{}", c.profile, c.validator, c.code))
            .collect::<Vec<_>>(),
        &codes
            .iter()
            .map(|c| c.occurrences as f64)
            .collect::<Vec<_>>(),
        ORANGE,
        None,
    )?;
    figure(
        &mut out,
        "issue-codes",
        &svg,
        &tables::issue_codes(report, top),
    );

    let fixes = &report.reask_fixes[..report.reask_fixes.len().min(top)];
    let svg = chart::bars(
        "Re-ask fix rate",
        "% of re-asks after which the code was gone",
        &fixes
            .iter()
            .map(|f| format!("{}/{}", f.validator, f.code))
            .collect::<Vec<_>>(),
        &fixes.iter().map(|f| f.rate * 100.0).collect::<Vec<_>>(),
        BLUE,
        Some(100.0),
    )?;
    figure(
        &mut out,
        "reask-fixes",
        &svg,
        &tables::reask_fixes(report, top),
    );

    let repairs = &report.repairs.by_validator[..report.repairs.by_validator.len().min(top)];
    let svg = chart::bars(
        "Repairs applied",
        "repairs",
        &repairs.iter().map(|r| r.name.clone()).collect::<Vec<_>>(),
        &repairs.iter().map(|r| r.count as f64).collect::<Vec<_>>(),
        TEAL,
        None,
    )?;
    figure(&mut out, "repairs", &svg, &tables::repairs(report, top));

    let distribution = &report.attempts.distribution;
    let svg = chart::columns(
        "Attempts per request",
        "requests",
        &distribution
            .iter()
            .map(|d| d.attempts.to_string())
            .collect::<Vec<_>>(),
        &[Series {
            name: "requests".into(),
            color: BLUE,
            values: distribution.iter().map(|d| d.requests as f64).collect(),
        }],
        Layout::Stacked,
    )?;
    figure(&mut out, "attempts", &svg, &tables::attempts(report));

    let (first, reasks) = (&report.spend.first_attempts, &report.spend.reasks);
    let share = |part: f64, other: f64| {
        if part + other > 0.0 {
            part * 100.0 / (part + other)
        } else {
            0.0
        }
    };
    let pairs = [
        (first.input_tokens as f64, reasks.input_tokens as f64),
        (first.output_tokens as f64, reasks.output_tokens as f64),
        (first.cost_usd, reasks.cost_usd),
    ];
    let svg = chart::columns(
        "Spend: first attempts and re-asks",
        "% of the total",
        &["input tokens", "output tokens", "cost"].map(String::from),
        &[
            Series {
                name: "first attempts".into(),
                color: BLUE,
                values: pairs.iter().map(|(f, r)| share(*f, *r)).collect(),
            },
            Series {
                name: "re-asks".into(),
                color: ORANGE,
                values: pairs.iter().map(|(f, r)| share(*r, *f)).collect(),
            },
        ],
        Layout::Stacked,
    )?;
    figure(&mut out, "spend", &svg, &tables::spend(report));

    let l = &report.latency;
    let as_ms = |p: &super::aggregate::Percentiles| {
        [p.p50, p.p90, p.p99].map(|us| us as f64 / 1000.0).to_vec()
    };
    let svg = chart::columns(
        "Latency percentiles",
        "ms (logarithmic)",
        &["p50", "p90", "p99"].map(String::from),
        &[
            Series {
                name: "total".into(),
                color: GREY,
                values: as_ms(&l.total),
            },
            Series {
                name: "upstream".into(),
                color: BLUE,
                values: as_ms(&l.upstream),
            },
            Series {
                name: "enforce".into(),
                color: ORANGE,
                values: as_ms(&l.own),
            },
        ],
        Layout::GroupedLog,
    )?;
    figure(&mut out, "latency", &svg, &tables::latency(report));

    let cuts = &report.cuts.by_code[..report.cuts.by_code.len().min(top)];
    let svg = chart::bars(
        "Early cuts by code",
        "attempts cut",
        &cuts.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
        &cuts.iter().map(|c| c.count as f64).collect::<Vec<_>>(),
        GREY,
        None,
    )?;
    figure(&mut out, "cuts", &svg, &tables::cuts(report, top));

    let routes = &report.routes[..report.routes.len().min(top)];
    let svg = chart::bars(
        "Requests by route",
        "requests",
        &routes
            .iter()
            .map(|r| format!("{} → {}", r.route, r.profile))
            .collect::<Vec<_>>(),
        &routes.iter().map(|r| r.requests as f64).collect::<Vec<_>>(),
        BLUE,
        None,
    )?;
    figure(&mut out, "routes", &svg, &tables::routes(report, top));

    let svg = chart::bars(
        "Input checks by action",
        "requests",
        &report
            .input_checks
            .iter()
            .map(|c| c.name.clone())
            .collect::<Vec<_>>(),
        &report
            .input_checks
            .iter()
            .map(|c| c.count as f64)
            .collect::<Vec<_>>(),
        GREY,
        None,
    )?;
    figure(
        &mut out,
        "input-checks",
        &svg,
        &tables::input_checks(report),
    );

    let keys = &report.keys[..report.keys.len().min(top)];
    let svg = chart::bars(
        "Requests by key",
        "requests",
        &keys.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
        &keys.iter().map(|k| k.count as f64).collect::<Vec<_>>(),
        GREY,
        None,
    )?;
    figure(&mut out, "keys", &svg, &tables::keys(report, top));

    out.push_str("</body></html>\n");
    Ok(out)
}
