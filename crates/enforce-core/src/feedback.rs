//! Turns issues into the feedback a model gets on a re-ask: [`Feedback`].

use crate::Issue;
use serde::{Deserialize, Serialize};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A built-in feedback language.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Language {
    /// English.
    #[default]
    En,
    /// German.
    De,
}

/// The text pieces feedback is built from. Every field may be overridden (e.g. from a config
/// file); missing fields take the English defaults.
///
/// Placeholders: `{count}` in `intro` and `cut_intro`; `{code}`, `{message}`, `{validator}` in
/// `item`; `{line}` and `{column}` in `location`; `{hint}` in `hint`; `{excerpt}` in `excerpt`.
/// The location and hint parts are appended to an item only when the issue has a line or a
/// hint.
///
/// After an answer was cut short (early abort), `cut_intro` replaces `intro` and every item
/// quotes the offending excerpt: the model may never see its own partial answer (the Claude
/// CLI keeps an interrupted turn out of the session's history).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct FeedbackTemplate {
    /// Opening paragraph.
    pub intro: String,
    /// One line per error.
    pub item: String,
    /// Appended to an item whose issue has a line.
    pub location: String,
    /// Appended to an item whose issue has a hint.
    pub hint: String,
    /// Closing paragraph.
    pub outro: String,
    /// Opening paragraph after the answer was stopped while it was written.
    pub cut_intro: String,
    /// Appended to an item after a cut: the text around the error.
    pub excerpt: String,
}

impl Default for FeedbackTemplate {
    fn default() -> Self {
        FeedbackTemplate::for_language(Language::En)
    }
}

impl FeedbackTemplate {
    /// The built-in template for `language`.
    pub fn for_language(language: Language) -> Self {
        match language {
            Language::En => FeedbackTemplate {
                intro: "Your previous answer does not meet the required format. Fix these {count} error(s):".into(),
                item: "- [{code}] {message}".into(),
                location: " (line {line})".into(),
                hint: "\n  Hint: {hint}".into(),
                outro: "Answer again in full, with every error fixed. Do not mention this feedback.".into(),
                cut_intro: "Your previous answer was stopped while you were writing it, because it broke the required format. Fix these {count} error(s):".into(),
                excerpt: "\n  Stopped at: \"{excerpt}\"".into(),
            },
            Language::De => FeedbackTemplate {
                intro: "Deine vorherige Antwort erfüllt das geforderte Format nicht. Behebe diese {count} Fehler:".into(),
                item: "- [{code}] {message}".into(),
                location: " (Zeile {line})".into(),
                hint: "\n  Hinweis: {hint}".into(),
                outro: "Antworte erneut vollständig, mit allen Fehlern behoben. Erwähne dieses Feedback nicht.".into(),
                cut_intro: "Deine vorherige Antwort wurde beim Schreiben abgebrochen, weil sie das geforderte Format verletzt hat. Behebe diese {count} Fehler:".into(),
                excerpt: "\n  Abgebrochen bei: \"{excerpt}\"".into(),
            },
        }
    }
}

/// The words of one issue code in the feedback, replacing the validator's own (e.g. in the
/// feedback's language). Placeholders: `{message}` and `{hint}`, the validator's own text;
/// in `message` also `{answer}`, the first [`ANSWER_QUOTE_CHARS`] characters of the answer
/// that failed.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IssueText {
    /// The message instead of the validator's.
    #[serde(default)]
    pub message: Option<String>,
    /// The hint instead of the validator's.
    #[serde(default)]
    pub hint: Option<String>,
}

/// Most characters of a failed answer an [`IssueText`]'s `{answer}` quotes.
pub const ANSWER_QUOTE_CHARS: usize = 500;

/// Builds the feedback text for a re-ask: every error with its code, message, line and hint.
/// Warnings are left out: they never cause a re-ask.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Feedback {
    template: FeedbackTemplate,
    texts: BTreeMap<String, IssueText>,
}

impl Feedback {
    /// Feedback from a template.
    pub fn new(template: FeedbackTemplate) -> Self {
        Feedback {
            template,
            texts: BTreeMap::new(),
        }
    }

    /// This feedback with its own words for the issues of some codes.
    pub fn with_texts(mut self, texts: BTreeMap<String, IssueText>) -> Self {
        self.texts = texts;
        self
    }

    /// The words per issue code (see [`with_texts`](Self::with_texts)).
    pub fn texts(&self) -> &BTreeMap<String, IssueText> {
        &self.texts
    }

    /// Feedback in a built-in language.
    pub fn language(language: Language) -> Self {
        Self::new(FeedbackTemplate::for_language(language))
    }

    /// The template in use.
    pub fn template(&self) -> &FeedbackTemplate {
        &self.template
    }

    /// The feedback text for `issues` (errors only).
    pub fn build(&self, issues: &[Issue]) -> String {
        self.build_for_answer(issues, "")
    }

    /// [`build`](Self::build) for the failed `answer`, which an [`IssueText`] may quote.
    pub fn build_for_answer(&self, issues: &[Issue], answer: &str) -> String {
        let items: Vec<(&Issue, bool)> = issues
            .iter()
            .filter(|i| i.is_error())
            .map(|i| (i, false))
            .collect();
        self.render(&items, None, answer)
    }

    /// The feedback after an answer was cut short at `partial` (the text received): says it
    /// was stopped, and quotes for each error the excerpt of `partial` where it was found (its
    /// line when the issue has one, else the end of the text).
    pub fn build_cut(&self, issues: &[Issue], partial: &str) -> String {
        self.build_after_cut(issues, &[], partial)
    }

    /// [`build_cut`](Self::build_cut), followed by `missing`: the errors a full check of
    /// `partial` finds besides those that cut it (a required section or field not written
    /// yet), without excerpts, so the re-ask names everything the answer still lacks.
    pub fn build_after_cut(&self, cut: &[Issue], missing: &[Issue], partial: &str) -> String {
        let items: Vec<(&Issue, bool)> = cut
            .iter()
            .filter(|i| i.is_error())
            .map(|i| (i, true))
            .chain(missing.iter().filter(|i| i.is_error()).map(|i| (i, false)))
            .collect();
        self.render(&items, Some(partial), partial)
    }

    /// Renders `items` (each error, and whether to quote its excerpt of `partial`).
    fn render(&self, items: &[(&Issue, bool)], partial: Option<&str>, answer: &str) -> String {
        let t = &self.template;
        let mut out = String::new();
        let intro = if partial.is_some() {
            &t.cut_intro
        } else {
            &t.intro
        };
        out.push_str(&intro.replace("{count}", &items.len().to_string()));
        out.push('\n');
        for &(issue, quote) in items {
            let (message, hint) = self.words(issue, answer);
            out.push_str(
                &t.item
                    .replace("{code}", &issue.code)
                    .replace("{validator}", &issue.validator)
                    .replace("{message}", &message),
            );
            if let Some(line) = issue.line {
                let column = issue.column.map(|c| c.to_string()).unwrap_or_default();
                out.push_str(
                    &t.location
                        .replace("{line}", &line.to_string())
                        .replace("{column}", &column),
                );
            }
            if let Some(partial) = partial.filter(|_| quote) {
                out.push_str(&t.excerpt.replace("{excerpt}", &excerpt(partial, issue)));
            }
            if let Some(hint) = hint {
                out.push_str(&t.hint.replace("{hint}", &hint));
            }
            out.push('\n');
        }
        if !t.outro.is_empty() {
            let _ = write!(out, "\n{}", t.outro);
        }
        out
    }

    /// The message and hint `issue` is shown with: its code's [`IssueText`] where one is set
    /// (quoting `answer` for `{answer}`), else the validator's own.
    fn words<'i>(&self, issue: &'i Issue, answer: &str) -> (Cow<'i, str>, Option<Cow<'i, str>>) {
        let own_hint = issue.hint.as_deref();
        // Most codes have no words of their own: theirs are borrowed, not copied.
        let Some(text) = self.texts.get(&issue.code) else {
            return (Cow::Borrowed(&issue.message), own_hint.map(Cow::Borrowed));
        };
        let fill = |template: &str| {
            template
                .replace("{message}", &issue.message)
                .replace("{hint}", own_hint.unwrap_or_default())
        };
        let message = match &text.message {
            Some(template) => {
                let quoted: String = answer.chars().take(ANSWER_QUOTE_CHARS).collect();
                Cow::Owned(fill(template).replace("{answer}", &quoted))
            }
            None => Cow::Borrowed(issue.message.as_str()),
        };
        let hint = match &text.hint {
            Some(template) => Some(fill(template))
                .filter(|h| !h.is_empty())
                .map(Cow::Owned),
            None => own_hint.map(Cow::Borrowed),
        };
        (message, hint)
    }
}

/// Most characters an excerpt quotes.
const EXCERPT_CHARS: usize = 80;

/// The part of `partial` an issue is about: its line (around its column, when known), else
/// the end of the text, at most [`EXCERPT_CHARS`] characters on one line.
fn excerpt(partial: &str, issue: &Issue) -> String {
    let line = issue.line.and_then(|n| {
        partial
            .lines()
            .nth(usize::try_from(n).ok()?.checked_sub(1)?)
    });
    let chars: Vec<char> = match line {
        Some(line) => line.chars().collect(),
        None => partial.trim_end().chars().collect(),
    };
    let end = match (line, issue.column) {
        // Keep the column near the middle of the window.
        (Some(_), Some(column)) => usize::try_from(column)
            .unwrap_or(usize::MAX)
            .saturating_add(EXCERPT_CHARS / 2)
            .min(chars.len()),
        _ => chars.len(),
    };
    let start = end.saturating_sub(EXCERPT_CHARS);
    let mut out = String::new();
    if start > 0 {
        out.push('…');
    }
    out.extend(
        chars[start..end]
            .iter()
            .map(|&c| if c.is_control() { ' ' } else { c }),
    );
    if end < chars.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues() -> Vec<Issue> {
        vec![
            Issue::error(
                "step_marker",
                "MISSING_STEP_MARKER",
                "No step marker found.",
            )
            .with_hint("End with <!-- STEP: done -->."),
            Issue::error(
                "adr_structure",
                "MISSING_ADR_SECTION",
                "Section 'Kontext' is missing.",
            )
            .at_line(7),
            Issue::warning("adr_structure", "INSUFFICIENT_CRITERIA", "Only 1 checkbox."),
        ]
    }

    /// A code's own words replace the validator's message and hint, may keep them through
    /// `{message}` and `{hint}`, and may quote the start of the failed answer; other codes
    /// keep theirs.
    #[test]
    fn a_code_s_own_words_replace_the_validator_s() {
        let texts = [
            (
                "MISSING_STEP_MARKER".to_string(),
                IssueText {
                    message: Some("Kein Marker ({message}). Antwort war: {answer}".into()),
                    hint: Some("Hänge an: {hint}".into()),
                },
            ),
            (
                "MISSING_ADR_SECTION".to_string(),
                IssueText {
                    message: None,
                    hint: Some("Ergänze den Abschnitt.".into()),
                },
            ),
        ];
        let feedback = Feedback::language(Language::De).with_texts(texts.into_iter().collect());
        let answer = "x".repeat(ANSWER_QUOTE_CHARS + 10);
        let text = feedback.build_for_answer(&issues(), &answer);
        let quoted = "x".repeat(ANSWER_QUOTE_CHARS);
        assert!(
            text.contains(&format!(
                "- [MISSING_STEP_MARKER] Kein Marker (No step marker found.). Antwort war: {quoted}\n"
            )),
            "{text}"
        );
        assert!(
            !text.contains(&format!("{quoted}x")),
            "at most 500 characters: {text}"
        );
        assert!(
            text.contains("Hinweis: Hänge an: End with <!-- STEP: done -->."),
            "{text}"
        );
        assert!(
            text.contains("- [MISSING_ADR_SECTION] Section 'Kontext' is missing. (Zeile 7)\n  Hinweis: Ergänze den Abschnitt."),
            "{text}"
        );
        let plain = Feedback::language(Language::De).build(&issues());
        assert!(plain.contains("No step marker found."), "{plain}");
    }

    #[test]
    fn english_lists_every_error_with_code_message_hint_and_line() {
        let text = Feedback::default().build(&issues());
        assert!(text.contains("these 2 error(s)"), "{text}");
        assert!(text.contains("- [MISSING_STEP_MARKER] No step marker found.\n  Hint: End with <!-- STEP: done -->."), "{text}");
        assert!(
            text.contains("- [MISSING_ADR_SECTION] Section 'Kontext' is missing. (line 7)"),
            "{text}"
        );
        assert!(
            !text.contains("INSUFFICIENT_CRITERIA"),
            "warnings are not feedback: {text}"
        );
    }

    #[test]
    fn german_template_is_german() {
        let text = Feedback::language(Language::De).build(&issues());
        assert!(text.contains("Behebe diese 2 Fehler"), "{text}");
        assert!(text.contains("(Zeile 7)"), "{text}");
        assert!(text.contains("Hinweis: End with"), "{text}");
    }

    #[test]
    fn template_fields_can_be_overridden_partially() {
        let template: FeedbackTemplate =
            serde_json::from_str(r#"{"item":"* {validator}/{code}: {message}"}"#).unwrap();
        let text = Feedback::new(template).build(&issues());
        assert!(
            text.contains("* step_marker/MISSING_STEP_MARKER: No step marker found."),
            "{text}"
        );
        assert!(text.starts_with("Your previous answer"), "{text}");
    }

    #[test]
    fn cut_feedback_says_stopped_and_quotes_the_excerpt() {
        let issue = Issue::error("terms", "FORBIDDEN_TERM", "Forbidden term \"Acme\".").at(2, 9);
        let text = Feedback::default().build_cut(&[issue], "Hello.\nWe love Acme products and");
        assert!(
            text.starts_with("Your previous answer was stopped"),
            "{text}"
        );
        assert!(
            text.contains("- [FORBIDDEN_TERM] Forbidden term \"Acme\". (line 2)\n  Stopped at: \"We love Acme products and\""),
            "{text}"
        );
    }

    #[test]
    fn feedback_after_a_cut_also_lists_what_the_partial_answer_still_misses() {
        let cut = Issue::error("terms", "FORBIDDEN_TERM", "Forbidden term \"Acme\".").at(1, 9);
        let missing = Issue::error(
            "sections",
            "MISSING_SECTION",
            "Section 'Summary' is missing.",
        )
        .with_hint("Add a `## Summary` section.");
        let text = Feedback::default().build_after_cut(&[cut], &[missing], "We love Acme products");
        assert!(text.contains("these 2 error(s)"), "{text}");
        assert!(text.contains("[FORBIDDEN_TERM]"), "{text}");
        assert!(
            text.contains("- [MISSING_SECTION] Section 'Summary' is missing.\n  Hint: Add"),
            "the missing item is listed without an excerpt: {text}"
        );
        assert_eq!(text.matches("Stopped at").count(), 1, "{text}");
    }

    #[test]
    fn excerpt_without_a_line_is_the_end_of_the_text_on_one_line() {
        let long = format!("{}\n{{\"a\": tru x", "x".repeat(200));
        let quoted = excerpt(&long, &Issue::error("json", "INVALID_JSON", "bad"));
        assert!(
            quoted.starts_with('…') && quoted.ends_with("tru x"),
            "{quoted}"
        );
        assert_eq!(quoted.chars().count(), EXCERPT_CHARS + 1);
        assert!(!quoted.contains('\n'));
        let wide = excerpt(&"é".repeat(300), &Issue::error("x", "X", "m").at(1, 150));
        assert_eq!(wide.chars().filter(|&c| c == 'é').count(), EXCERPT_CHARS);
    }
}
