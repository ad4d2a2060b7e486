//! The input stage: checks of the request before the first model call ([`InputStage`]), what
//! happens when they fail ([`OnInputFailure`]), the reformulation hook ([`Reformulator`]) and
//! the record of it all in the outcome ([`InputCheck`]).
//!
//! Input validators are ordinary [`Validator`]s. They validate the question (the last user
//! message) and read the rest of the request from their context, under [`keys`]: the system
//! prompt and the retrieved context, found where [`ContextSource`] says.

use crate::context::keys;
use crate::time::micros;
use crate::validator::{push_leaves, validate_leaves, Leaf, Verdict};
use crate::{Ask, Context, FailMode, Issue, Message, Reply, Request, Role, Runner, Validator};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

/// Where a request carries its retrieved context (the documents a RAG pipeline put in).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ContextSource {
    /// A fact of the request context, e.g. `retrieved_context` sent in the body's `enforce`
    /// object: a string, or a list of strings (one per chunk).
    Fact(String),
    /// A JSON pointer into the request's parameters (for the proxy: the body without
    /// `model`, `messages` and `stream`), e.g. `/metadata/context`.
    Pointer(String),
    /// The text between two delimiters, looked for in the system messages, then in the last
    /// user message (where Open WebUI's RAG template may put it).
    Section {
        /// The opening delimiter, e.g. `<context>`.
        start: String,
        /// The closing delimiter, e.g. `</context>`.
        end: String,
    },
}

/// What the input stage does when an input validator reports an error.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum OnInputFailure {
    /// No model call: the outcome is `aborted` with the stop reason `input_rejected`.
    #[default]
    Reject,
    /// Append this note to the last user message, then generate.
    Hint(String),
    /// Ask the [`Reformulator`] once for a new question and/or context, then generate
    /// unconditionally (with the original request when the hook fails).
    Reformulate,
}

/// A new question and/or retrieved context, from a [`Reformulator`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reformulation {
    /// The question to ask instead of the last user message.
    #[serde(default)]
    pub question: Option<String>,
    /// The retrieved context to use instead: a string, or a list of strings.
    #[serde(default)]
    pub context: Option<Value>,
}

/// The hook that reformulates a request whose input check failed: an LLM with a prompt
/// template ([`RunnerReformulator`]), a command, or the caller's retrieval service.
#[async_trait::async_trait]
pub trait Reformulator: Send + Sync {
    /// What the hook is, for the audit (`runner`, `command`, `http`).
    fn kind(&self) -> &str;

    /// A new question and/or context for the request described by `context` (which holds the
    /// [`keys`] and the request's facts), given the input check's `issues`.
    async fn reformulate(
        &self,
        context: &Context,
        issues: &[Issue],
    ) -> Result<Reformulation, String>;
}

impl fmt::Debug for dyn Reformulator + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reformulator({})", self.kind())
    }
}

/// A [`Reformulator`] that asks a model for a new question with a prompt template:
/// `{{question}}`, `{{context}}` (the retrieved context), `{{issues}}` (the input check's
/// messages, one per line) and the request's facts. Its answer, trimmed, is the new question.
pub struct RunnerReformulator {
    runner: Arc<dyn Runner>,
    prompt: String,
}

impl fmt::Debug for RunnerReformulator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunnerReformulator")
            .field("prompt", &self.prompt)
            .finish_non_exhaustive()
    }
}

impl RunnerReformulator {
    /// Most characters a reformulated question may have: a longer answer is not a question.
    pub const MAX_QUESTION_CHARS: usize = 4000;

    /// Asks `runner` with `prompt`.
    pub fn new(runner: Arc<dyn Runner>, prompt: impl Into<String>) -> Self {
        RunnerReformulator {
            runner,
            prompt: prompt.into(),
        }
    }
}

/// One retrieved chunk as text: a string as it is; an object's `text`, `content` or
/// `page_content` (the names RAG frameworks give it); anything else as JSON.
pub fn chunk_text(chunk: &Value) -> String {
    match chunk {
        Value::String(s) => s.clone(),
        Value::Object(map) => ["text", "content", "page_content"]
            .iter()
            .find_map(|k| map.get(*k).and_then(Value::as_str))
            .map_or_else(|| chunk.to_string(), str::to_string),
        other => other.to_string(),
    }
}

/// The retrieved context as text: a list's chunks ([`chunk_text`]) joined by blank lines.
pub fn retrieved_text(value: &Value) -> String {
    match value {
        Value::Array(items) => items
            .iter()
            .map(chunk_text)
            .collect::<Vec<_>>()
            .join("\n\n"),
        other => chunk_text(other),
    }
}

#[async_trait::async_trait]
impl Reformulator for RunnerReformulator {
    fn kind(&self) -> &str {
        "runner"
    }

    async fn reformulate(
        &self,
        context: &Context,
        issues: &[Issue],
    ) -> Result<Reformulation, String> {
        let mut view = context.clone();
        view.insert(
            "question",
            context.get_str(keys::QUESTION).unwrap_or_default(),
        );
        view.insert(
            "context",
            context
                .get(keys::RETRIEVED_CONTEXT)
                .map(retrieved_text)
                .unwrap_or_default(),
        );
        let messages: Vec<&str> = issues.iter().map(|i| i.message.as_str()).collect();
        view.insert("issues", messages.join("\n"));
        let request = Request::prompt(view.render(&self.prompt));
        let reply = self
            .runner
            .ask(Ask::new(&request))
            .reply()
            .await
            .map_err(|e| e.to_string())?;
        let question = reply.text.trim();
        if question.is_empty() {
            return Err("the model answered with an empty question".to_string());
        }
        if question.chars().count() > Self::MAX_QUESTION_CHARS {
            return Err(format!(
                "the model's answer is longer than {} characters, not a question",
                Self::MAX_QUESTION_CHARS
            ));
        }
        Ok(Reformulation {
            question: Some(question.to_string()),
            context: None,
        })
    }
}

/// The checks a request goes through before the first model call. See the
/// [module docs](self).
#[derive(Debug)]
pub struct InputStage {
    validators: Vec<Box<dyn Validator>>,
    on_failure: OnInputFailure,
    source: Option<ContextSource>,
    reformulator: Option<Arc<dyn Reformulator>>,
}

impl InputStage {
    /// The input validators the stage runs one by one: groups opened up into their members.
    pub(crate) fn leaves(&self) -> Vec<Leaf<'_>> {
        let mut leaves = Vec::with_capacity(self.validators.len());
        for validator in &self.validators {
            push_leaves(validator.as_ref(), None, &mut leaves);
        }
        leaves
    }

    /// A stage running `validators` on the request, rejecting it when one reports an error.
    pub fn new(validators: Vec<Box<dyn Validator>>) -> Self {
        InputStage {
            validators,
            on_failure: OnInputFailure::default(),
            source: None,
            reformulator: None,
        }
    }

    /// What happens when an input validator reports an error.
    pub fn on_failure(mut self, on_failure: OnInputFailure) -> Self {
        self.on_failure = on_failure;
        self
    }

    /// Where the request carries its retrieved context.
    pub fn context_source(mut self, source: ContextSource) -> Self {
        self.source = Some(source);
        self
    }

    /// The hook [`OnInputFailure::Reformulate`] calls.
    pub fn reformulator(mut self, reformulator: Arc<dyn Reformulator>) -> Self {
        self.reformulator = Some(reformulator);
        self
    }

    /// The input validators.
    pub fn validators(&self) -> &[Box<dyn Validator>] {
        &self.validators
    }

    /// Where the retrieved context is read from.
    pub fn source(&self) -> Option<&ContextSource> {
        self.source.as_ref()
    }

    /// Runs the stage: validates the request and, on errors, rejects, hints or reformulates.
    pub(crate) async fn run(
        &self,
        request: &Request,
        context: &Context,
        default: FailMode,
    ) -> Staged {
        let started = Instant::now();
        let leaves = self.leaves();
        let view = request_context(request, context, self.source.as_ref());
        let question = Reply::text(view.get_str(keys::QUESTION).unwrap_or_default());
        let found = match validate_leaves(&leaves, &question, &view, default, None).await {
            Verdict::Found(found) => found,
            Verdict::Unavailable(unavailable) => {
                // No verdict is no pass: the record says the request was not cleared.
                let mut record = InputCheck::new(InputAction::None, Vec::new(), started);
                record.passed = false;
                return Staged::Unavailable {
                    record,
                    unavailable,
                };
            }
        };
        let issues = found.issues;
        if !issues.iter().any(Issue::is_error) {
            return Staged::Proceed {
                request: None,
                context: view,
                record: InputCheck::new(InputAction::None, issues, started),
            };
        }
        match &self.on_failure {
            OnInputFailure::Reject => Staged::Rejected {
                record: InputCheck::new(InputAction::Rejected, issues, started),
            },
            OnInputFailure::Hint(note) => {
                let mut hinted = request.clone();
                append_to_question(&mut hinted, note);
                Staged::Proceed {
                    request: Some(hinted),
                    context: view,
                    record: InputCheck::new(InputAction::Hinted, issues, started),
                }
            }
            OnInputFailure::Reformulate => {
                self.reformulate(request, context, view, issues, started)
                    .await
            }
        }
    }

    async fn reformulate(
        &self,
        request: &Request,
        context: &Context,
        view: Context,
        issues: Vec<Issue>,
        started: Instant,
    ) -> Staged {
        let asked = Instant::now();
        let (kind, result) = match &self.reformulator {
            Some(hook) => (
                hook.kind().to_string(),
                hook.reformulate(&view, &issues).await,
            ),
            None => (
                "none".to_string(),
                Err("no reformulation hook is configured".to_string()),
            ),
        };
        let hook_us = micros(asked.elapsed());
        let result = result.and_then(|r| {
            if r.question.as_deref().is_some_and(|q| !q.trim().is_empty()) || r.context.is_some() {
                Ok(r)
            } else {
                Err("the hook returned neither a question nor a context".to_string())
            }
        });
        match result {
            Ok(reformulation) => {
                let rewritten = apply_reformulation(request, self.source.as_ref(), &reformulation);
                let view = request_context(&rewritten, context, self.source.as_ref());
                let view = match (&self.source, &reformulation.context) {
                    // A fact source: the validators of the answer see the new context too.
                    (Some(ContextSource::Fact(_) | ContextSource::Pointer(_)), Some(new)) => {
                        let mut view = view;
                        view.insert(keys::RETRIEVED_CONTEXT, new.clone());
                        view
                    }
                    _ => view,
                };
                let mut record = InputCheck::new(InputAction::Reformulated, issues, started);
                record.reformulation = Some(ReformulationRecord {
                    hook: kind,
                    question: reformulation.question.clone(),
                    context_changed: reformulation.context.is_some(),
                    error: None,
                    hook_us,
                });
                Staged::Proceed {
                    request: Some(rewritten),
                    context: view,
                    record,
                }
            }
            Err(error) => {
                let mut record = InputCheck::new(InputAction::ReformulationFailed, issues, started);
                record.reformulation = Some(ReformulationRecord {
                    hook: kind,
                    question: None,
                    context_changed: false,
                    error: Some(error),
                    hook_us,
                });
                Staged::Proceed {
                    request: None,
                    context: view,
                    record,
                }
            }
        }
    }
}

/// What the input stage decided.
pub(crate) enum Staged {
    /// Generate, with a rewritten request when there is one, and the context (with the
    /// request [`keys`]) the validators of the answer get.
    Proceed {
        request: Option<Request>,
        context: Context,
        record: InputCheck,
    },
    /// No model call.
    Rejected { record: InputCheck },
    /// A fail-closed input validator gave no verdict.
    Unavailable {
        record: InputCheck,
        unavailable: crate::validator::UnavailableValidator,
    },
}

/// What the input stage did, as the outcome and the audit record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum InputAction {
    /// Nothing: the request passed (or a fail-closed validator gave no verdict).
    None,
    /// The request was rejected without a model call.
    Rejected,
    /// The hint was appended to the question.
    Hinted,
    /// The hook gave a new question and/or context.
    Reformulated,
    /// The hook failed; the original request was generated.
    ReformulationFailed,
}

impl InputAction {
    /// The action as the audit spells it (`none`, `rejected`, `hinted`, `reformulated`,
    /// `reformulation_failed`).
    pub fn as_str(self) -> &'static str {
        match self {
            InputAction::None => "none",
            InputAction::Rejected => "rejected",
            InputAction::Hinted => "hinted",
            InputAction::Reformulated => "reformulated",
            InputAction::ReformulationFailed => "reformulation_failed",
        }
    }
}

/// The input stage's record in the [`Outcome`](crate::Outcome) (`input` in the audit).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InputCheck {
    /// `true` when no input validator reported an error.
    pub passed: bool,
    /// What the stage did about it.
    pub action: InputAction,
    /// What the input validators reported (errors and warnings).
    pub issues: Vec<Issue>,
    /// The reformulation, when one was asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reformulation: Option<ReformulationRecord>,
    /// Time of the whole stage (validators and hook), in microseconds.
    pub us: u64,
}

impl InputCheck {
    fn new(action: InputAction, issues: Vec<Issue>, started: Instant) -> Self {
        InputCheck {
            passed: !issues.iter().any(Issue::is_error) && action == InputAction::None,
            action,
            issues,
            reformulation: None,
            us: micros(started.elapsed()),
        }
    }
}

/// One call of the reformulation hook.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReformulationRecord {
    /// The hook's kind (`runner`, `command`, `http`).
    pub hook: String,
    /// The new question, if the hook gave one.
    #[serde(default)]
    pub question: Option<String>,
    /// `true` when the hook gave a new retrieved context.
    #[serde(default)]
    pub context_changed: bool,
    /// Why the hook failed (then the original request was generated).
    #[serde(default)]
    pub error: Option<String>,
    /// Time the hook took, in microseconds.
    pub hook_us: u64,
}

/// `context` plus the request under the [`keys`]: the question, the system prompt and the
/// retrieved context (where `source` finds it; a `RETRIEVED_CONTEXT` fact the caller set
/// stays when there is no source).
pub(crate) fn request_context(
    request: &Request,
    context: &Context,
    source: Option<&ContextSource>,
) -> Context {
    let mut view = context.clone();
    let (question, section) = split_question(request, source);
    view.insert(keys::QUESTION, question);
    view.insert(keys::SYSTEM, system_prompt(request));
    view.insert(keys::HISTORY, history(request));
    let retrieved = match source {
        Some(ContextSource::Fact(key)) => context.get(key).cloned(),
        Some(ContextSource::Pointer(pointer)) => params_pointer(request, pointer).cloned(),
        Some(ContextSource::Section { .. }) => section.map(Value::String),
        None => None,
    };
    if let Some(retrieved) = retrieved {
        view.insert(keys::RETRIEVED_CONTEXT, retrieved);
    }
    view
}

/// Every system message, joined by a blank line.
fn system_prompt(request: &Request) -> String {
    request
        .messages
        .iter()
        .filter(|m| m.role == Role::System)
        .map(|m| m.content.as_str())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// The turns before the last user message, system messages left out.
fn history(request: &Request) -> Value {
    let end = last_user_index(request).unwrap_or(request.messages.len());
    Value::Array(
        request.messages[..end]
            .iter()
            .filter(|m| m.role != Role::System)
            .map(|m| serde_json::json!({"role": m.role, "content": m.content}))
            .collect(),
    )
}

/// The value at `pointer` in the request's parameters.
fn params_pointer<'r>(request: &'r Request, pointer: &str) -> Option<&'r Value> {
    let rest = pointer.strip_prefix('/')?;
    let (first, tail) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let first = first.replace("~1", "/").replace("~0", "~");
    request.params.get(&first)?.pointer(tail)
}

/// `(before, inside, after)` of the first `start`…`end` section of `text`.
fn find_section<'t>(text: &'t str, start: &str, end: &str) -> Option<(&'t str, &'t str, &'t str)> {
    if start.is_empty() || end.is_empty() {
        return None;
    }
    let open = text.find(start)?;
    let inner_start = open + start.len();
    let close = inner_start + text[inner_start..].find(end)?;
    Some((
        &text[..open],
        &text[inner_start..close],
        &text[close + end.len()..],
    ))
}

fn last_user_index(request: &Request) -> Option<usize> {
    request.messages.iter().rposition(|m| m.role == Role::User)
}

/// The question (the last user message without a context section it holds) and the
/// section's text, for a `Section` source.
fn split_question(request: &Request, source: Option<&ContextSource>) -> (String, Option<String>) {
    let user = last_user_index(request).map(|i| request.messages[i].content.as_str());
    let Some(ContextSource::Section { start, end }) = source else {
        return (user.unwrap_or_default().to_string(), None);
    };
    for message in request.messages.iter().filter(|m| m.role == Role::System) {
        if let Some((_, inside, _)) = find_section(&message.content, start, end) {
            return (
                user.unwrap_or_default().to_string(),
                Some(inside.trim().to_string()),
            );
        }
    }
    match user.and_then(|text| find_section(text, start, end)) {
        Some((before, inside, after)) => (
            format!("{}\n{}", before.trim(), after.trim())
                .trim()
                .to_string(),
            Some(inside.trim().to_string()),
        ),
        None => (user.unwrap_or_default().to_string(), None),
    }
}

/// Appends `note` to the last user message (a new user message when there is none), so that
/// every runner sends it, session runners included.
fn append_to_question(request: &mut Request, note: &str) {
    match last_user_index(request) {
        Some(i) => {
            let message = &mut request.messages[i];
            message.content = format!("{}\n\n{note}", message.content.trim_end());
        }
        None => request.messages.push(Message::user(note)),
    }
}

/// The request with the reformulated question and context put where the originals were.
fn apply_reformulation(
    request: &Request,
    source: Option<&ContextSource>,
    reformulation: &Reformulation,
) -> Request {
    let mut rewritten = request.clone();
    let section = match source {
        Some(ContextSource::Section { start, end }) => Some((start.as_str(), end.as_str())),
        _ => None,
    };
    let new_context = reformulation.context.as_ref().map(retrieved_text);
    let mut context_placed = false;
    // The context section in a system message.
    if let (Some((start, end)), Some(new)) = (section, &new_context) {
        for message in rewritten
            .messages
            .iter_mut()
            .filter(|m| m.role == Role::System)
        {
            if let Some((before, _, after)) = find_section(&message.content, start, end) {
                message.content = format!("{before}{start}\n{new}\n{end}{after}");
                context_placed = true;
                break;
            }
        }
    }
    if let Some(i) = last_user_index(&rewritten) {
        let message = &mut rewritten.messages[i];
        let in_user = section.and_then(|(start, end)| find_section(&message.content, start, end));
        match in_user {
            // The section sits in the question's message: keep it (with the new context), and
            // put the new question where the old one was.
            Some((before, inside, after)) => {
                let inside = match (&new_context, context_placed) {
                    (Some(new), false) => {
                        context_placed = true;
                        format!("\n{new}\n")
                    }
                    _ => inside.to_string(),
                };
                let (start, end) = section.unwrap_or_default();
                message.content = match &reformulation.question {
                    Some(q) => format!("{start}{inside}{end}\n{}", q.trim()),
                    None => format!("{before}{start}{inside}{end}{after}"),
                };
            }
            None => {
                if let Some(q) = &reformulation.question {
                    message.content = q.trim().to_string();
                }
            }
        }
    } else if let Some(q) = &reformulation.question {
        rewritten.messages.push(Message::user(q.trim()));
    }
    // A fact or pointer source, or a section that was not found: the model gets the new
    // context as a system message before the question.
    if let (Some(new), false) = (&new_context, context_placed) {
        let at = last_user_index(&rewritten).unwrap_or(rewritten.messages.len());
        rewritten
            .messages
            .insert(at, Message::system(format!("Retrieved context:\n{new}")));
    }
    rewritten
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rag_request() -> Request {
        Request {
            messages: vec![
                Message::system(
                    "Answer from the sources.\n<context>\nold chunk\n</context>\nBe brief.",
                ),
                Message::user("How do I hash?"),
            ],
            ..Request::default()
        }
    }

    fn section() -> ContextSource {
        ContextSource::Section {
            start: "<context>".into(),
            end: "</context>".into(),
        }
    }

    #[test]
    fn the_view_holds_question_system_and_the_section() {
        let view = request_context(
            &rag_request(),
            &Context::new().with("k", 1),
            Some(&section()),
        );
        assert_eq!(view.get_str(keys::QUESTION), Some("How do I hash?"));
        assert_eq!(view.get_str(keys::RETRIEVED_CONTEXT), Some("old chunk"));
        assert!(view
            .get_str(keys::SYSTEM)
            .unwrap()
            .starts_with("Answer from"));
        assert_eq!(view.get("k"), Some(&Value::from(1)));
        assert_eq!(view.get(keys::HISTORY), Some(&serde_json::json!([])));
    }

    #[test]
    fn chunks_are_read_as_rag_frameworks_write_them() {
        let value = serde_json::json!(["a", {"page_content": "b"}, {"text": "c"}, {"id": 4}]);
        assert_eq!(retrieved_text(&value), "a\n\nb\n\nc\n\n{\"id\":4}");
        assert_eq!(retrieved_text(&Value::from("plain")), "plain");
    }

    #[test]
    fn actions_are_spelled_as_serialized() {
        for action in [
            InputAction::None,
            InputAction::Rejected,
            InputAction::Hinted,
            InputAction::Reformulated,
            InputAction::ReformulationFailed,
        ] {
            assert_eq!(serde_json::to_value(action).unwrap(), action.as_str());
        }
    }

    #[test]
    fn the_history_holds_the_turns_before_the_question() {
        let request = Request {
            messages: vec![
                Message::system("s"),
                Message::user("first"),
                Message::assistant("reply"),
                Message::user("now?"),
            ],
            ..Request::default()
        };
        let view = request_context(&request, &Context::new(), None);
        assert_eq!(
            view.get(keys::HISTORY),
            Some(&serde_json::json!([
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "reply"},
            ]))
        );
        assert_eq!(view.get_str(keys::QUESTION), Some("now?"));
    }

    #[test]
    fn a_section_in_the_user_message_is_not_part_of_the_question() {
        let request = Request::prompt("<context>\nchunk A\n</context>\nWhat is A?");
        let view = request_context(&request, &Context::new(), Some(&section()));
        assert_eq!(view.get_str(keys::QUESTION), Some("What is A?"));
        assert_eq!(view.get_str(keys::RETRIEVED_CONTEXT), Some("chunk A"));

        let rewritten = apply_reformulation(
            &request,
            Some(&section()),
            &Reformulation {
                question: Some("What does A mean?".into()),
                context: Some(Value::from(vec!["chunk B", "chunk C"])),
            },
        );
        let view = request_context(&rewritten, &Context::new(), Some(&section()));
        assert_eq!(view.get_str(keys::QUESTION), Some("What does A mean?"));
        assert_eq!(
            view.get_str(keys::RETRIEVED_CONTEXT),
            Some("chunk B\n\nchunk C")
        );
        assert_eq!(rewritten.messages.len(), 1);
    }

    #[test]
    fn a_reformulation_replaces_question_and_system_section() {
        let rewritten = apply_reformulation(
            &rag_request(),
            Some(&section()),
            &Reformulation {
                question: Some("  How do I compute a SHA-256?  ".into()),
                context: Some(Value::from("new chunk")),
            },
        );
        assert_eq!(
            rewritten.messages[0].content,
            "Answer from the sources.\n<context>\nnew chunk\n</context>\nBe brief."
        );
        assert_eq!(rewritten.messages[1].content, "How do I compute a SHA-256?");
    }

    #[test]
    fn a_fact_source_gets_the_new_context_as_a_system_message() {
        let rewritten = apply_reformulation(
            &Request::prompt("q"),
            Some(&ContextSource::Fact("docs".into())),
            &Reformulation {
                question: None,
                context: Some(Value::from("fresh")),
            },
        );
        assert_eq!(rewritten.messages.len(), 2);
        assert_eq!(rewritten.messages[0].role, Role::System);
        assert_eq!(rewritten.messages[0].content, "Retrieved context:\nfresh");
        assert_eq!(rewritten.messages[1].content, "q");
    }

    #[test]
    fn pointers_read_the_parameters() {
        let mut request = Request::prompt("q");
        request.params.insert(
            "metadata".into(),
            serde_json::json!({"context": ["a", "b"], "a/b": 1}),
        );
        assert_eq!(
            params_pointer(&request, "/metadata/context"),
            Some(&serde_json::json!(["a", "b"]))
        );
        assert_eq!(
            params_pointer(&request, "/metadata/a~1b"),
            Some(&Value::from(1))
        );
        assert_eq!(params_pointer(&request, "/missing"), None);
        assert_eq!(params_pointer(&request, "metadata"), None);
    }

    #[test]
    fn a_hint_is_appended_to_the_question() {
        let mut request = rag_request();
        append_to_question(&mut request, "Say so if the sources do not answer.");
        assert_eq!(
            request.messages[1].content,
            "How do I hash?\n\nSay so if the sources do not answer."
        );
    }
}
