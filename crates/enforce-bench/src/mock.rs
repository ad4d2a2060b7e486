//! A fast mock OpenAI-compatible upstream. It keeps no record of requests (so memory stays flat
//! under load) and decides its answer from the request alone:
//!
//! - `ok`: always the valid answer;
//! - `fail-first`: the invalid answer until the request carries feedback, then the valid one.
//!   Feedback is either a conversation with more than one non-system message (enforce,
//!   Instructor, Pydantic AI append the failed answer and the feedback) or a request that quotes
//!   the invalid answer (Guardrails' re-ask starts a new conversation whose user message quotes
//!   the previous response).
//!
//! `stream: true` requests get the answer as SSE in `chunks` pieces, `gap_ms` apart.
//!
//! The mock must never be the bottleneck of a benchmark (`bench-peers` checks it serves ≥ 10×
//! the fastest peer), so a request is parsed into a borrowed struct that skips message contents,
//! and non-streaming bodies are assembled from pre-rendered halves around the echoed model name.

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::json;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

/// The answer that passes every scenario's contract.
pub const VALID: &str = r#"{"name": "Ada", "age": 36}"#;
/// The answer that fails it (`age` is not an integer).
pub const INVALID: &str = r#"{"name": "Ada", "age": "unknown"}"#;

/// The field of the invalid answer that a quoted re-ask carries.
const INVALID_MARKER: &[u8] = b"unknown";

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
    valid_body: (String, String),
    invalid_body: (String, String),
}

/// What the mock reads of a request; message contents are skipped, not copied.
#[derive(Deserialize)]
struct ChatRequest<'a> {
    #[serde(borrow, default)]
    model: Option<Cow<'a, str>>,
    #[serde(default)]
    stream: Option<bool>,
    #[serde(borrow, default)]
    messages: Vec<Message<'a>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Cow<'a, str>,
}

/// A non-streaming body split around the model name, rendered once per answer.
fn completion_halves(content: &str) -> (String, String) {
    const MODEL: &str = "@@model@@";
    let whole = json!({
        "id": "chatcmpl-mock", "object": "chat.completion", "created": 0, "model": MODEL,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 20, "completion_tokens": 12, "total_tokens": 32}
    })
    .to_string();
    let quoted = format!("\"{MODEL}\"");
    match whole.split_once(&quoted) {
        Some((a, b)) => (a.to_string(), b.to_string()),
        None => (whole, String::new()),
    }
}

/// Serves until the process is killed.
pub async fn serve(listen: &str, mode: Mode, chunks: usize, gap_ms: u64) -> anyhow::Result<()> {
    let settings = Arc::new(Settings {
        mode,
        chunks: chunks.max(1),
        gap: Duration::from_millis(gap_ms),
        valid_body: completion_halves(VALID),
        invalid_body: completion_halves(INVALID),
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

/// True when the request answers a failed attempt: a conversation that goes on past the first
/// user turn, or a fresh one that quotes the invalid answer.
fn has_feedback(request: &ChatRequest<'_>, raw: &[u8]) -> bool {
    request
        .messages
        .iter()
        .filter(|m| m.role != "system")
        .count()
        > 1
        || raw
            .windows(INVALID_MARKER.len())
            .any(|w| w == INVALID_MARKER)
}

async fn chat(State(s): State<Arc<Settings>>, body: Bytes) -> Response {
    let Ok(request) = serde_json::from_slice::<ChatRequest<'_>>(&body) else {
        return (StatusCode::BAD_REQUEST, "invalid JSON").into_response();
    };
    let valid = s.mode == Mode::Ok || has_feedback(&request, &body);
    let model = request.model.as_deref().unwrap_or("mock");
    if request.stream == Some(true) {
        let content = if valid { VALID } else { INVALID };
        return stream(s, content, model.to_string());
    }
    let (head, tail) = if valid {
        &s.valid_body
    } else {
        &s.invalid_body
    };
    let model = serde_json::to_string(model).unwrap_or_else(|_| "\"mock\"".to_string());
    let mut out = String::with_capacity(head.len() + model.len() + tail.len());
    out.push_str(head);
    out.push_str(&model);
    out.push_str(tail);
    ([(header::CONTENT_TYPE, "application/json")], out).into_response()
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

    fn feedback(raw: &str) -> bool {
        let request: ChatRequest<'_> = serde_json::from_str(raw).expect("test request parses");
        has_feedback(&request, raw.as_bytes())
    }

    #[test]
    fn feedback_is_a_longer_conversation_or_a_quoted_invalid_answer() {
        assert!(!feedback(
            r#"{"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "Who?"}]}"#
        ));
        assert!(feedback(
            r#"{"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}, {"role": "user", "content": "c"}]}"#
        ));
        // Guardrails' re-ask: a new conversation quoting the previous (invalid) response.
        let quoted = serde_json::to_string(&json!({"model": "m", "messages": [
            {"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": format!("This was a previous response you generated:\n\n======\n{INVALID}\n======")}
        ]}))
        .expect("serializes");
        assert!(feedback(&quoted));
    }

    #[test]
    fn completion_body_is_valid_json_with_the_echoed_model() {
        let (head, tail) = completion_halves(VALID);
        let body = format!(
            "{head}{}{tail}",
            serde_json::to_string("gpt \"x\"").expect("str")
        );
        let v: serde_json::Value = serde_json::from_str(&body).expect("valid JSON");
        assert_eq!(v["model"], "gpt \"x\"");
        assert_eq!(v["choices"][0]["message"]["content"], VALID);
    }
}
