//! Facts a request carries for validators and fallback templates (`{{company_name}}`): the body
//! field `"enforce": {"context": {...}}` (what the openai SDKs send with `extra_body`) and the
//! header `X-Enforce-Context` holding a JSON object. The `enforce` field is the proxy's own and is
//! never forwarded upstream.
//!
//! Values may be strings, numbers, booleans and lists of those; anything else, malformed JSON,
//! a non-object, or more than the configured size is refused with a 400 that says why. When both
//! carry a key, the body's value wins; the proxy's own keys (`model`, `chat_id`,
//! `previous_step`) win over both.

use crate::error::ApiError;
use serde_json::{Map, Value};

/// The facts of one request: the header's, then the body's on top. `body` is the request's
/// `enforce` field, `header` the raw `X-Enforce-Context` value; `limit` bounds each source's
/// JSON size in bytes.
pub(crate) fn request_facts(
    body: Option<Value>,
    header: Option<&[u8]>,
    limit: usize,
) -> Result<Map<String, Value>, ApiError> {
    let mut facts = match header {
        None => Map::new(),
        Some(raw) => {
            if raw.len() > limit {
                return Err(too_large("The X-Enforce-Context header", limit));
            }
            let value: Value = serde_json::from_slice(raw).map_err(|e| {
                ApiError::bad_request(
                    format!("The X-Enforce-Context header is not valid JSON: {e}."),
                    None,
                )
            })?;
            checked("The X-Enforce-Context header", value, None)?
        }
    };
    if let Some(field) = body {
        let Value::Object(mut enforce) = field else {
            return Err(ApiError::bad_request(
                "`enforce` must be an object, e.g. {\"context\": {\"company_name\": \"ACME\"}}.",
                Some("enforce"),
            ));
        };
        if let Some(key) = enforce.keys().find(|k| k.as_str() != "context") {
            return Err(ApiError::bad_request(
                format!("`enforce.{key}` is not known; `enforce` takes `context` only."),
                Some("enforce"),
            ));
        }
        if let Some(context) = enforce.remove("context") {
            let size = serde_json::to_vec(&context).map_or(usize::MAX, |v| v.len());
            if size > limit {
                return Err(too_large("`enforce.context`", limit));
            }
            let from_body = checked("`enforce.context`", context, Some("enforce.context"))?;
            facts.extend(from_body);
        }
    }
    Ok(facts)
}

fn too_large(what: &str, limit: usize) -> ApiError {
    ApiError::bad_request(
        format!("{what} is larger than this proxy accepts ({limit} bytes of JSON)."),
        None,
    )
}

/// `value` as a map of allowed fact values, or a 400 naming the first offending key.
fn checked(
    what: &str,
    value: Value,
    param: Option<&'static str>,
) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(map) = value else {
        return Err(ApiError::bad_request(
            format!("{what} must be a JSON object of facts, e.g. {{\"company_name\": \"ACME\"}}."),
            param,
        ));
    };
    if let Some((key, _)) = map.iter().find(|(_, v)| !allowed(v)) {
        return Err(ApiError::bad_request(
            format!(
                "{what}: the value of `{key}` must be a string, number, boolean or a list of those."
            ),
            param,
        ));
    }
    Ok(map)
}

fn scalar(value: &Value) -> bool {
    matches!(value, Value::String(_) | Value::Number(_) | Value::Bool(_))
}

fn allowed(value: &Value) -> bool {
    match value {
        Value::Array(items) => items.iter().all(scalar),
        other => scalar(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn message(e: &ApiError) -> String {
        e.message.clone()
    }

    #[test]
    fn body_wins_over_header_and_both_are_optional() {
        assert!(request_facts(None, None, 1024).unwrap().is_empty());
        let body = json!({"context": {"company_name": "ACME", "tags": ["a", "b"], "n": 3}});
        let facts = request_facts(
            Some(body),
            Some(br#"{"company_name": "Other", "sanitized": true}"#),
            1024,
        )
        .unwrap();
        assert_eq!(facts["company_name"], "ACME");
        assert_eq!(facts["sanitized"], true);
        assert_eq!(facts["tags"], json!(["a", "b"]));
        assert_eq!(facts["n"], 3);
    }

    /// A request's `enforce` field, its header, and what the refusal must say.
    type BadCase = (Option<Value>, Option<&'static [u8]>, &'static str);

    #[test]
    fn bad_facts_are_refused_with_a_reason() {
        let cases: [BadCase; 7] = [
            (None, Some(b"{not json"), "not valid JSON"),
            (None, Some(b"[1, 2]"), "must be a JSON object"),
            (Some(json!("x")), None, "`enforce` must be an object"),
            (
                Some(json!({"contxt": {}})),
                None,
                "`enforce.contxt` is not known",
            ),
            (Some(json!({"context": 5})), None, "must be a JSON object"),
            (
                Some(json!({"context": {"a": {"b": 1}}})),
                None,
                "value of `a`",
            ),
            (
                Some(json!({"context": {"a": [1, [2]]}})),
                None,
                "value of `a`",
            ),
        ];
        for (body, header, expected) in cases {
            let err = request_facts(body, header, 1024).unwrap_err();
            assert_eq!(err.status.as_u16(), 400);
            assert!(message(&err).contains(expected), "{}", message(&err));
        }
        let null = request_facts(Some(json!({"context": {"a": null}})), None, 1024);
        assert!(message(&null.unwrap_err()).contains("value of `a`"));
    }

    #[test]
    fn each_source_is_bounded() {
        let big = "x".repeat(100);
        let body = json!({"context": {"k": big}});
        let err = request_facts(Some(body.clone()), None, 64).unwrap_err();
        assert!(message(&err).contains("larger than this proxy accepts (64 bytes"));
        let header = format!(r#"{{"k": "{big}"}}"#);
        let err = request_facts(None, Some(header.as_bytes()), 64).unwrap_err();
        assert!(message(&err).contains("X-Enforce-Context header is larger"));
        assert!(request_facts(Some(body), None, 4096).is_ok());
    }
}
