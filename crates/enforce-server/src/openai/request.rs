//! A chat-completions request read into the shared [`Ask`] by one derived [`ChatRequest`]. Every
//! field the proxy does not interpret goes to the runner unchanged.

use crate::error::ApiError;
use crate::pipeline::{model_of, non_empty, present, read_request, stream_of, Ask};
use bytes::Bytes;
use enforce_core::{runner::ToolCall, Message, Role};
use serde::Deserialize;
use serde_json::{Map, Value};

/// A chat-completions request: the fields the proxy interprets, each as sent, and the rest
/// (`temperature`, `tools`, `n`, `metadata`, `user`, ...) for the runner as they came.
#[derive(Deserialize)]
struct ChatRequest {
    #[serde(default, deserialize_with = "present")]
    model: Option<Value>,
    messages: Option<Value>,
    stream: Option<Value>,
    stream_options: Option<Value>,
    /// The request's facts, for the proxy itself; `null` kept as sent.
    #[serde(default, deserialize_with = "present")]
    enforce: Option<Value>,
    #[serde(flatten)]
    params: Map<String, Value>,
}

/// The chat a chat-completions body names: `metadata.chat_id`, else `user`.
fn chat_hint(params: &Map<String, Value>) -> Option<String> {
    params
        .get("metadata")
        .and_then(|m| m.get("chat_id"))
        .and_then(Value::as_str)
        .and_then(non_empty)
        .or_else(|| {
            params
                .get("user")
                .and_then(Value::as_str)
                .and_then(non_empty)
        })
}

fn role_of(name: &str) -> Option<Role> {
    match name {
        "system" | "developer" => Some(Role::System),
        // The legacy `function` result has no call id to answer: it reaches the model as text.
        "user" | "function" => Some(Role::User),
        "assistant" => Some(Role::Assistant),
        "tool" => Some(Role::Tool),
        _ => None,
    }
}

/// The text of a message `content`: a string, or the `text` of every text part of an array;
/// `null` (an assistant turn that only called tools) is empty. A string is taken out of the
/// request, not copied: a long conversation is in memory once.
fn content_text(content: Option<&mut Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(std::mem::take(s)),
        Some(Value::Array(parts)) => {
            let texts: Vec<&str> = parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str) == Some("text"))
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            Ok(texts.join("\n"))
        }
        Some(_) => Err(ApiError::bad_request(
            "A message's `content` must be a string or an array of content parts.",
            Some("messages"),
        )),
    }
}

/// Parses a request body; every field it does not interpret goes to the runner unchanged
/// (`temperature`, `tools`, `max_tokens`, `max_completion_tokens`, `metadata`, `user`, ...).
/// `stream`, `stream_options` and `enforce` (the request's facts, for the proxy itself) are
/// interpreted here and never forwarded upstream.
pub(crate) fn parse_chat_request(body: Bytes) -> Result<Ask, ApiError> {
    let request: ChatRequest = read_request(body)?;
    let model = model_of(request.model)?;
    let Some(Value::Array(raw_messages)) = request.messages else {
        return Err(ApiError::bad_request(
            "The request needs `messages`, an array of chat messages.",
            Some("messages"),
        ));
    };
    let messages = raw_messages
        .into_iter()
        .map(read_message)
        .collect::<Result<Vec<_>, _>>()?;
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` must hold at least one message.",
            Some("messages"),
        ));
    }
    one_choice(&request.params)?;
    let stream = stream_of(request.stream.as_ref())?;
    let include_usage = request
        .stream_options
        .as_ref()
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(Ask {
        model,
        messages,
        stream,
        include_usage,
        enforce: request.enforce,
        chat_hint: chat_hint(&request.params),
        params: request.params,
        continues: None,
        store: false,
        ignored: Vec::new(),
    })
}

/// One checked answer per request: choices the proxy would not check are refused, not
/// generated and dropped.
fn one_choice(params: &Map<String, Value>) -> Result<(), ApiError> {
    match params.get("n") {
        None | Some(Value::Null) => Ok(()),
        Some(n) if n.as_u64() == Some(1) => Ok(()),
        Some(n) => Err(ApiError::bad_request(
            format!("This proxy checks one answer per request, so `n` must be 1 (it was {n}). Send {n} requests to get {n} checked answers."),
            Some("n"),
        )),
    }
}

/// One message of `messages`: its role, text, parts beyond text, tool calls and tool call id.
fn read_message(mut raw: Value) -> Result<Message, ApiError> {
    let role_name = raw.get("role").and_then(Value::as_str).unwrap_or("");
    let legacy_function = role_name == "function";
    let role = role_of(role_name).ok_or_else(|| {
        ApiError::bad_request(
            format!(
                "A message's `role` must be `system`, `developer`, `user`, `assistant` or `tool`, got {}.",
                crate::pipeline::shown_role(raw.get("role"))
            ),
            Some("messages"),
        )
    })?;
    let mut content = content_text(raw.get_mut("content"))?;
    if legacy_function {
        content = format!("[tool result]\n{content}");
    }
    let mut message = Message::new(role, content);
    // Parts beyond text (an image, audio, a file) go to the upstream as they came; the
    // validators see the text parts.
    if let Some(Value::Array(parts)) = raw.get("content") {
        if parts
            .iter()
            .any(|p| p.get("type").and_then(Value::as_str) != Some("text"))
        {
            message.parts = parts.clone();
        }
    }
    if role == Role::Assistant {
        if let Some(calls) = raw.get("tool_calls") {
            message.tool_calls = ToolCall::list_from_openai(calls).map_err(|e| {
                ApiError::bad_request(
                    format!("An assistant message's `tool_calls` cannot be read: {e}."),
                    Some("messages"),
                )
            })?;
        }
    }
    if role == Role::Tool {
        match raw.get("tool_call_id").and_then(Value::as_str) {
            Some(id) if !id.is_empty() => message.tool_call_id = Some(id.to_string()),
            _ => {
                return Err(ApiError::bad_request(
                    "A `tool` message needs the `tool_call_id` of the call it answers.",
                    Some("messages"),
                ))
            }
        }
    }
    Ok(message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::StatusCode;

    #[test]
    fn uninterpreted_fields_pass_through() {
        let body = br#"{"model":"m","messages":[{"role":"developer","content":"s"},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],
            "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":5,
            "tools":[{"type":"function"}],"x_custom":{"k":1}}"#;
        let r = parse_chat_request(Bytes::copy_from_slice(body)).unwrap();
        assert!(r.stream && r.include_usage);
        assert_eq!(r.messages[0].role, Role::System);
        assert_eq!(r.messages[1].content, "a\nb");
        assert_eq!(r.messages[2].content, "");
        assert_eq!(r.messages[2].tool_calls, [ToolCall::new("c1", "f", "{}")]);
        assert_eq!(r.messages[3].role, Role::Tool);
        assert_eq!(r.messages[3].content, "42");
        assert_eq!(r.messages[3].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(r.params["max_completion_tokens"], 5);
        assert_eq!(r.params["x_custom"]["k"], 1);
        assert!(r.params.contains_key("tools"));
        assert!(!r.params.contains_key("stream") && !r.params.contains_key("model"));
    }

    #[test]
    fn rejects_bad_requests_with_a_param() {
        for (body, param) in [
            (&br#"{"messages":[]}"#[..], Some("model")),
            (br#"{"model":"m"}"#, Some("messages")),
            (br#"{"model":"m","messages":[]}"#, Some("messages")),
            (
                br#"{"model":"m","messages":[{"role":"x","content":""}]}"#,
                Some("messages"),
            ),
            (
                br#"{"model":"m","messages":[{"role":"tool","content":"42"}]}"#,
                Some("messages"),
            ),
            (
                br#"{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c"}]}]}"#,
                Some("messages"),
            ),
            (br#"[1]"#, None),
            (br#"{"#, None),
        ] {
            let e = parse_chat_request(Bytes::copy_from_slice(body)).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.param, param);
        }
    }

    /// A field sent twice counts once (the last), as a JSON map reads it; an `enforce` of
    /// `null` stays one; `n` of 1 still reaches the upstream.
    #[test]
    fn repeats_nulls_and_n_are_kept() {
        let r = parse_chat_request(
            Bytes::from_static(br#"{"model":"a","model":"b","messages":[{"role":"user","content":"q"}],"enforce":null,"n":1,"top_p":0.5,"top_p":0.25}"#),
        )
        .unwrap();
        assert_eq!(r.model, "b");
        assert_eq!(r.enforce, Some(Value::Null));
        assert_eq!(r.params["n"], 1);
        assert_eq!(r.params["top_p"], 0.25);
        assert_eq!(r.params.len(), 2);
    }

    #[test]
    fn chat_hint_prefers_metadata_then_user() {
        let r = parse_chat_request(
            Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"q"}],"metadata":{"chat_id":"meta"},"user":"u"}"#),
        )
        .unwrap();
        assert_eq!(r.chat_hint.as_deref(), Some("meta"));
        let r = parse_chat_request(
            Bytes::from_static(br#"{"model":"m","messages":[{"role":"user","content":"q"},{"role":"user","content":"q"}],"metadata":{"chat_id":" "},"user":"u"}"#),
        )
        .unwrap();
        assert_eq!(r.chat_hint.as_deref(), Some("u"));
    }
}
