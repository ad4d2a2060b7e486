//! The `pattern` validator: forbidden and required regular expressions, each with its own code,
//! message, hint, severity, repairable flag and optional replacement.
//!
//! ```yaml
//! no_scores:
//!   type: pattern
//!   forbidden:
//!     - regex: '\d+\s*%'
//!       code: NO_NUMERIC_SCORES
//!       message: "Percentage '{match}' found."
//!       hint: Describe the result in words.
//!     - regex: '(?i)score[:\s]*\d+'
//!       code: NO_NUMERIC_SCORES
//!       replacement: ""            # repair: delete the match
//!   required:
//!     - regex: '^# '
//!       code: MISSING_TITLE
//!       severity: warning
//! ```
//!
//! Early abort: while an answer streams, a forbidden rule (severity error, no `replacement`)
//! cuts it once a match ends before the end of the text received, so that no later byte can
//! undo it (a `\b` or `$` at its end is settled). A rule whose regex bounds the length of a
//! match (no `+`, `*`, `{n,}`) is searched again only over the new bytes and that length
//! before them; an unbounded one over the whole text received, O(text) per check.
//!
//! Defaults: code `FORBIDDEN_PATTERN` / `MISSING_PATTERN`, severity `error`, repairable. Each
//! forbidden rule reports up to `max_reports` matches (default 10), each with line and column.
//! Regexes use the [`regex`] crate's syntax (linear time: no backtracking blow-ups); their
//! compiled size is capped, and a bad regex is a configuration error naming the key.
//!
//! ```
//! use enforce_validators::FactoryInput;
//! use enforce_validators::pattern::Pattern;
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let spec = serde_json::json!({
//!     "forbidden": [{"regex": "\\bL[1-4]\\b", "code": "NO_LEVELS", "replacement": "a level"}]});
//! let v = Pattern::from_config(&FactoryInput::new("levels", &spec)).unwrap();
//! let issues = block_on(v.validate("Reached L3 in May.", &Context::new())).unwrap();
//! assert_eq!((issues[0].code.as_str(), issues[0].column), ("NO_LEVELS", Some(9)));
//! assert_eq!(v.repair("Reached L3 in May.", &Context::new(), &issues).unwrap(), "Reached a level in May.");
//! ```

use crate::build::FactoryInput;
use crate::error::BuildError;
use crate::partial::{replacement_fixes, Forbidden, ForbiddenCheck};
use crate::text::{column_of, LineCounter};
use enforce_core::{async_trait, Context, Issue, PartialCheck, Severity, Validation, Validator};
use regex::{Regex, RegexBuilder};
use serde::Deserialize;

/// Default code of a forbidden rule.
pub const FORBIDDEN_PATTERN: &str = "FORBIDDEN_PATTERN";
/// Default code of a required rule.
pub const MISSING_PATTERN: &str = "MISSING_PATTERN";

/// Cap on a compiled regex's size (bytes), so a configuration cannot exhaust memory.
pub const REGEX_SIZE_LIMIT: usize = 4 * 1024 * 1024;

/// Compiles a configured regex with the size cap.
pub fn compile(pattern: &str, case_insensitive: bool) -> Result<Regex, String> {
    RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(REGEX_SIZE_LIMIT)
        .dfa_size_limit(REGEX_SIZE_LIMIT)
        .build()
        .map_err(|e| format!("invalid regex: {e}"))
}

fn default_true() -> bool {
    true
}

fn default_max_reports() -> usize {
    10
}

/// One rule of a `pattern` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "PatternRule"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleConfig {
    /// Regular expression (Rust `regex` syntax).
    regex: String,
    /// Issue code (default `FORBIDDEN_PATTERN` / `MISSING_PATTERN`).
    code: Option<String>,
    /// Issue message; `{match}` is the matched text.
    message: Option<String>,
    /// Hint for the model.
    hint: Option<String>,
    /// `error` (default) or `warning`.
    #[serde(default)]
    severity: Option<Severity>,
    /// Whether a re-ask may fix it (`false`: the asking stops at once).
    #[serde(default = "default_true")]
    repairable: bool,
    /// Forbidden rules: what the repair puts in place of a match.
    replacement: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    case_insensitive: bool,
}

/// Options of the `pattern` validator: at least one forbidden or required rule.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "PatternOptions",
        extend("anyOf" = [
            {"required": ["forbidden"], "properties": {"forbidden": {"minItems": 1}}},
            {"required": ["required"], "properties": {"required": {"minItems": 1}}}
        ])
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PatternConfig {
    /// Regexes the response must not match.
    #[serde(default)]
    forbidden: Vec<RuleConfig>,
    /// Regexes the response must match.
    #[serde(default)]
    required: Vec<RuleConfig>,
    /// Matches reported per forbidden rule (default 10).
    #[serde(default = "default_max_reports")]
    max_reports: usize,
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    regex: Regex,
    code: String,
    message: Option<String>,
    hint: Option<String>,
    severity: Severity,
    repairable: bool,
    replacement: Option<String>,
}

impl Rule {
    /// A rule with `code`, error severity, repairable, no message, hint or replacement.
    pub fn new(pattern: &str, code: impl Into<String>) -> Result<Self, BuildError> {
        Rule::compiled(pattern, false, code.into())
    }

    /// [`new`](Self::new), matching regardless of case.
    pub fn new_case_insensitive(
        pattern: &str,
        code: impl Into<String>,
    ) -> Result<Self, BuildError> {
        Rule::compiled(pattern, true, code.into())
    }

    fn compiled(pattern: &str, case_insensitive: bool, code: String) -> Result<Self, BuildError> {
        Ok(Rule {
            regex: compile(pattern, case_insensitive).map_err(|m| BuildError::at("regex", m))?,
            code,
            message: None,
            hint: None,
            severity: Severity::Error,
            repairable: true,
            replacement: None,
        })
    }

    /// The issue message; `{match}` is the matched text (forbidden rules).
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The hint for the model.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The severity of its issues (default `error`).
    pub fn severity(mut self, severity: Severity) -> Self {
        self.severity = severity;
        self
    }

    /// Whether a re-ask may fix it (default `true`; `false`: the asking stops at once).
    pub fn repairable(mut self, repairable: bool) -> Self {
        self.repairable = repairable;
        self
    }

    /// For a forbidden rule: what the repair puts in place of each match.
    pub fn replacement(mut self, replacement: impl Into<String>) -> Self {
        self.replacement = Some(replacement.into());
        self
    }

    fn from_config(c: RuleConfig, default_code: &str, key: &str) -> Result<Self, BuildError> {
        let regex = compile(&c.regex, c.case_insensitive)
            .map_err(|m| BuildError::at(format!("{key}.regex"), m))?;
        if c.code.as_deref().is_some_and(|s| s.trim().is_empty()) {
            return Err(BuildError::at(
                format!("{key}.code"),
                "a code cannot be empty",
            ));
        }
        Ok(Rule {
            regex,
            code: c.code.unwrap_or_else(|| default_code.to_string()),
            message: c.message,
            hint: c.hint,
            severity: c.severity.unwrap_or(Severity::Error),
            repairable: c.repairable,
            replacement: c.replacement,
        })
    }

    fn issue(&self, validator: &str, message: String) -> Issue {
        let mut issue = Issue::error(validator, self.code.clone(), message)
            .with_severity(self.severity)
            .with_repairable(self.repairable);
        if let Some(h) = &self.hint {
            issue = issue.with_hint(h.clone());
        }
        issue
    }
}

/// The `pattern` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Pattern {
    name: String,
    forbidden: Vec<Rule>,
    required: Vec<Rule>,
    max_reports: usize,
}

impl Pattern {
    /// A validator named `name` with the given rules.
    pub fn new(name: impl Into<String>, forbidden: Vec<Rule>, required: Vec<Rule>) -> Self {
        Pattern {
            name: name.into(),
            forbidden,
            required,
            max_reports: default_max_reports(),
        }
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <PatternConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `forbidden` and `required` lists of rules (`regex`,
    /// `code`, `message` with `{match}`, `hint`, `severity`, `repairable`, `replacement`,
    /// `case_insensitive`), `max_reports`.
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: PatternConfig = input.parse()?;
        if c.forbidden.is_empty() && c.required.is_empty() {
            return Err(BuildError::new(
                "a pattern validator needs at least one 'forbidden' or 'required' rule",
            ));
        }
        let forbidden = c
            .forbidden
            .into_iter()
            .enumerate()
            .map(|(i, r)| Rule::from_config(r, FORBIDDEN_PATTERN, &format!("forbidden[{i}]")))
            .collect::<Result<_, _>>()?;
        let required = c
            .required
            .into_iter()
            .enumerate()
            .map(|(i, r)| {
                if r.replacement.is_some() {
                    return Err(BuildError::at(
                        format!("required[{i}].replacement"),
                        "only forbidden rules can have a replacement",
                    ));
                }
                Rule::from_config(r, MISSING_PATTERN, &format!("required[{i}]"))
            })
            .collect::<Result<_, _>>()?;
        Ok(Pattern {
            name: input.name.to_string(),
            forbidden,
            required,
            max_reports: c.max_reports.max(1),
        })
    }
}

/// At most this many characters of a match are quoted in a message.
const QUOTE_CHARS: usize = 60;

fn quoted(s: &str) -> String {
    let mut q: String = s.chars().take(QUOTE_CHARS).collect();
    if q.len() < s.len() {
        q.push('…');
    }
    q
}

impl Rule {
    /// The issue of a forbidden rule's match `m` in `text`.
    fn forbidden_issue(
        &self,
        validator: &str,
        text: &str,
        m: regex::Match<'_>,
        lines: &mut LineCounter<'_>,
    ) -> Issue {
        let shown = quoted(m.as_str());
        let message = match &self.message {
            Some(t) => t.replace("{match}", &shown),
            None => format!(
                "Forbidden text '{shown}' (pattern `{}`).",
                self.regex.as_str()
            ),
        };
        let line = lines.line_of(m.start());
        self.issue(validator, message)
            .at(line, column_of(text, m.start()))
    }
}

impl Forbidden for &Rule {
    fn regex(&self) -> &Regex {
        &self.regex
    }
    fn issue(&self, validator: &str, prefix: &str, m: regex::Match<'_>) -> Issue {
        self.forbidden_issue(validator, prefix, m, &mut LineCounter::new(prefix))
    }
}

#[async_trait]
impl Validator for Pattern {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let mut issues = Vec::new();
        for rule in &self.forbidden {
            let mut lines = LineCounter::new(response);
            for m in rule.regex.find_iter(response).take(self.max_reports) {
                issues.push(rule.forbidden_issue(&self.name, response, m, &mut lines));
            }
        }
        for rule in &self.required {
            if !rule.regex.is_match(response) {
                let message = match &rule.message {
                    Some(t) => t.replace("{match}", ""),
                    None => format!(
                        "Required text matching `{}` is missing.",
                        rule.regex.as_str()
                    ),
                };
                issues.push(rule.issue(&self.name, message));
            }
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, _context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        let watched: Vec<_> = self
            .forbidden
            .iter()
            // Warnings never cut; a rule with a replacement is fixed by the repair.
            .filter(|r| r.severity == Severity::Error && r.replacement.is_none())
            .collect();
        ForbiddenCheck::boxed(&self.name, watched)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        let rules = self.forbidden.iter();
        replacement_fixes(
            rules.map(|r| (r.code.as_str(), r.severity, r.replacement.is_some())),
            issue,
        )
    }

    fn repair(&self, response: &str, _context: &Context, issues: &[Issue]) -> Option<String> {
        let mut text = std::borrow::Cow::Borrowed(response);
        for rule in &self.forbidden {
            let Some(replacement) = &rule.replacement else {
                continue;
            };
            if !issues.iter().any(|i| i.code == rule.code) {
                continue;
            }
            if let std::borrow::Cow::Owned(s) = rule.regex.replace_all(&text, replacement.as_str())
            {
                text = std::borrow::Cow::Owned(s);
            }
        }
        match text {
            std::borrow::Cow::Owned(s) if s != response => Some(s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use crate::testing::Registry;
    use crate::BuildEnv;
    use serde_json::json;

    fn build(spec: serde_json::Value) -> Result<Box<dyn Validator>, BuildError> {
        Registry::builtin().build("p", &spec, &BuildEnv::default())
    }

    fn issues(v: &dyn Validator, text: &str) -> Vec<Issue> {
        block_on(v.validate(text, &Context::new())).unwrap()
    }

    #[test]
    fn forbidden_matches_report_each_place() {
        let v = build(json!({"type": "pattern", "forbidden": [
            {"regex": "\\d+\\s*%", "code": "NO_NUMERIC_SCORES", "message": "Percentage '{match}'.", "hint": "Use words."}
        ]}))
        .unwrap();
        assert!(issues(&*v, "No numbers here.").is_empty());
        let found = issues(&*v, "Up 5 %.\nThen 80%!");
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].message, "Percentage '5 %'.");
        assert_eq!((found[0].line, found[0].column), (Some(1), Some(4)));
        assert_eq!((found[1].line, found[1].column), (Some(2), Some(6)));
        assert_eq!(found[1].hint.as_deref(), Some("Use words."));
    }

    #[test]
    fn required_rules_severity_and_hard_abort() {
        let v = build(json!({"type": "pattern", "required": [
            {"regex": "^true$", "code": "SANITIZATION_PASSED", "repairable": false},
            {"regex": "(?i)regards", "code": "NO_SIGNOFF", "severity": "warning"}
        ]}))
        .unwrap();
        let found = issues(&*v, "false");
        assert_eq!(found.len(), 2);
        assert!(found[0].is_error() && !found[0].repairable);
        assert_eq!(found[1].severity, Severity::Warning);
        assert!(issues(&*v, "true").len() == 1);
    }

    #[test]
    fn case_insensitive_flag_and_replacement_repair() {
        let v = build(json!({"type": "pattern", "forbidden": [
            {"regex": "score[:\\s]*\\d+", "case_insensitive": true, "code": "NO_SCORE", "replacement": "a rating"}
        ]}))
        .unwrap();
        let text = "SCORE: 12 and score 3";
        let found = issues(&*v, text);
        assert_eq!(found.len(), 2);
        let fixed = v.repair(text, &Context::new(), &found).unwrap();
        assert_eq!(fixed, "a rating and a rating");
        assert!(issues(&*v, &fixed).is_empty());
    }

    #[test]
    fn bad_config_names_the_key() {
        let err = build(json!({"type": "pattern", "forbidden": [{"regex": "ok"}, {"regex": "("}]}))
            .err()
            .unwrap();
        assert_eq!(err.key, "forbidden[1].regex");
        assert!(err.message.contains("invalid regex"), "{err}");
        let err = build(json!({"type": "pattern"})).err().unwrap();
        assert!(err.message.contains("at least one"));
        let err = build(json!({"type": "pattern", "forbidden": [{"regx": "a"}]}))
            .err()
            .unwrap();
        assert!(err.key.starts_with("forbidden[0]"), "{err:?}");
        let err = build(json!({"type": "pattern", "forbidden": [{"regex": "a{1000}{1000}"}]}))
            .err()
            .unwrap();
        assert_eq!(err.key, "forbidden[0].regex");
    }

    #[test]
    fn nasty_inputs_are_linear_and_capped() {
        let v =
            build(json!({"type": "pattern", "forbidden": [{"regex": "(a+)+b"}, {"regex": "x"}]}))
                .unwrap();
        let text = "a".repeat(1_000_000);
        assert!(issues(&*v, &text).is_empty());
        let many = "x".repeat(10_000);
        assert_eq!(issues(&*v, &many).len(), 10);
        let multibyte = "ä€😀x";
        let found = issues(&*v, multibyte);
        assert_eq!(found[0].column, Some(4));
    }

    #[test]
    fn builders_make_the_rule_configuration_makes() {
        let configured = build(json!({"type": "pattern", "forbidden": [{
            "regex": "level ?[1-4]", "case_insensitive": true, "code": "NO_LEVELS",
            "message": "found {match}", "hint": "describe it", "severity": "warning",
            "repairable": false, "replacement": "a level"}]}))
        .unwrap();
        let rule = Rule::new_case_insensitive("level ?[1-4]", "NO_LEVELS")
            .unwrap()
            .message("found {match}")
            .hint("describe it")
            .severity(Severity::Warning)
            .repairable(false)
            .replacement("a level");
        let built = Pattern::new("p", vec![rule], Vec::new());
        let text = "We reached LEVEL 3.";
        let (a, b) = (issues(&*configured, text), issues(&built, text));
        assert_eq!(a, b);
        assert_eq!(b[0].message, "found LEVEL 3");
        assert!(!b[0].repairable);
        assert_eq!(
            configured.repair(text, &Context::new(), &a),
            built.repair(text, &Context::new(), &b)
        );
        assert_eq!(
            built.repair(text, &Context::new(), &b).as_deref(),
            Some("We reached a level.")
        );
    }
}
