//! A chat-completions request read into the shared [`Ask`]: the common shape in one pass
//! ([`plain_body`]), anything else in full through a `Value` map, which gives every error.
//! Every field the proxy does not interpret goes to the runner unchanged.

use crate::error::ApiError;
use crate::pipeline::{json_body, non_empty, Ask};
use crate::plain_body::{self, once, Key, TextTurn};
use enforce_core::{runner::ToolCall, Message, Role};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::{Map, Value};
use std::fmt;

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

/// Parses a request body; every field it does not interpret goes to the runner unchanged
/// (`temperature`, `tools`, `max_tokens`, `max_completion_tokens`, `metadata`, `user`, ...).
pub(crate) fn parse_chat_request(body: &[u8]) -> Result<Ask, ApiError> {
    if let Some(plain) = plain_body::read::<PlainChat>(body) {
        if let Some(ask) = plain.into_ask() {
            return ask;
        }
    }
    parse_chat_request_in_full(body)
}

/// The full reading of a chat body, through a `Value` map: every error, every content shape.
fn parse_chat_request_in_full(body: &[u8]) -> Result<Ask, ApiError> {
    let (mut fields, model) = json_body(body)?;
    let Some(Value::Array(raw_messages)) = fields.remove("messages") else {
        return Err(ApiError::bad_request(
            "The request needs `messages`, an array of chat messages.",
            Some("messages"),
        ));
    };
    let mut messages = Vec::with_capacity(raw_messages.len());
    for raw in &raw_messages {
        let role_name = raw.get("role").and_then(Value::as_str).unwrap_or("");
        let role = role_of(role_name).ok_or_else(|| {
            ApiError::bad_request(
                format!(
                    "A message's `role` must be `system`, `developer`, `user`, `assistant` or `tool`, got {}.",
                    crate::pipeline::shown_role(raw.get("role"))
                ),
                Some("messages"),
            )
        })?;
        let mut content = content_text(raw.get("content"))?;
        if role_name == "function" {
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
        messages.push(message);
    }
    let interpreted = Interpreted {
        stream: fields.remove("stream"),
        stream_options: fields.remove("stream_options"),
        enforce: fields.remove("enforce"),
    };
    interpreted.ask(model, messages, fields)
}

/// The request fields the proxy interprets itself and does not pass to the runner, besides
/// `model` and `messages`. `enforce` holds the request's facts for the proxy itself and is
/// never forwarded upstream.
#[derive(Default)]
struct Interpreted {
    stream: Option<Value>,
    stream_options: Option<Value>,
    enforce: Option<Value>,
}

impl Interpreted {
    /// The ask both readings end in; `params` holds every field not interpreted.
    fn ask(
        self,
        model: String,
        messages: Vec<Message>,
        params: Map<String, Value>,
    ) -> Result<Ask, ApiError> {
        if messages.is_empty() {
            return Err(ApiError::bad_request(
                "`messages` must hold at least one message.",
                Some("messages"),
            ));
        }
        // One checked answer per request: choices the proxy would not check are refused, not
        // generated and dropped.
        match params.get("n") {
            None | Some(Value::Null) => {}
            Some(n) if n.as_u64() == Some(1) => {}
            Some(n) => {
                return Err(ApiError::bad_request(
                    format!("This proxy checks one answer per request, so `n` must be 1 (it was {n}). Send {n} requests to get {n} checked answers."),
                    Some("n"),
                ))
            }
        }
        let stream = crate::pipeline::stream_of(self.stream.as_ref())?;
        let include_usage = self
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
            enforce: self.enforce,
            chat_hint: chat_hint(&params),
            params,
            continues: None,
            store: false,
            ignored: Vec::new(),
        })
    }
}

/// A chat body of the common shape read in one pass ([`plain_body`]): its turns text turns
/// whose role needs nothing more (system, developer, user, assistant), every other field kept
/// as a `Value`, as the full reading keeps it.
struct PlainChat<'de> {
    model: String,
    turns: Vec<TextTurn<'de>>,
    interpreted: Interpreted,
    params: Map<String, Value>,
}

impl PlainChat<'_> {
    /// The ask, or `None` where the full reading decides (an empty model, a tool result).
    fn into_ask(self) -> Option<Result<Ask, ApiError>> {
        if self.model.is_empty() {
            return None;
        }
        let mut messages = Vec::with_capacity(self.turns.len());
        for turn in self.turns {
            let role = match &*turn.role.0 {
                "tool" | "function" => return None,
                name => role_of(name)?,
            };
            messages.push(Message::new(role, turn.content));
        }
        Some(self.interpreted.ask(self.model, messages, self.params))
    }
}

impl<'de> Deserialize<'de> for PlainChat<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ChatVisitor;
        impl<'de> Visitor<'de> for ChatVisitor {
            type Value = PlainChat<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a chat request")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<PlainChat<'de>, A::Error> {
                let (mut model, mut turns) = (None, None);
                let mut interpreted = Interpreted::default();
                let mut params = Map::new();
                while let Some(Key(key)) = map.next_key()? {
                    match &*key {
                        "model" => once(&mut model, map.next_value::<String>()?)?,
                        "messages" => once(&mut turns, map.next_value::<Vec<TextTurn<'de>>>()?)?,
                        "stream" => once(&mut interpreted.stream, map.next_value()?)?,
                        "stream_options" => {
                            once(&mut interpreted.stream_options, map.next_value()?)?
                        }
                        "enforce" => once(&mut interpreted.enforce, map.next_value()?)?,
                        _ => {
                            if params.insert(key.into_owned(), map.next_value()?).is_some() {
                                return Err(plain_body::refuse());
                            }
                        }
                    }
                }
                match (model, turns) {
                    (Some(model), Some(turns)) => Ok(PlainChat {
                        model,
                        turns,
                        interpreted,
                        params,
                    }),
                    _ => Err(plain_body::refuse()),
                }
            }
        }
        deserializer.deserialize_map(ChatVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plain_body::testing::{agrees, random_bodies_agree, read_in_one_pass_or_not, turns};
    use axum::http::StatusCode;
    use enforce_testkit::random_json::{RandomJson, VALUES};

    /// The one-pass reading of `body`, held to the full reading where it answers.
    fn read_in_one_pass(body: &[u8]) -> bool {
        let one_pass = plain_body::read::<PlainChat>(body).and_then(PlainChat::into_ask);
        agrees(body, one_pass, parse_chat_request_in_full(body))
    }

    /// What clients send most is read in one pass: text turns of any role but tool, with
    /// sampling fields, stream options, metadata, the proxy's facts, escapes and whitespace.
    #[test]
    fn the_common_chat_bodies_are_read_in_one_pass() {
        let bodies = [
            r#"{"model":"mock","messages":[{"role":"user","content":"Who is Ada? Answer as JSON."}],"stream":false}"#,
            r#"{"stream":true,"model":"m","stream_options":{"include_usage":true},"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"caf\u00e9 \"q\"\n"},{"content":"a","role":"assistant"},{"role":"developer","content":""}],"temperature":0.2,"max_tokens":64}"#,
            " { \"model\" : \"m\" , \"messages\" : [ { \"role\" : \"user\" , \"content\" : \"q\" } ] , \"metadata\" : { \"chat_id\" : \"c1\" } , \"user\" : \"u\" }\n",
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"enforce":{"context":{"k":1}},"n":1,"tools":[{"type":"function","function":{"name":"f"}}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"n":2}"#,
            r#"{"m\u006fdel":"m","messages":[{"role":"user","content":"q"}]}"#,
        ];
        read_in_one_pass_or_not(&bodies, true, read_in_one_pass);
    }

    /// What the full reading keeps for itself: tool results, content parts or null, tool
    /// calls, other turn fields, an empty model or conversation, repeated keys, bad JSON.
    #[test]
    fn the_rest_of_chat_is_left_to_the_full_reading() {
        let bodies = [
            r#"{"model":"m","messages":[{"role":"tool","tool_call_id":"c","content":"42"}]}"#,
            r#"{"model":"m","messages":[{"role":"function","content":"42"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"a"}]}]}"#,
            r#"{"model":"m","messages":[{"role":"assistant","content":null}]}"#,
            r#"{"model":"m","messages":[{"role":"assistant","content":"","tool_calls":[]}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q","name":"n"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q","content":"r"}]}"#,
            r#"{"model":"m","messages":[{"role":"critic","content":"q"}]}"#,
            r#"{"model":"m","messages":[["user","q"]]}"#,
            r#"{"model":"","messages":[{"role":"user","content":"q"}]}"#,
            r#"{"model":"m","model":"n","messages":[{"role":"user","content":"q"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}],"top_p":1,"top_p":0.5}"#,
            r#"{"model":"m","messages":[{"role":"user","content":"q"}]} trailing"#,
            r#"["m",[{"role":"user","content":"q"}]]"#,
            r#"{"model":"m"}"#,
            "",
        ];
        read_in_one_pass_or_not(&bodies, false, read_in_one_pass);
    }

    /// On chat bodies built at random, whole and then cut or altered along their length, the
    /// one-pass reading answers as the full reading does wherever it answers, and often.
    #[test]
    fn the_one_pass_chat_reading_is_the_full_reading_wherever_it_answers() {
        const TOP: [&str; 10] = [
            "model",
            "messages",
            "stream",
            "stream_options",
            "enforce",
            "n",
            "temperature",
            "user",
            "metadata",
            "tools",
        ];
        const TURN: [&str; 5] = ["role", "content", "role", "content", "tool_call_id"];
        const ROLES: [&str; 9] = [
            "\"user\"",
            "\"user\"",
            "\"assistant\"",
            "\"assistant\"",
            "\"system\"",
            "\"developer\"",
            "\"tool\"",
            "\"function\"",
            "\"critic\"",
        ];
        fn value(random: &mut RandomJson, depth: usize, key: &str) -> String {
            if depth > 4 || random.below(5) == 0 {
                return random.any(depth);
            }
            match key {
                "model" => random
                    .pick(&["\"mock\"", "\"\"", "\"m\\u0031\""])
                    .to_string(),
                "messages" => turns(random, depth, &ROLES, &TURN, &mut value),
                "role" => random.pick(&ROLES).to_string(),
                "content" | "user" if random.below(4) == 0 => random.pick(&VALUES).to_string(),
                "content" | "user" => random
                    .pick(&["\"q\"", "\"\"", "\"caf\\u00e9 \\\"q\\\"\"", "\"tab\\tq\""])
                    .to_string(),
                "stream" => random.pick(&["true", "false", "null"]).to_string(),
                "stream_options" => random.object(depth, &["include_usage"], &mut value),
                "include_usage" => random.pick(&["true", "false"]).to_string(),
                "n" => random.pick(&["1", "2", "null", "1.0"]).to_string(),
                "metadata" => random.object(depth, &["chat_id"], &mut value),
                "chat_id" => random.pick(&["\"c1\"", "\" \"", "1"]).to_string(),
                _ => random.any(depth),
            }
        }
        random_bodies_agree(
            0x9e37_79b9_7f4a_7c15,
            3000,
            &TOP,
            &mut value,
            read_in_one_pass,
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
    fn chat_hint_prefers_metadata_then_user() {
        let r = parse_chat_request(
            br#"{"model":"m","messages":[{"role":"user","content":"q"}],"metadata":{"chat_id":"meta"},"user":"u"}"#,
        )
        .unwrap();
        assert_eq!(r.chat_hint.as_deref(), Some("meta"));
        let r = parse_chat_request(
            br#"{"model":"m","messages":[{"role":"user","content":"q"},{"role":"user","content":"q"}],"metadata":{"chat_id":" "},"user":"u"}"#,
        )
        .unwrap();
        assert_eq!(r.chat_hint.as_deref(), Some("u"));
    }
}
