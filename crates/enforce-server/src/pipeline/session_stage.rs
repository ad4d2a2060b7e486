//! The session stage of the pipeline: the request's chat, the global concurrency slot, the
//! chat's session and the conversation a stored answer continues.

use super::{non_empty, overloaded, rejected, Ask, Rejection};
use crate::config::{ConcurrencyScope, Model};
use crate::error::ApiError;
use crate::headers as names;
use crate::session::{answer_digest, SessionStatus};
use crate::shared::GlobalSlot;
use crate::state::App;
use axum::http::{HeaderMap, StatusCode};
use enforce_core::{Message, Role};
use std::time::Duration;

/// The request's chat, its global slot and its session.
pub(super) struct SessionStage {
    pub(super) chat_id: Option<String>,
    pub(super) slot: Option<GlobalSlot>,
    pub(super) found: Option<SessionStatus>,
}

/// Session: the chat id (the `X-OpenWebUI-Chat-Id` header, else what the surface read from the
/// body), the global concurrency slot, the chat's session (checked to live on this replica),
/// and the hidden step markers put back on the assistant turns sent back.
pub(super) async fn open_session(
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
        let error = crate::controls::previous_response_not_found(format!("Previous response with id '{id}' not found: it was not stored (`store: false`), has expired, or never existed."));
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
