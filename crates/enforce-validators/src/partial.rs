//! What the forbidden-text validators (`pattern`, `terms`) share: the partial check (early
//! abort) that finds a match of a forbidden regex no continuation of the text can undo, looking
//! only at the tail of the text that could hold a new one, and which issues their repair fixes.

use crate::text::floor_char_boundary;
use enforce_core::{async_trait, Issue, PartialCheck, Severity};
use regex::{Match, Regex};

/// A forbidden regex a [`ForbiddenCheck`] watches, and the issue a definite match raises.
pub(crate) trait Forbidden: Send + Sync {
    /// The regex whose match is forbidden.
    fn regex(&self) -> &Regex;
    /// The issue for `m`, a match in `prefix` no continuation undoes.
    fn issue(&self, validator: &str, prefix: &str, m: Match<'_>) -> Issue;
}

/// The partial check of a forbidden-text validator: what it watches, and how far the text has
/// been searched.
pub(crate) struct ForbiddenCheck<'a, F> {
    validator: &'a str,
    watched: Vec<(F, Watch)>,
    checked: usize,
}

impl<'a, F: Forbidden + 'a> ForbiddenCheck<'a, F> {
    /// The check of `validator` watching `forbidden`; `None` when there is nothing to watch.
    pub(crate) fn boxed(
        validator: &'a str,
        forbidden: Vec<F>,
    ) -> Option<Box<dyn PartialCheck + 'a>> {
        if forbidden.is_empty() {
            return None;
        }
        let watched = forbidden
            .into_iter()
            .map(|f| {
                let watch = Watch::new(f.regex());
                (f, watch)
            })
            .collect();
        Some(Box::new(ForbiddenCheck {
            validator,
            watched,
            checked: 0,
        }))
    }
}

#[async_trait]
impl<F: Forbidden> PartialCheck for ForbiddenCheck<'_, F> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        let mut issues = Vec::new();
        for (forbidden, watch) in &self.watched {
            if let Some(m) = watch.definite(forbidden.regex(), prefix, self.checked) {
                issues.push(forbidden.issue(self.validator, prefix, m));
            }
        }
        self.checked = prefix.len();
        issues
    }
}

/// Whether a repair by replacement removes `issue`: some forbidden rule could have raised it
/// (the same code and severity), and every such rule has a replacement. `rules` gives each
/// rule's code, severity and whether it has a replacement.
pub(crate) fn replacement_fixes<'r>(
    rules: impl Iterator<Item = (&'r str, Severity, bool)>,
    issue: &Issue,
) -> bool {
    let mut raising = rules
        .filter(|(code, severity, _)| *code == issue.code && *severity == issue.severity)
        .peekable();
    raising.peek().is_some() && raising.all(|(_, _, replaced)| replaced)
}

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
