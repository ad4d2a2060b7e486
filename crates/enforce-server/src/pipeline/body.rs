//! What every surface's request reader shares: the body read into its derived request type,
//! its `model`, its `stream`, and how an error shows a message's `role`.

use crate::error::ApiError;
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};

/// A request body read into a surface's derived request type; a body that is not one JSON
/// object is refused as every surface refuses it ([`body_object`]). A large body's longest
/// text becomes the request's string in the body's own buffer ([`super::in_place`]), so the
/// body is taken, not borrowed: a clone kept elsewhere leaves it to the plain read.
pub(crate) fn read_request<T: DeserializeOwned>(body: Bytes) -> Result<T, ApiError> {
    let body = match super::in_place::read_in_place(body) {
        Ok(Value::Object(fields)) => return request_of(fields),
        Ok(_) => return Err(not_an_object()),
        Err(body) => body,
    };
    // Only an object: serde would read an array into the fields one by one.
    if body.trim_ascii_start().first() == Some(&b'{') {
        if let Ok(request) = serde_json::from_slice(&body) {
            return Ok(request);
        }
    }
    // Not an object, not JSON, or a field given twice (the last one counts, as in a map):
    // read as a map first.
    request_of(body_object(&body)?)
}

/// A request read from its body's fields; serde takes their strings, it does not copy them.
fn request_of<T: DeserializeOwned>(fields: Map<String, Value>) -> Result<T, ApiError> {
    serde_json::from_value(Value::Object(fields))
        .map_err(|e| ApiError::bad_request(format!("The request body cannot be read: {e}."), None))
}

/// A field of a request body as sent: present (`null` included) or absent. Use with
/// `#[serde(default, deserialize_with = "present")]`.
pub(crate) fn present<'de, D: Deserializer<'de>>(from: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(from).map(Some)
}

/// A request body as the JSON object every surface's body is; a 400 otherwise.
fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("The request body is not valid JSON: {e}."), None)
    })?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(not_an_object()),
    }
}

fn not_an_object() -> ApiError {
    ApiError::bad_request("The request body must be a JSON object.", None)
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
