//! What every surface's request reader shares: the body as a JSON object, its `model`, its
//! `stream`, and how an error shows a message's `role`.

use crate::error::ApiError;
use serde_json::{Map, Value};

/// A request body as the JSON object every surface's body is; a 400 otherwise.
pub(crate) fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("The request body is not valid JSON: {e}."), None)
    })?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(ApiError::bad_request(
            "The request body must be a JSON object.",
            None,
        )),
    }
}

/// The start every surface's parser shares: the body as a JSON object, and its `model`
/// (taken out of it).
pub(crate) fn json_body(body: &[u8]) -> Result<(Map<String, Value>, String), ApiError> {
    let mut fields = body_object(body)?;
    let model = model_of(fields.remove("model"))?;
    Ok((fields, model))
}

/// A request's `stream`: absent or `null` is not streamed, a boolean says; anything else is a
/// 400, as OpenAI answers (`"yes"` must not quietly mean "not streamed").
pub(crate) fn stream_of(stream: Option<&Value>) -> Result<bool, ApiError> {
    match stream {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(stream)) => Ok(*stream),
        Some(other) => Err(ApiError::bad_request(
            format!("`stream` must be true or false, got {other}."),
            Some("stream"),
        )),
    }
}

/// A message's `role` as an error message shows it: `` `user` `` for a string, the JSON of
/// anything else (`3`), `none` when there is none.
pub(crate) fn shown_role(role: Option<&Value>) -> String {
    match role {
        None | Some(Value::Null) => "none".to_string(),
        Some(Value::String(role)) => format!("`{role}`"),
        Some(other) => format!("{other} (not a string)"),
    }
}

/// The model a request body names in `model`: a non-empty string, else a 400.
pub(crate) fn model_of(model: Option<Value>) -> Result<String, ApiError> {
    match model {
        Some(Value::String(model)) if !model.is_empty() => Ok(model),
        _ => Err(ApiError::bad_request(
            "The request needs a `model` (one of the ids listed by /v1/models).",
            Some("model"),
        )),
    }
}

/// A trimmed, non-empty string.
pub(crate) fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}
