//! A Responses request translated into the shared [`Ask`], in the chat-completions dialect the
//! runners speak.
//!
//! Translation: `instructions` → a system message; `input` (a string, or items: messages with
//! `input_text`/`output_text`/`input_image`/`input_file` parts, `function_call` and
//! `function_call_output`) → messages; function `tools` → chat tools; `text.format` →
//! `response_format`; `max_output_tokens` → `max_tokens`; `reasoning.effort` →
//! `reasoning_effort`. What cannot be carried is refused with a 400 naming the field.

use crate::error::ApiError;
use crate::pipeline::{model_of, non_empty, present, read_request, stream_of, Ask};
use bytes::Bytes;
use enforce_core::{runner::ToolCall, Message, Role};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

fn invalid(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// The text of a Responses `content` (a string, or parts); the parts that are not text
/// (images, files, audio) in the chat dialect, passed on to the upstream. A string is taken out
/// of the request, not copied: a long input is in memory once.
fn content_of(content: Option<&mut Value>) -> Result<(String, Vec<Value>), ApiError> {
    let parts = match content {
        None | Some(Value::Null) => return Ok((String::new(), Vec::new())),
        Some(Value::String(s)) => return Ok((std::mem::take(s), Vec::new())),
        Some(Value::Array(parts)) => parts,
        Some(_) => {
            return Err(invalid(
                "An input message's `content` must be a string or an array of content parts.",
                "input",
            ))
        }
    };
    let mut texts = Vec::new();
    let mut other = Vec::new();
    for part in parts.iter() {
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
fn input_messages(input: Value, messages: &mut Vec<Message>) -> Result<(), ApiError> {
    let items = match input {
        Value::String(text) => {
            messages.push(Message::new(Role::User, text));
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
    for mut item in items {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("message");
        match kind {
            "message" => messages.push(input_message(&mut item)?),
            "function_call" => {
                let call = function_call(&item)?;
                // Calls of one turn follow each other: they belong to one assistant message.
                match messages.last_mut() {
                    Some(last) if last.role == Role::Assistant && last.parts.is_empty() => {
                        last.tool_calls.push(call)
                    }
                    _ => messages.push(Message::assistant_calling("", vec![call])),
                }
            }
            "function_call_output" => {
                let call_id = item.get("call_id").and_then(Value::as_str);
                let call_id = call_id.unwrap_or("").to_string();
                if call_id.is_empty() {
                    return Err(invalid(
                        "A `function_call_output` input item needs the `call_id` of the call it answers.",
                        "input",
                    ));
                }
                let (output, _) = content_of(item.get_mut("output"))?;
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

/// A `message` input item.
fn input_message(item: &mut Value) -> Result<Message, ApiError> {
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
    let (text, other) = content_of(item.get_mut("content"))?;
    Ok(message_with_parts(role, text, other))
}

/// A `function_call` input item: a call the model made in an earlier turn.
fn function_call(item: &Value) -> Result<ToolCall, ApiError> {
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
    Ok(ToolCall::new(call_id, name, arguments))
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

/// A Responses request: the fields this surface reads, each as sent (`null` included, so that
/// an echoed `null` stays one); the rest of a body is skipped unread.
#[derive(Deserialize)]
struct ResponsesRequest {
    #[serde(default, deserialize_with = "present")]
    model: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    input: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    instructions: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    stream: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    store: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    previous_response_id: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    enforce: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    background: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    conversation: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    prompt: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    tools: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    tool_choice: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    text: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    temperature: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    top_p: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    max_output_tokens: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    metadata: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    parallel_tool_calls: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    truncation: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    user: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    reasoning: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    include: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    max_tool_calls: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    top_logprobs: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    safety_identifier: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    service_tier: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    seed: Option<Value>,
    #[serde(default, deserialize_with = "present")]
    stop: Option<Value>,
}

/// The request fields a `response` object echoes, as the client sent them; the ones OpenAI's
/// object always carries stand at their defaults when they were not sent.
#[derive(Serialize)]
pub(crate) struct Echo {
    tools: Value,
    tool_choice: Value,
    text: Value,
    metadata: Value,
    parallel_tool_calls: Value,
    store: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    instructions: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    temperature: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    top_p: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    max_output_tokens: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    previous_response_id: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    truncation: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    user: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning: Option<Value>,
}

impl Echo {
    fn of(request: &ResponsesRequest) -> Self {
        let or = |sent: &Option<Value>, default: Value| sent.clone().unwrap_or(default);
        Echo {
            tools: or(&request.tools, json!([])),
            tool_choice: or(&request.tool_choice, json!("auto")),
            text: or(&request.text, json!({"format": {"type": "text"}})),
            metadata: or(&request.metadata, json!({})),
            parallel_tool_calls: or(&request.parallel_tool_calls, json!(true)),
            store: or(&request.store, json!(true)),
            instructions: request.instructions.clone(),
            temperature: request.temperature.clone(),
            top_p: request.top_p.clone(),
            max_output_tokens: request.max_output_tokens.clone(),
            previous_response_id: request.previous_response_id.clone(),
            truncation: request.truncation.clone(),
            user: request.user.clone(),
            reasoning: request.reasoning.clone(),
        }
    }
}

/// Whether a field was asked for: sent, not `null`, not an empty list.
fn asked_for(value: &Option<Value>) -> bool {
    match value {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(_) => true,
    }
}

impl ResponsesRequest {
    /// Reads a body ([`read_request`]).
    fn read(body: Bytes) -> Result<Self, ApiError> {
        read_request(body)
    }

    /// Refuses the fields this proxy cannot carry to a chat-completions upstream, rather than
    /// dropping them.
    fn refuse_unsupported(&self) -> Result<(), ApiError> {
        let refused = [
            (
                "background",
                &self.background,
                "background responses are not supported by this proxy",
            ),
            (
                "conversation",
                &self.conversation,
                "conversations are not supported by this proxy; use `previous_response_id`",
            ),
            (
                "prompt",
                &self.prompt,
                "stored prompts are not supported by this proxy",
            ),
        ];
        for (key, value, why) in refused {
            if value
                .as_ref()
                .is_some_and(|v| !v.is_null() && v != &Value::Bool(false))
            {
                return Err(invalid(format!("`{key}`: {why}."), key));
            }
        }
        Ok(())
    }

    /// The conversation: `instructions` as a system message, then the `input` items.
    fn messages(&mut self) -> Result<Vec<Message>, ApiError> {
        let mut messages = Vec::new();
        match self.instructions.take() {
            Some(Value::String(s)) if !s.is_empty() => messages.push(Message::system(s)),
            None | Some(Value::String(_) | Value::Null) => {}
            Some(_) => return Err(invalid("`instructions` must be a string.", "instructions")),
        }
        match self.input.take() {
            Some(input) => input_messages(input, &mut messages)?,
            None => return Err(invalid("The request needs an `input`.", "input")),
        }
        if !messages.iter().any(|m| m.role != Role::System) {
            return Err(invalid("`input` must hold at least one item.", "input"));
        }
        Ok(messages)
    }

    /// The stored response this request continues, if it names one.
    fn continues(&mut self) -> Result<Option<String>, ApiError> {
        match self.previous_response_id.take() {
            Some(Value::String(id)) if !id.is_empty() => Ok(Some(id)),
            None | Some(Value::Null) => Ok(None),
            Some(_) => Err(invalid(
                "`previous_response_id` must be a response id.",
                "previous_response_id",
            )),
        }
    }

    /// What names the chat: `metadata.chat_id`, else `user` or `safety_identifier`.
    fn chat_hint(&self) -> Option<String> {
        let named = |field: Option<&Value>| field.and_then(Value::as_str).and_then(non_empty);
        named(self.metadata.as_ref().and_then(|m| m.get("chat_id")))
            .or_else(|| named(self.user.as_ref().or(self.safety_identifier.as_ref())))
    }

    /// The fields asked for that a chat-completions upstream has no use for: left out, and
    /// named in the answer's `warnings` and the `X-Enforce-Warnings` header (`fields_ignored`).
    fn ignored(&self) -> Vec<String> {
        [
            ("include", &self.include),
            ("truncation", &self.truncation),
            ("max_tool_calls", &self.max_tool_calls),
            ("top_logprobs", &self.top_logprobs),
        ]
        .into_iter()
        .filter(|(_, value)| asked_for(value))
        .map(|(name, _)| name.to_string())
        .collect()
    }

    /// What the upstream gets besides the messages, in the chat-completions dialect.
    fn chat_params(self) -> Result<Map<String, Value>, ApiError> {
        let mut params = Map::new();
        if let Some(tools) = self.tools.filter(|t| !t.is_null()) {
            params.insert("tools".into(), chat_tools(&tools)?);
        }
        if let Some(choice) = self.tool_choice.filter(|c| !c.is_null()) {
            params.insert("tool_choice".into(), chat_tool_choice(choice));
        }
        if let Some(format) = self
            .text
            .as_ref()
            .map(response_format)
            .transpose()?
            .flatten()
        {
            params.insert("response_format".into(), format);
        }
        let effort = self.reasoning.and_then(|r| r.get("effort").cloned());
        // Passed on as they are, under the same name or the chat dialect's.
        let passed = [
            ("max_tokens", self.max_output_tokens),
            ("reasoning_effort", effort),
            ("temperature", self.temperature),
            ("top_p", self.top_p),
            ("parallel_tool_calls", self.parallel_tool_calls),
            ("user", self.user),
            ("metadata", self.metadata),
            ("safety_identifier", self.safety_identifier),
            ("service_tier", self.service_tier),
            ("seed", self.seed),
            ("stop", self.stop),
        ];
        for (name, value) in passed {
            if let Some(value) = value.filter(|v| !v.is_null()) {
                params.insert(name.into(), value);
            }
        }
        Ok(params)
    }
}

/// A `tool_choice` naming a function, in the chat dialect; any other as it is.
fn chat_tool_choice(choice: Value) -> Value {
    match choice.get("name").and_then(Value::as_str) {
        Some(name) if choice.get("type").and_then(Value::as_str) == Some("function") => {
            json!({"type": "function", "function": {"name": name}})
        }
        _ => choice,
    }
}

/// Parses a `POST /v1/responses` body: the shared [`Ask`], and the fields its `response`
/// object echoes.
pub(crate) fn parse_responses_request(body: Bytes) -> Result<(Ask, Echo), ApiError> {
    let mut request = ResponsesRequest::read(body)?;
    let model = model_of(request.model.take())?;
    request.refuse_unsupported()?;
    let echo = Echo::of(&request);
    let messages = request.messages()?;
    let continues = request.continues()?;
    let store = request.store.take().and_then(|v| v.as_bool());
    let stream = stream_of(request.stream.as_ref())?;
    let enforce = request.enforce.take();
    let chat_hint = request.chat_hint();
    let ignored = request.ignored();
    let ask = Ask {
        model,
        messages,
        params: request.chat_params()?,
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
    Ok((ask, echo))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `null` is a value, a field sent twice counts once (the last), and what is not an
    /// object is refused with the message every surface gives.
    #[test]
    fn the_reading_keeps_nulls_repeats_and_refusals() {
        let request = ResponsesRequest::read(Bytes::from_static(
            br#"{"input": null, "model": "a", "model": "b", "x": [1]}"#,
        ))
        .expect("reads");
        assert_eq!(request.input, Some(Value::Null));
        assert_eq!(request.model, Some(json!("b")));
        assert_eq!(request.stream, None);
        for (body, message) in [
            (&b"[1]"[..], "The request body must be a JSON object."),
            (b"{\"model\": ", "The request body is not valid JSON"),
        ] {
            let error = ResponsesRequest::read(Bytes::copy_from_slice(body))
                .err()
                .expect("refused");
            assert!(error.message.starts_with(message), "{}", error.message);
        }
    }

    /// Every field this surface reads lands where it belongs: in the chat parameters (under
    /// its own name or the chat dialect's), the echo, the ignored fields, the ask.
    #[test]
    fn every_field_is_read_under_its_own_name() {
        let body = json!({
            "model": "m", "input": "q", "instructions": "Be brief.", "stream": true,
            "store": false, "previous_response_id": "resp_1", "enforce": {"k": 1},
            "tools": [{"type": "function", "name": "f", "parameters": {}}],
            "tool_choice": {"type": "function", "name": "f"},
            "text": {"format": {"type": "json_object"}}, "temperature": 0.5, "top_p": 0.9,
            "max_output_tokens": 64, "metadata": {"chat_id": "c"}, "parallel_tool_calls": false,
            "truncation": "auto", "user": "u", "reasoning": {"effort": "low"},
            "include": ["x"], "max_tool_calls": 2, "top_logprobs": 1,
            "safety_identifier": "s", "service_tier": "flex", "seed": 7, "stop": ["."],
        });
        let (ask, echo) = parse_responses_request(Bytes::from(body.to_string())).expect("reads");
        assert_eq!(
            Value::Object(ask.params),
            json!({
                "tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                "tool_choice": {"type": "function", "function": {"name": "f"}},
                "response_format": {"type": "json_object"}, "max_tokens": 64,
                "reasoning_effort": "low", "temperature": 0.5, "top_p": 0.9,
                "parallel_tool_calls": false, "user": "u", "metadata": {"chat_id": "c"},
                "safety_identifier": "s", "service_tier": "flex", "seed": 7, "stop": ["."],
            })
        );
        let echoed = [
            "tools",
            "tool_choice",
            "text",
            "temperature",
            "top_p",
            "max_output_tokens",
            "metadata",
            "previous_response_id",
            "parallel_tool_calls",
            "store",
            "truncation",
            "user",
            "reasoning",
            "instructions",
        ];
        let expected: Map<String, Value> = echoed
            .iter()
            .map(|&key| (key.to_string(), body[key].clone()))
            .collect();
        assert_eq!(
            serde_json::to_value(&echo).expect("echo"),
            Value::Object(expected)
        );
        assert_eq!(
            ask.ignored,
            ["include", "truncation", "max_tool_calls", "top_logprobs"]
        );
        assert_eq!(
            (
                ask.model.as_str(),
                ask.stream,
                ask.store,
                ask.continues.as_deref()
            ),
            ("m", true, false, Some("resp_1"))
        );
        assert_eq!(
            (ask.enforce, ask.chat_hint),
            (Some(json!({"k": 1})), Some("c".into()))
        );
        assert_eq!(ask.messages.len(), 2, "instructions and input");
        for field in ["background", "conversation", "prompt"] {
            let mut refused = body.clone();
            refused[field] = json!(true);
            let error = parse_responses_request(Bytes::from(refused.to_string())).err();
            assert_eq!(error.and_then(|e| e.param), Some(field));
        }
    }

    /// A request that sends none of the echoed fields echoes the defaults OpenAI's object
    /// always carries; one that sends `null` echoes `null`.
    #[test]
    fn unsent_echoed_fields_stand_at_their_defaults() {
        let (_, echo) =
            parse_responses_request(Bytes::from_static(br#"{"model": "m", "input": "q"}"#))
                .expect("reads");
        assert_eq!(
            serde_json::to_value(&echo).expect("echo"),
            json!({
                "tools": [], "tool_choice": "auto", "text": {"format": {"type": "text"}},
                "metadata": {}, "parallel_tool_calls": true, "store": true,
            })
        );
        let (_, echo) = parse_responses_request(Bytes::from_static(
            br#"{"model": "m", "input": "q", "tools": null, "user": null}"#,
        ))
        .expect("reads");
        let echo = serde_json::to_value(&echo).expect("echo");
        assert_eq!(
            (&echo["tools"], echo.get("user")),
            (&Value::Null, Some(&Value::Null))
        );
    }
}
