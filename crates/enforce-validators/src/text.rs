//! Markdown-ish text helpers shared by the validators: fenced code blocks and lines.
//!
//! Only what the validators need is recognised, following CommonMark where it matters: a fence
//! is a line indented by at most three spaces that starts with three or more backticks or
//! tildes; it is closed by a line of the same character, at least as long, with nothing but
//! whitespace after it. An unclosed fence runs to the end of the text.

use memchr::memmem;
use serde_json::Value;
use std::ops::Range;

/// One fenced code block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fence {
    /// Byte range of the whole block, from the start of the opening line to the end of the
    /// closing line (including its newline), or to the end of the text when unclosed.
    pub block: Range<usize>,
    /// Byte range of the content between the fence lines.
    pub content: Range<usize>,
    /// The first word of the info string (`python` in ```` ```python title ````), lower-cased;
    /// empty when there is none.
    pub language: String,
    /// 1-based line of the opening fence.
    pub open_line: u32,
    /// `false` when the text ends before a closing fence.
    pub closed: bool,
}

impl Fence {
    /// `true` when `offset` lies inside the block (fence lines included).
    pub fn contains(&self, offset: usize) -> bool {
        self.block.contains(&offset)
    }
}

/// Start of the line holding byte `offset`.
pub fn line_start(bytes: &[u8], offset: usize) -> usize {
    memchr::memrchr(b'\n', &bytes[..offset]).map_or(0, |p| p + 1)
}

/// End of the line holding byte `offset`, after its newline (or the text's end).
pub fn line_end_incl(bytes: &[u8], offset: usize) -> usize {
    memchr::memchr(b'\n', &bytes[offset..]).map_or(bytes.len(), |p| offset + p + 1)
}

/// A fence line starting at `start`: its character, run length and the rest of the line.
fn fence_line(bytes: &[u8], start: usize) -> Option<(u8, usize, Range<usize>)> {
    let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |p| start + p);
    let line = &bytes[start..end];
    let indent = line.iter().take_while(|&&b| b == b' ').count();
    if indent > 3 {
        return None;
    }
    let ch = *line.get(indent)?;
    if ch != b'`' && ch != b'~' {
        return None;
    }
    let run = line[indent..].iter().take_while(|&&b| b == ch).count();
    if run < 3 {
        return None;
    }
    Some((ch, run, start + indent + run..end))
}

/// Every fenced code block of `text`, in order.
///
/// Runs in linear time: fence candidates are found with a substring search, so text without
/// fences is scanned at memory speed.
pub fn fences(text: &str) -> Vec<Fence> {
    let bytes = text.as_bytes();
    // Candidate line starts: lines holding ``` or ~~~ anywhere; verified below.
    let mut candidates: Vec<usize> = memmem::find_iter(bytes, b"```")
        .chain(memmem::find_iter(bytes, b"~~~"))
        .map(|p| line_start(bytes, p))
        .collect();
    candidates.sort_unstable();
    candidates.dedup();

    let mut out = Vec::new();
    // Lines are counted incrementally: one pass over the text, however many fences.
    let mut lines = LineCounter::new(text);
    let mut open: Option<(u8, usize, usize, Range<usize>, String)> = None; // ch, run, start, content_start, lang
    for &start in &candidates {
        let Some((ch, run, rest)) = fence_line(bytes, start) else {
            continue;
        };
        let rest_text = text.get(rest.clone()).unwrap_or("");
        match &open {
            None => {
                if ch == b'`' && rest_text.contains('`') {
                    continue; // inline code such as ```x``` is not a fence
                }
                let language = rest_text
                    .split_whitespace()
                    .next()
                    .unwrap_or("")
                    .to_ascii_lowercase();
                let content_start = line_end_incl(bytes, start);
                open = Some((ch, run, start, content_start..content_start, language));
            }
            Some((och, orun, ostart, content, language)) => {
                if ch == *och && run >= *orun && rest_text.trim().is_empty() {
                    let end = line_end_incl(bytes, start);
                    out.push(Fence {
                        block: *ostart..end,
                        content: content.start..start.max(content.start),
                        language: language.clone(),
                        open_line: lines.line_of(*ostart),
                        closed: true,
                    });
                    open = None;
                }
            }
        }
    }
    if let Some((_, _, ostart, content, language)) = open {
        out.push(Fence {
            block: ostart..bytes.len(),
            content: content.start.min(bytes.len())..bytes.len(),
            language,
            open_line: lines.line_of(ostart),
            closed: false,
        });
    }
    out
}

/// `true` when `offset` lies in one of `fences` (sorted, as [`fences`] returns them).
pub fn in_fences(fences: &[Fence], offset: usize) -> bool {
    let idx = fences.partition_point(|f| f.block.end <= offset);
    fences.get(idx).is_some_and(|f| f.contains(offset))
}

/// Counts newlines incrementally, for giving many ascending offsets a line number in one pass.
#[derive(Debug)]
pub struct LineCounter<'a> {
    bytes: &'a [u8],
    pos: usize,
    line: u32,
}

impl<'a> LineCounter<'a> {
    /// A counter over `text`, at its start.
    pub fn new(text: &'a str) -> Self {
        LineCounter {
            bytes: text.as_bytes(),
            pos: 0,
            line: 1,
        }
    }

    /// 1-based line of `offset`; offsets must not decrease between calls (else it restarts).
    pub fn line_of(&mut self, offset: usize) -> u32 {
        let offset = offset.min(self.bytes.len());
        if offset < self.pos {
            self.pos = 0;
            self.line = 1;
        }
        let n = memchr::memchr_iter(b'\n', &self.bytes[self.pos..offset]).count();
        self.line = self
            .line
            .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
        self.pos = offset;
        self.line
    }
}

/// 1-based column, in characters, of byte `offset` within its line.
pub fn column_of(text: &str, offset: usize) -> u32 {
    let offset = floor_char_boundary(text, offset);
    let start = line_start(text.as_bytes(), offset);
    let chars = text.get(start..offset).map_or(0, |s| s.chars().count());
    u32::try_from(chars).unwrap_or(u32::MAX).saturating_add(1)
}

/// The largest char boundary not above `offset`.
pub fn floor_char_boundary(text: &str, offset: usize) -> usize {
    let mut o = offset.min(text.len());
    while o > 0 && !text.is_char_boundary(o) {
        o -= 1;
    }
    o
}

/// Lines of `text` with their byte offsets; the line excludes `\n` and a trailing `\r`.
pub fn lines_with_offsets(text: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut pos = 0;
    std::iter::from_fn(move || {
        if pos >= text.len() {
            return None;
        }
        let start = pos;
        let rel_end = text[start..].find('\n');
        let end = rel_end.map_or(text.len(), |e| start + e);
        pos = rel_end.map_or(text.len(), |e| start + e + 1);
        let line = &text[start..end];
        Some((start, line.strip_suffix('\r').unwrap_or(line)))
    })
}

/// How the JSON sits in the response.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonForm {
    /// The whole response (surrounding whitespace aside) is the JSON.
    Whole,
    /// The JSON is the content of a fenced code block.
    Fenced,
    /// The JSON is surrounded by prose.
    Embedded,
}

/// JSON found in a response.
#[derive(Debug, Clone, PartialEq)]
pub struct JsonSpan {
    /// The parsed value.
    pub value: Value,
    /// Byte range of the JSON text in the response.
    pub range: Range<usize>,
    /// Where it was found.
    pub form: JsonForm,
}

pub(crate) fn trimmed_range(text: &str, range: Range<usize>) -> Range<usize> {
    let s = &text[range.clone()];
    let start = range.start + (s.len() - s.trim_start().len());
    let end = range.start + s.trim_end().len();
    start..end.max(start)
}

/// Finds the response's JSON: the whole response, else the first fenced block (tagged `json`
/// or untagged) that parses, else the text from the first `{` (or `[`) to the last `}` (or
/// `]`) when that parses. Linear in the response's length.
pub fn locate_json(text: &str) -> Option<JsonSpan> {
    let whole = trimmed_range(text, 0..text.len());
    if let Ok(value) = serde_json::from_str::<Value>(&text[whole.clone()]) {
        return Some(JsonSpan {
            value,
            range: whole,
            form: JsonForm::Whole,
        });
    }
    for fence in fences(text) {
        if !matches!(fence.language.as_str(), "json" | "jsonc" | "json5" | "") {
            continue;
        }
        let range = trimmed_range(text, fence.content.clone());
        if let Ok(value) = serde_json::from_str::<Value>(&text[range.clone()]) {
            return Some(JsonSpan {
                value,
                range,
                form: JsonForm::Fenced,
            });
        }
    }
    let embedded = |open: char, close: char| -> Option<Range<usize>> {
        let start = text.find(open)?;
        let end = text.rfind(close)?;
        (end > start).then(|| start..end + close.len_utf8())
    };
    let mut candidates: Vec<Range<usize>> = [embedded('{', '}'), embedded('[', ']')]
        .into_iter()
        .flatten()
        .collect();
    candidates.sort_by_key(|r| r.start);
    for range in candidates {
        if let Ok(value) = serde_json::from_str::<Value>(&text[range.clone()]) {
            return Some(JsonSpan {
                value,
                range,
                form: JsonForm::Embedded,
            });
        }
    }
    None
}

/// 1-based line number of the byte offset `offset` in `text` (clamped to the text's length).
///
/// Validators use it to give an issue a location; it counts `\n`, so CRLF text works too.
pub fn line_of_offset(text: &str, offset: usize) -> u32 {
    let end = offset.min(text.len());
    let newlines = text.as_bytes()[..end]
        .iter()
        .filter(|&&b| b == b'\n')
        .count();
    u32::try_from(newlines.saturating_add(1)).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_of_offset_counts_newlines_and_clamps() {
        let text = "a\r\nb\nc";
        assert_eq!(line_of_offset(text, 0), 1);
        assert_eq!(line_of_offset(text, 3), 2);
        assert_eq!(line_of_offset(text, 5), 3);
        assert_eq!(line_of_offset(text, 10_000), 3);
    }

    #[test]
    fn finds_backtick_and_tilde_fences_with_language() {
        let text = "a\n```Python x\nprint(1)\n```\nb\n~~~~\n```\nstill inside\n~~~~\nc";
        let f = fences(text);
        assert_eq!(f.len(), 2);
        assert_eq!(f[0].language, "python");
        assert_eq!(&text[f[0].content.clone()], "print(1)\n");
        assert_eq!(f[0].open_line, 2);
        assert!(f[1].closed);
        assert_eq!(&text[f[1].content.clone()], "```\nstill inside\n");
    }

    #[test]
    fn unclosed_fence_runs_to_end_and_inline_triple_backticks_are_not_fences() {
        let text = "x ```not``` y\n```rust\nfn a() {}";
        let f = fences(text);
        assert_eq!(f.len(), 1);
        assert!(!f[0].closed);
        assert_eq!(&text[f[0].content.clone()], "fn a() {}");
        let text = "```inline``` code\nmore";
        assert!(fences(text).is_empty());
    }

    #[test]
    fn closing_fence_must_be_long_enough_and_bare() {
        let text = "````md\n```\ninner\n```\n````\n";
        let f = fences(text);
        assert_eq!(f.len(), 1);
        assert_eq!(&text[f[0].content.clone()], "```\ninner\n```\n");
        assert!(in_fences(&f, 8));
        assert!(!in_fences(&f, text.len()));
    }

    #[test]
    fn indented_four_spaces_is_not_a_fence_and_crlf_works() {
        assert!(fences("    ```\ncode\n    ```\n").is_empty());
        let f = fences("```\r\nx\r\n```\r\n");
        assert_eq!(f.len(), 1);
        assert!(f[0].closed);
    }

    #[test]
    fn many_fences_get_their_lines_in_one_pass() {
        let text = "x\n```\ny\n```\n".repeat(50_000);
        let f = fences(&text);
        assert_eq!(f.len(), 50_000);
        assert_eq!(f[49_999].open_line, 49_999 * 4 + 2);
    }

    #[test]
    fn line_counter_and_columns() {
        let text = "ab\ncä d\n";
        let mut lc = LineCounter::new(text);
        assert_eq!(lc.line_of(0), 1);
        assert_eq!(lc.line_of(4), 2);
        assert_eq!(lc.line_of(1), 1);
        assert_eq!(column_of(text, 7), 4);
        let lines: Vec<_> = lines_with_offsets("a\r\nb").collect();
        assert_eq!(lines, vec![(0, "a"), (3, "b")]);
    }
}

/// Deepest flow nesting (`[` / `{`) YAML input may have before it is refused unparsed.
///
/// The YAML parser takes time quadratic in the flow depth, so `[[[[...` is rejected by this
/// linear pre-scan; real documents stay far below the limit.
pub const MAX_YAML_FLOW_DEPTH: usize = 64;

/// Byte offset where `yaml`'s flow nesting first exceeds `max`, if it does. Quotes and
/// comments are skipped approximately (a quote opens a string only at the start of a token).
pub fn yaml_flow_depth_exceeded(yaml: &str, max: usize) -> Option<usize> {
    let bytes = yaml.as_bytes();
    let mut depth = 0usize;
    let mut quote: Option<u8> = None;
    let mut prev = b'\n';
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == q || b == b'\n' {
                    quote = None;
                }
            }
            None => match b {
                b'\'' | b'"'
                    if matches!(prev, b' ' | b'\t' | b'\n' | b'[' | b'{' | b',' | b':') =>
                {
                    quote = Some(b)
                }
                b'#' if matches!(prev, b' ' | b'\t' | b'\n') => {
                    i = memchr::memchr(b'\n', &bytes[i..]).map_or(bytes.len(), |p| i + p);
                    prev = b'\n';
                    continue;
                }
                b'[' | b'{' => {
                    depth += 1;
                    if depth > max {
                        return Some(i);
                    }
                }
                b']' | b'}' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
        prev = b;
        i += 1;
    }
    None
}

#[cfg(test)]
mod depth_tests {
    use super::*;

    #[test]
    fn flow_depth_prescan() {
        assert_eq!(yaml_flow_depth_exceeded("a: [[1], {b: [2]}]\n", 3), None);
        assert_eq!(yaml_flow_depth_exceeded("a: [[[[1]]]]", 3), Some(6));
        assert_eq!(
            yaml_flow_depth_exceeded("a: '[[[[' # [[[[\nb: it's [x]", 1),
            None
        );
        assert_eq!(yaml_flow_depth_exceeded(&"[".repeat(100_000), 64), Some(64));
    }
}
