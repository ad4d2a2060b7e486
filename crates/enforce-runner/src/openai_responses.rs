//! The `openai` runner's `api: responses`: the upstream's `POST {base_url}/responses` (the
//! OpenAI Responses API) instead of chat completions. The request (chat-completions dialect,
//! as the loop and the proxy pass it) is translated into `instructions`, `input` items and the
//! Responses spelling of its fields; the answer (a `response` object, or its typed stream
//! events) is read back into a [`Reply`].

use crate::http::{error_message, HttpEndpoint, StreamSource};
use crate::process::tail;
use crate::sse::{Chunk, EventReader, SseFramer, StreamFault};
use enforce_core::{
    async_trait, runner::FinishReason, runner::ToolCall, Message, Reply, Request, Role,
    RunnerError, Usage,
};
use serde_json::{json, Map, Value};

/// Request fields the Responses API takes as the chat dialect writes them.
const PASSED_AS_IS: [&str; 11] = [
    "temperature",
    "top_p",
    "parallel_tool_calls",
    "user",
    "metadata",
    "service_tier",
    "safety_identifier",
    "prompt_cache_key",
    "store",
    "reasoning",
    "truncation",
];

/// The Responses side of an `openai` runner: its endpoint, model and configured params.
#[derive(Debug, Clone)]
pub(crate) struct ResponsesApi {
    pub(crate) endpoint: HttpEndpoint,
    pub(crate) model: String,
    pub(crate) params: Map<String, Value>,
}

impl ResponsesApi {
    /// The body for `messages`: the configured params and the request's, translated, then
    /// `model`, `instructions`, `input`, `stream` and `store: false` unless asked otherwise
    /// (the loop keeps its own conversation; the upstream need not keep each attempt).
    pub(crate) fn body(&self, request: &Request, messages: &[Message], stream: bool) -> Value {
        let mut body = Map::new();
        for params in [&self.params, &request.params] {
            translate_params(params, &mut body);
        }
        body.insert("model".into(), Value::String(self.model.clone()));
        let (instructions, input) = input_items(messages);
        if let Some(instructions) = instructions {
            body.insert("instructions".into(), Value::String(instructions));
        }
        body.insert("input".into(), Value::Array(input));
        body.insert("stream".into(), Value::Bool(stream));
        body.entry("store").or_insert(Value::Bool(false));
        Value::Object(body)
    }
}

#[async_trait]
impl StreamSource for ResponsesApi {
    type Reader = ResponsesReader;

    fn http(&self) -> &HttpEndpoint {
        &self.endpoint
    }

    fn write_body(
        &self,
        request: &Request,
        messages: &[Message],
        stream: bool,
        out: &mut dyn std::io::Write,
    ) -> serde_json::Result<()> {
        serde_json::to_writer(out, &self.body(request, messages, stream))
    }

    fn parse_whole(&self, body: &str) -> Result<Reply, RunnerError> {
        parse_response(body)
    }

    fn stream_error(&self, data: &str) -> RunnerError {
        let value: Value = serde_json::from_str(data).unwrap_or(Value::Null);
        let message = value
            .pointer("/response/error/message")
            .or_else(|| value.get("message"))
            .and_then(Value::as_str)
            .map(str::to_string)
            .or_else(|| error_message(data))
            .unwrap_or_else(|| "the stream reported an error without a message".into());
        RunnerError::Upstream {
            status: Some(200),
            message,
        }
    }
}

/// The system messages as `instructions` (joined with a blank line) and the rest as `input`
/// items: user and assistant messages (text, or content parts in the Responses spelling), an
/// assistant's tool calls as `function_call` items, tool results as `function_call_output`.
fn input_items(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut instructions: Vec<&str> = Vec::new();
    let mut input = Vec::with_capacity(messages.len());
    for m in messages {
        match m.role {
            Role::System => instructions.push(&m.content),
            Role::User => input.push(json!({"role": "user", "content": content(m)})),
            Role::Assistant => {
                if !m.content.is_empty() || m.tool_calls.is_empty() {
                    input.push(json!({"role": "assistant", "content": m.content}));
                }
                for call in &m.tool_calls {
                    input.push(json!({"type": "function_call", "call_id": call.id,
                                      "name": call.name, "arguments": call.arguments}));
                }
            }
            Role::Tool => input.push(json!({
                "type": "function_call_output",
                "call_id": m.tool_call_id.clone().unwrap_or_default(),
                "output": m.content,
            })),
        }
    }
    let instructions = (!instructions.is_empty()).then(|| instructions.join("\n\n"));
    (instructions, input)
}

/// A user message's content: its text, or its parts (`text` → `input_text`, `image_url` →
/// `input_image`; others as they are).
fn content(m: &Message) -> Value {
    if m.parts.is_empty() {
        return Value::String(m.content.clone());
    }
    let parts = m.parts.iter().map(|part| match part["type"].as_str() {
        Some("text") => json!({"type": "input_text", "text": part["text"]}),
        Some("image_url") => {
            let url = part
                .pointer("/image_url/url")
                .or_else(|| part.get("image_url"))
                .cloned()
                .unwrap_or(Value::Null);
            json!({"type": "input_image", "image_url": url})
        }
        _ => part.clone(),
    });
    Value::Array(parts.collect())
}

/// The chat dialect's fields in the Responses spelling: `max_tokens` /
/// `max_completion_tokens` → `max_output_tokens`, `response_format` → `text.format`, function
/// tools and a named `tool_choice` flattened, `reasoning_effort` → `reasoning.effort`; the
/// fields the Responses API has none for (`n`, `stop`, `seed`, penalties, `stream_options`,
/// ...) are not sent.
fn translate_params(params: &Map<String, Value>, body: &mut Map<String, Value>) {
    for (key, value) in params {
        match key.as_str() {
            k if PASSED_AS_IS.contains(&k) => {
                body.insert(key.clone(), value.clone());
            }
            "max_tokens" | "max_completion_tokens" | "max_output_tokens" => {
                body.insert("max_output_tokens".into(), value.clone());
            }
            "response_format" => {
                let format = match value["type"].as_str() {
                    Some("json_schema") => {
                        let mut format = value
                            .get("json_schema")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default();
                        format.insert("type".into(), "json_schema".into());
                        Value::Object(format)
                    }
                    Some("json_object") => json!({"type": "json_object"}),
                    _ => continue,
                };
                body.insert("text".into(), json!({"format": format}));
            }
            "tools" => {
                let tools: Vec<Value> = value
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(
                        |tool| match tool.get("function").and_then(Value::as_object) {
                            Some(function) => {
                                let mut flat = function.clone();
                                flat.insert("type".into(), "function".into());
                                Value::Object(flat)
                            }
                            None => tool.clone(),
                        },
                    )
                    .collect();
                body.insert("tools".into(), Value::Array(tools));
            }
            "tool_choice" => {
                let choice = match value.pointer("/function/name") {
                    Some(name) => json!({"type": "function", "name": name}),
                    None => value.clone(),
                };
                body.insert("tool_choice".into(), choice);
            }
            "reasoning_effort" => {
                body.insert("reasoning".into(), json!({"effort": value}));
            }
            _ => {}
        }
    }
}

/// Why a `response` stopped: `incomplete` at `max_output_tokens` is the token limit (the
/// loop's `TRUNCATED`), at `content_filter` a filter; else tool calls or a stop.
fn finish_reason_of(response: &Value, calls: bool) -> FinishReason {
    match (
        response["status"].as_str(),
        response
            .pointer("/incomplete_details/reason")
            .and_then(Value::as_str),
    ) {
        (Some("incomplete"), Some("max_output_tokens")) => FinishReason::Length,
        (Some("incomplete"), Some("content_filter")) => FinishReason::ContentFilter,
        _ if calls => FinishReason::ToolCalls,
        _ => FinishReason::Stop,
    }
}

fn usage_of(response: &Value) -> Option<Usage> {
    let usage = response.get("usage").filter(|u| u.is_object())?;
    Some(Usage {
        input_tokens: usage["input_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["output_tokens"].as_u64().unwrap_or(0),
    })
}

/// The text (every `output_text` part of every `message` item) and the `function_call` items
/// of a `response`.
fn output_of(response: &Value) -> (String, Vec<ToolCall>) {
    let mut text = String::new();
    let mut calls = Vec::new();
    for item in response["output"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("message") => {
                for part in item["content"].as_array().into_iter().flatten() {
                    if part["type"] == "output_text" {
                        text.push_str(part["text"].as_str().unwrap_or_default());
                    }
                }
            }
            Some("function_call") => calls.push(call_of(item, calls.len())),
            _ => {}
        }
    }
    (text, calls)
}

fn call_of(item: &Value, index: usize) -> ToolCall {
    let id = item["call_id"]
        .as_str()
        .map_or_else(|| format!("call_{index}"), str::to_string);
    let arguments = match &item["arguments"] {
        Value::String(s) => s.clone(),
        Value::Null => "{}".to_string(),
        other => other.to_string(),
    };
    ToolCall::new(id, item["name"].as_str().unwrap_or_default(), arguments)
}

/// Reads a whole `response` object. An `error` in it, or `status: failed`, is an upstream
/// error; a response with neither text nor calls a protocol error.
pub(crate) fn parse_response(body: &str) -> Result<Reply, RunnerError> {
    let v: Value = serde_json::from_str(body).map_err(|e| RunnerError::Protocol {
        message: format!("response is not JSON ({e}): {}", tail(body.trim(), 200)),
    })?;
    if v.get("error").is_some_and(|e| !e.is_null()) || v["status"] == "failed" {
        return Err(RunnerError::Upstream {
            status: Some(200),
            message: error_message(body).unwrap_or_else(|| "the response failed".into()),
        });
    }
    if v.get("output").and_then(Value::as_array).is_none() {
        return Err(RunnerError::Protocol {
            message: format!("the response has no `output`: {}", tail(body.trim(), 200)),
        });
    }
    let (text, tool_calls) = output_of(&v);
    Ok(Reply {
        finish_reason: Some(finish_reason_of(&v, !tool_calls.is_empty())),
        usage: usage_of(&v),
        text,
        tool_calls,
        ..Reply::default()
    })
}

/// Reads a Responses stream: `response.output_text.delta` is the answer,
/// `response.reasoning_summary_text.delta` / `response.reasoning_text.delta` the model's
/// reasoning, `response.output_item.done` a finished function call, `response.completed` /
/// `response.incomplete` the end (usage, status); `response.failed` and `error` are errors.
#[derive(Debug, Default)]
pub(crate) struct ResponsesReader {
    framer: SseFramer,
    calls: Vec<ToolCall>,
    finish_reason: Option<FinishReason>,
    done: bool,
}

impl EventReader for ResponsesReader {
    const END: &'static str = "response.completed";

    fn framer(&mut self) -> &mut SseFramer {
        &mut self.framer
    }

    fn is_done(&self) -> bool {
        self.done
    }

    fn event(&mut self, data: &str, out: &mut Vec<Chunk>) -> Result<(), StreamFault> {
        let event: Value = serde_json::from_str(data).map_err(|e| {
            StreamFault::NotJson(format!("event is not JSON ({e}): {}", tail(data, 200)))
        })?;
        let text = |key: &str| event[key].as_str().unwrap_or_default().to_string();
        match event["type"].as_str().unwrap_or_default() {
            "response.output_text.delta" => out.push(Chunk::Text(text("delta"))),
            "response.reasoning_summary_text.delta" | "response.reasoning_text.delta" => {
                out.push(Chunk::Reasoning(text("delta")));
            }
            "response.output_item.done" if event["item"]["type"] == "function_call" => {
                let call = call_of(&event["item"], self.calls.len());
                self.calls.push(call);
            }
            "response.completed" | "response.incomplete" => {
                let response = &event["response"];
                if self.calls.is_empty() {
                    self.calls = output_of(response).1;
                }
                self.finish_reason = Some(finish_reason_of(response, !self.calls.is_empty()));
                if let Some(usage) = usage_of(response) {
                    out.push(Chunk::Usage(usage));
                }
                out.push(Chunk::Done);
                self.done = true;
            }
            "response.failed" | "error" => return Err(StreamFault::ErrorEvent(data.to_string())),
            _ => {}
        }
        Ok(())
    }

    fn tool_calls(&self) -> Vec<ToolCall> {
        self.calls.clone()
    }

    fn finish_reason(&self) -> Option<FinishReason> {
        self.finish_reason.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_fields_are_spelled_for_the_responses_api() {
        let mut params = Map::new();
        for (k, v) in [
            ("max_tokens", json!(64)),
            ("seed", json!(1)),
            ("stop", json!(["END"])),
            ("temperature", json!(0.2)),
            (
                "response_format",
                json!({"type": "json_schema", "json_schema": {"name": "p", "schema": {"type": "object"}, "strict": true}}),
            ),
            (
                "tools",
                json!([{"type": "function", "function": {"name": "f", "parameters": {}}}]),
            ),
            (
                "tool_choice",
                json!({"type": "function", "function": {"name": "f"}}),
            ),
            ("reasoning_effort", json!("low")),
        ] {
            params.insert(k.into(), v);
        }
        let mut body = Map::new();
        translate_params(&params, &mut body);
        assert_eq!(
            Value::Object(body),
            json!({
                "max_output_tokens": 64, "temperature": 0.2,
                "text": {"format": {"type": "json_schema", "name": "p", "schema": {"type": "object"}, "strict": true}},
                "tools": [{"type": "function", "name": "f", "parameters": {}}],
                "tool_choice": {"type": "function", "name": "f"},
                "reasoning": {"effort": "low"},
            })
        );
    }

    #[test]
    fn a_conversation_becomes_instructions_and_input_items() {
        let mut assistant = Message::assistant_calling("", vec![ToolCall::new("c1", "f", "{}")]);
        assistant.content = String::new();
        let mut tool = Message::new(Role::Tool, "42");
        tool.tool_call_id = Some("c1".into());
        let (instructions, input) = input_items(&[
            Message::system("Be brief."),
            Message::user("Q"),
            assistant,
            tool,
        ]);
        assert_eq!(instructions.as_deref(), Some("Be brief."));
        assert_eq!(
            Value::Array(input),
            json!([
                {"role": "user", "content": "Q"},
                {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "42"},
            ])
        );
    }

    #[test]
    fn whole_responses_are_read_with_calls_usage_and_the_token_limit() {
        let r = parse_response(
            r#"{"status":"incomplete","incomplete_details":{"reason":"max_output_tokens"},
                "output":[{"type":"reasoning","summary":[]},
                          {"type":"message","content":[{"type":"output_text","text":"Hel"},{"type":"output_text","text":"lo"}]},
                          {"type":"function_call","call_id":"c","name":"f","arguments":"{\"a\":1}"}],
                "usage":{"input_tokens":5,"output_tokens":2}}"#,
        )
        .unwrap();
        assert_eq!(r.text, "Hello");
        assert_eq!(r.tool_calls, [ToolCall::new("c", "f", r#"{"a":1}"#)]);
        assert_eq!(r.finish_reason, Some(FinishReason::Length));
        assert_eq!(r.usage.map(|u| u.output_tokens), Some(2));
        assert!(matches!(
            parse_response(r#"{"status":"failed","error":{"message":"boom"},"output":[]}"#),
            Err(RunnerError::Upstream { message, .. }) if message.contains("boom")
        ));
        assert!(matches!(
            parse_response(r#"{"status":"completed"}"#),
            Err(RunnerError::Protocol { .. })
        ));
    }
}
