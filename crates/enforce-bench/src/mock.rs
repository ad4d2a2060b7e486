//! A fast mock OpenAI-compatible upstream. It keeps no record of requests (so memory stays flat
//! under load) and decides its answer from the request alone:
//!
//! - `ok`: always the valid answer;
//! - `fail-first`: the invalid answer until the conversation carries feedback (more than one
//!   non-system message), then the valid one.
//!
//! `stream: true` requests get the answer as SSE in `chunks` pieces, `gap_ms` apart.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

/// The answer that passes every scenario's contract.
pub const VALID: &str = r#"{"name": "Ada", "age": 36}"#;
/// The answer that fails it (`age` is not an integer).
pub const INVALID: &str = r#"{"name": "Ada", "age": "unknown"}"#;

/// How the mock answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// Always valid.
    Ok,
    /// Invalid until the request carries feedback.
    FailFirst,
}

#[derive(Debug)]
struct Settings {
    mode: Mode,
    chunks: usize,
    gap: Duration,
}

/// Serves until the process is killed.
pub async fn serve(listen: &str, mode: Mode, chunks: usize, gap_ms: u64) -> anyhow::Result<()> {
    let settings = Arc::new(Settings {
        mode,
        chunks: chunks.max(1),
        gap: Duration::from_millis(gap_ms),
    });
    let app = Router::new()
        .route("/v1/models", get(models))
        .route("/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .with_state(settings);
    let listener = tokio::net::TcpListener::bind(listen).await?;
    println!("{}", listener.local_addr()?);
    // Without TCP_NODELAY a streamed reply stalls ~40 ms per response on a keep-alive
    // connection (Nagle + delayed ACK), which would make the direct baseline meaningless.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app).await?;
    Ok(())
}

async fn models() -> impl IntoResponse {
    axum::Json(
        json!({"object": "list", "data": [{"id": "mock", "object": "model", "created": 0, "owned_by": "bench"}]}),
    )
}

fn has_feedback(body: &Value) -> bool {
    body["messages"]
        .as_array()
        .map(|m| m.iter().filter(|m| m["role"] != "system").count() > 1)
        .unwrap_or(false)
}

async fn chat(State(s): State<Arc<Settings>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<Value>(&body) else {
        return (StatusCode::BAD_REQUEST, "invalid JSON").into_response();
    };
    let valid = s.mode == Mode::Ok || has_feedback(&request);
    let content = if valid { VALID } else { INVALID };
    let model = request["model"].as_str().unwrap_or("mock").to_string();
    if request["stream"].as_bool() == Some(true) {
        return stream(s, content, model);
    }
    let body = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}
    });
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn stream(s: Arc<Settings>, content: &'static str, model: String) -> Response {
    let pieces = split(content, s.chunks);
    let total = pieces.len();
    let events = futures_util::stream::unfold(0usize, move |i| {
        let pieces = pieces.clone();
        let s = s.clone();
        let model = model.clone();
        async move {
            if i > total + 1 {
                return None;
            }
            if i > 0 && i < total && !s.gap.is_zero() {
                tokio::time::sleep(s.gap).await;
            }
            let frame = if i < total {
                let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": if i == 0 {json!({"role": "assistant", "content": pieces[i]})} else {json!({"content": pieces[i]})}, "finish_reason": null}]});
                format!("data: {chunk}\n\n")
            } else if i == total {
                let chunk = json!({"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model,
                    "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}});
                format!("data: {chunk}\n\n")
            } else {
                "data: [DONE]\n\n".to_string()
            };
            Some((Ok::<_, std::convert::Infallible>(Bytes::from(frame)), i + 1))
        }
    });
    Response::builder()
        .header(header::CONTENT_TYPE, "text/event-stream")
        .header(header::CACHE_CONTROL, "no-cache")
        .body(Body::from_stream(events))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response())
}

/// Splits `text` into `n` pieces at character boundaries (fewer when the text is shorter).
fn split(text: &str, n: usize) -> Arc<Vec<String>> {
    let chars: Vec<char> = text.chars().collect();
    let size = chars.len().div_ceil(n.max(1)).max(1);
    Arc::new(chars.chunks(size).map(|c| c.iter().collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn split_keeps_the_text_and_the_count() {
        let p = split("abcdefghij", 4);
        assert_eq!(p.len(), 4);
        assert_eq!(p.concat(), "abcdefghij");
    }

    #[test]
    fn feedback_means_more_than_one_non_system_message() {
        assert!(!has_feedback(
            &json!({"messages": [{"role": "system"}, {"role": "user"}]})
        ));
        assert!(has_feedback(
            &json!({"messages": [{"role": "user"}, {"role": "assistant"}, {"role": "user"}]})
        ));
    }
}
