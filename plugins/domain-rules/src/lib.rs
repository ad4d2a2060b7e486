//! # enforce-plugin-domain-rules
//!
//! An example enforce plugin whose rules come entirely from its configuration: a team lists the
//! phrases its domain forbids or requires, each with its own issue code, message, hint and
//! severity, and an optional replacement that makes the rule repairable without asking the
//! model again.
//!
//! ```yaml
//! validators:
//!   domain_rules:
//!     rules:
//!       - code: NO_GUARANTEE
//!         forbidden: ["garantiert", "100 % sicher"]
//!         ignore_case: true
//!         message: "The text promises a guarantee."
//!         hint: "Describe expected results, not guarantees."
//!         replacement: "voraussichtlich"
//!       - code: MISSING_COMPANY
//!         required: ["{{company_name}}"]   # filled from the request context
//!         severity: warning
//! ```
//!
//! A `forbidden` rule raises one issue per occurrence (with line and column); a `required` rule
//! raises one issue when none of its phrases occurs. `{{key}}` placeholders are filled from the
//! request context; a required rule whose placeholders cannot be filled is skipped.
//!
//! ```
//! use enforce_plugin_domain_rules::RuleSet;
//!
//! let rules = RuleSet::from_config(&serde_json::json!({"rules": [
//!     {"code": "NO_GUARANTEE", "forbidden": ["garantiert"], "replacement": "voraussichtlich"}
//! ]})).unwrap();
//! let context = serde_json::Map::new();
//! let hits = rules.check("Das ist garantiert fertig.", &context);
//! assert_eq!((hits[0].code.as_str(), hits[0].line, hits[0].column), ("NO_GUARANTEE", Some(1), Some(9)));
//! assert_eq!(rules.repair("Das ist garantiert fertig.", &context).unwrap(), "Das ist voraussichtlich fertig.");
//! ```
#![deny(missing_docs)]

use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue, PluginSeverity};
use serde_json::{Map, Value};

/// One rule of the set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    code: String,
    forbidden: Vec<String>,
    required: Vec<String>,
    message: Option<String>,
    hint: Option<String>,
    severity: PluginSeverity,
    ignore_case: bool,
    replacement: Option<String>,
}

impl Rule {
    /// Every occurrence of this rule's forbidden phrases in `text`.
    fn forbidden_hits(&self, text: &str, context: &Map<String, Value>, hits: &mut Vec<Hit>) {
        for phrase in &self.forbidden {
            let Some(phrase) = render(phrase, context) else {
                continue;
            };
            for (line_index, line) in text.lines().enumerate() {
                for start in find_all(line, &phrase, self.ignore_case) {
                    hits.push(Hit {
                        code: self.code.clone(),
                        message: self.message.clone().unwrap_or_else(|| {
                            format!("The text contains the forbidden phrase `{phrase}`.")
                        }),
                        hint: self.hint.clone().or_else(|| {
                            self.replacement
                                .as_ref()
                                .map(|r| format!("Write `{r}` instead of `{phrase}`."))
                        }),
                        severity: self.severity,
                        line: u32::try_from(line_index + 1).ok(),
                        column: u32::try_from(line[..start].chars().count() + 1).ok(),
                    });
                }
            }
        }
    }
}

/// One hit of [`RuleSet::check`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hit {
    /// The rule's issue code.
    pub code: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: Option<String>,
    /// Error or warning.
    pub severity: PluginSeverity,
    /// 1-based line (forbidden phrases only).
    pub line: Option<u32>,
    /// 1-based column in characters (forbidden phrases only).
    pub column: Option<u32>,
}

/// The configured rules of the `domain_rules` validator.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RuleSet {
    rules: Vec<Rule>,
}

impl RuleSet {
    /// Reads `{"rules": [...]}`; see the crate docs for the keys of a rule.
    ///
    /// ```
    /// use enforce_plugin_domain_rules::RuleSet;
    ///
    /// let err = RuleSet::from_config(&serde_json::json!({"rules": [{"forbidden": ["x"]}]})).unwrap_err();
    /// assert!(err.contains("code"));
    /// ```
    pub fn from_config(config: &Value) -> Result<Self, String> {
        let rules = config
            .get("rules")
            .and_then(Value::as_array)
            .ok_or("`rules` (a list) is required")?;
        let mut set = RuleSet::default();
        for (index, rule) in rules.iter().enumerate() {
            set.rules
                .push(parse_rule(rule).map_err(|e| format!("rules[{index}]: {e}"))?);
        }
        Ok(set)
    }

    /// Every violation of the rules in `text`, rule by rule.
    pub fn check(&self, text: &str, context: &Map<String, Value>) -> Vec<Hit> {
        let mut hits = Vec::new();
        for rule in &self.rules {
            rule.forbidden_hits(text, context, &mut hits);
            if !rule.required.is_empty() {
                let phrases: Option<Vec<String>> =
                    rule.required.iter().map(|p| render(p, context)).collect();
                let Some(phrases) = phrases else {
                    continue;
                };
                let present = phrases
                    .iter()
                    .any(|p| find_all(text, p, rule.ignore_case).next().is_some());
                if !present {
                    let list = phrases
                        .iter()
                        .map(|p| format!("`{p}`"))
                        .collect::<Vec<_>>()
                        .join(", ");
                    hits.push(Hit {
                        code: rule.code.clone(),
                        message: rule
                            .message
                            .clone()
                            .unwrap_or_else(|| format!("The text must mention one of {list}.")),
                        hint: rule.hint.clone(),
                        severity: rule.severity,
                        line: None,
                        column: None,
                    });
                }
            }
        }
        hits
    }

    /// The violations already certain in `prefix`, the part of a streamed answer received so
    /// far: forbidden phrases (of error rules without a replacement, which the repair would fix)
    /// in lines that have ended. A phrase in an ended line stays in every continuation.
    ///
    /// ```
    /// use enforce_plugin_domain_rules::RuleSet;
    ///
    /// let rules = RuleSet::from_config(&serde_json::json!({"rules": [
    ///     {"code": "NO_GUARANTEE", "forbidden": ["garantiert"]}]})).unwrap();
    /// let context = serde_json::Map::new();
    /// assert!(rules.definite("Das ist garantiert", &context).is_empty());
    /// assert_eq!(rules.definite("Das ist garantiert.\nUnd", &context)[0].code, "NO_GUARANTEE");
    /// ```
    pub fn definite(&self, prefix: &str, context: &Map<String, Value>) -> Vec<Hit> {
        let ended = prefix.rfind('\n').map_or("", |end| &prefix[..end]);
        let mut hits = Vec::new();
        for rule in &self.rules {
            if rule.replacement.is_none() && rule.severity == PluginSeverity::Error {
                rule.forbidden_hits(ended, context, &mut hits);
            }
        }
        hits
    }

    /// Replaces every forbidden phrase of the rules that have a `replacement`; `None` when no
    /// rule applies.
    pub fn repair(&self, text: &str, context: &Map<String, Value>) -> Option<String> {
        let mut out = text.to_string();
        let mut changed = false;
        for rule in &self.rules {
            let Some(replacement) = &rule.replacement else {
                continue;
            };
            for phrase in &rule.forbidden {
                let Some(phrase) = render(phrase, context) else {
                    continue;
                };
                let starts: Vec<usize> = find_all(&out, &phrase, rule.ignore_case).collect();
                for start in starts.into_iter().rev() {
                    let end = start + matched_len(&out[start..], &phrase, rule.ignore_case);
                    out.replace_range(start..end, replacement);
                    changed = true;
                }
            }
        }
        changed.then_some(out)
    }
}

fn parse_rule(value: &Value) -> Result<Rule, String> {
    let map = value.as_object().ok_or("a rule must be a mapping")?;
    let text = |key: &str| -> Result<Option<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(format!("`{key}` must be a string")),
        }
    };
    let list = |key: &str| -> Result<Vec<String>, String> {
        match map.get(key) {
            None | Some(Value::Null) => Ok(Vec::new()),
            Some(Value::Array(items)) => items
                .iter()
                .map(|i| {
                    i.as_str()
                        .filter(|s| !s.is_empty())
                        .map(str::to_string)
                        .ok_or_else(|| format!("`{key}` must be a list of non-empty strings"))
                })
                .collect(),
            Some(_) => Err(format!("`{key}` must be a list of strings")),
        }
    };
    for key in map.keys() {
        if !matches!(
            key.as_str(),
            "code"
                | "forbidden"
                | "required"
                | "message"
                | "hint"
                | "severity"
                | "ignore_case"
                | "replacement"
        ) {
            return Err(format!("unknown key `{key}`"));
        }
    }
    let code = text("code")?.ok_or("`code` is required")?;
    if code.is_empty()
        || !code
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("`code` must be UPPER_SNAKE_CASE, got `{code}`"));
    }
    let severity = match text("severity")?.as_deref() {
        None | Some("error") => PluginSeverity::Error,
        Some("warning") => PluginSeverity::Warning,
        Some(other) => {
            return Err(format!(
                "`severity` must be error or warning, got `{other}`"
            ))
        }
    };
    let ignore_case = match map.get("ignore_case") {
        None => false,
        Some(v) => v.as_bool().ok_or("`ignore_case` must be a boolean")?,
    };
    let rule = Rule {
        forbidden: list("forbidden")?,
        required: list("required")?,
        message: text("message")?,
        hint: text("hint")?,
        replacement: text("replacement")?,
        code,
        severity,
        ignore_case,
    };
    if rule.forbidden.is_empty() && rule.required.is_empty() {
        return Err("a rule needs `forbidden` or `required` phrases".into());
    }
    Ok(rule)
}

/// Fills `{{key}}` from the context; `None` if a key is missing.
fn render(phrase: &str, context: &Map<String, Value>) -> Option<String> {
    let mut out = String::with_capacity(phrase.len());
    let mut rest = phrase;
    while let Some(open) = rest.find("{{") {
        let close = rest[open..].find("}}")? + open;
        out.push_str(&rest[..open]);
        let key = rest[open + 2..close].trim();
        match context.get(key)? {
            Value::String(s) => out.push_str(s),
            other => out.push_str(&other.to_string()),
        }
        rest = &rest[close + 2..];
    }
    out.push_str(rest);
    (!out.is_empty()).then_some(out)
}

/// Byte length of the match of `needle` at the start of `haystack`.
fn matched_len(haystack: &str, needle: &str, ignore_case: bool) -> usize {
    if !ignore_case {
        return needle.len();
    }
    let wanted = needle.chars().count();
    haystack
        .char_indices()
        .nth(wanted)
        .map_or(haystack.len(), |(i, _)| i)
}

/// Byte offsets of every non-overlapping occurrence of `needle` in `haystack`.
fn find_all<'a>(
    haystack: &'a str,
    needle: &'a str,
    ignore_case: bool,
) -> Box<dyn Iterator<Item = usize> + 'a> {
    if !ignore_case {
        return Box::new(haystack.match_indices(needle).map(|(i, _)| i));
    }
    let mut from = 0;
    Box::new(std::iter::from_fn(move || {
        while from < haystack.len() {
            let start = from;
            let rest = &haystack[start..];
            let mut candidate = rest.chars();
            let matches = needle.chars().all(|n| {
                candidate
                    .next()
                    .is_some_and(|c| c == n || c.to_lowercase().eq(n.to_lowercase()))
            });
            let step = rest.chars().next().map_or(1, char::len_utf8);
            if matches {
                from = start + matched_len(rest, needle, true);
                return Some(start);
            }
            from = start + step;
        }
        None
    }))
}

impl Hit {
    fn into_issue(self) -> PluginIssue {
        let mut issue = PluginIssue::error(self.code, self.message).with_severity(self.severity);
        if let Some(hint) = self.hint {
            issue = issue.with_hint(hint);
        }
        match (self.line, self.column) {
            (Some(line), Some(column)) => issue.at(line, column),
            (Some(line), None) => issue.at_line(line),
            _ => issue,
        }
    }
}

impl PluginValidator for RuleSet {
    fn validate(
        &self,
        response: &str,
        context: &Context<'_>,
    ) -> Result<Vec<PluginIssue>, PluginError> {
        Ok(self
            .check(response, context.as_map())
            .into_iter()
            .map(Hit::into_issue)
            .collect())
    }

    fn validate_partial(
        &self,
        prefix: &str,
        context: &Context<'_>,
    ) -> Option<Result<Vec<PluginIssue>, PluginError>> {
        let hits = self.definite(prefix, context.as_map());
        Some(Ok(hits.into_iter().map(Hit::into_issue).collect()))
    }

    fn repair(
        &self,
        response: &str,
        context: &Context<'_>,
        _issues: &[PluginIssue],
    ) -> Option<String> {
        RuleSet::repair(self, response, context.as_map())
    }
}

export_plugin!(PluginSpec {
    name: "domain-rules",
    version: env!("CARGO_PKG_VERSION"),
    validators: &[ValidatorSpec {
        name: "domain_rules",
        description: "Forbidden and required phrases from the config, each with its own code.",
        build: |config| Ok(Box::new(RuleSet::from_config(config)?)),
    }],
});

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rules(config: Value) -> RuleSet {
        RuleSet::from_config(&config).unwrap()
    }

    #[test]
    fn forbidden_phrases_are_located_case_insensitively_when_asked() {
        let set = rules(json!({"rules": [
            {"code": "NO_GUARANTEE", "forbidden": ["garantiert"], "ignore_case": true},
            {"code": "NO_ASAP", "forbidden": ["asap"]}
        ]}));
        let hits = set.check("Lieferung GARANTIERT.\nBitte ASAP, asap!", &Map::new());
        let found: Vec<(&str, Option<u32>, Option<u32>)> = hits
            .iter()
            .map(|h| (h.code.as_str(), h.line, h.column))
            .collect();
        assert_eq!(
            found,
            vec![
                ("NO_GUARANTEE", Some(1), Some(11)),
                ("NO_ASAP", Some(2), Some(13)),
            ]
        );
    }

    #[test]
    fn required_phrases_use_the_context() {
        let set = rules(json!({"rules": [
            {"code": "MISSING_COMPANY", "required": ["{{company_name}}"], "severity": "warning"}
        ]}));
        let ctx = json!({"company_name": "ACME GmbH"});
        let ctx = ctx.as_object().unwrap();
        assert!(set.check("Die ACME GmbH liefert.", ctx).is_empty());
        let hits = set.check("Die Firma liefert.", ctx);
        assert_eq!(hits.len(), 1);
        assert_eq!(hits[0].severity, PluginSeverity::Warning);
        assert!(hits[0].message.contains("ACME GmbH"));
        // Without the context key the rule cannot be evaluated and is skipped.
        assert!(set.check("Die Firma liefert.", &Map::new()).is_empty());
    }

    #[test]
    fn repair_replaces_every_occurrence_keeping_the_rest() {
        let set = rules(json!({"rules": [
            {"code": "NO_GUARANTEE", "forbidden": ["Garantiert"], "ignore_case": true,
             "replacement": "voraussichtlich"}
        ]}));
        assert_eq!(
            set.repair("garantiert ä garantiert.", &Map::new()).unwrap(),
            "voraussichtlich ä voraussichtlich."
        );
        assert_eq!(set.repair("nichts", &Map::new()), None);
    }

    #[test]
    fn bad_configs_are_rejected_with_the_rule_index() {
        for (config, expected) in [
            (json!({}), "`rules`"),
            (
                json!({"rules": [{"code": "lower", "forbidden": ["x"]}]}),
                "rules[0]",
            ),
            (json!({"rules": [{"code": "X"}]}), "needs"),
            (json!({"rules": [{"code": "X", "forbidden": "x"}]}), "list"),
            (
                json!({"rules": [{"code": "X", "forbidden": ["x"], "severity": "fatal"}]}),
                "severity",
            ),
            (
                json!({"rules": [{"code": "X", "forbidden": ["x"], "typo": 1}]}),
                "typo",
            ),
        ] {
            let err = RuleSet::from_config(&config).unwrap_err();
            assert!(err.contains(expected), "{err} should mention {expected}");
        }
    }
}
