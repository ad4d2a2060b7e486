//! # enforce-validators
//!
//! The generic validators of [enforce](enforce_core): checks that any team can reuse in its own
//! service, with no async runtime, no process or network code and no configuration format.
//!
//! | validator | module | codes |
//! |---|---|---|
//! | [`JsonValidator`](json::JsonValidator) | [`json`] | `INVALID_JSON`, `SCHEMA_VIOLATION` |
//! | [`Pattern`](pattern::Pattern) | [`pattern`] | configurable (default `FORBIDDEN_PATTERN`, `MISSING_PATTERN`) |
//! | [`Length`](length::Length) | [`length`] | `TOO_SHORT`, `TOO_LONG` |
//! | [`OneOf`](one_of::OneOf) | [`one_of`] | `VALUE_NOT_ALLOWED` |
//! | [`Terms`](terms::Terms) | [`terms`] | configurable (default `MISSING_TERM`, `FORBIDDEN_TERM`, `PREFERRED_TERM`) |
//! | [`ToolCalls`](tool_calls::ToolCalls) | [`tool_calls`] | `UNKNOWN_TOOL`, `INVALID_TOOL_ARGUMENTS` (built per request from its `tools`) |
//!
//! [`scope`] points any validator at a JSON field of the response or a request-context value,
//! or applies it only under a condition. [`text`] holds the text helpers the validator crates
//! share (fenced code blocks, lines, locating the JSON in a response).
//!
//! Every validator has Rust constructors and builders; each can also be built from a JSON
//! object of options ([`FactoryInput`]), which is how `enforce-config` builds them from
//! `enforce.yaml`. JSON Schema support is the default feature `schema`.
//!
//! ```
//! use enforce_core::{Context, Validator};
//! use enforce_validators::length::{Bound, Length, Unit};
//! use enforce_validators::pattern::{Pattern, Rule};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let no_scores = Pattern::new("no_scores", vec![Rule::new(r"\d+ ?%", "NO_PERCENT").unwrap()], vec![]);
//! let short = Length::new("short", Unit::Words, None, Some(Bound::error(5)));
//! let ctx = Context::new();
//! let issues = block_on(no_scores.validate("Growth was 12 % this year.", &ctx)).unwrap();
//! assert_eq!(issues[0].code, "NO_PERCENT");
//! let issues = block_on(short.validate("one two three four five six", &ctx)).unwrap();
//! assert_eq!(issues[0].code, "TOO_LONG");
//! ```
#![deny(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod build;
mod error;
pub mod json;
mod json_prefix;
pub mod length;
pub mod one_of;
mod partial;
pub mod pattern;
pub mod scope;
pub mod terms;
pub mod text;
pub mod tool_calls;

#[cfg(test)]
mod testing;

pub use build::{BuildEnv, DocumentFormat, FactoryInput, RunnerFactory};
pub use error::BuildError;
pub use scope::{Scope, ScopeExt, Scoped};
