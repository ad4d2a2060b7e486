//! The HTTP handlers.

use crate::config::ConcurrencyScope;
use crate::error::ApiError;
use crate::facts;
use crate::openai::{self, CompletionId};
use crate::otel::RequestInfo;
use crate::session::{answer_digest, SessionStatus};
use crate::state::{unix_now, App};
use crate::turn::{wait, InFlight, Job, Turn};
use crate::{auth, stream, ENFORCE_STATUS_HEADER};
use axum::body::Body;
use axum::extract::{Path, Request as HttpRequest, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use enforce_core::{Context, Message, Outcome, Role};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tracing::Instrument;

/// The header Open WebUI sends with `ENABLE_FORWARD_USER_INFO_HEADERS`.
const CHAT_ID_HEADER: &str = "x-openwebui-chat-id";
/// A request header naming the profile to enforce instead of the model's own.
pub(crate) const PROFILE_HEADER: &str = "x-enforce-profile";
/// A response header: milliseconds the proxy itself spent on the request (the request's time
/// minus the time spent waiting for the model).
pub(crate) const OVERHEAD_HEADER: &str = "x-enforce-overhead-ms";

pub(crate) async fn require_key(
    State(app): State<Arc<App>>,
    request: HttpRequest,
    next: Next,
) -> Response {
    if !app.config.api_keys.is_empty() {
        let presented = request
            .headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(auth::bearer_token);
        let ok = presented.is_some_and(|key| auth::key_matches(&app.config.api_keys, key));
        if !ok {
            let mut error = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "invalid_request_error",
                "invalid_api_key",
                "Missing or wrong API key. Send `Authorization: Bearer <key>` with a key this proxy accepts.",
            );
            error.param = None;
            return app.reject("unauthorized", error);
        }
    }
    next.run(request).await
}

pub(crate) async fn list_models(State(app): State<Arc<App>>) -> Json<Value> {
    let data: Vec<Value> = app
        .model_order
        .iter()
        .map(|id| model_object(&app, id))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

fn model_object(app: &App, id: &str) -> Value {
    json!({"id": id, "object": "model", "created": app.started, "owned_by": "enforce"})
}

pub(crate) async fn get_model(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    if app.models.contains_key(&id) {
        Json(model_object(&app, &id)).into_response()
    } else {
        ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!("The model `{id}` does not exist on this proxy."),
            )
        }
        .into_response()
    }
}

pub(crate) async fn healthz(State(app): State<Arc<App>>) -> Response {
    if app.draining.load(Ordering::Relaxed) {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({"status": "draining"})),
        )
            .into_response()
    } else {
        // A degraded replica still serves (on local state): it stays in the load balancer.
        let state = match &app.shared {
            None => "local",
            Some(shared) if shared.is_degraded() => "degraded",
            Some(_) => "shared",
        };
        Json(json!({"status": "ok", "models": app.model_order.len(), "state": state}))
            .into_response()
    }
}

pub(crate) async fn metrics(State(app): State<Arc<App>>) -> Response {
    if let Some(hook) = &app.scrape_hook {
        hook(&app.metrics);
    }
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        )],
        app.metrics.render(),
    )
        .into_response()
}

pub(crate) async fn get_session(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    match app.sessions.get(&id).await {
        Some(status) => Json(status).into_response(),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "session_not_found",
            format!("No session `{id}` is known."),
        )
        .into_response(),
    }
}

pub(crate) async fn chat_completions(
    State(app): State<Arc<App>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let limit = app.config.max_body_bytes;
    let too_large = || {
        ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "invalid_request_error",
            "request_too_large",
            format!("The request body is larger than this proxy accepts ({limit} bytes)."),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return app.reject("body_too_large", too_large());
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(bytes) => bytes,
        Err(_) => return app.reject("body_too_large", too_large()),
    };
    let mut chat = match openai::parse_chat_request(&bytes) {
        Ok(chat) => chat,
        Err(e) => return app.reject("bad_request", e),
    };
    let Some(model) = app.models.get(&chat.model).cloned() else {
        let error = ApiError {
            param: Some("model"),
            ..ApiError::new(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "model_not_found",
                format!(
                    "The model `{}` does not exist on this proxy. Available: {}.",
                    chat.model,
                    app.model_order.join(", ")
                ),
            )
        };
        return app.reject("unknown_model", error);
    };
    let mut model = model;
    let profile = headers
        .get(PROFILE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|n| !n.is_empty());
    if let Some(name) = profile {
        match app.profiles.get(name) {
            Some(enforcer) => {
                model.enforcer = enforcer.clone();
                model.profile = name.to_string();
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
                return app.reject("unknown_profile", error);
            }
        }
    }
    let Ok(permit) = app.limiter.clone().try_acquire_owned() else {
        return app.reject("overloaded", overloaded(&app));
    };
    // The model's routes pick the profile before any model call (a classifier counts against
    // the limit above). A profile the caller names in the header is not routed.
    let route = match (model.routes.clone(), profile) {
        (Some(routes), None) => {
            let picked = routes
                .pick(&bytes, &headers, &chat.messages, &model.profile)
                .await;
            if let Some((enforcer, name)) = picked.choice() {
                model.enforcer = enforcer.clone();
                model.profile = name.to_string();
            }
            serde_json::to_value(&picked.record).ok()
        }
        _ => None,
    };

    let header_chat = headers.get(CHAT_ID_HEADER).and_then(|v| v.to_str().ok());
    let chat_id = chat.chat_id(header_chat);
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
                Some(None) => return app.reject("overloaded", overloaded(&app)),
                // Redis failing: this replica's own limit still holds.
                None => None,
            }
        }
        _ => None,
    };
    let mut session = match &chat_id {
        Some(id) => app.sessions.get(id).await,
        None => None,
    };
    if let (Some(id), Some(found)) = (&chat_id, &session) {
        match runner_session_here(&app, id, found).await {
            Ok(true) => {}
            // Its replica is gone: a fresh runner session with the conversation the client sent
            // and the chat's step history.
            Ok(false) => {
                session = session.map(|s| SessionStatus {
                    runner_session_id: None,
                    ..s
                });
            }
            Err(error) => return app.reject("session_on_other_replica", error),
        }
    }
    if model.options.hide_step_marker {
        if let (Some(session), Some(extract)) = (&session, &app.step_extractor) {
            restore_hidden_markers(&mut chat.messages, session, extract);
        }
    }
    let facts = facts::request_facts(
        chat.enforce.take(),
        headers.get(facts::CONTEXT_HEADER).map(|v| v.as_bytes()),
        app.config.max_context_bytes,
    );
    let mut context = match facts {
        Ok(facts) => Context::from(facts),
        Err(e) => return app.reject("bad_request", e),
    };
    context.insert("model", model.id.clone());
    if let Some(id) = &chat_id {
        context.insert("chat_id", id.clone());
    }
    if let Some(last) = session.as_ref().and_then(|s| s.steps.last()) {
        context.insert("previous_step", last.step.clone());
    }
    let n = app.next_id.fetch_add(1, Ordering::Relaxed);
    let ids = CompletionId {
        id: format!("chatcmpl-enf{:x}{n:06x}", app.started),
        created: unix_now(),
        model: model.id.clone(),
    };
    let span = tracing::info_span!(
        "chat_completion",
        model = %model.id,
        id = %ids.id,
        chat_id = chat_id.as_deref().unwrap_or(""),
        stream = chat.stream,
    );
    let stream = chat.stream;
    let trace = app.telemetry.as_ref().map(|telemetry| {
        telemetry.request(
            &headers,
            RequestInfo {
                model: &model.id,
                upstream_model: model.upstream_model.as_deref(),
                request_id: &ids.id,
                chat_id: chat_id.as_deref(),
                profile: profile.or(route.as_ref().map(|_| model.profile.as_str())),
                stream,
            },
        )
    });
    let turn = Turn {
        _in_flight: InFlight::new(app.metrics.clone()),
        app,
        model,
        chat,
        chat_id,
        ids,
        started: Instant::now(),
        trace,
        route,
        _permit: permit,
        _slot: slot,
    };
    let session_id = session.and_then(|s| s.runner_session_id);
    let job = span.in_scope(|| turn.start(session_id, context));
    if stream {
        // Routing is done: a stream names its profile in its headers like a completion.
        let profile = profile_header(&turn.model.profile);
        let mut response = stream::respond(turn, job, span);
        if let Some(profile) = profile {
            response.headers_mut().insert(PROFILE_HEADER, profile);
        }
        response
    } else {
        respond_json(turn, job).instrument(span).await
    }
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
    extract: &crate::StepExtractor,
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

/// The headers that say how a completion was checked.
fn enforcement_headers(headers: &mut HeaderMap, turn: &Turn, outcome: &Outcome) {
    headers.insert(
        ENFORCE_STATUS_HEADER,
        HeaderValue::from_static(outcome.status.as_str()),
    );
    if let Ok(value) = HeaderValue::from_str(&crate::openai::validation_status(outcome)) {
        headers.insert(crate::VALIDATION_STATUS_HEADER, value);
    }
    headers.insert(
        "x-enforce-attempts",
        HeaderValue::from(outcome.attempts.len()),
    );
    if let Some(profile) = profile_header(&turn.model.profile) {
        headers.insert(PROFILE_HEADER, profile);
    }
    // The request's time in the proxy minus the time spent waiting for the model.
    let total = u64::try_from(turn.started.elapsed().as_micros()).unwrap_or(u64::MAX);
    let overhead_ms = total.saturating_sub(outcome.runner_us) as f64 / 1000.0;
    if let Ok(value) = HeaderValue::from_str(&format!("{overhead_ms:.3}")) {
        headers.insert(OVERHEAD_HEADER, value);
    }
}

async fn respond_json(turn: Turn, mut job: Job) -> Response {
    let ended = wait(&mut job).await;
    match turn.conclude(ended).await {
        Ok((text, outcome)) => {
            let mut body = turn.ids.completion(&text, &outcome);
            turn.add_route(&mut body["enforcement"]);
            let mut response = Json(body).into_response();
            enforcement_headers(response.headers_mut(), &turn, &outcome);
            response
        }
        Err(error) => error.into_response(),
    }
}
