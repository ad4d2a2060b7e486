//! Streaming responses (`stream: true`), for every surface: hold the answer back until it has
//! passed, keep the connection alive while the loop works, then send the content, or one error.
//! The driver here is surface-free; a surface's [`StreamWriter`] turns what it has to say into
//! its own events.
//!
//! Every stream ends in its surface's terminator after either content or an error: the body is
//! wrapped so that even a driver that stops without saying why (a panic, a bug) ends in an
//! error, never in what looks like an empty success.

use crate::error::ApiError;
use crate::turn::{Job, Progress, Turn};
use axum::body::Body;
use axum::http::{header, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use enforce_core::{Outcome, Status};
use std::convert::Infallible;
use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tracing::Instrument;

/// A comment line: ignored by every SSE client, keeps proxies and clients from timing out.
pub(crate) const KEEPALIVE: &[u8] = b": keepalive\n\n";
/// Content is sent in pieces of at most this many bytes (cut on character boundaries).
pub(crate) const CONTENT_PIECE: usize = 2048;

/// How a surface writes a stream. Each method appends whole SSE events to `out` (the driver
/// sends what was appended as one write); the wording of progress is the driver's, the same on
/// every surface.
pub(crate) trait StreamWriter: Send + Sync + 'static {
    /// The stream's first bytes, sent at once (e.g. Responses' `response.created`).
    fn open(&mut self, _out: &mut Vec<u8>) {}

    /// A progress line for people ("Re-asking (2/3): …"); a surface without a place for it
    /// writes nothing.
    fn status(&mut self, _description: &str, _out: &mut Vec<u8>) {}

    /// More text of a draft or of the model's reasoning (only for `stream_mode: draft`): shown
    /// as thinking, never as the answer.
    fn draft(&mut self, text: &str, out: &mut Vec<u8>);

    /// The checked answer, after the stream's status line is closed with `summary` (none when
    /// there is nothing worth keeping on screen).
    fn answer(
        &mut self,
        turn: &Turn,
        text: &str,
        outcome: &Outcome,
        summary: Option<&str>,
        out: &mut Vec<u8>,
    );

    /// The error that stands instead of an answer.
    fn refusal(&mut self, error: &ApiError, out: &mut Vec<u8>);

    /// The answer as it is kept for a later request (the surface's whole object), when the
    /// request asked to store it; taken once, after [`answer`](Self::answer).
    fn stored(&mut self) -> Option<Bytes> {
        None
    }

    /// The stream's last bytes after the answer or the error (chat's `data: [DONE]`).
    fn end(&mut self, _out: &mut Vec<u8>) {}

    /// The whole tail of a stream whose driver vanished without finishing it: an error, then
    /// the end.
    fn unfinished() -> Bytes;
}

/// Appends one `data:` line holding `value` as JSON: a stream's events are our own types,
/// strings, numbers and `Value`s, which always serialize.
pub(crate) fn push_data(out: &mut Vec<u8>, value: &impl serde::Serialize) {
    out.extend_from_slice(b"data: ");
    let _ = serde_json::to_writer(&mut *out, value);
    out.extend_from_slice(b"\n\n");
}

/// Appends one named event: its `event:` line, then the `data:` line holding `value`.
pub(crate) fn push_event(out: &mut Vec<u8>, name: &str, value: &impl serde::Serialize) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    push_data(out, value);
}

/// The error a stream ends with when its driver vanished.
pub(crate) fn interrupted() -> ApiError {
    ApiError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "server_error",
        "stream_interrupted",
        "The proxy stopped before a checked answer was ready, so nothing was shown. Please try again.",
    )
}

/// What the driver hands the body.
enum Frame {
    Data(Bytes),
    /// The end of the stream; nothing follows.
    Last(Bytes),
}

/// How a stream starts.
pub(crate) enum Start {
    /// The outcome was known before the stream's first byte was due, and it is an error a
    /// client takes best as a plain HTTP error ([`ApiError::refuses_a_stream`]): the surface
    /// sends it as it would to a request not streamed.
    Refused(ApiError),
    /// The outcome was known before the first byte was due: the whole stream's bytes, with
    /// the turn and its outcome for the enforcement headers (the pipeline makes the response:
    /// [`event_stream`] and those).
    Whole(Vec<u8>, Box<Turn>, Box<Outcome>),
    /// The stream goes on while the loop works (its driver, on its own task, takes the loop
    /// over).
    Streaming(Response),
}

/// Starts a stream. Nothing goes out until something must: the outcome, the first keep-alive
/// (one `keepalive_interval` in), or a draft to show. Until then progress is kept, and sent
/// first when the stream goes on; an outcome known by then answers the request whole, or as a
/// plain error (see [`Start`]).
pub(crate) async fn respond<W: StreamWriter>(
    mut turn: Turn,
    mut job: Job,
    span: tracing::Span,
    writer: W,
) -> Start {
    let mut out = Out {
        writer,
        drafting: None,
        cut: None,
        // Room for the opening events and a short answer's, so the buffer is not grown and
        // copied event by event.
        pending: Vec::with_capacity(PENDING_ROOM),
    };
    out.writer.open(&mut out.pending);
    let first_due = tokio::time::Instant::now() + turn.app.config.keepalive_interval;
    // One timer, for whichever comes first: the deadline, or the first keep-alive (a
    // timer costs every request its registration and removal).
    let deadline_first = job.deadline <= first_due;
    let ended = async {
        let wake = tokio::time::sleep_until(job.deadline.min(first_due));
        tokio::pin!(wake);
        loop {
            tokio::select! {
                biased;
                ended = job.running.ended() => break Some(ended),
                // Past the deadline: the outcome so far; at the first keep-alive: streaming.
                () = &mut wake => break deadline_first.then(|| job.running.past_deadline()),
                Some(progress) = job.events.recv() => {
                    let draft = matches!(progress, Progress::Draft { .. });
                    out.progress(progress);
                    if draft {
                        break None;
                    }
                }
            }
        }
    }
    .instrument(span.clone())
    .await;
    let Some(ended) = ended else {
        let (tx, rx) = mpsc::channel::<Frame>(32);
        tokio::spawn(drive(turn, job, tx, out).instrument(span));
        let body = futures_util::stream::unfold((rx, false), |(mut rx, finished)| async move {
            if finished {
                return None;
            }
            let (bytes, finished) = match rx.recv().await {
                Some(Frame::Data(bytes)) => (bytes, false),
                Some(Frame::Last(bytes)) => (bytes, true),
                None => (W::unfinished(), true),
            };
            Some((Ok::<Bytes, Infallible>(bytes), (rx, finished)))
        });
        return Start::Streaming(event_stream(Body::from_stream(body)));
    };
    // Events sent just before the loop ended (a repair) still belong on screen.
    while let Some(progress) = job.events.try_recv() {
        out.progress(progress);
    }
    let concluded = async {
        match turn.conclude(ended).await {
            Ok((text, outcome)) => {
                out.answer(&mut turn, &text, &outcome).await;
                Ok(outcome)
            }
            Err(error) if error.refuses_a_stream() => Err(error),
            Err(error) => {
                out.writer.refusal(&error, &mut out.pending);
                out.writer.end(&mut out.pending);
                Err(error)
            }
        }
    }
    .instrument(span)
    .await;
    match concluded {
        Err(error) if error.refuses_a_stream() => Start::Refused(error),
        Err(_) => Start::Streaming(event_stream(Body::from(out.pending))),
        Ok(outcome) => Start::Whole(out.pending, Box::new(turn), outcome),
    }
}

/// The room a stream's buffer starts with, and is given again for the answer's events.
const PENDING_ROOM: usize = 4096;

/// The headers of every event stream: its content type, and no caching or buffering on the
/// A `text/event-stream` response of `body`.
pub(crate) fn event_stream(body: Body) -> Response {
    let mut response = body.into_response();
    let headers = response.headers_mut();
    // Room for the enforcement headers too, not grown insert by insert.
    headers.reserve(crate::headers::ANSWER_HEADERS + 3);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream; charset=utf-8"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    headers.insert(
        HeaderName::from_static("x-accel-buffering"),
        HeaderValue::from_static("no"),
    );
    response
}

/// The client is gone.
struct Gone;

/// The stream's writing side: the wording of progress, handed to the surface's writer, and
/// the bytes not sent yet.
struct Out<W> {
    writer: W,
    /// The attempt whose draft is streaming.
    drafting: Option<u32>,
    /// The attempt cut short and its codes, until the re-ask is announced.
    cut: Option<(u32, Vec<String>)>,
    /// Written, not sent yet.
    pending: Vec<u8>,
}

impl<W: StreamWriter> Out<W> {
    /// Sends what is pending.
    async fn flush(&mut self, tx: &mpsc::Sender<Frame>) -> Result<(), Gone> {
        if self.pending.is_empty() {
            return Ok(());
        }
        let bytes = Bytes::from(std::mem::take(&mut self.pending));
        tx.send(Frame::Data(bytes)).await.map_err(|_| Gone)
    }

    fn status(&mut self, description: &str) {
        self.writer.status(description, &mut self.pending);
    }

    fn draft(&mut self, text: &str) {
        self.writer.draft(text, &mut self.pending);
    }

    fn progress(&mut self, progress: Progress) {
        match progress {
            Progress::Asking { attempt: 1 } => self.status("Asking the model…"),
            Progress::Asking { .. } => {}
            Progress::Draft { attempt, text } => {
                if self.drafting != Some(attempt) {
                    let first = self.drafting.is_none();
                    self.drafting = Some(attempt);
                    if !first {
                        self.draft(&format!("\n\n— attempt {attempt} —\n\n"));
                    }
                }
                self.draft(&text);
            }
            Progress::Cut { attempt, codes } => {
                if self.drafting.is_some() {
                    self.draft(&format!(" [stopped: {}]", codes.join(", ")));
                }
                self.cut = Some((attempt, codes));
            }
            Progress::Retrying {
                attempt,
                max_attempts,
                codes,
            } => {
                self.pending.extend_from_slice(KEEPALIVE);
                let line = match self.cut.take() {
                    Some((cut_attempt, cut)) => format!(
                        "Stopped attempt {cut_attempt} at {}, re-asking ({attempt}/{max_attempts})",
                        cut.join(", ")
                    ),
                    None => format!("Re-asking ({attempt}/{max_attempts}): {}", codes.join(", ")),
                };
                self.status(&line);
            }
            Progress::Repaired { validator } => {
                self.status(&format!("Repairing the answer ({validator})…"));
            }
        }
    }

    /// The checked answer and the stream's end, pending; the answer stored (before the client
    /// hears of it, so it can continue at once) when the request asked for it.
    async fn answer(&mut self, turn: &mut Turn, text: &str, outcome: &Outcome) {
        let summary = summary_line(outcome);
        // A surface's events repeat the text a few times (Responses: in the delta, the done
        // events and the final object).
        self.pending
            .reserve(PENDING_ROOM.saturating_add(text.len().saturating_mul(6)));
        self.writer
            .answer(turn, text, outcome, summary.as_deref(), &mut self.pending);
        if let Some(body) = self.writer.stored() {
            turn.store(&body, text, outcome).await;
        }
        self.writer.end(&mut self.pending);
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

/// The stream of a loop still working: what [`respond`] kept first, keep-alives and progress
/// while it works, then the whole tail in one write.
async fn drive<W: StreamWriter>(
    mut turn: Turn,
    mut job: Job,
    tx: mpsc::Sender<Frame>,
    mut out: Out<W>,
) {
    if out.flush(&tx).await.is_err() {
        return;
    }
    // The first comment is due now (or a draft started the stream): then one per interval.
    let every = turn.app.config.keepalive_interval;
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let deadline = tokio::time::sleep_until(job.deadline);
    tokio::pin!(deadline);

    let ended = loop {
        let step = tokio::select! {
            biased;
            ended = job.running.ended() => break ended,
            () = &mut deadline => break job.running.past_deadline(),
            Some(progress) = job.events.recv() => {
                out.progress(progress);
                out.flush(&tx).await
            }
            _ = ticker.tick() => tx
                .send(Frame::Data(Bytes::from_static(KEEPALIVE)))
                .await
                .map_err(|_| Gone),
        };
        if step.is_err() {
            // The client left: dropping the job aborts the enforcement.
            tracing::info!("client disconnected while the answer was being checked");
            return;
        }
    };
    // Events sent just before the loop ended (a repair) still belong on screen.
    while let Some(progress) = job.events.try_recv() {
        out.progress(progress);
    }

    // The whole tail goes out in one write: fewer packets, and a client never sees half of it.
    match turn.conclude(ended).await {
        Ok((text, outcome)) => out.answer(&mut turn, &text, &outcome).await,
        Err(error) => {
            out.writer.refusal(&error, &mut out.pending);
            out.writer.end(&mut out.pending);
        }
    }
    // Nobody left to tell if this fails.
    let _ = tx
        .send(Frame::Last(Bytes::from(std::mem::take(&mut out.pending))))
        .await;
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
}
