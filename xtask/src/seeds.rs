//! docs/seeds.md maps every rule of the seed documents to the code that keeps it and the tests
//! that fail when it breaks. Its tests are named `path::function` (a later one in the same cell
//! may say `…::function` for the same file); this module reads those names so a renamed or
//! deleted test is caught instead of leaving the table pointing at nothing.

/// One test a row names: the row's id, the file, the function.
#[derive(Debug, PartialEq, Eq)]
struct NamedTest {
    row: String,
    file: String,
    function: String,
}

/// The tests the table rows of `markdown` name in their last cell.
fn named_tests(markdown: &str) -> Vec<NamedTest> {
    let mut named = Vec::new();
    for line in markdown.lines() {
        let Some(body) = line.strip_prefix('|') else {
            continue;
        };
        let cells: Vec<&str> = body.trim_end().trim_end_matches('|').split(" | ").collect();
        let (Some(row), Some(last)) = (cells.first(), cells.last()) else {
            continue;
        };
        let row = row.trim();
        if cells.len() < 3 || row == "#" || row.starts_with("---") {
            continue;
        }
        let mut file = String::new();
        for quoted in last.split('`').skip(1).step_by(2) {
            let Some((path, function)) = quoted.rsplit_once("::") else {
                continue;
            };
            if path != "…" {
                file = path.to_string();
            }
            named.push(NamedTest {
                row: row.to_string(),
                file: file.clone(),
                function: function.to_string(),
            });
        }
    }
    named
}

/// `true` when `source` defines a function named `function`.
fn defines(source: &str, function: &str) -> bool {
    source
        .match_indices(&format!("fn {function}("))
        .next()
        .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::root;

    /// Every test a row of docs/seeds.md names exists, in the file it names; every row names
    /// one (or the lead's marker for one still to come).
    #[test]
    fn every_test_docs_seeds_names_exists() {
        let table = std::fs::read_to_string(root().join("docs/seeds.md")).unwrap();
        let named = named_tests(&table);
        assert!(named.len() > 100, "the table names {} tests", named.len());
        let mut missing = Vec::new();
        for test in &named {
            let source = std::fs::read_to_string(root().join(&test.file)).unwrap_or_default();
            if !defines(&source, &test.function) {
                missing.push(format!("{}: {}::{}", test.row, test.file, test.function));
            }
        }
        assert!(
            missing.is_empty(),
            "named but not found:\n{}",
            missing.join("\n")
        );
        let rows_without_a_test: Vec<&str> = table
            .lines()
            .filter(|l| l.starts_with("| ") && !l.starts_with("| #") && !l.starts_with("|---"))
            .filter(|l| {
                let row = l
                    .split(" | ")
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("| ");
                !named.iter().any(|t| t.row == row)
            })
            .collect();
        assert!(
            rows_without_a_test.is_empty(),
            "rows naming no test:\n{}",
            rows_without_a_test.join("\n")
        );
    }

    /// The reader finds every name of a cell, `…::` continuing the file before it, and a
    /// missing function is told apart from a present one.
    #[test]
    fn the_reader_finds_each_named_test() {
        let table = "| # | rule | kept by | test |\n|---|---|---|---|\n\
                     | X1 | r | `code` | `a/b.rs::one`, `…::two` |\n";
        let named = named_tests(table);
        let functions: Vec<(&str, &str)> = named
            .iter()
            .map(|t| (t.file.as_str(), t.function.as_str()))
            .collect();
        assert_eq!(functions, [("a/b.rs", "one"), ("a/b.rs", "two")]);
        assert!(defines("async fn two() {}", "two"));
        assert!(!defines("fn twofold() {}", "two"));
    }
}
