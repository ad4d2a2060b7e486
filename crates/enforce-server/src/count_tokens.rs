//! `POST /v1/messages/count_tokens` (the Anthropic API's token count): asked of the model's
//! upstream when its runner can count (the `anthropic` runner), else an estimate that says it
//! is one. Nothing is enforced: no model answers.

use crate::auth::Granted;
use crate::config::Model;
use crate::controls;
use crate::messages::{error_response, Messages};
use crate::pipeline::{known_model, read_body, take_permit, Ask, Rejection, Surface};
use crate::state::{Admission, App};
use axum::body::Body;
use axum::extract::{Extension, State};
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use axum::Json;
use enforce_core::{Message, Request};
use serde_json::{json, Value};
use std::sync::Arc;

/// The response header that marks an estimated count: `estimated`.
pub(crate) const TOKEN_COUNT_HEADER: &str = "x-enforce-token-count";

/// Characters per token of the estimate: the usual rule of thumb for English text and code
/// with the common tokenizers. It is not the model's tokenizer, hence `estimated`.
const CHARS_PER_TOKEN: usize = 4;

/// Counts the input tokens of a Messages request for one of this proxy's models.
pub(crate) async fn count_tokens(
    State(app): State<Arc<App>>,
    granted: Option<Extension<Granted>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let granted = granted.map(|Extension(g)| g);
    // The permit is held until the count is sent: the parsed request stays in memory so long.
    let (ask, model, _permit) = match admit(&app, granted, &headers, body).await {
        Ok(admitted) => admitted,
        Err(rejection) => return error_response(rejection.refused(&app, granted)),
    };
    let request = Request {
        messages: ask.messages,
        session_id: None,
        params: ask.params,
        ..Request::default()
    };
    match model.runner.count_tokens(&request).await {
        Some(Ok(tokens)) => Json(json!({"input_tokens": tokens})).into_response(),
        Some(Err(error)) => error_response(crate::verdict::runner_failure(&error, 1)),
        None => {
            let mut response = Json(json!({
                "input_tokens": estimate(&request),
                "estimated": true,
            }))
            .into_response();
            response
                .headers_mut()
                .insert(TOKEN_COUNT_HEADER, HeaderValue::from_static("estimated"));
            response
        }
    }
}

/// The request parsed, the model it names and the concurrency permit, taken before the body
/// is read (`max_concurrent` bounds the requests in memory on this route too). The model is
/// admitted for the key as on the other routes: a limited key gets the 403 for a model outside
/// its list, and a 404 that lists only its own models.
async fn admit(
    app: &App,
    granted: Option<Granted>,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Ask, Arc<Model>, Admission), Rejection> {
    let mut permit = take_permit(app)?;
    let bytes = read_body(app, headers, body, &mut permit).await?;
    let (ask, ()) = Messages::parse(bytes).map_err(|e| Rejection::new("bad_request", e))?;
    let grant = controls::grant(app, granted);
    let model = controls::admit_model(grant, &ask.model, &HeaderMap::new())
        .map_err(Rejection::from)
        .and_then(|()| known_model(app, grant, &ask.model))
        .map_err(|rejection| rejection.asked_for(&ask.model))?;
    Ok((ask, model, permit))
}

/// The estimate: every character the model would read (messages, their tool calls, the
/// tools' definitions) divided by [`CHARS_PER_TOKEN`], rounded up.
fn estimate(request: &Request) -> u64 {
    let message_chars = |m: &Message| {
        m.content.chars().count()
            + m.tool_calls
                .iter()
                .map(|c| c.name.chars().count() + c.arguments.chars().count())
                .sum::<usize>()
    };
    let chars: usize = request.messages.iter().map(message_chars).sum::<usize>()
        + request
            .params
            .get("tools")
            .map_or(0, |tools| Value::to_string(tools).chars().count());
    chars.div_ceil(CHARS_PER_TOKEN) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_estimate_counts_messages_calls_and_tools_by_four_characters() {
        let mut request = Request {
            messages: vec![Message::system("abcd"), Message::user("efghi")],
            ..Request::default()
        };
        assert_eq!(estimate(&request), 3);
        let tools = json!([{"name": "abcdefghijk"}]);
        let tools_chars = tools.to_string().chars().count();
        request.params.insert("tools".into(), tools);
        // 9 characters of messages, and the tools' JSON.
        assert_eq!(estimate(&request), (9 + tools_chars).div_ceil(4) as u64);
    }
}
