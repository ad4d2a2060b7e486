//! The request context validators and templates read: [`Context`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Facts about the request that validators may use, e.g. the company name a response must
/// mention, or the chat a proxy request belongs to.
///
/// It is a JSON object so that it crosses process and plugin boundaries unchanged.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Context {
    values: Map<String, Value>,
}

impl Context {
    /// An empty context.
    pub fn new() -> Self {
        Self::default()
    }

    /// Sets `key` to `value`, builder style.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<Value>) -> Self {
        self.insert(key, value);
        self
    }

    /// Sets `key` to `value`.
    pub fn insert(&mut self, key: impl Into<String>, value: impl Into<Value>) {
        self.values.insert(key.into(), value.into());
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.values.get(key)
    }

    /// The value under `key` if it is a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.values.get(key).and_then(Value::as_str)
    }

    /// The value under `key` rendered as text: strings as they are, other JSON values as JSON.
    pub fn get_text(&self, key: &str) -> Option<String> {
        self.values.get(key).map(|v| match v {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    }

    /// The whole context as a JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        &self.values
    }

    /// `true` if no key is set.
    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Fills `{{key}}` placeholders in `template` from this context.
    ///
    /// Whitespace inside the braces is ignored. A placeholder whose key is missing is left as
    /// it is, so a template never silently loses text.
    pub fn render(&self, template: &str) -> String {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        while let Some(start) = rest.find("{{") {
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            match after.find("}}") {
                Some(end) => {
                    let key = after[..end].trim();
                    match self.get_text(key) {
                        Some(value) => out.push_str(&value),
                        None => out.push_str(&rest[start..start + 2 + end + 2]),
                    }
                    rest = &after[end + 2..];
                }
                None => {
                    out.push_str(&rest[start..]);
                    rest = "";
                }
            }
        }
        out.push_str(rest);
        out
    }
}

impl From<Map<String, Value>> for Context {
    fn from(values: Map<String, Value>) -> Self {
        Context { values }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn render_fills_known_keys_and_keeps_unknown() {
        let ctx = Context::new().with("company_name", "ACME").with("n", 3);
        assert_eq!(
            ctx.render("Hello {{ company_name }}, {{n}} items, {{missing}} and {{ open"),
            "Hello ACME, 3 items, {{missing}} and {{ open"
        );
    }

    #[test]
    fn render_handles_multibyte_text() {
        let ctx = Context::new().with("x", "ä");
        assert_eq!(ctx.render("ü{{x}}ö}}"), "üäö}}");
    }
}
