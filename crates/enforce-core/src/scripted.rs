//! A runner that replays preset replies: [`ScriptedRunner`], for tests, demos and examples.

use crate::runner::{Ask, FollowUp};
use crate::{Reply, ReplyStream, Request, Runner, RunnerError, StreamEvent, Usage};
use futures_core::Stream;
use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::task::{Context as TaskContext, Poll};

/// One call a [`ScriptedRunner`] received.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum ScriptedCall {
    /// A first ask.
    Ask {
        /// The request as sent.
        request: Request,
    },
    /// A follow-up ask.
    FollowUp {
        /// The request as sent.
        request: Request,
        /// The text of the reply the feedback is about.
        previous: String,
        /// The session the follow-up continues.
        session_id: Option<String>,
        /// The feedback text.
        feedback: String,
    },
}

impl ScriptedCall {
    /// The feedback of a follow-up; `None` for a first ask.
    pub fn feedback(&self) -> Option<&str> {
        match self {
            ScriptedCall::Ask { .. } => None,
            ScriptedCall::FollowUp { feedback, .. } => Some(feedback),
        }
    }
}

/// Replays a list of replies (or errors) in order, one per call, and records every call.
/// When the list is used up it answers with a protocol error.
///
/// With [`streamed`](ScriptedRunner::streamed) it streams each reply's text in chunks, the way
/// a model writes, so the loop can cut an answer short; [`delivered`](ScriptedRunner::delivered)
/// tells how much of each answer was actually sent before the loop stopped reading.
#[derive(Debug, Default)]
pub struct ScriptedRunner {
    script: Mutex<VecDeque<Result<Reply, RunnerError>>>,
    calls: Mutex<Vec<ScriptedCall>>,
    /// Bytes per streamed chunk; `None`: whole replies.
    chunk_bytes: Option<usize>,
    /// Per call: bytes of text streamed so far.
    delivered: Mutex<Vec<usize>>,
    /// No `Spent` reports while streaming (as an OpenAI-style server, whose usage comes last).
    no_usage: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic elsewhere while holding the lock leaves plain data behind: keep using it.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ScriptedRunner {
    /// A runner that answers with these replies, in order.
    pub fn new(script: impl IntoIterator<Item = Result<Reply, RunnerError>>) -> Self {
        ScriptedRunner {
            script: Mutex::new(script.into_iter().collect()),
            ..ScriptedRunner::default()
        }
    }

    /// Streams every reply's text in chunks of about `chunk_bytes` bytes (never splitting a
    /// character), each chunk counted as one output token in a [`StreamEvent::Spent`] report
    /// sent just before it, then the whole reply. Errors come as the stream's only item.
    pub fn streamed(mut self, chunk_bytes: usize) -> Self {
        self.chunk_bytes = Some(chunk_bytes.max(1));
        self
    }

    /// Streams without [`StreamEvent::Spent`] reports, the way an OpenAI-style server sends
    /// its usage only after the last chunk: an answer cut short then has no usage from the
    /// runner.
    pub fn without_usage(mut self) -> Self {
        self.no_usage = true;
        self
    }

    /// Per call, in order: the bytes of text sent before the stream ended or was dropped (for
    /// a runner that is not [`streamed`](Self::streamed): the whole text).
    pub fn delivered(&self) -> Vec<usize> {
        lock(&self.delivered).clone()
    }

    /// A runner that answers with these texts, in order.
    pub fn texts<S: Into<String>>(texts: impl IntoIterator<Item = S>) -> Self {
        Self::new(texts.into_iter().map(|t| Ok(Reply::text(t))))
    }

    /// Every call received so far.
    pub fn calls(&self) -> Vec<ScriptedCall> {
        lock(&self.calls).clone()
    }

    /// The next scripted reply; `whole`: asked for without streaming, so all of it is delivered.
    fn next(&self, call: ScriptedCall, whole: bool) -> Result<Reply, RunnerError> {
        let number = {
            let mut calls = lock(&self.calls);
            calls.push(call);
            calls.len()
        };
        let next = lock(&self.script).pop_front().unwrap_or_else(|| {
            Err(RunnerError::Protocol {
                message: format!("scripted runner has no reply for call {number}"),
            })
        });
        let sent = next.as_ref().map_or(0, |reply| reply.text.len());
        let streamed = self.chunk_bytes.is_some() && !whole;
        lock(&self.delivered).push(if streamed { 0 } else { sent });
        next
    }

    fn stream(&self, call: ScriptedCall) -> ReplyStream<'_> {
        let next = self.next(call, false);
        let index = lock(&self.delivered).len().saturating_sub(1);
        let Some(chunk_bytes) = self.chunk_bytes else {
            // Not streamed: the whole reply as one item, as a runner that cannot stream.
            return ReplyStream::new(Chunks {
                runner: self,
                index,
                chunk_bytes: 0,
                offset: next.as_ref().map_or(0, |r| r.text.len()),
                next: Some(next),
                chunks: 0,
                spent_reported: false,
            });
        };
        ReplyStream::new(Chunks {
            runner: self,
            index,
            chunk_bytes,
            next: Some(next),
            offset: 0,
            chunks: 0,
            spent_reported: self.no_usage,
        })
    }
}

/// The stream of one scripted reply, chunk by chunk.
struct Chunks<'a> {
    runner: &'a ScriptedRunner,
    /// Which call (index into `delivered`).
    index: usize,
    chunk_bytes: usize,
    /// The reply being streamed; `None` once it was sent whole.
    next: Option<Result<Reply, RunnerError>>,
    /// Bytes of text sent.
    offset: usize,
    chunks: u64,
    /// The spending for the next chunk went out.
    spent_reported: bool,
}

impl Stream for Chunks<'_> {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(mut self: Pin<&mut Self>, _: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        let text = match &this.next {
            None => return Poll::Ready(None),
            Some(Err(_)) => return Poll::Ready(this.next.take().map(|e| e.map(StreamEvent::Done))),
            Some(Ok(reply)) => &reply.text,
        };
        if this.offset < text.len() {
            // The spending first, as a runner counting the chunk it is about to hand over.
            if !this.spent_reported {
                this.spent_reported = true;
                return Poll::Ready(Some(Ok(StreamEvent::Spent {
                    usage: Some(Usage {
                        input_tokens: 0,
                        output_tokens: this.chunks + 1,
                    }),
                    cost_usd: None,
                })));
            }
            this.spent_reported = this.runner.no_usage;
            let mut end = this.offset.saturating_add(this.chunk_bytes).min(text.len());
            while !text.is_char_boundary(end) {
                end += 1;
            }
            let chunk = text[this.offset..end].to_string();
            this.offset = end;
            this.chunks += 1;
            if let Some(sent) = lock(&this.runner.delivered).get_mut(this.index) {
                *sent = end;
            }
            return Poll::Ready(Some(Ok(StreamEvent::Text(chunk))));
        }
        Poll::Ready(this.next.take().map(|r| r.map(StreamEvent::Done)))
    }
}

impl Runner for ScriptedRunner {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        let request = ask.request.clone();
        let call = match ask.follow_up {
            None => ScriptedCall::Ask { request },
            Some(FollowUp { previous, feedback }) => ScriptedCall::FollowUp {
                request,
                previous: previous.text.clone(),
                session_id: previous.session_id.clone(),
                feedback: feedback.to_string(),
            },
        };
        if ask.stream {
            self.stream(call)
        } else {
            let reply = self.next(call, true);
            ReplyStream::whole(std::future::ready(reply))
        }
    }
}
