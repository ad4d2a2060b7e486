//! An incremental JSON syntax check of a growing text: is it still the start of one JSON value
//! (surrounded by whitespace), and where did it stop being one?

/// What the scanner expects next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Before the value: any whitespace (the validator trims the text), then the value.
    BeforeTop,
    /// A value; `close` allows `]` instead (right after `[`).
    Value { close: bool },
    /// Right after `{`: a key or `}`.
    KeyOrEnd,
    /// After `,` in an object: a key.
    Key,
    /// After a key: `:`.
    Colon,
    /// Inside a string.
    Str { key: bool, escape: Escape },
    /// Inside a number.
    Number(Num),
    /// Inside `true`, `false` or `null`: the word and how much of it came.
    Literal(&'static [u8], usize),
    /// After a value inside a container: `,` or the closing bracket.
    AfterValue,
    /// After the whole value: only whitespace may follow.
    AfterTop,
    /// Nested deeper than serde_json parses: no more judgement (never a false alarm).
    TooDeep,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Escape {
    None,
    /// After `\`.
    Backslash,
    /// After `\u` and this many hex digits.
    Hex(u8),
}

/// Where a number is in `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Num {
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

impl Num {
    /// A number may end here.
    fn complete(self) -> bool {
        matches!(self, Num::Zero | Num::Int | Num::Frac | Num::Exp)
    }

    /// The state after `c`, or `None` when `c` does not continue the number.
    fn next(self, c: char) -> Option<Num> {
        let digit = c.is_ascii_digit();
        Some(match (self, c) {
            (Num::Minus, '0') => Num::Zero,
            (Num::Minus, _) if digit => Num::Int,
            (Num::Int, _) if digit => Num::Int,
            (Num::Zero | Num::Int, '.') => Num::Dot,
            (Num::Dot | Num::Frac, _) if digit => Num::Frac,
            (Num::Zero | Num::Int | Num::Frac, 'e' | 'E') => Num::E,
            (Num::E, '+' | '-') => Num::ESign,
            (Num::E | Num::ESign | Num::Exp, _) if digit => Num::Exp,
            _ => return None,
        })
    }
}

/// serde_json refuses deeper nesting (its recursion limit is 128).
const MAX_DEPTH: usize = 128;

/// Follows a growing text through the JSON grammar, one new byte range per call.
///
/// It reports the first character after which no continuation can make the (trimmed) text one
/// JSON value that serde_json parses. It never reports what serde_json would accept; it may
/// miss failures serde_json finds later (numbers out of range, lone surrogates, depth).
#[derive(Debug, Clone)]
pub(crate) struct JsonPrefix {
    mode: Mode,
    /// Open containers, innermost last: `true` for an object.
    stack: Vec<bool>,
    /// Bytes scanned.
    scanned: usize,
    /// Byte offset of the character that broke the grammar.
    failed: Option<usize>,
    /// Byte offset just after the character that completed the value.
    ended: Option<usize>,
}

/// JSON's own whitespace (between tokens); the text around the value may hold any whitespace.
fn json_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r')
}

impl JsonPrefix {
    pub(crate) fn new() -> Self {
        JsonPrefix {
            mode: Mode::BeforeTop,
            stack: Vec::new(),
            scanned: 0,
            failed: None,
            ended: None,
        }
    }

    /// A scanner whose value starts at byte `offset` of the texts it is fed (what comes
    /// before is not its business); offsets it reports stay offsets of the whole text.
    pub(crate) fn starting_at(offset: usize) -> Self {
        JsonPrefix {
            scanned: offset,
            ..JsonPrefix::new()
        }
    }

    /// Where the value ended (just after the character that completed it), once it did.
    pub(crate) fn ended(&self) -> Option<usize> {
        self.ended
    }

    /// Scans what `text` has beyond the last call (each call's text extends the last one's).
    /// Returns the offset of the character that broke the grammar, once it happened.
    pub(crate) fn feed(&mut self, text: &str) -> Option<usize> {
        if self.failed.is_none() {
            let new = text.get(self.scanned..).unwrap_or_default();
            for (i, c) in new.char_indices() {
                if !self.step(c) {
                    self.failed = Some(self.scanned + i);
                    break;
                }
                if self.ended.is_none() && self.mode == Mode::AfterTop {
                    self.ended = Some(self.scanned + i + c.len_utf8());
                }
            }
            self.scanned = text.len();
        }
        self.failed
    }

    /// After a value ends: inside a container or at the top.
    fn value_done(&mut self) {
        self.mode = if self.stack.is_empty() {
            Mode::AfterTop
        } else {
            Mode::AfterValue
        };
    }

    fn open(&mut self, object: bool) -> bool {
        if self.stack.len() >= MAX_DEPTH {
            self.mode = Mode::TooDeep;
            return true;
        }
        self.stack.push(object);
        self.mode = if object {
            Mode::KeyOrEnd
        } else {
            Mode::Value { close: true }
        };
        true
    }

    fn close(&mut self, object: bool) -> bool {
        if self.stack.pop() != Some(object) {
            return false;
        }
        self.value_done();
        true
    }

    /// The start of a value.
    fn start_value(&mut self, c: char) -> bool {
        match c {
            '{' => self.open(true),
            '[' => self.open(false),
            '"' => {
                self.mode = Mode::Str {
                    key: false,
                    escape: Escape::None,
                };
                true
            }
            '-' => {
                self.mode = Mode::Number(Num::Minus);
                true
            }
            '0' => {
                self.mode = Mode::Number(Num::Zero);
                true
            }
            '1'..='9' => {
                self.mode = Mode::Number(Num::Int);
                true
            }
            't' => self.literal(b"true"),
            'f' => self.literal(b"false"),
            'n' => self.literal(b"null"),
            _ => false,
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> bool {
        self.mode = Mode::Literal(word, 1);
        true
    }

    /// One character; `false` when it breaks the grammar.
    fn step(&mut self, c: char) -> bool {
        match self.mode {
            Mode::TooDeep => true,
            Mode::BeforeTop if c.is_whitespace() => true,
            Mode::BeforeTop => self.start_value(c),
            Mode::AfterTop => c.is_whitespace(),
            Mode::Value { .. } | Mode::KeyOrEnd | Mode::Key | Mode::Colon | Mode::AfterValue
                if json_space(c) =>
            {
                true
            }
            Mode::Value { close: true } if c == ']' => self.close(false),
            Mode::Value { .. } => self.start_value(c),
            Mode::KeyOrEnd if c == '}' => self.close(true),
            Mode::KeyOrEnd | Mode::Key => {
                self.mode = Mode::Str {
                    key: true,
                    escape: Escape::None,
                };
                c == '"'
            }
            Mode::Colon => {
                self.mode = Mode::Value { close: false };
                c == ':'
            }
            Mode::AfterValue => match (c, self.stack.last()) {
                (',', Some(true)) => {
                    self.mode = Mode::Key;
                    true
                }
                (',', Some(false)) => {
                    self.mode = Mode::Value { close: false };
                    true
                }
                ('}', _) => self.close(true),
                (']', _) => self.close(false),
                _ => false,
            },
            Mode::Str { key, escape } => self.string(key, escape, c),
            Mode::Number(n) => match n.next(c) {
                Some(next) => {
                    self.mode = Mode::Number(next);
                    true
                }
                // The number ended: the character belongs to what follows.
                None if n.complete() => {
                    self.value_done();
                    self.step(c)
                }
                None => false,
            },
            Mode::Literal(word, seen) => {
                if word.get(seen).map(|&b| char::from(b)) != Some(c) {
                    return false;
                }
                if seen + 1 == word.len() {
                    self.value_done();
                } else {
                    self.mode = Mode::Literal(word, seen + 1);
                }
                true
            }
        }
    }

    fn string(&mut self, key: bool, escape: Escape, c: char) -> bool {
        let escape = match (escape, c) {
            (Escape::None, '"') => {
                if key {
                    self.mode = Mode::Colon;
                } else {
                    self.value_done();
                }
                return true;
            }
            (Escape::None, '\\') => Escape::Backslash,
            // serde_json refuses control characters inside strings.
            (Escape::None, c) if u32::from(c) < 0x20 => return false,
            (Escape::None, _) => Escape::None,
            (Escape::Backslash, 'u') => Escape::Hex(0),
            (Escape::Backslash, '"' | '\\' | '/' | 'b' | 'f' | 'n' | 'r' | 't') => Escape::None,
            (Escape::Backslash, _) => return false,
            (Escape::Hex(3), c) if c.is_ascii_hexdigit() => Escape::None,
            (Escape::Hex(n), c) if c.is_ascii_hexdigit() => Escape::Hex(n + 1),
            (Escape::Hex(_), _) => return false,
        };
        self.mode = Mode::Str { key, escape };
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn breaks(text: &str) -> Option<usize> {
        JsonPrefix::new().feed(text)
    }

    #[test]
    fn viable_prefixes_pass_and_the_breaking_character_is_found() {
        for ok in [
            "",
            "  {",
            "{\"a\": [1, 2.5e-3, -0, true, nul",
            "{\"k\\u00e9y\": \"v\\\"",
            "[[], {}, \"x\"] \n",
            "\u{a0}{}\u{a0}",
            "12",
        ] {
            assert_eq!(breaks(ok), None, "{ok:?}");
        }
        for (bad, at) in [
            ("{\"a\": 1,}", 8),
            ("{\"a\" 1}", 5),
            ("[01", 2),
            ("{\"a\": tru e", 9),
            ("{} x", 3),
            ("Sure! {", 0),
            ("[1.]", 3),
            ("[\"a\u{1}\"]", 3),
            ("{\"a\": \"\\x\"}", 8),
            ("[1 2]", 3),
            ("[1}", 2),
        ] {
            assert_eq!(breaks(bad), Some(at), "{bad:?}");
        }
    }

    #[test]
    fn feeding_in_pieces_is_feeding_at_once() {
        let text = "{\"name\": \"Ada\", \"tags\": [1, -2.0E+3, null], \"x\": tx}";
        let whole = breaks(text);
        let mut scanner = JsonPrefix::new();
        let mut found = None;
        for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
            found = scanner.feed(&text[..end]);
        }
        assert_eq!(found, whole);
        assert!(whole.is_some());
    }
}
