//! The terminal report: the input summary, then each table with aligned columns.

use super::aggregate::Report;
use super::tables;
use crate::render::table::write_text as write_table;

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
        tables::strategies(report, top),
        tables::repairs(report, top),
        tables::attempts(report),
        tables::spend(report),
        tables::latency(report),
        tables::cuts(report, top),
        tables::routes(report, top),
        tables::input_checks(report),
        tables::keys(report, top),
    ] {
        out.push('\n');
        write_table(&mut out, &table);
    }
    out
}
