//! A table of already formatted cells, shown as aligned text on a terminal and as HTML under
//! a chart (`html::write_table`).

use std::fmt::Write as _;
use std::ops::Range;

/// A table: a title, an optional note, and rows of cells already formatted.
#[derive(Debug, Clone)]
pub struct Table {
    /// The heading.
    pub title: String,
    /// A line under the title: what the numbers mean, what was left out.
    pub note: Option<String>,
    /// Column headers.
    pub headers: Vec<String>,
    /// Rows of formatted cells, one per header.
    pub rows: Vec<Vec<String>>,
    /// The columns holding numbers (right-aligned); the others are text.
    pub numbers: Range<usize>,
}

impl Table {
    /// An empty table; `numbers` are the columns holding numbers.
    pub fn new(title: &str, headers: &[&str], numbers: Range<usize>) -> Table {
        Table {
            title: title.to_string(),
            note: None,
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
            numbers,
        }
    }

    /// Whether `column` holds numbers.
    pub fn is_number(&self, column: usize) -> bool {
        self.numbers.contains(&column)
    }

    /// Sets the line under the title.
    pub fn note(mut self, note: Option<String>) -> Table {
        self.note = note;
        self
    }
}

/// `table` as aligned text: the title, the note, the header and rows (numbers right-aligned).
pub fn write_text(out: &mut String, table: &Table) {
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
