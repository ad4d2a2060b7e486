//! The request pipeline every API surface shares. A surface ([`Surface`]) parses its request
//! body into an [`Ask`] (the surface-neutral turn) and renders the outcome in its own format;
//! everything between runs once, here, in this order:
//!
//! 1. admission: the concurrency permit ([`take_permit`]), then the body ([`read_body`]: its
//!    size, its bytes reserved in the replica's body budget, within the request deadline), then
//!    parse (the surface); the key check ([`crate::auth::authenticate`]) runs first. Both come
//!    before the body's bytes are read: a request refused for load is refused before a byte of
//!    its body is in memory, and the bodies in memory at once stay within
//!    `max_body_bytes_in_flight`;
//! 2. model and profile resolution ([`resolve_model`]: the model id, `X-Enforce-Profile`);
//! 3. routing ([`route`]: the model's routes pick the profile);
//! 4. session ([`open_session`]: chat id, global slot, session and replica check, hidden
//!    markers put back), facts and context ([`context`]);
//! 5. enforcement ([`Turn::start`], polled by the request that waits for it: no task of its
//!    own; [`Turn::conclude`] after it);
//! 6. rendering (the surface: [`Surface::answer_bytes`] or its [`StreamWriter`], [`Surface::refuse`]),
//!    with the enforcement headers set here for every surface ([`enforcement_headers`]).

use crate::auth::Granted;
use crate::config::Model;
use crate::controls;
use crate::error::ApiError;
use crate::facts;
use crate::headers::PROFILE_HEADER;
use crate::otel::RequestInfo;
use crate::state::{unix_now, App};
use crate::stream::{self, Start, StreamWriter};
use crate::turn::{wait, InFlight, Turn, TurnId};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::Response;
use enforce_core::{Context, Enforcer, Message, Outcome};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;
use std::sync::{Arc, LazyLock};
use std::time::Instant;
use tracing::Instrument;

use crate::headers as names;

mod admission;
mod body;
mod in_place;
mod session_stage;
use admission::overloaded;
pub(crate) use admission::{kib, read_body, take_permit};
pub(crate) use body::{model_of, non_empty, present, read_request, shown_role, stream_of};
use session_stage::{open_session, SessionStage};

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
    fn parse(body: Bytes) -> Result<(Ask, Self::Kept), ApiError>;

    /// The error in this surface's envelope, with the shared headers ([`ApiError::headers`]).
    fn refuse(error: ApiError) -> Response;

    /// The answer as the bytes of its JSON body: the pipeline sends them with the enforcement
    /// headers and stores them when the request asked for it.
    fn answer_bytes(turn: &Turn, kept: &Self::Kept, text: &str, outcome: &Outcome) -> Vec<u8>;

    /// The writer of a streamed answer.
    fn writer(turn: &Turn, kept: Self::Kept) -> Self::Writer;
}

/// An answer's JSON body, written into room made once for the answer's text and the fields
/// around it (a buffer grown from empty is copied each time it grows).
pub(crate) fn answer_body(text: &str, answer: &impl serde::Serialize) -> Vec<u8> {
    let mut body = Vec::with_capacity(1024 + text.len() + text.len() / 8);
    match serde_json::to_writer(&mut body, answer) {
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
    let mut permit = take_permit(app)?;
    let bytes = read_body(app, headers, body, &mut permit).await?;
    // Kept for a route that reads the body as sent; the reader then finds the body shared
    // and copies its text, which it otherwise takes in place.
    let for_routes = if app.routes_read_the_body {
        bytes.clone()
    } else {
        Bytes::new()
    };
    let (mut ask, kept) = S::parse(bytes).map_err(rejected("bad_request"))?;
    let grant = controls::grant(app, granted);
    let Prepared {
        model,
        route,
        request_limits,
        session,
        context,
    } = match prepare(app, grant, headers, for_routes, &mut ask).await {
        Ok(prepared) => prepared,
        Err(rejection) => return Err(rejection.asked_for(&ask.model)),
    };
    let asked = crate::cache::Asked {
        surface: S::NAME,
        messages: &ask.messages,
        params: &ask.params,
        context: &context,
        headers,
        grant,
    };
    let (cache, cached) = crate::cache::look_up(&app.caches, &app.metrics, &model, &asked).await;
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
    let turn = Turn {
        _in_flight: InFlight::new(&app.in_flight),
        conversation: ask.store.then(Default::default),
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
        cache,
        _permit: permit,
        _slot: session.slot,
    };
    let runner_session = session.found.and_then(|s| s.runner_session_id);
    let job = match cached {
        Some(outcome) => {
            turn.keep_conversation(ask.messages);
            crate::turn::Job::ended_with(outcome, turn.deadline())
        }
        None => span.in_scope(|| turn.start(ask.messages, ask.params, runner_session, context)),
    };
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

/// Resolution, routing, the key's limits, session and context of a parsed request. `body` is
/// the request body as sent when a route reads it (empty otherwise).
async fn prepare(
    app: &Arc<App>,
    grant: Option<&crate::config::KeyGrant>,
    headers: &HeaderMap,
    body: Bytes,
    ask: &mut Ask,
) -> Result<Prepared, Rejection> {
    let own = own_headers(headers);
    controls::admit_model(grant, &ask.model, own)?;
    let (mut model, header_profile) = resolve_model(app, grant, &ask.model, own)?;
    let route = match header_profile {
        Some(_) => None,
        None => route(&mut model, &body, &ask.params, headers, &ask.messages).await,
    };
    // Routing was the body's last reader: it is freed before the stages that may wait (a
    // continuation's or a session's store) and before the enforcement.
    drop(body);
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
        let cache = turn.cache.header();
        let writer = S::writer(&turn, kept);
        // Boxed: the stream driver's state would otherwise make every request's future, the
        // ones not streamed too, larger by its size, and axum copies that future into a box.
        let mut response = match Box::pin(stream::respond(turn, job, span, writer)).await {
            Start::Refused(error) => S::refuse(error),
            Start::Whole(events, turn, outcome) => set_enforcement_headers(
                stream::event_stream(Body::from(events)),
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
        if let Some(cache) = cache {
            headers.insert(names::CACHE, cache);
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
                set_enforcement_headers(
                    json_response(body),
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
        if let Some(cache) = turn.cache.header() {
            response.headers_mut().insert(names::CACHE, cache);
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
/// left out). `X-Enforce-Profile` is the pipeline's to set, on refusals too.
fn enforcement_values(overhead_us: u64, outcome: &Outcome) -> [Option<HeaderValue>; 4] {
    let validation_status = crate::verdict::validation_status(outcome);
    // Milliseconds with three decimals.
    let overhead_ms = format!("{}.{:03}", overhead_us / 1000, overhead_us % 1000);
    [
        Some(HeaderValue::from_static(outcome.status.as_str())),
        HeaderValue::from_str(&validation_status).ok(),
        Some(HeaderValue::from(outcome.attempts.len())),
        HeaderValue::from_str(&overhead_ms).ok(),
    ]
}

/// Sets the enforcement headers whose values are `values` (in [`ENFORCEMENT_HEADERS`]'s order).
fn set_enforcement_headers(mut response: Response, values: [Option<HeaderValue>; 4]) -> Response {
    let headers = response.headers_mut();
    for (name, value) in ENFORCEMENT_HEADERS.iter().zip(values) {
        if let Some(value) = value {
            headers.insert(name, value);
        }
    }
    response
}

/// A request's id: the surface's prefix, `enf`, the process's start time and the request's
/// number in hex (`chatcmpl-enf6b07e13d00002a`).
fn turn_id(prefix: &str, started: u64, n: u64) -> String {
    format!("{prefix}enf{started:x}{n:06x}")
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
}
