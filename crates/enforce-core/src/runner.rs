//! The [`Runner`] trait: how the loop asks a model ([`Ask`]), whole or streamed
//! ([`StreamEvent`]), and the request and reply it exchanges.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::fmt;
use std::time::Duration;

mod stream;
pub use stream::{ReplyStream, StreamEvent};

/// Who said a [`Message`]. Exhaustive: runners map every role onto their wire format, and a new
/// role would need a new message shape anyway.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Instructions for the model.
    System,
    /// The person (or program) asking.
    User,
    /// The model.
    Assistant,
    /// The result of a tool call, answering the assistant's call with the same id.
    Tool,
}

/// A model's request to call one of the tools the client declared (OpenAI `tool_calls`).
///
/// The arguments stay the text the model wrote: they may not even be JSON, and a client gets
/// them byte for byte.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The call's id, which the tool result answers (`call_...`).
    pub id: String,
    /// The function called.
    pub name: String,
    /// The arguments as the model wrote them (JSON text, if the model got it right).
    pub arguments: String,
}

impl ToolCall {
    /// A call of `name` with `arguments`.
    pub fn new(
        id: impl Into<String>,
        name: impl Into<String>,
        arguments: impl Into<String>,
    ) -> Self {
        ToolCall {
            id: id.into(),
            name: name.into(),
            arguments: arguments.into(),
        }
    }

    /// The call as OpenAI chat completions write it:
    /// `{"id", "type": "function", "function": {"name", "arguments"}}`.
    pub fn to_openai(&self) -> Value {
        serde_json::json!({
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        })
    }

    /// Reads an OpenAI `tool_calls` array (`null` is no calls). Arguments sent as a JSON object
    /// (Ollama's native shape) become their JSON text; a call without an id gets `call_<index>`.
    /// The error says which call is malformed.
    pub fn list_from_openai(calls: &Value) -> Result<Vec<ToolCall>, String> {
        let Some(calls) = calls.as_array() else {
            return if calls.is_null() {
                Ok(Vec::new())
            } else {
                Err("`tool_calls` is not an array".to_string())
            };
        };
        calls
            .iter()
            .enumerate()
            .map(|(i, call)| {
                let function = call
                    .get("function")
                    .ok_or_else(|| format!("tool call {i} has no `function`"))?;
                let name = function
                    .get("name")
                    .and_then(Value::as_str)
                    .filter(|n| !n.is_empty())
                    .ok_or_else(|| format!("tool call {i} has no function name"))?;
                let arguments = match function.get("arguments") {
                    None | Some(Value::Null) => String::new(),
                    Some(Value::String(s)) => s.clone(),
                    Some(other) => other.to_string(),
                };
                let id = match call.get("id").and_then(Value::as_str) {
                    Some(id) if !id.is_empty() => id.to_string(),
                    _ => format!("call_{i}"),
                };
                Ok(ToolCall::new(id, name, arguments))
            })
            .collect()
    }
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// Who said it.
    pub role: Role,
    /// What was said (empty for an assistant turn that only calls tools).
    pub content: String,
    /// The tools an assistant turn calls.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The call a [`Role::Tool`] message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// The message's content parts in the OpenAI chat shape, when it holds more than text
    /// (`image_url`, `input_audio`, `file`), text parts included: a runner whose upstream takes
    /// parts sends these instead of `content`. `content` still holds the text parts, which is
    /// what validators and text-only runners see. Empty for a text message.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub parts: Vec<serde_json::Value>,
}

impl Message {
    /// A message with the given role.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            parts: Vec::new(),
        }
    }
    /// An assistant turn calling `tool_calls`, with its text (may be empty).
    pub fn assistant_calling(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> Self {
        Message {
            tool_calls,
            ..Self::new(Role::Assistant, content)
        }
    }
    /// A tool result answering the call `tool_call_id`.
    pub fn tool(tool_call_id: impl Into<String>, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(tool_call_id.into()),
            ..Self::new(Role::Tool, content)
        }
    }
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        Self::new(Role::System, content)
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        Self::new(Role::User, content)
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        Self::new(Role::Assistant, content)
    }
}

/// What the loop asks a runner for.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Request {
    /// The conversation so far; the last message is normally the user's question.
    pub messages: Vec<Message>,
    /// A runner session to continue (e.g. a Claude CLI session id from an earlier turn).
    #[serde(default)]
    pub session_id: Option<String>,
    /// Request parameters the runner passes on unchanged when it can (temperature, tools, ...).
    #[serde(default)]
    pub params: Map<String, Value>,
    /// How many asks of the same enforcement came before this one (0 for a first ask). A
    /// runner that draws with a seed of its own configuration (used when `params` carry none)
    /// adds this to it, so that no re-ask draws a failed attempt's sample again; a `seed` in
    /// `params` is already advanced by the loop.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub seed_offset: u64,
    /// The names of the `params` that carry a decoding constraint (a grammar, a strict
    /// `response_format`) the caller added for the contract: the free pass of
    /// reason-then-format ([`Reask::ReasonThenFormat`](crate::policy::Reask::ReasonThenFormat))
    /// leaves them out, its format pass keeps them; with the rung
    /// [`Reask::Constrained`](crate::policy::Reask::Constrained) in the ladder, only that
    /// rung's attempts send them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub constraint_params: Vec<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A numeric `seed` parameter `steps` draws later: the seed a re-ask sends after `steps` asks
/// (wrapping at the integer's end). `None` when `seed` is not an integer.
///
/// ```
/// use serde_json::json;
/// assert_eq!(enforce_core::runner::advance_seed(&json!(41), 2), Some(json!(43)));
/// assert_eq!(enforce_core::runner::advance_seed(&json!(-1), 1), Some(json!(0)));
/// assert_eq!(enforce_core::runner::advance_seed(&json!("7"), 1), None);
/// ```
pub fn advance_seed(seed: &Value, steps: u64) -> Option<Value> {
    match (seed.as_u64(), seed.as_i64()) {
        (Some(u), _) => Some(Value::from(u.wrapping_add(steps))),
        (None, Some(i)) => Some(Value::from(i.wrapping_add_unsigned(steps))),
        _ => None,
    }
}

impl Request {
    /// A request holding one user message.
    pub fn prompt(text: impl Into<String>) -> Self {
        Request {
            messages: vec![Message::user(text)],
            ..Request::default()
        }
    }

    /// The content of the last user message, which session-capable runners send on its own.
    pub fn last_user_text(&self) -> Option<&str> {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == Role::User)
            .map(|m| m.content.as_str())
    }
}

/// Token counts a runner reports.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Tokens sent to the model.
    pub input_tokens: u64,
    /// Tokens the model produced.
    pub output_tokens: u64,
}

impl Usage {
    /// Input plus output tokens.
    pub fn total(&self) -> u64 {
        self.input_tokens.saturating_add(self.output_tokens)
    }

    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: Usage) {
        self.input_tokens = self.input_tokens.saturating_add(other.input_tokens);
        self.output_tokens = self.output_tokens.saturating_add(other.output_tokens);
    }
}

/// A model's answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Reply {
    /// The response text (empty when the model only called tools).
    pub text: String,
    /// The tools the model called, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
    /// The runner's session id, if it has sessions; follow-ups continue it.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Token usage, when reported.
    #[serde(default)]
    pub usage: Option<Usage>,
    /// Cost in US dollars, when reported.
    #[serde(default)]
    pub cost_usd: Option<f64>,
    /// How long the runner took, when it measured it.
    #[serde(default, with = "crate::serde_millis::option")]
    pub duration: Option<Duration>,
    /// Why the model stopped, when the runner says (OpenAI `finish_reason`, llama.cpp's end of
    /// generation or token limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<FinishReason>,
    /// The seed the model drew with, when the runner chose it itself (a configured default);
    /// the audit records it, or else the `seed` the request carried.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// Why a model stopped generating.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FinishReason {
    /// It ended its answer (or hit a stop sequence).
    Stop,
    /// It hit the token limit: the answer is truncated.
    Length,
    /// It called tools.
    ToolCalls,
    /// A content filter stopped it.
    ContentFilter,
    /// Any other reason, in the runner's words.
    #[serde(untagged)]
    Other(String),
}

impl FinishReason {
    /// Reads an OpenAI-style `finish_reason` string (`stop`, `length`, `tool_calls`,
    /// `content_filter`; `end_turn`/`max_tokens`/`tool_use` as Anthropic spells them).
    pub fn parse(reason: &str) -> FinishReason {
        match reason {
            "stop" | "end_turn" | "stop_sequence" => FinishReason::Stop,
            "length" | "max_tokens" => FinishReason::Length,
            "tool_calls" | "function_call" | "tool_use" => FinishReason::ToolCalls,
            "content_filter" => FinishReason::ContentFilter,
            other => FinishReason::Other(other.to_string()),
        }
    }

    /// The OpenAI spelling.
    pub fn as_str(&self) -> &str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::ToolCalls => "tool_calls",
            FinishReason::ContentFilter => "content_filter",
            FinishReason::Other(other) => other,
        }
    }
}

impl Reply {
    /// A reply with only a text.
    pub fn text(text: impl Into<String>) -> Self {
        Reply {
            text: text.into(),
            ..Reply::default()
        }
    }

    /// `true` when the model called tools and wrote no text: text validators have nothing to
    /// check (see [`Validator::validate_reply`](crate::Validator::validate_reply)).
    pub fn only_tool_calls(&self) -> bool {
        !self.tool_calls.is_empty() && self.text.trim().is_empty()
    }
}

/// Why a runner gave no reply. Each arm keeps the runner's own words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[non_exhaustive]
pub enum RunnerError {
    /// The runner did not answer in time (and was stopped).
    #[error("runner timed out after {} ms", .after_ms)]
    Timeout {
        /// How long it was given, in milliseconds.
        after_ms: u64,
    },
    /// The model process could not be started or failed.
    #[error("runner process failed: {message}")]
    Process {
        /// What failed (e.g. a missing binary, an exit code and stderr's tail).
        message: String,
        /// The exit code, if the process exited.
        #[serde(default)]
        exit_code: Option<i32>,
    },
    /// The runner answered something that does not follow its wire format.
    #[error("runner protocol error: {message}")]
    Protocol {
        /// What was wrong with the answer.
        message: String,
    },
    /// The model server answered with an error.
    #[error("upstream error{}: {message}", .status.map(|s| format!(" (status {s})")).unwrap_or_default())]
    Upstream {
        /// HTTP status, if any.
        #[serde(default)]
        status: Option<u16>,
        /// The server's error message.
        message: String,
    },
    /// The model server is busy: it rate-limited the request (429) or is overloaded (503,
    /// Anthropic's 529), still after the runner's own retries. Asking later may succeed; the
    /// proxy passes the server's `Retry-After` on to its client.
    #[error("upstream busy (status {status}): {message}")]
    Busy {
        /// HTTP status (429, 503 or 529).
        status: u16,
        /// The server's error message.
        message: String,
        /// How long the server asked to wait (its `Retry-After`), in whole seconds rounded up.
        #[serde(default)]
        retry_after_secs: Option<u64>,
    },
    /// The model cannot serve the request at all, and asking again will not change that: its
    /// file is missing, corrupt or too large for the memory, or the request does not fit (a
    /// prompt longer than the context, a grammar the model cannot follow). The message names
    /// the file or the limit.
    #[error("model unavailable: {message}")]
    Unavailable {
        /// What is missing or does not fit.
        message: String,
    },
}

impl RunnerError {
    /// `true` for a failure another call may not meet: a timeout, a broken stream or answer
    /// (protocol), an upstream error without status or with 429 or 5xx, a process that ran
    /// and failed. The loop counts such a failure during a re-ask as a failed attempt and asks
    /// again while attempts remain. `false` for what asking again cannot change: a runner
    /// process that could not be started, an upstream 4xx (bad request, authentication), a
    /// model that is missing or does not fit (a re-ask's longer prompt fits no better).
    pub fn is_transient(&self) -> bool {
        match self {
            RunnerError::Timeout { .. }
            | RunnerError::Protocol { .. }
            | RunnerError::Busy { .. } => true,
            RunnerError::Upstream { status, .. } => status.is_none_or(|s| s == 429 || s >= 500),
            RunnerError::Process { exit_code, .. } => exit_code.is_some(),
            RunnerError::Unavailable { .. } => false,
        }
    }
}

/// One ask of a runner: the request, whether it continues a conversation (a re-ask carrying
/// feedback on the previous reply) and whether the answer should stream.
///
/// Non-exhaustive: built with [`Ask::new`] and [`Ask::follow_up`], then
/// [`streamed`](Ask::streamed); runners read the fields.
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct Ask<'a> {
    /// The request (for a follow-up: the original conversation).
    pub request: &'a Request,
    /// The previous reply and the feedback on it, for a re-ask; `None` for a first ask.
    pub follow_up: Option<FollowUp<'a>>,
    /// `true` when the caller reads the answer as it is written ([`StreamEvent::Text`]); a
    /// runner that cannot stream answers with one [`StreamEvent::Done`] all the same.
    pub stream: bool,
}

/// What a re-ask continues from: the previous reply and the feedback on it.
///
/// `previous` may be an answer the loop cut short: its text is the part received, its session
/// id the one the stream reported. A session runner resumes that session (whose history may
/// not even hold the partial answer); the feedback quotes what was wrong.
#[derive(Debug, Clone, Copy)]
pub struct FollowUp<'a> {
    /// The reply the feedback is about.
    pub previous: &'a Reply,
    /// The feedback text.
    pub feedback: &'a str,
}

impl<'a> Ask<'a> {
    /// A first ask of `request`, answered whole.
    pub fn new(request: &'a Request) -> Self {
        Ask {
            request,
            follow_up: None,
            stream: false,
        }
    }

    /// A re-ask of `request` carrying `feedback` about `previous`, answered whole.
    pub fn follow_up(request: &'a Request, previous: &'a Reply, feedback: &'a str) -> Self {
        Ask {
            request,
            follow_up: Some(FollowUp { previous, feedback }),
            stream: false,
        }
    }

    /// This ask with its answer streamed.
    pub fn streamed(self) -> Self {
        Ask {
            stream: true,
            ..self
        }
    }

    /// The messages a stateless runner sends: the request's for a first ask; for a follow-up
    /// the original messages, the previous answer and the feedback
    /// ([`follow_up_messages`] with `style`).
    pub fn messages(&self, style: ToolFeedback) -> Cow<'a, [Message]> {
        match self.follow_up {
            None => Cow::Borrowed(&self.request.messages),
            Some(FollowUp { previous, feedback }) => {
                Cow::Owned(follow_up_messages(self.request, previous, feedback, style))
            }
        }
    }
}

/// Asks a model: one [`Ask`] in, a [`ReplyStream`] out. A first ask sends the request; a
/// follow-up carries the feedback on the previous reply.
///
/// A runner with sessions (the Claude CLI's `--resume`) sends only the feedback and continues
/// `previous.session_id`; a stateless one sends the original messages, the previous answer and
/// the feedback ([`Ask::messages`]), never every earlier attempt, so the context does not grow
/// with retries. A runner that cannot stream answers with [`ReplyStream::whole`]; a caller that
/// does not stream reads the whole reply with [`ReplyStream::reply`].
///
/// ```
/// use enforce_core::runner::ToolFeedback;
/// use enforce_core::{Ask, Context, Enforcer, Issue, Reply, ReplyStream, Request, Runner,
///                    RunnerError, Status, Validation, Validator, async_trait};
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     let mut f = std::pin::pin!(f);
/// #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
/// #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
/// # }
///
/// /// A stand-in "model" that shouts once it is told to.
/// struct Parrot;
///
/// impl Runner for Parrot {
///     fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
///         ReplyStream::whole(async move {
///             let Some(follow_up) = ask.follow_up else {
///                 let prompt = ask.request.last_user_text().ok_or(RunnerError::Protocol {
///                     message: "no user message".into(),
///                 })?;
///                 return Ok(Reply::text(prompt));
///             };
///             // A stateless model gets the conversation, its last answer and the feedback.
///             let messages = ask.messages(ToolFeedback::ToolMessages);
///             assert_eq!(messages.len(), ask.request.messages.len() + 2);
///             Ok(Reply::text(follow_up.previous.text.to_uppercase()))
///         })
///     }
/// }
///
/// struct Shouted;
///
/// #[async_trait]
/// impl Validator for Shouted {
///     fn name(&self) -> &str { "shouted" }
///     async fn validate(&self, response: &str, _: &Context) -> Validation {
///         Ok(if response == response.to_uppercase() { vec![] } else {
///             vec![Issue::error("shouted", "NOT_SHOUTED", "Write in capitals.")]
///         })
///     }
/// }
///
/// let enforcer = Enforcer::new(vec![Box::new(Shouted)]);
/// let outcome = block_on(enforcer.run(&Parrot, &Request::prompt("hello"), &Context::new()));
/// assert_eq!(outcome.status, Status::Passed);
/// assert_eq!(outcome.response.as_deref(), Some("HELLO"));
/// let reply = block_on(Parrot.ask(Ask::new(&Request::prompt("hi"))).reply());
/// assert_eq!(reply.map(|r| r.text), Ok("hi".to_string()));
/// ```
#[async_trait]
pub trait Runner: Send + Sync {
    /// Answers `ask`: text as the model writes it when [`Ask::stream`] is set and the runner
    /// can stream, then the whole [`Reply`] ([`StreamEvent::Done`]). Dropping the stream
    /// cancels the generation.
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a>;

    /// The input tokens `request` would take, as the model's server counts them (the
    /// Anthropic API's `count_tokens`); `None` (the default) when this runner cannot ask.
    async fn count_tokens(&self, _request: &Request) -> Option<Result<u64, RunnerError>> {
        None
    }
}

impl fmt::Debug for dyn Runner + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Runner").finish_non_exhaustive()
    }
}

/// Forwards every method, so a shared or boxed runner is the runner itself.
macro_rules! forward_runner {
    ($($pointer:ident)::+) => {
        #[async_trait]
        impl<R: Runner + ?Sized> Runner for $($pointer)::+<R> {
            fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
                (**self).ask(ask)
            }
            async fn count_tokens(&self, request: &Request) -> Option<Result<u64, RunnerError>> {
                (**self).count_tokens(request).await
            }
        }
    };
}

forward_runner!(Box);
forward_runner!(std::sync::Arc);

/// How a follow-up tells the model that its tool calls were rejected.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum ToolFeedback {
    /// The previous answer goes back as an assistant turn with its `tool_calls`, each call is
    /// answered by a [`Role::Tool`] message saying it was not run, and the feedback follows as
    /// a user message. What OpenAI-style servers expect: every call id gets its result.
    #[default]
    ToolMessages,
    /// The previous answer goes back as plain assistant text with the calls written out, and the
    /// feedback follows as a user message: no tool structure at all, for servers (older Ollama
    /// and llama.cpp builds) that reject tool results or assistant turns without content.
    UserMessage,
}

/// The text a tool result says for a call the loop rejected.
pub const REJECTED_TOOL_CALL: &str =
    "Error: this call was not run because the reply failed validation; see the next message.";

/// The messages a stateless runner sends for a follow-up: the original conversation, the
/// previous answer and the feedback. Exactly one earlier answer, however many attempts came
/// before. Tool calls in the previous answer go back as [`ToolFeedback::ToolMessages`] does it.
pub fn stateless_follow_up_messages(
    request: &Request,
    previous: &Reply,
    feedback: &str,
) -> Vec<Message> {
    follow_up_messages(request, previous, feedback, ToolFeedback::ToolMessages)
}

/// [`stateless_follow_up_messages`] with the tool feedback style chosen.
pub fn follow_up_messages(
    request: &Request,
    previous: &Reply,
    feedback: &str,
    style: ToolFeedback,
) -> Vec<Message> {
    let calls = previous.tool_calls.len();
    let mut messages = Vec::with_capacity(request.messages.len() + 2 + calls);
    messages.extend(request.messages.iter().cloned());
    if calls == 0 {
        messages.push(Message::assistant(previous.text.clone()));
    } else {
        match style {
            ToolFeedback::ToolMessages => {
                messages.push(Message::assistant_calling(
                    previous.text.clone(),
                    previous.tool_calls.clone(),
                ));
                for call in &previous.tool_calls {
                    messages.push(Message::tool(call.id.clone(), REJECTED_TOOL_CALL));
                }
            }
            ToolFeedback::UserMessage => {
                messages.push(Message::assistant(written_out_calls(previous)));
            }
        }
    }
    messages.push(Message::user(feedback));
    messages
}

/// The previous answer's text with its tool calls written out as text.
fn written_out_calls(reply: &Reply) -> String {
    let mut out = reply.text.trim_end().to_string();
    for call in &reply.tool_calls {
        if !out.is_empty() {
            out.push('\n');
        }
        out.push_str(&format!(
            "[called tool {} with arguments {}]",
            call.name, call.arguments
        ));
    }
    out
}
