//! One enforcement turn: an accepted chat request from the start of its loop to the
//! bookkeeping after it ([`Turn`]), the task running the loop ([`Job`]) and the progress it
//! reports. The JSON handler and the streaming driver both answer through here.

use crate::auth::Granted;
use crate::config::{Model, StreamMode};
use crate::metrics::{Gauge, CLIENT_DISCONNECTED};
use crate::otel::RequestTrace;
use crate::session::StoredResponse;
use crate::shared::GlobalSlot;
use crate::state::App;
use bytes::Bytes;
use enforce_core::{
    Ask, Attempt, Context, Event, Message, Observer, Outcome, Reply, ReplyStream, Request, Role,
    Runner, RunnerError, StopReason, Validator,
};
use futures_util::{FutureExt, StreamExt};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;
use tokio::sync::mpsc;
use tracing::Instrument;

mod conclude;
mod record;

/// Progress of the loop as the stream driver sees it, sent from the [`Observer`](enforce_core::Observer).
#[derive(Debug, Clone)]
pub(crate) enum Progress {
    Asking {
        attempt: u32,
    },
    Retrying {
        attempt: u32,
        max_attempts: u32,
        codes: Vec<String>,
    },
    Repaired {
        validator: String,
    },
    /// More text of an attempt as the model writes it (only for `draft` streams).
    Draft {
        attempt: u32,
        text: String,
    },
    /// An attempt was cut short at these codes.
    Cut {
        attempt: u32,
        codes: Vec<String>,
    },
}

fn error_codes(issues: &[enforce_core::Issue]) -> Vec<String> {
    let mut codes: Vec<String> = issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| i.code.clone())
        .collect();
    codes.dedup();
    codes
}

/// What the stream driver needs to hear of `event`; `drafts`: whether it shows attempts live.
fn progress_of(event: &Event<'_>, drafts: bool) -> Option<Progress> {
    match *event {
        Event::Asking { attempt, .. } => Some(Progress::Asking { attempt }),
        // The model's own reasoning shows like a draft: both are not the answer.
        Event::Streamed { attempt, text } | Event::Reasoning { attempt, text } if drafts => {
            Some(Progress::Draft {
                attempt,
                text: text.to_string(),
            })
        }
        Event::Cut {
            attempt, issues, ..
        } => Some(Progress::Cut {
            attempt,
            codes: error_codes(issues),
        }),
        Event::Retrying {
            attempt,
            max_attempts,
            issues,
            ..
        } => Some(Progress::Retrying {
            attempt,
            max_attempts,
            codes: error_codes(issues),
        }),
        Event::Repaired { validator } => Some(Progress::Repaired {
            validator: validator.to_string(),
        }),
        _ => None,
    }
}

/// Sends the loop's progress to the stream driver and, when traces are on, to the request's
/// spans.
struct TurnObserver {
    /// `None` for an answer that is not streamed: nobody would read it.
    progress: Option<mpsc::UnboundedSender<Progress>>,
    /// The stream driver shows attempts live (see [`progress_of`]).
    drafts: bool,
    /// Keeps the recorded attempts for a deadline or a panic.
    recorded: AttemptsSoFar,
    trace: Option<Arc<RequestTrace>>,
    /// Most attempts the enforcement may make, for the per-attempt log line.
    max_attempts: u32,
}

impl Observer for TurnObserver {
    fn on_event(&self, event: &Event<'_>) {
        if let Some(trace) = &self.trace {
            trace.on_event(event);
        }
        if let Event::Recorded { attempt } = event {
            self.recorded.push(attempt);
            let mut codes: Vec<String> = Vec::new();
            for issue in attempt.issues.iter().filter(|i| i.is_error()) {
                // Escaped: a plugin's code could hold a line break and forge a log line.
                let code = issue.code.escape_debug().to_string();
                if !codes.contains(&code) {
                    codes.push(code);
                }
            }
            if !codes.is_empty() {
                tracing::warn!(
                    attempt = attempt.number,
                    max_attempts = self.max_attempts,
                    "attempt {}/{} failed: {}",
                    attempt.number,
                    self.max_attempts,
                    codes.join(", ")
                );
            }
        }
        if let Some(progress) = &self.progress {
            if let Some(p) = progress_of(event, self.drafts) {
                // The receiver is gone only when the client left; nothing to tell then.
                let _ = progress.send(p);
            }
        }
    }

    /// Only the trace has a span per validator run; without it the loop reads no clock for it.
    fn wants_validator_runs(&self) -> bool {
        self.trace.is_some()
    }

    /// A draft stream shows every attempt as it is written.
    fn wants_deltas(&self) -> bool {
        self.drafts
    }
}

/// Wraps a runner so each attempt gets its own tracing span (and its reply reaches the trace).
struct TracedRunner {
    inner: Arc<dyn Runner>,
    attempt: AtomicU32,
    trace: Option<Arc<RequestTrace>>,
}

impl Runner for TracedRunner {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let attempt = self.attempt.fetch_add(1, Ordering::Relaxed) + 1;
        let kind = if ask.follow_up.is_some() {
            "follow_up"
        } else {
            "ask"
        };
        if !ask.stream {
            let span = tracing::info_span!("attempt", attempt, kind);
            return ReplyStream::whole(async move {
                let result = self.inner.ask(ask).reply().instrument(span.clone()).await;
                span.in_scope(|| replied(self.trace.as_deref(), result.as_ref()));
                result
            });
        }
        let span = tracing::info_span!("attempt", attempt, kind, streamed = true);
        let stream = span.in_scope(|| self.inner.ask(ask));
        logged(span, self.trace.clone(), stream)
    }
}

/// Logs how a streamed attempt ended, in its span, and hands its reply to the trace, as
/// [`replied`] does for a whole one.
fn logged<'a>(
    span: tracing::Span,
    trace: Option<Arc<RequestTrace>>,
    stream: ReplyStream<'a>,
) -> ReplyStream<'a> {
    ReplyStream::new(stream.inspect(move |item| {
        let ended = match item {
            Ok(enforce_core::StreamEvent::Done(reply)) => Ok(reply),
            Err(e) => Err(e),
            Ok(_) => return,
        };
        span.in_scope(|| replied(trace.as_deref(), ended));
    }))
}

/// Logs an attempt's end and puts its usage, cost or failure on its trace span.
fn replied(trace: Option<&RequestTrace>, result: Result<&Reply, &RunnerError>) {
    match result {
        Ok(reply) => tracing::debug!(bytes = reply.text.len(), "runner replied"),
        // Debug-formatted: upstream text may hold newlines, which must not start a new log line.
        Err(e) => tracing::warn!(error = ?e.to_string(), "runner failed"),
    }
    if let Some(trace) = trace {
        trace.on_reply(result);
    }
}

/// The attempts the loop recorded so far ([`Event::Recorded`]), kept outside its task so
/// that a deadline or a panic can still audit them.
#[derive(Clone, Default)]
pub(crate) struct AttemptsSoFar(Arc<Mutex<Vec<Attempt>>>);

impl AttemptsSoFar {
    fn push(&self, attempt: &Attempt) {
        self.0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(attempt.clone());
    }

    fn take(&self) -> Vec<Attempt> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The enforcement loop of one request, polled by whoever waits for it: the JSON handler or
/// the stream's first task, and the stream's driver after that. Not a task of its own: a
/// spawned task cost the proxy's hot path a copy of this large future, a hand-off to the
/// scheduler and back, and a join (see `BENCHMARKS.md`, the proxy on every surface). Dropping
/// the job stops the enforcement (the client went away).
pub(crate) struct Job {
    /// The loop itself.
    pub running: Running,
    pub events: Progresses,
    pub deadline: tokio::time::Instant,
}

/// The loop's progress as a stream driver hears it; none for an answer that is not streamed
/// (a channel per request that nobody reads would cost the proxy's hot path).
pub(crate) struct Progresses(Option<mpsc::UnboundedReceiver<Progress>>);

impl Progresses {
    /// The next progress; `None` once the loop is gone, or at once when nothing is sent.
    pub async fn recv(&mut self) -> Option<Progress> {
        match &mut self.0 {
            Some(events) => events.recv().await,
            None => None,
        }
    }

    /// A progress already sent, without waiting.
    pub fn try_recv(&mut self) -> Option<Progress> {
        self.0.as_mut().and_then(|events| events.try_recv().ok())
    }
}

/// The loop of a [`Job`], with the attempts it recorded so far.
pub(crate) struct Running {
    /// The loop, with a panic in it caught (as a task would); `None` once stopped.
    work: Option<Work>,
    attempts: AttemptsSoFar,
}

type Work = futures_util::future::CatchUnwind<
    std::panic::AssertUnwindSafe<
        std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>>,
    >,
>;

impl Running {
    /// How the loop ended, once it has: its outcome, or its recorded attempts after a panic.
    /// Pending forever once the loop was stopped.
    pub async fn ended(&mut self) -> Ended {
        let Some(work) = self.work.as_mut() else {
            return std::future::pending().await;
        };
        let result = work.await;
        self.work = None;
        match result {
            Ok(outcome) => Ended::Outcome(Box::new(outcome)),
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                tracing::error!(panic = ?message, "the enforcement panicked");
                Ended::Crashed(self.attempts.take())
            }
        }
    }

    /// Stops the loop at its deadline; the end with the attempts it recorded.
    pub fn past_deadline(&mut self) -> Ended {
        self.work = None;
        Ended::Deadline(self.attempts.take())
    }
}

/// Counts a request in flight until dropped.
pub(crate) struct InFlight(Gauge);

impl InFlight {
    /// Counts one more in `enforce_in_flight` (`gauge`) until dropped.
    pub fn new(gauge: &Gauge) -> Self {
        gauge.inc();
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.dec();
    }
}

/// Identity of one answer: the same `id`, `created` and `model` in every chunk or event of it;
/// the `id` is the audit's `request_id` and the `x-request-id` header.
#[derive(Debug, Clone)]
pub(crate) struct TurnId {
    /// The surface's prefix and a per-process number (`chatcmpl-enf…`, `resp_enf…`).
    pub id: String,
    /// Unix seconds.
    pub created: u64,
    /// The public model id.
    pub model: String,
}

/// One accepted request, whatever its surface, with everything needed to answer it.
pub(crate) struct Turn {
    pub app: Arc<App>,
    pub model: Arc<Model>,
    /// The answer is streamed.
    pub stream: bool,
    /// A streamed answer ends with a usage chunk.
    pub include_usage: bool,
    pub chat_id: Option<String>,
    pub id: TurnId,
    /// Request fields the surface left out (see [`Ask::ignored`](crate::pipeline::Ask)).
    pub ignored: Vec<String>,
    /// The conversation, kept when the answer is to be stored (Responses' `store`).
    pub conversation: Option<KeptConversation>,
    pub started: Instant,
    /// The request's OpenTelemetry spans, when traces are on.
    pub trace: Option<Arc<RequestTrace>>,
    /// How the model's routes picked the profile (`None`: the model has no routes).
    pub route: Option<serde_json::Value>,
    /// The named key the request presented (the audit record names it).
    pub key: Option<Granted>,
    /// What the request's limit headers applied ([`crate::controls::apply`]), for the audit record.
    pub request_limits: Option<Value>,
    /// The attempts the loop recorded so far, for an audit of a request cut short.
    pub attempts: AttemptsSoFar,
    /// Whether the request was counted and audited ([`Turn::record`]): a turn dropped before
    /// that lost its client, and is audited as such when dropped.
    pub recorded: AtomicBool,
    /// What the answer cache made of the request.
    pub cache: crate::cache::Lookup,
    /// The concurrency permit and the body's bytes in the body budget, held until answered.
    pub _permit: crate::state::Admission,
    /// The global concurrency slot, when `max_concurrent` counts all replicas.
    pub _slot: Option<GlobalSlot>,
    pub _in_flight: InFlight,
}

/// A turn dropped before it was recorded lost its client (the handler or the stream driver
/// was dropped with it): it is counted and audited as `aborted`, `client_disconnected`, with
/// the attempts made, since the upstream was asked and may have spent tokens.
impl Drop for Turn {
    fn drop(&mut self) {
        if self.recorded.load(Ordering::Relaxed) {
            return;
        }
        let total = self.started.elapsed();
        let outcome =
            Outcome::interrupted(StopReason::ClientDisconnected, self.attempts.take(), total);
        tracing::info!(request_id = %self.id.id, "the client disconnected before the answer was sent");
        let line = self.account(CLIENT_DISCONNECTED, &outcome, total, self.unknown_step());
        // Queued, not awaited (a drop cannot wait): under `audit_fsync: always` the writer
        // still syncs the line as soon as it takes it.
        if let (Some(line), Some(audit)) = (line, &self.app.audit) {
            audit.append(line);
        }
    }
}

/// How the enforcement task ended.
pub(crate) enum Ended {
    Outcome(Box<Outcome>),
    /// The per-request deadline passed; the attempts recorded until then.
    Deadline(Vec<Attempt>),
    /// The task panicked or was cancelled; the attempts recorded until then.
    Crashed(Vec<Attempt>),
}

impl Turn {
    /// The configured name of the key the request presented (never the key itself).
    pub fn key_name(&self) -> Option<&str> {
        crate::controls::key_name(&self.app, self.key)
    }

    /// Stores the delivered answer (`body`, as the client received it) with its conversation
    /// (taken: a turn is stored once), when the request asked for it: for
    /// `GET /v1/responses/{id}` and `previous_response_id`.
    pub async fn store(&mut self, body: &Bytes, text: &str, outcome: &Outcome) {
        let Some(kept) = self.conversation.take() else {
            return;
        };
        let mut conversation =
            std::mem::take(&mut *kept.lock().unwrap_or_else(PoisonError::into_inner));
        conversation.push(Message::assistant_calling(text, outcome.tool_calls.clone()));
        let stored = StoredResponse {
            response: body.clone(),
            conversation,
            chat_id: self.chat_id.clone(),
        };
        if let Err(e) = self.app.sessions.store_response(&self.id.id, stored).await {
            tracing::error!(response_id = %self.id.id, error = %e, "could not store the response");
        }
    }

    /// Keeps `messages`, without the system ones, as the conversation of an answer to be
    /// stored (nothing when it is not).
    pub fn keep_conversation(&self, messages: Vec<Message>) {
        if let Some(kept) = &self.conversation {
            keep(kept, messages);
        }
    }

    /// When the turn's enforcement must have ended: the request's timeout from now.
    pub fn deadline(&self) -> tokio::time::Instant {
        tokio::time::Instant::now() + self.app.config.request_timeout
    }

    /// Adds how the request was routed to an `enforcement` object (when it was routed).
    pub fn add_route(&self, enforcement: &mut serde_json::Value) {
        if let (Some(route), Some(object)) = (&self.route, enforcement.as_object_mut()) {
            object.insert("route".into(), route.clone());
        }
    }

    /// The enforcement of `messages` (with `params` for the runner, in the chat-completions
    /// dialect), to be polled by the caller ([`Running::ended`]).
    pub fn start(
        &self,
        messages: Vec<Message>,
        params: Map<String, Value>,
        session_id: Option<String>,
        context: Context,
    ) -> Job {
        let (progress, events) = if self.stream {
            let (tx, rx) = mpsc::unbounded_channel();
            (Some(tx), Some(rx))
        } else {
            (None, None)
        };
        let runner = TracedRunner {
            inner: self.model.runner.clone(),
            attempt: AtomicU32::new(0),
            trace: self.trace.clone(),
        };
        let enforcer = self.model.enforcer.clone();
        // Checks of this request's own contract, run before the profile's validators: its tool
        // calls against `tools`, and its answer against `response_format` (whatever the profile).
        let mut request_checks: Vec<Arc<dyn Validator>> = Vec::new();
        if let Some(tools) = params
            .get("tools")
            .filter(|_| self.model.options.check_tool_calls)
            .filter(|tools| tools.as_array().is_some_and(|t| !t.is_empty()))
        {
            request_checks.push(self.app.tool_checks.checks_for(tools));
        }
        if let Some(format) = params
            .get("response_format")
            .and_then(|f| self.app.format_checks.check_for(f))
        {
            request_checks.push(format);
        }
        // After the request's own checks: the profile's decoding constraint is no contract of
        // the request's. The keys added here are named, so that a reason-then-format free call
        // can leave them out.
        let mut params = params;
        let mut constraint_params = Vec::new();
        for (key, value) in &self.model.decode_params {
            if !params.contains_key(key) {
                params.insert(key.clone(), value.clone());
                constraint_params.push(key.clone());
            }
        }
        let request = Request {
            messages,
            session_id,
            params,
            constraint_params,
            ..Request::default()
        };
        let attempts = self.attempts.clone();
        let recorded = attempts.clone();
        // Drafts travel only to a stream that shows them: a held stream or a completion would
        // just drop them.
        let drafts = self.stream && self.model.options.stream_mode == StreamMode::Draft;
        let observer = TurnObserver {
            progress,
            drafts,
            recorded,
            trace: self.trace.clone(),
            max_attempts: enforcer.max_attempts(),
        };
        let kept = self.conversation.clone();
        let work: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>> = Box::pin(
            async move {
                let outcome = enforcer
                    .run_with(&runner, &request, &context, &observer, &request_checks)
                    .await;
                if let Some(kept) = kept {
                    keep(&kept, request.messages);
                }
                outcome
            }
            .in_current_span(),
        );
        Job {
            running: Running {
                work: Some(std::panic::AssertUnwindSafe(work).catch_unwind()),
                attempts,
            },
            events: Progresses(events),
            deadline: self.deadline(),
        }
    }
}

impl Job {
    /// A job whose loop ended at once with `outcome` (an answer from the cache).
    pub fn ended_with(outcome: Outcome, deadline: tokio::time::Instant) -> Self {
        let work: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>> =
            Box::pin(std::future::ready(outcome));
        Job {
            running: Running {
                work: Some(std::panic::AssertUnwindSafe(work).catch_unwind()),
                attempts: AttemptsSoFar::default(),
            },
            events: Progresses(None),
            deadline,
        }
    }
}

/// The conversation of an answer to be stored (Responses' `store`), without its system
/// messages: the request's own messages, handed over when the enforcement ends rather than
/// copied before it, so a long conversation is in memory once while the model is asked.
pub type KeptConversation = Arc<Mutex<Vec<Message>>>;

/// Keeps `messages`, without the system ones, in `kept`.
fn keep(kept: &KeptConversation, messages: Vec<Message>) {
    let conversation = messages
        .into_iter()
        .filter(|m| m.role != Role::System)
        .collect();
    *kept.lock().unwrap_or_else(PoisonError::into_inner) = conversation;
}

/// Waits for the job, bounded by its deadline.
pub(crate) async fn wait(job: &mut Job) -> Ended {
    let deadline = job.deadline;
    match tokio::time::timeout_at(deadline, job.running.ended()).await {
        Ok(ended) => ended,
        Err(_) => job.running.past_deadline(),
    }
}
