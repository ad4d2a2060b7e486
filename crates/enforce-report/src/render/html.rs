//! The pieces of a self-contained HTML page (inline CSS and SVG; no script, no font, no link
//! to anywhere): the style, escaping, tables, and figures (a chart with its table beneath).

use super::table::Table;
use enforce_core::Status;
use plotters::style::RGBColor;
use std::fmt::Write as _;

/// The page's inline style sheet.
pub const STYLE: &str = "\
body{font-family:system-ui,sans-serif;color:#222;max-width:980px;margin:24px auto;padding:0 16px}\
h1{font-size:24px}h2{font-size:18px;margin:0 0 4px}\
figure{margin:32px 0;padding:0}svg{max-width:100%;height:auto;display:block}\
table{border-collapse:collapse;font-size:14px;margin-top:8px}\
th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}\
th{background:#f4f4f4}.n{text-align:right;font-variant-numeric:tabular-nums}\
.note{color:#555;font-size:13px;margin:4px 0}";

/// The colour a status has in every chart.
pub fn status_color(status: Status) -> RGBColor {
    match status {
        Status::Passed => RGBColor(46, 125, 50),
        Status::Repaired => RGBColor(129, 199, 132),
        Status::Unresolved => RGBColor(239, 108, 0),
        Status::Unavailable => RGBColor(142, 36, 170),
        Status::Aborted => RGBColor(198, 40, 40),
    }
}

/// Series colours besides the statuses'.
pub const BLUE: RGBColor = RGBColor(21, 101, 192);
/// A second series colour.
pub const TEAL: RGBColor = RGBColor(0, 131, 143);
/// A third series colour.
pub const ORANGE: RGBColor = RGBColor(239, 108, 0);
/// Totals and the rest.
pub const GREY: RGBColor = RGBColor(120, 120, 120);

/// Text for HTML element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Appends `table` as an HTML `<table>` (with its title and note) to `out`.
pub fn write_table(out: &mut String, table: &Table) {
    if let Some(note) = &table.note {
        let _ = write!(out, "<p class=\"note\">{}</p>", escape(note));
    }
    out.push_str("<table><thead><tr>");
    for (column, header) in table.headers.iter().enumerate() {
        let class = if !table.is_number(column) {
            ""
        } else {
            " class=\"n\""
        };
        let _ = write!(out, "<th{class}>{}</th>", escape(header));
    }
    out.push_str("</tr></thead><tbody>");
    for row in &table.rows {
        out.push_str("<tr>");
        for (column, cell) in row.iter().enumerate() {
            let class = if !table.is_number(column) {
                ""
            } else {
                " class=\"n\""
            };
            let _ = write!(out, "<td{class}>{}</td>", escape(cell));
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>\n");
}

/// One figure: the title, the chart, the table.
pub fn figure(out: &mut String, id: &str, svg: &str, table: &Table) {
    let _ = write!(
        out,
        "<figure id=\"{id}\"><h2>{}</h2>\n{svg}\n",
        escape(&table.title)
    );
    write_table(out, table);
    out.push_str("</figure>\n");
}

/// The page up to and including its `<h1>title</h1>`; the caller closes it with
/// `</body></html>`.
pub fn page_start(title: &str) -> String {
    let title = escape(title);
    let mut out = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">",
    );
    let _ = write!(
        out,
        "<title>{title}</title><style>{STYLE}</style></head><body>\n<h1>{title}</h1>\n"
    );
    out
}
