//! Reading a Messages request: the conversation (text, image, `tool_use` and `tool_result`
//! blocks) and the params the runners forward, every unread field listed as ignored.

use crate::error::ApiError;
use crate::plain_body::{self, once, Key, TextTurn};
use enforce_core::{runner::ToolCall, Message, Role};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{json, Map, Value};
use std::fmt;

/// Body fields read here besides [`PARAMS`]; every other field is listed as ignored.
const READ: &[&str] = &["model", "messages", "system", "stream", "enforce"];

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
pub fn parse_messages_request(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    if let Some(plain) = plain_body::read::<PlainMessages>(body) {
        if let Some(request) = plain.into_request() {
            return request;
        }
    }
    parse_messages_request_in_full(body)
}

/// The full reading of a Messages body, through a `Value` map: every error, every block.
fn parse_messages_request_in_full(body: &[u8]) -> Result<MessagesRequest, ApiError> {
    let mut fields = crate::pipeline::body_object(body)?;
    let model = match fields.remove("model") {
        Some(Value::String(m)) if !m.is_empty() => m,
        _ => {
            return Err(bad(
                "The request needs a `model` (one of the ids listed by /v1/models).",
                "model",
            ))
        }
    };
    let mut request = start_request(
        model,
        fields.remove("stream"),
        fields.remove("enforce"),
        fields.remove("system"),
    )?;
    let Some(Value::Array(turns)) = fields.remove("messages") else {
        return Err(bad(
            "The request needs `messages`, an array of user and assistant turns.",
            "messages",
        ));
    };
    if turns.is_empty() {
        return Err(no_turns());
    }
    for turn in &turns {
        read_turn(turn, &mut request)?;
    }
    read_params(&fields, &mut request)?;
    for key in fields.keys() {
        if !READ.contains(&key.as_str()) && !PARAMS.contains(&key.as_str()) {
            request.ignore(key.clone());
        }
    }
    Ok(request)
}

fn no_turns() -> ApiError {
    bad("`messages` must hold at least one message.", "messages")
}

/// The request before its turns: the model, `stream`, `enforce`, and `system` as the first
/// message.
fn start_request(
    model: String,
    stream: Option<Value>,
    enforce: Option<Value>,
    system: Option<Value>,
) -> Result<MessagesRequest, ApiError> {
    let mut request = MessagesRequest {
        model,
        messages: Vec::new(),
        stream: crate::pipeline::stream_of(stream.as_ref())?,
        enforce,
        params: Map::new(),
        ignored: Vec::new(),
    };
    if let Some(system) = system {
        let text = match system {
            Value::Null => String::new(),
            Value::String(s) => s,
            Value::Array(blocks) => text_of_blocks(&blocks, "system", &mut request)?,
            _ => {
                return Err(bad(
                    "`system` must be a string or an array of text blocks.",
                    "system",
                ))
            }
        };
        if !text.is_empty() {
            request.messages.push(Message::system(text));
        }
    }
    Ok(request)
}

/// The fields [`read_params`] reads (a one-pass reading keeps them as values).
const PARAMS: &[&str] = &[
    "max_tokens",
    "stop_sequences",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
];

/// A Messages body of the common shape read in one pass ([`plain_body`]): text turns, and
/// only fields the full reading reads (an unknown one is listed as ignored there).
struct PlainMessages<'de> {
    model: String,
    turns: Vec<TextTurn<'de>>,
    stream: Option<Value>,
    enforce: Option<Value>,
    system: Option<Value>,
    params: Map<String, Value>,
}

impl PlainMessages<'_> {
    /// The request, or `None` where the full reading decides (an empty model, another role).
    fn into_request(self) -> Option<Result<MessagesRequest, ApiError>> {
        if self.model.is_empty() {
            return None;
        }
        let mut messages = Vec::with_capacity(self.turns.len());
        for turn in self.turns {
            let role = match &*turn.role.0 {
                "user" => Role::User,
                "assistant" => Role::Assistant,
                _ => return None,
            };
            messages.push(Message::new(role, turn.content));
        }
        let read = || {
            let mut request = start_request(self.model, self.stream, self.enforce, self.system)?;
            if messages.is_empty() {
                return Err(no_turns());
            }
            request.messages.append(&mut messages);
            read_params(&self.params, &mut request)?;
            Ok(request)
        };
        Some(read())
    }
}

impl<'de> Deserialize<'de> for PlainMessages<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MessagesVisitor;
        impl<'de> Visitor<'de> for MessagesVisitor {
            type Value = PlainMessages<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a Messages request")
            }
            fn visit_map<A: MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<PlainMessages<'de>, A::Error> {
                let (mut model, mut turns) = (None, None);
                let (mut stream, mut enforce, mut system) = (None, None, None);
                let mut params = Map::new();
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "model" => once(&mut model, map.next_value::<String>()?)?,
                        "messages" => once(&mut turns, map.next_value::<Vec<TextTurn<'de>>>()?)?,
                        "stream" => once(&mut stream, map.next_value()?)?,
                        "enforce" => once(&mut enforce, map.next_value()?)?,
                        "system" => once(&mut system, map.next_value()?)?,
                        known if PARAMS.contains(&known) => {
                            if params.insert(key.into_owned(), map.next_value()?).is_some() {
                                return Err(plain_body::refuse());
                            }
                        }
                        _ => return Err(plain_body::refuse()),
                    }
                }
                match (model, turns) {
                    (Some(model), Some(turns)) => Ok(PlainMessages {
                        model,
                        turns,
                        stream,
                        enforce,
                        system,
                        params,
                    }),
                    _ => Err(plain_body::refuse()),
                }
            }
        }
        deserializer.deserialize_map(MessagesVisitor)
    }
}

/// One turn of `messages`: its text, tool calls (assistant) and tool results (user).
fn read_turn(turn: &Value, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let role = match turn.get("role").and_then(Value::as_str) {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        _ => {
            return Err(bad(
                format!(
                    "A message's `role` must be `user` or `assistant`, got {}.",
                    crate::pipeline::shown_role(turn.get("role"))
                ),
                "messages",
            ))
        }
    };
    let blocks = match turn.get("content") {
        Some(Value::String(s)) => {
            request.messages.push(Message::new(role, s.clone()));
            return Ok(());
        }
        Some(Value::Array(blocks)) => blocks,
        _ => {
            return Err(bad(
                "A message's `content` must be a string or an array of content blocks.",
                "messages",
            ))
        }
    };
    let mut texts: Vec<&str> = Vec::new();
    // The content as chat parts, kept when it holds an image (as chat keeps `image_url`).
    let mut parts: Vec<Value> = Vec::new();
    let mut has_image = false;
    let mut calls = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str).unwrap_or("") {
            "text" => {
                let text = block.get("text").and_then(Value::as_str).unwrap_or("");
                texts.push(text);
                parts.push(json!({"type": "text", "text": text}));
            }
            "image" if role == Role::User => match image_part(block) {
                Some(part) => {
                    has_image = true;
                    parts.push(part);
                }
                None => request.ignore("messages.content.image"),
            },
            "tool_use" if role == Role::Assistant => calls.push(tool_call(block)?),
            "tool_result" if role == Role::User => {
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
                request.messages.push(Message::tool(id, content));
            }
            // The model's own reasoning sent back: not answer text (and enforce's drafts carry
            // no signature an upstream would take).
            "thinking" | "redacted_thinking" if role == Role::Assistant => {}
            "document" | "search_result" => {
                request.ignore(format!(
                    "messages.content.{}",
                    block["type"].as_str().unwrap_or("")
                ));
            }
            other => {
                return Err(bad(
                    format!(
                        "A `{}` message cannot hold a `{other}` content block here.",
                        if role == Role::User {
                            "user"
                        } else {
                            "assistant"
                        }
                    ),
                    "messages",
                ))
            }
        }
    }
    // Tool results (pushed above) come before the turn's text, as the API orders them.
    let text = texts.join("\n");
    if !text.is_empty() || !calls.is_empty() || has_image {
        let mut message = match role {
            Role::Assistant => Message::assistant_calling(text, calls),
            _ => Message::user(text),
        };
        if has_image {
            message.parts = parts;
        }
        request.messages.push(message);
    }
    Ok(())
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
fn read_params(fields: &Map<String, Value>, request: &mut MessagesRequest) -> Result<(), ApiError> {
    let params = &mut request.params;
    if let Some(max) = fields.get("max_tokens") {
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
    for key in ["temperature", "top_p", "top_k"] {
        if let Some(v) = fields.get(key).filter(|v| !v.is_null()) {
            params.insert(key.into(), v.clone());
        }
    }
    match fields.get("stop_sequences") {
        None | Some(Value::Null) => {}
        Some(Value::Array(stops)) if stops.iter().all(Value::is_string) => {
            if !stops.is_empty() {
                params.insert("stop".into(), Value::Array(stops.clone()));
            }
        }
        Some(_) => {
            return Err(bad(
                "`stop_sequences` must be an array of strings.",
                "stop_sequences",
            ))
        }
    }
    if let Some(user) = fields
        .get("metadata")
        .and_then(|m| m.get("user_id"))
        .and_then(Value::as_str)
    {
        params.insert("user".into(), Value::String(user.to_string()));
    }
    let mut ignored = Vec::new();
    match fields.get("tools") {
        None | Some(Value::Null) => {}
        Some(Value::Array(tools)) => {
            let mut functions = Vec::with_capacity(tools.len());
            for tool in tools {
                match tool.get("type").and_then(Value::as_str) {
                    None | Some("custom") => functions.push(function_of(tool)?),
                    // Server tools (web search, code execution, ...) run at Anthropic only.
                    Some(other) => ignored.push(format!("tools.{other}")),
                }
            }
            if !functions.is_empty() {
                params.insert("tools".into(), Value::Array(functions));
            }
        }
        Some(_) => return Err(bad("`tools` must be an array of tools.", "tools")),
    }
    if let Some(choice) = fields.get("tool_choice").filter(|c| !c.is_null()) {
        let kind = choice.get("type").and_then(Value::as_str);
        let openai = match kind {
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
    }
    for what in ignored {
        request.ignore(what);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plain_body::testing::{agrees, random_bodies_agree, read_in_one_pass_or_not, turns};
    use enforce_testkit::random_json::{RandomJson, VALUES};

    /// The one-pass reading of `body`, held to the full reading where it answers.
    fn read_in_one_pass(body: &[u8]) -> bool {
        let one_pass =
            plain_body::read::<PlainMessages>(body).and_then(PlainMessages::into_request);
        agrees(body, one_pass, parse_messages_request_in_full(body))
    }

    /// What clients send most is read in one pass: text turns, `system` as a string or
    /// blocks, sampling fields, tools, metadata, the proxy's facts, escapes and whitespace.
    #[test]
    fn the_common_messages_bodies_are_read_in_one_pass() {
        let bodies = [
            r#"{"model":"mock","max_tokens":256,"messages":[{"role":"user","content":"Who is Ada? Answer as JSON."}],"stream":false}"#,
            r#"{"stream":true,"model":"m","system":"Be brief.","messages":[{"role":"user","content":"caf\u00e9 \"q\"\n"},{"content":"a","role":"assistant"},{"role":"user","content":""}],"temperature":0.2,"top_k":5,"max_tokens":64,"stop_sequences":["END"]}"#,
            " { \"model\" : \"m\" , \"max_tokens\" : 1 , \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"q\" } ] , \"metadata\" : { \"user_id\" : \"u1\" } }\n",
            r#"{"model":"m","max_tokens":8,"system":[{"type":"text","text":"s"},{"type":"document"}],"messages":[{"role":"user","content":"q"}],"enforce":{"context":{"k":1}},"tools":[{"name":"f","input_schema":{"type":"object"}},{"type":"web_search_20250305","name":"web_search"}],"tool_choice":{"type":"any","disable_parallel_tool_use":true}}"#,
            r#"{"model":"m","max_tokens":0,"messages":[{"role":"user","content":"q"}]}"#,
            r#"{"model":"m","system":7,"messages":[{"role":"user","content":"q"}]}"#,
        ];
        read_in_one_pass_or_not(&bodies, true, read_in_one_pass);
    }

    /// What the full reading keeps for itself: content blocks, other roles, fields it lists
    /// as ignored, an empty model or conversation, repeated keys, bad JSON.
    #[test]
    fn the_rest_of_messages_is_left_to_the_full_reading() {
        let bodies = [
            r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}"#,
            r#"{"model":"m","max_tokens":8,"messages":[{"role":"assistant","content":[{"type":"tool_use","id":"t","name":"f","input":{}}]}]}"#,
            r#"{"model":"m","max_tokens":8,"messages":[{"role":"system","content":"q"}]}"#,
            r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q","cache_control":{}}]}"#,
            r#"{"model":"m","max_tokens":8,"messages":[{"role":"user","content":"q"}],"thinking":{"type":"enabled"}}"#,
            r#"{"model":"","max_tokens":8,"messages":[{"role":"user","content":"q"}]}"#,
            r#"{"model":"m","max_tokens":8,"max_tokens":9,"messages":[{"role":"user","content":"q"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"stream":true,"stream":false}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],}"#,
            r#"[{"model":"m"}]"#,
            "{}",
        ];
        read_in_one_pass_or_not(&bodies, false, read_in_one_pass);
    }

    /// On Messages bodies built at random, whole and then cut or altered along their length,
    /// the one-pass reading answers as the full reading does wherever it answers, and often.
    #[test]
    fn the_one_pass_messages_reading_is_the_full_reading_wherever_it_answers() {
        const TOP: [&str; 13] = [
            "model",
            "messages",
            "max_tokens",
            "max_tokens",
            "stream",
            "system",
            "enforce",
            "temperature",
            "stop_sequences",
            "metadata",
            "tools",
            "tool_choice",
            "thinking",
        ];
        const TURN: [&str; 4] = ["role", "content", "role", "content"];
        const ROLES: [&str; 6] = [
            "\"user\"",
            "\"user\"",
            "\"assistant\"",
            "\"assistant\"",
            "\"system\"",
            "\"tool\"",
        ];
        fn value(random: &mut RandomJson, depth: usize, key: &str) -> String {
            if depth > 4 || random.below(8) == 0 {
                return random.any(depth);
            }
            match key {
                "model" => random
                    .pick(&["\"mock\"", "\"mock\"", "\"\"", "\"m\\u0031\""])
                    .to_string(),
                "messages" => turns(random, depth, &ROLES, &TURN, &mut value),
                "role" => random.pick(&ROLES).to_string(),
                "content" | "system" if random.below(4) == 0 => random.pick(&VALUES).to_string(),
                "content" | "system" => random
                    .pick(&["\"q\"", "\"\"", "\"caf\\u00e9 \\\"q\\\"\"", "\"tab\\tq\""])
                    .to_string(),
                "max_tokens" => random.pick(&["256", "0", "null", "1.0", "-3"]).to_string(),
                "stream" => random.pick(&["true", "false", "null"]).to_string(),
                "metadata" => random.object(depth, &["user_id"], &mut value),
                "user_id" => random.pick(&["\"u1\"", "\" \"", "1"]).to_string(),
                "stop_sequences" => random.pick(&["[\"END\"]", "[]", "[1]", "null"]).to_string(),
                "tools" => random
                    .pick(&[
                        "[{\"name\":\"f\",\"input_schema\":{\"type\":\"object\"}}]",
                        "[{\"type\":\"web_search_20250305\",\"name\":\"w\"}]",
                        "[{\"name\":\"f\"}]",
                    ])
                    .to_string(),
                "tool_choice" => random
                    .pick(&[
                        "{\"type\":\"auto\"}",
                        "{\"type\":\"tool\",\"name\":\"f\"}",
                        "{\"type\":\"tool\"}",
                        "{\"type\":\"none\",\"disable_parallel_tool_use\":true}",
                    ])
                    .to_string(),
                _ => random.any(depth),
            }
        }
        random_bodies_agree(
            0x51_7cc1_b727_220a,
            4000,
            &TOP,
            &mut value,
            read_in_one_pass,
        );
    }
}
