//! The `response` object, typed: written straight to bytes, with no `serde_json::Value` tree
//! built on the way (that tree cost the Responses surface a third more work per request than
//! the chat surface). Its keys come in sorted order, as a `Value` writes them, so the bytes are
//! those clients always got; the request fields it echoes ([`ECHOED`](super::request::ECHOED)) are
//! merged in at their place and replace the defaults they name (`tools`, `text`, `store`, ...).

use super::Responses;
use crate::pipeline::{push_digits, Surface, Warnings};
use crate::turn::{Turn, TurnId};
use crate::verdict::{cut_at_token_limit, Enforcement};
use enforce_core::json::{self, ObjectWriter};
use enforce_core::{runner::ToolCall, Outcome, Usage};
use serde::ser::Serializer;
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use std::iter::Peekable;

/// A `response` object: of an answer ([`ResponseObject::answer`]), in progress, or failed.
pub(super) struct ResponseObject<'a> {
    pub id: &'a TurnId,
    /// The request fields echoed, as the client sent them.
    pub echo: &'a Map<String, Value>,
    pub status: &'static str,
    pub output: Output<'a>,
    /// `None` while the response is in progress (OpenAI's has no `usage` then).
    pub usage: Option<TokenUsage>,
    pub enforcement: Option<Verdict<'a>>,
    pub error: Option<Failure<'a>>,
    /// Cut at the token limit: `incomplete_details` says so.
    pub cut: bool,
    pub warnings: Option<Warnings<'a>>,
}

impl<'a> ResponseObject<'a> {
    /// An object with no output and no verdict yet (a stream's `in_progress` one).
    pub fn new(id: &'a TurnId, echo: &'a Map<String, Value>, status: &'static str) -> Self {
        ResponseObject {
            id,
            echo,
            status,
            output: Output {
                id,
                text: None,
                calls: &[],
                status,
                reasoning: None,
            },
            usage: (status != "in_progress").then(|| TokenUsage::of(None)),
            enforcement: None,
            error: None,
            cut: false,
            warnings: None,
        }
    }

    /// The object of an answer: its text as one `message` item (none when it only calls
    /// tools), one `function_call` item per call, `incomplete` when cut at the token limit.
    pub fn answer(
        id: &'a TurnId,
        echo: &'a Map<String, Value>,
        text: Text<'a>,
        outcome: &'a Outcome,
    ) -> Self {
        let cut = cut_at_token_limit(outcome);
        let status = if cut { "incomplete" } else { "completed" };
        let calls = &outcome.tool_calls;
        ResponseObject {
            output: Output {
                id,
                text: (!text.is_empty() || calls.is_empty()).then_some(text),
                calls,
                status,
                reasoning: None,
            },
            usage: Some(TokenUsage::of(outcome.usage)),
            enforcement: Some(Verdict::Checked(Enforcement::of(outcome))),
            cut,
            ..ResponseObject::new(id, echo, status)
        }
    }

    /// The answer to `turn`, with how it was routed and what its request could not carry.
    pub fn of_turn(
        turn: &'a Turn,
        echo: &'a Map<String, Value>,
        text: &'a str,
        outcome: &'a Outcome,
    ) -> Self {
        ResponseObject::answer(&turn.id, echo, Text::Plain(text), outcome)
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
}

/// The `enforcement` object: the verdict of an answer, or the one a refusal carries.
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

impl ResponseObject<'_> {
    /// Appends the object's JSON to `out`. Most of its entries are fixed: written as prepared
    /// text, they cost a copy each instead of a key and a value written through serde.
    pub fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        let mut map = Merged {
            object: ObjectWriter::new(out),
            echo: (!self.echo.is_empty()).then(|| self.echo.iter().peekable()),
        };
        // Keys in sorted order: `Merged` puts the echoed ones between them.
        map.entry(r#""created_at":"#, &self.id.created)?;
        if let Some(enforcement) = &self.enforcement {
            map.entry(r#""enforcement":"#, enforcement)?;
        }
        match &self.error {
            Some(error) => map.entry(r#""error":"#, error)?,
            None => map.fixed(r#""error":null"#)?,
        }
        map.entry(r#""id":"#, &self.id.id)?;
        if self.cut {
            map.fixed(r#""incomplete_details":{"reason":"max_output_tokens"}"#)?;
        } else {
            map.fixed(r#""incomplete_details":null"#)?;
        }
        map.fixed(r#""metadata":{}"#)?;
        map.entry(r#""model":"#, &self.id.model)?;
        map.fixed(r#""object":"response""#)?;
        map.entry_with(r#""output":"#, |out| self.output.write_json(out))?;
        map.fixed(r#""parallel_tool_calls":true"#)?;
        map.entry(r#""status":"#, self.status)?;
        map.fixed(r#""store":true"#)?;
        map.fixed(r#""text":{"format":{"type":"text"}}"#)?;
        map.fixed(r#""tool_choice":"auto""#)?;
        map.fixed(r#""tools":[]"#)?;
        if let Some(usage) = &self.usage {
            map.entry_with(r#""usage":"#, |out| usage.write_json(out))?;
        }
        if let Some(warnings) = &self.warnings {
            map.entry(r#""warnings":"#, warnings)?;
        }
        map.end()
    }
}

/// As [`ResponseObject::write_json`] writes it (for the few places that serialize it inside
/// another value; the answer and the stream write it straight).
impl Serialize for ResponseObject<'_> {
    fn serialize<S: Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        crate::pipeline::serialize_written(to, |out| self.write_json(out))
    }
}

/// The key of prepared JSON text that starts with it (`"key":value` or `"key":`), unquoted:
/// the prepared keys here are plain names, nothing escaped in them.
fn key_of(prepared: &str) -> &str {
    let quoted = prepared.strip_prefix('"').unwrap_or(prepared);
    quoted.split_once("\":").map_or(quoted, |(key, _)| key)
}

/// An object written in sorted key order from fixed entries (given in sorted order) and the
/// echoed fields (a `Map`, which iterates sorted): an echoed field replaces the fixed entry
/// of its name.
struct Merged<'a, 'o> {
    object: ObjectWriter<'o>,
    /// `None` when nothing is echoed (most requests): no lookups then.
    echo: Option<Peekable<serde_json::map::Iter<'a>>>,
}

impl Merged<'_, '_> {
    /// Writes the echoed fields that sort before `key`, and `key`'s own if it was echoed:
    /// whether it was.
    fn echoed(&mut self, key: &str) -> Result<bool, json::Error> {
        let Some(echo) = &mut self.echo else {
            return Ok(false);
        };
        while let Some((k, v)) = echo.next_if(|(k, _)| k.as_str() < key) {
            self.object.entry(k, v)?;
        }
        match echo.next_if(|(k, _)| k.as_str() == key) {
            Some((k, v)) => self.object.entry(k, v).map(|()| true),
            None => Ok(false),
        }
    }

    /// An entry of `value` under `key`, prepared as JSON text (`"key":`); like every key here,
    /// its name is what an echoed field of the same name replaces.
    fn entry<V: Serialize + ?Sized>(&mut self, key: &str, value: &V) -> Result<(), json::Error> {
        self.entry_with(key, |out| json::write(out, value))
    }

    /// An entry under `key`, prepared as JSON text (`"key":`), whose value `write` puts down.
    fn entry_with(
        &mut self,
        key: &str,
        write: impl FnOnce(&mut Vec<u8>) -> Result<(), json::Error>,
    ) -> Result<(), json::Error> {
        if self.echo.is_some() && self.echoed(key_of(key))? {
            return Ok(());
        }
        write(self.object.prepared_key(key))
    }

    /// An entry whose default is `prepared`, its `"key":value` text.
    fn fixed(&mut self, prepared: &str) -> Result<(), json::Error> {
        if self.echo.is_some() && self.echoed(key_of(prepared))? {
            return Ok(());
        }
        self.object.prepared(prepared);
        Ok(())
    }

    fn end(mut self) -> Result<(), json::Error> {
        for (k, v) in self.echo.into_iter().flatten() {
            self.object.entry(k, v)?;
        }
        self.object.end();
        Ok(())
    }
}

/// The output items: the answer's `message` (when it has one), its `function_call`s, and the
/// `reasoning` item a stream showed, at the output index it was shown at.
pub(super) struct Output<'a> {
    pub id: &'a TurnId,
    /// The text of the `message` item; `None`: no message item.
    pub text: Option<Text<'a>>,
    pub calls: &'a [ToolCall],
    /// The items' status.
    pub status: &'static str,
    pub reasoning: Option<(usize, ReasoningItem<'a>)>,
}

impl Output<'_> {
    /// Appends the items' JSON array to `out`.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        let items = usize::from(self.text.is_some()) + self.calls.len();
        let reasoning = self
            .reasoning
            .as_ref()
            .map(|(index, item)| ((*index).min(items), item));
        let mut first = true;
        let mut element = |out: &mut Vec<u8>| {
            if !std::mem::take(&mut first) {
                out.push(b',');
            }
        };
        out.push(b'[');
        for position in 0..=items {
            if let Some((_, item)) = reasoning.filter(|(index, _)| *index == position) {
                element(out);
                json::write(out, item)?;
            }
            if position == items {
                break;
            }
            element(out);
            match (
                self.text,
                position.checked_sub(usize::from(self.text.is_some())),
            ) {
                (Some(text), None) => {
                    MessageItem::new(self.id, Some(text), self.status).write_json(out)?
                }
                (_, Some(number)) => {
                    let call = &self.calls[number];
                    json::write(
                        out,
                        &CallItem::new(self.id, number, call, &call.arguments, self.status),
                    )?
                }
                (None, None) => {}
            }
        }
        out.push(b']');
        Ok(())
    }
}

/// The id of an output item: its prefix (`msg_`, `fc_`, `rs_`) and the response id's suffix,
/// and for a call, its number.
#[derive(Clone, Copy)]
pub(super) struct ItemId<'a> {
    pub prefix: &'static str,
    pub id: &'a TurnId,
    pub number: Option<usize>,
}

impl ItemId<'_> {
    /// The id as text: the prefix, the response id's suffix, and `_` and the call's number.
    fn text(&self) -> String {
        let id = &self.id.id;
        let suffix = id.strip_prefix(Responses::ID_PREFIX).unwrap_or(id);
        let mut text = String::with_capacity(self.prefix.len() + suffix.len() + 8);
        text.push_str(self.prefix);
        text.push_str(suffix);
        if let Some(number) = self.number {
            text.push('_');
            push_digits::<10>(&mut text, number as u64, 1);
        }
        text
    }

    /// The id as a JSON string literal, quotes included: made once for all the events of a
    /// stream that name the item.
    pub fn literal(&self) -> String {
        Text::escape(&self.text())
    }
}

impl Serialize for ItemId<'_> {
    fn serialize<S: Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        // Put together by hand, not by `collect_str`: the formatting machinery cost a
        // stream's events more than the rest of their ids' writing.
        to.serialize_str(&self.text())
    }
}

/// An answer's text as an item writes it: as it is, or already escaped as a JSON string (a
/// stream writes its text in four events and the final response: escaped once, copied five
/// times).
#[derive(Clone, Copy)]
pub(super) enum Text<'a> {
    Plain(&'a str),
    /// A JSON string literal, quotes included ([`Text::escape`]).
    Json(&'a str),
}

impl Text<'_> {
    /// `text` as a JSON string literal, for [`Text::Json`].
    pub fn escape(text: &str) -> String {
        let mut literal = Vec::with_capacity(text.len() + text.len() / 8 + 2);
        // A string into a Vec: cannot fail; the bytes are the text's, escaped: UTF-8.
        let _ = json::write(&mut literal, text);
        String::from_utf8(literal).unwrap_or_else(|_| String::from("\"\""))
    }

    fn is_empty(&self) -> bool {
        match self {
            Text::Plain(text) => text.is_empty(),
            Text::Json(literal) => *literal == "\"\"",
        }
    }
}

impl Serialize for Text<'_> {
    fn serialize<S: Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        match self {
            Text::Plain(text) => to.serialize_str(text),
            Text::Json(literal) => json::Raw(literal).serialize(to),
        }
    }
}

/// A `message` item; one still `in_progress` (just added to a stream) has no content yet.
pub(super) struct MessageItem<'a> {
    content: Option<OutputText<'a>>,
    id: ItemId<'a>,
    status: &'a str,
}

impl<'a> MessageItem<'a> {
    pub fn new(id: &'a TurnId, text: Option<Text<'a>>, status: &'a str) -> Self {
        MessageItem {
            content: text
                .filter(|_| status != "in_progress")
                .map(OutputText::new),
            id: ItemId {
                prefix: "msg_",
                id,
                number: None,
            },
            status,
        }
    }
}

impl WriteJson for MessageItem<'_> {
    /// Keys sorted as serde writes a struct's fields, the fixed ones as prepared text.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        let mut item = ObjectWriter::new(out);
        match &self.content {
            Some(part) => {
                let out = item.prepared_key(r#""content":"#);
                out.push(b'[');
                part.write_json(out)?;
                out.push(b']');
            }
            None => item.prepared(r#""content":[]"#),
        }
        json::write(item.prepared_key(r#""id":"#), &self.id)?;
        item.prepared(r#""role":"assistant""#);
        json::write(item.prepared_key(r#""status":"#), self.status)?;
        item.prepared(r#""type":"message""#);
        item.end();
        Ok(())
    }
}

/// An `output_text` content part.
pub(super) struct OutputText<'a> {
    text: Text<'a>,
}

impl<'a> OutputText<'a> {
    pub fn new(text: Text<'a>) -> Self {
        OutputText { text }
    }
}

impl WriteJson for OutputText<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        let mut part = ObjectWriter::new(out);
        part.prepared(r#""annotations":[]"#);
        json::write(part.prepared_key(r#""text":"#), &self.text)?;
        part.prepared(r#""type":"output_text""#);
        part.end();
        Ok(())
    }
}

/// A part of a response written straight to bytes: an output item, a content part.
pub(super) trait WriteJson {
    /// Appends the part's JSON to `out` (our parts hold strings and numbers: it does not
    /// fail).
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error>;
}

// The parts written less often (drafts, tool calls) go through serde.

impl WriteJson for ReasoningItem<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        json::write(out, self)
    }
}

impl WriteJson for SummaryText<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        json::write(out, self)
    }
}

impl WriteJson for CallItem<'_> {
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        json::write(out, self)
    }
}

fn as_list<T: Serialize, S: Serializer>(item: &Option<T>, to: S) -> Result<S::Ok, S::Error> {
    to.collect_seq(item)
}

/// A `reasoning` item: what a stream showed of the drafts, as its one summary part (none yet
/// while it is just added).
#[derive(Serialize)]
pub(super) struct ReasoningItem<'a> {
    id: ItemId<'a>,
    #[serde(serialize_with = "as_list")]
    summary: Option<SummaryText<'a>>,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> ReasoningItem<'a> {
    pub fn new(id: &'a TurnId, text: Option<&'a str>) -> Self {
        ReasoningItem {
            id: ItemId {
                prefix: "rs_",
                id,
                number: None,
            },
            summary: text.map(SummaryText::new),
            kind: "reasoning",
        }
    }
}

/// A `summary_text` part of a reasoning item.
#[derive(Serialize)]
pub(super) struct SummaryText<'a> {
    text: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> SummaryText<'a> {
    pub fn new(text: &'a str) -> Self {
        SummaryText {
            text,
            kind: "summary_text",
        }
    }
}

/// A `function_call` item.
#[derive(Serialize)]
pub(super) struct CallItem<'a> {
    arguments: &'a str,
    call_id: &'a str,
    pub id: ItemId<'a>,
    name: &'a str,
    status: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
}

impl<'a> CallItem<'a> {
    pub fn new(
        id: &'a TurnId,
        number: usize,
        call: &'a ToolCall,
        arguments: &'a str,
        status: &'a str,
    ) -> Self {
        CallItem {
            arguments,
            call_id: &call.id,
            id: ItemId {
                prefix: "fc_",
                id,
                number: Some(number),
            },
            name: &call.name,
            status,
            kind: "function_call",
        }
    }
}

/// A response's `usage` (zeros when the runner reported none).
pub(super) struct TokenUsage {
    input_tokens: u64,
    output_tokens: u64,
    total_tokens: u64,
}

impl TokenUsage {
    pub fn of(usage: Option<Usage>) -> Self {
        let u = usage.unwrap_or_default();
        TokenUsage {
            input_tokens: u.input_tokens,
            output_tokens: u.output_tokens,
            total_tokens: u.total(),
        }
    }

    /// Appends the usage's JSON to `out`; the token details this proxy cannot know are zeros.
    fn write_json(&self, out: &mut Vec<u8>) -> Result<(), json::Error> {
        let mut usage = ObjectWriter::new(out);
        json::write(usage.prepared_key(r#""input_tokens":"#), &self.input_tokens)?;
        usage.prepared(r#""input_tokens_details":{"cached_tokens":0}"#);
        json::write(
            usage.prepared_key(r#""output_tokens":"#),
            &self.output_tokens,
        )?;
        usage.prepared(r#""output_tokens_details":{"reasoning_tokens":0}"#);
        json::write(usage.prepared_key(r#""total_tokens":"#), &self.total_tokens)?;
        usage.end();
        Ok(())
    }
}
