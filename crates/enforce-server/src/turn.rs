//! One enforcement turn: an accepted chat request from the start of its loop to the
//! bookkeeping after it ([`Turn`]), the task running the loop ([`Job`]) and the progress it
//! reports. The JSON handler and the streaming driver both answer through here.

use crate::auth::Granted;
use crate::config::{FailureResponse, FsyncPolicy, Model, StreamMode};
use crate::error::ApiError;
use crate::metrics::{
    Gauge, ModelSeries, CLIENT_DISCONNECTED, FALLBACKS, INPUT_CHECKS, ISSUES, REPAIRS, ROUTES,
    RUNNER_FAILURES,
};
use crate::otel::RequestTrace;
use crate::session::{answer_digest, HiddenMarker, StoredResponse, TurnRecord};
use crate::shared::GlobalSlot;
use crate::state::App;
use crate::verdict;
use axum::http::StatusCode;
use bytes::Bytes;
use enforce_core::{
    Ask, Attempt, AuditRecord, Context, Event, Message, Observer, Outcome, Reply, ReplyStream,
    Request, Runner, RunnerError, Status, StopReason, Validator,
};
use futures_util::{FutureExt, StreamExt};
use serde_json::{Map, Value};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tracing::Instrument;

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
        gauge.shift(1.0);
        InFlight(gauge.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.shift(-1.0);
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
    pub conversation: Option<Vec<Message>>,
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
    pub _permit: OwnedSemaphorePermit,
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
    /// Counts a finished request and writes its audit line. With `audit_fsync: always` it waits
    /// until the line is on disk, so an answer is never acknowledged before it is audited.
    /// `status` is the metrics label (`deadline` and `internal_error` for outcomes cut short,
    /// whose overhead is not observed: the attempt in flight has no runner time).
    async fn record(&self, status: &str, outcome: &Outcome, total: Duration, step: Option<&str>) {
        let (Some(line), Some(audit)) =
            (self.account(status, outcome, total, step), &self.app.audit)
        else {
            return;
        };
        if audit.policy() == FsyncPolicy::Always {
            // A failed write is logged and counted by the writer; the client still gets its
            // answer (the audit must not take the service down).
            // Boxed: every request's future would otherwise carry this write's state.
            Box::pin(audit.append_durable(line)).await;
        } else {
            audit.append(line);
        }
    }

    /// Counts a finished request (metrics, log, trace) and marks it recorded; its audit line,
    /// when there is an audit log.
    fn account(
        &self,
        status: &str,
        outcome: &Outcome,
        total: Duration,
        step: Option<&str>,
    ) -> Option<String> {
        self.recorded.store(true, Ordering::Relaxed);
        let (app, model) = (&self.app, self.model.id.as_str());
        let cut_short = matches!(
            outcome.stop_reason,
            StopReason::DeadlineExceeded | StopReason::Panicked | StopReason::ClientDisconnected
        );
        tracing::info!(
            model,
            status,
            request_id = %self.id.id,
            attempts = outcome.attempts.len(),
            // Debug-formatted: plugin and pattern codes are not ours and could hold newlines.
            codes = ?outcome.codes().join(","),
            total_ms = total.as_millis() as u64,
            "chat completion finished"
        );
        if let Some(trace) = &self.trace {
            trace.finish(status, Some(outcome));
        }
        let profile = self
            .route
            .as_ref()
            .and_then(|r| r.get("profile"))
            .and_then(|p| p.as_str())
            .unwrap_or(self.model.profile.as_str());
        let fallback_rejected = outcome
            .warnings
            .iter()
            .find(|w| w.code == enforce_core::enforcer::FALLBACK_INVALID);
        if outcome.fallback_used || fallback_rejected.is_some() {
            let applied = if outcome.fallback_used {
                "applied"
            } else {
                "rejected"
            };
            app.metrics.count(
                &FALLBACKS,
                &[("model", model), ("profile", profile), ("outcome", applied)],
                1,
            );
        }
        // A template fallback stands in for the last attempt's errors; a deterministic repair
        // (the step marker, the file list) for those of the attempt it repaired.
        let stood_in_for = if outcome.fallback_used {
            Some(("template", outcome.attempts.last()))
        } else if outcome.status == Status::Repaired {
            Some((
                "repair",
                outcome
                    .attempts
                    .iter()
                    .rev()
                    .find(|a| !a.repairs.is_empty()),
            ))
        } else {
            None
        };
        if let Some((kind, attempt)) = stood_in_for {
            let codes: Vec<String> = attempt
                .map(|a| {
                    a.issues
                        .iter()
                        .filter(|i| i.is_error())
                        .map(|i| i.code.escape_debug().to_string())
                        .collect()
                })
                .unwrap_or_default();
            tracing::info!(
                model,
                profile,
                request_id = %self.id.id,
                kind,
                "applied fallback for issues: {}",
                codes.join(", ")
            );
        }
        if let Some(rejected) = fallback_rejected {
            tracing::warn!(
                model,
                request_id = %self.id.id,
                // Debug-formatted: the message quotes validator messages.
                reason = ?rejected.message,
                "fallback failed validation and was not sent"
            );
        }
        let m = &app.metrics;
        // The model's own series, found once (a model outside the configuration gets its
        // series looked up in the registry instead).
        let made;
        let series = match app.series.get(model) {
            Some(series) => series,
            None => {
                made = ModelSeries::new(app.metrics.clone(), model);
                &made
            }
        };
        series.count_request(status);
        series.duration().observe(total.as_secs_f64());
        series.attempts().add(outcome.attempts.len() as u64);
        for attempt in &outcome.attempts {
            series
                .upstream_latency()
                .observe(attempt.runner_us as f64 / 1e6);
            for issue in &attempt.issues {
                m.count(
                    &ISSUES,
                    &[
                        ("model", model),
                        ("validator", &issue.validator),
                        ("code", &issue.code),
                        ("severity", issue.severity.as_str()),
                    ],
                    1,
                );
            }
            for validator in &attempt.repairs {
                m.count(&REPAIRS, &[("model", model), ("validator", validator)], 1);
            }
        }
        if outcome.runner_error().is_some() {
            m.count(&RUNNER_FAILURES, &[("model", model)], 1);
        }
        if let Some(input) = &outcome.input {
            m.count(
                &INPUT_CHECKS,
                &[("model", model), ("action", input.action.as_str())],
                1,
            );
        }
        if let Some(route) = &self.route {
            let field = |key: &str| route.get(key).and_then(|v| v.as_str()).unwrap_or_default();
            m.count(
                &ROUTES,
                &[
                    ("model", model),
                    ("route", field("name")),
                    ("profile", field("profile")),
                    ("by", field("by")),
                ],
                1,
            );
        }
        if !cut_short {
            let overhead = outcome.total_us.saturating_sub(outcome.runner_us);
            series.overhead().observe(overhead as f64 / 1e6);
        }
        app.audit.as_ref().map(|_| {
            AuditRecord::new(&self.id.id, outcome)
                .model(self.model.id.as_str())
                .profile(Some(self.model.profile.as_str()).filter(|p| !p.is_empty()))
                .chat_id(self.chat_id.as_deref())
                .key(self.key_name())
                .runner(self.model.runner_kind.as_deref())
                .route(self.route.as_ref())
                .request_limits(self.request_limits.as_ref())
                // The step belongs to a chat's history: only for requests of a chat.
                .step(step.filter(|_| self.chat_id.is_some()))
                .to_json_line()
        })
    }

    /// The configured name of the key the request presented (never the key itself).
    pub fn key_name(&self) -> Option<&str> {
        crate::controls::key_name(&self.app, self.key)
    }

    /// Stores the delivered answer (`body`, as the client received it) with its conversation
    /// (taken: a turn is stored once), when the request asked for it: for
    /// `GET /v1/responses/{id}` and `previous_response_id`.
    pub async fn store(&mut self, body: &Bytes, text: &str, outcome: &Outcome) {
        let Some(mut conversation) = self.conversation.take() else {
            return;
        };
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
        // the request's.
        let mut params = params;
        for (key, value) in &self.model.decode_params {
            params.entry(key.clone()).or_insert_with(|| value.clone());
        }
        let request = Request {
            messages,
            session_id,
            params,
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
        let work: std::pin::Pin<Box<dyn std::future::Future<Output = Outcome> + Send>> = Box::pin(
            async move {
                enforcer
                    .run_with(&runner, &request, &context, &observer, &request_checks)
                    .await
            }
            .in_current_span(),
        );
        Job {
            running: Running {
                work: Some(std::panic::AssertUnwindSafe(work).catch_unwind()),
                attempts,
            },
            events: Progresses(events),
            deadline: tokio::time::Instant::now() + self.app.config.request_timeout,
        }
    }

    /// Bookkeeping once the loop ended: metrics, audit, session. Returns the text to deliver
    /// or the error to send.
    pub async fn conclude(&self, ended: Ended) -> Result<(String, Box<Outcome>), ApiError> {
        let total = self.started.elapsed();
        let outcome = match ended {
            Ended::Outcome(outcome) => outcome,
            Ended::Deadline(attempts) => {
                let outcome = Outcome::interrupted(StopReason::DeadlineExceeded, attempts, total);
                self.record("deadline", &outcome, total, self.unknown_step())
                    .await;
                self.record_session(&outcome, self.unknown_step().map(String::from), None)
                    .await;
                return Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "enforcement_error",
                    "deadline_exceeded",
                    format!(
                        "No checked answer was ready within this proxy's limit of {} s, so nothing was shown. Please try again, perhaps asking for a shorter answer.",
                        self.app.config.request_timeout.as_secs_f64()
                    ),
                ));
            }
            Ended::Crashed(attempts) => {
                let outcome = Outcome::interrupted(StopReason::Panicked, attempts, total);
                self.record("internal_error", &outcome, total, self.unknown_step())
                    .await;
                self.record_session(&outcome, self.unknown_step().map(String::from), None)
                    .await;
                return Err(ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "server_error",
                    "internal_error",
                    "The proxy failed while checking the answer, so nothing was shown. Please try again; if it keeps happening, tell the administrator.",
                ));
            }
        };
        let deliverable = deliverable(&outcome, delivery_for(&self.model));
        if deliverable.is_some() && !outcome.status.is_success() && !outcome.fallback_used {
            tracing::warn!(
                status = outcome.status.as_str(),
                codes = ?outcome.codes().join(","),
                "returning unvalidated: the answer did not pass its checks"
            );
        } else if deliverable.is_some() && !outcome.unchecked_validators().is_empty() {
            tracing::warn!(
                validators = ?outcome.unchecked_validators(),
                "returning unvalidated: some checks did not run"
            );
        }
        // The step marker: recorded in the session, and cut from what the client sees when the
        // model hides it.
        let checked = outcome.status.is_success() && !outcome.fallback_used;
        // Looked for only where it is used: a chat's history (and its audit line), or hiding.
        let wanted = self.chat_id.is_some() || self.model.options.hide_step_marker;
        let mark = match (&deliverable, checked && wanted) {
            (Some(text), true) => self.app.step_extractor.as_ref().and_then(|f| f(text)),
            _ => None,
        };
        // A turn without a checked answer still takes a place in the step history: `unknown`,
        // so the next turn's `previous_step` says the flow lost track instead of repeating a
        // step the user never saw confirmed. So does a checked answer without a marker (a
        // profile that does not require one): the model forgot to say where the flow is.
        let step = match &mark {
            Some(m) => Some(m.step.clone()),
            None if !checked || wanted => self.unknown_step().map(String::from),
            None => None,
        };
        self.record(outcome.status.as_str(), &outcome, total, step.as_deref())
            .await;
        let mut hidden = None;
        let deliverable = match (deliverable, &mark) {
            (Some(text), Some(mark)) if self.model.options.hide_step_marker => {
                let (shown, marker) = without_marker(&text, mark.range.clone());
                hidden = Some(HiddenMarker {
                    marker,
                    answer_digest: answer_digest(&shown),
                });
                Some(shown)
            }
            (deliverable, _) => deliverable,
        };
        self.record_session(&outcome, step, hidden).await;
        match deliverable {
            // An empty answer looks like a dropped connection to every client: say so instead.
            Some(text) if text.trim().is_empty() && outcome.tool_calls.is_empty() => {
                let mut error = ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "upstream_error",
                    "empty_answer",
                    "The model returned an empty answer. Please try again or rephrase your request.",
                );
                let mut enforcement = verdict::enforcement_json(&outcome);
                self.add_route(&mut enforcement);
                // The loop's own status stays in the object for the record, but nothing that
                // reached the client was validated: no `X-Enforce-Status` claims it was.
                enforcement["validated"] = Value::Bool(false);
                error.enforcement = Some(Box::new(enforcement));
                Err(error)
            }
            Some(text) => Ok((text, outcome)),
            None => {
                let mut error = verdict::outcome_failure(&outcome);
                if let Some(enforcement) = error.enforcement.as_deref_mut() {
                    self.add_route(enforcement);
                }
                Err(error)
            }
        }
    }
}

impl Turn {
    /// The step a turn without a checked answer records: `unknown` where steps are tracked
    /// (a step extractor is configured), else none.
    fn unknown_step(&self) -> Option<&'static str> {
        self.app.step_extractor.as_ref().map(|_| UNKNOWN_STEP)
    }

    /// Records the turn in its chat's session (when the request belongs to a chat).
    async fn record_session(
        &self,
        outcome: &Outcome,
        step: Option<String>,
        hidden: Option<HiddenMarker>,
    ) {
        let Some(chat_id) = &self.chat_id else {
            return;
        };
        let turn = TurnRecord {
            model: &self.model.id,
            status: outcome.status.as_str(),
            runner_session_id: outcome.session_id.as_deref(),
            step,
            hidden,
        };
        // Boxed: only a request of a chat pays for the store's future, in size as in time.
        if let Err(e) = Box::pin(self.app.sessions.record_turn(chat_id, turn)).await {
            tracing::error!(chat_id, error = %e, "could not persist session");
        }
    }
}

/// The step recorded for a turn that delivered no checked answer with a marker (unresolved,
/// an error to the client, aborted, cut short).
pub(crate) const UNKNOWN_STEP: &str = "unknown";

/// `text` without the marker at `range` (and the blank space it leaves at the end), and the
/// marker.
fn without_marker(text: &str, range: std::ops::Range<usize>) -> (String, String) {
    let (Some(before), Some(marker), Some(after)) = (
        text.get(..range.start),
        text.get(range.clone()),
        text.get(range.end..),
    ) else {
        return (text.to_string(), String::new());
    };
    let mut shown = before.trim_end().to_string();
    let after = after.trim_end();
    if !after.trim().is_empty() {
        shown.push_str(if before.trim().is_empty() { "" } else { "\n\n" });
        shown.push_str(after.trim_start());
    }
    (shown, marker.to_string())
}

/// The per-model choices for an answer that did not pass. Streams follow them too: the answer is
/// held back until the loop ends either way, so a stream can deliver it with its status as a
/// completion does.
#[derive(Clone, Copy)]
pub(crate) struct Delivery {
    on_unresolved: FailureResponse,
    on_unavailable: FailureResponse,
}

fn delivery_for(model: &Model) -> Delivery {
    Delivery {
        on_unresolved: model.options.on_unresolved,
        on_unavailable: model.options.on_unavailable,
    }
}

/// The text to send, if the outcome may be delivered.
fn deliverable(outcome: &Outcome, delivery: Delivery) -> Option<String> {
    let text = outcome.response.clone()?;
    if outcome.status.is_success() || outcome.fallback_used {
        return Some(text);
    }
    if outcome.runner_error().is_some() {
        return None;
    }
    let mode = match outcome.status {
        Status::Unavailable => delivery.on_unavailable,
        _ => delivery.on_unresolved,
    };
    (mode == FailureResponse::Return).then_some(text)
}

/// Waits for the job, bounded by its deadline.
pub(crate) async fn wait(job: &mut Job) -> Ended {
    let deadline = job.deadline;
    match tokio::time::timeout_at(deadline, job.running.ended()).await {
        Ok(ended) => ended,
        Err(_) => job.running.past_deadline(),
    }
}
