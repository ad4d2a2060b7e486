//! # enforce-plugin-german-prose
//!
//! An example enforce plugin for German business prose. Its validator `german_prose` reports:
//!
//! - `DIRECT_ADDRESS`: the text addresses the reader with the formal pronouns *Sie*, *Ihr*,
//!   *Ihnen*, *Ihrem*, *Ihrer* (whole words, case-sensitive, so *sie* and *ihr* are fine);
//! - `SCORE_NOTATION`: the text grades something with a score such as `7/10`, `4,5 / 5`,
//!   `8 von 10` or a run of stars (`★★★☆☆`).
//!
//! Both are repairable errors: the model is asked again with the line and column of each hit.
//!
//! Configuration (all keys optional):
//!
//! ```yaml
//! validators:
//!   german_prose:
//!     forbidden_pronouns: [Sie, Ihr, Ihnen, Ihrem, Ihrer]   # the default
//!     score_denominators: [5, 10, 20, 100]                 # the default
//!     check_scores: true                                   # the default
//! ```
//!
//! The checking logic is plain Rust ([`GermanProse::check`]) so it can be tested and benchmarked
//! without the plugin boundary:
//!
//! ```
//! use enforce_plugin_german_prose::GermanProse;
//!
//! let rules = GermanProse::default();
//! let findings = rules.check("Wir danken Ihnen.\nBewertung: 8/10");
//! assert_eq!(findings.len(), 2);
//! assert_eq!((findings[0].code, findings[0].line, findings[0].column), ("DIRECT_ADDRESS", 1, 12));
//! assert_eq!((findings[1].code, findings[1].line), ("SCORE_NOTATION", 2));
//! assert!(rules.check("Die Firma liefert, sie hält ihr Versprechen.").is_empty());
//! ```
#![deny(missing_docs)]

use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue};
use serde_json::Value;

/// Issue code for a formal pronoun addressing the reader.
pub const DIRECT_ADDRESS: &str = "DIRECT_ADDRESS";
/// Issue code for a grade written as a score.
pub const SCORE_NOTATION: &str = "SCORE_NOTATION";

const DEFAULT_PRONOUNS: [&str; 5] = ["Sie", "Ihr", "Ihnen", "Ihrem", "Ihrer"];
const DEFAULT_DENOMINATORS: [u32; 4] = [5, 10, 20, 100];

/// One hit of [`GermanProse::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// [`DIRECT_ADDRESS`] or [`SCORE_NOTATION`].
    pub code: &'static str,
    /// The offending text as it appears in the response.
    pub text: String,
    /// 1-based line.
    pub line: u32,
    /// 1-based column in characters.
    pub column: u32,
}

impl Finding {
    /// The message and hint for this finding.
    pub fn message_and_hint(&self) -> (String, &'static str) {
        match self.code {
            DIRECT_ADDRESS => (
                format!(
                    "The text addresses the reader directly with `{}`.",
                    self.text
                ),
                "Write in the third person about the company instead of addressing the reader \
                 (e.g. \"das Unternehmen\" instead of \"Sie\").",
            ),
            _ => (
                format!("The text grades with the score notation `{}`.", self.text),
                "Describe the assessment in words; do not give scores, points or stars.",
            ),
        }
    }
}

/// The rules of the `german_prose` validator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GermanProse {
    pronouns: Vec<String>,
    denominators: Vec<u32>,
    check_scores: bool,
}

impl Default for GermanProse {
    fn default() -> Self {
        GermanProse {
            pronouns: DEFAULT_PRONOUNS.iter().map(|s| s.to_string()).collect(),
            denominators: DEFAULT_DENOMINATORS.to_vec(),
            check_scores: true,
        }
    }
}

impl GermanProse {
    /// Reads the configuration (`null` or `{}` gives the defaults).
    ///
    /// ```
    /// use enforce_plugin_german_prose::GermanProse;
    ///
    /// let rules = GermanProse::from_config(&serde_json::json!({"forbidden_pronouns": ["Du"]})).unwrap();
    /// assert_eq!(rules.check("Du bist dran.").len(), 1);
    /// assert!(GermanProse::from_config(&serde_json::json!({"check_scores": "yes"})).is_err());
    /// ```
    pub fn from_config(config: &Value) -> Result<Self, String> {
        let mut rules = GermanProse::default();
        let map = match config {
            Value::Null => return Ok(rules),
            Value::Object(map) => map,
            other => return Err(format!("expected a mapping, found {other}")),
        };
        for (key, value) in map {
            match key.as_str() {
                "forbidden_pronouns" => {
                    rules.pronouns = string_list(value)
                        .ok_or("`forbidden_pronouns` must be a list of strings")?;
                }
                "score_denominators" => {
                    rules.denominators = value
                        .as_array()
                        .and_then(|a| {
                            a.iter()
                                .map(|n| n.as_u64().and_then(|n| u32::try_from(n).ok()))
                                .collect::<Option<Vec<u32>>>()
                        })
                        .ok_or("`score_denominators` must be a list of positive integers")?;
                }
                "check_scores" => {
                    rules.check_scores =
                        value.as_bool().ok_or("`check_scores` must be a boolean")?;
                }
                other => return Err(format!("unknown key `{other}`")),
            }
        }
        Ok(rules)
    }

    /// Every finding in `text`, in order of appearance.
    pub fn check(&self, text: &str) -> Vec<Finding> {
        let mut findings = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line_no = u32::try_from(index + 1).unwrap_or(u32::MAX);
            self.check_pronouns(line, line_no, &mut findings);
            if self.check_scores {
                self.check_scores_in(line, line_no, &mut findings);
            }
        }
        findings.sort_by_key(|f| (f.line, f.column));
        findings
    }

    fn check_pronouns(&self, line: &str, line_no: u32, out: &mut Vec<Finding>) {
        for (start, word) in words(line) {
            if self.pronouns.iter().any(|p| p == word) {
                out.push(Finding {
                    code: DIRECT_ADDRESS,
                    text: word.to_string(),
                    line: line_no,
                    column: column_of(line, start),
                });
            }
        }
    }

    fn check_scores_in(&self, line: &str, line_no: u32, out: &mut Vec<Finding>) {
        let bytes = line.as_bytes();
        let mut push = |start: usize, end: usize| {
            out.push(Finding {
                code: SCORE_NOTATION,
                text: line[start..end].to_string(),
                line: line_no,
                column: column_of(line, start),
            });
        };
        // `7/10`, `4,5 / 5`: a number, a slash, a denominator from the list.
        for (slash, _) in line.match_indices('/') {
            let Some(start) = number_before(bytes, slash) else {
                continue;
            };
            let Some((denominator, end)) = integer_after(bytes, slash + 1) else {
                continue;
            };
            if self.denominators.contains(&denominator) {
                push(start, end);
            }
        }
        // `8 von 10`: a number, the word "von", a denominator from the list.
        let tokens: Vec<(usize, &str)> = words_and_numbers(line).collect();
        for window in tokens.windows(3) {
            let [(start, first), (_, von), (last_start, last)] = window else {
                continue;
            };
            if *von == "von" && is_number(first) {
                if let Ok(denominator) = last.parse::<u32>() {
                    if self.denominators.contains(&denominator) {
                        push(*start, last_start + last.len());
                    }
                }
            }
        }
        // `★★★☆☆`: two or more star glyphs in a row.
        let mut run_start = None;
        let mut run_len = 0;
        for (i, c) in line
            .char_indices()
            .chain(std::iter::once((line.len(), ' ')))
        {
            if matches!(c, '★' | '☆' | '⭐') {
                run_start.get_or_insert(i);
                run_len += 1;
            } else {
                if let (Some(start), true) = (run_start, run_len >= 2) {
                    push(start, i);
                }
                run_start = None;
                run_len = 0;
            }
        }
    }
}

fn string_list(value: &Value) -> Option<Vec<String>> {
    value
        .as_array()?
        .iter()
        .map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// 1-based character column of byte offset `byte` in `line`.
fn column_of(line: &str, byte: usize) -> u32 {
    let chars = line.get(..byte).map_or(0, |s| s.chars().count());
    u32::try_from(chars + 1).unwrap_or(u32::MAX)
}

/// Maximal runs of alphabetic characters with their byte offsets.
fn words(line: &str) -> impl Iterator<Item = (usize, &str)> {
    split_runs(line, char::is_alphabetic)
}

/// Maximal runs of alphanumeric characters (plus `,`/`.` inside numbers) with their offsets.
fn words_and_numbers(line: &str) -> impl Iterator<Item = (usize, &str)> {
    split_runs(line, |c| c.is_alphanumeric() || c == ',' || c == '.')
        .map(|(start, token)| (start, token.trim_end_matches([',', '.'])))
        .filter(|(_, token)| !token.is_empty())
}

fn split_runs(line: &str, keep: fn(char) -> bool) -> impl Iterator<Item = (usize, &str)> {
    let mut rest = line.char_indices().peekable();
    std::iter::from_fn(move || {
        while let Some(&(_, c)) = rest.peek() {
            if keep(c) {
                break;
            }
            rest.next();
        }
        let (start, _) = *rest.peek()?;
        let mut end = start;
        while let Some(&(i, c)) = rest.peek() {
            if !keep(c) {
                break;
            }
            end = i + c.len_utf8();
            rest.next();
        }
        Some((start, &line[start..end]))
    })
}

fn is_number(token: &str) -> bool {
    let mut parts = token.splitn(2, [',', '.']);
    let whole = parts.next().unwrap_or("");
    !whole.is_empty()
        && whole.bytes().all(|b| b.is_ascii_digit())
        && parts
            .next()
            .is_none_or(|frac| !frac.is_empty() && frac.bytes().all(|b| b.is_ascii_digit()))
}

/// Start of a number (`7`, `4,5`, `4.5`) that ends right before `slash` (spaces allowed), if it
/// is not itself part of a longer slash sequence such as a date.
fn number_before(bytes: &[u8], slash: usize) -> Option<usize> {
    let mut end = slash;
    while end > 0 && bytes[end - 1] == b' ' {
        end -= 1;
    }
    let mut start = end;
    while start > 0
        && (bytes[start - 1].is_ascii_digit() || matches!(bytes[start - 1], b',' | b'.'))
    {
        start -= 1;
    }
    while start < end && !bytes[start].is_ascii_digit() {
        start += 1;
    }
    if start == end || !bytes[end - 1].is_ascii_digit() {
        return None;
    }
    if start > 0 && (bytes[start - 1] == b'/' || bytes[start - 1].is_ascii_alphanumeric()) {
        return None;
    }
    Some(start)
}

/// The integer right after `from` (spaces allowed) and the offset after it, unless more digits,
/// a slash or a letter follow (a date, a path, a unit).
fn integer_after(bytes: &[u8], from: usize) -> Option<(u32, usize)> {
    let mut start = from;
    while start < bytes.len() && bytes[start] == b' ' {
        start += 1;
    }
    let mut end = start;
    while end < bytes.len() && bytes[end].is_ascii_digit() {
        end += 1;
    }
    if end == start {
        return None;
    }
    if end < bytes.len()
        && (bytes[end] == b'/'
            || bytes[end].is_ascii_alphanumeric()
            || bytes[end] == b'.' && end + 1 < bytes.len() && bytes[end + 1].is_ascii_digit())
    {
        return None;
    }
    let value = std::str::from_utf8(&bytes[start..end]).ok()?.parse().ok()?;
    Some((value, end))
}

impl PluginValidator for GermanProse {
    fn validate(
        &self,
        response: &str,
        _context: &Context<'_>,
    ) -> Result<Vec<PluginIssue>, PluginError> {
        Ok(self
            .check(response)
            .into_iter()
            .map(|finding| {
                let (message, hint) = finding.message_and_hint();
                PluginIssue::error(finding.code, message)
                    .with_hint(hint)
                    .at(finding.line, finding.column)
            })
            .collect())
    }
}

export_plugin!(PluginSpec {
    name: "german-prose",
    version: env!("CARGO_PKG_VERSION"),
    validators: &[ValidatorSpec {
        name: "german_prose",
        description:
            "German prose: no direct address (Sie/Ihr/Ihnen/Ihrem/Ihrer), no score notation.",
        build: |config| Ok(Box::new(GermanProse::from_config(config)?)),
    }],
});

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(text: &str) -> Vec<(&'static str, String, u32, u32)> {
        GermanProse::default()
            .check(text)
            .into_iter()
            .map(|f| (f.code, f.text, f.line, f.column))
            .collect()
    }

    #[test]
    fn formal_pronouns_are_found_as_whole_words_only() {
        assert_eq!(
            codes("Sie erhalten Ihre Unterlagen.\nWir senden Ihnen, Ihrem Team und Ihrer Firma"),
            vec![
                (DIRECT_ADDRESS, "Sie".into(), 1, 1),
                (DIRECT_ADDRESS, "Ihnen".into(), 2, 12),
                (DIRECT_ADDRESS, "Ihrem".into(), 2, 19),
                (DIRECT_ADDRESS, "Ihrer".into(), 2, 34),
            ]
        );
        // Case-sensitive and whole words: "sie", "ihr", "Siemens", "Ihre" pass.
        assert!(codes("sie und ihr Team bei Siemens, Ihre Wahl").is_empty());
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        assert_eq!(codes("Grüße an Sie")[0].3, 10);
    }

    #[test]
    fn score_notations_are_found() {
        let found = codes("Note: 8/10. Gesamt 4,5 / 5 und 3 von 5 Punkten ★★★☆☆");
        let texts: Vec<&str> = found.iter().map(|f| f.1.as_str()).collect();
        assert_eq!(texts, vec!["8/10", "4,5 / 5", "3 von 5", "★★★☆☆"]);
        assert!(found.iter().all(|f| f.0 == SCORE_NOTATION));
    }

    #[test]
    fn dates_paths_and_other_fractions_are_not_scores() {
        assert!(codes("Stand 1/10/2025, Pfad src/10, Anteil 2/3, 24/7 Betrieb, km/5h").is_empty());
        assert!(codes("Ein Stern ★ allein ist Deko.").is_empty());
    }

    #[test]
    fn config_can_switch_scores_off_and_rejects_unknown_keys() {
        let rules = GermanProse::from_config(&serde_json::json!({"check_scores": false})).unwrap();
        assert!(rules.check("8/10").is_empty());
        assert!(GermanProse::from_config(&serde_json::json!({"nope": 1})).is_err());
        assert!(GermanProse::from_config(&serde_json::json!([1])).is_err());
    }

    #[test]
    fn plugin_issues_carry_hint_and_location() {
        let issues = GermanProse::default()
            .validate("Danke.\nWir helfen Ihnen.", &Context::new("{}"))
            .unwrap();
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].code.as_str(), DIRECT_ADDRESS);
        assert_eq!(issues[0].line.into_option(), Some(2));
        assert_eq!(issues[0].column.into_option(), Some(12));
        assert!(issues[0].hint.is_some());
    }
}
