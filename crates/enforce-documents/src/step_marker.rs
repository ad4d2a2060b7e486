//! The `step_marker` validator: the response carries `<!-- STEP: x -->` with `x` in the allowed
//! set.
//!
//! A conversational workflow (ask what, ask why, collect constraints, generate, finalize) is
//! driven by the step the model declares in an HTML comment. Whitespace inside the comment is
//! optional (`<!--STEP:why-->` counts), the keyword and the step are compared
//! case-insensitively, the **last** marker outside fenced code blocks counts, and a marker shown
//! only inside a ```` ``` ```` block (an example) does not.
//!
//! | code | when |
//! |---|---|
//! | `MISSING_STEP_MARKER` | no marker outside code fences (or, with `require_at_end`, text after the last one) |
//! | `INVALID_STEP` | the last marker names a step outside the allowed set |
//!
//! Repair: infer the step from the content ([`infer_step`]) and append (or correct) the
//! marker; the inferred step is always a member of the allowed set.
//!
//! Early abort: none. The last marker counts and it may always still come, so nothing about a
//! marker is certain before the answer is complete.
//!
//! ```
//! use enforce_documents::step_marker::{extract_step, StepMarker};
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! assert_eq!(extract_step("Why do you need it?\n<!--STEP:Why-->").as_deref(), Some("why"));
//!
//! let v = StepMarker::default();
//! let issues = block_on(v.validate("What is the goal?", &Context::new())).unwrap();
//! assert_eq!(issues[0].code, "MISSING_STEP_MARKER");
//! let fixed = v.repair("What is the goal?", &Context::new(), &issues).unwrap();
//! assert_eq!(fixed, "What is the goal?\n\n<!-- STEP: what -->");
//! ```

use enforce_core::{async_trait, Context, Issue, Validation, Validator};
use enforce_validators::text::line_of_offset;
use enforce_validators::text::{fences, in_fences};
use enforce_validators::BuildError;
use enforce_validators::FactoryInput;
use memchr::memmem;
use serde::Deserialize;

/// Code: no step marker outside code fences.
pub const MISSING_STEP_MARKER: &str = "MISSING_STEP_MARKER";
/// Code: the last marker names a step that is not allowed.
pub const INVALID_STEP: &str = "INVALID_STEP";

/// The default allowed steps, in workflow order.
pub const DEFAULT_STEPS: &[&str] = &["what", "why", "constraints", "generate", "finalize", "done"];

/// Longest marker comment considered (`<!--` to `-->`); longer comments are not markers.
const MAX_MARKER_LEN: usize = 256;

/// One step marker found in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker<'a> {
    /// The step as written (trimmed, not lower-cased).
    pub step: &'a str,
    /// Byte range of the whole comment, `<!--` to `-->`.
    pub range: std::ops::Range<usize>,
    /// Byte range of the step within the text.
    pub step_range: std::ops::Range<usize>,
}

/// Parses the comment starting at `start` (which holds `<!--`) as a step marker.
fn parse_marker(text: &str, start: usize) -> Option<Marker<'_>> {
    let bytes = text.as_bytes();
    let body_start = start + 4;
    let window_end = (start + MAX_MARKER_LEN).min(bytes.len());
    let close = memmem::find(&bytes[body_start..window_end], b"-->")? + body_start;
    let body = text.get(body_start..close)?;
    let lead = body.len() - body.trim_start().len();
    let rest = &body[lead..];
    if rest.len() < 4 || !rest.as_bytes()[..4].eq_ignore_ascii_case(b"step") {
        return None;
    }
    let after_kw = &rest[4..];
    let ws = after_kw.len() - after_kw.trim_start().len();
    let after_ws = &after_kw[ws..];
    let value = after_ws.strip_prefix(':')?;
    let value_lead = value.len() - value.trim_start().len();
    let step = value.trim();
    let step_start = close - value.len() + value_lead;
    Some(Marker {
        step,
        range: start..close + 3,
        step_range: step_start..step_start + step.len(),
    })
}

/// The last step marker of `text` outside fenced code blocks.
pub fn find_last_marker(text: &str) -> Option<Marker<'_>> {
    let bytes = text.as_bytes();
    // Markers are rare and usually at the end: search backwards and stop at the first one that
    // is a real marker outside fences. Fences are only computed when a candidate exists.
    let mut fence_list = None;
    let finder = memmem::FinderRev::new(b"<!--");
    let mut end = bytes.len();
    while let Some(pos) = finder.rfind(&bytes[..end]) {
        if let Some(marker) = parse_marker(text, pos) {
            let fs = fence_list.get_or_insert_with(|| fences(text));
            if !in_fences(fs, pos) {
                return Some(marker);
            }
        }
        end = pos;
    }
    None
}

/// The step of the last marker outside code fences, trimmed and lower-cased; `None` without a
/// marker. The step is returned even when it is not in any allowed set: the proxy records what
/// the model declared.
pub fn extract_step(text: &str) -> Option<String> {
    find_last_marker(text)
        .map(|m| m.step.to_lowercase())
        .filter(|s| !s.is_empty())
}

/// Options of the `step_marker` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "StepMarkerOptions"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct StepMarkerConfig {
    /// The allowed steps, one word each (default what, why, constraints, generate, finalize,
    /// done).
    #[serde(default)]
    #[cfg_attr(feature = "config-schema", schemars(length(min = 1)))]
    allowed: Option<Vec<String>>,
    /// The marker must end the response.
    #[serde(default)]
    require_at_end: bool,
}

/// The `step_marker` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct StepMarker {
    name: String,
    allowed: Vec<String>,
    require_at_end: bool,
}

impl Default for StepMarker {
    /// Named `step_marker`, the default steps, marker anywhere.
    fn default() -> Self {
        StepMarker {
            name: "step_marker".into(),
            allowed: DEFAULT_STEPS.iter().map(|s| s.to_string()).collect(),
            require_at_end: false,
        }
    }
}

impl StepMarker {
    /// A validator named `name` with the given allowed steps (compared case-insensitively).
    /// Fails when `allowed` is empty: no response could pass and no repair could succeed.
    pub fn new(
        name: impl Into<String>,
        allowed: impl IntoIterator<Item = impl Into<String>>,
    ) -> Result<Self, BuildError> {
        let mut steps: Vec<String> = Vec::new();
        for (i, s) in allowed.into_iter().enumerate() {
            let s: String = s.into();
            let s = s.trim().to_lowercase();
            if s.is_empty() || s.chars().any(char::is_whitespace) || s.contains("--") {
                return Err(BuildError::at(
                    format!("allowed[{i}]"),
                    "a step is one word without whitespace or '--'",
                ));
            }
            if !steps.contains(&s) {
                steps.push(s);
            }
        }
        if steps.is_empty() {
            return Err(BuildError::at(
                "allowed",
                "at least one step must be allowed",
            ));
        }
        Ok(StepMarker {
            name: name.into(),
            allowed: steps,
            require_at_end: false,
        })
    }

    /// Requires the marker to be the last thing in the response (whitespace aside).
    pub fn require_at_end(mut self, yes: bool) -> Self {
        self.require_at_end = yes;
        self
    }

    /// The allowed steps, lower-cased.
    pub fn allowed(&self) -> &[String] {
        &self.allowed
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <StepMarkerConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `allowed` (list of steps), `require_at_end` (bool).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let config: StepMarkerConfig = input.parse()?;
        let v = match config.allowed {
            Some(allowed) => StepMarker::new(input.name, allowed)?,
            None => StepMarker {
                name: input.name.to_string(),
                ..StepMarker::default()
            },
        };
        Ok(v.require_at_end(config.require_at_end))
    }

    fn is_allowed(&self, step: &str) -> bool {
        self.allowed.iter().any(|a| a.eq_ignore_ascii_case(step))
    }

    fn allowed_list(&self) -> String {
        self.allowed.join(", ")
    }

    fn hint(&self, step: &str) -> String {
        format!(
            "End the answer with <!-- STEP: {step} --> (allowed steps: {}).",
            self.allowed_list()
        )
    }
}

/// Guesses the workflow step from a response's content, preferring the first candidate that
/// is in `allowed`; always returns a member of `allowed` (its first member as a last resort,
/// `done` when `allowed` is empty).
///
/// The guesses, in order: an ADR with front matter that is finalised (its status says
/// accepted/final, or the text says finalised) → `finalize`; an ADR with front matter →
/// `generate`; then the seed's rules on the plain text: "ADR-" with "erstellt" or a YAML fence →
/// `generate`, "ADR-" with "finalisiert" → `finalize`; a "?" within the last
/// [`QUESTION_WINDOW`] characters → `what`; talk about constraints (Rahmenbedingungen) →
/// `constraints`; otherwise `done`.
pub fn infer_step(text: &str, allowed: &[String]) -> String {
    let lower = text.to_lowercase();
    let adr = crate::adr::find_adr(text);
    let mut guesses: Vec<&str> = Vec::new();
    if let Some(fm) = &adr {
        let status = fm
            .field_value(text, "status")
            .unwrap_or_default()
            .to_lowercase();
        let final_status = [
            "accepted",
            "final",
            "finalized",
            "finalised",
            "approved",
            "akzeptiert",
        ]
        .iter()
        .any(|s| status.contains(s));
        if final_status
            || ["finalized", "finalised", "finalisiert"]
                .iter()
                .any(|w| lower.contains(w))
        {
            guesses.push("finalize");
        }
        guesses.push("generate");
    }
    if text.contains("ADR-") {
        if lower.contains("erstellt") || lower.contains("```yaml") {
            guesses.push("generate");
        }
        if lower.contains("finalisiert") {
            guesses.push("finalize");
        }
    }
    if asks_at_the_end(strip_markers(text)) {
        guesses.push("what");
    }
    if [
        "constraint",
        "einschränkung",
        "randbedingung",
        "rahmenbedingung",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        guesses.push("constraints");
    }
    guesses.push("done");
    for guess in guesses {
        if allowed.iter().any(|a| a.eq_ignore_ascii_case(guess)) {
            return guess.to_string();
        }
    }
    allowed
        .first()
        .cloned()
        .unwrap_or_else(|| "done".to_string())
}

/// How far from the end a question mark still makes the answer a question: a closing
/// question is often followed by a sentence ("…? Tell me when you are ready.").
pub const QUESTION_WINDOW: usize = 300;

/// `true` when a "?" stands within the last [`QUESTION_WINDOW`] characters of `text`.
fn asks_at_the_end(text: &str) -> bool {
    text.trim_end()
        .chars()
        .rev()
        .take(QUESTION_WINDOW)
        .any(|c| c == '?')
}

/// `text` without its trailing step markers (so "...?\n<!-- STEP: x -->" still ends in '?').
fn strip_markers(text: &str) -> &str {
    let mut t = text.trim_end();
    while let Some(m) = find_last_marker(t) {
        if t[m.range.end..].trim().is_empty() {
            t = t[..m.range.start].trim_end();
        } else {
            break;
        }
    }
    t
}

#[async_trait]
impl Validator for StepMarker {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let Some(marker) = find_last_marker(response) else {
            let hint = self.hint(&infer_step(response, &self.allowed));
            return Ok(vec![Issue::error(
                &self.name,
                MISSING_STEP_MARKER,
                "The response has no step marker.",
            )
            .with_hint(hint)]);
        };
        // The line is only counted when there is an issue to place: passing costs no scan.
        let line = || line_of_offset(response, marker.range.start);
        let mut issues = Vec::new();
        if !self.is_allowed(marker.step) {
            let shown: String = marker.step.chars().take(40).collect();
            issues.push(
                Issue::error(
                    &self.name,
                    INVALID_STEP,
                    format!("The step marker names '{shown}', which is not an allowed step."),
                )
                .with_hint(self.hint(&infer_step(response, &self.allowed)))
                .at(
                    line(),
                    enforce_validators::text::column_of(response, marker.step_range.start),
                ),
            );
        }
        if self.require_at_end && !response[marker.range.end..].trim().is_empty() {
            issues.push(
                Issue::error(
                    &self.name,
                    MISSING_STEP_MARKER,
                    "The step marker is not at the end of the response.",
                )
                .with_hint("Put the step marker on the last line, after everything else.")
                .at_line(line()),
            );
        }
        Ok(issues)
    }

    /// Every issue of this validator: the repair always leaves one allowed marker at the end.
    fn repair_fixes(&self, issue: &Issue) -> bool {
        issue.code == MISSING_STEP_MARKER || issue.code == INVALID_STEP
    }

    fn repair(&self, response: &str, _context: &Context, issues: &[Issue]) -> Option<String> {
        if issues.is_empty() {
            return None;
        }
        let marker = find_last_marker(response);
        let step = match &marker {
            Some(m) if self.is_allowed(m.step) => m.step.to_lowercase(),
            _ => infer_step(response, &self.allowed),
        };
        let new_marker = format!("<!-- STEP: {step} -->");
        let mut out = String::with_capacity(response.len() + new_marker.len() + 2);
        match marker {
            // A wrong or misplaced marker is removed; one correct marker goes at the end.
            Some(m) if !self.is_allowed(m.step) || self.require_at_end => {
                let before = &response[..m.range.start];
                let after = &response[m.range.end..];
                if before.trim().is_empty() {
                    out.push_str(after.trim());
                } else {
                    out.push_str(before);
                    out.push_str(after);
                    let kept = out.trim_end().len();
                    out.truncate(kept);
                }
            }
            _ => out.push_str(response.trim_end()),
        }
        // A marker appended inside an unclosed code fence would not count: close it first.
        if let Some(close) = closing_fence(&out) {
            out.push('\n');
            out.push_str(&close);
        }
        if !out.is_empty() {
            out.push_str("\n\n");
        }
        out.push_str(&new_marker);
        Some(out)
    }
}

/// When `text` ends inside an unclosed code fence, the fence line that closes it.
fn closing_fence(text: &str) -> Option<String> {
    let fence = fences(text).into_iter().last().filter(|f| !f.closed)?;
    let line = text
        .get(fence.block.start..)?
        .trim_start_matches([' ', '\t']);
    let ch = line.chars().next()?;
    let run = line.chars().take_while(|&c| c == ch).count();
    Some(ch.to_string().repeat(run))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;

    fn codes(v: &StepMarker, text: &str) -> Vec<String> {
        block_on(v.validate(text, &Context::new()))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn accepts_markers_with_or_without_whitespace_any_case() {
        let v = StepMarker::default();
        for text in [
            "Hi\n<!-- STEP: what -->",
            "<!--STEP:why-->",
            "x <!--   step :  Constraints   --> y",
            "<!-- Step: DONE -->\n",
        ] {
            assert!(codes(&v, text).is_empty(), "{text}");
        }
        assert_eq!(extract_step("<!--STEP:why-->").as_deref(), Some("why"));
        assert_eq!(
            extract_step("a <!-- STEP: Generate -->").as_deref(),
            Some("generate")
        );
    }

    #[test]
    fn missing_and_invalid_markers() {
        let v = StepMarker::default();
        assert_eq!(codes(&v, "no marker here"), vec![MISSING_STEP_MARKER]);
        assert_eq!(codes(&v, "<!-- a comment -->"), vec![MISSING_STEP_MARKER]);
        assert_eq!(codes(&v, ""), vec![MISSING_STEP_MARKER]);
        let issues = block_on(v.validate("line\n<!-- STEP: dance -->", &Context::new())).unwrap();
        assert_eq!(issues[0].code, INVALID_STEP);
        assert_eq!(issues[0].line, Some(2));
        assert_eq!(issues[0].column, Some(12));
        assert_eq!(codes(&v, "<!-- STEP: -->"), vec![INVALID_STEP]);
        assert_eq!(extract_step("<!-- STEP: -->"), None);
    }

    #[test]
    fn last_marker_outside_fences_counts() {
        let v = StepMarker::default();
        let text = "<!-- STEP: what -->\nExample:\n```\n<!-- STEP: bogus -->\n```\n";
        assert!(codes(&v, text).is_empty());
        assert_eq!(extract_step(text).as_deref(), Some("what"));
        let only_fenced = "Use this:\n```html\n<!-- STEP: why -->\n```";
        assert_eq!(codes(&v, only_fenced), vec![MISSING_STEP_MARKER]);
        assert_eq!(extract_step(only_fenced), None);
        let last_wins = "<!-- STEP: what -->\n<!-- STEP: nope -->";
        assert_eq!(codes(&v, last_wins), vec![INVALID_STEP]);
        // An unclosed fence swallows the rest.
        assert_eq!(
            codes(&v, "```\n<!-- STEP: done -->"),
            vec![MISSING_STEP_MARKER]
        );
    }

    #[test]
    fn require_at_end() {
        let v = StepMarker::default().require_at_end(true);
        assert!(codes(&v, "text\n<!-- STEP: done -->\n\n").is_empty());
        assert_eq!(
            codes(&v, "<!-- STEP: done -->\nmore"),
            vec![MISSING_STEP_MARKER]
        );
        let fixed = v
            .repair(
                "<!-- STEP: done -->\nmore",
                &Context::new(),
                &[Issue::error("s", "X", "m")],
            )
            .unwrap();
        assert_eq!(fixed, "more\n\n<!-- STEP: done -->");
        assert!(codes(&v, &fixed).is_empty());
    }

    #[test]
    fn repair_infers_a_step_from_the_content() {
        let v = StepMarker::default();
        let ctx = Context::new();
        let issue = [Issue::error("step_marker", MISSING_STEP_MARKER, "m")];
        let adr = "Here is the ADR:\n---\nadr_id: 7\ntitle: T\nstatus: Proposed\n---\n## Kontext\n";
        assert!(v
            .repair(adr, &ctx, &issue)
            .unwrap()
            .ends_with("<!-- STEP: generate -->"));
        let final_adr = adr.replace("Proposed", "Accepted");
        assert!(v
            .repair(&final_adr, &ctx, &issue)
            .unwrap()
            .ends_with("<!-- STEP: finalize -->"));
        assert!(v
            .repair("Which database?", &ctx, &issue)
            .unwrap()
            .ends_with("<!-- STEP: what -->"));
        assert!(v
            .repair("Noted the constraints: budget.", &ctx, &issue)
            .unwrap()
            .ends_with("<!-- STEP: constraints -->"));
        assert!(v
            .repair("All set.", &ctx, &issue)
            .unwrap()
            .ends_with("<!-- STEP: done -->"));
        // An invalid marker is replaced, not duplicated.
        let fixed = v
            .repair(
                "Which one?\n<!-- STEP: dance -->",
                &ctx,
                &[Issue::error("s", INVALID_STEP, "m")],
            )
            .unwrap();
        assert_eq!(fixed, "Which one?\n\n<!-- STEP: what -->");
        assert!(codes(&v, &fixed).is_empty());
    }

    /// The seed's own heuristic on plain text: an ADR named "ADR-" that was created (or
    /// shows a YAML fence) is `generate`, one that was finalised `finalize`, a question
    /// followed by a closing sentence `what`, Rahmenbedingungen `constraints`.
    #[test]
    fn the_seed_s_step_rules_on_plain_text() {
        let all: Vec<String> = DEFAULT_STEPS.iter().map(|s| s.to_string()).collect();
        let step = |text: &str| infer_step(text, &all);
        assert_eq!(step("ADR-012 erstellt."), "generate");
        assert_eq!(
            step("Hier ist ADR-012:\n```yaml\nadr_id: 12\n```"),
            "generate"
        );
        assert_eq!(step("ADR-012 ist finalisiert."), "finalize");
        assert_eq!(
            step("Welche Datenbank nutzt ihr? Sag mir Bescheid, wenn du so weit bist."),
            "what"
        );
        let far = format!("Welche Datenbank?{}", " Danach geht es weiter.".repeat(20));
        assert_eq!(step(&far), "done", "a question far from the end is not one");
        assert_eq!(step("Die Rahmenbedingungen sind klar."), "constraints");
        assert_eq!(
            step("Erstellt ohne Bezug."),
            "done",
            "no ADR- without the name"
        );
    }

    #[test]
    fn inferred_step_is_always_allowed() {
        let v = StepMarker::new("s", ["intake", "review"]).unwrap();
        let fixed = v
            .repair(
                "Which one?",
                &Context::new(),
                &[Issue::error("s", MISSING_STEP_MARKER, "m")],
            )
            .unwrap();
        assert!(fixed.ends_with("<!-- STEP: intake -->"), "{fixed}");
        assert!(codes(&v, &fixed).is_empty());
        assert!(StepMarker::new("s", Vec::<String>::new()).is_err());
        assert!(StepMarker::new("s", ["two words"]).is_err());
    }

    #[test]
    fn nasty_inputs() {
        let v = StepMarker::default();
        let many = "<!--".repeat(100_000);
        assert_eq!(codes(&v, &many), vec![MISSING_STEP_MARKER]);
        let unterminated = format!("<!-- STEP: {}", "x".repeat(1000));
        assert_eq!(codes(&v, &unterminated), vec![MISSING_STEP_MARKER]);
        assert_eq!(codes(&v, "<!-- STEP: ä -->"), vec![INVALID_STEP]);
        assert!(codes(&v, "\u{feff}<!-- STEP: done -->").is_empty());
        let big = format!("{}\n<!-- STEP: done -->", "word ".repeat(2_000_000));
        assert!(codes(&v, &big).is_empty());
        // A multi-byte character right after "<!--" must not split a char.
        assert_eq!(codes(&v, "<!--ü-->"), vec![MISSING_STEP_MARKER]);
        assert_eq!(codes(&v, "<!--stepü: x-->"), vec![MISSING_STEP_MARKER]);
    }
}
