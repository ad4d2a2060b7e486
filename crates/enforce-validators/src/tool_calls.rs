//! Checks of a reply's tool calls against the tools the request declared: [`ToolCalls`].
//!
//! A proxy builds one per request from the request's OpenAI `tools` array and hands it to the
//! loop with [`Enforcer::run_with`](enforce_core::Enforcer::run_with), so a model that calls a
//! tool that does not exist, or writes arguments that are not JSON or break the tool's
//! `parameters` schema, is re-asked like for any other error.
//!
//! ```
//! use enforce_core::{Context, Reply, runner::ToolCall, Validator};
//! use enforce_validators::tool_calls::ToolCalls;
//! use serde_json::json;
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let tools = json!([{"type": "function", "function": {"name": "get_weather",
//!     "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
//!                    "required": ["city"]}}}]);
//! let checks = ToolCalls::from_declared(&tools);
//! let reply = Reply {
//!     tool_calls: vec![ToolCall::new("call_1", "get_weather", r#"{"city": 7}"#)],
//!     ..Reply::default()
//! };
//! let issues = block_on(checks.validate_reply(&reply, &Context::new())).unwrap();
//! assert_eq!(issues[0].code, "INVALID_TOOL_ARGUMENTS");
//! assert!(issues[0].message.contains("/city"));
//! ```

use enforce_core::{async_trait, runner::ToolCall, Context, Issue, Reply, Validation, Validator};
use serde_json::Value;
use std::collections::BTreeMap;

/// Code of a call to a tool the request did not declare.
pub const UNKNOWN_TOOL: &str = "UNKNOWN_TOOL";
/// Code of call arguments that are not JSON or break the tool's `parameters` schema.
pub const INVALID_TOOL_ARGUMENTS: &str = "INVALID_TOOL_ARGUMENTS";
/// The name issues of [`ToolCalls`] carry.
pub const TOOL_CALLS: &str = "tool_calls";

/// At most this many declared names are listed in an `UNKNOWN_TOOL` hint.
const LISTED_NAMES: usize = 20;

/// One declared tool.
struct Declared {
    /// The compiled `parameters` schema; `None` when the tool has none (or, without the
    /// `schema` feature, always).
    #[cfg(feature = "schema")]
    schema: Option<jsonschema::Validator>,
}

/// The checks of tool calls against the declared tools: see the [module](self).
pub struct ToolCalls {
    tools: BTreeMap<String, Declared>,
    /// Tools whose `parameters` could not be compiled: their arguments get the JSON check only.
    unchecked: Vec<String>,
    max_errors: usize,
}

impl std::fmt::Debug for ToolCalls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolCalls")
            .field("tools", &self.tools.keys().collect::<Vec<_>>())
            .field("unchecked", &self.unchecked)
            .finish()
    }
}

impl ToolCalls {
    /// The checks for an OpenAI `tools` array
    /// (`[{"type": "function", "function": {"name", "parameters"}}]`).
    ///
    /// Never fails: the array comes from a client, and a tool the proxy cannot read must not
    /// break the request. Entries without a name are ignored; a `parameters` schema that does not
    /// compile leaves that tool with the JSON check only (see [`unchecked`](Self::unchecked)).
    pub fn from_declared(tools: &Value) -> Self {
        let mut checks = ToolCalls {
            tools: BTreeMap::new(),
            unchecked: Vec::new(),
            max_errors: 5,
        };
        for entry in tools.as_array().map(Vec::as_slice).unwrap_or_default() {
            // Chat completions nest the function; a flat `{name, parameters}` is accepted too.
            let function = entry.get("function").unwrap_or(entry);
            let Some(name) = function.get("name").and_then(Value::as_str) else {
                continue;
            };
            let parameters = function.get("parameters").filter(|p| !p.is_null());
            let declared = checks.compile(name, parameters);
            checks.tools.insert(name.to_string(), declared);
        }
        checks
    }

    #[cfg(feature = "schema")]
    fn compile(&mut self, name: &str, parameters: Option<&Value>) -> Declared {
        let schema = parameters.and_then(|p| match jsonschema::validator_for(p) {
            Ok(compiled) => Some(compiled),
            Err(_) => {
                self.unchecked.push(name.to_string());
                None
            }
        });
        Declared { schema }
    }

    #[cfg(not(feature = "schema"))]
    fn compile(&mut self, name: &str, parameters: Option<&Value>) -> Declared {
        if parameters.is_some() {
            self.unchecked.push(name.to_string());
        }
        Declared {}
    }

    /// The declared tool names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.tools.keys().map(String::as_str)
    }

    /// The tools whose `parameters` schema is not checked (it did not compile, or the crate was
    /// built without the `schema` feature).
    pub fn unchecked(&self) -> &[String] {
        &self.unchecked
    }

    /// Reports at most `max` schema errors per call (default 5).
    pub fn max_errors(mut self, max: usize) -> Self {
        self.max_errors = max.max(1);
        self
    }

    fn check_call(&self, call: &ToolCall, issues: &mut Vec<Issue>) {
        let Some(declared) = self.tools.get(&call.name) else {
            let mut names: Vec<&str> = self.names().take(LISTED_NAMES).collect();
            if self.tools.len() > LISTED_NAMES {
                names.push("…");
            }
            let hint = if names.is_empty() {
                "No tools are available: answer in text.".to_string()
            } else {
                format!("Call one of the declared tools: {}.", names.join(", "))
            };
            issues.push(
                Issue::error(
                    TOOL_CALLS,
                    UNKNOWN_TOOL,
                    format!(
                        "The call {} names the tool `{}`, which is not declared.",
                        call.id, call.name
                    ),
                )
                .with_hint(hint),
            );
            return;
        };
        // A tool without parameters is often called with no argument text at all.
        let text = if call.arguments.trim().is_empty() {
            "{}"
        } else {
            call.arguments.as_str()
        };
        let arguments: Value = match serde_json::from_str(text) {
            Ok(value) => value,
            Err(e) => {
                let line = u32::try_from(e.line()).unwrap_or(u32::MAX).max(1);
                let column = u32::try_from(e.column()).unwrap_or(u32::MAX).max(1);
                issues.push(
                    Issue::error(
                        TOOL_CALLS,
                        INVALID_TOOL_ARGUMENTS,
                        format!(
                            "The arguments of the call {} to `{}` are not valid JSON: {e}.",
                            call.id, call.name
                        ),
                    )
                    .with_hint("Call the tool again with its arguments as one JSON object.")
                    .at(line, column),
                );
                return;
            }
        };
        self.check_schema(declared, call, &arguments, issues);
    }

    #[cfg(feature = "schema")]
    fn check_schema(
        &self,
        declared: &Declared,
        call: &ToolCall,
        arguments: &Value,
        issues: &mut Vec<Issue>,
    ) {
        let Some(schema) = &declared.schema else {
            return;
        };
        for error in schema.iter_errors(arguments).take(self.max_errors) {
            let path = error.instance_path().to_string();
            let at = if path.is_empty() { "/" } else { &path };
            issues.push(
                Issue::error(
                    TOOL_CALLS,
                    INVALID_TOOL_ARGUMENTS,
                    format!(
                        "The arguments of the call {} to `{}` break its parameters schema at {at}: {error}.",
                        call.id, call.name
                    ),
                )
                .with_hint(format!(
                    "Call `{}` again with arguments that match its `parameters` schema.",
                    call.name
                )),
            );
        }
    }

    #[cfg(not(feature = "schema"))]
    fn check_schema(&self, _: &Declared, _: &ToolCall, _: &Value, _: &mut Vec<Issue>) {}
}

#[async_trait]
impl Validator for ToolCalls {
    fn name(&self) -> &str {
        TOOL_CALLS
    }

    /// A text has no tool calls: nothing to check.
    async fn validate(&self, _response: &str, _context: &Context) -> Validation {
        Ok(Vec::new())
    }

    async fn validate_reply(&self, reply: &Reply, _context: &Context) -> Validation {
        let mut issues = Vec::new();
        for call in &reply.tool_calls {
            self.check_call(call, &mut issues);
        }
        Ok(issues)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::block_on;
    use serde_json::json;

    fn tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
                "required": ["city"], "additionalProperties": false}}},
            {"type": "function", "function": {"name": "now"}},
            {"type": "function", "function": {"name": "broken", "parameters": {"type": 12}}},
            {"type": "function", "function": {"description": "no name"}},
        ])
    }

    fn issues(calls: &[(&str, &str)]) -> Vec<Issue> {
        let reply = Reply {
            tool_calls: calls
                .iter()
                .enumerate()
                .map(|(i, (name, args))| ToolCall::new(format!("call_{i}"), *name, *args))
                .collect(),
            ..Reply::default()
        };
        block_on(ToolCalls::from_declared(&tools()).validate_reply(&reply, &Context::new()))
            .unwrap()
    }

    #[test]
    fn declared_calls_with_good_arguments_pass() {
        assert!(issues(&[
            ("get_weather", r#"{"city": "Oslo", "days": 2}"#),
            ("now", ""),
            ("now", "{}"),
        ])
        .is_empty());
    }

    #[test]
    fn unknown_tools_are_named_with_the_declared_ones() {
        let found = issues(&[("delete_all", "{}")]);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].code, UNKNOWN_TOOL);
        assert!(found[0].message.contains("`delete_all`"));
        let hint = found[0].hint.as_deref().unwrap_or_default();
        assert!(hint.contains("broken, get_weather, now"), "{hint}");
    }

    #[test]
    fn arguments_that_are_not_json_carry_line_and_column() {
        let found = issues(&[("get_weather", "{\n  \"city\": Oslo\n}")]);
        assert_eq!(found[0].code, INVALID_TOOL_ARGUMENTS);
        assert_eq!((found[0].line, found[0].column), (Some(2), Some(11)));
    }

    #[test]
    fn schema_violations_name_the_pointer() {
        let found = issues(&[("get_weather", r#"{"city": "Oslo", "days": 0, "x": 1}"#)]);
        let messages: Vec<&str> = found.iter().map(|i| i.message.as_str()).collect();
        assert_eq!(found.len(), 2, "{messages:?}");
        assert!(found.iter().all(|i| i.code == INVALID_TOOL_ARGUMENTS));
        assert!(
            messages.iter().any(|m| m.contains("at /days")),
            "{messages:?}"
        );
        let missing = issues(&[("get_weather", "{}")]);
        assert!(
            missing[0].message.contains("at /:"),
            "{}",
            missing[0].message
        );
    }

    #[test]
    fn an_uncompilable_schema_leaves_the_json_check() {
        let checks = ToolCalls::from_declared(&tools());
        assert_eq!(checks.unchecked(), ["broken"]);
        assert!(issues(&[("broken", r#"{"any": "thing"}"#)]).is_empty());
        assert_eq!(
            issues(&[("broken", "nope")])[0].code,
            INVALID_TOOL_ARGUMENTS
        );
    }

    #[test]
    fn text_and_odd_declarations_never_fail() {
        let checks = ToolCalls::from_declared(&json!("not an array"));
        assert_eq!(checks.names().count(), 0);
        let text = block_on(checks.validate("any text", &Context::new())).unwrap();
        assert!(text.is_empty());
        let found = issues(&[]);
        assert!(found.is_empty());
    }
}
