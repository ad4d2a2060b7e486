//! What the partial checks (early abort) of the validators share: finding a match of a
//! forbidden regex that no continuation of the text can undo, looking only at the tail of the
//! text that could hold a new one.

use crate::text::floor_char_boundary;
use regex::{Match, Regex};

/// The most bytes a match of `regex` can span, when the pattern bounds it (`None` for `+`, `*`
/// and friends). Parsed case-insensitively, which can only widen the bound (`k` also matches
/// the three-byte Kelvin sign).
pub(crate) fn max_match_len(regex: &Regex) -> Option<usize> {
    regex_syntax::ParserBuilder::new()
        .case_insensitive(true)
        .build()
        .parse(regex.as_str())
        .ok()?
        .properties()
        .maximum_len()
}

/// A forbidden regex followed through one growing text.
#[derive(Debug)]
pub(crate) struct Watch {
    /// The most bytes a match spans, `None`: unbounded.
    max_len: Option<usize>,
}

impl Watch {
    pub(crate) fn new(regex: &Regex) -> Self {
        Watch {
            max_len: max_match_len(regex),
        }
    }

    /// The first match of `regex` in `prefix` that every continuation keeps: one that ends
    /// before the end of `prefix`, so the look-arounds at its end (`\b`, `$`) are settled by a
    /// byte already written. (The regex crate has no look-ahead beyond one character.)
    ///
    /// `checked` is how much of the text an earlier call saw without finding one: a new match
    /// must end at or after it, so for a bounded regex only the last `max_len` bytes before it
    /// are searched again (`find_at` still looks behind the start for `\b`). An unbounded
    /// regex is searched from the start: O(prefix) per call.
    pub(crate) fn definite<'t>(
        &self,
        regex: &Regex,
        prefix: &'t str,
        checked: usize,
    ) -> Option<Match<'t>> {
        let start = match self.max_len {
            Some(len) => floor_char_boundary(prefix, checked.saturating_sub(len.saturating_add(1))),
            None => 0,
        };
        regex
            .find_at(prefix, start)
            .filter(|m| m.end() < prefix.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_match_at_the_end_is_not_yet_definite() {
        let re = Regex::new(r"\bAcme\b").unwrap();
        let watch = Watch::new(&re);
        assert_eq!(watch.max_len, Some(4));
        assert!(watch.definite(&re, "We love Acme", 0).is_none());
        assert_eq!(watch.definite(&re, "We love Acme.", 0).unwrap().start(), 8);
        // Only the tail is searched again, but look-behind still sees the byte before it.
        assert!(watch.definite(&re, "xAcme.", 3).is_none());
        assert!(Watch::new(&Regex::new(r"\d+%").unwrap()).max_len.is_none());
    }
}
