//! The `terms` validator: required terms (which may come from the request context, such as a
//! company name), forbidden terms, and preferred terminology with replacement.
//!
//! ```yaml
//! wording:
//!   type: terms
//!   required:
//!     - term: "{{company_name}}"     # filled from the request context
//!       code: COMPANY_NAME_MISSING
//!       case_sensitive: true
//!       skip_if: [Unbekannt]          # no check when the context holds a placeholder value
//!     - { term: "{{industry}}", code: INDUSTRY_NOT_REFERENCED, severity: warning }
//!   forbidden:
//!     - { term: Sie, code: NO_DIRECT_ADDRESS, case_sensitive: true }
//!     - Kündigung                     # a plain string uses the defaults
//!   preferred:
//!     - { use: Informationssicherheit, instead_of: [IT-Security, Cybersecurity] }
//! ```
//!
//! A term that is exactly one `{{key}}` whose context value is a list stands for each of its
//! values: `required: ["{{allowed_facts}}"]` demands every allowed fact, and
//! `forbidden: [{term: "{{narrative_tags}}", except: "{{expected_tags}}"}]` forbids every tag but
//! the expected ones (compared like the term: case-insensitive by default). When a placeholder
//! — of the term or of `except` — is not in the context, the term is not checked.
//!
//! Defaults: whole words (`\b` at each end that is a word character), case-insensitive,
//! severity `error` (`warning` for preferred terms), repairable; codes `MISSING_TERM`,
//! `FORBIDDEN_TERM`, `PREFERRED_TERM`. A required term whose `{{placeholder}}` is not in the
//! context is skipped: the fact is unknown, so nothing can be demanded.
//!
//! Repair: preferred terms are replaced by the term to use, and forbidden terms that have a
//! `replacement` by it.
//!
//! Early abort: while an answer streams, a forbidden term (severity error, no `replacement`)
//! cuts it once it stands wholly in the text received and a character after it settles the
//! whole-word rule ("Acme" at the very end could still become "Acmeology"). Each check
//! searches only the new bytes and the term's length before them.
//!
//! ```
//! use enforce_validators::FactoryInput;
//! use enforce_validators::terms::Terms;
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let spec = serde_json::json!({"required": ["{{company_name}}"],
//!     "forbidden": [{"term": "Sie", "case_sensitive": true, "code": "NO_DIRECT_ADDRESS"}]});
//! let v = Terms::from_config(&FactoryInput::new("wording", &spec)).unwrap();
//! let ctx = Context::new().with("company_name", "ACME GmbH");
//! let issues = block_on(v.validate("Sie sehen: die Firma wächst.", &ctx)).unwrap();
//! let codes: Vec<_> = issues.iter().map(|i| i.code.as_str()).collect();
//! assert_eq!(codes, ["MISSING_TERM", "NO_DIRECT_ADDRESS"]);
//! // "sie" (lower case) and "Siemens" are not the forbidden word.
//! assert_eq!(block_on(v.validate("ACME GmbH: sie liefert an Siemens.", &ctx)).unwrap().len(), 0);
//! ```

use crate::build::FactoryInput;
use crate::error::BuildError;
use crate::partial::{replacement_fixes, Forbidden, ForbiddenCheck};
use crate::pattern::compile;
use crate::text::{column_of, LineCounter};
use enforce_core::{async_trait, Context, Issue, PartialCheck, Severity, Validation, Validator};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// Default code: a required term is missing.
pub const MISSING_TERM: &str = "MISSING_TERM";
/// Default code: a forbidden term is present.
pub const FORBIDDEN_TERM: &str = "FORBIDDEN_TERM";
/// Default code: a term has a preferred alternative.
pub const PREFERRED_TERM: &str = "PREFERRED_TERM";

/// Most occurrences reported per term.
const MAX_REPORTS: usize = 10;

fn default_true() -> bool {
    true
}

/// One term of a [`Terms`] validator, as configured: the term (`{{key}}` placeholders are
/// filled from the request context) and how it is matched and reported.
///
/// Defaults: whole word, case-insensitive, the list's default code, severity `error`
/// (`warning` for preferred terms), repairable.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Term {
    /// The term; `{{key}}` is filled from the request context.
    term: String,
    /// Issue code instead of the list's default.
    code: Option<String>,
    /// Issue message (`{term}` is the term).
    message: Option<String>,
    /// Hint for the model (`{term}` is the term).
    hint: Option<String>,
    /// `error` (default) or `warning`.
    severity: Option<Severity>,
    /// Whether a re-ask may fix it (`false`: the asking stops at once).
    #[serde(default = "default_true")]
    repairable: bool,
    /// Match the case exactly.
    #[serde(default)]
    case_sensitive: bool,
    /// Match whole words only.
    #[serde(default = "default_true")]
    whole_word: bool,
    /// Forbidden terms only: what the repair puts in its place.
    replacement: Option<String>,
    /// For a term that is one `{{key}}` holding a list: leave out these values (`{{other}}`
    /// holding a list, or one value), e.g. forbid every tag except the expected ones. When its
    /// placeholder is not in the context, the term is not checked (the exceptions are unknown).
    #[serde(default)]
    except: Option<String>,
    /// Values of the rendered term that mean "unknown": no check then.
    #[serde(default)]
    skip_if: Vec<String>,
}

impl Term {
    /// The term `term` with the defaults.
    pub fn new(term: impl Into<String>) -> Self {
        Term {
            term: term.into(),
            code: None,
            message: None,
            hint: None,
            severity: None,
            repairable: true,
            case_sensitive: false,
            whole_word: true,
            replacement: None,
            skip_if: Vec::new(),
            except: None,
        }
    }

    /// Leave out these values when the term is a list from the context (see the field docs):
    /// `"{{expected_tags}}"`.
    pub fn except(mut self, template: impl Into<String>) -> Self {
        self.except = Some(template.into());
        self
    }

    /// The issue code instead of the list's default.
    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The issue message (`{term}` is the term).
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The hint for the model (`{term}` is the term).
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The severity of its issues.
    pub fn severity(mut self, severity: Severity) -> Self {
        self.severity = Some(severity);
        self
    }

    /// Whether a re-ask may fix it (`false`: the asking stops at once).
    pub fn repairable(mut self, repairable: bool) -> Self {
        self.repairable = repairable;
        self
    }

    /// Match the case exactly.
    pub fn case_sensitive(mut self, yes: bool) -> Self {
        self.case_sensitive = yes;
        self
    }

    /// Match whole words only (the default).
    pub fn whole_word(mut self, yes: bool) -> Self {
        self.whole_word = yes;
        self
    }

    /// For a forbidden term: what the repair puts in its place.
    pub fn replacement(mut self, replacement: impl Into<String>) -> Self {
        self.replacement = Some(replacement.into());
        self
    }

    /// Values of the rendered term that mean "unknown": no check then.
    pub fn skip_if<S: Into<String>>(mut self, values: impl IntoIterator<Item = S>) -> Self {
        self.skip_if = values.into_iter().map(Into::into).collect();
        self
    }
}

/// A preferred term of a [`Terms`] validator: use `use` instead of each of `instead_of`.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Preferred {
    /// The term to use.
    #[serde(rename = "use")]
    use_term: String,
    /// The terms it replaces (at least one).
    #[cfg_attr(feature = "config-schema", schemars(length(min = 1)))]
    instead_of: Vec<String>,
    /// Issue code (default `PREFERRED_TERM`).
    code: Option<String>,
    /// Issue message (`{term}` is the discouraged term).
    message: Option<String>,
    /// Hint for the model (`{term}` is the discouraged term).
    hint: Option<String>,
    /// `warning` (default) or `error`.
    severity: Option<Severity>,
    /// Match the case exactly.
    #[serde(default)]
    case_sensitive: bool,
    /// Match whole words only.
    #[serde(default = "default_true")]
    whole_word: bool,
}

impl Preferred {
    /// Use `term` instead of each of `instead_of`; severity `warning`, code `PREFERRED_TERM`.
    pub fn new<S: Into<String>>(
        term: impl Into<String>,
        instead_of: impl IntoIterator<Item = S>,
    ) -> Self {
        Preferred {
            use_term: term.into(),
            instead_of: instead_of.into_iter().map(Into::into).collect(),
            code: None,
            message: None,
            hint: None,
            severity: None,
            case_sensitive: false,
            whole_word: true,
        }
    }

    /// The issue code instead of `PREFERRED_TERM`.
    pub fn code(mut self, code: impl Into<String>) -> Self {
        self.code = Some(code.into());
        self
    }

    /// The issue message (`{term}` is the discouraged term).
    pub fn message(mut self, message: impl Into<String>) -> Self {
        self.message = Some(message.into());
        self
    }

    /// The hint for the model (`{term}` is the discouraged term).
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// The severity of its issues (default `warning`).
    pub fn severity(mut self, severity: Severity) -> Self {
        self.severity = Some(severity);
        self
    }

    /// Match the case exactly.
    pub fn case_sensitive(mut self, yes: bool) -> Self {
        self.case_sensitive = yes;
        self
    }

    /// Match whole words only (the default).
    pub fn whole_word(mut self, yes: bool) -> Self {
        self.whole_word = yes;
        self
    }
}

/// Options of the `terms` validator: at least one required, forbidden or preferred term.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "TermsOptions",
        extend("anyOf" = [
            {"required": ["required"], "properties": {"required": {"minItems": 1}}},
            {"required": ["forbidden"], "properties": {"forbidden": {"minItems": 1}}},
            {"required": ["preferred"], "properties": {"preferred": {"minItems": 1}}}
        ])
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TermsConfig {
    /// Terms the response must contain: strings, or `{term, code, ...}` (no `replacement`).
    #[serde(default)]
    #[cfg_attr(
        feature = "config-schema",
        schemars(schema_with = "required_terms_schema")
    )]
    required: Vec<Value>,
    /// Terms the response must not contain: strings, or `{term, code, ..., replacement}`.
    #[serde(default)]
    #[cfg_attr(feature = "config-schema", schemars(with = "Vec<TermSpec>"))]
    forbidden: Vec<Value>,
    /// Preferred terminology: `{use, instead_of, ...}`.
    #[serde(default)]
    #[cfg_attr(feature = "config-schema", schemars(with = "Vec<Preferred>"))]
    preferred: Vec<Value>,
}

/// A term: the term itself, or `{term, code, message, ...}`.
// What `TermRule::parse_config` reads.
#[cfg(feature = "config-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(untagged, rename = "TermsEntry")]
#[allow(dead_code)] // only its schema is used
enum TermSpec {
    /// Just the term, with the defaults.
    Term(String),
    /// The term with its options.
    Full(Term),
}

/// Required terms: like forbidden ones, but without a `replacement`.
#[cfg(feature = "config-schema")]
fn required_terms_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let term = generator.subschema_for::<TermSpec>();
    schemars::json_schema!({
        "type": "array",
        "items": {
            "allOf": [term, {"not": {"type": "object", "required": ["replacement"]}}]
        }
    })
}

/// How a term is matched.
#[derive(Debug, Clone)]
struct Matcher {
    case_sensitive: bool,
    whole_word: bool,
}

impl Matcher {
    /// The regex for `term`.
    fn regex(&self, term: &str) -> Result<Regex, String> {
        let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
        let mut pattern = String::new();
        if self.whole_word && word(term.chars().next()) {
            pattern.push_str(r"\b");
        }
        pattern.push_str(&regex::escape(term));
        if self.whole_word && word(term.chars().last()) {
            pattern.push_str(r"\b");
        }
        compile(&pattern, !self.case_sensitive)
    }
}

/// A term rule: either compiled now, or (with `{{placeholders}}`) when the context is known.
#[derive(Debug, Clone)]
struct TermRule {
    term: String,
    compiled: Option<Regex>,
    matcher: Matcher,
    code: String,
    message: Option<String>,
    hint: Option<String>,
    severity: Severity,
    repairable: bool,
    replacement: Option<String>,
    skip_if: Vec<String>,
    except: Option<String>,
}

/// The key of a template that is exactly one `{{key}}`.
fn sole_placeholder(template: &str) -> Option<&str> {
    let inner = template.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{") && !inner.contains("}}")).then(|| inner.trim())
}

/// The values a template stands for in `context`: each item when it is one `{{key}}` holding a
/// list, else the rendered text. `None` when a placeholder is not in the context.
pub(crate) fn values_of(template: &str, context: &Context) -> Option<Vec<String>> {
    if let Some(Value::Array(items)) = sole_placeholder(template).and_then(|k| context.get(k)) {
        return Some(
            items
                .iter()
                .filter_map(|item| match item {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(_) | Value::Bool(_) => Some(item.to_string()),
                    _ => None,
                })
                .collect(),
        );
    }
    let rendered = context.render(template);
    (!rendered.contains("{{")).then(|| vec![rendered])
}

impl TermRule {
    /// Reads a term from configuration: a plain string or a mapping of [`Term`]'s options.
    fn parse_config(value: &Value, key: &str) -> Result<Term, BuildError> {
        match value {
            Value::String(s) => Ok(Term::new(s.clone())),
            other => serde_path_to_error::deserialize(other)
                .map_err(|e| BuildError::from(e).prefixed(key)),
        }
    }

    fn compile(c: Term, key: &str, default_code: &str) -> Result<Self, BuildError> {
        if c.term.trim().is_empty() {
            return Err(BuildError::at(
                format!("{key}.term"),
                "a term cannot be empty",
            ));
        }
        if c.except.is_some() && !c.term.contains("{{") {
            return Err(BuildError::at(
                format!("{key}.except"),
                "'except' leaves values out of a term that comes from the context ('{{key}}')",
            ));
        }
        let matcher = Matcher {
            case_sensitive: c.case_sensitive,
            whole_word: c.whole_word,
        };
        let compiled = if c.term.contains("{{") {
            None
        } else {
            Some(
                matcher
                    .regex(&c.term)
                    .map_err(|m| BuildError::at(format!("{key}.term"), m))?,
            )
        };
        Ok(TermRule {
            term: c.term,
            compiled,
            matcher,
            code: c.code.unwrap_or_else(|| default_code.to_string()),
            message: c.message,
            hint: c.hint,
            severity: c.severity.unwrap_or(Severity::Error),
            repairable: c.repairable,
            replacement: c.replacement,
            skip_if: c.skip_if,
            except: c.except,
        })
    }

    /// Calls `f` with each term and its regex for this context: once for a plain term (no
    /// allocation: the per-response path), once per value for a `{{key}}` holding a list (less
    /// the `except` values). Not at all when a placeholder is unknown; values that are empty or
    /// listed in `skip_if` are left out.
    fn each_term(&self, context: &Context, mut f: impl FnMut(&str, &Regex)) {
        if let Some(re) = &self.compiled {
            return f(&self.term, re);
        }
        let Some(terms) = values_of(&self.term, context) else {
            return;
        };
        let excluded = match &self.except {
            None => Vec::new(),
            Some(template) => match values_of(template, context) {
                Some(values) => values,
                None => return,
            },
        };
        let same = |a: &str, b: &str| {
            if self.matcher.case_sensitive {
                a == b
            } else {
                a.to_lowercase() == b.to_lowercase()
            }
        };
        for term in terms {
            if term.trim().is_empty()
                || self.skip_if.contains(&term)
                || excluded.iter().any(|e| same(e, &term))
            {
                continue;
            }
            if let Ok(re) = self.matcher.regex(&term) {
                f(&term, &re);
            }
        }
    }

    /// The issue of a forbidden term found.
    fn forbidden_issue(&self, validator: &str, term: &str) -> Issue {
        self.issue(
            validator,
            term,
            format!("The text uses the forbidden term '{term}'."),
            format!("Remove '{term}'."),
        )
    }

    fn issue(&self, validator: &str, term: &str, default: String, hint: String) -> Issue {
        let fill = |t: &str| t.replace("{term}", term);
        Issue::error(
            validator,
            self.code.clone(),
            self.message.as_deref().map_or(default, fill),
        )
        .with_severity(self.severity)
        .with_repairable(self.repairable)
        .with_hint(self.hint.as_deref().map_or(hint, fill))
    }
}

/// The `terms` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct Terms {
    name: String,
    required: Vec<TermRule>,
    forbidden: Vec<TermRule>,
    /// (rule for the discouraged term, term to use)
    preferred: Vec<(TermRule, String)>,
}

impl Terms {
    /// A builder for the validator `name`.
    ///
    /// ```
    /// use enforce_core::{Context, Severity, Validator};
    /// use enforce_validators::terms::{Preferred, Term, Terms};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    /// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// let wording = Terms::builder("wording")
    ///     .require(Term::new("{{company_name}}").code("COMPANY_NAME_MISSING"))
    ///     .forbid(Term::new("Sie").case_sensitive(true).code("NO_DIRECT_ADDRESS"))
    ///     .prefer(Preferred::new("Informationssicherheit", ["IT-Security"]))
    ///     .build()
    ///     .unwrap();
    /// let ctx = Context::new().with("company_name", "ACME GmbH");
    /// let issues = block_on(wording.validate("Sie sehen: IT-Security zählt.", &ctx)).unwrap();
    /// let codes: Vec<_> = issues.iter().map(|i| (i.code.as_str(), i.severity)).collect();
    /// assert_eq!(codes, [("COMPANY_NAME_MISSING", Severity::Error),
    ///                    ("NO_DIRECT_ADDRESS", Severity::Error),
    ///                    ("PREFERRED_TERM", Severity::Warning)]);
    /// ```
    pub fn builder(name: impl Into<String>) -> TermsBuilder {
        TermsBuilder {
            name: name.into(),
            required: Vec::new(),
            forbidden: Vec::new(),
            preferred: Vec::new(),
        }
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <TermsConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `required`, `forbidden` (terms as strings or
    /// `{term, code, message, hint, severity, repairable, case_sensitive, whole_word,
    /// replacement, skip_if}`) and `preferred` (`{use, instead_of, ...}`). `{term}` in a
    /// message or hint is the term.
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: TermsConfig = input.parse()?;
        let terms = |values: &[Value], list: &str| {
            values
                .iter()
                .enumerate()
                .map(|(i, v)| TermRule::parse_config(v, &format!("{list}[{i}]")))
                .collect::<Result<Vec<_>, _>>()
        };
        let preferred = c
            .preferred
            .iter()
            .enumerate()
            .map(|(i, v)| {
                serde_path_to_error::deserialize(v)
                    .map_err(|e| BuildError::from(e).prefixed(&format!("preferred[{i}]")))
            })
            .collect::<Result<Vec<Preferred>, _>>()?;
        TermsBuilder {
            name: input.name.to_string(),
            required: terms(&c.required, "required")?,
            forbidden: terms(&c.forbidden, "forbidden")?,
            preferred,
        }
        .build()
    }

    fn occurrences(
        &self,
        rule: &TermRule,
        response: &str,
        context: &Context,
        out: &mut Vec<Issue>,
        make: impl Fn(&TermRule, &str) -> Issue,
    ) {
        rule.each_term(context, |term, re| {
            let mut lines = LineCounter::new(response);
            for m in re.find_iter(response).take(MAX_REPORTS) {
                let line = lines.line_of(m.start());
                out.push(make(rule, term).at(line, column_of(response, m.start())));
            }
        });
    }
}

/// One forbidden term the partial check of [`Terms`] looks for (a `{{key}}` list gives one per value).
struct WatchedTerm<'a> {
    rule: &'a TermRule,
    term: String,
    regex: Regex,
}

impl Forbidden for WatchedTerm<'_> {
    fn regex(&self) -> &Regex {
        &self.regex
    }
    fn issue(&self, validator: &str, prefix: &str, m: regex::Match<'_>) -> Issue {
        let line = LineCounter::new(prefix).line_of(m.start());
        self.rule
            .forbidden_issue(validator, &self.term)
            .at(line, column_of(prefix, m.start()))
    }
}

/// Builds a [`Terms`] validator; see [`Terms::builder`].
#[derive(Debug, Clone)]
pub struct TermsBuilder {
    name: String,
    required: Vec<Term>,
    forbidden: Vec<Term>,
    preferred: Vec<Preferred>,
}

impl TermsBuilder {
    /// A term the response must contain (default code `MISSING_TERM`). A term whose
    /// `{{placeholder}}` is not in the context is skipped.
    pub fn require(mut self, term: Term) -> Self {
        self.required.push(term);
        self
    }

    /// A term the response must not contain (default code `FORBIDDEN_TERM`).
    pub fn forbid(mut self, term: Term) -> Self {
        self.forbidden.push(term);
        self
    }

    /// Preferred terminology (default code `PREFERRED_TERM`, a warning); the repair replaces
    /// the discouraged terms.
    pub fn prefer(mut self, preferred: Preferred) -> Self {
        self.preferred.push(preferred);
        self
    }

    /// Compiles the terms. Errors name the offending term (`forbidden[0].term`).
    pub fn build(self) -> Result<Terms, BuildError> {
        let required = self
            .required
            .into_iter()
            .enumerate()
            .map(|(i, t)| TermRule::compile(t, &format!("required[{i}]"), MISSING_TERM))
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(i) = required.iter().position(|r| r.replacement.is_some()) {
            return Err(BuildError::at(
                format!("required[{i}].replacement"),
                "only forbidden terms can have a replacement",
            ));
        }
        let forbidden = self
            .forbidden
            .into_iter()
            .enumerate()
            .map(|(i, t)| TermRule::compile(t, &format!("forbidden[{i}]"), FORBIDDEN_TERM))
            .collect::<Result<Vec<_>, _>>()?;
        let mut preferred = Vec::new();
        for (i, p) in self.preferred.into_iter().enumerate() {
            let key = format!("preferred[{i}]");
            if p.instead_of.is_empty() {
                return Err(BuildError::at(
                    format!("{key}.instead_of"),
                    "list at least one term",
                ));
            }
            for (j, old) in p.instead_of.iter().enumerate() {
                let rule = TermRule::compile(
                    Term::new(old.clone())
                        .case_sensitive(p.case_sensitive)
                        .whole_word(p.whole_word),
                    &format!("{key}.instead_of[{j}]"),
                    PREFERRED_TERM,
                )?;
                let rule = TermRule {
                    code: p.code.clone().unwrap_or_else(|| PREFERRED_TERM.to_string()),
                    message: p.message.clone(),
                    hint: p.hint.clone(),
                    severity: p.severity.unwrap_or(Severity::Warning),
                    replacement: Some(p.use_term.clone()),
                    ..rule
                };
                preferred.push((rule, p.use_term.clone()));
            }
        }
        if required.is_empty() && forbidden.is_empty() && preferred.is_empty() {
            return Err(BuildError::new(
                "a terms validator needs 'required', 'forbidden' or 'preferred' terms",
            ));
        }
        Ok(Terms {
            name: self.name,
            required,
            forbidden,
            preferred,
        })
    }
}

#[async_trait]
impl Validator for Terms {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        let mut issues = Vec::new();
        for rule in &self.required {
            rule.each_term(context, |term, re| {
                if !re.is_match(response) {
                    issues.push(rule.issue(
                        &self.name,
                        term,
                        format!("The text does not mention '{term}'."),
                        format!("Mention '{term}'."),
                    ));
                }
            });
        }
        for rule in &self.forbidden {
            self.occurrences(rule, response, context, &mut issues, |r, term| {
                r.forbidden_issue(&self.name, term)
            });
        }
        for (rule, use_term) in &self.preferred {
            self.occurrences(rule, response, context, &mut issues, |r, term| {
                r.issue(
                    &self.name,
                    term,
                    format!("Write '{use_term}' instead of '{term}'."),
                    format!("Replace '{term}' with '{use_term}'."),
                )
            });
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        let mut watched = Vec::new();
        for rule in &self.forbidden {
            // Warnings never cut; a term with a replacement is fixed by the repair.
            if rule.severity != Severity::Error || rule.replacement.is_some() {
                continue;
            }
            rule.each_term(context, |term, re| {
                watched.push(WatchedTerm {
                    rule,
                    term: term.to_string(),
                    regex: re.clone(),
                });
            });
        }
        ForbiddenCheck::boxed(&self.name, watched)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        let rules = self.forbidden.iter();
        replacement_fixes(
            rules.map(|r| (r.code.as_str(), r.severity, r.replacement.is_some())),
            issue,
        )
    }

    fn repair(&self, response: &str, context: &Context, _issues: &[Issue]) -> Option<String> {
        let mut text = response.to_string();
        let rules = self
            .forbidden
            .iter()
            .chain(self.preferred.iter().map(|(r, _)| r));
        for rule in rules {
            let Some(replacement) = &rule.replacement else {
                continue;
            };
            rule.each_term(context, |_, re| {
                if let std::borrow::Cow::Owned(s) =
                    re.replace_all(&text, regex::NoExpand(replacement))
                {
                    text = s;
                }
            });
        }
        (text != response).then_some(text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use crate::testing::Registry;
    use crate::BuildEnv;
    use serde_json::json;

    fn build(spec: Value) -> Result<Box<dyn Validator>, BuildError> {
        Registry::builtin().build("terms", &spec, &BuildEnv::default())
    }

    fn codes(v: &dyn Validator, text: &str, ctx: &Context) -> Vec<String> {
        block_on(v.validate(text, ctx))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn required_terms_from_context_and_skips() {
        let v = build(json!({"type": "terms", "required": [
            {"term": "{{company_name}}", "code": "COMPANY", "case_sensitive": true, "skip_if": ["Unbekannt"]},
            {"term": "{{industry}}", "code": "INDUSTRY", "severity": "warning"}
        ]}))
        .unwrap();
        let ctx = Context::new()
            .with("company_name", "ACME AG")
            .with("industry", "Logistik");
        assert!(codes(&*v, "Die ACME AG ist in der logistik tätig.", &ctx).is_empty());
        assert_eq!(
            codes(&*v, "Die acme ag wächst.", &ctx),
            vec!["COMPANY", "INDUSTRY"]
        );
        let unknown = Context::new().with("company_name", "Unbekannt");
        assert!(codes(&*v, "nothing", &unknown).is_empty());
        assert!(codes(&*v, "nothing", &Context::new()).is_empty());
    }

    #[test]
    fn forbidden_whole_words_case_sensitive_and_lines() {
        let v = build(json!({"type": "terms", "forbidden": [
            {"term": "Ihr", "case_sensitive": true, "code": "NO_DIRECT_ADDRESS"},
            "C++",
            "Kündigung"
        ]}))
        .unwrap();
        let ctx = Context::new();
        assert!(codes(&*v, "ihr Ihre Ihrer C+ Kündigungen", &ctx).is_empty());
        let issues = block_on(v.validate("ok\nIhr Team nutzt C++.\nKÜNDIGUNG", &ctx)).unwrap();
        let got: Vec<_> = issues
            .iter()
            .map(|i| (i.code.as_str(), i.line, i.column))
            .collect();
        assert_eq!(
            got,
            vec![
                ("NO_DIRECT_ADDRESS", Some(2), Some(1)),
                (FORBIDDEN_TERM, Some(2), Some(16)),
                (FORBIDDEN_TERM, Some(3), Some(1)),
            ]
        );
    }

    #[test]
    fn preferred_terms_warn_and_repair() {
        let v = build(json!({"type": "terms", "preferred": [
            {"use": "Informationssicherheit", "instead_of": ["IT-Security", "Cybersecurity"]}
        ], "forbidden": [{"term": "leider", "replacement": ""}]}))
        .unwrap();
        let ctx = Context::new();
        let text = "Die cybersecurity und IT-Security sind leider $1 teuer.";
        let issues = block_on(v.validate(text, &ctx)).unwrap();
        let got: Vec<_> = issues
            .iter()
            .map(|i| (i.code.as_str(), i.severity))
            .collect();
        assert_eq!(
            got,
            vec![
                (FORBIDDEN_TERM, Severity::Error),
                (PREFERRED_TERM, Severity::Warning),
                (PREFERRED_TERM, Severity::Warning),
            ]
        );
        let fixed = v.repair(text, &ctx, &issues).unwrap();
        assert_eq!(
            fixed,
            "Die Informationssicherheit und Informationssicherheit sind  $1 teuer."
        );
    }

    #[test]
    fn bad_configs_name_the_key() {
        assert_eq!(
            build(json!({"type": "terms", "forbidden": ["ok", {"trem": "x"}]}))
                .err()
                .unwrap()
                .key,
            "forbidden[1].trem"
        );
        assert!(build(json!({"type": "terms"})).is_err());
        assert_eq!(
            build(json!({"type": "terms", "required": [""]}))
                .err()
                .unwrap()
                .key,
            "required[0].term"
        );
        assert_eq!(
            build(json!({"type": "terms", "preferred": [{"use": "a", "instead_of": []}]}))
                .err()
                .unwrap()
                .key,
            "preferred[0].instead_of"
        );
    }

    #[test]
    fn regex_metacharacters_in_context_are_literal() {
        let v = build(json!({"type": "terms", "required": ["{{company_name}}"]})).unwrap();
        let ctx = Context::new().with("company_name", "A.B (Holding) [x]*");
        assert!(codes(&*v, "by A.B (Holding) [x]* today", &ctx).is_empty());
        assert_eq!(
            codes(&*v, "by AxB (Holding) [x]* today", &ctx),
            vec![MISSING_TERM]
        );
    }

    #[test]
    fn list_facts_expand_to_one_term_each_less_the_exceptions() {
        let v = build(json!({"type": "terms",
            "required": ["{{allowed_facts}}"],
            "forbidden": [{"term": "{{narrative_tags}}", "except": "{{expected_tags}}",
                           "code": "NARRATIVE_TAGS_CONSISTENT"}]}))
        .unwrap();
        let ctx = Context::new()
            .with("allowed_facts", json!(["ISO 27001", "42 Mitarbeiter"]))
            .with(
                "narrative_tags",
                json!(["Pionier", "Wachstum", "Stabilität"]),
            )
            .with("expected_tags", json!(["wachstum"]));
        let text = "ISO 27001 zertifiziert, Wachstum als Pionier.";
        assert_eq!(
            codes(&*v, text, &ctx),
            ["MISSING_TERM", "NARRATIVE_TAGS_CONSISTENT"]
        );
        let issues = block_on(v.validate(text, &ctx)).unwrap();
        assert!(issues[0].message.contains("42 Mitarbeiter"), "{issues:?}");
        assert!(issues[1].message.contains("Pionier"), "{issues:?}");
        // Expected tags are allowed; unknown facts mean nothing is demanded or forbidden.
        let fine = "ISO 27001 und 42 Mitarbeiter: Wachstum.";
        assert!(codes(&*v, fine, &ctx).is_empty());
        assert!(codes(&*v, text, &Context::new()).is_empty());
        let no_expectations = Context::new().with("narrative_tags", json!(["Pionier"]));
        assert!(
            codes(&*v, text, &no_expectations).is_empty(),
            "exceptions unknown: the forbidden list is not checked"
        );
        // A single value as the exception, and the builder spelling.
        let built = Terms::builder("t")
            .forbid(Term::new("{{narrative_tags}}").except("{{expected_tag}}"))
            .build()
            .unwrap();
        let ctx = Context::new()
            .with("narrative_tags", json!(["Pionier", "Wachstum"]))
            .with("expected_tag", "Wachstum");
        assert_eq!(codes(&built, text, &ctx), ["FORBIDDEN_TERM"]);
        let err = build(json!({"type": "terms",
            "forbidden": [{"term": "Sie", "except": "{{x}}"}]}))
        .unwrap_err();
        assert_eq!(err.key, "forbidden[0].except");
    }
}
