//! Admission: what a request must get before its body is read and while it is answered. The
//! concurrency permit (`max_concurrent`) and the body's share of the replica's body budget
//! (`max_body_bytes_in_flight`), both taken before the body's bytes are read: a request
//! refused for load is refused before a byte of its body is in memory, and the bodies in
//! memory at once never exceed the budget, however many requests are admitted.

use super::{rejected, Rejection};
use crate::error::ApiError;
use crate::state::{Admission, App};
use axum::body::{Body, Bytes, HttpBody};
use axum::http::{header, HeaderMap, StatusCode};
use tokio::sync::Semaphore;

/// `bytes` in the body budget's unit, KiB rounded up (a semaphore's permits are counted in
/// `u32` per acquire: bytes would cap a body at 4 GiB, KiB never matter).
pub(crate) fn kib(bytes: usize) -> usize {
    bytes.div_ceil(1024).min(Semaphore::MAX_PERMITS)
}

/// Admission: this replica's concurrency permit (a 429 when none is free), with no bytes of
/// the body budget yet ([`read_body`] takes them).
pub(crate) fn take_permit(app: &App) -> Result<Admission, Rejection> {
    let refused = || rejected("overloaded")(overloaded(app));
    let concurrency = app
        .limiter
        .clone()
        .try_acquire_owned()
        .map_err(|_| refused())?;
    let body = app
        .body_budget
        .clone()
        .try_acquire_many_owned(0)
        .map_err(|_| refused())?;
    Ok(Admission {
        _concurrency: concurrency,
        body,
    })
}

impl Admission {
    /// Holds at least `bytes` of the body budget: a 429 when the budget has not that much
    /// free (the same refusal as `max_concurrent`'s: the client retries after the others).
    fn reserve(&mut self, app: &App, bytes: usize) -> Result<(), Rejection> {
        let missing = kib(bytes).saturating_sub(self.body.num_permits());
        if missing == 0 {
            return Ok(());
        }
        let more = u32::try_from(missing)
            .ok()
            .and_then(|n| app.body_budget.clone().try_acquire_many_owned(n).ok())
            .ok_or_else(|| rejected("overloaded")(overloaded(app)))?;
        self.body.merge(more);
        Ok(())
    }
}

/// The 429 of a replica at its limits, with `Retry-After`.
pub(super) fn overloaded(app: &App) -> ApiError {
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

/// Admission: the body, at most `max_body_bytes` (and never more than the whole body budget),
/// refused from `Content-Length` before reading when it says more, its bytes reserved in the
/// body budget before they are read, within the request deadline (a 408 for a body sent too
/// slowly).
pub(crate) async fn read_body(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    admission: &mut Admission,
) -> Result<Bytes, Rejection> {
    let deadline = app.config.request_timeout;
    match tokio::time::timeout(deadline, read_body_within(app, headers, body, admission)).await {
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

/// The body, at most the limit, each byte reserved in the body budget before it is read.
async fn read_body_within(
    app: &App,
    headers: &HeaderMap,
    body: Body,
    admission: &mut Admission,
) -> Result<Bytes, Rejection> {
    let limit = app.config.max_body_bytes.min(app.config.body_budget());
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
    let declared = match declared {
        Some(declared) => usize::try_from(declared)
            .ok()
            .filter(|&declared| declared <= limit)
            .ok_or_else(too_large)?,
        None => 0,
    };
    admission.reserve(app, declared)?;
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
        let read = whole.len() + joined.len() + data.len();
        if read > limit {
            return Err(too_large());
        }
        // A body without `Content-Length` (or longer than it said) reserves as it grows.
        admission.reserve(app, read)?;
        if whole.is_empty() && joined.is_empty() {
            whole = data;
        } else {
            if joined.is_empty() {
                // Room for the whole body at once (its bytes are reserved already): grown
                // from a frame, the buffer would be copied as it grew and end up to twice
                // the body's size.
                joined.reserve_exact(declared.max(read));
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
