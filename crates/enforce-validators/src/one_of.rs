//! The `one_of` validator: every value the answer states must be one of a known set, such as
//! the narrative tags a block asserts it used (`assertions.narrativeTagsUsed`) against the
//! catalogue that came with the request.
//!
//! ```yaml
//! asserted_tags:
//!   type: one_of
//!   input: { json: /assertions/narrativeTagsUsed }   # a list of strings, or one string
//!   values: "{{narrative_tags}}"                     # a list from the request, or literal values
//!   code: NARRATIVE_TAGS_CONSISTENT
//! ```
//!
//! The checked text is read as JSON: a list's items (strings, numbers, booleans) are checked
//! one by one; a string, or text that is no JSON, is one value. `values` is a list of literal
//! values, or one template whose `{{key}}` holds a list in the context (each item a value) or
//! one value. When a placeholder is not in the context the catalogue is unknown and nothing is
//! checked. Comparison is exact unless `case_sensitive: false`.
//!
//! | code | when |
//! |---|---|
//! | `VALUE_NOT_ALLOWED` (or `code`) | a value is not in the set |
//!
//! No repair: which value was meant is not for a rule to guess.

use crate::terms::values_of;
use crate::{BuildError, FactoryInput};
use enforce_core::{async_trait, Context, Issue, Severity, Validation, Validator};
use serde::Deserialize;
use serde_json::Value;

/// Code (default): a value is not one of the allowed set.
pub const VALUE_NOT_ALLOWED: &str = "VALUE_NOT_ALLOWED";

/// The allowed values: literal, or a template filled from the context.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(untagged, rename = "OneOfValues"))]
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
enum ValuesConfig {
    /// Literal values.
    List(Vec<String>),
    /// A template, e.g. `{{narrative_tags}}` (a list in the context stands for its items).
    Template(String),
}

/// Options of the `one_of` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "OneOfOptions"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct OneOfConfig {
    /// The allowed values: a list, or a `{{key}}` template read from the request context.
    values: ValuesConfig,
    /// Code of the issue (default `VALUE_NOT_ALLOWED`).
    code: Option<String>,
    /// Message (`{value}`, `{allowed}`).
    message: Option<String>,
    /// Hint (`{value}`, `{allowed}`).
    hint: Option<String>,
    /// `error` (default) or `warning`.
    severity: Option<Severity>,
    /// Compare case-sensitively (default true).
    case_sensitive: Option<bool>,
}

/// The `one_of` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct OneOf {
    name: String,
    values: ValuesConfig,
    code: String,
    message: Option<String>,
    hint: Option<String>,
    severity: Severity,
    case_sensitive: bool,
}

impl OneOf {
    /// The JSON Schema of the options [`from_config`](Self::from_config) reads.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <OneOfConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration (see the [module docs](self)).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: OneOfConfig = input.parse()?;
        match &c.values {
            ValuesConfig::List(v) if v.is_empty() => {
                return Err(BuildError::at("values", "list at least one value"))
            }
            ValuesConfig::Template(t) if t.trim().is_empty() => {
                return Err(BuildError::at(
                    "values",
                    "give values or a {{key}} template",
                ))
            }
            _ => {}
        }
        let code = c.code.unwrap_or_else(|| VALUE_NOT_ALLOWED.to_string());
        if code.trim().is_empty() {
            return Err(BuildError::at("code", "a code cannot be empty"));
        }
        Ok(OneOf {
            name: input.name.to_string(),
            values: c.values,
            code,
            message: c.message,
            hint: c.hint,
            severity: c.severity.unwrap_or(Severity::Error),
            case_sensitive: c.case_sensitive.unwrap_or(true),
        })
    }

    /// The allowed values for this context; `None` when they are unknown.
    fn allowed(&self, context: &Context) -> Option<Vec<String>> {
        match &self.values {
            ValuesConfig::List(v) => Some(v.clone()),
            ValuesConfig::Template(t) => values_of(t, context),
        }
    }
}

/// The values an answer states: a JSON list's scalar items, else the text as one value.
fn stated(text: &str) -> Vec<String> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(_) | Value::Bool(_) => Some(v.to_string()),
        _ => None,
    };
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(items)) => items.iter().filter_map(scalar).collect(),
        Ok(Value::Null) => Vec::new(),
        Ok(v @ (Value::String(_) | Value::Number(_) | Value::Bool(_))) => {
            scalar(&v).into_iter().collect()
        }
        _ if text.trim().is_empty() => Vec::new(),
        _ => vec![text.trim().to_string()],
    }
}

#[async_trait]
impl Validator for OneOf {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        let Some(allowed) = self.allowed(context) else {
            return Ok(Vec::new());
        };
        let same = |a: &str, b: &str| {
            if self.case_sensitive {
                a == b
            } else {
                a.to_lowercase() == b.to_lowercase()
            }
        };
        let list = allowed.join(", ");
        let fill = |t: &str, value: &str| t.replace("{value}", value).replace("{allowed}", &list);
        Ok(stated(response)
            .into_iter()
            .filter(|value| !allowed.iter().any(|a| same(a, value)))
            .map(|value| {
                let shown: String = value.chars().take(80).collect();
                let message = self.message.as_deref().map_or_else(
                    || format!("'{shown}' is not one of the allowed values."),
                    |t| fill(t, &shown),
                );
                let hint = self.hint.as_deref().map_or_else(
                    || format!("Use only these values: {list}."),
                    |t| fill(t, &shown),
                );
                Issue::error(&self.name, self.code.clone(), message)
                    .with_severity(self.severity)
                    .with_hint(hint)
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{block_on, Registry};
    use crate::BuildEnv;
    use serde_json::json;

    fn build(spec: Value) -> Box<dyn Validator> {
        Registry::builtin()
            .build("tags", &spec, &BuildEnv::default())
            .unwrap()
    }

    fn codes(v: &dyn Validator, text: &str, context: &Context) -> Vec<String> {
        block_on(v.validate(text, context))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn each_stated_value_must_be_in_the_catalogue_from_the_context() {
        let v = build(
            json!({"type": "one_of", "values": "{{narrative_tags}}", "code": "NARRATIVE_TAGS_CONSISTENT"}),
        );
        let ctx = Context::new().with("narrative_tags", json!(["Pionier", "Stabil"]));
        assert!(codes(&*v, r#"["Pionier"]"#, &ctx).is_empty());
        assert!(codes(&*v, "[]", &ctx).is_empty());
        assert_eq!(
            codes(
                &*v,
                r#"["Pionier", "Erfunden", "Stabil", "Auch erfunden"]"#,
                &ctx
            ),
            ["NARRATIVE_TAGS_CONSISTENT", "NARRATIVE_TAGS_CONSISTENT"]
        );
        assert_eq!(codes(&*v, r#""pionier""#, &ctx).len(), 1, "case-sensitive");
        // The catalogue unknown: nothing to check against.
        assert!(codes(&*v, r#"["Erfunden"]"#, &Context::new()).is_empty());
    }

    #[test]
    fn literal_values_and_bad_options() {
        let v = build(json!({"type": "one_of", "values": ["a", "b"], "case_sensitive": false}));
        assert!(codes(&*v, r#"["A", "b"]"#, &Context::new()).is_empty());
        assert_eq!(codes(&*v, "c", &Context::new()), [VALUE_NOT_ALLOWED]);
        for bad in [
            json!({"type": "one_of", "values": []}),
            json!({"type": "one_of"}),
        ] {
            assert!(Registry::builtin()
                .build("x", &bad, &BuildEnv::default())
                .is_err());
        }
    }
}
