//! The request pipeline every API surface shares. A surface ([`Surface`]) parses its request
//! body into an [`Ask`] (the surface-neutral turn) and renders the outcome in its own format;
//! everything between runs once, here, in this order:
//!
//! 1. admission: the concurrency permit ([`take_permit`]), then the body ([`read_body`]: its
//!    size, within the request deadline), then parse (the surface); the key check
//!    ([`crate::auth::authenticate`]) runs first. The permit comes before the body so that
//!    `max_concurrent` bounds the memory of bodies in flight too: a request refused for load
//!    is refused before a byte of its body is read;
//! 2. model and profile resolution ([`resolve_model`]: the model id, `X-Enforce-Profile`);
//! 3. routing ([`route`]: the model's routes pick the profile);
//! 4. session ([`open_session`]: chat id, global slot, session and replica check, hidden
//!    markers put back), facts and context ([`context`]);
//! 5. enforcement ([`Turn::start`], polled by the request that waits for it: no task of its
//!    own; [`Turn::conclude`] after it);
//! 6. rendering (the surface: [`Surface::answer_bytes`] or its [`StreamWriter`], [`Surface::refuse`]),
//!    with the enforcement headers set here for every surface ([`enforcement_headers`]).

use crate::auth::Granted;
use crate::config::{ConcurrencyScope, Model};
use crate::controls;
use crate::error::ApiError;
use crate::facts;
use crate::headers::PROFILE_HEADER;
use crate::otel::RequestInfo;
use crate::session::{answer_digest, SessionStatus};
use crate::shared::GlobalSlot;
use crate::state::{unix_now, App};
use crate::stream::{self, Start, StreamWriter};
use crate::turn::{wait, InFlight, Turn, TurnId};
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use enforce_core::{Context, Enforcer, Message, Outcome, Role};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, Instant};
use tokio::sync::OwnedSemaphorePermit;
use tracing::Instrument;

use crate::headers as names;

/// What every surface parses its request into: the surface-neutral turn.
#[derive(Debug, Clone, Default)]
pub(crate) struct Ask {
    /// The public model id.
    pub model: String,
    /// The conversation (a surface's `system`/`instructions` folded in as [`Role::System`]).
    pub messages: Vec<Message>,
    /// Everything passed on to the runner, in the chat-completions dialect (runners forward it
    /// upstream as it is): `tools`, `temperature`, `max_tokens`, `response_format`, ...
    pub params: Map<String, Value>,
    /// The answer is streamed.
    pub stream: bool,
    /// A streamed answer ends with a usage chunk (chat's `stream_options.include_usage`).
    pub include_usage: bool,
    /// The proxy's own `enforce` field (facts in `enforce.context`), as sent.
    pub enforce: Option<Value>,
    /// The chat this request belongs to, as the body names it (the surface knows which field);
    /// the `X-OpenWebUI-Chat-Id` header comes first.
    pub chat_hint: Option<String>,
    /// A stored answer whose conversation this request continues (Responses'
    /// `previous_response_id`): the session stage puts it before the new input.
    pub continues: Option<String>,
    /// Keep the answer for a later request to continue or read back (Responses' `store`).
    pub store: bool,
    /// Request fields the surface could not carry to the upstream and left out: named in
    /// the `X-Enforce-Warnings` header and the answer's `warnings` (code `fields_ignored`).
    pub ignored: Vec<String>,
}

/// A request body as the JSON object every surface's body is; a 400 otherwise.
pub(crate) fn body_object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(format!("The request body is not valid JSON: {e}."), None)
    })?;
    match value {
        Value::Object(fields) => Ok(fields),
        _ => Err(ApiError::bad_request(
            "The request body must be a JSON object.",
            None,
        )),
    }
}

/// One API surface: its wire format at the edges of the pipeline. Implement it on a unit type
/// in the surface's own module and mount `post(serve::<YourSurface>)` in `Server::router`.
pub(crate) trait Surface: Send + Sync + 'static {
    /// The surface's name in spans and logs (`chat`, `responses`, `messages`).
    const NAME: &'static str;
    /// The prefix of the ids it hands out (`chatcmpl-`, `resp_`, `msg_`).
    const ID_PREFIX: &'static str;
    /// The route it is served on (the request span's `http.route`).
    const ROUTE: &'static str;
    /// The headers that carry the request's id: `x-request-id`, and where the surface's SDKs
    /// read another (Anthropic's `request-id`), that one too.
    fn request_id_headers() -> &'static [HeaderName] {
        static HEADERS: [HeaderName; 1] = [names::REQUEST_ID];
        &HEADERS
    }
    /// What the surface keeps of its request for rendering (echoed fields, options).
    type Kept: Send + Sync + 'static;
    /// Renders a stream.
    type Writer: StreamWriter;

    /// Parses a request body (at most `max_body_bytes`) into the shared turn.
    fn parse(body: &[u8]) -> Result<(Ask, Self::Kept), ApiError>;

    /// The error in this surface's envelope, with the shared headers ([`ApiError::headers`]).
    fn refuse(error: ApiError) -> Response;

    /// The answer as the bytes of its JSON body: the pipeline sends them with the enforcement
    /// headers and stores them when the request asked for it. Written typed, without building
    /// a `Value`, to keep the proxy's added latency down.
    fn answer_bytes(turn: &Turn, kept: &Self::Kept, text: &str, outcome: &Outcome) -> Vec<u8>;

    /// The writer of a streamed answer.
    fn writer(turn: &Turn, kept: Self::Kept) -> Self::Writer;
}

/// Serializes, as JSON text written as it is, what `write` puts down: for the answers written
/// straight to bytes, where something serializes them inside another value (tests, events).
pub(crate) fn serialize_written<S: serde::Serializer>(
    to: S,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), enforce_core::json::Error>,
) -> Result<S::Ok, S::Error> {
    use serde::Serialize;
    let mut bytes = Vec::with_capacity(1024);
    write(&mut bytes).map_err(serde::ser::Error::custom)?;
    let text = std::str::from_utf8(&bytes).map_err(serde::ser::Error::custom)?;
    enforce_core::json::Raw(text).serialize(to)
}

/// An answer's JSON body, which `write` puts down into room made once for the answer's text
/// and the fields around it (a buffer grown from empty is copied each time it grows).
pub(crate) fn answer_body(
    text: &str,
    write: impl FnOnce(&mut Vec<u8>) -> Result<(), enforce_core::json::Error>,
) -> Vec<u8> {
    let mut body = Vec::with_capacity(1024 + text.len() + text.len() / 8);
    match write(&mut body) {
        Ok(()) => body,
        Err(_) => Vec::new(),
    }
}

/// A request refused before its enforcement started: the `enforce_rejected_total` reason and
/// the error, and the model it asked for when its body was read that far.
pub(crate) struct Rejection {
    reason: &'static str,
    /// Boxed: the stages' `Result`s stay small on the happy path.
    error: Box<ApiError>,
    model: Option<String>,
}

impl Rejection {
    /// A refusal counted as `reason`.
    pub(crate) fn new(reason: &'static str, error: ApiError) -> Self {
        rejected(reason)(error)
    }

    /// Counts and audits the refusal of a request that presented `granted`; the error to send.
    pub(crate) fn refused(self, app: &App, granted: Option<Granted>) -> ApiError {
        app.refuse(crate::audit::Refusal {
            reason: self.reason,
            status: self.error.status.as_u16(),
            model: self.model.as_deref(),
            key: controls::key_name(app, granted),
        });
        *self.error
    }

    /// The same refusal, of a request for `model`.
    pub(crate) fn asked_for(mut self, model: &str) -> Self {
        self.model = Some(model.to_string());
        self
    }
}

/// A stage outside this module refuses with its `enforce_rejected_total` reason and error.
impl From<controls::Refused> for Rejection {
    fn from(controls::Refused(reason, error): controls::Refused) -> Self {
        Rejection {
            reason,
            error,
            model: None,
        }
    }
}

fn rejected(reason: &'static str) -> impl FnOnce(ApiError) -> Rejection {
    move |error| Rejection {
        reason,
        error: Box::new(error),
        model: None,
    }
}

/// Serves one request of surface `S` through every stage.
pub(crate) async fn serve<S: Surface>(
    State(app): State<Arc<App>>,
    request: axum::extract::Request,
) -> Response {
    // Taken apart, not extracted piece by piece: axum's `HeaderMap` extractor copies the
    // headers.
    let (parts, body) = request.into_parts();
    // The key is checked here, not by a middleware: axum's `from_fn` layer boxes the rest of
    // the request's work and clones the router's service for every request.
    let granted = match crate::auth::authenticate(&app, &parts.headers) {
        Ok(granted) => granted,
        Err(error) => return S::refuse(*error),
    };
    match admit::<S>(&app, granted, &parts.headers, body).await {
        // Boxed: axum moves this future whole, twice, for every request; the rendering's
        // state (the turn, its job, the answer's) would make it several kilobytes larger.
        Ok(admitted) => Box::pin(respond::<S>(admitted)).await,
        Err(rejection) => S::refuse(rejection.refused(&app, granted)),
    }
}

/// A request through admission, resolution, routing and session, its enforcement started.
struct Admitted<S: Surface> {
    turn: Turn,
    job: crate::turn::Job,
    kept: S::Kept,
    span: tracing::Span,
}

async fn admit<S: Surface>(
    app: &Arc<App>,
    granted: Option<Granted>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Admitted<S>, Rejection> {
    let permit = take_permit(app)?;
    let bytes = read_body(app, headers, body).await?;
    let (mut ask, kept) = S::parse(&bytes).map_err(rejected("bad_request"))?;
    let grant = controls::grant(app, granted);
    let Prepared {
        model,
        route,
        request_limits,
        session,
        context,
    } = match prepare(app, grant, headers, &bytes, &mut ask).await {
        Ok(prepared) => prepared,
        Err(rejection) => return Err(rejection.asked_for(&ask.model)),
    };
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let id = TurnId {
        id: turn_id(S::ID_PREFIX, app.started, n),
        created: unix_now(),
        model: model.id.clone(),
    };
    let span = tracing::info_span!(
        "chat_completion",
        surface = S::NAME,
        model = %model.id,
        id = %id.id,
        chat_id = session.chat_id.as_deref().unwrap_or(""),
        stream = ask.stream,
    );
    let trace = app.telemetry.as_ref().map(|telemetry| {
        telemetry.request(
            headers,
            RequestInfo {
                route: S::ROUTE,
                surface: S::NAME,
                model: &model.id,
                upstream_model: model.upstream_model.as_deref(),
                request_id: &id.id,
                chat_id: session.chat_id.as_deref(),
                profile: Some(model.profile.as_str()).filter(|p| !p.is_empty()),
                stream: ask.stream,
                key: grant.map(|g| g.name.as_str()),
                request_limits: request_limits.as_ref(),
            },
        )
    });
    // What a stored answer continues from: the conversation without its system messages.
    let conversation = ask.store.then(|| {
        ask.messages
            .iter()
            .filter(|m| m.role != Role::System)
            .cloned()
            .collect()
    });
    let turn = Turn {
        _in_flight: InFlight::new(&app.in_flight),
        conversation,
        app: app.clone(),
        model,
        stream: ask.stream,
        include_usage: ask.include_usage,
        ignored: std::mem::take(&mut ask.ignored),
        chat_id: session.chat_id,
        id,
        started: Instant::now(),
        trace,
        route,
        key: granted,
        request_limits,
        attempts: Default::default(),
        recorded: Default::default(),
        _permit: permit,
        _slot: session.slot,
    };
    let runner_session = session.found.and_then(|s| s.runner_session_id);
    let job = span.in_scope(|| turn.start(ask.messages, ask.params, runner_session, context));
    Ok(Admitted {
        turn,
        job,
        kept,
        span,
    })
}

/// What the stages between parsing and enforcement made of a request.
struct Prepared {
    model: Arc<Model>,
    route: Option<Value>,
    request_limits: Option<Value>,
    session: SessionStage,
    context: Context,
}

/// Resolution, routing, the key's limits, session and context of a parsed request.
async fn prepare(
    app: &Arc<App>,
    grant: Option<&crate::config::KeyGrant>,
    headers: &HeaderMap,
    bytes: &[u8],
    ask: &mut Ask,
) -> Result<Prepared, Rejection> {
    let own = own_headers(headers);
    controls::admit_model(grant, &ask.model, own)?;
    let (mut model, header_profile) = resolve_model(app, grant, &ask.model, own)?;
    let route = match header_profile {
        Some(_) => None,
        None => route(&mut model, bytes, &ask.params, headers, &ask.messages).await,
    };
    let request_limits = controls::apply(grant, &mut model, own)?;
    controls::admit_continuation(app, grant, ask.continues.as_deref()).await?;
    let session = open_session(app, own, ask, &model).await?;
    let context = context(app, own, ask.enforce.take(), &model, &session)?;
    Ok(Prepared {
        model,
        route,
        request_limits,
        session,
        context,
    })
}

/// Rendering: the surface's JSON answer or stream, or its error envelope.
async fn respond<S: Surface>(admitted: Admitted<S>) -> Response {
    let Admitted {
        mut turn,
        mut job,
        kept,
        span,
    } = admitted;
    if turn.stream {
        // Routing is done: a stream names its profile in its headers like a completion.
        let profile = profile_header(&turn.model.profile);
        let request_id = HeaderValue::from_str(&turn.id.id).ok();
        let warnings = warnings_header(&turn);
        let writer = S::writer(&turn, kept);
        // Boxed: the stream driver's state would otherwise make every request's future, the
        // ones not streamed too, larger by its size, and axum copies that future into a box.
        let mut response = match Box::pin(stream::respond(turn, job, span, writer)).await {
            Start::Refused(error) => S::refuse(error),
            Start::Whole(events, turn, outcome) => stream_response(
                events,
                enforcement_values(overhead_us(&turn, &outcome), &outcome),
            ),
            Start::Streaming(response) => response,
        };
        let headers = response.headers_mut();
        if let Some(profile) = profile {
            headers.insert(names::PROFILE, profile);
        }
        if let Some(id) = request_id {
            for name in S::request_id_headers() {
                headers.insert(name, id.clone());
            }
        }
        if let Some(warnings) = warnings {
            headers.insert(names::WARNINGS, warnings);
        }
        return response;
    }
    async move {
        let ended = wait(&mut job).await;
        let mut response = match turn.conclude(ended).await {
            Ok((text, outcome)) => {
                let body = Bytes::from(S::answer_bytes(&turn, &kept, &text, &outcome));
                // Stored as sent (the same bytes, shared), when the request asked for it.
                turn.store(&body, &text, &outcome).await;
                answer_response(
                    body,
                    enforcement_values(overhead_us(&turn, &outcome), &outcome),
                )
            }
            Err(error) => S::refuse(error),
        };
        // A refused answer names its profile too, as a stream's headers always do.
        if let Some(profile) = profile_header(&turn.model.profile) {
            response.headers_mut().insert(names::PROFILE, profile);
        }
        if let Ok(id) = HeaderValue::from_str(&turn.id.id) {
            for name in S::request_id_headers() {
                response.headers_mut().insert(name, id.clone());
            }
        }
        if let Some(warnings) = warnings_header(&turn) {
            response.headers_mut().insert(names::WARNINGS, warnings);
        }
        response
    }
    .instrument(span)
    .await
}

/// The `X-Enforce-Warnings` value of a turn, when something was left out of its request.
fn warnings_header(turn: &Turn) -> Option<HeaderValue> {
    if turn.ignored.is_empty() {
        return None;
    }
    HeaderValue::from_str(&format!("fields_ignored={}", turn.ignored.join(","))).ok()
}

/// A JSON body as it is, with `content-type: application/json`.
pub(crate) fn json_response(body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    // Room for the enforcement headers at once, not grown insert by insert.
    response
        .headers_mut()
        .reserve(crate::headers::ANSWER_HEADERS);
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The `warnings` a surface puts in its answer for what was left out of the request:
/// `[{"code": "fields_ignored", "fields": [...], "message": ...}]`.
pub(crate) struct Warnings<'a>(&'a [String]);

impl<'a> Warnings<'a> {
    /// The warnings for the fields `ignored` (none when nothing was left out).
    pub(crate) fn of(ignored: &'a [String]) -> Option<Self> {
        (!ignored.is_empty()).then_some(Warnings(ignored))
    }
}

impl serde::Serialize for Warnings<'_> {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        #[derive(serde::Serialize)]
        struct FieldsIgnored<'a> {
            code: &'static str,
            fields: &'a [String],
            message: String,
        }
        to.collect_seq([FieldsIgnored {
            code: "fields_ignored",
            fields: self.0,
            message: format!(
                "This proxy did not pass these request fields to the model: {}.",
                self.0.join(", ")
            ),
        }])
    }
}

/// [`Warnings`] of a turn as a `Value`.
pub(crate) fn warnings_json(turn: &Turn) -> Option<Value> {
    Warnings::of(&turn.ignored).and_then(|w| serde_json::to_value(w).ok())
}

/// Admission: the body, at most `max_body_bytes` (refused from `Content-Length` before reading
/// when it says more), within the request deadline (a 408 for a body sent too slowly).
pub(crate) async fn read_body(
    app: &App,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, Rejection> {
    let limit = app.config.max_body_bytes;
    let deadline = app.config.request_timeout;
    match tokio::time::timeout(deadline, read_body_within(limit, headers, body)).await {
        Ok(read) => read,
        Err(_) => Err(rejected("body_timeout")(ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "invalid_request_error",
            "request_body_timeout",
            format!(
                "The request body did not arrive within this proxy's limit of {} s.",
                deadline.as_secs_f64()
            ),
        ))),
    }
}

/// The body, at most `limit` bytes.
async fn read_body_within(
    limit: usize,
    headers: &HeaderMap,
    body: Body,
) -> Result<Bytes, Rejection> {
    let too_large = || {
        rejected("body_too_large")(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("The request body is larger than this proxy accepts ({limit} bytes)."),
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    // Frame by frame, not through `axum::body::to_bytes` (a limit wrapper and a frame queue):
    // a request's body is nearly always one frame, taken as it came without a copy. As there,
    // a body that fails to arrive is refused like one too large.
    let mut body = std::pin::pin!(body);
    let mut whole = Bytes::new();
    let mut joined: Vec<u8> = Vec::new();
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        let Ok(data) = frame.map_err(|_| too_large())?.into_data() else {
            continue;
        };
        if whole.len() + joined.len() + data.len() > limit {
            return Err(too_large());
        }
        if whole.is_empty() && joined.is_empty() {
            whole = data;
        } else {
            if joined.is_empty() {
                joined.extend_from_slice(&whole);
                whole = Bytes::new();
            }
            joined.extend_from_slice(&data);
        }
    }
    Ok(if joined.is_empty() {
        whole
    } else {
        Bytes::from(joined)
    })
}

/// The model `id`, else a 404 that lists the models the request's key may use.
pub(crate) fn known_model(
    app: &App,
    grant: Option<&crate::config::KeyGrant>,
    id: &str,
) -> Result<Arc<Model>, Rejection> {
    if let Some(model) = app.models.get(id) {
        return Ok(Arc::clone(model));
    }
    let available: Vec<&str> = app
        .model_order
        .iter()
        .map(String::as_str)
        .filter(|m| grant.is_none_or(|g| g.allows_model(m)))
        .collect();
    let error = ApiError {
        param: Some("model"),
        ..ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            format!(
                "The model `{id}` does not exist on this proxy. Available: {}.",
                available.join(", ")
            ),
        )
    };
    Err(rejected("unknown_model")(error))
}

/// Resolution: the model, with the profile `X-Enforce-Profile` names instead of its own (that
/// name is returned: a named profile is not routed).
fn resolve_model(
    app: &App,
    grant: Option<&crate::config::KeyGrant>,
    id: &str,
    headers: &HeaderMap,
) -> Result<(Arc<Model>, Option<String>), Rejection> {
    let mut model = known_model(app, grant, id)?;
    let profile = controls::requested_profile(headers).map_err(rejected("bad_request"))?;
    let Some(name) = profile else {
        return Ok((model, None));
    };
    match app.profiles.get(name) {
        Some(enforcer) => {
            switch_profile(&mut model, enforcer, name);
            Ok((model, Some(name.to_string())))
        }
        None => {
            let mut known: Vec<&str> = app.profiles.keys().map(String::as_str).collect();
            known.sort_unstable();
            let error = ApiError::bad_request(
                format!(
                    "Unknown profile `{name}` in {PROFILE_HEADER}. Known profiles: {}.",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
                None,
            );
            Err(rejected("unknown_profile")(error))
        }
    }
}

/// Admission: this replica's concurrency permit (a 429 when none is free).
pub(crate) fn take_permit(app: &App) -> Result<OwnedSemaphorePermit, Rejection> {
    app.limiter
        .clone()
        .try_acquire_owned()
        .map_err(|_| rejected("overloaded")(overloaded(app)))
}

/// Routing: the model's routes pick the profile before any model call (a classifier counts
/// against the permit taken before). How it was routed, for the `enforcement` object, the
/// audit and the metrics (`None`: the model has no routes).
async fn route(
    model: &mut Arc<Model>,
    body: &[u8],
    params: &Map<String, Value>,
    headers: &HeaderMap,
    messages: &[Message],
) -> Option<Value> {
    let routes = model.routes.clone()?;
    let picked = routes
        .pick(body, params, headers, messages, &model.profile)
        .await;
    if let Some((enforcer, name)) = picked.choice() {
        switch_profile(model, enforcer, name);
    }
    serde_json::to_value(&picked.record).ok()
}

/// This request's copy of `model`, enforced with profile `name` instead of its own (named in
/// `X-Enforce-Profile` or picked by a route): one place, so both ways switch alike.
fn switch_profile(model: &mut Arc<Model>, enforcer: &Arc<Enforcer>, name: &str) {
    let changed = Arc::make_mut(model);
    changed.enforcer = Arc::clone(enforcer);
    changed.profile = name.to_string();
    // The decoding constraint is the model's own profile's, not the one switched to.
    changed.decode_params.clear();
}

/// The request's chat, its global slot and its session.
struct SessionStage {
    chat_id: Option<String>,
    slot: Option<GlobalSlot>,
    found: Option<SessionStatus>,
}

/// Session: the chat id (the `X-OpenWebUI-Chat-Id` header, else what the surface read from the
/// body), the global concurrency slot, the chat's session (checked to live on this replica),
/// and the hidden step markers put back on the assistant turns sent back.
async fn open_session(
    app: &App,
    headers: &HeaderMap,
    ask: &mut Ask,
    model: &Model,
) -> Result<SessionStage, Rejection> {
    let chat_id = headers
        .get(names::CHAT_ID)
        .and_then(|v| v.to_str().ok())
        .and_then(non_empty)
        .or_else(|| ask.chat_hint.take());
    let slot = match (
        &app.shared,
        app.config.state.as_ref().map(|s| s.concurrency),
    ) {
        (Some(shared), Some(ConcurrencyScope::Global)) => {
            // Held until the end of the request, and longer than it can run.
            let ttl = app.config.request_timeout + Duration::from_secs(30);
            match shared
                .try_slot(app.config.max_concurrent, ttl, chat_id.as_deref())
                .await
            {
                Some(Some(slot)) => Some(slot),
                Some(None) => return Err(rejected("overloaded")(overloaded(app))),
                // Redis failing: this replica's own limit still holds.
                None => None,
            }
        }
        _ => None,
    };
    let chat_id = match continued(app, ask).await? {
        Some(earlier) => chat_id.or(Some(earlier)),
        None => chat_id,
    };
    let mut found = match &chat_id {
        Some(id) => app.sessions.get(id).await,
        None => None,
    };
    if let (Some(id), Some(session)) = (&chat_id, &found) {
        match runner_session_here(app, id, session).await {
            Ok(true) => {}
            // Its replica is gone: a fresh runner session with the conversation the client sent
            // and the chat's step history.
            Ok(false) => {
                found = found.map(|s| SessionStatus {
                    runner_session_id: None,
                    ..s
                });
            }
            Err(error) => return Err(rejected("session_on_other_replica")(error)),
        }
    }
    if model.options.hide_step_marker {
        if let (Some(session), Some(extract)) = (&found, &app.step_extractor) {
            restore_hidden_markers(&mut ask.messages, session, extract);
        }
    }
    Ok(SessionStage {
        chat_id,
        slot,
        found,
    })
}

/// Puts the stored conversation the request continues before its new input (after the new
/// request's system messages, which replace the stored ones); the chat the stored answer
/// belonged to.
async fn continued(app: &App, ask: &mut Ask) -> Result<Option<String>, Rejection> {
    let Some(id) = ask.continues.as_deref() else {
        return Ok(None);
    };
    let Some(stored) = app.sessions.stored_response(id).await else {
        let error = ApiError {
            param: Some("previous_response_id"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "previous_response_not_found",
                format!("Previous response with id '{id}' not found: it was not stored (`store: false`), has expired, or never existed."),
            )
        };
        return Err(rejected("unknown_response")(error));
    };
    let system = ask
        .messages
        .iter()
        .take_while(|m| m.role == Role::System)
        .count();
    let new_input = ask.messages.split_off(system);
    ask.messages.extend(stored.conversation);
    ask.messages.extend(new_input);
    Ok(stored.chat_id)
}

/// The start every surface's parser shares: the body as a JSON object, and its `model`
/// (taken out of it).
pub(crate) fn json_body(body: &[u8]) -> Result<(Map<String, Value>, String), ApiError> {
    let mut fields = body_object(body)?;
    let model = model_of(fields.remove("model"))?;
    Ok((fields, model))
}

/// The request's headers for the lookups of the proxy's own (`X-Enforce-*` and
/// `X-OpenWebUI-Chat-Id`): the request's when it sent one, else an empty map. Most requests
/// send none: one pass over their names costs less than the five lookups, each hashing a
/// long name.
fn own_headers(headers: &HeaderMap) -> &HeaderMap {
    static NONE: LazyLock<HeaderMap> = LazyLock::new(HeaderMap::new);
    let own = |name: &HeaderName| {
        let name = name.as_str();
        name.starts_with("x-enforce-") || name == names::CHAT_ID_HEADER
    };
    if headers.keys().any(own) {
        headers
    } else {
        &NONE
    }
}

/// A request's `stream`: absent or `null` is not streamed, a boolean says; anything else is a
/// 400, as OpenAI answers (`"yes"` must not quietly mean "not streamed").
pub(crate) fn stream_of(stream: Option<&Value>) -> Result<bool, ApiError> {
    match stream {
        None | Some(Value::Null) => Ok(false),
        Some(Value::Bool(stream)) => Ok(*stream),
        Some(other) => Err(ApiError::bad_request(
            format!("`stream` must be true or false, got {other}."),
            Some("stream"),
        )),
    }
}

/// A message's `role` as an error message shows it: `` `user` `` for a string, the JSON of
/// anything else (`3`), `none` when there is none.
pub(crate) fn shown_role(role: Option<&Value>) -> String {
    match role {
        None | Some(Value::Null) => "none".to_string(),
        Some(Value::String(role)) => format!("`{role}`"),
        Some(other) => format!("{other} (not a string)"),
    }
}

/// The model a request body names in `model`: a non-empty string, else a 400.
pub(crate) fn model_of(model: Option<Value>) -> Result<String, ApiError> {
    match model {
        Some(Value::String(model)) if !model.is_empty() => Ok(model),
        _ => Err(ApiError::bad_request(
            "The request needs a `model` (one of the ids listed by /v1/models).",
            Some("model"),
        )),
    }
}

/// A trimmed, non-empty string.
pub(crate) fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_string())
}

/// The validators' context: the request's facts (the body's `enforce` field and the
/// `X-Enforce-Context` header), the model, the chat and its previous step.
fn context(
    app: &App,
    headers: &HeaderMap,
    enforce: Option<Value>,
    model: &Model,
    session: &SessionStage,
) -> Result<Context, Rejection> {
    let facts = facts::request_facts(
        enforce,
        headers.get(names::CONTEXT).map(|v| v.as_bytes()),
        app.config.max_context_bytes,
    )
    .map_err(rejected("bad_request"))?;
    let mut context = Context::from(facts);
    context.insert("model", model.id.clone());
    if let Some(id) = &session.chat_id {
        context.insert("chat_id", id.clone());
    }
    if let Some(last) = session.found.as_ref().and_then(|s| s.steps.last()) {
        context.insert("previous_step", last.step.clone());
    }
    Ok(context)
}

fn overloaded(app: &App) -> ApiError {
    ApiError {
        retry_after: Some(app.config.retry_after_secs),
        ..ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            "too_many_requests",
            "This proxy is busy checking other answers. Please try again in a moment.",
        )
    }
}

/// Whether the chat's runner session can be continued on this replica: `Ok(true)` when it was
/// started here (or there is none), `Ok(false)` when the replica that started it is gone (the
/// caller starts a fresh one), an error when that replica is alive (the load balancer sent the
/// chat to the wrong replica) or cannot be asked. A runner session (a Claude CLI session) lives
/// in its replica's files: resuming it elsewhere would fail or continue another conversation.
async fn runner_session_here(
    app: &App,
    chat_id: &str,
    session: &SessionStatus,
) -> Result<bool, ApiError> {
    let (Some(shared), Some(_), Some(owner)) = (
        &app.shared,
        &session.runner_session_id,
        &session.runner_replica,
    ) else {
        return Ok(true);
    };
    if owner == shared.replica() {
        return Ok(true);
    }
    let routing = "Route each chat to one replica (hash on the X-OpenWebUI-Chat-Id header), see the README's Operating section.";
    match shared.is_alive(owner, chat_id).await {
        Some(false) => {
            tracing::warn!(
                chat_id,
                owner = %owner,
                "the chat's runner session was on a replica that is gone: starting a fresh session with the conversation and step history"
            );
            Ok(false)
        }
        Some(true) => Err(ApiError::new(
            StatusCode::CONFLICT,
            "invalid_request_error",
            "session_on_other_replica",
            format!(
                "This chat's model session lives on the proxy replica `{owner}`, but the request reached `{}`. {routing}",
                shared.replica()
            ),
        )),
        None => Err(ApiError {
            retry_after: Some(app.config.retry_after_secs),
            ..ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "session_on_other_replica",
                format!(
                    "This chat's model session lives on the proxy replica `{owner}`, and whether that replica is still up cannot be checked right now (shared state unavailable). Please try again in a moment. {routing}"
                ),
            )
        }),
    }
}

/// Puts hidden step markers back on the assistant turns a client sends back, so the model sees
/// its answers as it wrote them and is not taught to drop the marker. A turn is recognized by
/// the digest of what the client received; an edited turn stays as the client sent it.
fn restore_hidden_markers(
    messages: &mut [Message],
    session: &SessionStatus,
    extract: &crate::hooks::StepExtractor,
) {
    for message in messages.iter_mut() {
        if message.role != Role::Assistant || extract(&message.content).is_some() {
            continue;
        }
        let digest = answer_digest(&message.content);
        let hidden = session
            .steps
            .iter()
            .rev()
            .filter_map(|s| s.hidden.as_ref())
            .find(|h| h.answer_digest == digest);
        if let Some(hidden) = hidden {
            let text = message.content.trim_end();
            message.content = format!("{text}\n\n{}", hidden.marker);
        }
    }
}

/// The `X-Enforce-Profile` value naming the profile enforced (none when unnamed).
fn profile_header(profile: &str) -> Option<HeaderValue> {
    HeaderValue::from_str(profile)
        .ok()
        .filter(|_| !profile.is_empty())
}

/// The headers that say how an answer was checked, the same on every surface, in the order
/// an answer carries them.
const ENFORCEMENT_HEADERS: [HeaderName; 4] = [
    names::STATUS,
    names::VALIDATION_STATUS,
    names::ATTEMPTS,
    names::OVERHEAD,
];

/// The request's time in the proxy minus the time spent waiting for the model, in µs.
fn overhead_us(turn: &Turn, outcome: &Outcome) -> u64 {
    let total = u64::try_from(turn.started.elapsed().as_micros()).unwrap_or(u64::MAX);
    total.saturating_sub(outcome.runner_us)
}

/// The values of [`ENFORCEMENT_HEADERS`] for `outcome` (`None`: a value no header can carry,
/// left out).
fn enforcement_values(overhead_us: u64, outcome: &Outcome) -> [Option<HeaderValue>; 4] {
    let status = HeaderValue::from_static(outcome.status.as_str());
    let validation_status = crate::verdict::validation_status(outcome);
    // The common values without a copy: no status (every check passed), a few attempts.
    let validation_status = if validation_status.is_empty() {
        Ok(HeaderValue::from_static(""))
    } else {
        HeaderValue::from_str(&validation_status)
    };
    const FEW: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    let attempts = outcome.attempts.len();
    let attempts = match FEW.get(attempts) {
        Some(few) => HeaderValue::from_static(few),
        None => HeaderValue::from(attempts),
    };
    // `X-Enforce-Profile` is the pipeline's to set, on refusals too.
    // Milliseconds with three decimals, written by hand: `format!` of a float costs the hot
    // path more than the rest of the headers.
    let mut overhead_ms = String::with_capacity(12);
    push_digits::<10>(&mut overhead_ms, overhead_us / 1000, 1);
    overhead_ms.push('.');
    push_digits::<10>(&mut overhead_ms, overhead_us % 1000, 3);
    [
        Some(status),
        validation_status.ok(),
        Some(attempts),
        HeaderValue::from_str(&overhead_ms).ok(),
    ]
}

/// Sets the enforcement headers whose values are `values` (in [`ENFORCEMENT_HEADERS`]'s order).
fn set_enforcement_headers(headers: &mut HeaderMap, values: [Option<HeaderValue>; 4]) {
    for (name, value) in ENFORCEMENT_HEADERS.iter().zip(values) {
        if let Some(value) = value {
            headers.insert(name, value);
        }
    }
}

/// A checked answer's JSON response with its enforcement headers.
fn answer_response(body: Bytes, values: [Option<HeaderValue>; 4]) -> Response {
    static HEADERS: LazyLock<HeaderMap> = LazyLock::new(|| {
        headers_template([(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )])
    });
    with_enforcement_headers(&HEADERS, Body::from(body), values)
}

/// A whole stream's response (its outcome known before its first byte) with its enforcement
/// headers.
fn stream_response(events: Vec<u8>, values: [Option<HeaderValue>; 4]) -> Response {
    static HEADERS: LazyLock<HeaderMap> =
        LazyLock::new(|| headers_template(stream::event_stream_headers()));
    with_enforcement_headers(&HEADERS, Body::from(events), values)
}

/// A map of the `fixed` headers, then the enforcement headers with empty values: the
/// template [`with_enforcement_headers`] copies.
fn headers_template<const N: usize>(fixed: [(HeaderName, HeaderValue); N]) -> HeaderMap {
    let mut headers = HeaderMap::with_capacity(crate::headers::ANSWER_HEADERS + N);
    for (name, value) in fixed {
        headers.insert(name, value);
    }
    for name in ENFORCEMENT_HEADERS {
        headers.insert(name, HeaderValue::from_static(""));
    }
    headers
}

/// A response of `body` with the headers of `template` ([`headers_template`]), the
/// enforcement headers' values `values`. The headers are a copy of the map made once, the
/// values set in place by position: inserting each by name hashed the name every time (about
/// 260 instructions an insert). A value missing (none a header can carry) leaves its header
/// out, as inserting does.
fn with_enforcement_headers(
    template: &HeaderMap,
    body: Body,
    values: [Option<HeaderValue>; 4],
) -> Response {
    let fixed = template.len().saturating_sub(ENFORCEMENT_HEADERS.len());
    let mut response = Response::new(body);
    if values.iter().any(Option::is_none) {
        let headers = response.headers_mut();
        headers.reserve(crate::headers::ANSWER_HEADERS + fixed);
        for (name, value) in template.iter().take(fixed) {
            headers.insert(name, value.clone());
        }
        set_enforcement_headers(headers, values);
        return response;
    }
    let mut headers = template.clone();
    // The fixed headers, then the enforcement headers in their order.
    for (slot, value) in headers
        .values_mut()
        .skip(fixed)
        .zip(values.into_iter().flatten())
    {
        *slot = value;
    }
    *response.headers_mut() = headers;
    response
}

/// A request's id: the surface's prefix, `enf`, the process's start time and the request's
/// number in hex (`chatcmpl-enf6b07e13d00002a`), as `format!("{prefix}enf{started:x}{n:06x}")`
/// writes it, without the formatting machinery on every request.
fn turn_id(prefix: &str, started: u64, n: u64) -> String {
    let mut id = String::with_capacity(prefix.len() + 3 + 16 + 16);
    id.push_str(prefix);
    id.push_str("enf");
    push_digits::<16>(&mut id, started, 1);
    push_digits::<16>(&mut id, n, 6);
    id
}

/// Appends `value` in `RADIX` (10 or 16, lower-case), left-padded with zeros to `width`. The
/// radix is a constant so that each digit costs a multiplication, not a division.
pub(crate) fn push_digits<const RADIX: u64>(out: &mut String, mut value: u64, width: usize) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut buf = [0u8; 64];
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = DIGITS[(value % RADIX) as usize];
        value /= RADIX;
        if value == 0 {
            break;
        }
    }
    for _ in buf.len() - start..width {
        out.push('0');
    }
    // ASCII digits: always UTF-8.
    out.push_str(std::str::from_utf8(&buf[start..]).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The proxy's own headers are looked up where a request sent one of them, and only then:
    /// the SDKs' own `x-` headers do not count.
    #[test]
    fn own_headers_are_looked_up_where_one_was_sent() {
        let mut sdk = HeaderMap::new();
        sdk.insert("x-stainless-os", HeaderValue::from_static("Linux"));
        sdk.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer k"));
        assert!(own_headers(&sdk).is_empty());
        for name in [
            names::PROFILE,
            names::CONTEXT,
            names::CHAT_ID,
            names::MAX_RETRIES,
            names::TOKEN_BUDGET,
        ] {
            let mut sent = sdk.clone();
            sent.insert(name.clone(), HeaderValue::from_static("v"));
            let own = own_headers(&sent);
            assert_eq!(
                own.get(&name).map(HeaderValue::as_bytes),
                Some(&b"v"[..]),
                "{name}"
            );
        }
    }

    /// An answer's headers, set in place on a copy, are the names, values and order that
    /// inserting each by name gives, a value no header can carry left out as there: for a
    /// JSON answer and for a whole stream.
    #[test]
    fn answer_headers_set_in_place_are_the_inserted_ones() {
        let headers = |response: Response| {
            response
                .headers()
                .iter()
                .map(|(name, value)| (name.to_string(), value.as_bytes().to_vec()))
                .collect::<Vec<_>>()
        };
        let cases = [
            [Some("passed"), Some(""), Some("1"), Some("0.042")],
            [
                Some("failed"),
                Some("missing_field"),
                Some("12"),
                Some("13.250"),
            ],
            [Some("passed"), None, Some("2"), Some("0.001")],
        ];
        for case in cases {
            let values = case.map(|v| v.map(|v| HeaderValue::from_str(v).expect("a value")));
            let mut inserted = json_response(Bytes::from_static(b"{}"));
            set_enforcement_headers(inserted.headers_mut(), values.clone());
            let in_place = answer_response(Bytes::from_static(b"{}"), values.clone());
            assert_eq!(headers(in_place), headers(inserted), "{case:?}");
            let mut inserted = stream::event_stream(Body::empty());
            set_enforcement_headers(inserted.headers_mut(), values.clone());
            let in_place = stream_response(Vec::new(), values);
            assert_eq!(headers(in_place), headers(inserted), "{case:?}, streamed");
        }
    }

    #[test]
    fn ids_and_overheads_are_written_as_format_writes_them() {
        for (started, n) in [
            (0, 0),
            (0x6b07e13d, 0x2a),
            (u64::MAX, u64::MAX),
            (1, 0x1234567),
        ] {
            assert_eq!(
                turn_id("resp_", started, n),
                format!("resp_enf{started:x}{n:06x}")
            );
        }
        for us in [0u64, 1, 999, 1000, 1001, 204_000, 123_456_789, u64::MAX] {
            let mut written = String::new();
            push_digits::<10>(&mut written, us / 1000, 1);
            written.push('.');
            push_digits::<10>(&mut written, us % 1000, 3);
            assert_eq!(written, format!("{}.{:03}", us / 1000, us % 1000));
            if us < 1 << 50 {
                assert_eq!(written, format!("{:.3}", us as f64 / 1000.0));
            }
        }
    }
}
