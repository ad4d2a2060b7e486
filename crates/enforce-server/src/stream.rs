//! Streaming responses (`stream: true`): hold the answer back until it has passed, keep the
//! connection alive while the loop works, then send the content, or one error chunk.
//!
//! Every stream ends with `data: [DONE]` after either content or an error chunk: the body is
//! wrapped so that even a driver that stops without saying why (a panic, a bug) ends in an
//! error chunk, never in what looks like an empty success.

use crate::error::ApiError;
use crate::openai;
use crate::turn::{Ended, Job, Progress, Turn};
use axum::body::Body;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::{Outcome, Status};
use serde_json::{json, Value};
use std::convert::Infallible;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tracing::Instrument;

/// A comment line: ignored by every SSE client, keeps proxies and clients from timing out.
const KEEPALIVE: &[u8] = b": keepalive\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";
/// Content is sent in pieces of at most this many bytes (cut on character boundaries).
const CONTENT_PIECE: usize = 2048;

/// What the driver hands the body.
enum Frame {
    Data(Bytes),
    /// The end of the stream (`[DONE]`); nothing follows.
    Last(Bytes),
}

fn data_line(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The tail sent when the driver vanished without finishing the stream.
fn unfinished_tail() -> Bytes {
    let error = ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "stream_interrupted",
        "The proxy stopped before a checked answer was ready, so nothing was shown. Please try again.",
    );
    let mut tail = format!("data: {}\n\n", error.error_object()).into_bytes();
    tail.extend_from_slice(DONE);
    Bytes::from(tail)
}

/// Starts the driver and returns the `text/event-stream` response.
pub(crate) fn respond(turn: Turn, job: Job, span: tracing::Span) -> Response {
    let (tx, rx) = mpsc::channel::<Frame>(32);
    tokio::spawn(drive(turn, job, tx).instrument(span));
    let body = futures_util::stream::unfold((rx, false), |(mut rx, finished)| async move {
        if finished {
            return None;
        }
        let (bytes, finished) = match rx.recv().await {
            Some(Frame::Data(bytes)) => (bytes, false),
            Some(Frame::Last(bytes)) => (bytes, true),
            None => (unfinished_tail(), true),
        };
        Some((Ok::<Bytes, Infallible>(bytes), (rx, finished)))
    });
    let mut response = Body::from_stream(body).into_response();
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    response
}

/// The client is gone.
struct Gone;

struct Out {
    tx: mpsc::Sender<Frame>,
    ids: openai::CompletionId,
    status_events: bool,
    /// A status event with `done:false` is showing and must be closed.
    status_open: bool,
    /// The assistant's opening chunk (`role`) went out already (a draft started the message).
    opened: bool,
    /// The attempt whose draft is streaming.
    drafting: Option<u32>,
    /// The attempt cut short and its codes, until the re-ask is announced.
    cut: Option<(u32, Vec<String>)>,
}

impl Out {
    async fn send(&self, bytes: Bytes) -> Result<(), Gone> {
        self.tx.send(Frame::Data(bytes)).await.map_err(|_| Gone)
    }

    async fn keepalive(&self) -> Result<(), Gone> {
        self.send(Bytes::from_static(KEEPALIVE)).await
    }

    async fn status(&mut self, description: &str) -> Result<(), Gone> {
        if !self.status_events {
            return Ok(());
        }
        self.status_open = true;
        self.send(data_line(&openai::status_event(description, false, false)))
            .await
    }

    /// The event closing a showing status line: a final description, or hidden when there is
    /// nothing worth keeping on screen. `None` when no status line is showing.
    fn closing_status(&mut self, description: Option<&str>) -> Option<Value> {
        if !self.status_events || !self.status_open {
            return None;
        }
        self.status_open = false;
        Some(match description {
            Some(d) => openai::status_event(d, true, false),
            None => openai::status_event("", true, true),
        })
    }

    /// A `delta.reasoning_content` chunk, opening the message first when needed.
    async fn reasoning(&mut self, text: &str) -> Result<(), Gone> {
        if !self.opened {
            self.opened = true;
            let open = self
                .ids
                .chunk(json!({"role": "assistant", "content": ""}), None);
            self.send(data_line(&open)).await?;
        }
        let chunk = self.ids.chunk(json!({"reasoning_content": text}), None);
        self.send(data_line(&chunk)).await
    }

    async fn progress(&mut self, progress: Progress) -> Result<(), Gone> {
        match progress {
            Progress::Asking { attempt: 1 } => self.status("Asking the model…").await,
            Progress::Asking { .. } => Ok(()),
            Progress::Draft { attempt, text } => {
                if self.drafting != Some(attempt) {
                    let first = self.drafting.is_none();
                    self.drafting = Some(attempt);
                    if !first {
                        self.reasoning(&format!("\n\n— attempt {attempt} —\n\n"))
                            .await?;
                    }
                }
                self.reasoning(&text).await
            }
            Progress::Cut { attempt, codes } => {
                if self.drafting.is_some() {
                    self.reasoning(&format!(" [stopped: {}]", codes.join(", ")))
                        .await?;
                }
                self.cut = Some((attempt, codes));
                Ok(())
            }
            Progress::Retrying {
                attempt,
                max_attempts,
                codes,
            } => {
                self.keepalive().await?;
                let line = match self.cut.take() {
                    Some((cut_attempt, cut)) => format!(
                        "Stopped attempt {cut_attempt} at {}, re-asking ({attempt}/{max_attempts})",
                        cut.join(", ")
                    ),
                    None => format!("Re-asking ({attempt}/{max_attempts}): {}", codes.join(", ")),
                };
                self.status(&line).await
            }
            Progress::Repaired { validator } => {
                self.status(&format!("Repairing the answer ({validator})…"))
                    .await
            }
        }
    }

    async fn last(&self, bytes: Bytes) {
        // Nobody left to tell if this fails.
        let _ = self.tx.send(Frame::Last(bytes)).await;
    }
}

fn summary_line(outcome: &Outcome) -> Option<String> {
    let attempts = outcome.attempts.len();
    match outcome.status {
        Status::Passed if attempts <= 1 => None,
        Status::Passed => Some(format!("Checked: passed after {attempts} attempts")),
        Status::Repaired => Some(format!("Checked: repaired after {attempts} attempt(s)")),
        other => Some(format!("Checked: {other}")),
    }
}

/// Splits `text` into pieces of at most `max` bytes on character boundaries.
pub(crate) fn pieces(text: &str, max: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut cut = rest.len().min(max);
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        if cut == 0 {
            // A single character longer than `max` bytes cannot happen for max >= 4.
            cut = rest.len();
        }
        let (head, tail) = rest.split_at(cut);
        out.push(head);
        rest = tail;
    }
    out
}

async fn drive(turn: Turn, mut job: Job, tx: mpsc::Sender<Frame>) {
    let mut out = Out {
        tx,
        ids: turn.ids.clone(),
        status_events: turn.model.options.status_events,
        status_open: false,
        opened: false,
        drafting: None,
        cut: None,
    };
    // The first comment after one interval: a fast answer needs none.
    let every = turn.app.config.keepalive_interval;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep_until(job.deadline);
    tokio::pin!(deadline);

    let ended = loop {
        let step = tokio::select! {
            biased;
            joined = &mut job.handle => {
                break match joined {
                    Ok(outcome) => Ended::Outcome(Box::new(outcome)),
                    Err(e) => {
                        tracing::error!(error = %e, "enforcement task failed");
                        job.crashed()
                    }
                };
            }
            () = &mut deadline => break job.past_deadline(),
            Some(progress) = job.events.recv() => out.progress(progress).await,
            _ = ticker.tick() => out.keepalive().await,
        };
        if step.is_err() {
            // The client left: dropping the job aborts the enforcement.
            tracing::info!("client disconnected while the answer was being checked");
            return;
        }
    };
    // Events sent just before the loop ended (a repair) still belong on screen.
    while let Ok(progress) = job.events.try_recv() {
        if out.progress(progress).await.is_err() {
            return;
        }
    }

    // The whole tail goes out in one write: fewer packets, and a client never sees half of it.
    let mut tail = Vec::with_capacity(1024);
    match turn.conclude(ended).await {
        Ok((text, outcome)) => answer_tail(&turn, &mut out, &text, &outcome, &mut tail),
        Err(error) => error_tail(&mut out, &error, &mut tail),
    }
    tail.extend_from_slice(DONE);
    out.last(Bytes::from(tail)).await;
}

fn push_data(tail: &mut Vec<u8>, value: &Value) {
    tail.extend_from_slice(b"data: ");
    tail.extend_from_slice(value.to_string().as_bytes());
    tail.extend_from_slice(b"\n\n");
}

fn answer_tail(turn: &Turn, out: &mut Out, text: &str, outcome: &Outcome, tail: &mut Vec<u8>) {
    if let Some(event) = out.closing_status(summary_line(outcome).as_deref()) {
        push_data(tail, &event);
    }
    let ids = &turn.ids;
    let calls = &outcome.tool_calls;
    // An answer that only calls tools has no content, as OpenAI streams it.
    if !out.opened {
        let opening = if text.is_empty() && !calls.is_empty() {
            json!({"role": "assistant", "content": null})
        } else {
            json!({"role": "assistant", "content": ""})
        };
        push_data(tail, &ids.chunk(opening, None));
    }
    for piece in pieces(text, CONTENT_PIECE) {
        push_data(tail, &ids.chunk(json!({"content": piece}), None));
    }
    // Each call: its id and name with empty arguments first, then the arguments in pieces under
    // the same index, as OpenAI streams them.
    for (index, call) in calls.iter().enumerate() {
        let head = json!({"tool_calls": [{
            "index": index, "id": call.id, "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }]});
        push_data(tail, &ids.chunk(head, None));
        for piece in pieces(&call.arguments, CONTENT_PIECE) {
            let more = json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]});
            push_data(tail, &ids.chunk(more, None));
        }
    }
    let mut finish = ids.chunk(json!({}), Some(openai::finish_reason(calls)));
    finish["enforcement"] = openai::enforcement_json(outcome);
    turn.add_route(&mut finish["enforcement"]);
    push_data(tail, &finish);
    if turn.chat.include_usage {
        push_data(tail, &ids.usage_chunk(outcome.usage));
    }
}

fn error_tail(out: &mut Out, error: &ApiError, tail: &mut Vec<u8>) {
    let description = format!("Answer not shown: {}", error.code);
    if let Some(event) = out.closing_status(Some(&description)) {
        push_data(tail, &event);
    }
    let mut chunk = error.error_object();
    if let Some(enforcement) = &error.enforcement {
        chunk["enforcement"] = (**enforcement).clone();
    }
    push_data(tail, &chunk);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cut_on_char_boundaries() {
        let text = "ä".repeat(5); // 10 bytes
        let p = pieces(&text, 3);
        assert!(p.iter().all(|s| s.len() <= 3));
        assert_eq!(p.concat(), text);
        assert!(pieces("", 3).is_empty());
    }

    #[test]
    fn tail_is_an_error_chunk_then_done() {
        let tail = String::from_utf8(unfinished_tail().to_vec()).unwrap();
        let lines: Vec<&str> = tail.lines().filter(|l| l.starts_with("data:")).collect();
        assert_eq!(lines.len(), 2);
        let chunk: Value = serde_json::from_str(&lines[0]["data: ".len()..]).unwrap();
        assert!(chunk.get("error").is_some() && chunk.get("choices").is_none());
        assert_eq!(lines[1], "data: [DONE]");
    }
}
