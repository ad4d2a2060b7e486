//! Parsing a checker's output (compiler messages, shell errors, Python tracebacks) into
//! findings with a line: self-contained, and the part of [`External`](crate::External) that
//! grows with every output form it learns.

use std::sync::OnceLock;

/// One finding parsed from a checker's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceLine {
    /// 1-based line in the checked input.
    pub line: Option<u32>,
    /// 1-based column.
    pub column: Option<u32>,
    /// What the checker said.
    pub message: String,
}

fn trace_patterns() -> Option<&'static [regex::Regex; 4]> {
    static PATTERNS: OnceLock<Option<[regex::Regex; 4]>> = OnceLock::new();
    PATTERNS
        .get_or_init(|| {
            let re = |p: &str| enforce_validators::pattern::compile(p, false).ok();
            Some([
                // A Python traceback frame: `File "x.py", line 12, in f`
                re(r#"^\s*File "([^"]+)", line (\d+)(?:,.*)?$"#)?,
                // `file:12:5: message`, `file:12: message`, `sh: 12: message`
                re(r"^\s*[^:\s][^:]*:\s*(\d+):(?:(\d+):)?\s*(.*)$")?,
                // `Line 12: message`, `bash: line 12: message`, `File "x", line 12`
                re(r"(?i)\bline\s+(\d+)(?:,\s*col(?:umn)?\s+(\d+))?\s*(?:[:,]\s*(.*))?$")?,
                // `SyntaxError: message` (Python's last traceback line)
                re(r"^(?:Sorry:\s*)?([A-Z][A-Za-z]*(?:Error|Exception|Warning)):\s*(.*)$")?,
            ])
        })
        .as_ref()
}

/// Parses a checker's output into findings (see the [`external`](crate::external) module docs for the forms).
pub fn parse_trace(output: &str) -> Vec<TraceLine> {
    parse_trace_of(output, None)
}

/// [`parse_trace`] for a check of the file `input_path`: a Python frame of another file (a
/// test harness, a library) gives no line, so an error raised there is an issue without one.
pub fn parse_trace_of(output: &str, input_path: Option<&str>) -> Vec<TraceLine> {
    let Some([py_frame, file_line, line_word, py_error]) = trace_patterns() else {
        return Vec::new();
    };
    let mut found = Vec::new();
    let mut pending: Option<(u32, Option<u32>)> = None;
    let num = |m: Option<regex::Match<'_>>| m.and_then(|m| m.as_str().parse::<u32>().ok());
    for raw in output.lines() {
        let line = raw.trim_end();
        if line.trim().is_empty() {
            continue;
        }
        if let Some(c) = py_error.captures(line.trim_start()) {
            let message = format!("{}: {}", &c[1], &c[2]);
            let (l, col) = pending.take().map_or((None, None), |(l, c)| (Some(l), c));
            found.push(TraceLine {
                line: l,
                column: col,
                message,
            });
            continue;
        }
        if let Some(c) = py_frame.captures(line) {
            // The innermost frame of the checked file is where its error is.
            if input_path.is_none_or(|path| path == &c[1]) {
                pending = num(c.get(2)).map(|l| (l, None));
            }
            continue;
        }
        if let Some(c) = line_word.captures(line) {
            let message = c.get(3).map_or("", |m| m.as_str()).trim().to_string();
            if let Some(l) = num(c.get(1)) {
                if message.is_empty() {
                    pending = Some((l, num(c.get(2))));
                } else {
                    found.push(TraceLine {
                        line: Some(l),
                        column: num(c.get(2)),
                        message,
                    });
                }
                continue;
            }
        }
        if let Some(c) = file_line.captures(line) {
            if let Some(l) = num(c.get(1)) {
                let message = c.get(3).map_or("", |m| m.as_str()).trim().to_string();
                found.push(TraceLine {
                    line: Some(l),
                    column: num(c.get(2)),
                    message: if message.is_empty() {
                        line.trim().to_string()
                    } else {
                        message
                    },
                });
                continue;
            }
        }
    }
    if let Some((l, col)) = pending {
        found.push(TraceLine {
            line: Some(l),
            column: col,
            message: "the checker reports an error here".into(),
        });
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_common_trace_forms() {
        let t = parse_trace("Line 3: unexpected token\nsrc/x.rs:12:5: expected `;`\nsh: 4: Syntax error: \"(\" unexpected\nbash: line 7: syntax error near `('\n");
        let got: Vec<_> = t
            .iter()
            .map(|t| (t.line, t.column, t.message.as_str()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some(3), None, "unexpected token"),
                (Some(12), Some(5), "expected `;`"),
                (Some(4), None, "Syntax error: \"(\" unexpected"),
                (Some(7), None, "syntax error near `('"),
            ]
        );
        let py =
            "  File \"/tmp/x.py\", line 2\n    def f(:\n          ^\nSyntaxError: invalid syntax\n";
        assert_eq!(
            parse_trace(py),
            vec![TraceLine {
                line: Some(2),
                column: None,
                message: "SyntaxError: invalid syntax".into()
            }]
        );
        assert!(parse_trace("just words\nno numbers").is_empty());
    }

    /// A test harness's traceback: the error is raised in the harness (no line of the answer)
    /// or inside the checked file (its innermost frame there is the line).
    #[test]
    fn only_frames_of_the_checked_file_give_a_line() {
        let harness = "Traceback (most recent call last):\n  File \"/h/run_tests.py\", line 1, in <module>\n    assert f(2) == 3, f(2)\nAssertionError: 5\n";
        assert_eq!(
            parse_trace_of(harness, Some("/tmp/answer.py")),
            vec![TraceLine {
                line: None,
                column: None,
                message: "AssertionError: 5".into()
            }]
        );
        let inside = "Traceback (most recent call last):\n  File \"/h/run_tests.py\", line 9, in <module>\n    f(2)\n  File \"/tmp/answer.py\", line 3, in f\n    return delimiter\n  File \"/h/run_tests.py\", line 2, in helper\nNameError: name 'delimiter' is not defined\n";
        assert_eq!(
            parse_trace_of(inside, Some("/tmp/answer.py")),
            vec![TraceLine {
                line: Some(3),
                column: None,
                message: "NameError: name 'delimiter' is not defined".into()
            }]
        );
        // A frame line is never a finding of its own (`in <module>` is no message).
        assert!(parse_trace(harness)
            .iter()
            .all(|t| !t.message.contains("<module>")));
    }
}
