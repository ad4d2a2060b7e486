//! The terminal report: the input summary, then each table with aligned columns.

use super::aggregate::Report;
use super::tables::{self, Table};
use std::fmt::Write as _;

/// The report as compact text tables.
pub fn render(report: &Report, top: usize) -> String {
    let mut out = String::new();
    for line in tables::input_summary(report) {
        out.push_str(&line);
        out.push('\n');
    }
    for table in [
        tables::outcomes(report),
        tables::over_time(report, top),
        tables::issue_codes(report, top),
        tables::reask_fixes(report, top),
        tables::repairs(report, top),
        tables::attempts(report),
        tables::spend(report),
        tables::latency(report),
        tables::cuts(report, top),
        tables::routes(report, top),
        tables::input_checks(report),
    ] {
        out.push('\n');
        write_table(&mut out, &table);
    }
    out
}

fn write_table(out: &mut String, table: &Table) {
    let _ = writeln!(out, "{}", table.title);
    if let Some(note) = &table.note {
        let _ = writeln!(out, "  ({note})");
    }
    if table.rows.is_empty() {
        let _ = writeln!(out, "  none");
        return;
    }
    let mut widths: Vec<usize> = table.headers.iter().map(|h| h.chars().count()).collect();
    for row in &table.rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in std::iter::once(&table.headers).chain(&table.rows) {
        let mut line = String::from(" ");
        for (column, (cell, width)) in row.iter().zip(&widths).enumerate() {
            let pad = width.saturating_sub(cell.chars().count());
            line.push(' ');
            if !table.is_number(column) {
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', pad));
            } else {
                line.extend(std::iter::repeat_n(' ', pad));
                line.push_str(cell);
            }
            line.push(' ');
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
