//! The HTML report: one self-contained page (inline CSS and SVG; no script, no font, no link
//! to anywhere), one figure per chart with its table beneath.

use super::aggregate::{Report, STATUSES};
use super::tables;
use crate::render::chart::{self, ChartError, Layout, RGBColor, Series};
use crate::render::html::{escape, figure, page_start, status_color, BLUE, GREY, ORANGE, TEAL};
use crate::render::table::Table;
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

/// A bar chart of `(name, value)` rows, `(title, unit, colour)`, as a figure above `table`;
/// `max` fixes the end of the value axis.
fn bar_figure(
    out: &mut String,
    id: &str,
    (title, unit, color): (&str, &str, RGBColor),
    rows: impl Iterator<Item = (String, f64)>,
    max: Option<f64>,
    table: &Table,
) -> Result<(), ChartError> {
    let (names, values): (Vec<String>, Vec<f64>) = rows.unzip();
    let svg = chart::bars(title, unit, &names, &values, color, max)?;
    figure(out, id, &svg, table);
    Ok(())
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

    let codes = report.issue_codes.iter().take(top).map(|c| {
        let name = format!("{} {}/{}", c.profile, c.validator, c.code);
        (name, c.occurrences as f64)
    });
    let chart = ("Top issue codes", "found (over every attempt)", ORANGE);
    let table = tables::issue_codes(report, top);
    bar_figure(&mut out, "issue-codes", chart, codes, None, &table)?;

    let fixes = report.reask_fixes.iter().take(top).map(|f| {
        let name = format!("{}/{}", f.validator, f.code);
        (name, f.rate * 100.0)
    });
    let unit = "% of re-asks after which the code was gone";
    let chart = ("Re-ask fix rate", unit, BLUE);
    let table = tables::reask_fixes(report, top);
    bar_figure(&mut out, "reask-fixes", chart, fixes, Some(100.0), &table)?;

    let strategies = report.strategies.iter().take(top).map(|s| {
        let name = format!("{} ({}) {}", s.strategy, s.chosen, s.code);
        (name, s.rate * 100.0)
    });
    let unit = "% of re-asks whose answer no longer had the code";
    let chart = ("Fix rate by re-ask strategy", unit, TEAL);
    let table = tables::strategies(report, top);
    bar_figure(
        &mut out,
        "strategies",
        chart,
        strategies,
        Some(100.0),
        &table,
    )?;

    let repairs = report.repairs.by_validator.iter().take(top);
    let repairs = repairs.map(|r| (r.name.clone(), r.count as f64));
    let chart = ("Repairs applied", "repairs", TEAL);
    let table = tables::repairs(report, top);
    bar_figure(&mut out, "repairs", chart, repairs, None, &table)?;

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

    let cuts = report.cuts.by_code.iter().take(top);
    let cuts = cuts.map(|c| (c.name.clone(), c.count as f64));
    let chart = ("Early cuts by code", "attempts cut", GREY);
    let table = tables::cuts(report, top);
    bar_figure(&mut out, "cuts", chart, cuts, None, &table)?;

    let routes = report.routes.iter().take(top).map(|r| {
        let name = format!("{} → {}", r.route, r.profile);
        (name, r.requests as f64)
    });
    let chart = ("Requests by route", "requests", BLUE);
    let table = tables::routes(report, top);
    bar_figure(&mut out, "routes", chart, routes, None, &table)?;

    let checks = report.input_checks.iter();
    let checks = checks.map(|c| (c.name.clone(), c.count as f64));
    let chart = ("Input checks by action", "requests", GREY);
    let table = tables::input_checks(report);
    bar_figure(&mut out, "input-checks", chart, checks, None, &table)?;

    let keys = report.keys.iter().take(top);
    let keys = keys.map(|k| (k.name.clone(), k.count as f64));
    let chart = ("Requests by key", "requests", GREY);
    let table = tables::keys(report, top);
    bar_figure(&mut out, "keys", chart, keys, None, &table)?;

    out.push_str("</body></html>\n");
    Ok(out)
}
