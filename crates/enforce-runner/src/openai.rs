//! The OpenAI-compatible HTTP runner: `POST {base_url}/chat/completions`, stateless follow-ups,
//! bounded retries with jittered exponential backoff that honour `Retry-After`.

use crate::error::ConfigError;
use crate::http::{
    answer, api_key, ask_whole, error_message, secret_header, EndpointSettings, HttpEndpoint,
    RetryConfig, StreamSource, DEFAULT_MAX_RESPONSE_BYTES,
};
use crate::openai_responses::ResponsesApi;
use crate::process::tail;
use crate::sse::SseReader;
use crate::transport::UpstreamResponse;
use enforce_core::{
    async_trait, runner::FinishReason, runner::ToolCall, runner::ToolFeedback, Ask, Message, Reply,
    ReplyStream, Request, Role, Runner, RunnerError, Usage,
};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Request fields the runner sets itself; the same keys in `params` are ignored.
const OWN_FIELDS: [&str; 4] = ["model", "messages", "stream", "stream_options"];

/// How the OpenAI-compatible server is reached.
///
/// ```
/// use enforce_runner::OpenAiConfig;
///
/// let c: OpenAiConfig = serde_json::from_str(r#"{
///     "base_url": "http://localhost:11434/v1", "model": "llama3.2",
///     "params": {"temperature": 0.2}, "retry": {"max_retries": 5}}"#).unwrap();
/// assert_eq!(c.retry.max_retries, 5);
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1` (e.g. `http://localhost:11434/v1` for Ollama).
    pub base_url: String,
    /// The API key, sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
    /// An environment variable holding the API key (used when `api_key` is not set).
    pub api_key_env: Option<String>,
    /// The upstream model name.
    pub model: String,
    /// Extra request fields (temperature, max_tokens, ...); the request's own params override
    /// them.
    pub params: Map<String, Value>,
    /// Longest one HTTP call may take, in seconds (default 120).
    pub timeout_secs: f64,
    /// Longest connection setup, in seconds (default 10).
    pub connect_timeout_secs: f64,
    /// Retries of transient failures.
    pub retry: RetryConfig,
    /// Largest response body read, in bytes (default 32 MiB); a larger body is an upstream
    /// error, so a misbehaving server cannot exhaust the proxy's memory.
    pub max_response_bytes: usize,
    /// How a re-ask tells the model its tool calls were rejected: `tool_messages` (default; a
    /// tool result per call, as OpenAI expects) or `user_message` (the calls written out as
    /// text, for servers that reject tool results they did not ask for).
    pub tool_feedback: ToolFeedback,
    /// Ask with `stream: true` so the loop sees the answer as it is written and can cut a
    /// failing one short (default true). `false` for servers that cannot stream.
    pub stream: bool,
    /// The upstream API asked: `chat` (`{base_url}/chat/completions`, the default) or
    /// `responses` (`{base_url}/responses`, the OpenAI Responses API, for upstreams that speak
    /// it natively).
    pub api: OpenAiApi,
}

/// Which API an `openai` runner asks.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum OpenAiApi {
    /// `POST {base_url}/chat/completions`.
    #[default]
    Chat,
    /// `POST {base_url}/responses`: the request translated into the Responses API's
    /// `instructions`, `input` items and fields, its `response` (or stream events) read back.
    Responses,
}

impl Default for OpenAiConfig {
    fn default() -> Self {
        OpenAiConfig {
            base_url: "http://localhost:11434/v1".to_string(),
            api_key: None,
            api_key_env: None,
            model: String::new(),
            params: Map::new(),
            timeout_secs: 120.0,
            connect_timeout_secs: 10.0,
            retry: RetryConfig::default(),
            max_response_bytes: DEFAULT_MAX_RESPONSE_BYTES,
            tool_feedback: ToolFeedback::default(),
            stream: true,
            api: OpenAiApi::Chat,
        }
    }
}

/// Asks an OpenAI-compatible chat completions endpoint (OpenAI, Ollama, vLLM, llama.cpp
/// server, LM Studio, ...). Follow-ups are stateless: the original messages, the previous answer
/// and the feedback, never every earlier attempt.
///
/// ```no_run
/// use enforce_core::{Ask, Request, Runner};
/// use enforce_runner::{OpenAiConfig, OpenAiRunner};
///
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// let runner = OpenAiRunner::new(OpenAiConfig {
///     base_url: "http://localhost:11434/v1".into(),
///     model: "llama3.2".into(),
///     ..OpenAiConfig::default()
/// })?;
/// let reply = runner.ask(Ask::new(&Request::prompt("Say hi"))).reply().await?;
/// # let _ = reply; Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct OpenAiRunner {
    config: OpenAiConfig,
    /// `{base_url}/chat/completions`, with the key and the retries.
    endpoint: HttpEndpoint,
    /// The server refused `stream_options` once: streamed requests go without it from then on.
    no_stream_options: Arc<AtomicBool>,
    /// With `api: responses`: the Responses API asked instead of chat completions.
    responses: Option<ResponsesApi>,
}

impl OpenAiRunner {
    /// A runner with this configuration; checks the URL, the timeouts and the key variable.
    pub fn new(config: OpenAiConfig) -> Result<Self, ConfigError> {
        let mut endpoint = HttpEndpoint::new(EndpointSettings {
            base_url: &config.base_url,
            path: "/chat/completions",
            timeout_secs: config.timeout_secs,
            connect_timeout_secs: config.connect_timeout_secs,
            retry: &config.retry,
            max_response_bytes: config.max_response_bytes,
        })?;
        if config.model.trim().is_empty() {
            return Err(ConfigError::Missing { field: "model" });
        }
        if let Some(key) = api_key(config.api_key.as_ref(), config.api_key_env.as_ref(), None)? {
            endpoint.set_header(
                reqwest::header::AUTHORIZATION,
                secret_header(&format!("Bearer {key}"))?,
            );
        }
        let responses = match config.api {
            OpenAiApi::Chat => None,
            OpenAiApi::Responses => Some(ResponsesApi {
                endpoint: endpoint.replaced("/chat/completions", "/responses")?,
                model: config.model.clone(),
                params: config.params.clone(),
            }),
        };
        Ok(OpenAiRunner {
            endpoint,
            config,
            no_stream_options: Arc::new(AtomicBool::new(false)),
            responses,
        })
    }

    /// The URL this runner posts to (chat completions, or the Responses API's).
    pub fn endpoint(&self) -> &str {
        match &self.responses {
            Some(api) => api.endpoint.url().as_str(),
            None => self.endpoint.url().as_str(),
        }
    }

    /// The JSON body for `messages`: the configured params, the request's params over them,
    /// then model, messages and `stream: false`.
    pub fn body(&self, request: &Request, messages: &[Message]) -> Value {
        serde_json::to_value(self.wire_body(request, messages, false, false)).unwrap_or_default()
    }

    /// The body as it is written to the wire: serialized straight from the request, without a
    /// `Value` tree of the messages built and dropped on every call.
    fn wire_body<'a>(
        &'a self,
        request: &'a Request,
        messages: &'a [Message],
        stream: bool,
        include_usage: bool,
    ) -> ChatBody<'a> {
        ChatBody {
            params: merged_params(&self.config.params, request),
            model: &self.config.model,
            messages: messages.iter().map(WireMessage::from).collect(),
            stream,
            stream_options: include_usage.then(|| serde_json::json!({"include_usage": true})),
        }
    }
    /// Opens a streamed answer: `stream: true` with `stream_options.include_usage`, or without
    /// the options once the server refused them (some do, with a 400 naming the field).
    async fn open_stream(
        &self,
        request: &Request,
        messages: &[Message],
    ) -> Result<UpstreamResponse, RunnerError> {
        let with_usage = !self.no_stream_options.load(Ordering::Relaxed);
        let first = self
            .endpoint
            .post(
                &self.wire_body(request, messages, true, with_usage),
                messages,
            )
            .await;
        match first {
            Err(RunnerError::Upstream {
                status: Some(400),
                message,
            }) if with_usage && message.contains("stream_options") => {
                self.no_stream_options.store(true, Ordering::Relaxed);
                self.endpoint
                    .post(&self.wire_body(request, messages, true, false), messages)
                    .await
            }
            other => other,
        }
    }
}

#[async_trait]
impl StreamSource for OpenAiRunner {
    type Reader = SseReader;

    fn http(&self) -> &HttpEndpoint {
        &self.endpoint
    }

    async fn open(
        &self,
        request: &Request,
        messages: &[Message],
    ) -> Result<UpstreamResponse, RunnerError> {
        self.open_stream(request, messages).await
    }

    fn write_body(
        &self,
        request: &Request,
        messages: &[Message],
        stream: bool,
        out: &mut dyn std::io::Write,
    ) -> serde_json::Result<()> {
        serde_json::to_writer(out, &self.wire_body(request, messages, stream, false))
    }

    fn parse_whole(&self, body: &str) -> Result<Reply, RunnerError> {
        parse_completion(body)
    }

    fn stream_error(&self, data: &str) -> RunnerError {
        RunnerError::Upstream {
            status: Some(200),
            message: error_message(data)
                .unwrap_or_else(|| "the stream reported an error without a message".into()),
        }
    }
}

impl Runner for OpenAiRunner {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let messages = ask.messages(self.config.tool_feedback);
        if !ask.stream {
            return ReplyStream::whole(async move {
                match &self.responses {
                    Some(api) => ask_whole(api, ask.request, &messages).await,
                    None => ask_whole(self, ask.request, &messages).await,
                }
            });
        }
        match &self.responses {
            Some(api) => answer(api, ask.request, messages, self.config.stream),
            None => answer(self, ask.request, messages, self.config.stream),
        }
    }
}

/// A chat-completions request body: the configured params with the request's over them
/// (neither may set the fields the runner writes itself), then model, messages, `stream` and
/// `stream_options`.
#[derive(Serialize)]
struct ChatBody<'a> {
    #[serde(flatten)]
    params: BTreeMap<&'a str, Cow<'a, Value>>,
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<Value>,
}

/// The configured params, the request's over them, without the runner's own fields; the
/// configured `seed` advanced for a re-ask ([`reseeded_config_seed`]) in its place.
fn merged_params<'a>(
    config: &'a Map<String, Value>,
    request: &'a Request,
) -> BTreeMap<&'a str, Cow<'a, Value>> {
    let mut params: BTreeMap<&str, Cow<'_, Value>> = config
        .iter()
        .chain(request.params.iter())
        .filter(|(k, _)| !OWN_FIELDS.contains(&k.as_str()))
        .map(|(k, v)| (k.as_str(), Cow::Borrowed(v)))
        .collect();
    if let Some(seed) = reseeded_config_seed(config, request) {
        params.insert("seed", Cow::Owned(seed));
    }
    params
}

/// The configured `seed` advanced by the request's `seed_offset`, when the request carries
/// no seed of its own (the loop advances that one) and asks are not the first: a re-ask must
/// not draw the failed attempt's sample again.
fn reseeded_config_seed(config: &Map<String, Value>, request: &Request) -> Option<Value> {
    if request.seed_offset == 0 || request.params.contains_key("seed") {
        return None;
    }
    enforce_core::runner::advance_seed(config.get("seed")?, request.seed_offset)
}

/// One message on the wire. An assistant turn that only calls tools has `content: null`, as
/// OpenAI writes it; a tool result carries the id of the call it answers; a message with
/// content parts beyond text (an image) sends those parts.
#[derive(Serialize)]
struct WireMessage<'a> {
    content: WireContent<'a>,
    role: Role,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<Value>,
}

/// A message's `content`: its parts, `null`, or its text.
#[derive(Serialize)]
#[serde(untagged)]
enum WireContent<'a> {
    Parts(&'a [Value]),
    Null,
    Text(&'a str),
}

impl<'a> From<&'a Message> for WireMessage<'a> {
    fn from(m: &'a Message) -> Self {
        let content = if !m.parts.is_empty() {
            WireContent::Parts(&m.parts)
        } else if m.content.is_empty() && !m.tool_calls.is_empty() {
            WireContent::Null
        } else {
            WireContent::Text(&m.content)
        };
        WireMessage {
            content,
            role: m.role,
            tool_call_id: m.tool_call_id.as_deref().filter(|_| m.role == Role::Tool),
            tool_calls: m.tool_calls.iter().map(ToolCall::to_openai).collect(),
        }
    }
}

/// Reads a chat completion: the first choice's message content and the usage. An error object
/// in a 200 response, missing or `null` choices, or a choice without text are errors.
///
/// ```
/// use enforce_runner::parse_completion;
/// let r = parse_completion(r#"{"object":"chat.completion","choices":[{"index":0,
///     "message":{"role":"assistant","content":"Hi"},"finish_reason":"stop"}],
///     "usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#).unwrap();
/// assert_eq!(r.text, "Hi");
/// assert_eq!(r.usage.unwrap().input_tokens, 5);
/// assert_eq!(r.finish_reason, Some(enforce_core::runner::FinishReason::Stop));
/// ```
pub fn parse_completion(body: &str) -> Result<Reply, RunnerError> {
    match serde_json::from_str::<CompletionBody<'_>>(body) {
        Ok(typed) => typed.into_reply(body),
        // An odd body (a field of another type than OpenAI's): read it as any JSON.
        Err(_) => parse_completion_value(body),
    }
}

/// The parts of a chat completion the runner reads, typed: the rest of the body is skipped
/// without being built. A body of another shape (content given as parts, a field of another
/// type) is read as any JSON instead ([`parse_completion_value`]).
#[derive(Deserialize)]
struct CompletionBody<'a> {
    #[serde(default)]
    error: Option<serde::de::IgnoredAny>,
    #[serde(default, borrow)]
    object: Option<Cow<'a, str>>,
    #[serde(default)]
    choices: Option<Vec<ChoiceBody<'a>>>,
    #[serde(default)]
    usage: Option<UsageBody>,
}

#[derive(Deserialize)]
struct ChoiceBody<'a> {
    #[serde(default, borrow)]
    message: Option<MessageBody<'a>>,
    #[serde(default, borrow)]
    finish_reason: Option<Cow<'a, str>>,
}

#[derive(Deserialize)]
struct MessageBody<'a> {
    /// Text, or null.
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default)]
    tool_calls: Option<Value>,
}

#[derive(Deserialize)]
struct UsageBody {
    #[serde(default)]
    prompt_tokens: Option<u64>,
    #[serde(default)]
    completion_tokens: Option<u64>,
}

impl CompletionBody<'_> {
    /// The reply, read as [`parse_completion_value`] reads the same body.
    fn into_reply(self, body: &str) -> Result<Reply, RunnerError> {
        if self.error.is_some() || self.object.as_deref() == Some("error") {
            return Err(RunnerError::Upstream {
                status: Some(200),
                message: error_message(body).unwrap_or_else(|| "error without a message".into()),
            });
        }
        let Some(choice) = self.choices.and_then(|c| c.into_iter().next()) else {
            return Err(RunnerError::Protocol {
                message: "response has no choices".to_string(),
            });
        };
        let (content, calls) = match choice.message {
            Some(m) => (m.content, m.tool_calls),
            None => (None, None),
        };
        let tool_calls = match &calls {
            Some(calls) => tool_calls_of(calls)?,
            None => Vec::new(),
        };
        let text = match content {
            Some(text) => text.into_owned(),
            None => message_text(None, &tool_calls)?,
        };
        let usage = self.usage.map(|u| Usage {
            input_tokens: u.prompt_tokens.unwrap_or(0),
            output_tokens: u.completion_tokens.unwrap_or(0),
        });
        Ok(Reply {
            text,
            tool_calls,
            usage,
            finish_reason: choice.finish_reason.as_deref().map(FinishReason::parse),
            ..Reply::default()
        })
    }
}

/// The tool calls of a message, or why they cannot be read.
fn tool_calls_of(calls: &Value) -> Result<Vec<ToolCall>, RunnerError> {
    ToolCall::list_from_openai(calls).map_err(|message| RunnerError::Protocol {
        message: format!("the model's tool calls cannot be read: {message}"),
    })
}

/// The text of a message's `content`: a string, the text of its parts, or empty when the
/// message only calls tools.
fn message_text(content: Option<Value>, tool_calls: &[ToolCall]) -> Result<String, RunnerError> {
    match content {
        Some(Value::String(s)) => Ok(s),
        // Some servers send content as parts: [{"type":"text","text":"..."}].
        Some(Value::Array(parts)) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect()),
        // An answer that only calls tools has no content.
        None | Some(Value::Null) if !tool_calls.is_empty() => Ok(String::new()),
        _ => Err(RunnerError::Protocol {
            message: "the first choice has no message content".to_string(),
        }),
    }
}

/// [`parse_completion`] for any JSON body: each field read as whatever it is.
fn parse_completion_value(body: &str) -> Result<Reply, RunnerError> {
    let v: Value = serde_json::from_str(body).map_err(|e| RunnerError::Protocol {
        message: format!("response is not JSON ({e}): {}", tail(body.trim(), 200)),
    })?;
    let is_error = v.get("error").is_some_and(|e| !e.is_null())
        || v.get("object").and_then(Value::as_str) == Some("error");
    if is_error {
        return Err(RunnerError::Upstream {
            status: Some(200),
            message: error_message(body).unwrap_or_else(|| "error without a message".into()),
        });
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first())
        .ok_or_else(|| RunnerError::Protocol {
            message: "response has no choices".to_string(),
        })?;
    let message = choice.get("message");
    let tool_calls = match message.and_then(|m| m.get("tool_calls")) {
        Some(calls) => tool_calls_of(calls)?,
        None => Vec::new(),
    };
    let text = message_text(message.and_then(|m| m.get("content")).cloned(), &tool_calls)?;
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        input_tokens: u.get("prompt_tokens").and_then(Value::as_u64).unwrap_or(0),
        output_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .unwrap_or(0),
    });
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(FinishReason::parse);
    Ok(Reply {
        text,
        tool_calls,
        usage,
        finish_reason,
        ..Reply::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The body written straight to the wire is, byte for byte, the `Value` object the
    /// runner used to build: the configured params under the request's, the runner's own
    /// fields over both, keys in order, every message shape.
    #[test]
    fn the_wire_body_is_the_value_body_it_replaced() {
        let params = |v: Value| v.as_object().cloned().expect("an object");
        let runner = OpenAiRunner::new(OpenAiConfig {
            base_url: "http://127.0.0.1:9/v1".into(),
            model: "upstream-model".into(),
            params: params(serde_json::json!({
                "temperature": 0.1, "zeta": [1], "model": "not me", "max_tokens": 5
            })),
            ..OpenAiConfig::default()
        })
        .expect("a runner");
        let call = ToolCall {
            id: "call_1".into(),
            name: "f".into(),
            arguments: "{\"a\":1}".into(),
        };
        let image = serde_json::json!([{"type": "image_url", "image_url": {"url": "u"}}]);
        let mut with_parts = Message::new(Role::User, "look");
        with_parts.parts = image.as_array().cloned().expect("parts");
        let messages = vec![
            Message::new(Role::System, "be \"brief\""),
            with_parts,
            Message::assistant_calling("", vec![call.clone()]),
            Message::tool("call_1", "42"),
            Message::assistant_calling("text too", vec![call]),
        ];
        let request = Request {
            messages: messages.clone(),
            session_id: None,
            params: params(serde_json::json!({
                "temperature": 0.7, "a_first": true, "stream": true, "messages": [],
                "response_format": {"type": "json_object"}, "zz_last": null
            })),

            ..Request::default()
        };
        for (stream, include_usage) in [(false, false), (true, true), (true, false)] {
            // The body as the runner built it before: a `Value` map, sorted by key.
            let mut expected = Map::new();
            for params in [&runner.config.params, &request.params] {
                for (k, v) in params {
                    if !OWN_FIELDS.contains(&k.as_str()) {
                        expected.insert(k.clone(), v.clone());
                    }
                }
            }
            expected.insert("model".into(), Value::from("upstream-model"));
            let wire: Vec<Value> = messages
                .iter()
                .map(|m| {
                    let mut out = Map::new();
                    out.insert("role".into(), serde_json::json!(m.role));
                    let content = if !m.parts.is_empty() {
                        Value::Array(m.parts.clone())
                    } else if m.content.is_empty() && !m.tool_calls.is_empty() {
                        Value::Null
                    } else {
                        Value::String(m.content.clone())
                    };
                    out.insert("content".into(), content);
                    if !m.tool_calls.is_empty() {
                        let calls = m.tool_calls.iter().map(ToolCall::to_openai).collect();
                        out.insert("tool_calls".into(), Value::Array(calls));
                    }
                    if let (Role::Tool, Some(id)) = (m.role, &m.tool_call_id) {
                        out.insert("tool_call_id".into(), Value::from(id.as_str()));
                    }
                    Value::Object(out)
                })
                .collect();
            expected.insert("messages".into(), Value::Array(wire));
            expected.insert("stream".into(), Value::Bool(stream));
            if include_usage {
                let options = serde_json::json!({"include_usage": true});
                expected.insert("stream_options".into(), options);
            }
            let body = runner.wire_body(&request, &messages, stream, include_usage);
            let written = serde_json::to_vec(&body).expect("serializes");
            assert_eq!(
                serde_json::from_slice::<Value>(&written).expect("JSON"),
                Value::Object(expected),
                "stream {stream}, usage {include_usage}"
            );
        }
    }

    fn message_json(m: &Message) -> Value {
        serde_json::to_value(WireMessage::from(m)).expect("a message serializes")
    }

    /// The typed reading of a completion gives what reading it as any JSON gives, for bodies
    /// of every shape servers send (and a few they should not).
    #[test]
    fn the_typed_reading_agrees_with_the_value_reading() {
        let bodies = [
            r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hi \"there\""},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#,
            r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"call_1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[{"message":{"content":[{"type":"text","text":"a"},{"type":"text","text":"b"}]}}],"usage":null}"#,
            r#"{"choices":[{"message":{"content":"x"},"finish_reason":"length"}],"usage":{}}"#,
            r#"{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":2.5,"completion_tokens":"3"}}"#,
            r#"{"choices":[{"message":{"content":"x","tool_calls":"no"}}]}"#,
            r#"{"choices":[{"message":{"content":"x","tool_calls":[{"function":{}}]}}]}"#,
            r#"{"choices":[{"message":{}}]}"#,
            r#"{"choices":[{"message":{"content":null}}]}"#,
            r#"{"choices":[{"message":{"content":5}}]}"#,
            r#"{"choices":[{"message":{"content":"caf\u00e9 \ud83d\ude00 \\ \n"}}]}"#,
            r#"{"choices":[1]}"#,
            r#"{"choices":[]}"#,
            r#"{"choices":null}"#,
            r#"{"choices":"many"}"#,
            r#"{"error":{"message":"over quota"}}"#,
            r#"{"error":null,"choices":[{"message":{"content":"ok"}}]}"#,
            r#"{"object":"error","message":"bad model"}"#,
            r#"{"object":7,"choices":[{"message":{"content":"ok"}}]}"#,
            r#"[1,2]"#,
            "not json",
        ];
        for body in bodies {
            assert_eq!(
                parse_completion(body),
                parse_completion_value(body),
                "{body}"
            );
        }
        // The typed reading is the one taken for OpenAI's own shape.
        assert!(serde_json::from_str::<CompletionBody<'_>>(bodies[0]).is_ok());
    }

    #[test]
    fn completion_faults() {
        assert!(matches!(
            parse_completion(r#"{"choices":null}"#),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_completion("not json"),
            Err(RunnerError::Protocol { .. })
        ));
        assert!(matches!(
            parse_completion(r#"{"error":{"message":"boom"}}"#),
            Err(RunnerError::Upstream { .. })
        ));
        // An empty list of calls and no content: nothing to deliver.
        assert!(matches!(
            parse_completion(r#"{"choices":[{"message":{"content":null,"tool_calls":[]}}]}"#),
            Err(RunnerError::Protocol { message }) if message.contains("no message content")
        ));
        assert!(matches!(
            parse_completion(r#"{"choices":[{"message":{"content":null,"tool_calls":[{"id":"c"}]}}]}"#),
            Err(RunnerError::Protocol { message }) if message.contains("has no `function`")
        ));
    }

    #[test]
    fn tool_calls_are_read_with_or_without_text() {
        let r = parse_completion(
            r#"{"choices":[{"message":{"role":"assistant","content":null,"tool_calls":[
                {"id":"call_a","type":"function","function":{"name":"f","arguments":"{\"x\":1}"}},
                {"type":"function","function":{"name":"g","arguments":{"y":2}}}]},
                "finish_reason":"tool_calls"}]}"#,
        )
        .unwrap();
        assert_eq!(r.text, "");
        assert_eq!(
            r.tool_calls,
            [
                ToolCall::new("call_a", "f", r#"{"x":1}"#),
                ToolCall::new("call_1", "g", r#"{"y":2}"#)
            ]
        );
        let r = parse_completion(
            r#"{"choices":[{"message":{"content":"Let me look.","tool_calls":[
                {"id":"c","function":{"name":"f","arguments":"{}"}}]}}]}"#,
        )
        .unwrap();
        assert_eq!((r.text.as_str(), r.tool_calls.len()), ("Let me look.", 1));
    }

    /// An image the client sent reaches the upstream as the parts array, not only its text.
    #[test]
    fn content_parts_go_out_instead_of_the_text() {
        let parts = vec![
            serde_json::json!({"type": "text", "text": "What is it?"}),
            serde_json::json!({"type": "image_url", "image_url": {"url": "https://x/a.png"}}),
        ];
        let mut message = Message::new(Role::User, "What is it?");
        message.parts = parts.clone();
        assert_eq!(message_json(&message)["content"], Value::Array(parts));
        assert_eq!(
            message_json(&Message::new(Role::User, "hi"))["content"],
            "hi"
        );
    }

    #[test]
    fn tool_history_goes_out_as_openai_writes_it() {
        let call = ToolCall::new("call_1", "f", "{}");
        let assistant = message_json(&Message::assistant_calling("", vec![call]));
        assert_eq!(
            assistant,
            serde_json::json!({"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]})
        );
        assert_eq!(
            message_json(&Message::tool("call_1", "42")),
            serde_json::json!({"role": "tool", "content": "42", "tool_call_id": "call_1"})
        );
    }
}
