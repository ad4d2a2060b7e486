//! The Anthropic Messages API runner: `POST {base_url}/v1/messages` with `x-api-key` and
//! `anthropic-version`, streamed (`message_start` … `message_stop`, read by
//! [`MessagesReader`](crate::anthropic_events::MessagesReader)), tool use, stateless follow-ups,
//! the same retries and typed errors as the OpenAI runner.
//!
//! The loop's requests speak the chat-completions dialect (the proxy forwards a client's
//! `tools`, `tool_choice`, `stop`, `max_tokens` as OpenAI spells them); [`AnthropicRunner::body`]
//! translates them. The configured `params` are Anthropic's own fields and go as written.

use crate::anthropic_events::{input_usage, stop_reason, MessagesReader};
use crate::error::ConfigError;
use crate::http::{
    answer, api_key, ask_whole, error_message, secret_header, EndpointSettings, HttpEndpoint,
    RetryConfig, StreamSource, DEFAULT_MAX_RESPONSE_BYTES,
};
use crate::process::tail;
use enforce_core::{
    async_trait, runner::ToolCall, runner::ToolFeedback, Ask, Message, Reply, ReplyStream, Request,
    Role, Runner, RunnerError, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// The `anthropic-version` sent unless configured otherwise: the version the Messages API,
/// the SDKs and the Claude Code CLI use.
pub const DEFAULT_ANTHROPIC_VERSION: &str = "2023-06-01";

/// The variable the API key is read from when the config names neither key nor variable.
pub const ANTHROPIC_API_KEY_ENV: &str = "ANTHROPIC_API_KEY";

/// Body fields the runner writes itself; the same keys in `params` are ignored.
const OWN_FIELDS: [&str; 5] = ["model", "messages", "system", "stream", "max_tokens"];

/// Request params (chat-completions dialect) that the Messages API takes as they are.
const PASSED_AS_IS: [&str; 6] = [
    "temperature",
    "top_p",
    "top_k",
    "metadata",
    "thinking",
    "service_tier",
];

/// How the Anthropic Messages API (or a compatible server) is reached.
///
/// ```
/// use enforce_runner::AnthropicConfig;
///
/// let c: AnthropicConfig = serde_json::from_str(r#"{
///     "model": "claude-sonnet-4-5", "max_tokens": 2048,
///     "params": {"top_k": 40}, "retry": {"max_retries": 5}}"#).unwrap();
/// assert_eq!(c.base_url, "https://api.anthropic.com");
/// assert_eq!(c.retry.max_retries, 5);
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AnthropicConfig {
    /// Base URL WITHOUT `/v1`, as the Anthropic SDKs take it (default
    /// `https://api.anthropic.com`); the runner posts to `{base_url}/v1/messages`.
    pub base_url: String,
    /// The API key, sent as `x-api-key`.
    pub api_key: Option<String>,
    /// An environment variable holding the API key (used when `api_key` is not set; must then
    /// be set). Without either, `ANTHROPIC_API_KEY` is used when it is set.
    pub api_key_env: Option<String>,
    /// The model name (e.g. `claude-sonnet-4-5`).
    pub model: String,
    /// The `anthropic-version` header (default `2023-06-01`).
    pub anthropic_version: String,
    /// Most tokens per answer (the API requires it; default 4096). A request's `max_tokens` or
    /// `max_completion_tokens` overrides it.
    pub max_tokens: u64,
    /// Extra body fields in the Messages API's own spelling (`top_k`, `thinking`, `metadata`,
    /// ...), sent as written; the request's params override them.
    pub params: Map<String, Value>,
    /// Longest one HTTP call may take, in seconds (default 120).
    pub timeout_secs: f64,
    /// Longest connection setup, in seconds (default 10).
    pub connect_timeout_secs: f64,
    /// Retries of transient failures (connect errors, 408, 429, 5xx and 529 `overloaded`).
    pub retry: RetryConfig,
    /// Largest response body read, in bytes (default 32 MiB).
    pub max_response_bytes: usize,
    /// Ask with `stream: true` so the loop sees the answer as it is written and can cut a
    /// failing one short (default true).
    pub stream: bool,
}

impl Default for AnthropicConfig {
    fn default() -> Self {
        AnthropicConfig {
            base_url: "https://api.anthropic.com".to_string(),
            api_key: None,
            api_key_env: None,
            model: String::new(),
            anthropic_version: DEFAULT_ANTHROPIC_VERSION.to_string(),
            max_tokens: 4096,
            params: Map::new(),
            timeout_secs: 120.0,
            connect_timeout_secs: 10.0,
            retry: RetryConfig::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            stream: true,
        }
    }
}

/// Asks the Anthropic Messages API. Follow-ups are stateless: the original messages, the
/// previous answer (its tool calls as `tool_use` blocks, each answered by a `tool_result`) and
/// the feedback.
///
/// ```no_run
/// use enforce_core::{Ask, Request, Runner};
/// use enforce_runner::{AnthropicConfig, AnthropicRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// // The key comes from ANTHROPIC_API_KEY.
/// let runner = AnthropicRunner::new(AnthropicConfig {
///     model: "claude-sonnet-4-5".into(),
///     ..AnthropicConfig::default()
/// })?;
/// let reply = runner.ask(Ask::new(&Request::prompt("Say hi"))).reply().await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct AnthropicRunner {
    config: AnthropicConfig,
    /// `{base_url}/v1/messages`, with the key, the version and the retries.
    endpoint: HttpEndpoint,
    /// `{base_url}/v1/messages/count_tokens`, with the same headers.
    count_endpoint: HttpEndpoint,
}

impl AnthropicRunner {
    /// A runner with this configuration; checks the URL, the model, the timeouts and the key
    /// variable.
    pub fn new(config: AnthropicConfig) -> Result<Self, ConfigError> {
        let mut endpoint = HttpEndpoint::new(EndpointSettings {
            base_url: &config.base_url,
            path: "/v1/messages",
            timeout_secs: config.timeout_secs,
            connect_timeout_secs: config.connect_timeout_secs,
            retry: &config.retry,
            max_response_bytes: config.max_response_bytes,
        })?;
        if config.model.trim().is_empty() {
            return Err(ConfigError::Missing { field: "model" });
        }
        if config.max_tokens == 0 {
            return Err(ConfigError::Missing {
                field: "max_tokens",
            });
        }
        let version = reqwest::header::HeaderValue::from_str(config.anthropic_version.trim())
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or(ConfigError::Missing {
                field: "anthropic_version",
            })?;
        endpoint.set_header("anthropic-version", version);
        let key = api_key(
            config.api_key.as_ref(),
            config.api_key_env.as_ref(),
            Some(ANTHROPIC_API_KEY_ENV),
        )?;
        if let Some(key) = key {
            endpoint.set_header("x-api-key", secret_header(&key)?);
        }
        let count_endpoint = endpoint.extended("/count_tokens")?;
        Ok(AnthropicRunner {
            config,
            endpoint,
            count_endpoint,
        })
    }

    /// The body of a `count_tokens` request: what the Messages API counts (model, system,
    /// messages, tools, tool choice, thinking), none of the sampling fields it refuses there.
    fn count_body(&self, request: &Request) -> Value {
        let Value::Object(mut body) = self.body(request, &request.messages) else {
            return Value::Null;
        };
        body.retain(|key, _| COUNTED_FIELDS.contains(&key.as_str()));
        Value::Object(body)
    }

    /// The messages URL this runner posts to.
    pub fn endpoint(&self) -> &str {
        self.endpoint.url().as_str()
    }

    /// The JSON body for `messages`, not streamed: the configured params, the request's params
    /// translated over them, then model, `max_tokens`, `system`, messages and `stream`.
    ///
    /// ```
    /// use enforce_core::{Message, Request};
    /// use enforce_runner::{AnthropicConfig, AnthropicRunner};
    ///
    /// let runner = AnthropicRunner::new(AnthropicConfig {
    ///     model: "claude-x".into(), api_key: Some("k".into()), ..AnthropicConfig::default()
    /// }).unwrap();
    /// let mut request = Request {
    ///     messages: vec![Message::system("Be brief."), Message::user("Hi")],
    ///     ..Request::default()
    /// };
    /// request.params.insert("stop".into(), "END".into());
    /// request.params.insert("max_completion_tokens".into(), 64.into());
    /// let body = runner.body(&request, &request.messages);
    /// assert_eq!(body["system"], "Be brief.");
    /// assert_eq!(body["max_tokens"], 64);
    /// assert_eq!(body["stop_sequences"], serde_json::json!(["END"]));
    /// assert_eq!(body["messages"], serde_json::json!([{"role": "user", "content": "Hi"}]));
    /// ```
    pub fn body(&self, request: &Request, messages: &[Message]) -> Value {
        self.body_with(request, messages, false)
    }

    fn body_with(&self, request: &Request, messages: &[Message], stream: bool) -> Value {
        let mut body = Map::new();
        for (k, v) in &self.config.params {
            if !OWN_FIELDS.contains(&k.as_str()) {
                body.insert(k.clone(), v.clone());
            }
        }
        translate_params(&request.params, &mut body);
        let max_tokens = ["max_tokens", "max_completion_tokens"]
            .iter()
            .find_map(|k| request.params.get(*k).and_then(Value::as_u64))
            .filter(|n| *n > 0)
            .unwrap_or(self.config.max_tokens);
        body.insert("model".into(), Value::String(self.config.model.clone()));
        body.insert("max_tokens".into(), Value::from(max_tokens));
        let (system, turns) = messages_json(messages);
        if let Some(system) = system {
            body.insert("system".into(), Value::String(system));
        }
        body.insert("messages".into(), Value::Array(turns));
        body.insert("stream".into(), Value::Bool(stream));
        Value::Object(body)
    }
}

#[async_trait]
impl StreamSource for AnthropicRunner {
    type Reader = MessagesReader;

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
        serde_json::to_writer(out, &self.body_with(request, messages, stream))
    }

    fn parse_whole(&self, body: &str) -> Result<Reply, RunnerError> {
        parse_message(body)
    }

    fn stream_error(&self, data: &str) -> RunnerError {
        error_event(data)
    }
}

#[async_trait]
impl Runner for AnthropicRunner {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let messages = ask.messages(ToolFeedback::ToolMessages);
        if !ask.stream {
            return ReplyStream::whole(
                async move { ask_whole(self, ask.request, &messages).await },
            );
        }
        answer(self, ask.request, messages, self.config.stream)
    }

    /// Asks `{base_url}/v1/messages/count_tokens` (with the runner's retries).
    async fn count_tokens(&self, request: &Request) -> Option<Result<u64, RunnerError>> {
        let counted = async {
            let response = self
                .count_endpoint
                .post(&self.count_body(request), &request.messages)
                .await?;
            let text = self.count_endpoint.read(response).await?;
            serde_json::from_str::<Value>(&text)
                .ok()
                .and_then(|v| v.get("input_tokens").and_then(Value::as_u64))
                .ok_or_else(|| RunnerError::Protocol {
                    message: format!(
                        "count_tokens answered without `input_tokens`: {}",
                        tail(&text, 200)
                    ),
                })
        };
        Some(counted.await)
    }
}

/// The fields of a Messages request that `count_tokens` takes.
const COUNTED_FIELDS: [&str; 6] = [
    "model",
    "system",
    "messages",
    "tools",
    "tool_choice",
    "thinking",
];

/// The HTTP status an Anthropic error `type` stands for (the Messages API's table), so an
/// error event mid-stream is as typed as one before it: `overloaded_error` is a 529 and is
/// retried by the loop, `authentication_error` a 401 and is not.
pub fn anthropic_error_status(kind: &str) -> Option<u16> {
    Some(match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "api_error" => 500,
        "timeout_error" => 504,
        "overloaded_error" => 529,
        _ => return None,
    })
}

/// The error of an `error` event (`{"type":"error","error":{"type","message"}}`): an upstream
/// error with the status its type stands for.
fn error_event(data: &str) -> RunnerError {
    error_of(data, None)
}

/// An upstream error from an Anthropic error body: the status its `type` stands for, else
/// `status`.
fn error_of(data: &str, status: Option<u16>) -> RunnerError {
    let typed = serde_json::from_str::<Value>(data).ok().and_then(|v| {
        v.pointer("/error/type")
            .and_then(Value::as_str)
            .and_then(anthropic_error_status)
    });
    let message = error_message(data)
        .unwrap_or_else(|| "the server reported an error without a message".into());
    match typed.or(status) {
        Some(status) => crate::http::upstream_error(status, message, None),
        None => RunnerError::Upstream {
            status: None,
            message,
        },
    }
}

/// The request's params (chat-completions dialect) in the Messages API's spelling, over what
/// `body` holds. A `json_schema` response format becomes structured output
/// (`output_config.format`). What the Messages API has no field for (`seed`, `n`, the
/// `json_object` and `text` response formats, penalties, `stream_options`, ...) is not sent:
/// the API refuses unknown fields.
fn translate_params(params: &Map<String, Value>, body: &mut Map<String, Value>) {
    for (key, value) in params {
        match key.as_str() {
            k if PASSED_AS_IS.contains(&k) => {
                body.insert(key.clone(), value.clone());
            }
            "stop" | "stop_sequences" => {
                let sequences = match value {
                    Value::String(s) => vec![Value::String(s.clone())],
                    Value::Array(items) => items.clone(),
                    _ => continue,
                };
                body.insert("stop_sequences".into(), Value::Array(sequences));
            }
            "tools" => {
                if let Some(tools) = value.as_array() {
                    let tools: Vec<Value> = tools.iter().filter_map(tool_json).collect();
                    if !tools.is_empty() {
                        body.insert("tools".into(), Value::Array(tools));
                    }
                }
            }
            "tool_choice" => {
                if let Some(choice) = tool_choice_json(value) {
                    body.insert("tool_choice".into(), choice);
                }
            }
            "user" => {
                if let Some(user) = value.as_str() {
                    body.insert("metadata".into(), json!({ "user_id": user }));
                }
            }
            "response_format" => {
                if let Some(format) = output_format(value) {
                    insert_output_format(body, format);
                }
            }
            _ => {}
        }
    }
    // "none" in OpenAI's words is no tools at all for older servers; Anthropic has its own
    // `{"type": "none"}`, kept above. A choice without tools is refused by the API.
    if !body.contains_key("tools") {
        body.remove("tool_choice");
    }
}

/// A chat-completions `response_format` of type `json_schema` as the Messages API's
/// structured-output format, `{"type": "json_schema", "schema": ...}`; `None` for the other
/// types, which it has no equivalent for.
fn output_format(response_format: &Value) -> Option<Value> {
    if response_format.get("type").and_then(Value::as_str) != Some("json_schema") {
        return None;
    }
    let schema = response_format.pointer("/json_schema/schema")?;
    Some(json!({"type": "json_schema", "schema": schema}))
}

/// Sets `output_config.format`, keeping what else a configured `output_config` holds
/// (`effort`).
fn insert_output_format(body: &mut Map<String, Value>, format: Value) {
    let config = body
        .entry("output_config")
        .or_insert_with(|| Value::Object(Map::new()));
    match config {
        Value::Object(config) => {
            config.insert("format".into(), format);
        }
        other => *other = json!({ "format": format }),
    }
}

/// One tool declaration as Anthropic writes it: `{name, description, input_schema}`, from
/// OpenAI's `{"type":"function","function":{name, description, parameters}}`, the flat
/// `{name, parameters}` of the Responses API, or Anthropic's own shape (kept as it is).
fn tool_json(tool: &Value) -> Option<Value> {
    if tool.get("input_schema").is_some() || tool.get("type").is_some_and(|t| t != "function") {
        // Anthropic's own shape, or one of its server tools (`web_search_...`).
        return Some(tool.clone());
    }
    let function = tool.get("function").unwrap_or(tool);
    let name = function.get("name").and_then(Value::as_str)?;
    let mut out = Map::new();
    out.insert("name".into(), Value::String(name.to_string()));
    if let Some(description) = function.get("description").and_then(Value::as_str) {
        out.insert("description".into(), Value::String(description.to_string()));
    }
    let schema = function
        .get("parameters")
        .filter(|p| p.is_object())
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    out.insert("input_schema".into(), schema);
    Some(Value::Object(out))
}

/// OpenAI's `tool_choice` in Anthropic's words: `auto` → `{"type":"auto"}`, `required` →
/// `{"type":"any"}`, `none` → `{"type":"none"}`, a named function → `{"type":"tool","name"}`;
/// Anthropic's own objects pass.
fn tool_choice_json(choice: &Value) -> Option<Value> {
    match choice {
        Value::String(s) => match s.as_str() {
            "auto" => Some(json!({"type": "auto"})),
            "required" | "any" => Some(json!({"type": "any"})),
            "none" => Some(json!({"type": "none"})),
            _ => None,
        },
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => {
                let name = choice.pointer("/function/name").or_else(|| o.get("name"))?;
                Some(json!({"type": "tool", "name": name}))
            }
            Some("auto" | "any" | "tool" | "none") => Some(choice.clone()),
            _ => None,
        },
        _ => None,
    }
}

/// The conversation as the Messages API takes it: the system messages joined into `system`,
/// the rest as `user`/`assistant` turns. Tool calls become `tool_use` blocks, tool results
/// `tool_result` blocks in a user turn; adjacent turns of one role are merged (the API wants
/// every tool result in the user turn right after the calls, and alternating roles); empty
/// turns are left out (the API refuses empty content).
pub(crate) fn messages_json(messages: &[Message]) -> (Option<String>, Vec<Value>) {
    let mut system: Vec<&str> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for m in messages {
        let (role, blocks) = match m.role {
            Role::System => {
                if !m.content.trim().is_empty() {
                    system.push(&m.content);
                }
                continue;
            }
            Role::User => ("user", text_blocks(&m.content)),
            Role::Assistant => {
                let mut blocks = text_blocks(&m.content);
                for call in &m.tool_calls {
                    blocks.extend(tool_use_blocks(call));
                }
                ("assistant", blocks)
            }
            Role::Tool => {
                let id = m.tool_call_id.clone().unwrap_or_default();
                let mut block = json!({"type": "tool_result", "tool_use_id": id});
                if !m.content.is_empty() {
                    block["content"] = Value::String(m.content.clone());
                }
                ("user", vec![block])
            }
        };
        if blocks.is_empty() {
            continue;
        }
        match turns.last_mut() {
            Some((last, existing)) if *last == role => existing.extend(blocks),
            _ => turns.push((role, blocks)),
        }
    }
    let turns = turns
        .into_iter()
        .map(|(role, mut blocks)| {
            // Tool results first in their turn, as the API requires.
            blocks.sort_by_key(|b| b["type"] != "tool_result");
            let content = match blocks.as_slice() {
                [only] if only["type"] == "text" => only["text"].clone(),
                _ => Value::Array(blocks),
            };
            json!({"role": role, "content": content})
        })
        .collect();
    let system = (!system.is_empty()).then(|| system.join("\n\n"));
    (system, turns)
}

fn text_blocks(text: &str) -> Vec<Value> {
    if text.is_empty() {
        Vec::new()
    } else {
        vec![json!({"type": "text", "text": text})]
    }
}

/// A call as a `tool_use` block. Its `input` must be an object; arguments that are not one (the
/// model wrote broken JSON, often why the answer failed) go back as `{}` after a text block
/// that quotes them, so the re-ask still shows the model what it wrote.
fn tool_use_blocks(call: &ToolCall) -> Vec<Value> {
    let block = |input: Value| json!({"type": "tool_use", "id": call.id, "name": call.name, "input": input});
    match serde_json::from_str::<Value>(&call.arguments) {
        Ok(input @ Value::Object(_)) => vec![block(input)],
        _ if call.arguments.trim().is_empty() => vec![block(json!({}))],
        _ => vec![
            json!({"type": "text", "text":
                format!("[arguments of {} as written: {}]", call.name, call.arguments)}),
            block(json!({})),
        ],
    }
}

/// Reads a whole Messages API answer: the text blocks joined, the `tool_use` blocks as calls
/// (their `input` as JSON text), the usage (input counting cache reads and writes) and the
/// stop reason. An error object, a body that is no message, or one with neither text nor calls
/// is an error.
///
/// ```
/// use enforce_runner::parse_message;
/// let r = parse_message(r#"{"id":"msg_1","type":"message","role":"assistant",
///     "model":"claude-x","content":[{"type":"text","text":"Hi"}],
///     "stop_reason":"end_turn","stop_sequence":null,
///     "usage":{"input_tokens":5,"output_tokens":1}}"#).unwrap();
/// assert_eq!(r.text, "Hi");
/// assert_eq!(r.usage.unwrap().input_tokens, 5);
/// assert_eq!(r.finish_reason, Some(enforce_core::runner::FinishReason::Stop));
/// ```
pub fn parse_message(body: &str) -> Result<Reply, RunnerError> {
    let v: Value = serde_json::from_str(body).map_err(|e| RunnerError::Protocol {
        message: format!("response is not JSON ({e}): {}", tail(body.trim(), 200)),
    })?;
    if v.get("type").and_then(Value::as_str) == Some("error")
        || v.get("error").is_some_and(|e| !e.is_null())
    {
        return Err(error_of(body, Some(200)));
    }
    let blocks =
        v.get("content")
            .and_then(Value::as_array)
            .ok_or_else(|| RunnerError::Protocol {
                message: "the response has no `content` blocks".to_string(),
            })?;
    let mut text = String::new();
    let mut tool_calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => text.push_str(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some("tool_use") => {
                let name = block
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| RunnerError::Protocol {
                        message: format!("tool_use block {i} has no name"),
                    })?;
                let id = block
                    .get("id")
                    .and_then(Value::as_str)
                    .filter(|id| !id.is_empty())
                    .map_or_else(|| format!("toolu_{i}"), str::to_string);
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                tool_calls.push(ToolCall::new(id, name, input.to_string()));
            }
            // Thinking is not the answer; server tools run upstream.
            _ => {}
        }
    }
    if text.is_empty() && tool_calls.is_empty() {
        return Err(RunnerError::Protocol {
            message: "the response holds neither text nor tool calls".to_string(),
        });
    }
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        input_tokens: input_usage(u),
        output_tokens: u.get("output_tokens").and_then(Value::as_u64).unwrap_or(0),
    });
    Ok(Reply {
        text,
        tool_calls,
        usage,
        finish_reason: v
            .get("stop_reason")
            .and_then(Value::as_str)
            .map(stop_reason),
        ..Reply::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use enforce_core::runner::FinishReason;

    fn runner() -> AnthropicRunner {
        AnthropicRunner::new(AnthropicConfig {
            base_url: "http://127.0.0.1:1".into(),
            api_key: Some("k".into()),
            model: "claude-x".into(),
            params: serde_json::from_value(json!({"top_k": 5, "model": "no", "stream": true}))
                .unwrap(),
            ..AnthropicConfig::default()
        })
        .unwrap()
    }

    /// A JSON Schema response format is Claude's structured output; a configured
    /// `output_config` keeps its other fields.
    #[test]
    fn a_json_schema_response_format_becomes_output_config_format() {
        let schema = json!({"type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false});
        let mut request = Request::prompt("Hi");
        request.params.insert(
            "response_format".into(),
            json!({"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": true}}),
        );
        let body = runner().body(&request, &request.messages);
        assert_eq!(
            body["output_config"],
            json!({"format": {"type": "json_schema", "schema": schema}})
        );
        assert!(body.get("response_format").is_none());
        let configured = AnthropicRunner::new(AnthropicConfig {
            model: "claude-x".into(),
            api_key: Some("k".into()),
            params: serde_json::from_value(json!({"output_config": {"effort": "low"}})).unwrap(),
            ..AnthropicConfig::default()
        })
        .unwrap();
        let body = configured.body(&request, &request.messages);
        assert_eq!(body["output_config"]["effort"], "low");
        assert_eq!(body["output_config"]["format"]["schema"], schema);
    }

    #[test]
    fn openai_params_are_translated_and_the_rest_left_out() {
        let mut request = Request::prompt("Hi");
        request.params = serde_json::from_value(json!({
            "temperature": 0.2, "seed": 7, "n": 1, "response_format": {"type": "json_object"},
            "stop": ["A", "B"], "user": "u-1", "max_tokens": 99,
            "tools": [
                {"type": "function", "function": {"name": "get_weather",
                 "description": "Weather", "parameters": {"type": "object",
                 "properties": {"city": {"type": "string"}}}}},
                {"type": "function", "name": "flat"},
                {"name": "native", "input_schema": {"type": "object"}}
            ],
            "tool_choice": {"type": "function", "function": {"name": "get_weather"}}
        }))
        .unwrap();
        let body = runner().body_with(&request, &request.messages, true);
        assert_eq!(
            body,
            json!({
                "top_k": 5, "temperature": 0.2, "stop_sequences": ["A", "B"],
                "metadata": {"user_id": "u-1"},
                "tools": [
                    {"name": "get_weather", "description": "Weather", "input_schema":
                        {"type": "object", "properties": {"city": {"type": "string"}}}},
                    {"name": "flat", "input_schema": {"type": "object", "properties": {}}},
                    {"name": "native", "input_schema": {"type": "object"}}
                ],
                "tool_choice": {"type": "tool", "name": "get_weather"},
                "model": "claude-x", "max_tokens": 99,
                "messages": [{"role": "user", "content": "Hi"}], "stream": true
            })
        );
        for (choice, expected) in [
            (json!("auto"), json!({"type": "auto"})),
            (json!("required"), json!({"type": "any"})),
            (json!("none"), json!({"type": "none"})),
        ] {
            assert_eq!(tool_choice_json(&choice), Some(expected));
        }
        // A choice without tools would be refused by the API.
        let mut request = Request::prompt("Hi");
        request.params.insert("tool_choice".into(), json!("auto"));
        assert!(runner().body(&request, &request.messages)["tool_choice"].is_null());
    }

    #[test]
    fn tool_history_goes_out_as_blocks_in_alternating_turns() {
        let calls = vec![
            ToolCall::new("toolu_1", "get_weather", r#"{"city":"Oslo"}"#),
            ToolCall::new("toolu_2", "now", "{broken"),
        ];
        let messages = vec![
            Message::system("One."),
            Message::system("Two."),
            Message::user("Weather?"),
            Message::assistant_calling("", calls),
            Message::tool("toolu_1", "rejected"),
            Message::tool("toolu_2", "rejected"),
            Message::user("Fix the arguments."),
            Message::assistant(""),
        ];
        let (system, turns) = messages_json(&messages);
        assert_eq!(system.as_deref(), Some("One.\n\nTwo."));
        assert_eq!(
            Value::Array(turns),
            json!([
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                     "input": {"city": "Oslo"}},
                    {"type": "text", "text": "[arguments of now as written: {broken]"},
                    {"type": "tool_use", "id": "toolu_2", "name": "now", "input": {}}
                ]},
                {"role": "user", "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": "rejected"},
                    {"type": "tool_result", "tool_use_id": "toolu_2", "content": "rejected"},
                    {"type": "text", "text": "Fix the arguments."}
                ]}
            ])
        );
    }

    #[test]
    fn whole_messages_read_text_calls_usage_and_stop_reason() {
        let r = parse_message(
            r#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[
                {"type":"thinking","thinking":"hmm","signature":"s"},
                {"type":"text","text":"Let me look."},
                {"type":"tool_use","id":"toolu_9","name":"get_weather","input":{"city":"Oslo"}}],
                "stop_reason":"tool_use","stop_sequence":null,
                "usage":{"input_tokens":10,"cache_creation_input_tokens":3,
                         "cache_read_input_tokens":4,"output_tokens":7}}"#,
        )
        .unwrap();
        assert_eq!(r.text, "Let me look.");
        assert_eq!(
            r.tool_calls,
            [ToolCall::new(
                "toolu_9",
                "get_weather",
                r#"{"city":"Oslo"}"#
            )]
        );
        assert_eq!(
            r.usage,
            Some(Usage {
                input_tokens: 17,
                output_tokens: 7
            })
        );
        assert_eq!(r.finish_reason, Some(FinishReason::ToolCalls));
        for (reason, expected) in [
            ("end_turn", FinishReason::Stop),
            ("stop_sequence", FinishReason::Stop),
            ("max_tokens", FinishReason::Length),
            ("refusal", FinishReason::ContentFilter),
        ] {
            let body = format!(
                r#"{{"type":"message","content":[{{"type":"text","text":"x"}}],"stop_reason":"{reason}"}}"#
            );
            assert_eq!(parse_message(&body).unwrap().finish_reason, Some(expected));
        }
    }

    #[test]
    fn error_bodies_and_empty_answers_are_errors() {
        assert_eq!(
            parse_message(
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#
            ),
            Err(RunnerError::Busy {
                status: 529,
                message: "Overloaded (type: overloaded_error)".into(),
                retry_after_secs: None,
            })
        );
        assert!(matches!(
            parse_message(r#"{"type":"message","content":[]}"#),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_message("<html>"),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_message(r#"{"type":"message","content":[{"type":"tool_use","input":{}}]}"#),
            Err(RunnerError::Protocol { message }) if message.contains("no name")
        ));
    }

    #[test]
    fn config_errors() {
        let build = |c: AnthropicConfig| AnthropicRunner::new(c).err();
        let ok = AnthropicConfig {
            model: "m".into(),
            api_key: Some("k".into()),
            ..AnthropicConfig::default()
        };
        assert_eq!(build(ok.clone()), None);
        assert_eq!(
            build(AnthropicConfig {
                model: " ".into(),
                ..ok.clone()
            }),
            Some(ConfigError::Missing { field: "model" })
        );
        assert_eq!(
            build(AnthropicConfig {
                max_tokens: 0,
                ..ok.clone()
            }),
            Some(ConfigError::Missing {
                field: "max_tokens"
            })
        );
        assert!(matches!(
            build(AnthropicConfig {
                base_url: "api.anthropic.com".into(),
                ..ok.clone()
            }),
            Some(ConfigError::InvalidBaseUrl(_))
        ));
        assert_eq!(
            build(AnthropicConfig {
                api_key: None,
                api_key_env: Some("ENFORCE_TEST_SURELY_UNSET_KEY".into()),
                ..ok.clone()
            }),
            Some(ConfigError::MissingApiKeyEnv(
                "ENFORCE_TEST_SURELY_UNSET_KEY".into()
            ))
        );
        assert!(serde_json::from_str::<AnthropicConfig>(r#"{"model":"m","modle":1}"#).is_err());
    }
}
