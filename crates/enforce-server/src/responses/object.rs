//! The `response` object and its output items, as serde writes them. The request fields it
//! echoes ([`Echo`]) stand in for the defaults they name (`tools`, `text`, `store`, ...).

use super::request::Echo;
use super::Responses;
use crate::pipeline::{Surface, Warnings};
use crate::turn::{Turn, TurnId};
use crate::verdict::{cut_at_token_limit, Enforcement};
use enforce_core::{runner::ToolCall, Outcome, Usage};
use serde::{Serialize, Serializer};
use serde_json::Value;
use std::borrow::Cow;

/// A `response` object: of an answer ([`ResponseObject::answer`]), in progress, or failed.
#[derive(Serialize)]
// Writes `"object": "response"`.
#[serde(tag = "object", rename = "response")]
pub(super) struct ResponseObject<'a> {
    id: &'a str,
    created_at: u64,
    model: &'a str,
    status: &'static str,
    output: Vec<OutputItem<'a>>,
    pub error: Option<Failure<'a>>,
    /// Set when the answer was cut at the token limit.
    incomplete_details: Option<IncompleteDetails>,
    /// `None` while the response is in progress (OpenAI's has no `usage` then).
    #[serde(skip_serializing_if = "Option::is_none")]
    usage: Option<TokenUsage>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enforcement: Option<Verdict<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    warnings: Option<Warnings<'a>>,
    #[serde(flatten)]
    echo: &'a Echo,
}

impl<'a> ResponseObject<'a> {
    /// An object with no output and no verdict yet (a stream's `in_progress` one).
    pub fn new(id: &'a TurnId, echo: &'a Echo, status: &'static str) -> Self {
        ResponseObject {
            id: &id.id,
            created_at: id.created,
            model: &id.model,
            status,
            output: Vec::new(),
            error: None,
            incomplete_details: None,
            usage: (status != "in_progress").then(|| TokenUsage::of(None)),
            enforcement: None,
            warnings: None,
            echo,
        }
    }

    /// The object of an answer: its text as one `message` item (none when it only calls
    /// tools), one `function_call` item per call, `incomplete` when cut at the token limit.
    pub fn answer(id: &'a TurnId, echo: &'a Echo, text: &'a str, outcome: &'a Outcome) -> Self {
        let status = item_status(outcome);
        let calls = &outcome.tool_calls;
        let message = (!text.is_empty() || calls.is_empty())
            .then(|| OutputItem::Message(MessageItem::new(id, text, status)));
        let calls = calls.iter().enumerate().map(|(number, call)| {
            OutputItem::FunctionCall(CallItem::new(id, number, call, &call.arguments, status))
        });
        ResponseObject {
            output: message.into_iter().chain(calls).collect(),
            incomplete_details: (status == "incomplete").then_some(IncompleteDetails {
                reason: "max_output_tokens",
            }),
            usage: Some(TokenUsage::of(outcome.usage)),
            enforcement: Some(Verdict::Checked(Enforcement::of(outcome))),
            ..ResponseObject::new(id, echo, status)
        }
    }

    /// The answer to `turn`, with how it was routed and what its request could not carry.
    pub fn of_turn(turn: &'a Turn, echo: &'a Echo, text: &'a str, outcome: &'a Outcome) -> Self {
        ResponseObject::answer(&turn.id, echo, text, outcome)
            .routed(turn.route.as_ref())
            .warned(&turn.ignored)
    }

    /// With how the request was routed (nothing when it was not).
    pub fn routed(mut self, route: Option<&'a Value>) -> Self {
        if let Some(Verdict::Checked(enforcement)) = self.enforcement.take() {
            self.enforcement = Some(Verdict::Checked(enforcement.routed(route)));
        }
        self
    }

    /// With the `warnings` naming the request fields left out (none when nothing was).
    pub fn warned(self, ignored: &'a [String]) -> Self {
        ResponseObject {
            warnings: Warnings::of(ignored),
            ..self
        }
    }

    /// With the `reasoning` item a stream showed, at the output index it was shown at.
    pub fn with_reasoning(mut self, shown: Option<(usize, ReasoningItem<'a>)>) -> Self {
        if let Some((index, item)) = shown {
            let index = index.min(self.output.len());
            self.output.insert(index, OutputItem::Reasoning(item));
        }
        self
    }

    /// Whether the answer was cut at the token limit.
    pub fn is_cut(&self) -> bool {
        self.incomplete_details.is_some()
    }
}

/// The status of an answer and its items: `incomplete` when the answer was cut at the token
/// limit, as OpenAI's are at `max_output_tokens`.
pub(super) fn item_status(outcome: &Outcome) -> &'static str {
    if cut_at_token_limit(outcome) {
        "incomplete"
    } else {
        "completed"
    }
}

/// The `enforcement` object: the verdict of an answer, or the one a refusal carries.
// One per response, serialized at once: boxing the verdict would add an allocation and save
// nothing. (With the local runner llguidance turns on serde_json's `preserve_order`, whose
// maps are larger, and the variant crosses clippy's size threshold.)
#[allow(clippy::large_enum_variant)]
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum Verdict<'a> {
    Checked(Enforcement<'a>),
    Refused(&'a Value),
}

/// A failed response's `error`.
#[derive(Serialize)]
pub(super) struct Failure<'a> {
    pub code: Cow<'static, str>,
    pub message: &'a str,
}

/// Why a response is `incomplete`.
#[derive(Serialize)]
struct IncompleteDetails {
    reason: &'static str,
}

/// An output item; each kind writes its own `type`.
#[derive(Serialize)]
#[serde(untagged)]
pub(super) enum OutputItem<'a> {
    Message(MessageItem<'a>),
    FunctionCall(CallItem<'a>),
    Reasoning(ReasoningItem<'a>),
}

/// The id of an output item: `prefix` (`msg_`, `fc_`, `rs_`), the response id's suffix, and
/// for a call, `_` and its number.
pub(super) fn item_id(id: &TurnId, prefix: &str, number: Option<usize>) -> String {
    let suffix = id.id.strip_prefix(Responses::ID_PREFIX).unwrap_or(&id.id);
    match number {
        Some(number) => format!("{prefix}{suffix}_{number}"),
        None => format!("{prefix}{suffix}"),
    }
}

/// A list of the one element `item` holds, or an empty list.
fn as_list<T: Serialize, S: Serializer>(item: &Option<T>, to: S) -> Result<S::Ok, S::Error> {
    to.collect_seq(item)
}

/// A `message` item; one still `in_progress` (just added to a stream) has no content yet.
#[derive(Serialize)]
#[serde(tag = "type", rename = "message")]
pub(super) struct MessageItem<'a> {
    id: String,
    status: &'a str,
    role: &'static str,
    #[serde(serialize_with = "as_list")]
    content: Option<OutputText<'a>>,
}

impl<'a> MessageItem<'a> {
    pub fn new(id: &TurnId, text: &'a str, status: &'a str) -> Self {
        MessageItem {
            id: item_id(id, "msg_", None),
            status,
            role: "assistant",
            content: (status != "in_progress").then_some(OutputText::new(text)),
        }
    }
}

/// An `output_text` content part.
#[derive(Serialize)]
#[serde(tag = "type", rename = "output_text")]
pub(super) struct OutputText<'a> {
    text: &'a str,
    /// This proxy adds none.
    annotations: [(); 0],
}

impl<'a> OutputText<'a> {
    pub fn new(text: &'a str) -> Self {
        OutputText {
            text,
            annotations: [],
        }
    }
}

/// A `reasoning` item: what a stream showed of the drafts, as its one summary part (none yet
/// while it is just added).
#[derive(Serialize)]
#[serde(tag = "type", rename = "reasoning")]
pub(super) struct ReasoningItem<'a> {
    id: String,
    #[serde(serialize_with = "as_list")]
    summary: Option<SummaryText<'a>>,
}

impl<'a> ReasoningItem<'a> {
    pub fn new(id: &TurnId, text: Option<&'a str>) -> Self {
        ReasoningItem {
            id: item_id(id, "rs_", None),
            summary: text.map(SummaryText::new),
        }
    }
}

/// A `summary_text` part of a reasoning item.
#[derive(Serialize)]
#[serde(tag = "type", rename = "summary_text")]
pub(super) struct SummaryText<'a> {
    text: &'a str,
}

impl<'a> SummaryText<'a> {
    pub fn new(text: &'a str) -> Self {
        SummaryText { text }
    }
}

/// A `function_call` item.
#[derive(Serialize)]
#[serde(tag = "type", rename = "function_call")]
pub(super) struct CallItem<'a> {
    id: String,
    call_id: &'a str,
    name: &'a str,
    arguments: &'a str,
    status: &'a str,
}

impl<'a> CallItem<'a> {
    pub fn new(
        id: &TurnId,
        number: usize,
        call: &'a ToolCall,
        arguments: &'a str,
        status: &'a str,
    ) -> Self {
        CallItem {
            id: item_id(id, "fc_", Some(number)),
            call_id: &call.id,
            name: &call.name,
            arguments,
            status,
        }
    }
}

/// A response's `usage` (zeros when the runner reported none); the token details this proxy
/// cannot know are zeros.
#[derive(Serialize)]
struct TokenUsage {
    input_tokens: u64,
    input_tokens_details: CachedTokens,
    output_tokens: u64,
    output_tokens_details: ReasoningTokens,
    total_tokens: u64,
}

#[derive(Serialize)]
struct CachedTokens {
    cached_tokens: u64,
}

#[derive(Serialize)]
struct ReasoningTokens {
    reasoning_tokens: u64,
}

impl TokenUsage {
    fn of(usage: Option<Usage>) -> Self {
        let u = usage.unwrap_or_default();
        TokenUsage {
            input_tokens: u.input_tokens,
            input_tokens_details: CachedTokens { cached_tokens: 0 },
            output_tokens: u.output_tokens,
            output_tokens_details: ReasoningTokens {
                reasoning_tokens: 0,
            },
            total_tokens: u.total(),
        }
    }
}
