//! `report.html`: one self-contained page, each chart over its table, drawn with the chart
//! code `enforce report` uses.

use super::summary::{Summary, STATUSES};
use super::tables;
use enforce_report::render::chart::RGBColor;
use enforce_report::render::chart::{self, ChartError, Layout, Line, Series};
use enforce_report::render::html::{escape, figure, page_start, status_color, write_table, BLUE};
use enforce_report::render::table::Table;
use std::fmt::Write as _;

/// Greens from dark (first attempt) to light (later re-asks).
fn attempt_color(k: usize) -> RGBColor {
    const SHADES: [RGBColor; 4] = [
        RGBColor(27, 94, 32),
        RGBColor(67, 160, 71),
        RGBColor(129, 199, 132),
        RGBColor(200, 230, 201),
    ];
    SHADES[k.min(SHADES.len() - 1)]
}

/// The page.
pub fn render(summary: &Summary) -> Result<String, ChartError> {
    let mut out = page_start("enforce eval");
    let header = tables::text(summary);
    if let Some(first) = header.lines().next() {
        let _ = writeln!(out, "<p class=\"note\">{}</p>", escape(first));
    }
    let tables::Tables {
        arms: arms_table,
        outcomes: outcomes_table,
        cost: cost_table,
        cost_matched: cost_matched_table,
        codes: codes_table,
        pairs: pairs_table,
        provenance: provenance_table,
    } = tables::tables(summary);
    figure(&mut out, "valid", &valid_columns(summary)?, &arms_table);
    figure(
        &mut out,
        "outcomes",
        &outcome_columns(summary)?,
        &outcomes_table,
    );
    figure(&mut out, "spend", &spend_bars(summary)?, &cost_table);
    figure(
        &mut out,
        "cost-matched",
        &pass_at_tokens(summary)?,
        &cost_matched_table,
    );
    figure(&mut out, "codes", &code_bars(summary)?, &codes_table);

    table_figure(&mut out, "pairs", &pairs_table);
    if !provenance_table.rows.is_empty() {
        table_figure(&mut out, "provenance", &provenance_table);
    }
    out.push_str("</body></html>\n");
    Ok(out)
}

fn arm_names(summary: &Summary) -> Vec<String> {
    summary.arms.iter().map(|a| a.arm.clone()).collect()
}

/// Valid answers: stacked by the attempt that produced them, so a column's height is the arm's
/// valid rate and its bottom part the first attempt's.
fn valid_columns(summary: &Summary) -> Result<String, ChartError> {
    let longest = summary.most_attempts();
    let series: Vec<Series> = (0..longest)
        .map(|k| Series {
            name: format!("valid at attempt {}", k + 1),
            color: attempt_color(k),
            values: summary
                .arms
                .iter()
                .map(|a| {
                    let at = |i: usize| a.valid_after_attempts.get(i).map_or(0.0, |r| r.rate.rate);
                    let before = if k == 0 { 0.0 } else { at(k - 1) };
                    (at(k) - before) * 100.0
                })
                .collect(),
        })
        .collect();
    chart::columns(
        "Valid answers per arm",
        "% of trials",
        &arm_names(summary),
        &series,
        Layout::Stacked,
    )
}

fn outcome_columns(summary: &Summary) -> Result<String, ChartError> {
    let series: Vec<Series> = STATUSES
        .iter()
        .map(|&status| Series {
            name: status.as_str().to_string(),
            color: status_color(status),
            values: summary
                .arms
                .iter()
                .map(|a| a.outcomes.get(status.as_str()).copied().unwrap_or(0) as f64)
                .collect(),
        })
        .collect();
    chart::columns(
        "Outcomes per arm",
        "trials",
        &arm_names(summary),
        &series,
        Layout::Stacked,
    )
}

/// The arms whose tokens per valid answer are known (a valid answer, usage reported); none
/// known draws the chart's "no data".
fn spend_bars(summary: &Summary) -> Result<String, ChartError> {
    let (names, per_valid): (Vec<String>, Vec<f64>) = summary
        .arms
        .iter()
        .filter_map(|a| {
            let prompt = a.prompt_tokens_per_valid?;
            let completion = a.completion_tokens_per_valid?;
            Some((a.arm.clone(), prompt + completion))
        })
        .unzip();
    chart::bars(
        "Tokens per valid answer",
        "tokens",
        &names,
        &per_valid,
        BLUE,
        None,
    )
}

fn code_bars(summary: &Summary) -> Result<String, ChartError> {
    let codes: Vec<String> = summary.issue_codes.iter().map(|c| c.code.clone()).collect();
    let first: Vec<f64> = summary
        .issue_codes
        .iter()
        .map(|c| c.arms.iter().map(|a| a.first_attempt).sum::<u64>() as f64)
        .collect();
    chart::bars(
        "Issue codes on first attempts (all arms)",
        "trials",
        &codes,
        &first,
        RGBColor(239, 108, 0),
        None,
    )
}

/// A figure of `table` alone, under its title.
fn table_figure(out: &mut String, id: &str, table: &Table) {
    let _ = writeln!(out, "<figure id=\"{id}\"><h2>{}</h2>", escape(&table.title));
    write_table(out, table);
    out.push_str("</figure>\n");
}

/// pass@t: per arm, the share of trials valid within t tokens, against t; blind resampling's
/// estimate dashed.
fn pass_at_tokens(summary: &Summary) -> Result<String, ChartError> {
    const PALETTE: [RGBColor; 6] = [
        RGBColor(21, 101, 192),
        RGBColor(46, 125, 50),
        RGBColor(239, 108, 0),
        RGBColor(106, 27, 154),
        RGBColor(198, 40, 40),
        RGBColor(0, 131, 143),
    ];
    let percent = |points: &[(f64, f64)]| -> Vec<(f64, f64)> {
        points.iter().map(|&(t, r)| (t, r * 100.0)).collect()
    };
    let mut lines: Vec<Line> = summary
        .arms
        .iter()
        .enumerate()
        .filter(|(_, a)| !a.cost.pass_at_tokens.is_empty())
        .map(|(i, a)| {
            // A step up at each trial's tokens: valid from there on.
            let mut points = Vec::new();
            let mut rate = 0.0;
            for &(tokens, reached) in &percent(&a.cost.pass_at_tokens) {
                points.push((tokens, rate));
                points.push((tokens, reached));
                rate = reached;
            }
            Line {
                name: a.arm.clone(),
                color: PALETTE[i % PALETTE.len()],
                points,
                dashed: false,
            }
        })
        .collect();
    if summary.resample_curve.len() > 1 {
        lines.push(Line {
            name: "blind resampling (estimate)".into(),
            color: RGBColor(97, 97, 97),
            points: percent(&summary.resample_curve),
            dashed: true,
        });
    }
    chart::lines(
        "Valid answers against tokens spent (pass@t)",
        "tokens per trial (prompt + completion)",
        "% of trials valid",
        &lines,
        Some(100.0),
    )
}
