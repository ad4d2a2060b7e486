//! # enforce-core
//!
//! The heart of enforce: check an LLM response with [`Validator`]s, ask the model again through
//! a [`Runner`] with precise [`Feedback`](feedback::Feedback) when it fails, apply deterministic
//! repairs when asking no longer helps, and return a typed [`Outcome`] instead of passing bad
//! output on.
//!
//! This crate has no async runtime, HTTP or FFI dependency, so it embeds anywhere: the loop is
//! plain `async` code that any executor can drive.
//!
//! The crate root holds what an embedder uses: the [`Enforcer`], the traits it calls
//! ([`Runner`], [`Validator`], [`Observer`]), what goes in ([`Request`], [`Context`],
//! [`Policy`]) and what comes out ([`Outcome`]). The rest is in its module: [`input`] (checks
//! of the request before the first ask), [`feedback`] (the text of a re-ask), [`policy`]
//! (re-ask ladders, repairs, budgets), [`strategy`] (`reask: auto`: statistics and the
//! chooser), [`runner`] (tool calls, follow-up messages),
//! [`validator`] (adapters, status names), [`outcome`], [`audit`] and [`scripted`].
//!
//! ```
//! use enforce_core::{async_trait, Context, Enforcer, Issue, Request, ScriptedRunner, Status,
//!                    Validation, Validator};
//!
//! /// Every answer must end with "OK".
//! struct EndsWithOk;
//!
//! #[async_trait]
//! impl Validator for EndsWithOk {
//!     fn name(&self) -> &str { "ends_with_ok" }
//!     async fn validate(&self, response: &str, _: &Context) -> Validation {
//!         Ok(if response.trim_end().ends_with("OK") { vec![] } else {
//!             vec![Issue::error("ends_with_ok", "MISSING_OK", "The answer does not end with OK.")
//!                 .with_hint("Write OK on the last line.")]
//!         })
//!     }
//! }
//!
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     use std::task::{Context as Cx, Poll, Waker};
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = Cx::from_waker(Waker::noop());
//! #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let runner = ScriptedRunner::texts(["Done.", "Done. OK"]);
//! let enforcer = Enforcer::new(vec![Box::new(EndsWithOk)]);
//! let outcome = block_on(enforcer.run(&runner, &Request::prompt("Do it."), &Context::new()));
//! assert_eq!(outcome.status, Status::Passed);
//! assert_eq!(outcome.attempts.len(), 2);
//! assert!(runner.calls()[1].feedback().unwrap().contains("MISSING_OK"));
//! ```
#![deny(missing_docs)]
#![deny(missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod audit;
pub mod context;
pub mod enforcer;
pub mod feedback;
pub mod input;
mod issue;
mod observer;
pub mod outcome;
mod partial;
pub mod policy;
pub mod runner;
pub mod scripted;
mod serde_millis;
pub mod strategy;
mod time;
pub mod validator;

pub use async_trait::async_trait;
pub use audit::AuditRecord;
pub use context::Context;
pub use enforcer::{Check, Enforcer};
pub use issue::{Issue, Severity};
pub use observer::{Event, Observer};
pub use outcome::{Attempt, Outcome, Status, StopReason};
pub use partial::PartialCheck;
pub use policy::{Budget, Policy, PolicyBuilder};
pub use runner::{
    Ask, FollowUp, Message, Reply, ReplyStream, Request, Role, Runner, RunnerError, StreamEvent,
    Usage,
};
pub use scripted::ScriptedRunner;
pub use validator::{FailMode, Unavailable, Validation, Validator, ValidatorExt};

/// The examples in README.md are compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

/// The Rust examples of the repository's README.md and of the book's library chapter, compiled
/// and run as doctests. Only in the repository: a packaged crate has no such files, and the
/// `cfg` drops the item (and its `include_str!`) from every other build.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
pub struct RepositoryReadmeDoctests;

/// See `RepositoryReadmeDoctests`.
#[cfg(doctest)]
#[doc = include_str!("../../../docs/library.md")]
pub struct LibraryChapterDoctests;
