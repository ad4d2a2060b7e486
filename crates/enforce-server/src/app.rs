//! The HTTP handlers.

//! The request handlers of the API surfaces themselves are [`pipeline::serve`](crate::pipeline::serve)
//! instantiated per surface (see `Server::router`).

use crate::auth;
use crate::error::ApiError;
use crate::state::App;
use axum::extract::{Extension, Path, Request as HttpRequest, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The key check of the routes outside the request pipeline (which checks keys itself, as
/// its first stage): the request's grant goes on as an extension.
pub(crate) async fn require_key(
    State(app): State<Arc<App>>,
    mut request: HttpRequest,
    next: Next,
) -> Response {
    match auth::authenticate(&app, request.headers()) {
        Ok(Some(grant)) => {
            request.extensions_mut().insert(grant);
        }
        Ok(None) => {}
        // Each surface answers in its own error shape.
        Err(error)
            if crate::passthrough::api_path(request.uri().path()).starts_with("/messages") =>
        {
            return crate::messages::error_response(*error);
        }
        Err(error) => return error.into_response(),
    }
    next.run(request).await
}

pub(crate) async fn list_models(
    State(app): State<Arc<App>>,
    granted: Option<Extension<auth::Granted>>,
) -> Json<Value> {
    let grant = crate::controls::grant(&app, granted.map(|Extension(g)| g));
    let data: Vec<Value> = app
        .model_order
        .iter()
        .filter(|id| grant.is_none_or(|g| g.allows_model(id)))
        .map(|id| model_object(&app, id))
        .collect();
    Json(json!({"object": "list", "data": data}))
}

fn model_object(app: &App, id: &str) -> Value {
    json!({"id": id, "object": "model", "created": app.started, "owned_by": "enforce"})
}

/// One of this proxy's models; another id is asked of the default upstream when there is
/// one (a client looking up the upstream's models through this base URL), else a 404.
pub(crate) async fn get_model(
    State(app): State<Arc<App>>,
    granted: Option<Extension<auth::Granted>>,
    Path(id): Path<String>,
    request: HttpRequest,
) -> Response {
    let grant = crate::controls::grant(&app, granted.map(|Extension(g)| g));
    if let Some(grant) = grant.filter(|g| !g.allows_model(&id)) {
        return crate::controls::model_forbidden(grant, &id).into_response();
    }
    if app.models.contains_key(&id) {
        Json(model_object(&app, &id)).into_response()
    } else if crate::passthrough::has_default(&app) {
        crate::passthrough::forward(app, request).await
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

/// `GET /` (and `HEAD /`, which clients such as the Claude CLI send to see that the base URL
/// answers): what this is and what it serves, without a key.
pub(crate) async fn root() -> Json<Value> {
    let endpoints: Vec<String> = ENDPOINTS
        .iter()
        .map(|(method, path)| format!("{method} {path}"))
        .collect();
    Json(json!({
        "name": "enforce",
        "version": env!("CARGO_PKG_VERSION"),
        "description": "An enforcement proxy: answers are checked against their contract before they are sent.",
        "endpoints": endpoints,
    }))
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
            HeaderValue::from_static(crate::metrics::CONTENT_TYPE),
        )],
        app.metrics.render(),
    )
        .into_response()
}

pub(crate) async fn get_session(
    State(app): State<Arc<App>>,
    granted: Option<Extension<auth::Granted>>,
    Path(id): Path<String>,
) -> Response {
    // A session holds no model id to check a limited key against: such keys may not read them.
    let grant = crate::controls::grant(&app, granted.map(|Extension(g)| g));
    if let Some(grant) = grant.filter(|g| g.is_limited()) {
        return crate::controls::sessions_forbidden(grant).into_response();
    }
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

/// A stored Responses answer, as it was sent.
pub(crate) async fn get_response(
    State(app): State<Arc<App>>,
    granted: Option<Extension<auth::Granted>>,
    Path(id): Path<String>,
) -> Response {
    let grant = crate::controls::grant(&app, granted.map(|Extension(g)| g));
    let stored = app.sessions.stored_response(&id).await;
    // Another model's answer is not there for a key limited to other models.
    match stored.filter(|s| crate::controls::may_read(grant, s)) {
        Some(stored) => crate::pipeline::json_response(stored.response),
        None => ApiError::new(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "response_not_found",
            format!("No response with id '{id}' is stored on this proxy (it was sent with `store: false`, has expired, or never existed)."),
        )
        .into_response(),
    }
}

/// What this proxy serves, for the error that answers any other route or method. A surface's
/// routes are listed here when `Server::router` mounts them; each answers without `/v1` too.
pub(crate) const ENDPOINTS: &[(&str, &str)] = &[
    ("POST", "/v1/chat/completions"),
    ("POST", "/v1/messages"),
    ("POST", "/v1/messages/count_tokens"),
    ("POST", "/v1/responses"),
    ("GET", "/v1/responses/{id}"),
    ("GET", "/v1/models"),
    ("GET", "/v1/models/{id}"),
    ("GET", "/v1/sessions/{id}"),
    ("GET", "/"),
    ("GET", "/healthz"),
    ("GET", "/metrics"),
    (
        "ANY",
        "/v1/* (any other endpoint: forwarded to the model's upstream)",
    ),
];

fn served() -> String {
    ENDPOINTS
        .iter()
        .map(|(method, path)| format!("{method} {path}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Whether `path` is an instance of the route `pattern` (`{…}` matches one segment).
fn matches(pattern: &str, path: &str) -> bool {
    let (mut pattern, mut path) = (pattern.split('/'), path.split('/'));
    loop {
        match (pattern.next(), path.next()) {
            (None, None) => return true,
            (Some(p), Some(s)) if p == s || (p.starts_with('{') && !s.is_empty()) => {}
            _ => return false,
        }
    }
}

/// Any route this proxy does not serve: an API endpoint it does not enforce is forwarded
/// upstream ([`crate::passthrough`]); anything else is a 404 in the OpenAI error shape that
/// names the routes it does serve (an empty 404 shows users only "Not Found").
pub(crate) async fn unknown_route(State(app): State<Arc<App>>, request: HttpRequest) -> Response {
    if crate::passthrough::forwards(request.uri().path()) {
        return crate::passthrough::forward(app, request).await;
    }
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let mut error = ApiError::new(
        StatusCode::NOT_FOUND,
        "invalid_request_error",
        "unknown_route",
        format!(
            "This enforce proxy does not serve {method} {path}. It serves: {}. Point the client's base URL at this proxy's /v1.",
            served()
        ),
    );
    error.param = None;
    error.into_response()
}

/// A served route called with another method: a 405 naming the methods it takes.
pub(crate) async fn wrong_method(request: HttpRequest) -> Response {
    let (method, path) = (request.method().clone(), request.uri().path().to_string());
    let allowed: Vec<&str> = ENDPOINTS
        .iter()
        .filter(|(_, pattern)| matches(pattern, &path))
        .map(|(method, _)| *method)
        .collect();
    let error = ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "invalid_request_error",
        "method_not_allowed",
        format!(
            "{path} does not take {method}; it takes {}. This proxy serves: {}.",
            allowed.join(", "),
            served()
        ),
    );
    let mut response = error.into_response();
    if let Ok(allow) = HeaderValue::from_str(&allowed.join(", ")) {
        response.headers_mut().insert(header::ALLOW, allow);
    }
    response
}
