//! # enforce-external
//!
//! The `external` validator of [enforce](enforce_core): it pipes the response (or each fenced
//! block of a language) to a command, POSTs it to an `http://` or `https://` checker, or calls a
//! unary method of a gRPC checker (cargo feature `grpc`), turns the checker's
//! line trace into issues, and guards the checker with a [`CircuitBreaker`](breaker::CircuitBreaker)
//! so a dead checker is not called on every request. Runs on tokio.
//!
//! ```no_run
//! use enforce_core::FailMode;
//! use enforce_external::External;
//! use std::time::Duration;
//!
//! let lint = External::command("lint", vec!["python3".into(), "-m".into(), "pyflakes".into()])
//!     .unwrap()
//!     .blocks("python")
//!     .timeout(Duration::from_secs(2))
//!     .breaker(3, Duration::from_secs(30))
//!     .fail_mode(FailMode::Closed);
//! ```
#![deny(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod breaker;
pub mod external;
pub mod grpc;
pub mod http;
pub mod reformulate;

pub use breaker::CircuitBreaker;
pub use external::External;
pub use reformulate::{CommandReformulator, HttpReformulator};
