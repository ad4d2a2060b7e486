//! The OpenAI chat-completions wire format: parsing requests, building completions, chunks and
//! the `enforcement` object, and wording failures for people.

use crate::error::ApiError;
use axum::http::StatusCode;
use enforce_core::{
    Issue, Message, Outcome, Role, RunnerError, Status, StopReason, ToolCall, Usage,
};
use serde_json::{json, Map, Value};

/// Request fields the proxy interprets itself and does not pass to the runner.
/// `enforce` holds the request's facts for the proxy itself and is never forwarded upstream.
const INTERPRETED: &[&str] = &["model", "messages", "stream", "stream_options", "enforce"];

/// A parsed `POST /v1/chat/completions` body.
#[derive(Debug, Clone)]
pub struct ChatRequest {
    /// The public model id.
    pub model: String,
    /// The conversation.
    pub messages: Vec<Message>,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true`.
    pub include_usage: bool,
    /// The proxy's own `enforce` field (facts in `enforce.context`), as sent; checked by the
    /// handler against the configured size.
    pub enforce: Option<Value>,
    /// Every field the proxy does not interpret, passed on to the runner unchanged
    /// (`temperature`, `tools`, `max_tokens`, `max_completion_tokens`, `metadata`, `user`, ...).
    pub params: Map<String, Value>,
}

impl ChatRequest {
    /// The chat this request belongs to: the `X-OpenWebUI-Chat-Id` header, else
    /// `metadata.chat_id`, else `user`.
    pub fn chat_id(&self, header: Option<&str>) -> Option<String> {
        let non_empty = |s: &str| {
            let s = s.trim();
            (!s.is_empty()).then(|| s.to_string())
        };
        header
            .and_then(non_empty)
            .or_else(|| {
                self.params
                    .get("metadata")
                    .and_then(|m| m.get("chat_id"))
                    .and_then(Value::as_str)
                    .and_then(non_empty)
            })
            .or_else(|| {
                self.params
                    .get("user")
                    .and_then(Value::as_str)
                    .and_then(non_empty)
            })
    }
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
/// `null` (an assistant turn that only called tools) is empty.
fn content_text(content: Option<&Value>) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
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

/// Parses a request body.
pub fn parse_chat_request(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("The request body is not valid JSON: {e}."), None)
    })?;
    let Value::Object(mut fields) = value else {
        return Err(ApiError::bad_request(
            "The request body must be a JSON object.",
            None,
        ));
    };
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(ApiError::bad_request(
                "The request needs a `model` (one of the ids listed by /v1/models).",
                Some("model"),
            ))
        }
    };
    let Some(Value::Array(raw_messages)) = fields.get("messages") else {
        return Err(ApiError::bad_request(
            "The request needs `messages`, an array of chat messages.",
            Some("messages"),
        ));
    };
    let mut messages = Vec::with_capacity(raw_messages.len());
    for raw in raw_messages {
        let role_name = raw.get("role").and_then(Value::as_str).unwrap_or("");
        let role = role_of(role_name).ok_or_else(|| {
            ApiError::bad_request(
                format!("Unknown message role `{role_name}`."),
                Some("messages"),
            )
        })?;
        let mut content = content_text(raw.get("content"))?;
        if role_name == "function" {
            content = format!("[tool result]\n{content}");
        }
        let mut message = Message::new(role, content);
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
        messages.push(message);
    }
    if messages.is_empty() {
        return Err(ApiError::bad_request(
            "`messages` must hold at least one message.",
            Some("messages"),
        ));
    }
    let stream = fields
        .get("stream")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let include_usage = fields
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let enforce = fields.remove("enforce");
    for key in INTERPRETED {
        fields.remove(*key);
    }
    Ok(ChatRequest {
        model,
        messages,
        stream,
        include_usage,
        enforce,
        params: fields,
    })
}

/// OpenAI `usage` from the tokens summed over all attempts (zeros when the runner reported
/// none).
pub fn usage_json(usage: Option<Usage>) -> Value {
    let u = usage.unwrap_or_default();
    json!({
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total(),
    })
}

fn issue_json(issue: &Issue) -> Value {
    json!({
        "validator": issue.validator,
        "code": issue.code,
        "message": issue.message,
        "hint": issue.hint,
        "severity": issue.severity.as_str(),
        "line": issue.line,
    })
}

/// The per-type layer's `validation_status` of an outcome, one value per case (documented in
/// README's "How each answer was checked"):
///
/// | value | when |
/// |---|---|
/// | `""` | passed or repaired, every check ran |
/// | `<NAME>_UNAVAILABLE` | a validator gave no verdict (failed open or closed, switched off, breaker open): its configured name upper-cased, e.g. `PARSER_UNAVAILABLE` for `parser` |
/// | `INVALID_UNRESOLVED` | the checks ran and the answer still failed them (unresolved, aborted, or replaced by a fallback) |
pub fn validation_status(outcome: &Outcome) -> String {
    let unavailable = |name: &str| format!("{}_UNAVAILABLE", name.to_ascii_uppercase());
    if outcome.status == Status::Unavailable {
        return outcome
            .unavailable()
            .map_or_else(|| unavailable("VALIDATOR"), |u| unavailable(&u.validator));
    }
    if outcome.status.is_success() && !outcome.fallback_used {
        return outcome
            .unchecked_validators()
            .first()
            .map_or_else(String::new, |name| unavailable(name));
    }
    "INVALID_UNRESOLVED".to_string()
}

/// The `enforcement` object added to completions, finish chunks and errors.
pub fn enforcement_json(outcome: &Outcome) -> Value {
    let repairs: Vec<&str> = outcome
        .attempts
        .iter()
        .flat_map(|a| a.repairs.iter().map(String::as_str))
        .collect();
    let unchecked = outcome.unchecked_validators();
    let mut object = json!({
        "status": outcome.status.as_str(),
        // Passed or repaired with every check run; `false` says someone must not trust it blindly.
        "validated": outcome.status.is_success() && !outcome.fallback_used && unchecked.is_empty(),
        "unchecked_validators": unchecked,
        "stop_reason": outcome.stop_reason,
        "attempts": outcome.attempts.len(),
        "issues": outcome.issues.iter().map(issue_json).collect::<Vec<_>>(),
        "warnings": outcome.warnings.iter().map(issue_json).collect::<Vec<_>>(),
        "repairs": repairs,
        "fallback_used": outcome.fallback_used,
        "validation_status": validation_status(outcome),
    });
    // The input stage's verdict, only for profiles that have one.
    if let (Some(input), Value::Object(map)) = (&outcome.input, &mut object) {
        let mut check = json!({
            "passed": input.passed,
            "action": input.action,
            "issues": input.issues.iter().map(issue_json).collect::<Vec<_>>(),
        });
        if let (Some(r), Value::Object(c)) = (&input.reformulation, &mut check) {
            c.insert(
                "reformulation".into(),
                json!({
                    "hook": r.hook,
                    "question": r.question,
                    "context_changed": r.context_changed,
                    "error": r.error,
                }),
            );
        }
        map.insert("input".into(), check);
    }
    object
}

/// Identity of one response: the same `id`, `created` and `model` in every chunk.
#[derive(Debug, Clone)]
pub struct CompletionId {
    /// `chatcmpl-...`.
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The public model id.
    pub model: String,
}

/// `tool_calls` when the answer calls tools, else `stop`.
pub fn finish_reason(tool_calls: &[ToolCall]) -> &'static str {
    if tool_calls.is_empty() {
        "stop"
    } else {
        "tool_calls"
    }
}

impl CompletionId {
    /// A `chat.completion` with one assistant message: the text (`null` when the answer only
    /// calls tools) and the tool calls.
    pub fn completion(&self, content: &str, outcome: &Outcome) -> Value {
        let calls = &outcome.tool_calls;
        let mut message = json!({"role": "assistant", "content": content});
        if !calls.is_empty() {
            if content.is_empty() {
                message["content"] = Value::Null;
            }
            message["tool_calls"] = calls.iter().map(ToolCall::to_openai).collect();
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": finish_reason(calls),
            }],
            "usage": usage_json(outcome.usage),
            "enforcement": enforcement_json(outcome),
        })
    }

    /// A `chat.completion.chunk` with one choice.
    pub fn chunk(&self, delta: Value, finish_reason: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
        })
    }

    /// The usage chunk: no choices, only `usage`.
    pub fn usage_chunk(&self, usage: Option<Usage>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [],
            "usage": usage_json(usage),
        })
    }
}

/// An Open WebUI status event.
pub fn status_event(description: &str, done: bool, hidden: bool) -> Value {
    let mut data = json!({"description": description, "done": done});
    if hidden {
        data["hidden"] = Value::Bool(true);
    }
    json!({"event": {"type": "status", "data": data}})
}

fn describe_issues(issues: &[Issue]) -> String {
    let mut lines = Vec::with_capacity(issues.len());
    for issue in issues {
        let mut line = format!("- {}: {}", issue.code, issue.message.trim_end_matches('.'));
        if let Some(l) = issue.line {
            line.push_str(&format!(" (line {l})"));
        }
        line.push('.');
        if let Some(hint) = &issue.hint {
            line.push_str(&format!(" {}", hint.trim()));
        }
        lines.push(line);
    }
    lines.join("\n")
}

/// What a runner failure means for the person waiting, and the HTTP status it maps to.
pub fn runner_failure(error: &RunnerError, attempt: usize) -> ApiError {
    let when = if attempt > 1 {
        format!(" while re-asking (attempt {attempt})")
    } else {
        String::new()
    };
    match error {
        RunnerError::Timeout { after_ms } => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "upstream_error",
            "upstream_timeout",
            format!(
                "The model did not answer in time{when} (gave up after {:.1} s). Please try again; if it keeps happening, ask for a shorter answer.",
                *after_ms as f64 / 1000.0
            ),
        ),
        // A success status with a broken body: the connection dropped mid-answer.
        RunnerError::Upstream {
            status: Some(200..=299),
            message,
        } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_cut_off",
            format!(
                "The model's answer was cut off before it was complete{when} ({}). Please try again.",
                message.trim().trim_end_matches('.')
            ),
        ),
        RunnerError::Upstream { status, message } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_error",
            format!(
                "The model server reported an error{when}{}: {}. Please try again in a moment.",
                status.map(|s| format!(" (HTTP {s})")).unwrap_or_default(),
                message.trim().trim_end_matches('.')
            ),
        ),
        RunnerError::Process { message, .. } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "runner_failed",
            format!(
                "The model could not be run{when}: {}. Please tell the administrator of this proxy.",
                message.trim().trim_end_matches('.')
            ),
        ),
        RunnerError::Protocol { message } => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_protocol_error",
            format!(
                "The model's reply was cut off or could not be read{when}: {}. Please try again.",
                message.trim().trim_end_matches('.')
            ),
        ),
        // The model cannot serve this at all (missing or broken model file, a prompt longer
        // than its context): retrying will not help, the operator or the client must act.
        RunnerError::Unavailable { message } => ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "upstream_error",
            "model_unavailable",
            format!(
                "The model cannot answer this request{when}: {}.",
                message.trim().trim_end_matches('.')
            ),
        ),
        // A kind of failure enforce-core learns later: still the runner's fault, in its words.
        other => ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "runner_failed",
            format!("The model could not answer{when}: {other}. Please try again."),
        ),
    }
}

/// The error for an enforcement that ended without a deliverable answer.
pub fn outcome_failure(outcome: &Outcome) -> ApiError {
    let attempts = outcome.attempts.len();
    let mut error = if let Some(runner_error) = outcome.runner_error() {
        runner_failure(runner_error, attempts + 1)
    } else if outcome.stop_reason == StopReason::InputRejected {
        let errors: Vec<Issue> = outcome
            .input
            .iter()
            .flat_map(|i| i.issues.iter().filter(|i| i.is_error()).cloned())
            .collect();
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "input_rejected",
            format!(
                "The request was not sent to the model because it did not pass the input checks:\n{}",
                describe_issues(&errors)
            ),
        )
    } else if outcome.status == Status::Unavailable {
        let (who, why) = outcome
            .unavailable()
            .map(|u| (u.validator.as_str(), u.reason.as_str()))
            .unwrap_or(("a validator", "no verdict"));
        ApiError {
            retry_after: Some(5),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "enforcement_error",
                "validator_unavailable",
                format!(
                    "The answer could not be checked because the check `{who}` is unavailable ({why}), so it was not shown. Please try again in a moment."
                ),
            )
        }
    } else if outcome.response.is_none() {
        ApiError::new(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "no_answer",
            "The model gave no answer. Please try again.",
        )
    } else {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "enforcement_error",
            "enforcement_unresolved",
            format!(
                "The model's answer still broke the required format after {attempts} attempt(s), so it was not shown. What was wrong:\n{}\nPlease try again or rephrase your request.",
                describe_issues(&outcome.issues)
            ),
        )
    };
    error.enforcement = Some(Box::new(enforcement_json(outcome)));
    error.enforce_status = Some(outcome.status.as_str());
    error
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A model that cannot serve the request (the local runner's missing file) is a 503 that
    /// names what is missing, not a generic failure.
    #[test]
    fn an_unavailable_model_is_a_503_naming_the_cause() {
        let error = RunnerError::Unavailable {
            message: "model file /m/x.gguf not found".into(),
        };
        let api = runner_failure(&error, 1);
        assert_eq!(api.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(api.code, "model_unavailable");
        assert!(
            api.message.contains("/m/x.gguf not found"),
            "{}",
            api.message
        );
    }

    #[test]
    fn uninterpreted_fields_pass_through() {
        let body = br#"{"model":"m","messages":[{"role":"developer","content":"s"},
            {"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"},{"type":"text","text":"b"}]},
            {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},
            {"role":"tool","tool_call_id":"c1","content":"42"}],
            "stream":true,"stream_options":{"include_usage":true},"max_completion_tokens":5,
            "tools":[{"type":"function"}],"x_custom":{"k":1}}"#;
        let r = parse_chat_request(body).unwrap();
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
            let e = parse_chat_request(body).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST);
            assert_eq!(e.param, param);
        }
    }

    #[test]
    fn chat_id_prefers_header_then_metadata_then_user() {
        let r = parse_chat_request(
            br#"{"model":"m","messages":[{"role":"user","content":"q"}],"metadata":{"chat_id":"meta"},"user":"u"}"#,
        )
        .unwrap();
        assert_eq!(r.chat_id(Some("hdr")).as_deref(), Some("hdr"));
        assert_eq!(r.chat_id(Some(" ")).as_deref(), Some("meta"));
        let r = parse_chat_request(
            br#"{"model":"m","messages":[{"role":"user","content":"q"}],"user":"u"}"#,
        )
        .unwrap();
        assert_eq!(r.chat_id(None).as_deref(), Some("u"));
    }
}
