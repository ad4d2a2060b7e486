//! Streamed answers: what a streaming [`Runner`](crate::Runner) yields while the model writes.

use crate::{Reply, RunnerError, Usage};
use futures_core::Stream;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};

/// One item of a streamed answer.
///
/// Non-exhaustive: runners will report more kinds (tool-call fragments, the model's own
/// reasoning) and the loop ignores the kinds it does not use, so a consumer keeps a `_` arm.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum StreamEvent {
    /// More answer text, to be appended to what came before.
    Text(String),
    /// More of the model's own reasoning (`reasoning_content`), which is not part of the answer:
    /// never validated, only reported to the observer.
    Reasoning(String),
    /// The session the answer belongs to, as soon as the runner knows it: an answer cut short
    /// is continued (`--resume`) from it.
    Session(String),
    /// What was spent so far (a snapshot that replaces the previous one). An answer cut short
    /// is audited with the last snapshot, so a runner reports it as early and as often as it
    /// learns it.
    Spent {
        /// Tokens so far.
        usage: Option<Usage>,
        /// Cost so far, in US dollars.
        cost_usd: Option<f64>,
    },
    /// The whole reply, with usage, cost and session id. The stream ends after it; its text is
    /// what counts (the loop does not rebuild it from the deltas).
    Done(Reply),
}

/// A streamed answer. Polling drives the generation; **dropping the stream cancels it** (a
/// runner stops its process or closes its connection).
pub type ReplyStream<'a> =
    Pin<Box<dyn Stream<Item = Result<StreamEvent, RunnerError>> + Send + 'a>>;

/// A whole reply on its way, as `Runner::ask` returns it.
type ReplyFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, RunnerError>> + Send + 'a>>;

/// A one-item stream around a whole-reply future: how a runner that cannot stream streams.
pub(crate) struct WholeReply<'a> {
    future: Option<ReplyFuture<'a>>,
}

impl<'a> WholeReply<'a> {
    pub(crate) fn stream(future: ReplyFuture<'a>) -> ReplyStream<'a> {
        Box::pin(WholeReply {
            future: Some(future),
        })
    }
}

impl fmt::Debug for WholeReply<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WholeReply")
            .field("done", &self.future.is_none())
            .finish()
    }
}

impl Stream for WholeReply<'_> {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        let Some(future) = self.future.as_mut() else {
            return Poll::Ready(None);
        };
        match future.as_mut().poll(cx) {
            Poll::Ready(result) => {
                self.future = None;
                Poll::Ready(Some(result.map(StreamEvent::Done)))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

/// The next item of `stream` (no `StreamExt` needed: core keeps its dependencies minimal).
pub(crate) async fn next_event(
    stream: &mut ReplyStream<'_>,
) -> Option<Result<StreamEvent, RunnerError>> {
    std::future::poll_fn(|cx| stream.as_mut().poll_next(cx)).await
}
