//! The `adr_structure` validator and the ADR finder it shares with `file_refs`.
//!
//! A response holds an ADR when it contains a YAML front matter block (between two `---`
//! lines) with an `adr_id` key — at the very start, after a preamble ("Here is the ADR:"), or
//! inside a ```` ```markdown ```` fence. CRLF line endings and a UTF-8 BOM are tolerated. A
//! response that merely mentions "ADR-038" is not an ADR, and the validator says nothing about
//! it (unless `required: true`).
//!
//! | code | when |
//! |---|---|
//! | `MISSING_YAML_HEADER` | the front matter is never closed; or `required: true` and the response holds no ADR |
//! | `INVALID_YAML` | the front matter is not a YAML mapping |
//! | `MISSING_ADR_FIELD` | a required field (default `adr_id`, `title`, `status`) is missing or empty |
//! | `MISSING_ADR_SECTION` | a required `##` section (default Kontext, Entscheidung, Akzeptanzkriterien, or an alias) is missing |
//! | `INSUFFICIENT_CRITERIA` | warning: fewer checkboxes than `min_criteria` (default 3) in the acceptance section |
//!
//! Early abort: once a streamed answer's front matter is closed (its closing `---` line ended
//! by a newline), nothing later can change it, so missing fields and invalid YAML are definite
//! then. Sections and criteria are judged on the whole answer only.
//!
//! ```
//! use enforce_documents::adr::AdrStructure;
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let adr = "Here is the ADR:\n---\nadr_id: 12\ntitle: Use Postgres\nstatus: Proposed\n---\n\
//!     \n## Context\nWe need a database.\n## Decision\nPostgres.\n\
//!     \n## Acceptance Criteria\n- [ ] migrations run\n";
//! let issues = block_on(AdrStructure::default().validate(adr, &Context::new())).unwrap();
//! assert_eq!(issues.len(), 1);
//! assert_eq!(issues[0].code, "INSUFFICIENT_CRITERIA");
//! assert!(!issues[0].is_error());
//! // Mentioning an ADR does not make a response one.
//! let chat = "As ADR-038 says, retries are capped.";
//! assert!(block_on(AdrStructure::default().validate(chat, &Context::new())).unwrap().is_empty());
//! ```

use enforce_core::{async_trait, Context, Issue, PartialCheck, Validation, Validator};
use enforce_validators::text::line_of_offset;
use enforce_validators::text::{fences, in_fences, line_end_incl, Fence};
use enforce_validators::BuildError;
use enforce_validators::FactoryInput;
use memchr::memmem;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::ops::Range;

/// Code: the ADR's front matter is not closed (or an ADR is required and absent).
pub const MISSING_YAML_HEADER: &str = "MISSING_YAML_HEADER";
/// Code: the front matter is not a YAML mapping.
pub const INVALID_YAML: &str = "INVALID_YAML";
/// Code: a required front matter field is missing or empty.
pub const MISSING_ADR_FIELD: &str = "MISSING_ADR_FIELD";
/// Code: a required `##` section is missing.
pub const MISSING_ADR_SECTION: &str = "MISSING_ADR_SECTION";
/// Code (warning): too few acceptance checkboxes.
pub const INSUFFICIENT_CRITERIA: &str = "INSUFFICIENT_CRITERIA";

/// Largest front matter parsed as YAML; larger blocks are reported as invalid.
pub const MAX_FRONT_MATTER_BYTES: usize = 256 * 1024;

/// The front matter of an ADR found in a response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FrontMatter {
    /// Offset of the opening `---` line.
    pub open: usize,
    /// 1-based line of the opening `---`.
    pub open_line: u32,
    /// Byte range of the YAML between the delimiters.
    pub yaml: Range<usize>,
    /// `false` when no closing `---` follows.
    pub closed: bool,
    /// Byte range of the document body after the closing `---`, up to the end of the
    /// enclosing fence (when the ADR sits in one) or of the response.
    pub body: Range<usize>,
}

impl FrontMatter {
    /// The YAML text of the front matter.
    pub fn yaml_text<'a>(&self, text: &'a str) -> &'a str {
        text.get(self.yaml.clone()).unwrap_or("")
    }

    /// A top-level scalar `key: value` of the front matter read by line scan (quotes
    /// stripped), without a YAML parse. `None` when absent.
    pub fn field_value<'a>(&self, text: &'a str, key: &str) -> Option<&'a str> {
        enforce_validators::text::lines_with_offsets(self.yaml_text(text)).find_map(|(_, line)| {
            let rest = line.strip_prefix(key)?;
            let value = rest.trim_start().strip_prefix(':')?;
            Some(value.trim().trim_matches(|c| c == '"' || c == '\''))
        })
    }
}

/// Largest front matter whose parse is remembered for the next validator.
const CACHED_FRONT_MATTER_BYTES: usize = 64 * 1024;

/// Parses front matter YAML. `adr_structure` and `file_refs` both read the same front matter
/// one after the other; the last successful parse on this thread is kept (keyed by the exact
/// text), so the second validator does not parse again.
pub(crate) fn parse_front_matter(
    yaml: &str,
) -> Result<std::sync::Arc<serde_yaml_ng::Value>, serde_yaml_ng::Error> {
    use std::cell::RefCell;
    use std::sync::Arc;
    thread_local! {
        static LAST: RefCell<Option<(String, Arc<serde_yaml_ng::Value>)>> = const { RefCell::new(None) };
    }
    let hit = LAST.with(|last| {
        last.borrow()
            .as_ref()
            .filter(|(text, _)| text == yaml)
            .map(|(_, value)| Arc::clone(value))
    });
    if let Some(value) = hit {
        return Ok(value);
    }
    let value = Arc::new(serde_yaml_ng::from_str::<serde_yaml_ng::Value>(yaml)?);
    if yaml.len() <= CACHED_FRONT_MATTER_BYTES {
        LAST.with(|last| *last.borrow_mut() = Some((yaml.to_string(), Arc::clone(&value))));
    }
    Ok(value)
}

/// `true` when the line starting at `start` is exactly `---` (trailing whitespace, a CR and,
/// on the first line, a BOM aside).
fn is_delimiter(text: &str, start: usize) -> bool {
    let bytes = text.as_bytes();
    let end = memchr::memchr(b'\n', &bytes[start..]).map_or(bytes.len(), |p| start + p);
    let mut line = text.get(start..end).unwrap_or("");
    if start == 0 {
        line = line.strip_prefix('\u{feff}').unwrap_or(line);
    }
    line.trim_end() == "---"
}

/// `true` when `block` has a line starting with `adr_id` followed by `:`.
fn has_adr_id(block: &str) -> bool {
    memmem::find_iter(block.as_bytes(), b"adr_id").any(|p| {
        (p == 0 || block.as_bytes()[p - 1] == b'\n')
            && block[p + 6..]
                .trim_start_matches([' ', '\t'])
                .starts_with(':')
    })
}

/// The fence (index) holding `offset`, if any.
fn fence_of(fences: &[Fence], offset: usize) -> Option<usize> {
    let idx = fences.partition_point(|f| f.block.end <= offset);
    fences.get(idx).filter(|f| f.contains(offset)).map(|_| idx)
}

/// Finds the first ADR front matter (a `---` block containing `adr_id`) in `text`.
pub fn find_adr(text: &str) -> Option<FrontMatter> {
    let bytes = text.as_bytes();
    let mut delims: Vec<usize> = memmem::find_iter(bytes, b"---")
        .map(|p| enforce_validators::text::line_start(bytes, p))
        .collect();
    delims.dedup();
    delims.retain(|&start| is_delimiter(text, start));
    if delims.is_empty() {
        return None;
    }
    let fences = fences(text);
    let contexts: Vec<Option<usize>> = delims.iter().map(|&d| fence_of(&fences, d)).collect();
    for (i, &open) in delims.iter().enumerate() {
        let context = contexts[i];
        let context_end = context.map_or(text.len(), |f| fences[f].content.end);
        let yaml_start = line_end_incl(bytes, open).min(context_end);
        let closer = delims
            .get(i + 1)
            .copied()
            .filter(|_| contexts[i + 1] == context);
        let yaml_end = closer.unwrap_or(context_end);
        let Some(block) = text.get(yaml_start..yaml_end) else {
            continue;
        };
        if !has_adr_id(block) {
            continue;
        }
        let body_start = closer.map_or(context_end, |c| line_end_incl(bytes, c).min(context_end));
        return Some(FrontMatter {
            open,
            open_line: line_of_offset(text, open),
            yaml: yaml_start..yaml_end,
            closed: closer.is_some(),
            body: body_start..context_end,
        });
    }
    None
}

/// Watches a growing text for the first ADR front matter to be closed for good: its closing
/// `---` line ended by a newline, so no later byte can change the block (nor make an earlier
/// block the ADR without leaving that one unclosed, which is an error of its own).
///
/// It runs [`find_adr`] only when the lines ended since the last call hold a `---`, so a check
/// costs about the new bytes until the front matter closes.
#[derive(Debug, Default)]
pub(crate) struct FrontMatterWatch {
    /// Bytes looked at.
    scanned: usize,
    /// Where the line not yet ended starts.
    line_start: usize,
}

impl FrontMatterWatch {
    /// The closed front matter of `prefix` (each call's prefix extends the last one's), once
    /// there is one.
    pub(crate) fn feed(&mut self, prefix: &str) -> Option<FrontMatter> {
        let bytes = prefix.as_bytes();
        let new_from = self.scanned.min(bytes.len());
        self.scanned = bytes.len();
        // Only lines ended by the new bytes can hold the closing delimiter.
        let last_newline = new_from + memchr::memrchr(b'\n', &bytes[new_from..])?;
        let ended = bytes.get(self.line_start..=last_newline)?;
        self.line_start = last_newline + 1;
        memmem::find(ended, b"---")?;
        let fm = find_adr(prefix).filter(|fm| fm.closed)?;
        let closing_line_ended = fm
            .body
            .start
            .checked_sub(1)
            .and_then(|i| bytes.get(i))
            .is_some_and(|&b| b == b'\n');
        closing_line_ended.then_some(fm)
    }
}

/// The partial check of [`AdrStructure`]: the front-matter fields, once it is closed.
struct AdrCheck<'a> {
    validator: &'a AdrStructure,
    watch: FrontMatterWatch,
    judged: Option<Vec<Issue>>,
}

#[async_trait]
impl PartialCheck for AdrCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        if self.judged.is_none() {
            if let Some(fm) = self.watch.feed(prefix) {
                let mut issues = Vec::new();
                self.validator.check_fields(prefix, &fm, &mut issues);
                self.judged = Some(issues);
            }
        }
        self.judged.clone().unwrap_or_default()
    }
}

/// A level-2 heading in an ADR body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Heading<'a> {
    /// The heading text, without `##`, numbering and trailing `#`s.
    pub title: &'a str,
    /// Offset of the heading line.
    pub start: usize,
}

/// The `##` headings of `body` (a range of `text`), skipping fenced code inside it.
pub fn headings<'a>(text: &'a str, body: Range<usize>, all_fences: &[Fence]) -> Vec<Heading<'a>> {
    let mut out = Vec::new();
    let Some(body_text) = text.get(body.clone()) else {
        return out;
    };
    // Fences strictly inside the body (the enclosing one, if any, is not "inside").
    let inner: Vec<Fence> = all_fences
        .iter()
        .filter(|f| f.block.start >= body.start && f.block.start < body.end)
        .cloned()
        .collect();
    for (offset, line) in enforce_validators::text::lines_with_offsets(body_text) {
        let Some(rest) = line.strip_prefix("##") else {
            continue;
        };
        if !rest.starts_with([' ', '\t']) {
            continue; // `###` or `##text`
        }
        let start = body.start + offset;
        if in_fences(&inner, start) {
            continue;
        }
        let title = rest
            .trim()
            .trim_end_matches('#')
            .trim()
            .trim_start_matches(|c: char| c.is_ascii_digit() || c == '.')
            .trim();
        out.push(Heading { title, start });
    }
    out
}

/// Checkbox lines (`- [ ]`, `- [x]`, `* [ ]`, `+ [X]`) in `section`.
pub fn count_checkboxes(section: &str) -> usize {
    enforce_validators::text::lines_with_offsets(section)
        .filter(|(_, line)| {
            let t = line.trim_start();
            let Some(rest) = t.strip_prefix(['-', '*', '+']) else {
                return false;
            };
            let rest = rest.trim_start_matches([' ', '\t']);
            ["[ ]", "[x]", "[X]"].iter().any(|b| rest.starts_with(b))
        })
        .count()
}

fn default_fields() -> Vec<String> {
    ["adr_id", "title", "status"].map(String::from).to_vec()
}

fn default_sections() -> Vec<String> {
    ["Kontext", "Entscheidung", "Akzeptanzkriterien"]
        .map(String::from)
        .to_vec()
}

fn default_aliases() -> BTreeMap<String, Vec<String>> {
    [
        ("Kontext", vec!["Context"]),
        ("Entscheidung", vec!["Decision"]),
        ("Akzeptanzkriterien", vec!["Acceptance Criteria"]),
        ("Konsequenzen", vec!["Consequences"]),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.into_iter().map(String::from).collect()))
    .collect()
}

fn default_criteria_section() -> String {
    "Akzeptanzkriterien".into()
}

fn default_min_criteria() -> usize {
    3
}

/// Options of the `adr_structure` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "AdrStructureOptions"))]
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct AdrConfig {
    /// Front matter fields every ADR must have.
    #[serde(default = "default_fields")]
    required_fields: Vec<String>,
    /// `##` sections every ADR must have.
    #[serde(default = "default_sections")]
    sections: Vec<String>,
    /// Section → other accepted titles; added to the default aliases.
    #[serde(default)]
    aliases: BTreeMap<String, Vec<String>>,
    /// The section whose checkboxes are counted.
    #[serde(default = "default_criteria_section")]
    criteria_section: String,
    /// Fewest checkboxes in the criteria section (fewer is a warning).
    #[serde(default = "default_min_criteria")]
    min_criteria: usize,
    /// Every response must hold an ADR.
    #[serde(default)]
    required: bool,
}

/// The `adr_structure` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct AdrStructure {
    name: String,
    required_fields: Vec<String>,
    sections: Vec<String>,
    aliases: BTreeMap<String, Vec<String>>,
    criteria_section: String,
    min_criteria: usize,
    required: bool,
}

impl Default for AdrStructure {
    /// Named `adr_structure`, with the default fields, sections, aliases and minimum.
    fn default() -> Self {
        AdrStructure {
            name: "adr_structure".into(),
            required_fields: default_fields(),
            sections: default_sections(),
            aliases: default_aliases(),
            criteria_section: default_criteria_section(),
            min_criteria: default_min_criteria(),
            required: false,
        }
    }
}

impl AdrStructure {
    /// The defaults, named `name`.
    pub fn named(name: impl Into<String>) -> Self {
        AdrStructure {
            name: name.into(),
            ..AdrStructure::default()
        }
    }

    /// The front-matter fields every ADR must have (default `adr_id`, `title`, `status`).
    pub fn required_fields<S: Into<String>>(mut self, fields: impl IntoIterator<Item = S>) -> Self {
        self.required_fields = fields.into_iter().map(Into::into).collect();
        self
    }

    /// The `##` sections every ADR must have.
    pub fn sections<S: Into<String>>(mut self, sections: impl IntoIterator<Item = S>) -> Self {
        self.sections = sections.into_iter().map(Into::into).collect();
        self
    }

    /// Other titles accepted for `section`, added to the built-in aliases.
    pub fn alias<S: Into<String>>(
        mut self,
        section: impl Into<String>,
        titles: impl IntoIterator<Item = S>,
    ) -> Self {
        self.aliases
            .entry(section.into())
            .or_default()
            .extend(titles.into_iter().map(Into::into));
        self
    }

    /// The section whose checkboxes are the acceptance criteria, and how many it needs (a
    /// warning below that).
    pub fn criteria(mut self, section: impl Into<String>, min: usize) -> Self {
        self.criteria_section = section.into();
        self.min_criteria = min;
        self
    }

    /// `true`: every response must hold an ADR (default: only responses that hold one are
    /// checked).
    pub fn required(mut self, required: bool) -> Self {
        self.required = required;
        self
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <AdrConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `required_fields`, `sections`, `aliases` (section →
    /// other accepted titles, added to the defaults), `criteria_section`, `min_criteria`,
    /// `required`.
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: AdrConfig = input.parse()?;
        for (i, s) in c.sections.iter().enumerate() {
            if s.trim().is_empty() {
                return Err(BuildError::at(
                    format!("sections[{i}]"),
                    "a section name is empty",
                ));
            }
        }
        let mut adr = AdrStructure::named(input.name)
            .required_fields(c.required_fields)
            .sections(c.sections)
            .criteria(c.criteria_section, c.min_criteria)
            .required(c.required);
        for (section, more) in c.aliases {
            adr = adr.alias(section, more);
        }
        Ok(adr)
    }

    /// `true` when `title` names `section` or one of its aliases.
    fn matches(&self, section: &str, title: &str) -> bool {
        title.eq_ignore_ascii_case(section)
            || title.to_lowercase() == section.to_lowercase()
            || self
                .aliases
                .get(section)
                .is_some_and(|a| a.iter().any(|a| a.to_lowercase() == title.to_lowercase()))
    }

    fn issue(&self, code: &str, message: String) -> Issue {
        Issue::error(&self.name, code, message)
    }

    fn check_fields(&self, text: &str, fm: &FrontMatter, issues: &mut Vec<Issue>) {
        let yaml = fm.yaml_text(text);
        if yaml.len() > MAX_FRONT_MATTER_BYTES {
            issues.push(
                self.issue(
                    INVALID_YAML,
                    format!(
                        "The front matter is larger than {} KiB.",
                        MAX_FRONT_MATTER_BYTES / 1024
                    ),
                )
                .at_line(fm.open_line),
            );
            return;
        }
        if let Some(offset) = enforce_validators::text::yaml_flow_depth_exceeded(
            yaml,
            enforce_validators::text::MAX_YAML_FLOW_DEPTH,
        ) {
            issues.push(
                self.issue(
                    INVALID_YAML,
                    "The front matter is nested too deeply.".into(),
                )
                .at_line(line_of_offset(text, fm.yaml.start + offset)),
            );
            return;
        }
        let value = match parse_front_matter(yaml) {
            Ok(v) => v,
            Err(e) => {
                let line = e
                    .location()
                    .map(|l| {
                        fm.open_line
                            .saturating_add(u32::try_from(l.line()).unwrap_or(0))
                    })
                    .unwrap_or(fm.open_line);
                issues.push(
                    self.issue(INVALID_YAML, format!("The front matter is not valid YAML: {e}."))
                        .with_hint("Write the front matter as plain `key: value` lines between two `---` lines.")
                        .at_line(line),
                );
                return;
            }
        };
        let Some(map) = value.as_mapping() else {
            issues.push(
                self.issue(
                    INVALID_YAML,
                    "The front matter is not a YAML mapping of `key: value` lines.".into(),
                )
                .at_line(fm.open_line),
            );
            return;
        };
        for field in &self.required_fields {
            let present = map.get(field.as_str()).is_some_and(|v| match v {
                serde_yaml_ng::Value::Null => false,
                serde_yaml_ng::Value::String(s) => !s.trim().is_empty(),
                _ => true,
            });
            if !present {
                issues.push(
                    self.issue(
                        MISSING_ADR_FIELD,
                        format!("The front matter has no '{field}'."),
                    )
                    .with_hint(format!("Add `{field}: ...` to the front matter."))
                    .at_line(fm.open_line),
                );
            }
        }
    }
}

#[async_trait]
impl Validator for AdrStructure {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let Some(fm) = find_adr(response) else {
            return Ok(if self.required {
                vec![self
                    .issue(MISSING_YAML_HEADER, "The response holds no ADR front matter.".into())
                    .with_hint("Start the ADR with a `---` block holding adr_id, title and status, closed by `---`.")]
            } else {
                Vec::new()
            });
        };
        let mut issues = Vec::new();
        if !fm.closed {
            issues.push(
                self.issue(
                    MISSING_YAML_HEADER,
                    "The ADR front matter is never closed.".into(),
                )
                .with_hint("Close the front matter with a `---` line before the first section.")
                .at_line(fm.open_line),
            );
            return Ok(issues);
        }
        self.check_fields(response, &fm, &mut issues);

        let all_fences = fences(response);
        let heads = headings(response, fm.body.clone(), &all_fences);
        for section in &self.sections {
            if !heads.iter().any(|h| self.matches(section, h.title)) {
                let alias_note = self
                    .aliases
                    .get(section)
                    .filter(|a| !a.is_empty())
                    .map(|a| format!(" (or {})", a.join(", ")))
                    .unwrap_or_default();
                issues.push(
                    self.issue(
                        MISSING_ADR_SECTION,
                        format!("The ADR has no '## {section}' section{alias_note}."),
                    )
                    .with_hint(format!("Add a `## {section}` section."))
                    .at_line(line_of_offset(response, fm.body.start.min(response.len()))),
                );
            }
        }
        if let Some(pos) = heads
            .iter()
            .position(|h| self.matches(&self.criteria_section, h.title))
        {
            let start = heads[pos].start;
            let end = heads.get(pos + 1).map_or(fm.body.end, |h| h.start);
            let count = count_checkboxes(response.get(start..end).unwrap_or(""));
            if count < self.min_criteria {
                issues.push(
                    Issue::warning(
                        &self.name,
                        INSUFFICIENT_CRITERIA,
                        format!(
                            "The '{}' section has {count} checkbox(es); at least {} are expected.",
                            heads[pos].title, self.min_criteria
                        ),
                    )
                    .with_hint("List each acceptance criterion as a `- [ ] ...` checkbox.")
                    .at_line(line_of_offset(response, start)),
                );
            }
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, _context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(AdrCheck {
            validator: self,
            watch: FrontMatterWatch::default(),
            judged: None,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;

    const GOOD: &str = "---\nadr_id: ADR-012\ntitle: Use Postgres\nstatus: Proposed\n---\n\n## Kontext\nText.\n\n## Entscheidung\nPostgres.\n\n## Akzeptanzkriterien\n- [ ] one\n- [x] two\n* [ ] three\n\n## Konsequenzen\n- [ ] not counted\n";

    fn codes(v: &AdrStructure, text: &str) -> Vec<String> {
        block_on(v.validate(text, &Context::new()))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn a_complete_adr_passes_in_every_wrapping() {
        let v = AdrStructure::default();
        assert!(codes(&v, GOOD).is_empty());
        assert!(codes(&v, &format!("Here is the ADR:\n\n{GOOD}")).is_empty());
        assert!(codes(
            &v,
            &format!("Draft:\n```markdown\n{GOOD}```\nSay if you want changes.")
        )
        .is_empty());
        assert!(codes(&v, &GOOD.replace('\n', "\r\n")).is_empty());
        assert!(codes(&v, &format!("\u{feff}{GOOD}")).is_empty());
    }

    #[test]
    fn aliases_count_as_sections() {
        let v = AdrStructure::default();
        let english = GOOD
            .replace("## Kontext", "## Context")
            .replace("## Entscheidung", "## 2. Decision")
            .replace("## Akzeptanzkriterien", "## Acceptance Criteria ##");
        assert!(codes(&v, &english).is_empty(), "{:?}", codes(&v, &english));
    }

    #[test]
    fn not_an_adr_is_ignored() {
        let v = AdrStructure::default();
        assert!(codes(&v, "We follow ADR-038 here.\n---\nsome: yaml\n---\n").is_empty());
        assert!(codes(&v, "").is_empty());
        let required = AdrStructure {
            required: true,
            ..AdrStructure::default()
        };
        assert_eq!(codes(&required, "ADR-038"), vec![MISSING_YAML_HEADER]);
    }

    #[test]
    fn missing_fields_sections_and_criteria() {
        let v = AdrStructure::default();
        let text = "---\nadr_id: 1\ntitle: \"\"\n---\n## Kontext\n## Akzeptanzkriterien\n- [ ] one\n## Entscheidung\nx\n";
        let issues = block_on(v.validate(text, &Context::new())).unwrap();
        let codes: Vec<_> = issues.iter().map(|i| i.code.as_str()).collect();
        assert_eq!(
            codes,
            vec![MISSING_ADR_FIELD, MISSING_ADR_FIELD, INSUFFICIENT_CRITERIA]
        );
        assert!(issues[0].message.contains("title"));
        assert!(issues[1].message.contains("status"));
        assert_eq!(issues[2].severity, enforce_core::Severity::Warning);
        assert_eq!(issues[2].line, Some(6));

        let no_decision = GOOD.replace("## Entscheidung", "### Entscheidung");
        let issues = block_on(v.validate(&no_decision, &Context::new())).unwrap();
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].code, MISSING_ADR_SECTION);
        assert!(issues[0].message.contains("Entscheidung"));
    }

    #[test]
    fn headings_inside_code_blocks_do_not_count() {
        let v = AdrStructure::default();
        let text = GOOD.replace("## Entscheidung\nPostgres.", "```\n## Entscheidung\n```");
        assert_eq!(codes(&v, &text), vec![MISSING_ADR_SECTION]);
    }

    #[test]
    fn broken_front_matter() {
        let v = AdrStructure::default();
        assert_eq!(
            codes(&v, "---\nadr_id: 1\ntitle: x\n## Kontext\n"),
            vec![MISSING_YAML_HEADER]
        );
        let bad = "Intro\n---\nadr_id: [1\ntitle: x\n---\n";
        let issues = block_on(v.validate(bad, &Context::new())).unwrap();
        assert_eq!(issues[0].code, INVALID_YAML);
        assert!(issues[0].line.unwrap() >= 2);
        // adr_id inside a non-mapping document
        assert_eq!(
            codes(&v, "---\nadr_id:\n  - x\n- y\n---\n")[0],
            INVALID_YAML
        );
    }

    #[test]
    fn nasty_front_matter_is_bounded() {
        let v = AdrStructure::default();
        let mut bomb = String::from("---\nadr_id: 1\na: &a [x, x, x, x, x, x, x, x, x]\n");
        for i in 0..9 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("l{}", i - 1)
            };
            bomb.push_str(&format!("l{i}: &l{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"));
        }
        bomb.push_str("---\n");
        let started = std::time::Instant::now();
        let issues = block_on(v.validate(&bomb, &Context::new())).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert_eq!(issues[0].code, INVALID_YAML, "{issues:?}");
        let deep = format!("---\nadr_id: 1\nx: {}\n---\n", "[".repeat(200_000));
        assert_eq!(codes(&v, &deep)[0], INVALID_YAML);
        let huge = format!(
            "---\nadr_id: 1\nx: \"{}\"\n---\n",
            "y".repeat(MAX_FRONT_MATTER_BYTES)
        );
        assert_eq!(codes(&v, &huge)[0], INVALID_YAML);
    }

    #[test]
    fn field_value_reads_scalars() {
        let fm = find_adr(GOOD).unwrap();
        assert_eq!(fm.field_value(GOOD, "status"), Some("Proposed"));
        assert_eq!(fm.field_value(GOOD, "nope"), None);
        assert!(count_checkboxes("- [ ] a\n  * [X] b\n+ [x] c\n- [] d\n-[ ] e\n") == 4);
    }

    #[test]
    fn builders_make_what_configuration_makes() {
        let text = "---\nadr_id: ADR-9\ntitle: t\n---\n## Background\n\n## Choice\n- [ ] a\n";
        let built = AdrStructure::named("adr")
            .required_fields(["adr_id", "title", "owner"])
            .sections(["Context", "Decision"])
            .alias("Context", ["Background"])
            .alias("Decision", ["Choice"])
            .criteria("Decision", 2)
            .required(true);
        let options = serde_json::json!({
            "required_fields": ["adr_id", "title", "owner"],
            "sections": ["Context", "Decision"],
            "aliases": {"Context": ["Background"], "Decision": ["Choice"]},
            "criteria_section": "Decision", "min_criteria": 2, "required": true});
        let configured =
            AdrStructure::from_config(&FactoryInput::new("adr", &options)).expect("valid options");
        let ctx = Context::new();
        let issues = block_on(built.validate(text, &ctx)).unwrap();
        assert_eq!(issues, block_on(configured.validate(text, &ctx)).unwrap());
        let codes: Vec<&str> = issues.iter().map(|i| i.code.as_str()).collect();
        assert_eq!(codes, ["MISSING_ADR_FIELD", "INSUFFICIENT_CRITERIA"]);
        assert_eq!(
            block_on(built.validate("no ADR here", &ctx)).unwrap()[0].code,
            MISSING_YAML_HEADER
        );
    }
}
