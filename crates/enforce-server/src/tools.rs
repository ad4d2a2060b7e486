//! The per-request checks, compiled once per distinct request field: the tool calls against
//! `tools` ([`ToolCalls`]; Open WebUI sends the same ~36 tool definitions with every request,
//! and compiling their schemas each time would cost more than the rest of the proxy), and the
//! answer against `response_format` ([`response_format_check`]).

use enforce_validators::json::JsonValidator;
use enforce_validators::tool_calls::ToolCalls;
use serde_json::Value;
use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::io;
use std::sync::{Arc, Mutex, PoisonError};

/// Distinct `tools` arrays kept; when full the cache starts over (a client cycling through more
/// tool sets than this pays the compile per request, nothing worse).
const CAPACITY: usize = 256;

/// Compiled checks by a digest of the request field they were built from.
#[derive(Debug)]
pub(crate) struct CheckCache<T> {
    /// Random keys per process: a client cannot craft two fields that share an entry.
    keys: RandomState,
    entries: Mutex<HashMap<u64, Arc<T>>>,
}

impl<T> Default for CheckCache<T> {
    fn default() -> Self {
        CheckCache {
            keys: RandomState::new(),
            entries: Mutex::new(HashMap::new()),
        }
    }
}

/// Compiled tool checks by a digest of the `tools` JSON.
pub(crate) type ToolCheckCache = CheckCache<ToolCalls>;

/// Compiled `response_format` checks by a digest of the field.
pub(crate) type FormatCheckCache = CheckCache<JsonValidator>;

/// Feeds serialized JSON into a hasher without building the string.
struct HashWriter<'a, H: Hasher>(&'a mut H);

impl<H: Hasher> io::Write for HashWriter<'_, H> {
    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.0.write(bytes);
        Ok(bytes.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<T> CheckCache<T> {
    /// The checks for `field` (built by `build` and kept on first sight).
    fn get_or_build(&self, field: &Value, build: impl FnOnce(&Value) -> T) -> Arc<T> {
        let mut hasher = self.keys.build_hasher();
        // Writing into a hasher cannot fail; on the impossible error the digest is still usable.
        let _ = serde_json::to_writer(HashWriter(&mut hasher), field);
        let digest = hasher.finish();
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(found) = entries.get(&digest) {
            return found.clone();
        }
        let checks = Arc::new(build(field));
        if entries.len() >= CAPACITY {
            entries.clear();
        }
        entries.insert(digest, checks.clone());
        checks
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.entries
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

impl ToolCheckCache {
    /// The checks for a request's `tools`.
    pub fn checks_for(&self, tools: &Value) -> Arc<ToolCalls> {
        self.get_or_build(tools, |tools| {
            let checks = ToolCalls::from_declared(tools);
            if !checks.unchecked().is_empty() {
                tracing::warn!(
                    tools = ?checks.unchecked(),
                    "tool parameter schemas that do not compile: their arguments are only checked for valid JSON"
                );
            }
            checks
        })
    }
}

/// The validator name of the `response_format` check, in issues and the audit.
pub(crate) const RESPONSE_FORMAT: &str = "response_format";

impl FormatCheckCache {
    /// The check of a request's `response_format`: `json_schema` (the answer is that JSON
    /// alone) and `json_object` (the answer is JSON alone); `None` for `text` or a shape
    /// that asks for nothing to check.
    pub fn check_for(&self, format: &Value) -> Option<Arc<JsonValidator>> {
        match format.get("type").and_then(Value::as_str) {
            Some("json_schema" | "json_object") => {}
            _ => return None,
        }
        Some(self.get_or_build(format, response_format_check))
    }
}

/// Builds the check of a `json_schema` or `json_object` response format. A schema that does
/// not compile leaves the check at "JSON alone" (and is logged): the upstream may still
/// accept it, and the answer is then at least parseable.
fn response_format_check(format: &Value) -> JsonValidator {
    let base = || {
        JsonValidator::new(RESPONSE_FORMAT)
            .bare(true)
            .schema_hint("Answer with JSON alone that matches the requested response_format.")
    };
    let schema = format
        .get("json_schema")
        .and_then(|s| s.get("schema"))
        .filter(|_| format.get("type").and_then(Value::as_str) == Some("json_schema"));
    let Some(schema) = schema else {
        return base();
    };
    base().with_schema(schema).unwrap_or_else(|e| {
        tracing::warn!(error = %e, "a response_format schema that does not compile: the answer is only checked to be JSON");
        base()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::{Context, Validator};
    use serde_json::json;

    #[test]
    fn one_compile_per_distinct_tool_set() {
        let cache = ToolCheckCache::default();
        let a = json!([{"type": "function", "function": {"name": "a"}}]);
        let b = json!([{"type": "function", "function": {"name": "b"}}]);
        let first = cache.checks_for(&a);
        assert!(Arc::ptr_eq(&first, &cache.checks_for(&a.clone())));
        let other = cache.checks_for(&b);
        assert_eq!(other.names().collect::<Vec<_>>(), ["b"]);
        assert_eq!(cache.len(), 2);
    }

    #[tokio::test]
    async fn response_formats_check_json_and_their_schema_and_text_checks_nothing() {
        let cache = FormatCheckCache::default();
        assert!(cache.check_for(&json!({"type": "text"})).is_none());
        let schema = json!({"type": "json_schema", "json_schema": {"name": "U", "schema": {
            "type": "object", "required": ["a"]}}});
        let check = cache.check_for(&schema).unwrap();
        assert!(Arc::ptr_eq(&check, &cache.check_for(&schema).unwrap()));
        let context = Context::new();
        assert!(check
            .validate(r#"{"a": 1}"#, &context)
            .await
            .unwrap()
            .is_empty());
        let issues = check.validate(r#"{"b": 1}"#, &context).await.unwrap();
        assert_eq!(issues[0].validator, RESPONSE_FORMAT);
        let object = cache.check_for(&json!({"type": "json_object"})).unwrap();
        assert!(object.validate("[1]", &context).await.unwrap().is_empty());
        assert!(!object
            .validate("Sure: {}", &context)
            .await
            .unwrap()
            .is_empty());
        // A schema that does not compile still asks for JSON.
        let broken = json!({"type": "json_schema", "json_schema": {"schema": {"type": 12}}});
        let loose = cache.check_for(&broken).unwrap();
        assert!(!loose
            .validate("no json", &context)
            .await
            .unwrap()
            .is_empty());
        assert!(loose
            .validate(r#"{"x": 1}"#, &context)
            .await
            .unwrap()
            .is_empty());
    }
}
