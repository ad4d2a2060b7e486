//! A Responses request translated into the shared [`Ask`], in the chat-completions dialect the
//! runners speak.
//!
//! Translation: `instructions` → a system message; `input` (a string, or items: messages with
//! `input_text`/`output_text`/`input_image`/`input_file` parts, `function_call` and
//! `function_call_output`) → messages; function `tools` → chat tools; `text.format` →
//! `response_format`; `max_output_tokens` → `max_tokens`; `reasoning.effort` →
//! `reasoning_effort`. What cannot be carried is refused with a 400 naming the field.

use super::Kept;
use crate::error::ApiError;
use crate::pipeline::{body_object, model_of, non_empty, stream_of, Ask};
use enforce_core::{runner::ToolCall, Message, Role};
use serde_json::{json, Map, Value};

/// Request fields echoed in the `response` object, as the client sent them.
pub(super) const ECHOED: &[Field] = &[
    Field::instructions,
    Field::tools,
    Field::tool_choice,
    Field::text,
    Field::temperature,
    Field::top_p,
    Field::max_output_tokens,
    Field::metadata,
    Field::previous_response_id,
    Field::parallel_tool_calls,
    Field::store,
    Field::truncation,
    Field::user,
    Field::reasoning,
];

/// Request fields this proxy cannot carry to a chat-completions upstream: refused, never
/// dropped.
pub(super) const REFUSED: &[(Field, &str)] = &[
    (
        Field::background,
        "background responses are not supported by this proxy",
    ),
    (
        Field::conversation,
        "conversations are not supported by this proxy; use `previous_response_id`",
    ),
    (
        Field::prompt,
        "stored prompts are not supported by this proxy",
    ),
];

/// Request fields a chat-completions upstream has no use for: left out, and named in the
/// answer's `warnings` and the `X-Enforce-Warnings` header (`fields_ignored`).
pub(super) const IGNORED: &[Field] = &[
    Field::include,
    Field::truncation,
    Field::max_tool_calls,
    Field::top_logprobs,
];

/// Request fields passed to a chat-completions upstream as they are.
pub(super) const FORWARDED: &[Field] = &[
    Field::temperature,
    Field::top_p,
    Field::parallel_tool_calls,
    Field::user,
    Field::metadata,
    Field::safety_identifier,
    Field::service_tier,
    Field::seed,
    Field::stop,
];

fn invalid(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The text of a Responses `content` (a string, or parts); the parts that are not text
/// (images, files, audio) in the chat dialect, passed on to the upstream.
fn content_of(content: &Value) -> Result<(String, Vec<Value>), ApiError> {
    let parts = match content {
        Value::Null => return Ok((String::new(), Vec::new())),
        Value::String(s) => return Ok((s.clone(), Vec::new())),
        Value::Array(parts) => parts,
        _ => {
            return Err(invalid(
                "An input message's `content` must be a string or an array of content parts.",
                "input",
            ))
        }
    };
    let mut texts = Vec::new();
    let mut other = Vec::new();
    for part in parts {
        match part.get("type").and_then(Value::as_str).unwrap_or("") {
            "input_text" | "output_text" | "text" | "summary_text" => {
                if let Some(text) = part.get("text").and_then(Value::as_str) {
                    texts.push(text);
                }
            }
            "refusal" => {
                if let Some(text) = part.get("refusal").and_then(Value::as_str) {
                    texts.push(text);
                }
            }
            "input_image" => {
                let url = part
                    .get("image_url")
                    .cloned()
                    .or_else(|| part.get("file_id").map(|id| json!(format!("file:{id}"))))
                    .unwrap_or(Value::Null);
                let mut image = json!({"url": url});
                if let Some(detail) = part.get("detail") {
                    image["detail"] = detail.clone();
                }
                other.push(json!({"type": "image_url", "image_url": image}));
            }
            "input_file" => {
                let mut file = Map::new();
                for key in ["file_id", "file_data", "filename"] {
                    if let Some(v) = part.get(key) {
                        file.insert(key.into(), v.clone());
                    }
                }
                other.push(json!({"type": "file", "file": file}));
            }
            "input_audio" => {
                let audio = part.get("input_audio").cloned().unwrap_or(Value::Null);
                other.push(json!({"type": "input_audio", "input_audio": audio}));
            }
            kind => {
                return Err(invalid(
                    format!("Content parts of type `{kind}` are not supported by this proxy."),
                    "input",
                ))
            }
        }
    }
    Ok((texts.join("\n"), other))
}

/// A message from text and the other parts: the parts (text first) are kept for the upstream.
fn message_with_parts(role: Role, text: String, other: Vec<Value>) -> Message {
    let mut message = Message::new(role, text);
    if !other.is_empty() {
        let mut parts = Vec::with_capacity(other.len() + 1);
        if !message.content.is_empty() {
            parts.push(json!({"type": "text", "text": message.content}));
        }
        parts.extend(other);
        message.parts = parts;
    }
    message
}

/// The `input` items as messages.
fn input_messages(input: &Value, messages: &mut Vec<Message>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(text) => {
            messages.push(Message::new(Role::User, text.clone()));
            return Ok(());
        }
        Value::Array(items) => items,
        _ => {
            return Err(invalid(
                "`input` must be a string or an array of input items.",
                "input",
            ))
        }
    };
    for item in items {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => {
                let role = match item.get("role").and_then(Value::as_str).unwrap_or("") {
                    "user" => Role::User,
                    "assistant" => Role::Assistant,
                    "system" | "developer" => Role::System,
                    _ => {
                        return Err(invalid(
                            format!(
                                "An input message's `role` must be `user`, `assistant`, `system` or `developer`, got {}.",
                                crate::pipeline::shown_role(item.get("role"))
                            ),
                            "input",
                        ))
                    }
                };
                let (text, other) = content_of(item.get("content").unwrap_or(&Value::Null))?;
                messages.push(message_with_parts(role, text, other));
            }
            "function_call" => {
                let field = |key: &str| item.get(key).and_then(Value::as_str).unwrap_or("");
                let (call_id, name) = (field("call_id"), field("name"));
                if call_id.is_empty() || name.is_empty() {
                    return Err(invalid(
                        "A `function_call` input item needs a `call_id` and a `name`.",
                        "input",
                    ));
                }
                let arguments = match item.get("arguments") {
                    Some(Value::String(s)) => s.clone(),
                    None | Some(Value::Null) => String::new(),
                    Some(other) => other.to_string(),
                };
                let call = ToolCall::new(call_id, name, arguments);
                // Calls of one turn follow each other: they belong to one assistant message.
                match messages.last_mut() {
                    Some(last) if last.role == Role::Assistant && last.parts.is_empty() => {
                        last.tool_calls.push(call)
                    }
                    _ => messages.push(Message::assistant_calling("", vec![call])),
                }
            }
            "function_call_output" => {
                let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                if call_id.is_empty() {
                    return Err(invalid(
                        "A `function_call_output` input item needs the `call_id` of the call it answers.",
                        "input",
                    ));
                }
                let (output, _) = content_of(item.get("output").unwrap_or(&Value::Null))?;
                messages.push(Message::tool(call_id, output));
            }
            // The model's reasoning of an earlier turn is not part of the conversation a chat
            // upstream takes.
            "reasoning" => {}
            other => {
                return Err(invalid(
                    format!("Input items of type `{other}` are not supported by this proxy."),
                    "input",
                ))
            }
        }
    }
    Ok(())
}

/// Function tools in the chat dialect; any other tool type is refused.
fn chat_tools(tools: &Value) -> Result<Value, ApiError> {
    let Some(tools) = tools.as_array() else {
        return Err(invalid("`tools` must be an array.", "tools"));
    };
    let mut out = Vec::with_capacity(tools.len());
    for tool in tools {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            return Err(invalid(
                format!("Tools of type `{kind}` are not supported by this proxy (only `function` tools)."),
                "tools",
            ));
        }
        let mut function = Map::new();
        for key in ["name", "description", "parameters", "strict"] {
            if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
                function.insert(key.into(), v.clone());
            }
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(Value::Array(out))
}

/// `text.format` as a chat `response_format` (none for plain text).
fn response_format(text: &Value) -> Result<Option<Value>, ApiError> {
    let Some(format) = text.get("format").filter(|f| !f.is_null()) else {
        return Ok(None);
    };
    match format.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => Ok(None),
        "json_object" => Ok(Some(json!({"type": "json_object"}))),
        "json_schema" => {
            let mut schema = Map::new();
            for key in ["name", "description", "schema", "strict"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), v.clone());
                }
            }
            Ok(Some(json!({"type": "json_schema", "json_schema": schema})))
        }
        other => Err(invalid(
            format!("`text.format` of type `{other}` is not supported by this proxy."),
            "text",
        )),
    }
}

/// A field of a request body as sent: present (`null` included) or absent.
fn present<'de, D: serde::Deserializer<'de>>(from: D) -> Result<Option<Value>, D::Error> {
    serde::Deserialize::deserialize(from).map(Some)
}

/// The request fields this surface reads, each as sent; the rest of a body is skipped
/// unread. Read straight from the body: a map of every field, looked up some forty times,
/// cost the surface more than the rest of its parsing; and a field is named by a [`Field`],
/// not by its name, so that finding its slot compares no strings.
macro_rules! request_fields {
    ($($name:ident),* $(,)?) => {
        #[derive(serde::Deserialize)]
        struct RequestFields {
            $(#[serde(default, deserialize_with = "present")] $name: Option<Value>,)*
        }

        /// A field of a Responses request this surface reads; each variant is spelled as the
        /// field is on the wire.
        #[allow(non_camel_case_types)]
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        pub(super) enum Field {
            $($name,)*
        }

        impl Field {
            /// Every field.
            #[cfg(test)]
            const ALL: &[Field] = &[$(Field::$name,)*];

            /// The field's name in a request body.
            pub(super) fn name(self) -> &'static str {
                match self {
                    $(Field::$name => stringify!($name),)*
                }
            }
        }

        impl RequestFields {
            fn slot(&self, field: Field) -> &Option<Value> {
                match field {
                    $(Field::$name => &self.$name,)*
                }
            }

            fn slot_mut(&mut self, field: Field) -> &mut Option<Value> {
                match field {
                    $(Field::$name => &mut self.$name,)*
                }
            }
        }
    };
}

request_fields!(
    model,
    input,
    instructions,
    stream,
    store,
    previous_response_id,
    enforce,
    background,
    conversation,
    prompt,
    tools,
    tool_choice,
    text,
    temperature,
    top_p,
    max_output_tokens,
    metadata,
    parallel_tool_calls,
    truncation,
    user,
    reasoning,
    include,
    max_tool_calls,
    top_logprobs,
    safety_identifier,
    service_tier,
    seed,
    stop,
);

impl RequestFields {
    /// Reads a body; a body that is not one JSON object is refused as every surface refuses
    /// it ([`body_object`]).
    fn parse(body: &[u8]) -> Result<Self, ApiError> {
        // Only an object: serde would read an array into the fields one by one.
        if body.trim_ascii_start().first() == Some(&b'{') {
            if let Ok(fields) = serde_json::from_slice(body) {
                return Ok(fields);
            }
        }
        // Not an object, not JSON, or a field given twice (the last one counts, as in a map):
        // read as every surface reads a body.
        serde_json::from_value(Value::Object(body_object(body)?)).map_err(|e| {
            ApiError::bad_request(format!("The request body cannot be read: {e}."), None)
        })
    }

    fn get(&self, field: Field) -> Option<&Value> {
        self.slot(field).as_ref()
    }

    fn remove(&mut self, field: Field) -> Option<Value> {
        self.slot_mut(field).take()
    }
}

/// Parses a `POST /v1/responses` body.
pub(crate) fn parse_responses_request(body: &[u8]) -> Result<(Ask, Kept), ApiError> {
    let mut fields = RequestFields::parse(body)?;
    let model = model_of(fields.remove(Field::model))?;
    for &(field, why) in REFUSED {
        if fields
            .get(field)
            .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
        {
            let key = field.name();
            return Err(invalid(format!("`{key}`: {why}."), key));
        }
    }
    let mut echo = Map::new();
    for &field in ECHOED {
        if let Some(v) = fields.get(field) {
            echo.insert(field.name().to_string(), v.clone());
        }
    }
    let mut messages = Vec::new();
    if let Some(instructions) = fields.remove(Field::instructions) {
        match instructions {
            Value::String(s) if !s.is_empty() => messages.push(Message::system(s)),
            Value::String(_) | Value::Null => {}
            _ => return Err(invalid("`instructions` must be a string.", "instructions")),
        }
    }
    match fields.remove(Field::input) {
        Some(input) => input_messages(&input, &mut messages)?,
        None => return Err(invalid("The request needs an `input`.", "input")),
    }
    if !messages.iter().any(|m| m.role != Role::System) {
        return Err(invalid("`input` must hold at least one item.", "input"));
    }
    let continues = match fields.remove(Field::previous_response_id) {
        Some(Value::String(id)) if !id.is_empty() => Some(id),
        None | Some(Value::Null) => None,
        Some(_) => {
            return Err(invalid(
                "`previous_response_id` must be a response id.",
                "previous_response_id",
            ))
        }
    };
    let store = fields.remove(Field::store).and_then(|v| v.as_bool());
    let stream = stream_of(fields.remove(Field::stream).as_ref())?;
    let enforce = fields.remove(Field::enforce);
    let chat_hint = fields
        .get(Field::metadata)
        .and_then(|m| m.get("chat_id"))
        .and_then(Value::as_str)
        .and_then(non_empty)
        .or_else(|| {
            fields
                .get(Field::user)
                .or_else(|| fields.get(Field::safety_identifier))
                .and_then(Value::as_str)
                .and_then(non_empty)
        });
    // Asked for, but nothing a chat-completions upstream can do: left out, and said so.
    let ignored: Vec<String> = IGNORED
        .iter()
        .filter(|&&field| {
            fields.get(field).is_some_and(|v| match v {
                Value::Null => false,
                Value::Array(a) => !a.is_empty(),
                _ => true,
            })
        })
        .map(|field| field.name().to_string())
        .collect();
    // What the upstream gets, in the chat-completions dialect.
    let mut params = Map::new();
    if let Some(tools) = fields.remove(Field::tools).filter(|t| !t.is_null()) {
        params.insert("tools".into(), chat_tools(&tools)?);
    }
    if let Some(choice) = fields.remove(Field::tool_choice).filter(|c| !c.is_null()) {
        let choice = match choice.get("name").and_then(Value::as_str) {
            Some(name) if choice.get("type").and_then(Value::as_str) == Some("function") => {
                json!({"type": "function", "function": {"name": name}})
            }
            _ => choice,
        };
        params.insert("tool_choice".into(), choice);
    }
    if let Some(text) = fields.remove(Field::text) {
        if let Some(format) = response_format(&text)? {
            params.insert("response_format".into(), format);
        }
    }
    if let Some(max) = fields
        .remove(Field::max_output_tokens)
        .filter(|m| !m.is_null())
    {
        params.insert("max_tokens".into(), max);
    }
    if let Some(effort) = fields
        .remove(Field::reasoning)
        .and_then(|r| r.get("effort").cloned())
        .filter(|e| !e.is_null())
    {
        params.insert("reasoning_effort".into(), effort);
    }
    for &field in FORWARDED {
        if let Some(v) = fields.remove(field).filter(|v| !v.is_null()) {
            params.insert(field.name().into(), v);
        }
    }
    let ask = Ask {
        model,
        messages,
        params,
        stream,
        // A Responses answer always carries its usage.
        include_usage: true,
        enforce,
        chat_hint,
        continues,
        // Stored unless the client says not to, as OpenAI does.
        store: store != Some(false),
        ignored,
    };
    Ok((ask, Kept { echo }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every field is read from the body under the name its [`Field`] gives: a slot that
    /// read another field, or none, would leave that field unread, silently.
    #[test]
    fn every_field_is_read_under_its_own_name() {
        for &field in Field::ALL {
            let body = format!(r#"{{"{}": 7}}"#, field.name());
            let fields = RequestFields::parse(body.as_bytes()).expect("reads");
            for &other in Field::ALL {
                let expected = (other == field).then(|| json!(7));
                assert_eq!(
                    fields.get(other),
                    expected.as_ref(),
                    "{field:?} read as {other:?}"
                );
            }
        }
    }

    /// A body read field by field gives what the same body read as a map gives: `null` is a
    /// value, a field sent twice counts once (the last), and what is not an object is refused
    /// with the message every surface gives.
    #[test]
    fn the_typed_reading_keeps_nulls_repeats_and_refusals() {
        let mut fields =
            RequestFields::parse(br#"{"input": null, "model": "a", "model": "b", "x": [1]}"#)
                .expect("reads");
        assert_eq!(fields.get(Field::input), Some(&Value::Null));
        assert_eq!(fields.remove(Field::model), Some(json!("b")));
        assert_eq!(fields.get(Field::model), None);
        assert_eq!(fields.get(Field::stream), None);
        for (body, message) in [
            (&b"[1]"[..], "The request body must be a JSON object."),
            (b"{\"model\": ", "The request body is not valid JSON"),
        ] {
            let error = RequestFields::parse(body).err().expect("refused");
            assert!(error.message.starts_with(message), "{}", error.message);
        }
    }
}
