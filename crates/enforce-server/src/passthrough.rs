//! The endpoints this proxy does not enforce (`/v1/embeddings`, `/v1/completions`, audio,
//! images, files, moderations, ...), forwarded as they are to the upstream of the model the
//! request names, so that a client whose base URL points here keeps everything that URL served.
//!
//! The request goes through the same admission as an enforced one (the key, the concurrency
//! permit, the body limit), is counted in `enforce_requests_total` with status `passthrough`
//! and leaves a `passthrough` audit line. The upstream gets the runner's key, never the
//! client's key to this proxy. Bodies stream both ways, except a JSON request body, which is
//! read (within the body limit) to find its `model`.

use crate::auth::{self, Granted};
use crate::config::{Model, Upstream};
use crate::controls;
use crate::error::ApiError;
use crate::pipeline::{read_body, take_permit, Rejection};
use crate::state::{Admission, App};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use std::sync::Arc;

/// The first path segments (after an optional `/v1`) of the OpenAI API resources forwarded
/// when asked without `/v1`; with `/v1`, every path this proxy does not serve is forwarded.
const UNPREFIXED_RESOURCES: &[&str] = &[
    "embeddings",
    "completions",
    "audio",
    "images",
    "files",
    "uploads",
    "moderations",
    "batches",
    "fine_tuning",
    "vector_stores",
];

/// Headers that belong to one connection, not to the request or answer (RFC 9110 §7.6.1),
/// and the ones this module sets itself.
const NOT_FORWARDED: &[HeaderName] = &[
    header::CONNECTION,
    header::HOST,
    header::CONTENT_LENGTH,
    header::TRANSFER_ENCODING,
    header::TE,
    header::TRAILER,
    header::UPGRADE,
    header::PROXY_AUTHORIZATION,
    header::PROXY_AUTHENTICATE,
    // The client's key to this proxy.
    header::AUTHORIZATION,
];

/// `path` without its leading `/v1`, as routes answer both ways.
pub(crate) fn api_path(path: &str) -> &str {
    match path.strip_prefix("/v1") {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => rest,
        _ => path,
    }
}

/// Whether a request to `path`, a route this proxy does not serve, is forwarded upstream.
pub(crate) fn forwards(path: &str) -> bool {
    let rest = api_path(path);
    if rest.len() < path.len() {
        return rest.len() > 1;
    }
    let first = rest.trim_start_matches('/').split('/').next().unwrap_or("");
    UNPREFIXED_RESOURCES.contains(&first)
}

/// Whether some model can forward requests that name none of this proxy's models.
pub(crate) fn has_default(app: &App) -> bool {
    default_model(app).is_some_and(|model| model.passthrough.is_some())
}

/// The model whose upstream takes the requests that name no model of this proxy: the first
/// configured one that can forward, else the first (which then refuses them).
fn default_model(app: &App) -> Option<&Arc<Model>> {
    let mut models = app.model_order.iter().filter_map(|id| app.models.get(id));
    let first = models.clone().next();
    models.find(|model| model.passthrough.is_some()).or(first)
}

/// The `model` of a JSON request body.
#[derive(serde::Deserialize)]
struct Named {
    model: Option<String>,
}

/// A request through admission, ready to be sent on.
struct Admitted {
    model: Arc<Model>,
    upstream: Upstream,
    /// A read JSON body goes with its length; any other streams as it comes.
    body: reqwest::Body,
    key: Option<String>,
    permit: Admission,
}

/// Forwards `request` to the upstream of the model it names (or the default one) and answers
/// with what the upstream answered.
pub(crate) async fn forward(app: Arc<App>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let granted = match auth::authenticate(&app, &parts.headers) {
        Ok(granted) => granted,
        Err(error) => return error.into_response(),
    };
    let admitted = match admit(&app, granted, &parts.headers, body).await {
        Ok(admitted) => admitted,
        Err(rejection) => return rejection.refused(&app, granted).into_response(),
    };
    let (model, key) = (admitted.model.id.clone(), admitted.key.clone());
    let response = send(&app, &parts, admitted).await;
    if let Some(series) = app.series.get(&model) {
        series.count_request("passthrough");
    }
    if let Some(audit) = &app.audit {
        let status = response.status().as_u16();
        audit.append(audit_line(&model, key.as_deref(), parts.uri.path(), status));
    }
    response
}

/// Sends the admitted request upstream: its answer, or a 502 when there was none.
async fn send(app: &App, parts: &axum::http::request::Parts, admitted: Admitted) -> Response {
    let mut url = format!(
        "{}{}",
        admitted.upstream.base_url.trim_end_matches('/'),
        api_path(parts.uri.path())
    );
    if let Some(query) = parts.uri.query() {
        url.push('?');
        url.push_str(query);
    }
    let sent = app
        .http
        .request(parts.method.clone(), url)
        .headers(upstream_headers(&parts.headers, &admitted.upstream))
        .body(admitted.body)
        .send();
    match tokio::time::timeout(app.config.request_timeout, sent).await {
        Ok(Ok(answer)) => respond(answer, admitted.permit),
        Ok(Err(error)) => upstream_failed(&format!("could not be reached: {error}")),
        Err(_) => upstream_failed("did not answer in time"),
    }
}

/// Admission: the permit, the body (a JSON one read to find its `model`, any other streamed
/// within the body limit), the model and its upstream.
async fn admit(
    app: &Arc<App>,
    granted: Option<Granted>,
    headers: &HeaderMap,
    body: Body,
) -> Result<Admitted, Rejection> {
    let mut permit = take_permit(app)?;
    let (named, body) = if is_json(headers) {
        let bytes = read_body(app, headers, body, &mut permit).await?;
        let named = serde_json::from_slice::<Named>(&bytes)
            .ok()
            .and_then(|n| n.model);
        (named, reqwest::Body::from(bytes))
    } else {
        let limit = app.config.max_body_bytes;
        if declared_length(headers).is_some_and(|length| length > limit) {
            return Err(Rejection::new("body_too_large", too_large(limit)));
        }
        (None, reqwest::Body::wrap_stream(limited(body, limit)))
    };
    let grant = controls::grant(app, granted);
    let own = named.as_deref().and_then(|id| app.models.get(id));
    // A key limited to some models may reach only their upstreams.
    if let Some(grant) = grant.filter(|g| g.is_limited()) {
        let id = own.map_or(named.as_deref().unwrap_or(""), |m| m.id.as_str());
        if own.is_none() || !grant.allows_model(id) {
            let error = controls::model_forbidden(grant, id);
            return Err(Rejection::new("forbidden", error));
        }
    }
    let model = own.or_else(|| default_model(app)).cloned().ok_or_else(|| {
        Rejection::new(
            "passthrough_unsupported",
            unsupported("this proxy serves no model"),
        )
    })?;
    let upstream = model.passthrough.clone().ok_or_else(|| {
        let runner = model.runner_kind.as_deref().unwrap_or("custom");
        let why = format!(
            "model `{}` is served by a `{runner}` runner, which has no HTTP API to forward it to",
            model.id
        );
        Rejection::new("passthrough_unsupported", unsupported(&why)).asked_for(&model.id)
    })?;
    Ok(Admitted {
        key: controls::key_name(app, granted).map(str::to_string),
        model,
        upstream,
        body,
        permit,
    })
}

fn is_json(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim_start().starts_with("application/json"))
}

fn declared_length(headers: &HeaderMap) -> Option<usize> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok())
}

fn too_large(limit: usize) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request_error",
        "request_too_large",
        format!("The request body is larger than this proxy accepts ({limit} bytes)."),
    )
}

/// `body` as it comes, failing once it is longer than `limit` bytes.
fn limited(body: Body, limit: usize) -> impl Stream<Item = Result<Bytes, std::io::Error>> {
    let mut seen = 0usize;
    body.into_data_stream().map(move |chunk| {
        let chunk = chunk.map_err(std::io::Error::other)?;
        seen = seen.saturating_add(chunk.len());
        if seen > limit {
            let message = format!("the request body is larger than {limit} bytes");
            return Err(std::io::Error::other(message));
        }
        Ok::<Bytes, std::io::Error>(chunk)
    })
}

/// The client's headers without the connection's, its key and what the upstream's own
/// headers replace, then the upstream's.
fn upstream_headers(client: &HeaderMap, upstream: &Upstream) -> HeaderMap {
    let own: Vec<HeaderName> = upstream
        .headers
        .iter()
        .filter_map(|(name, _)| HeaderName::from_bytes(name.as_bytes()).ok())
        .collect();
    let mut headers: HeaderMap = client
        .iter()
        .filter(|(name, _)| !is_hop_by_hop(name) && *name != "x-api-key" && !own.contains(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    for (name, value) in &upstream.headers {
        let (Ok(name), Ok(mut value)) = (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) else {
            continue;
        };
        value.set_sensitive(true);
        headers.insert(name, value);
    }
    headers
}

fn is_hop_by_hop(name: &HeaderName) -> bool {
    NOT_FORWARDED.contains(name) || name.as_str() == "keep-alive"
}

/// The upstream's answer, its body streamed as it comes; the permit is held until it ends.
fn respond(answer: reqwest::Response, permit: Admission) -> Response {
    let status = answer.status();
    let headers: HeaderMap = answer
        .headers()
        .iter()
        .filter(|(name, _)| !is_hop_by_hop(name))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let body = held(answer.bytes_stream(), permit);
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

/// `stream`, keeping `permit` until it ends.
fn held<S>(stream: S, permit: Admission) -> impl Stream<Item = S::Item> + Send
where
    S: Stream + Send,
{
    stream.map(move |item| {
        let _held = &permit;
        item
    })
}

/// The `passthrough` audit record: `ts`, `model` (whose upstream took it), `key` (when named),
/// `status: "passthrough"`, `path`, `http_status` (the upstream's).
fn audit_line(model: &str, key: Option<&str>, path: &str, http_status: u16) -> String {
    #[derive(serde::Serialize)]
    struct Forwarded<'a> {
        path: &'a str,
        http_status: u16,
    }
    let forwarded = Forwarded { path, http_status };
    crate::audit::short_record(Some(model), key, "passthrough", forwarded)
}

fn unsupported(why: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "invalid_request_error",
        "passthrough_unsupported",
        format!("This proxy does not enforce this endpoint and cannot forward it: {why}."),
    )
}

fn upstream_failed(why: &str) -> Response {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "api_error",
        "upstream_error",
        format!("The upstream of this endpoint {why}."),
    )
    .into_response()
}
