//! `${VAR}` and `${VAR:-default}` in a configuration file, expanded before the YAML is parsed.
//!
//! The rules, chosen so that an expanded file is always the file its author meant and every
//! later error still points at the right place:
//!
//! - `${NAME}` is the variable's value; unset is an error (file:line:column, naming it). Set but
//!   empty is the empty value.
//! - `${NAME:-default}` is the default when the variable is unset *or empty* (as in a shell).
//!   `${NAME:-}` is the empty value. In an unquoted position YAML reads an empty value as
//!   null (the key counts as absent); write `"${NAME:-}"` for an empty string.
//! - `$${` is a literal `${`. A `$` not followed by `{` is left alone; any other `${` (a bad
//!   name, no closing `}` on the line) is an error, so a typo never passes as text.
//! - Comments are not expanded (a `${X}` in a comment needs no variable), nor are they
//!   unescaped. Block scalars (`|`, `>`) and quoted strings are expanded.
//! - A value never changes the file's shape: one holding a line break is an error (line
//!   numbers would shift); inside `"..."` quotes and backslashes are escaped, inside `'...'`
//!   quotes are doubled; in an unquoted position a value YAML would read as structure (`: `,
//!   ` #`, a leading `[`, `{`, `&`, `*`, `!`, `|`, `>`, `'`, `"`, `%`, `@`, `` ` ``, `#`, `,`,
//!   `- `; `,[]{}` inside a flow collection) is an error that says to quote the reference.
//!   So `timeout_ms: ${T:-2000}` is a number, `url: "${URL}"` always a string.
//! - Columns after an expansion on the same line are mapped back to the original text
//!   ([`Expanded::original_column`]), so parse errors point into the file as written.

/// Error while expanding: where (1-based line and column of the `$`), what, and the variable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// 1-based line.
    pub line: usize,
    /// 1-based column (characters) of the reference's `$`.
    pub column: usize,
    /// The variable at fault, when the reference names one.
    pub variable: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// One place where the expanded text differs in length from the original, on one line.
/// Columns are 0-based character offsets.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shift {
    line: usize,
    expanded_start: usize,
    expanded_end: usize,
    original_start: usize,
    original_end: usize,
}

/// The expanded text and how its columns map back.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Expanded {
    /// The text to parse.
    pub text: String,
    shifts: Vec<Shift>,
}

impl Expanded {
    /// Writes a reference's value in place of its text `consumed` at the (original, expanded)
    /// `columns`, noting the shift when the lengths differ, and advances both columns past it.
    fn push_reference(
        &mut self,
        line: usize,
        columns: (&mut usize, &mut usize),
        consumed: &str,
        value: &str,
    ) {
        let (col, out_col) = columns;
        let consumed_chars = consumed.chars().count();
        let value_chars = value.chars().count();
        if consumed_chars != value_chars {
            self.shifts.push(Shift {
                line,
                expanded_start: *out_col,
                expanded_end: *out_col + value_chars,
                original_start: *col,
                original_end: *col + consumed_chars,
            });
        }
        self.text.push_str(value);
        *col += consumed_chars;
        *out_col += value_chars;
    }

    /// The 1-based column in the original text of the 1-based `column` of `line` in the
    /// expanded text (a column inside an expansion maps to its `$`).
    pub fn original_column(&self, line: usize, column: usize) -> usize {
        let col = column.saturating_sub(1);
        let mut delta: isize = 0;
        for s in self.shifts.iter().filter(|s| s.line == line) {
            if col >= s.expanded_end {
                delta += (s.original_end - s.original_start) as isize
                    - (s.expanded_end - s.expanded_start) as isize;
            } else if col >= s.expanded_start {
                return s.original_start + 1;
            }
        }
        (col as isize + delta).max(0) as usize + 1
    }
}

/// Where a reference stands, which decides how its value is written.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    Plain { in_flow: bool },
    DoubleQuoted,
    SingleQuoted,
    Block,
}

/// Expands every reference in `text`; `lookup` gives a variable's value (`None`: unset).
pub fn expand(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<Expanded, EnvError> {
    if !text.contains('$') {
        return Ok(Expanded {
            text: text.to_string(),
            shifts: Vec::new(),
        });
    }
    let mut out = Expanded {
        text: String::with_capacity(text.len()),
        shifts: Vec::new(),
    };
    let mut quote: Option<char> = None;
    let mut flow_depth = 0usize;
    // The indent of the line that opened a block scalar; deeper (or blank) lines are its text.
    let mut block: Option<usize> = None;
    for (index, raw_line) in text.split_inclusive('\n').enumerate() {
        let line_no = index + 1;
        let (line, ending) = match raw_line.strip_suffix('\n') {
            Some(l) => (l, "\n"),
            None => (raw_line, ""),
        };
        let indent = line.len() - line.trim_start_matches([' ', '\t']).len();
        if let Some(parent) = block {
            if line.trim().is_empty() || indent > parent {
                expand_span(line, line_no, Position::Block, lookup, &mut out)?;
                out.text.push_str(ending);
                continue;
            }
            block = None;
        }
        let mut chars = line.char_indices().peekable();
        let mut col = 0usize; // characters of the original line consumed
        let mut out_col = 0usize; // characters of the expanded line written
        let mut prev_significant: Option<char> = None;
        let mut comment_at: Option<usize> = None;
        while let Some((i, c)) = chars.next() {
            let rest = &line[i..];
            match quote {
                Some('"') if c == '\\' => {
                    out.text.push(c);
                    col += 1;
                    out_col += 1;
                    if let Some((_, next)) = chars.next() {
                        out.text.push(next);
                        col += 1;
                        out_col += 1;
                    }
                    continue;
                }
                Some('\'') if rest.starts_with("''") => {
                    chars.next();
                    out.text.push_str("''");
                    col += 2;
                    out_col += 2;
                    continue;
                }
                Some(q) if c == q => quote = None,
                Some(_) => {}
                None => {
                    let after_space = i == 0 || line[..i].ends_with([' ', '\t']);
                    let value_start = matches!(
                        prev_significant,
                        None | Some(':' | '-' | '[' | '{' | ',' | '?')
                    );
                    if c == '#' && after_space {
                        comment_at = Some(i);
                        out.text.push_str(rest);
                        break;
                    }
                    match c {
                        '"' | '\'' if value_start => quote = Some(c),
                        '[' | '{' if value_start => flow_depth += 1,
                        ']' | '}' if flow_depth > 0 => flow_depth -= 1,
                        _ => {}
                    }
                }
            }
            if rest.starts_with("${") || rest.starts_with("$${") {
                let position = match quote {
                    Some('"') => Position::DoubleQuoted,
                    Some(_) => Position::SingleQuoted,
                    None => Position::Plain {
                        in_flow: flow_depth > 0,
                    },
                };
                let (consumed, value) = reference(rest, line_no, col, position, lookup)?;
                out.push_reference(line_no, (&mut col, &mut out_col), &rest[..consumed], &value);
                // Skip the rest of the reference.
                while chars.peek().is_some_and(|&(j, _)| j < i + consumed) {
                    chars.next();
                }
                prev_significant = Some('x');
                continue;
            }
            out.text.push(c);
            col += 1;
            out_col += 1;
            if !c.is_whitespace() {
                prev_significant = Some(c);
            }
        }
        if quote.is_none()
            && flow_depth == 0
            && opens_block_scalar(&line[..comment_at.unwrap_or(line.len())])
        {
            block = Some(indent);
        }
        out.text.push_str(ending);
    }
    Ok(out)
}

/// Whether a line's text (comment removed) ends with a block scalar header (`key: |`, `- >-`).
fn opens_block_scalar(line: &str) -> bool {
    let trimmed = line.trim_end();
    let Some(last) = trimmed.split_whitespace().last() else {
        return false;
    };
    let header = last.starts_with(['|', '>'])
        && last[1..]
            .chars()
            .all(|c| matches!(c, '+' | '-' | '1'..='9'));
    let before = trimmed[..trimmed.len() - last.len()].trim_end();
    header && (before.is_empty() || before.ends_with(':') || before.ends_with('-'))
}

/// Expands every reference in a block scalar's line (no comments, no quotes there).
fn expand_span(
    line: &str,
    line_no: usize,
    position: Position,
    lookup: &dyn Fn(&str) -> Option<String>,
    out: &mut Expanded,
) -> Result<(), EnvError> {
    let mut rest = line;
    let mut col = 0usize;
    let mut out_col = 0usize;
    while let Some(at) = rest.find('$') {
        let (before, tail) = rest.split_at(at);
        out.text.push_str(before);
        let before_chars = before.chars().count();
        col += before_chars;
        out_col += before_chars;
        if tail.starts_with("${") || tail.starts_with("$${") {
            let (consumed, value) = reference(tail, line_no, col, position, lookup)?;
            out.push_reference(line_no, (&mut col, &mut out_col), &tail[..consumed], &value);
            rest = &tail[consumed..];
        } else {
            out.text.push('$');
            col += 1;
            out_col += 1;
            rest = &tail[1..];
        }
    }
    out.text.push_str(rest);
    Ok(())
}

/// Reads the reference at the start of `rest` (`${...}` or the escape `$${`): the bytes it
/// takes and what replaces them. `col` is its 0-based column, for errors.
fn reference(
    rest: &str,
    line: usize,
    col: usize,
    position: Position,
    lookup: &dyn Fn(&str) -> Option<String>,
) -> Result<(usize, String), EnvError> {
    if rest.starts_with("$${") {
        return Ok((3, "${".to_string()));
    }
    let error = |variable: Option<&str>, message: String| EnvError {
        line,
        column: col + 1,
        variable: variable.map(str::to_string),
        message,
    };
    let body = &rest[2..];
    let Some(close) = body.find('}') else {
        return Err(error(
            None,
            "`${` without a closing `}` on the same line (write `$${` for a literal `${`)".into(),
        ));
    };
    let inner = &body[..close];
    let (name, default) = match inner.split_once(":-") {
        Some((name, default)) => (name, Some(default)),
        None => (inner, None),
    };
    let valid_name = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid_name {
        return Err(error(
            None,
            format!(
                "`${{{inner}}}` is not a variable reference: write `${{NAME}}` or `${{NAME:-default}}` (letters, digits, `_`), or `$${{` for a literal `${{`"
            ),
        ));
    }
    if default.is_some_and(|d| d.contains("${")) {
        return Err(error(
            Some(name),
            format!("the default of `{name}` holds `${{`: defaults are plain text, not nested references"),
        ));
    }
    let value = match (lookup(name), default) {
        (Some(v), Some(d)) if v.is_empty() => d.to_string(),
        (Some(v), _) => v,
        (None, Some(d)) => d.to_string(),
        (None, None) => {
            return Err(error(
                Some(name),
                format!(
                    "the environment variable `{name}` is not set and the reference has no default (write `${{{name}:-default}}`)"
                ),
            ))
        }
    };
    if value.contains(['\n', '\r']) {
        return Err(error(
            Some(name),
            format!(
                "the value of `{name}` holds a line break, which a configuration value may not (the file's line numbers would shift)"
            ),
        ));
    }
    let written = match position {
        Position::DoubleQuoted => {
            let mut s = String::with_capacity(value.len());
            for c in value.chars() {
                match c {
                    '"' => s.push_str("\\\""),
                    '\\' => s.push_str("\\\\"),
                    c if c.is_control() && c != '\t' => s.push_str(&format!("\\u{:04x}", c as u32)),
                    c => s.push(c),
                }
            }
            s
        }
        Position::SingleQuoted => value.replace('\'', "''"),
        Position::Block => value,
        Position::Plain { in_flow } => {
            if let Some(why) = structural(&value, in_flow) {
                return Err(error(
                    Some(name),
                    format!(
                        "the value of `{name}` {why}, which YAML would read as structure here: quote the reference (\"${{{name}}}\")"
                    ),
                ));
            }
            value
        }
    };
    Ok((2 + close + 1, written))
}

/// Why `value`, written unquoted, would not be read as one plain scalar; `None` if it would.
fn structural(value: &str, in_flow: bool) -> Option<&'static str> {
    let first = value.chars().next()?;
    let second = value.chars().nth(1);
    if matches!(
        first,
        '[' | ']'
            | '{'
            | '}'
            | '&'
            | '*'
            | '!'
            | '|'
            | '>'
            | '\''
            | '"'
            | '%'
            | '@'
            | '`'
            | '#'
            | ','
    ) {
        return Some("starts with a YAML indicator");
    }
    if matches!(first, '-' | '?' | ':') && second.is_none_or(|c| c == ' ' || c == '\t') {
        return Some("starts with a YAML indicator");
    }
    if value.contains(": ") || value.ends_with(':') {
        return Some("holds `: `");
    }
    if value.contains(" #") || value.contains("\t#") {
        return Some("holds ` #`");
    }
    if value.chars().any(|c| c.is_control() && c != '\t') {
        return Some("holds a control character");
    }
    if in_flow && value.contains([',', '[', ']', '{', '}']) {
        return Some("holds `,`, `[`, `]`, `{` or `}` inside a flow collection");
    }
    None
}

/// The process environment as a lookup (values that are not UTF-8 are read lossily).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var_os(name).map(|v| v.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| {
            vars.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    fn run(text: &str, vars: &[(&str, &str)]) -> Result<String, EnvError> {
        expand(text, &env(vars)).map(|e| e.text)
    }

    #[test]
    fn plain_references_and_defaults() {
        assert_eq!(run("a: ${A}\n", &[("A", "x")]).unwrap(), "a: x\n");
        assert_eq!(run("t: ${T:-2000}\n", &[]).unwrap(), "t: 2000\n");
        assert_eq!(run("t: ${T:-2000}\n", &[("T", "5")]).unwrap(), "t: 5\n");
        // Set but empty: the default, as in a shell.
        assert_eq!(run("t: ${T:-2000}\n", &[("T", "")]).unwrap(), "t: 2000\n");
        assert_eq!(run("t: ${T}\n", &[("T", "")]).unwrap(), "t: \n");
        assert_eq!(run("t: ${T:-}\n", &[]).unwrap(), "t: \n");
        assert_eq!(
            run("u: ${H:-127.0.0.1}:${P:-80}/x\n", &[("P", "8080")]).unwrap(),
            "u: 127.0.0.1:8080/x\n"
        );
        // A default may hold `:` and `/`.
        assert_eq!(
            run("u: ${U:-http://127.0.0.1:50051}\n", &[]).unwrap(),
            "u: http://127.0.0.1:50051\n"
        );
    }

    #[test]
    fn unset_without_default_is_located() {
        let err = run("a: 1\nb:\n  c: x ${NOPE} y\n", &[]).unwrap_err();
        assert_eq!((err.line, err.column), (3, 8));
        assert_eq!(err.variable.as_deref(), Some("NOPE"));
        assert!(err.message.contains("`NOPE` is not set"), "{}", err.message);
    }

    #[test]
    fn escape_and_lone_dollars() {
        assert_eq!(run("a: $${A}\n", &[]).unwrap(), "a: ${A}\n");
        assert_eq!(run("a: '$${A}'\n", &[]).unwrap(), "a: '${A}'\n");
        assert_eq!(run("a: ^x$ $5 $$\n", &[]).unwrap(), "a: ^x$ $5 $$\n");
    }

    #[test]
    fn malformed_references_are_errors() {
        for text in [
            "a: ${}\n",
            "a: ${1X}\n",
            "a: ${A\n",
            "a: ${A-b}\n",
            "a: ${A:-${B}}\n",
        ] {
            let err = run(text, &[("A", "1"), ("B", "2")]).unwrap_err();
            assert_eq!((err.line, err.column), (1, 4), "{text}: {}", err.message);
        }
    }

    #[test]
    fn comments_are_left_alone() {
        let text = "# uses ${UNSET}\na: 1 # and ${UNSET} here\nb: \"x # ${A}\"\n";
        assert_eq!(
            run(text, &[("A", "v")]).unwrap(),
            "# uses ${UNSET}\na: 1 # and ${UNSET} here\nb: \"x # v\"\n"
        );
        // `#` without a space before it is text, not a comment.
        assert!(run("a: x#${UNSET}\n", &[]).is_err());
    }

    #[test]
    fn quoted_values_are_escaped_and_stay_strings() {
        let v = [("V", "say \"hi\" \\ 'yo'")];
        let out = run("a: \"${V}\"\nb: '${V}'\n", &v).unwrap();
        assert_eq!(
            out,
            "a: \"say \\\"hi\\\" \\\\ 'yo'\"\nb: 'say \"hi\" \\ ''yo'''\n"
        );
        let parsed: serde_json::Value = serde_yaml_ng::from_str(&out).unwrap();
        assert_eq!(parsed["a"], v[0].1);
        assert_eq!(parsed["b"], v[0].1);
        // An apostrophe inside a plain scalar does not open a quote.
        assert_eq!(run("a: it's ${A}\n", &[("A", "x")]).unwrap(), "a: it's x\n");
    }

    #[test]
    fn structural_values_in_plain_positions_are_refused() {
        for value in [
            "a: b", "[1, 2]", "x #y", "- item", "*alias", "{a: 1}", "key:",
        ] {
            let err = run("a: ${V}\n", &[("V", value)]).unwrap_err();
            assert!(
                err.message.contains("quote the reference"),
                "{value}: {}",
                err.message
            );
            assert!(run("a: \"${V}\"\n", &[("V", value)]).is_ok(), "{value}");
        }
        // Ordinary values pass: URLs, negative numbers, paths, a colon without a space.
        for value in ["http://h:1/x", "-5", "a/b c", "x:y", "50%"] {
            assert!(run("a: ${V}\n", &[("V", value)]).is_ok(), "{value}");
        }
        // In a flow collection a comma would split the item.
        assert!(run("a: [${V}]\n", &[("V", "x,y")]).is_err());
        assert_eq!(run("a: [${V}, 2]\n", &[("V", "1")]).unwrap(), "a: [1, 2]\n");
    }

    #[test]
    fn line_breaks_in_values_are_refused() {
        let err = run("a: 1\nb: \"${V}\"\n", &[("V", "x\ny")]).unwrap_err();
        assert_eq!((err.line, err.column), (2, 5));
        assert!(err.message.contains("line break"), "{}", err.message);
    }

    #[test]
    fn block_scalars_are_expanded_verbatim_even_after_hash() {
        let text = "f: |\n  # Title ${A}\n  it's ${B}\ng: ${A}\n";
        assert_eq!(
            run(text, &[("A", "x"), ("B", "a: b")]).unwrap(),
            "f: |\n  # Title x\n  it's a: b\ng: x\n"
        );
    }

    #[test]
    fn columns_map_back_to_the_original() {
        let e = expand(
            "a: ${LONG_NAME} ${B} z\n",
            &env(&[("LONG_NAME", "x"), ("B", "yy")]),
        )
        .unwrap();
        assert_eq!(e.text, "a: x yy z\n");
        // `z` is at column 9 expanded, 22 in the original.
        assert_eq!(e.original_column(1, 9), 22);
        // Inside an expansion: its `$`.
        assert_eq!(e.original_column(1, 6), 17);
        assert_eq!(e.original_column(1, 1), 1);
        assert_eq!(e.original_column(2, 5), 5);
    }
}
