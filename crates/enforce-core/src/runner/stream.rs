//! A streamed answer: [`StreamEvent`]s in a [`ReplyStream`].

use super::{Reply, RunnerError, Usage};
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

/// The boxed stream a [`ReplyStream`] drives.
type BoxedEvents<'a> = Pin<Box<dyn Stream<Item = Result<StreamEvent, RunnerError>> + Send + 'a>>;

/// An answer on its way, as [`Runner::ask`](super::Runner::ask) returns it: a stream of
/// [`StreamEvent`]s ending with [`StreamEvent::Done`]. Polling drives the generation;
/// **dropping the stream cancels it** (a runner stops its process or closes its connection).
pub struct ReplyStream<'a>(BoxedEvents<'a>);

impl<'a> ReplyStream<'a> {
    /// The answer of a runner that streams: `events` as it yields them.
    pub fn new(events: impl Stream<Item = Result<StreamEvent, RunnerError>> + Send + 'a) -> Self {
        ReplyStream(Box::pin(events))
    }

    /// The answer of a runner that cannot stream: `reply`'s result as one
    /// [`StreamEvent::Done`] (or its error). The loop then simply cannot cut it short.
    pub fn whole(reply: impl Future<Output = Result<Reply, RunnerError>> + Send + 'a) -> Self {
        ReplyStream::new(WholeReply {
            future: Some(Box::pin(reply)),
        })
    }

    /// The next event; `None` after the last.
    pub async fn next_event(&mut self) -> Option<Result<StreamEvent, RunnerError>> {
        std::future::poll_fn(|cx| self.0.as_mut().poll_next(cx)).await
    }

    /// The whole reply, for a caller that does not read the answer as it is written: the
    /// stream read to its [`StreamEvent::Done`], or its first error. A stream that ends
    /// without a reply is a protocol error.
    pub async fn reply(mut self) -> Result<Reply, RunnerError> {
        while let Some(event) = self.next_event().await {
            if let StreamEvent::Done(reply) = event? {
                return Ok(reply);
            }
        }
        Err(RunnerError::Protocol {
            message: "the answer stream ended without a reply".to_string(),
        })
    }
}

impl fmt::Debug for ReplyStream<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplyStream").finish_non_exhaustive()
    }
}

impl Stream for ReplyStream<'_> {
    type Item = Result<StreamEvent, RunnerError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<Option<Self::Item>> {
        self.0.as_mut().poll_next(cx)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

/// A whole reply on its way.
type ReplyFuture<'a> = Pin<Box<dyn Future<Output = Result<Reply, RunnerError>> + Send + 'a>>;

/// A one-item stream around a whole-reply future: how a runner that cannot stream streams.
struct WholeReply<'a> {
    future: Option<ReplyFuture<'a>>,
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
