//! Text-level edits of block-style YAML that keep every other byte as it was (comments, key
//! order, quoting, line endings). Used by the `file_refs` repair.

/// One line of the document with its layout.
struct Line<'a> {
    /// The whole line, newline included.
    raw: &'a str,
    /// Leading spaces.
    indent: usize,
    /// The line without indentation and newline.
    content: &'a str,
}

impl Line<'_> {
    fn is_blank_or_comment(&self) -> bool {
        self.content.is_empty() || self.content.starts_with('#')
    }

    fn is_item(&self) -> bool {
        self.content == "-" || self.content.starts_with("- ")
    }
}

fn parse_lines(text: &str) -> Vec<Line<'_>> {
    text.split_inclusive('\n')
        .map(|raw| {
            let body = raw.trim_end_matches(['\n', '\r']);
            let content = body.trim_start_matches(' ');
            Line {
                raw,
                indent: body.len() - content.len(),
                content: content.trim_end(),
            }
        })
        .collect()
}

/// The value part of `key: value  # comment` and the comment (with its `#`), when the line is
/// `name:` followed by a space, a comment or nothing.
fn key_value<'a>(content: &'a str, name: &str) -> Option<(&'a str, &'a str)> {
    let rest = content.strip_prefix(name)?;
    let rest = rest.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with([' ', '\t'])) {
        return None;
    }
    let (value, comment) = split_comment(rest);
    Some((value.trim(), comment))
}

/// Splits a plain value from a trailing ` # comment` (outside quotes).
fn split_comment(text: &str) -> (&str, &str) {
    let mut quote: Option<char> = None;
    let mut prev_space = true;
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, '#') if prev_space => return (&text[..i], &text[i..]),
            _ => {}
        }
        prev_space = c == ' ' || c == '\t';
    }
    (text, "")
}

/// Removes YAML quotes from a scalar (`'a''b'` → `a'b`, `"a"` → `a`).
fn unquote(s: &str) -> String {
    let s = s.trim();
    if s.len() >= 2 && s.starts_with('\'') && s.ends_with('\'') {
        return s[1..s.len() - 1].replace("''", "'");
    }
    if s.len() >= 2 && s.starts_with('"') && s.ends_with('"') {
        return s[1..s.len() - 1]
            .replace("\\\"", "\"")
            .replace("\\\\", "\\");
    }
    s.to_string()
}

/// A path as a YAML scalar: plain when safe, single-quoted otherwise.
fn quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | '+' | '@' | '~'))
        && !s.starts_with(['-', '~', '@'])
        && !matches!(s, "null" | "true" | "false" | "yes" | "no" | "on" | "off");
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "''"))
    }
}

/// Splits the inside of a one-line flow list (`a, 'b, c', "d"`) into raw items.
fn split_flow(inner: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut quote: Option<char> = None;
    let mut start = 0;
    for (i, c) in inner.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ',') => {
                out.push(inner[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    let last = inner[start..].trim();
    if !last.is_empty() {
        out.push(last);
    }
    out.retain(|s| !s.is_empty());
    out
}

/// Index just past the last content line of the block under the key at `key_line`.
fn block_end(lines: &[Line<'_>], key_line: usize, key_indent: usize) -> usize {
    let mut end = key_line + 1;
    for (i, line) in lines.iter().enumerate().skip(key_line + 1) {
        if line.is_blank_or_comment() {
            continue;
        }
        if line.indent > key_indent || (line.indent == key_indent && line.is_item()) {
            end = i + 1;
        } else {
            break;
        }
    }
    end
}

/// Finds `name:` among the direct children of the block `start..end` (children share the
/// indent of its first content line). Returns the line index.
fn find_child(lines: &[Line<'_>], start: usize, end: usize, name: &str) -> Option<usize> {
    let child_indent = lines[start..end]
        .iter()
        .find(|l| !l.is_blank_or_comment())?
        .indent;
    (start..end).find(|&i| {
        let l = &lines[i];
        l.indent == child_indent && key_value(l.content, name).is_some()
    })
}

/// Moves the list entries `moved` from the list at `from` to the list at `to` (dotted key
/// paths as segment lists that share their parent), editing only the lines involved.
///
/// Returns `None` when the document's layout is not one this editor understands (the caller
/// then leaves the text alone).
pub(crate) fn move_items(
    text: &str,
    from: &[String],
    to: &[String],
    moved: &[&str],
) -> Option<String> {
    let (from_last, parent) = from.split_last()?;
    let (to_last, to_parent) = to.split_last()?;
    if parent != to_parent || from_last == to_last {
        return None;
    }
    let lines = parse_lines(text);
    let eol = if text.contains("\r\n") { "\r\n" } else { "\n" };

    // Walk down to the parent block.
    let (mut start, mut end) = (0, lines.len());
    for seg in parent {
        let at = find_child(&lines, start, end, seg)?;
        let (value, _) = key_value(lines[at].content, seg)?;
        if !value.is_empty() {
            return None; // a flow mapping: not handled
        }
        end = block_end(&lines, at, lines[at].indent);
        start = at + 1;
    }
    let from_at = find_child(&lines, start, end, from_last)?;
    let key_indent = lines[from_at].indent;
    let from_end = block_end(&lines, from_at, key_indent);
    let (from_value, from_comment) = key_value(lines[from_at].content, from_last)?;
    let pad = |n: usize| " ".repeat(n);
    let comment_suffix = |c: &str| {
        if c.is_empty() {
            String::new()
        } else {
            format!(" {c}")
        }
    };

    let mut replace: Vec<Option<String>> = vec![None; lines.len()];
    let mut remove = vec![false; lines.len()];
    let mut item_indent: Option<usize> = None;
    let mut moved_found: Vec<String> = Vec::new();

    if from_value.is_empty() {
        let mut kept = 0;
        for i in from_at + 1..from_end {
            let l = &lines[i];
            if l.is_blank_or_comment() {
                continue;
            }
            if !l.is_item() {
                return None; // nested mapping or continuation lines: not a simple list
            }
            item_indent.get_or_insert(l.indent);
            let (value, _) = split_comment(l.content[1..].trim_start());
            let value = unquote(value);
            if moved.contains(&value.as_str()) {
                remove[i] = true;
                moved_found.push(value);
            } else {
                kept += 1;
            }
        }
        if kept == 0 {
            replace[from_at] = Some(format!(
                "{}{from_last}: []{}{eol}",
                pad(key_indent),
                comment_suffix(from_comment)
            ));
        }
    } else {
        let inner = from_value.strip_prefix('[')?.strip_suffix(']')?;
        let mut kept = Vec::new();
        for raw in split_flow(inner) {
            let value = unquote(raw);
            if moved.contains(&value.as_str()) {
                moved_found.push(value);
            } else {
                kept.push(raw);
            }
        }
        replace[from_at] = Some(format!(
            "{}{from_last}: [{}]{}{eol}",
            pad(key_indent),
            kept.join(", "),
            comment_suffix(from_comment)
        ));
    }
    if moved_found.is_empty() {
        return None;
    }

    let mut inserts: Vec<(usize, Vec<String>)> = Vec::new(); // after line index
    match find_child(&lines, start, end, to_last) {
        Some(to_at) => {
            let to_indent = lines[to_at].indent;
            let to_end = block_end(&lines, to_at, to_indent);
            let (to_value, to_comment) = key_value(lines[to_at].content, to_last)?;
            if to_value.is_empty() || to_value == "~" || to_value == "null" {
                let mut last_item = to_at;
                let mut indent = None;
                for (i, l) in lines.iter().enumerate().take(to_end).skip(to_at + 1) {
                    if l.is_item() {
                        indent.get_or_insert(l.indent);
                        last_item = i;
                    } else if !l.is_blank_or_comment() {
                        return None;
                    }
                }
                if to_value == "~" || to_value == "null" {
                    replace[to_at] = Some(format!(
                        "{}{to_last}:{}{eol}",
                        pad(to_indent),
                        comment_suffix(to_comment)
                    ));
                }
                let indent = indent.or(item_indent).unwrap_or(to_indent + 2);
                let new: Vec<String> = moved_found
                    .iter()
                    .map(|m| format!("{}- {}{eol}", pad(indent), quote(m)))
                    .collect();
                inserts.push((last_item, new));
            } else {
                let inner = to_value.strip_prefix('[')?.strip_suffix(']')?;
                let mut items: Vec<String> =
                    split_flow(inner).into_iter().map(String::from).collect();
                items.extend(moved_found.iter().map(|m| quote(m)));
                replace[to_at] = Some(format!(
                    "{}{to_last}: [{}]{}{eol}",
                    pad(to_indent),
                    items.join(", "),
                    comment_suffix(to_comment)
                ));
            }
        }
        None => {
            let indent = item_indent.unwrap_or(key_indent + 2);
            let mut new = vec![format!("{}{to_last}:{eol}", pad(key_indent))];
            new.extend(
                moved_found
                    .iter()
                    .map(|m| format!("{}- {}{eol}", pad(indent), quote(m))),
            );
            inserts.push((from_end - 1, new));
        }
    }

    let mut out = String::with_capacity(text.len() + 64);
    for (i, line) in lines.iter().enumerate() {
        if !remove[i] {
            match &replace[i] {
                Some(r) => out.push_str(r),
                None => out.push_str(line.raw),
            }
        }
        for (_, new) in inserts.iter().filter(|(at, _)| *at == i) {
            if !out.is_empty() && !out.ends_with('\n') {
                out.push_str(eol);
            }
            for n in new {
                out.push_str(n);
            }
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(k: &str) -> Vec<String> {
        k.split('.').map(String::from).collect()
    }

    #[test]
    fn moves_block_items_into_a_new_list() {
        let text =
            "files:\n  modify:\n    - a   # keep me\n    - 'b c'\n  # trailing comment\nnext: 1\n";
        let out = move_items(text, &keys("files.modify"), &keys("files.create"), &["b c"]).unwrap();
        assert_eq!(out, "files:\n  modify:\n    - a   # keep me\n  create:\n    - 'b c'\n  # trailing comment\nnext: 1\n");
    }

    #[test]
    fn appends_to_flow_and_null_lists() {
        let text = "files:\n  create: [x]\n  modify:\n    - y\n";
        let out = move_items(text, &keys("files.modify"), &keys("files.create"), &["y"]).unwrap();
        assert_eq!(out, "files:\n  create: [x, y]\n  modify: []\n");
        let text = "files:\n  create: ~\n  modify: [y, z]\n";
        let out = move_items(text, &keys("files.modify"), &keys("files.create"), &["y"]).unwrap();
        assert_eq!(out, "files:\n  create:\n    - y\n  modify: [z]\n");
    }

    #[test]
    fn unknown_layouts_are_left_alone() {
        let text = "files: {modify: [a]}\n";
        assert!(move_items(text, &keys("files.modify"), &keys("files.create"), &["a"]).is_none());
        let text = "files:\n  modify:\n    - a\n";
        assert!(move_items(text, &keys("files.modify"), &keys("other.create"), &["a"]).is_none());
        assert!(move_items(text, &keys("files.modify"), &keys("files.create"), &["zzz"]).is_none());
        assert!(move_items("", &keys("files.modify"), &keys("files.create"), &["a"]).is_none());
    }

    #[test]
    fn quoting_round_trips() {
        for s in ["src/a.rs", "a b", "it's", "-x", "null", "ü/ß.rs", "a#b"] {
            let yaml = format!("- {}\n", quote(s));
            let v: Vec<String> = serde_yaml_ng::from_str(&yaml).unwrap();
            assert_eq!(v, vec![s.to_string()], "{yaml}");
            assert_eq!(unquote(&quote(s)), s);
        }
        assert_eq!(split_flow("a, 'b, c', \"d\""), vec!["a", "'b, c'", "\"d\""]);
        assert_eq!(split_comment("x # c"), ("x ", "# c"));
        assert_eq!(split_comment("'a # b' # c"), ("'a # b' ", "# c"));
    }
}
