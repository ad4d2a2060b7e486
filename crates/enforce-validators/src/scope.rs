//! Points any validator at a part of the response, or makes it conditional: the `input` and
//! `when` keys every validator spec accepts.
//!
//! Structured answers (a JSON object with a `text` field, a `blockType`, ...) need rules such as
//! "at most 200 words in `text` when `blockType` is `introduction`". Instead of teaching every
//! validator about JSON, the registry wraps the validator:
//!
//! ```yaml
//! validators:
//!   intro_length:
//!     type: length
//!     input: { json: /text }                        # JSON pointer into the response's JSON
//!     when: { json: /blockType, equals: introduction }
//!     max: 200
//!   sanitised:
//!     type: pattern
//!     input: { context: sanitized }                 # a request-context value instead
//!     required: [{ regex: '^true$', code: SANITIZATION_PASSED, repairable: false }]
//!   safe_sql:
//!     type: pattern
//!     input: { tool: run_sql, json: /query }        # the arguments of every call to a tool
//!     forbidden: [{ regex: '(?i)\bdrop\b', code: DANGEROUS_SQL }]
//! ```
//!
//! A validator scoped to a tool checks the arguments of each call of that tool in the reply
//! (the whole arguments, or the value at `json` inside them) and nothing else; a reply without
//! such a call passes. Arguments that are not JSON are left to the built-in tool checks
//! (`INVALID_TOOL_ARGUMENTS`). Every other validator checks the text of the reply only: a reply
//! that only calls tools passes it.
//!
//! The response's JSON is found as the `json` validator finds it (the whole response, a fenced
//! block, or an object inside prose). When the selected value is missing, the validator is
//! skipped: enforcing that a field exists is the job of a JSON Schema. A string value is checked
//! as it is; any other JSON value as its JSON text. Issues about a selected value carry no line
//! (lines would point into the value, not the response). Repairs of a JSON string field write
//! the repaired string back into the JSON.

use crate::error::BuildError;
use crate::text::{locate_json, JsonForm, JsonSpan};
use enforce_core::{async_trait, Context, Issue, PartialCheck, Reply, Validation, Validator};
use serde::Deserialize;
use serde_json::{Map, Value};

/// Where a scoped validator reads its input.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Source {
    /// The value at this JSON pointer inside the response's JSON.
    Json(String),
    /// The request-context value under this key.
    Context(String),
    /// The arguments of each call of a tool (only as an `input`, not in `when`).
    Tool {
        /// The tool's name.
        name: String,
        /// A JSON pointer inside the arguments (`None`: the whole arguments).
        pointer: Option<String>,
    },
}

/// Where the validator reads its input: exactly one of `json` and `context`, or `tool` with an
/// optional `json` pointer into its arguments.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "ScopeSource",
        // `key: ~` is no key to the parser: "given" means present and not null.
        extend("oneOf" = [
            {"required": ["json"], "not": {"required": ["tool"]}, "properties": {"json": {"type": "string"}}},
            {"required": ["context"], "properties": {"context": {"type": "string"}}},
            {"required": ["tool"], "properties": {"tool": {"type": "string"}}}
        ])
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SourceSpec {
    /// JSON pointer into the response's JSON (`/text`), or into the tool's arguments with
    /// `tool`.
    #[cfg_attr(feature = "config-schema", schemars(extend("pattern" = "^(/|$)")))]
    json: Option<String>,
    /// Key of a request-context value.
    context: Option<String>,
    /// A tool's name: check the arguments of each call of it.
    #[serde(default)]
    tool: Option<String>,
}

fn checked_pointer(pointer: String) -> Result<String, BuildError> {
    if pointer.is_empty() || pointer.starts_with('/') {
        Ok(pointer)
    } else {
        Err(BuildError::at(
            "json",
            format!("a JSON pointer starts with '/', e.g. '/{pointer}'"),
        ))
    }
}

impl SourceSpec {
    fn into_source(self) -> Result<Source, BuildError> {
        match (self.json, self.context, self.tool) {
            (Some(pointer), None, None) => Ok(Source::Json(checked_pointer(pointer)?)),
            (None, Some(key), None) => Ok(Source::Context(key)),
            (pointer, None, Some(name)) if !name.trim().is_empty() => Ok(Source::Tool {
                name,
                pointer: pointer.map(checked_pointer).transpose()?,
            }),
            (_, None, Some(_)) => Err(BuildError::at("tool", "name the tool")),
            _ => Err(BuildError::new(
                "give exactly one of 'json' (a JSON pointer), 'context' (a context key) or 'tool' (a tool name, with an optional 'json' pointer into its arguments)",
            )),
        }
    }
}

/// One condition of `when`.
#[derive(Debug, Clone, PartialEq)]
pub struct Condition {
    source: Source,
    test: Test,
}

#[derive(Debug, Clone, PartialEq)]
enum Test {
    /// The value exists and is not null.
    Present,
    /// The value does not exist or is null.
    Absent,
    /// The value equals one of these.
    OneOf(Vec<Value>),
}

/// A condition: a value (exactly one of `json` and `context`) and at most one test of
/// `equals`, `one_of` and `present` (default: present).
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "ScopeCondition",
        // `key: ~` is no key to the parser: "given" means present and not null.
        extend(
            "oneOf" = [
                {"required": ["json"], "properties": {"json": {"type": "string"}}},
                {"required": ["context"], "properties": {"context": {"type": "string"}}}
            ],
            "not" = {"anyOf": [
                {
                    "required": ["equals", "one_of"],
                    "properties": {"equals": {"not": {"type": "null"}}, "one_of": {"type": "array"}}
                },
                {
                    "required": ["equals", "present"],
                    "properties": {"equals": {"not": {"type": "null"}}, "present": {"type": "boolean"}}
                },
                {
                    "required": ["one_of", "present"],
                    "properties": {"one_of": {"type": "array"}, "present": {"type": "boolean"}}
                }
            ]}
        )
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConditionSpec {
    /// JSON pointer into the response's JSON (`/blockType`).
    #[cfg_attr(feature = "config-schema", schemars(extend("pattern" = "^(/|$)")))]
    json: Option<String>,
    /// Key of a request-context value.
    context: Option<String>,
    /// Holds when the value equals this.
    equals: Option<Value>,
    /// Holds when the value equals one of these.
    one_of: Option<Vec<Value>>,
    /// `true`: holds when the value exists and is not null; `false`: when it does not.
    present: Option<bool>,
}

/// `response` (the whole response), `{json: /pointer}` or `{context: key}`.
#[cfg(feature = "config-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(untagged, rename = "ScopeInput")]
#[allow(dead_code)] // only its schema is used
enum InputSpec {
    /// `response`: the whole response (the default).
    Response(ResponseKeyword),
    /// A JSON field or a context value.
    Source(SourceSpec),
}

/// The word `response`.
#[cfg(feature = "config-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(rename_all = "lowercase", rename = "ScopeWholeResponse")]
#[allow(dead_code)] // only its schema is used
enum ResponseKeyword {
    /// The whole response.
    Response,
}

/// One condition, or a list of conditions that must all hold.
#[cfg(feature = "config-schema")]
#[derive(schemars::JsonSchema)]
#[schemars(untagged, rename = "ScopeWhen")]
#[allow(dead_code)] // only its schema is used
enum WhenSpec {
    /// One condition.
    One(ConditionSpec),
    /// Conditions that must all hold.
    All(Vec<ConditionSpec>),
}

impl ConditionSpec {
    fn into_condition(self) -> Result<Condition, BuildError> {
        let source = SourceSpec {
            json: self.json,
            context: self.context,
            tool: None,
        }
        .into_source()?;
        let test = match (self.equals, self.one_of, self.present) {
            (None, None, None) | (None, None, Some(true)) => Test::Present,
            (None, None, Some(false)) => Test::Absent,
            (Some(v), None, None) => Test::OneOf(vec![v]),
            (None, Some(vs), None) => Test::OneOf(vs),
            _ => {
                return Err(BuildError::new(
                    "give at most one of 'equals', 'one_of' and 'present'",
                ))
            }
        };
        Ok(Condition { source, test })
    }
}

impl Condition {
    /// Holds when the value exists and is not null.
    pub fn present(source: Source) -> Self {
        Condition {
            source,
            test: Test::Present,
        }
    }

    /// Holds when the value does not exist or is null.
    pub fn absent(source: Source) -> Self {
        Condition {
            source,
            test: Test::Absent,
        }
    }

    /// Holds when the value equals `value`.
    pub fn equals(source: Source, value: impl Into<Value>) -> Self {
        Condition {
            source,
            test: Test::OneOf(vec![value.into()]),
        }
    }

    /// Holds when the value equals one of `values`.
    pub fn one_of<V: Into<Value>>(source: Source, values: impl IntoIterator<Item = V>) -> Self {
        Condition {
            source,
            test: Test::OneOf(values.into_iter().map(Into::into).collect()),
        }
    }
}

/// The `input` and `when` of one validator spec.
///
/// Built from configuration with [`Scope::from_spec`], or in code:
///
/// ```
/// use enforce_core::{Context, Validator};
/// use enforce_validators::length::{Bound, Length, Unit};
/// use enforce_validators::scope::{Condition, Scope, ScopeExt, Source};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
/// // At most 3 words in `text`, but only for introductions.
/// let intro = Length::new("intro", Unit::Words, None, Some(Bound::error(3))).scoped(
///     Scope::default()
///         .input(Source::Json("/text".into()))
///         .when(Condition::equals(Source::Json("/blockType".into()), "introduction")),
/// );
/// let ctx = Context::new();
/// let long = r#"{"blockType": "introduction", "text": "one two three four"}"#;
/// assert_eq!(block_on(intro.validate(long, &ctx)).unwrap()[0].code, "TOO_LONG");
/// let other = r#"{"blockType": "summary", "text": "one two three four"}"#;
/// assert!(block_on(intro.validate(other, &ctx)).unwrap().is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Scope {
    input: Option<Source>,
    when: Vec<Condition>,
}

impl Scope {
    /// Checks `source` instead of the whole response.
    pub fn input(mut self, source: Source) -> Self {
        self.input = Some(source);
        self
    }

    /// Applies the validator only when `condition` holds (all conditions must hold).
    pub fn when(mut self, condition: Condition) -> Self {
        self.when.push(condition);
        self
    }

    /// The JSON Schema of the `input` key [`from_spec`](Self::from_spec) reads; the types it
    /// refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn input_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<InputSpec>()
    }

    /// The JSON Schema of the `when` key [`from_spec`](Self::from_spec) reads.
    #[cfg(feature = "config-schema")]
    pub fn when_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        generator.subschema_for::<WhenSpec>()
    }

    /// Reads `input` and `when` from a validator spec; `None` when neither is given.
    pub fn from_spec(spec: &Map<String, Value>) -> Result<Option<Scope>, BuildError> {
        let input = match spec.get("input") {
            None => None,
            Some(Value::String(s)) if s == "response" => None,
            Some(v) => {
                let parsed: SourceSpec = serde_path_to_error::deserialize(v)
                    .map_err(|e| BuildError::from(e).prefixed("input"))?;
                Some(parsed.into_source().map_err(|e| e.prefixed("input"))?)
            }
        };
        let when = match spec.get("when") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, item)| {
                    let key = format!("when[{i}]");
                    let parsed: ConditionSpec = serde_path_to_error::deserialize(item)
                        .map_err(|e| BuildError::from(e).prefixed(&key))?;
                    parsed.into_condition().map_err(|e| e.prefixed(&key))
                })
                .collect::<Result<_, _>>()?,
            Some(item) => {
                let parsed: ConditionSpec = serde_path_to_error::deserialize(item)
                    .map_err(|e| BuildError::from(e).prefixed("when"))?;
                vec![parsed.into_condition().map_err(|e| e.prefixed("when"))?]
            }
        };
        if input.is_none() && when.is_empty() {
            return Ok(None);
        }
        Ok(Some(Scope { input, when }))
    }
}

/// `.scoped(scope)` on every validator: wraps it in [`Scoped`].
pub trait ScopeExt: Validator + Sized + 'static {
    /// This validator, checking only what `scope` selects.
    fn scoped(self, scope: Scope) -> Scoped {
        Scoped::new(Box::new(self), scope)
    }
}

impl<V: Validator + Sized + 'static> ScopeExt for V {}

/// A validator wrapped by a [`Scope`].
pub struct Scoped {
    inner: Box<dyn Validator>,
    scope: Scope,
}

impl std::fmt::Debug for Scoped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scoped")
            .field("inner", &self.inner.name())
            .field("scope", &self.scope)
            .finish()
    }
}

impl Scoped {
    /// Wraps `inner`.
    pub fn new(inner: Box<dyn Validator>, scope: Scope) -> Self {
        Scoped { inner, scope }
    }

    fn holds(
        &self,
        response: &str,
        context: &Context,
        json: &mut Option<Option<JsonSpan>>,
    ) -> bool {
        self.scope.when.iter().all(|c| {
            let value = lookup(&c.source, response, context, json);
            match &c.test {
                Test::Present => value.is_some_and(|v| !v.is_null()),
                Test::Absent => value.is_none_or(|v| v.is_null()),
                Test::OneOf(options) => value.is_some_and(|v| options.contains(&v)),
            }
        })
    }
}

/// The value `source` selects; `json` caches the response's JSON between lookups.
fn lookup(
    source: &Source,
    response: &str,
    context: &Context,
    json: &mut Option<Option<JsonSpan>>,
) -> Option<Value> {
    match source {
        Source::Context(key) => context.get(key).cloned(),
        Source::Json(pointer) => json
            .get_or_insert_with(|| locate_json(response))
            .as_ref()
            .and_then(|span| span.value.pointer(pointer).cloned()),
        // Tool arguments are not in the text; `validate_reply` reads them.
        Source::Tool { .. } => None,
    }
}

/// The values a tool source selects in `reply`: one per call of the tool whose arguments parse
/// and hold the pointer.
fn tool_values(reply: &Reply, name: &str, pointer: Option<&str>) -> Vec<(String, Value)> {
    reply
        .tool_calls
        .iter()
        .filter(|call| call.name == name)
        .filter_map(|call| {
            let arguments: Value = serde_json::from_str(&call.arguments).ok()?;
            let value = match pointer {
                None => arguments,
                Some(p) => arguments.pointer(p)?.clone(),
            };
            Some((call.id.clone(), value))
        })
        .collect()
}

/// Positions inside a selected value do not point into the response.
fn without_position(mut issue: Issue) -> Issue {
    issue.line = None;
    issue.column = None;
    issue
}

fn as_text(value: Value) -> String {
    match value {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

#[async_trait]
impl Validator for Scoped {
    fn name(&self) -> &str {
        self.inner.name()
    }

    /// What the scope does not change (the fail mode, the unavailable status) is the inner
    /// validator's.
    fn wrapped(&self) -> Option<&dyn Validator> {
        Some(self.inner.as_ref())
    }

    /// Never a group: opened up, its members would run outside the scope.
    fn members(&self) -> Option<Vec<&dyn Validator>> {
        None
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        let mut json = None;
        if !self.holds(response, context, &mut json) {
            return Ok(Vec::new());
        }
        let Some(source) = &self.scope.input else {
            return self.inner.validate(response, context).await;
        };
        let Some(value) = lookup(source, response, context, &mut json) else {
            return Ok(Vec::new());
        };
        let text = as_text(value);
        let issues = self.inner.validate(&text, context).await?;
        Ok(issues.into_iter().map(without_position).collect())
    }

    async fn validate_reply(&self, reply: &Reply, context: &Context) -> Validation {
        let Some(Source::Tool { name, pointer }) = &self.scope.input else {
            if reply.only_tool_calls() {
                return Ok(Vec::new());
            }
            return self.validate(&reply.text, context).await;
        };
        if !self.holds(&reply.text, context, &mut None) {
            return Ok(Vec::new());
        }
        let mut issues = Vec::new();
        for (call_id, value) in tool_values(reply, name, pointer.as_deref()) {
            let found = self.inner.validate(&as_text(value), context).await?;
            issues.extend(found.into_iter().map(|issue| {
                let mut issue = without_position(issue);
                issue.message = format!(
                    "In the arguments of the call {call_id} to `{name}`: {}",
                    issue.message
                );
                issue
            }));
        }
        Ok(issues)
    }

    fn reads_request(&self) -> bool {
        self.inner.reads_request()
    }

    fn reads_response(&self) -> bool {
        // Pointed at a context value, under conditions on the context alone, the verdict is
        // about the request, not the response.
        let on_context = |source: &Source| matches!(source, Source::Context(_));
        let about_request = self.scope.input.as_ref().is_some_and(on_context)
            && self.scope.when.iter().all(|c| on_context(&c.source));
        !about_request && self.inner.reads_response()
    }

    /// The inner validator's partial check, when the scope can be decided before the answer
    /// is complete: the input is the whole response and every condition reads the context. A
    /// scope that reads the response's JSON waits for the whole answer.
    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        let decidable = self.scope.input.is_none()
            && self
                .scope
                .when
                .iter()
                .all(|c| matches!(c.source, Source::Context(_)));
        if !decidable || !self.holds("", context, &mut None) {
            return None;
        }
        self.inner.partial_check(context)
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        self.scope.input.is_none() && self.inner.repair_fixes(issue)
    }

    fn repair(&self, response: &str, context: &Context, issues: &[Issue]) -> Option<String> {
        let mut json = None;
        if !self.holds(response, context, &mut json) {
            return None;
        }
        let Some(source) = &self.scope.input else {
            return self.inner.repair(response, context, issues);
        };
        let Source::Json(pointer) = source else {
            return None; // a context value or a tool call is not part of the text
        };
        let mut span = json.get_or_insert_with(|| locate_json(response)).take()?;
        let field = span.value.pointer_mut(pointer)?;
        let Value::String(text) = field else {
            return None;
        };
        let repaired = self.inner.repair(text, context, issues)?;
        *field = Value::String(repaired);
        let rendered = serde_json::to_string_pretty(&span.value).ok()?;
        let mut out = String::with_capacity(response.len());
        match span.form {
            JsonForm::Whole | JsonForm::Embedded => {
                out.push_str(&response[..span.range.start]);
                out.push_str(&rendered);
                out.push_str(&response[span.range.end..]);
            }
            JsonForm::Fenced => {
                out.push_str(&response[..span.range.start]);
                out.push_str(&rendered);
                out.push('\n');
                out.push_str(&response[span.range.end..]);
            }
        }
        Some(out)
    }
}
