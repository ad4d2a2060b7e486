//! Reading a Messages request: the conversation (text, image, `tool_use` and `tool_result`
//! blocks) and the params the runners forward, every unread field listed as ignored.

use crate::error::ApiError;
use crate::pipeline::{model_of, present, read_request, stream_of};
use bytes::Bytes;
use enforce_core::{runner::ToolCall, Message, Role};
use serde::Deserialize;
use serde_json::{json, Map, Value};

/// A Messages request body as sent: the fields this surface reads, and the rest, which the
/// proxy cannot carry to the upstream and lists as ignored.
#[derive(Deserialize)]
struct MessagesBody {
    #[serde(default, deserialize_with = "present")]
    model: Option<Value>,
    messages: Option<Value>,
    system: Option<Value>,
    stream: Option<Value>,
    /// The proxy's own field; `null` kept as sent.
    #[serde(default, deserialize_with = "present")]
    enforce: Option<Value>,
    /// `null` is refused, as any other value that is not a positive integer.
    #[serde(default, deserialize_with = "present")]
    max_tokens: Option<Value>,
    stop_sequences: Option<Value>,
    temperature: Option<Value>,
    top_p: Option<Value>,
    top_k: Option<Value>,
    tools: Option<Value>,
    tool_choice: Option<Value>,
    metadata: Option<Value>,
    #[serde(flatten)]
    // Sorted whatever serde_json's features (llguidance turns on `preserve_order`), so the
    // ignored fields are listed in one order in every build.
    unread: std::collections::BTreeMap<String, Value>,
}

/// A parsed `POST /v1/messages` body.
#[derive(Debug, Clone, PartialEq)]
pub struct MessagesRequest {
    /// The public model id.
    pub model: String,
    /// The conversation: `system` first (as a system message), then the turns; tool results
    /// as tool messages.
    pub messages: Vec<Message>,
    /// `stream: true`.
    pub stream: bool,
    /// The proxy's own `enforce` field, as sent.
    pub enforce: Option<Value>,
    /// What the runners forward, in the chat-completions dialect they take: `max_tokens`,
    /// `stop` (from `stop_sequences`), `temperature`, `top_p`, `top_k`, `tools` (as functions),
    /// `tool_choice`, `parallel_tool_calls`, `user` (from `metadata.user_id`).
    pub params: Map<String, Value>,
    /// Fields (or parts) the proxy cannot carry to the upstream, by name (`thinking`,
    /// `messages.content.image`, `tools.web_search_20250305`, ...): reported as a warning.
    pub ignored: Vec<String>,
}

impl MessagesRequest {
    /// The chat this request belongs to: the `X-OpenWebUI-Chat-Id` header, else
    /// `metadata.user_id` (the one metadata field the Messages API has).
    pub fn chat_id(&self, header: Option<&str>) -> Option<String> {
        header
            .or_else(|| self.params.get("user").and_then(Value::as_str))
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string)
    }

    fn ignore(&mut self, what: impl Into<String>) {
        let what = what.into();
        if !self.ignored.contains(&what) {
            self.ignored.push(what);
        }
    }
}

fn bad(message: impl Into<String>, param: &'static str) -> ApiError {
    ApiError::bad_request(message, Some(param))
}

/// Parses a request body. Errors are 400s naming the field; [`error_response`](super::error_response)
/// renders them.
pub fn parse_messages_request(body: Bytes) -> Result<MessagesRequest, ApiError> {
    let mut body: MessagesBody = read_request(body)?;
    let model = model_of(body.model.take())?;
    let mut request = MessagesRequest {
        model,
        messages: Vec::new(),
        stream: stream_of(body.stream.as_ref())?,
        enforce: body.enforce.take(),
        params: Map::new(),
        ignored: Vec::new(),
    };
    read_system(body.system.take(), &mut request)?;
    let Some(Value::Array(mut turns)) = body.messages.take() else {
        return Err(bad(
            "The request needs `messages`, an array of user and assistant turns.",
            "messages",
        ));
    };
    if turns.is_empty() {
        return Err(bad(
            "`messages` must hold at least one message.",
            "messages",
        ));
    }
    for turn in &mut turns {
        read_turn(turn, &mut request)?;
    }
    read_params(&body, &mut request)?;
    for (key, _) in body.unread {
        request.ignore(key);
    }
    Ok(request)
}

/// `system` as the first message (none when it is empty).
fn read_system(system: Option<Value>, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let text = match system {
        None | Some(Value::Null) => return Ok(()),
        Some(Value::String(s)) => s,
        Some(Value::Array(blocks)) => text_of_blocks(&blocks, "system", request)?,
        Some(_) => {
            return Err(bad(
                "`system` must be a string or an array of text blocks.",
                "system",
            ))
        }
    };
    if !text.is_empty() {
        request.messages.push(Message::system(text));
    }
    Ok(())
}

/// One turn of `messages`: its text, tool calls (assistant) and tool results (user).
fn read_turn(turn: &mut Value, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let role = turn_role(turn)?;
    // A string is taken out of the request, not copied: a long message is in memory once.
    if let Some(Value::String(text)) = turn.get_mut("content") {
        request
            .messages
            .push(Message::new(role, std::mem::take(text)));
        return Ok(());
    }
    let blocks = match turn.get("content") {
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(bad(
                "A message's `content` must be a string or an array of content blocks.",
                "messages",
            ))
        }
    };
    let mut content = TurnContent::default();
    for block in blocks {
        read_block(block, role, &mut content, request)?;
    }
    // Tool results (pushed by `read_block`) come before the turn's text, as the API orders
    // them.
    if let Some(message) = content.into_message(role) {
        request.messages.push(message);
    }
    Ok(())
}

/// A turn's `role`: `user` or `assistant`.
fn turn_role(turn: &Value) -> Result<Role, ApiError> {
    match turn.get("role").and_then(Value::as_str) {
        Some("user") => Ok(Role::User),
        Some("assistant") => Ok(Role::Assistant),
        _ => Err(bad(
            format!(
                "A message's `role` must be `user` or `assistant`, got {}.",
                crate::pipeline::shown_role(turn.get("role"))
            ),
            "messages",
        )),
    }
}

/// What a turn's content blocks make of its own message (tool results are messages of their
/// own).
#[derive(Default)]
struct TurnContent<'a> {
    texts: Vec<&'a str>,
    /// The content as chat parts, kept when it holds an image (as chat keeps `image_url`).
    parts: Vec<Value>,
    has_image: bool,
    calls: Vec<ToolCall>,
}

impl TurnContent<'_> {
    /// The turn's message: its text joined with `\n`, its calls or image; `None` when it has
    /// none of them.
    fn into_message(self, role: Role) -> Option<Message> {
        let text = self.texts.join("\n");
        if text.is_empty() && self.calls.is_empty() && !self.has_image {
            return None;
        }
        let mut message = match role {
            Role::Assistant => Message::assistant_calling(text, self.calls),
            _ => Message::user(text),
        };
        if self.has_image {
            message.parts = self.parts;
        }
        Some(message)
    }
}

/// One content block of a turn of `role`.
fn read_block<'a>(
    block: &'a Value,
    role: Role,
    content: &mut TurnContent<'a>,
    request: &mut MessagesRequest,
) -> Result<(), ApiError> {
    match block.get("type").and_then(Value::as_str).unwrap_or("") {
        "text" => {
            let text = block.get("text").and_then(Value::as_str).unwrap_or("");
            content.texts.push(text);
            content.parts.push(json!({"type": "text", "text": text}));
        }
        "image" if role == Role::User => match image_part(block) {
            Some(part) => {
                content.has_image = true;
                content.parts.push(part);
            }
            None => request.ignore("messages.content.image"),
        },
        "tool_use" if role == Role::Assistant => content.calls.push(tool_call(block)?),
        "tool_result" if role == Role::User => {
            let message = tool_result(block, request)?;
            request.messages.push(message);
        }
        // The model's own reasoning sent back: not answer text (and enforce's drafts carry
        // no signature an upstream would take).
        "thinking" | "redacted_thinking" if role == Role::Assistant => {}
        kind @ ("document" | "search_result") => {
            request.ignore(format!("messages.content.{kind}"));
        }
        other => {
            let role = if role == Role::User {
                "user"
            } else {
                "assistant"
            };
            return Err(bad(
                format!("A `{role}` message cannot hold a `{other}` content block here."),
                "messages",
            ));
        }
    }
    Ok(())
}

/// A `tool_result` block as a tool message (an error result marked as one).
fn tool_result(block: &Value, request: &mut MessagesRequest) -> Result<Message, ApiError> {
    let id = block
        .get("tool_use_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| {
            bad(
                "A `tool_result` block needs the `tool_use_id` of the call it answers.",
                "messages",
            )
        })?;
    let mut content = match block.get("content") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => text_of_blocks(parts, "messages", request)?,
        Some(_) => {
            return Err(bad(
                "A `tool_result`'s `content` must be a string or text blocks.",
                "messages",
            ))
        }
    };
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        content = format!("[tool error]\n{content}");
    }
    Ok(Message::tool(id, content))
}

/// An `image` block as a chat `image_url` part: a base64 source as a `data:` URL, a `url`
/// source as it is; `None` for a source it cannot say (a file id).
fn image_part(block: &Value) -> Option<Value> {
    let source = block.get("source")?;
    let url = match source.get("type").and_then(Value::as_str)? {
        "base64" => format!(
            "data:{};base64,{}",
            source.get("media_type").and_then(Value::as_str)?,
            source.get("data").and_then(Value::as_str)?
        ),
        "url" => source.get("url").and_then(Value::as_str)?.to_string(),
        _ => return None,
    };
    Some(json!({"type": "image_url", "image_url": {"url": url}}))
}

/// The text of text blocks (`system`, a tool result's content), joined with `\n`; other
/// blocks are listed as ignored.
fn text_of_blocks(
    blocks: &[Value],
    field: &'static str,
    request: &mut MessagesRequest,
) -> Result<String, ApiError> {
    let mut texts = Vec::with_capacity(blocks.len());
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(block.get("text").and_then(Value::as_str).unwrap_or("")),
            Some(other) => request.ignore(format!("{field}.content.{other}")),
            None => return Err(bad("A content block needs a `type`.", field)),
        }
    }
    Ok(texts.join("\n"))
}

fn tool_call(block: &Value) -> Result<ToolCall, ApiError> {
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("A `tool_use` block needs a `name`.", "messages"))?;
    let id = block
        .get("id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or_else(|| bad("A `tool_use` block needs an `id`.", "messages"))?;
    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
    Ok(ToolCall::new(id, name, input.to_string()))
}

/// The sampling fields, tools and metadata, in the chat-completions dialect.
fn read_params(body: &MessagesBody, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let params = &mut request.params;
    if let Some(max) = &body.max_tokens {
        match max.as_u64() {
            Some(n) if n > 0 => {
                params.insert("max_tokens".into(), Value::from(n));
            }
            _ => {
                return Err(bad(
                    "`max_tokens` must be a positive integer.",
                    "max_tokens",
                ))
            }
        }
    }
    let sampling = [
        ("temperature", &body.temperature),
        ("top_p", &body.top_p),
        ("top_k", &body.top_k),
    ];
    for (key, value) in sampling {
        if let Some(v) = value {
            params.insert(key.into(), v.clone());
        }
    }
    // An empty list stops nothing: not forwarded.
    match body.stop_sequences.as_ref().filter(|s| s != &&json!([])) {
        None => {}
        Some(Value::Array(stops)) if stops.iter().all(Value::is_string) => {
            params.insert("stop".into(), Value::Array(stops.clone()));
        }
        Some(_) => {
            return Err(bad(
                "`stop_sequences` must be an array of strings.",
                "stop_sequences",
            ))
        }
    }
    if let Some(user) = body
        .metadata
        .as_ref()
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        params.insert("user".into(), Value::String(user.to_string()));
    }
    read_tools(body.tools.as_ref(), request)?;
    read_tool_choice(body.tool_choice.as_ref(), &mut request.params)
}

/// `tools` as chat functions; server tools (web search, code execution, ...) run at Anthropic
/// only, so they are listed as ignored.
fn read_tools(tools: Option<&Value>, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let tools = match tools {
        None => return Ok(()),
        Some(Value::Array(tools)) => tools,
        Some(_) => return Err(bad("`tools` must be an array of tools.", "tools")),
    };
    let mut functions = Vec::with_capacity(tools.len());
    for tool in tools {
        match tool.get("type").and_then(Value::as_str) {
            None | Some("custom") => functions.push(function_of(tool)?),
            Some(other) => request.ignore(format!("tools.{other}")),
        }
    }
    if !functions.is_empty() {
        request
            .params
            .insert("tools".into(), Value::Array(functions));
    }
    Ok(())
}

/// `tool_choice` in the chat dialect, and `disable_parallel_tool_use` as
/// `parallel_tool_calls: false`.
fn read_tool_choice(
    choice: Option<&Value>,
    params: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let Some(choice) = choice else {
        return Ok(());
    };
    let openai = match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => {
            let name = choice.get("name").and_then(Value::as_str).ok_or_else(|| {
                bad(
                    "`tool_choice` of type `tool` needs a `name`.",
                    "tool_choice",
                )
            })?;
            json!({"type": "function", "function": {"name": name}})
        }
        _ => {
            return Err(bad(
                "`tool_choice` must be an object of type `auto`, `any`, `tool` or `none`.",
                "tool_choice",
            ))
        }
    };
    params.insert("tool_choice".into(), openai);
    if choice
        .get("disable_parallel_tool_use")
        .and_then(Value::as_bool)
        == Some(true)
    {
        params.insert("parallel_tool_calls".into(), Value::Bool(false));
    }
    Ok(())
}

/// An Anthropic tool (`{name, description, input_schema}`) as a chat-completions function.
fn function_of(tool: &Value) -> Result<Value, ApiError> {
    let name = tool
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| bad("A tool needs a `name`.", "tools"))?;
    let mut function = Map::new();
    function.insert("name".into(), Value::String(name.to_string()));
    if let Some(d) = tool.get("description").and_then(Value::as_str) {
        function.insert("description".into(), Value::String(d.to_string()));
    }
    let schema = tool
        .get("input_schema")
        .filter(|s| s.is_object())
        .cloned()
        .ok_or_else(|| {
            bad(
                format!("The tool `{name}` needs an `input_schema` object."),
                "tools",
            )
        })?;
    function.insert("parameters".into(), schema);
    Ok(json!({"type": "function", "function": function}))
}
