//! `report.html`: one self-contained page, each chart over its table, drawn with the chart
//! code `enforce report` uses.

use super::summary::{Summary, STATUSES};
use super::tables;
use enforce_report::render::chart::RGBColor;
use enforce_report::render::chart::{self, ChartError, Layout, Line, Series};
use enforce_report::render::html::{escape, figure, page_start, status_color, write_table, BLUE};
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
    let names: Vec<String> = summary.arms.iter().map(|a| a.arm.clone()).collect();

    // Valid answers: stacked by the attempt that produced them, so a column's height is the
    // arm's valid rate and its bottom part the first attempt's.
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
    let svg = chart::columns(
        "Valid answers per arm",
        "% of trials",
        &names,
        &series,
        Layout::Stacked,
    )?;
    figure(&mut out, "valid", &svg, &arms_table);

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
    let svg = chart::columns(
        "Outcomes per arm",
        "trials",
        &names,
        &series,
        Layout::Stacked,
    )?;
    figure(&mut out, "outcomes", &svg, &outcomes_table);

    // Arms whose tokens per valid answer are known (a valid answer, usage reported); none
    // known draws the chart's "no data".
    let (spend_names, per_valid): (Vec<String>, Vec<f64>) = summary
        .arms
        .iter()
        .filter_map(|a| {
            let prompt = a.prompt_tokens_per_valid?;
            let completion = a.completion_tokens_per_valid?;
            Some((a.arm.clone(), prompt + completion))
        })
        .unzip();
    let svg = chart::bars(
        "Tokens per valid answer",
        "tokens",
        &spend_names,
        &per_valid,
        BLUE,
        None,
    )?;
    figure(&mut out, "spend", &svg, &cost_table);

    let svg = pass_at_tokens(summary)?;
    figure(&mut out, "cost-matched", &svg, &cost_matched_table);

    let codes: Vec<String> = summary.issue_codes.iter().map(|c| c.code.clone()).collect();
    let first: Vec<f64> = summary
        .issue_codes
        .iter()
        .map(|c| c.arms.iter().map(|a| a.first_attempt).sum::<u64>() as f64)
        .collect();
    let svg = chart::bars(
        "Issue codes on first attempts (all arms)",
        "trials",
        &codes,
        &first,
        RGBColor(239, 108, 0),
        None,
    )?;
    figure(&mut out, "codes", &svg, &codes_table);

    let _ = writeln!(
        out,
        "<figure id=\"pairs\"><h2>{}</h2>",
        escape(&pairs_table.title)
    );
    write_table(&mut out, &pairs_table);
    out.push_str("</figure>\n");
    if !provenance_table.rows.is_empty() {
        let _ = writeln!(
            out,
            "<figure id=\"provenance\"><h2>{}</h2>",
            escape(&provenance_table.title)
        );
        write_table(&mut out, &provenance_table);
        out.push_str("</figure>\n");
    }
    out.push_str("</body></html>\n");
    Ok(out)
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
