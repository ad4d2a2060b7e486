//! A runner that replays preset replies: [`ScriptedRunner`], for tests, demos and examples.

use crate::{Reply, Request, Runner, RunnerError};
use async_trait::async_trait;
use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

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
#[derive(Debug, Default)]
pub struct ScriptedRunner {
    script: Mutex<VecDeque<Result<Reply, RunnerError>>>,
    calls: Mutex<Vec<ScriptedCall>>,
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
            calls: Mutex::new(Vec::new()),
        }
    }

    /// A runner that answers with these texts, in order.
    pub fn texts<S: Into<String>>(texts: impl IntoIterator<Item = S>) -> Self {
        Self::new(texts.into_iter().map(|t| Ok(Reply::text(t))))
    }

    /// Every call received so far.
    pub fn calls(&self) -> Vec<ScriptedCall> {
        lock(&self.calls).clone()
    }

    fn next(&self, call: ScriptedCall) -> Result<Reply, RunnerError> {
        let number = {
            let mut calls = lock(&self.calls);
            calls.push(call);
            calls.len()
        };
        lock(&self.script).pop_front().unwrap_or_else(|| {
            Err(RunnerError::Protocol {
                message: format!("scripted runner has no reply for call {number}"),
            })
        })
    }
}

#[async_trait]
impl Runner for ScriptedRunner {
    async fn ask(&self, request: &Request) -> Result<Reply, RunnerError> {
        self.next(ScriptedCall::Ask {
            request: request.clone(),
        })
    }

    async fn follow_up(
        &self,
        request: &Request,
        previous: &Reply,
        feedback: &str,
    ) -> Result<Reply, RunnerError> {
        self.next(ScriptedCall::FollowUp {
            request: request.clone(),
            previous: previous.text.clone(),
            session_id: previous.session_id.clone(),
            feedback: feedback.to_string(),
        })
    }
}
