//! The request context validators and templates read: [`Context`].

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Keys under which the loop puts the request into the [`Context`] of the validators that read
/// it: input validators, and those whose [`reads_request`](crate::Validator::reads_request) is
/// `true`. Namespaced (`enforce.`) so that they never meet a caller's own facts.
pub mod keys {
    /// The prefix every key below starts with; a caller's facts never do.
    pub const PREFIX: &str = "enforce.";
    /// The last user message: the question (after a reformulation, the new one).
    pub const QUESTION: &str = "enforce.question";
    /// The system prompt: every system message, joined by a blank line.
    pub const SYSTEM: &str = "enforce.system";
    /// The retrieved context where the request carries it: a string, or a list of strings
    /// (one per retrieved chunk).
    pub const RETRIEVED_CONTEXT: &str = "enforce.retrieved_context";
    /// The earlier turns: every message before the question except system messages, oldest
    /// first, as `[{"role": "user" | "assistant" | "tool", "content": "…"}]`.
    pub const HISTORY: &str = "enforce.history";
}

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
    /// Whitespace inside the braces is ignored. `{{key|default}}` writes `default` when the
    /// key is missing; a placeholder without default whose key is missing is left as it is, so
    /// a template never silently loses text.
    pub fn render(&self, template: &str) -> String {
        self.fill(template, |out, value, _| match value {
            Value::String(s) => out.push_str(s),
            other => out.push_str(&other.to_string()),
        })
    }

    /// Fills `{{key}}` placeholders in a JSON `template` so that the result stays JSON:
    /// inside a string literal a value is written JSON-escaped (a quote in a company name
    /// becomes `\"`; numbers, booleans and lists as their JSON text, escaped); outside
    /// strings it is written as a JSON value (a string with its quotes, a list as an array).
    /// Missing keys are left as they are, like [`render`](Self::render).
    ///
    /// ```
    /// use enforce_core::Context;
    ///
    /// let ctx = Context::new().with("company", "Müller \"Bau\" GmbH").with("tags", vec!["a", "b"]);
    /// let json = ctx.render_json(r#"{"text": "Die {{company}}.", "name": {{company}}, "tags": {{tags}}}"#);
    /// assert_eq!(json, r#"{"text": "Die Müller \"Bau\" GmbH.", "name": "Müller \"Bau\" GmbH", "tags": ["a","b"]}"#);
    /// let back: serde_json::Value = serde_json::from_str(&json).unwrap();
    /// assert_eq!(back["text"], "Die Müller \"Bau\" GmbH.");
    /// ```
    pub fn render_json(&self, template: &str) -> String {
        self.fill(template, |out, value, in_string| {
            if in_string {
                let text = match value {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                };
                // A JSON string literal of the text, without its quotes.
                let quoted = Value::String(text).to_string();
                out.push_str(&quoted[1..quoted.len() - 1]);
            } else {
                out.push_str(&value.to_string());
            }
        })
    }

    /// Copies `template`, handing each placeholder's value to `put` together with whether
    /// the placeholder stands inside a JSON string literal of the template (only
    /// [`render_json`](Self::render_json) cares).
    fn fill(&self, template: &str, mut put: impl FnMut(&mut String, &Value, bool)) -> String {
        let mut out = String::with_capacity(template.len());
        let mut rest = template;
        let mut strings = JsonStrings::default();
        while let Some(start) = rest.find("{{") {
            strings.scan(&rest[..start]);
            out.push_str(&rest[..start]);
            let after = &rest[start + 2..];
            match after.find("}}") {
                Some(end) => {
                    let placeholder = &rest[start..start + 2 + end + 2];
                    // `{{key|default}}`: the default stands in for a missing key.
                    let (key, default) = match after[..end].split_once('|') {
                        Some((key, default)) => (key.trim(), Some(default.trim())),
                        None => (after[..end].trim(), None),
                    };
                    match (self.get(key), default) {
                        (Some(value), _) => put(&mut out, value, strings.inside),
                        (None, Some(default)) => put(
                            &mut out,
                            &Value::String(default.to_string()),
                            strings.inside,
                        ),
                        (None, None) => {
                            strings.scan(placeholder);
                            out.push_str(placeholder);
                        }
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

/// Whether the text scanned so far ends inside a JSON string literal.
#[derive(Default)]
struct JsonStrings {
    inside: bool,
    escaped: bool,
}

impl JsonStrings {
    fn scan(&mut self, text: &str) {
        for b in text.bytes() {
            if self.escaped {
                self.escaped = false;
            } else if self.inside && b == b'\\' {
                self.escaped = true;
            } else if b == b'"' {
                self.inside = !self.inside;
            }
        }
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
    fn a_placeholder_default_stands_in_for_a_missing_key() {
        let ctx = Context::new().with("company_name", "ACME");
        assert_eq!(
            ctx.render("{{company_name|Unbekannt}}: {{ document_type | Compliance }}-Bericht"),
            "ACME: Compliance-Bericht"
        );
        assert_eq!(
            ctx.render_json(r#"{"t": "{{document_type|Compliance}}", "n": {{n|x}}}"#),
            r#"{"t": "Compliance", "n": "x"}"#
        );
    }

    #[test]
    fn render_json_keeps_the_template_json() {
        let ctx = Context::new()
            .with("name", "A \"B\" \\ C\n")
            .with("n", 3)
            .with("ok", true)
            .with("tags", vec!["x", "y\""]);
        let template = r#"{"t": "{{name}} / {{n}} / {{tags}}", "s": "esc \" {{name}}", "v": [{{n}}, {{ok}}, {{name}}, {{tags}}]}"#;
        let json = ctx.render_json(template);
        let v: Value = serde_json::from_str(&json).expect(&json);
        assert_eq!(v["t"], "A \"B\" \\ C\n / 3 / [\"x\",\"y\\\"\"]");
        assert_eq!(v["s"], "esc \" A \"B\" \\ C\n");
        assert_eq!(
            v["v"],
            serde_json::json!([3, true, "A \"B\" \\ C\n", ["x", "y\""]])
        );
        // A missing key stays (and is scanned: its quotes are not the template's).
        assert_eq!(
            ctx.render_json(r#"{"a": "{{gone}}", "b": {{n}}}"#),
            r#"{"a": "{{gone}}", "b": 3}"#
        );
    }

    #[test]
    fn render_handles_multibyte_text() {
        let ctx = Context::new().with("x", "ä");
        assert_eq!(ctx.render("ü{{x}}ö}}"), "üäö}}");
    }
}
