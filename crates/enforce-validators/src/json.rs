//! The `json` validator: the response (or its fenced JSON block) parses, and optionally meets a
//! JSON Schema.
//!
//! | code | when |
//! |---|---|
//! | `INVALID_JSON` | no JSON found, it does not parse, it is wrapped in prose (or, with `bare: true`, in a fence) |
//! | `SCHEMA_VIOLATION` | the JSON breaks the schema (one issue per violation, up to `max_errors`) |
//!
//! Both codes can be renamed (`invalid_code`, `schema_code`), so a pipeline keeps its own rule
//! names (e.g. `JSON_VALID` for both).
//!
//! Repair: when the JSON sits in a fence or inside prose and parses there, the repair returns
//! the JSON alone.
//!
//! Early abort (with `bare: true`): while an answer streams, an incremental parser follows the
//! JSON value the answer opens with (alone, or as the first thing in a ```` ```json ```` fence,
//! which the repair strips), over the new bytes only. A character no continuation can make
//! valid (`{"a": tru e`, a trailing comma before `}`) cuts the answer as `INVALID_JSON`; once the
//! value is complete, its schema is checked and a violation is definite. Members are not judged
//! before the value is complete: a later duplicate key would replace them. Never judged: an
//! answer that opens with prose (the JSON may come later and the repair pulls it out), text
//! after the complete value (the repair strips it), and any JSON without `bare` (a fenced block
//! further on could still hold valid JSON). The one continuation not waited for is a second
//! JSON document written after a broken first one (see the partial-check invariant in
//! ARCHITECTURE.md).
//!
//! ```
//! use enforce_validators::FactoryInput;
//! use enforce_validators::json::JsonValidator;
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let spec = serde_json::json!({
//!     "schema": {"type": "object", "required": ["title"]}
//! });
//! let v = JsonValidator::from_config(&FactoryInput::new("answer", &spec)).unwrap();
//! let issues = block_on(v.validate("```json\n{\"name\": 1}\n```", &Context::new())).unwrap();
//! assert_eq!(issues[0].code, "SCHEMA_VIOLATION");
//! let issues = block_on(v.validate("Sure! {\"title\": \"x\"} Hope that helps.", &Context::new())).unwrap();
//! assert_eq!(issues[0].code, "INVALID_JSON");
//! assert_eq!(v.repair("Sure! {\"title\": \"x\"} Hope that helps.", &Context::new(), &issues).unwrap(),
//!            "{\"title\": \"x\"}");
//! ```

use crate::build::FactoryInput;
use crate::error::BuildError;
use crate::json_prefix::JsonPrefix;
use crate::text::{column_of, fences, floor_char_boundary, locate_json, trimmed_range, JsonForm};
use enforce_core::{async_trait, Context, Issue, PartialCheck, Validation, Validator};
use serde::Deserialize;
use serde_json::Value;
use std::path::PathBuf;

/// Code: no parseable JSON where it belongs.
pub const INVALID_JSON: &str = "INVALID_JSON";
/// Code: the JSON breaks the schema.
pub const SCHEMA_VIOLATION: &str = "SCHEMA_VIOLATION";

/// The message of the `INVALID_JSON` error of JSON in a fence (with `bare`): the repair
/// fixes it.
const WRAPPED_IN_FENCE: &str = "The JSON is wrapped in a code fence.";
/// The message of the `INVALID_JSON` error of JSON inside prose: the repair fixes it.
const SURROUNDED_BY_TEXT: &str = "The JSON is surrounded by other text.";

/// Options of the `json` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "JsonOptions",
        // `key: ~` is no key to the parser: "given" means present and not null.
        extend("not" = {
            "required": ["schema", "schema_file"],
            "properties": {"schema": {"not": {"type": "null"}}, "schema_file": {"type": "string"}}
        })
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct JsonConfig {
    /// Inline JSON Schema.
    schema: Option<Value>,
    /// JSON (or YAML) file holding the schema, relative to the configuration file.
    schema_file: Option<PathBuf>,
    /// `true`: the JSON must be the whole response, not in a fence.
    #[serde(default)]
    bare: bool,
    /// Code for JSON that is missing, does not parse or is wrapped (default `INVALID_JSON`).
    invalid_code: Option<String>,
    /// Code for schema violations (default `SCHEMA_VIOLATION`).
    schema_code: Option<String>,
    /// Hint attached to schema violations.
    schema_hint: Option<String>,
    /// Most schema violations reported (default 20).
    #[serde(default = "default_max_errors")]
    max_errors: usize,
}

fn default_max_errors() -> usize {
    20
}

/// The `json` validator. See the [module docs](self).
pub struct JsonValidator {
    name: String,
    #[cfg(feature = "schema")]
    schema: Option<jsonschema::Validator>,
    bare: bool,
    invalid_code: String,
    schema_code: String,
    schema_hint: Option<String>,
    max_errors: usize,
}

impl std::fmt::Debug for JsonValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsonValidator")
            .field("name", &self.name)
            .field("has_schema", &self.has_schema())
            .field("bare", &self.bare)
            .finish()
    }
}

impl JsonValidator {
    /// A validator named `name` that only checks that the JSON parses.
    pub fn new(name: impl Into<String>) -> Self {
        JsonValidator {
            name: name.into(),
            #[cfg(feature = "schema")]
            schema: None,
            bare: false,
            invalid_code: INVALID_JSON.to_string(),
            schema_code: SCHEMA_VIOLATION.to_string(),
            schema_hint: None,
            max_errors: default_max_errors(),
        }
    }

    /// Adds a JSON Schema; fails when the schema itself is invalid, or when the crate was
    /// built without the feature `schema`.
    #[cfg(feature = "schema")]
    pub fn with_schema(mut self, schema: &Value) -> Result<Self, BuildError> {
        let compiled = jsonschema::validator_for(schema)
            .map_err(|e| BuildError::new(format!("invalid JSON Schema: {e}")))?;
        self.schema = Some(compiled);
        Ok(self)
    }

    /// Adds a JSON Schema; fails when the schema itself is invalid, or when the crate was
    /// built without the feature `schema`.
    #[cfg(not(feature = "schema"))]
    pub fn with_schema(self, _schema: &Value) -> Result<Self, BuildError> {
        Err(BuildError::new(
            "JSON Schema checks need enforce-validators' feature `schema`",
        ))
    }

    /// Whether a schema is checked.
    pub fn has_schema(&self) -> bool {
        #[cfg(feature = "schema")]
        return self.schema.is_some();
        #[cfg(not(feature = "schema"))]
        false
    }

    /// Code of JSON that is missing, does not parse or is wrapped (default `INVALID_JSON`).
    pub fn invalid_code(mut self, code: impl Into<String>) -> Self {
        self.invalid_code = code.into();
        self
    }

    /// Code of schema violations (default `SCHEMA_VIOLATION`).
    pub fn schema_code(mut self, code: impl Into<String>) -> Self {
        self.schema_code = code.into();
        self
    }

    /// Hint attached to every schema violation.
    pub fn schema_hint(mut self, hint: impl Into<String>) -> Self {
        self.schema_hint = Some(hint.into());
        self
    }

    /// Most schema violations reported (at least 1; default 20).
    pub fn max_errors(mut self, max: usize) -> Self {
        self.max_errors = max.max(1);
        self
    }

    /// Requires the JSON to be the whole response.
    pub fn bare(mut self, bare: bool) -> Self {
        self.bare = bare;
        self
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <JsonConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration.
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let config: JsonConfig = input.parse()?;
        let mut v = JsonValidator::new(input.name).bare(config.bare);
        v.max_errors = config.max_errors.max(1);
        if let Some(code) = config.invalid_code {
            v.invalid_code = code;
        }
        if let Some(code) = config.schema_code {
            v.schema_code = code;
        }
        v.schema_hint = config.schema_hint;
        let schema = match (config.schema, config.schema_file) {
            (Some(_), Some(_)) => {
                return Err(BuildError::at(
                    "schema_file",
                    "give either 'schema' or 'schema_file', not both",
                ))
            }
            (Some(schema), None) => Some((schema, "schema")),
            (None, Some(file)) => {
                let schema = input
                    .read_document(&file)
                    .map_err(|e| BuildError::at("schema_file", e))?;
                Some((schema, "schema_file"))
            }
            (None, None) => None,
        };
        if let Some((schema, key)) = schema {
            v = v
                .with_schema(&schema)
                .map_err(|e| BuildError::at(key, e.message))?;
        }
        Ok(v)
    }

    fn parse_error(&self, text: &str) -> Issue {
        // Report the parse error of the most likely candidate: a JSON fence, else the whole text.
        let (candidate, offset) = fences(text)
            .into_iter()
            .find(|f| f.language.starts_with("json"))
            .map(|f| {
                let r = trimmed_range(text, f.content);
                (&text[r.clone()], r.start)
            })
            .unwrap_or_else(|| {
                let r = trimmed_range(text, 0..text.len());
                (&text[r.clone()], r.start)
            });
        let issue = Issue::error(
            &self.name,
            self.invalid_code.clone(),
            "The response holds no valid JSON.",
        )
        .with_hint("Answer with one valid JSON document.");
        if candidate.is_empty() {
            return issue.with_hint("Answer with one valid JSON document; the response is empty.");
        }
        match serde_json::from_str::<Value>(candidate) {
            Ok(_) => issue,
            Err(e) => {
                let line_offset = crate::text::line_of_offset(text, offset).saturating_sub(1);
                let line = u32::try_from(e.line())
                    .unwrap_or(u32::MAX)
                    .saturating_add(line_offset);
                let column = u32::try_from(e.column()).unwrap_or(u32::MAX);
                Issue {
                    message: format!("The JSON does not parse: {e}."),
                    ..issue
                }
                .at(line.max(1), column.max(1))
            }
        }
    }
}

impl JsonValidator {
    /// The issue of a text that stopped being JSON at byte `at`.
    fn broken_at(&self, text: &str, at: usize) -> Issue {
        let found = text.get(at..).and_then(|t| t.chars().next()).unwrap_or(' ');
        Issue::error(
            &self.name,
            self.invalid_code.clone(),
            format!("The JSON cannot become valid: unexpected {found:?}."),
        )
        .with_hint("Answer with one valid JSON document and nothing else.")
        .at(crate::text::line_of_offset(text, at), column_of(text, at))
    }
}

/// Where the JSON of a streamed answer starts, as far as the partial check is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lead {
    /// Not known yet: only whitespace, or an opening fence line not ended yet.
    Undecided,
    /// The value starts at this byte: the answer's first character, or the first after a
    /// JSON fence that opens the answer.
    Value(usize),
    /// The answer starts with something else (prose, another fence): the JSON may come
    /// anywhere and the repair may pull it out, so nothing about it is definite.
    Other,
}

/// Where the value of `prefix` starts (see [`Lead`]).
fn lead(prefix: &str) -> Lead {
    let body = prefix.trim_start();
    let at = prefix.len() - body.len();
    match body.chars().next() {
        None => Lead::Undecided,
        Some('{' | '[') => Lead::Value(at),
        Some(c @ ('`' | '~')) => {
            let Some(line_end) = body.find('\n') else {
                return Lead::Undecided;
            };
            let line = &body[..line_end];
            let run = line.chars().take_while(|&x| x == c).count();
            let language = line[run..].trim().to_ascii_lowercase();
            let json = matches!(language.as_str(), "json" | "jsonc" | "json5" | "");
            if run < 3 || !json {
                return Lead::Other;
            }
            let content = &body[line_end + 1..];
            let inner = content.trim_start();
            match inner.chars().next() {
                None => Lead::Undecided,
                Some('{' | '[') => Lead::Value(prefix.len() - inner.len()),
                Some(_) => Lead::Other,
            }
        }
        Some(_) => Lead::Other,
    }
}

/// The partial check of a bare [`JsonValidator`]: the grammar of the value the answer opens
/// with, incrementally; the whole validation of that value once it is complete.
///
/// It judges only what the repair cannot change: the value that starts the answer, alone or
/// as the first thing in a JSON fence (the repair strips the fence, so the fence is never an
/// error here). Text after the value (a closing fence, a remark) is not judged: the repair
/// strips it. An answer that opens with prose is not judged at all: the JSON may come later,
/// and the repair pulls it out of the prose.
struct JsonCheck<'a> {
    validator: &'a JsonValidator,
    context: &'a Context,
    lead: Lead,
    scanner: JsonPrefix,
    /// The verdict on the complete value.
    judged: Option<Vec<Issue>>,
}

#[async_trait]
impl PartialCheck for JsonCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        if self.lead == Lead::Undecided {
            self.lead = lead(prefix);
            if let Lead::Value(start) = self.lead {
                self.scanner = JsonPrefix::starting_at(start);
            }
        }
        let Lead::Value(start) = self.lead else {
            return Vec::new();
        };
        let failed = self.scanner.feed(prefix);
        let ended = self.scanner.ended();
        match (failed, ended) {
            // Broken before the value ended: no continuation mends it.
            (Some(at), None) => return vec![self.validator.broken_at(prefix, at)],
            (_, Some(end)) => {
                if self.judged.is_none() {
                    let value = prefix.get(start..end).unwrap_or_default();
                    let verdict = self.validator.validate(value, self.context).await;
                    // The issues' lines count from the value's first line.
                    let shift = crate::text::line_of_offset(prefix, start).saturating_sub(1);
                    let issues = verdict
                        .unwrap_or_default()
                        .into_iter()
                        .map(|mut issue| {
                            issue.line = issue.line.map(|l| l.saturating_add(shift));
                            issue
                        })
                        .collect();
                    self.judged = Some(issues);
                }
                self.judged.clone().unwrap_or_default()
            }
            (None, None) => Vec::new(),
        }
    }
}

#[async_trait]
impl Validator for JsonValidator {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let Some(span) = locate_json(response) else {
            return Ok(vec![self.parse_error(response)]);
        };
        let mut issues = Vec::new();
        let line = crate::text::line_of_offset(response, span.range.start);
        match span.form {
            JsonForm::Whole => {}
            JsonForm::Fenced if !self.bare => {}
            JsonForm::Fenced => issues.push(
                Issue::error(&self.name, self.invalid_code.clone(), WRAPPED_IN_FENCE)
                    .with_hint("Answer with the JSON alone, without a code fence.")
                    .at_line(line),
            ),
            JsonForm::Embedded => issues.push(
                Issue::error(&self.name, self.invalid_code.clone(), SURROUNDED_BY_TEXT)
                    .with_hint("Answer with the JSON alone, without text before or after it.")
                    .at_line(line),
            ),
        }
        #[cfg(feature = "schema")]
        if let Some(schema) = &self.schema {
            for error in schema.iter_errors(&span.value).take(self.max_errors) {
                let path = error.instance_path().to_string();
                let at = if path.is_empty() {
                    "/".to_string()
                } else {
                    path
                };
                let mut issue = Issue::error(
                    &self.name,
                    self.schema_code.clone(),
                    format!("At {at}: {error}"),
                )
                .at_line(line);
                if let Some(hint) = &self.schema_hint {
                    issue = issue.with_hint(hint.clone());
                }
                issues.push(issue);
            }
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        // Without `bare`, a fenced block further on could still hold valid JSON.
        if !self.bare {
            return None;
        }
        Some(Box::new(JsonCheck {
            validator: self,
            context,
            lead: Lead::Undecided,
            scanner: JsonPrefix::new(),
            judged: None,
        }))
    }

    /// Only the wrapping (a fence, prose around the JSON): a JSON that does not parse
    /// (a trailing comma, a missing bracket) is for the model to fix.
    fn repair_fixes(&self, issue: &Issue) -> bool {
        issue.code == self.invalid_code
            && (issue.message == WRAPPED_IN_FENCE || issue.message == SURROUNDED_BY_TEXT)
    }

    fn repair(&self, response: &str, _context: &Context, issues: &[Issue]) -> Option<String> {
        if !issues.iter().any(|i| i.code == self.invalid_code) {
            return None;
        }
        let span = locate_json(response)?;
        // An answer that opens a JSON value (bare or in a fence) and breaks it is for the model
        // to fix: another value found inside or after it is not what the answer said, and the
        // partial check has already called the break definite.
        if let Lead::Value(start) = lead(response) {
            if span.range.start != start {
                return None;
            }
        }
        match span.form {
            JsonForm::Whole => None,
            JsonForm::Fenced | JsonForm::Embedded => {
                let start = floor_char_boundary(response, span.range.start);
                Some(response.get(start..span.range.end)?.to_string())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use serde_json::json;

    fn run(v: &JsonValidator, text: &str) -> Vec<Issue> {
        block_on(v.validate(text, &Context::new())).unwrap()
    }

    #[test]
    fn plain_and_fenced_json_pass() {
        let v = JsonValidator::new("json");
        assert!(run(&v, " {\"a\": 1}\n").is_empty());
        assert!(run(&v, "Here:\n```json\n{\"a\": [1, 2]}\n```\n").is_empty());
        assert!(run(&v, "[1,2]").is_empty());
    }

    #[test]
    fn broken_json_reports_line_and_column_in_the_response() {
        let v = JsonValidator::new("json");
        let issues = run(&v, "Intro\n\n```json\n{\"a\": 1,\n \"b\": }\n```\n");
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].code, INVALID_JSON);
        assert_eq!(issues[0].line, Some(5), "{:?}", issues[0]);
        assert!(
            issues[0].message.contains("does not parse"),
            "{}",
            issues[0].message
        );
        let issues = run(&v, "");
        assert_eq!(issues[0].code, INVALID_JSON);
    }

    #[test]
    fn prose_around_json_is_invalid_and_repaired_by_stripping() {
        let v = JsonValidator::new("json");
        let text = "Sure, here you go: {\"a\": \"ü\"}\nAnything else?";
        let issues = run(&v, text);
        assert_eq!(issues[0].code, INVALID_JSON);
        let fixed = v.repair(text, &Context::new(), &issues).unwrap();
        assert_eq!(fixed, "{\"a\": \"ü\"}");
        assert!(run(&v, &fixed).is_empty());
    }

    #[test]
    fn the_repair_is_claimed_for_the_wrapping_only() {
        let v = JsonValidator::new("json").bare(true);
        let fenced = run(&v, "```json\n{\"a\": 1}\n```");
        assert!(v.repair_fixes(&fenced[0]), "{fenced:?}");
        let prose = run(&v, "Sure: {\"a\": 1}");
        assert!(v.repair_fixes(&prose[0]), "{prose:?}");
        // No repair fixes a trailing comma: asking again must stay possible.
        let comma = run(&v, "{\"a\": 1,}");
        assert!(!v.repair_fixes(&comma[0]), "{comma:?}");
        assert_eq!(v.repair("{\"a\": 1,}", &Context::new(), &comma), None);
        assert!(
            comma[0].repairable,
            "a re-ask may still fix it: no hard abort"
        );
    }

    #[test]
    fn bare_mode_rejects_fences_and_repairs_them() {
        let v = JsonValidator::new("json").bare(true);
        let text = "```json\n{\"a\": 1}\n```";
        let issues = run(&v, text);
        assert_eq!(issues[0].code, INVALID_JSON);
        assert_eq!(
            v.repair(text, &Context::new(), &issues).unwrap(),
            "{\"a\": 1}"
        );
    }

    #[test]
    fn schema_violations_name_the_path() {
        let v = JsonValidator::new("json")
            .with_schema(&json!({
                "type": "object",
                "required": ["blockId", "text"],
                "properties": {"text": {"type": "string"}, "list": {"maxItems": 0}}
            }))
            .unwrap();
        let issues = run(&v, r#"{"text": 3, "list": ["x"]}"#);
        let codes: Vec<_> = issues.iter().map(|i| i.code.as_str()).collect();
        assert_eq!(codes, vec![SCHEMA_VIOLATION; 3], "{issues:?}");
        assert!(
            issues.iter().any(|i| i.message.contains("/text")),
            "{issues:?}"
        );
        assert!(
            issues.iter().any(|i| i.message.contains("blockId")),
            "{issues:?}"
        );
        assert!(run(&v, r#"{"blockId": "b", "text": "t"}"#).is_empty());
    }

    /// Every code of the validator can be renamed from configuration, and the repair still
    /// recognises its own issue under the new name.
    #[test]
    fn every_code_can_be_renamed() {
        let spec = json!({
            "invalid_code": "JSON_VALID",
            "schema_code": "JSON_FIELDS",
            "schema": {"type": "object", "required": ["text"]},
        });
        let v = JsonValidator::from_config(&FactoryInput::new("block", &spec)).unwrap();
        let broken = run(&v, "kein JSON");
        assert_eq!(broken[0].code, "JSON_VALID", "{broken:?}");
        let wrapped = "Hier: {\"text\": \"t\"}";
        let issues = run(&v, wrapped);
        assert_eq!(issues[0].code, "JSON_VALID", "{issues:?}");
        assert!(v.repair_fixes(&issues[0]));
        assert_eq!(
            v.repair(wrapped, &Context::new(), &issues).as_deref(),
            Some("{\"text\": \"t\"}")
        );
        assert_eq!(run(&v, "{}")[0].code, "JSON_FIELDS");
    }

    #[test]
    fn invalid_schema_is_a_build_error() {
        assert!(JsonValidator::new("j")
            .with_schema(&json!({"type": "no-such-type"}))
            .is_err());
    }

    #[test]
    fn nasty_inputs_do_not_panic() {
        let v = JsonValidator::new("json");
        let deep = "[".repeat(100_000);
        assert_eq!(run(&v, &deep)[0].code, INVALID_JSON);
        let deep_ok = format!("{}{}", "[".repeat(200), "]".repeat(200));
        // serde_json refuses more than 128 levels: an issue, not a crash.
        assert_eq!(run(&v, &deep_ok)[0].code, INVALID_JSON);
        assert_eq!(run(&v, "{ünïcödé")[0].code, INVALID_JSON);
        let big = format!("{{\"a\": \"{}\"}}", "x".repeat(10 * 1024 * 1024));
        assert!(run(&v, &big).is_empty());
        assert_eq!(run(&v, "} {")[0].code, INVALID_JSON);
    }
}
