//! The local runner against a real model (SmolLM2-135M-Instruct, Q4_1, 98 MB), found through
//! `ENFORCE_TEST_GGUF` or where `cargo xtask models` installs it. Without it every test here
//! says "skipped" and passes: `cargo xtask test` installs the model and says loudly when it
//! cannot.
//!
//! Small `max_tokens` and one thread keep the whole binary within a couple of minutes on a
//! busy 2-core machine.
#![cfg(feature = "llama")]

mod early_abort;
mod errors;
mod generation;
mod grammar;
mod strategies;

use enforce_core::{Reply, ReplyStream, RunnerError, StreamEvent};
use enforce_runner_local::{LocalConfig, LocalRunner};
use futures_util::StreamExt;
use std::sync::OnceLock;

pub use enforce_testkit::models::test_gguf as model_path;

/// A runner of its own for the test model (its token counter counts only this test's work).
pub fn own_runner(config: impl FnOnce(LocalConfig) -> LocalConfig) -> Option<LocalRunner> {
    let path = model_path()?;
    Some(LocalRunner::new(config(LocalConfig::new(path))).expect("valid config"))
}

/// One runner shared by the tests that need no counter of their own: the model is loaded once.
pub fn shared_runner() -> Option<&'static LocalRunner> {
    static RUNNER: OnceLock<Option<LocalRunner>> = OnceLock::new();
    RUNNER.get_or_init(|| own_runner(|c| c)).as_ref()
}

/// Everything a stream yields, until its end.
pub async fn drain(mut stream: ReplyStream<'_>) -> (Vec<StreamEvent>, Result<Reply, RunnerError>) {
    let mut events = Vec::new();
    while let Some(event) = stream.next().await {
        match event {
            Ok(StreamEvent::Done(reply)) => return (events, Ok(reply)),
            Ok(other) => events.push(other),
            Err(e) => return (events, Err(e)),
        }
    }
    (
        events,
        Err(RunnerError::Protocol {
            message: "stream ended without Done".into(),
        }),
    )
}

/// The `Unavailable` message of `result`, or a panic naming what came instead.
pub fn unavailable_message<T: std::fmt::Debug>(result: Result<T, RunnerError>) -> String {
    match result {
        Err(RunnerError::Unavailable { message }) => message,
        other => panic!("expected an unavailable runner error, got {other:?}"),
    }
}
