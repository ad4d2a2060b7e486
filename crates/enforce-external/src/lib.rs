//! # enforce-external
//!
//! The validators of [enforce](enforce_core) that call something outside the process, each
//! guarded by a timeout and a [`CircuitBreaker`](breaker::CircuitBreaker) so a dead service is
//! not called on every request, with a `fail_mode` for when it gives no verdict ([`guard`]).
//! Runs on tokio.
//!
//! - [`external`]: pipes the response (or each fenced block of a language) to a command, POSTs
//!   it to an `http://` or `https://` checker ([`http`]), or calls a unary method of a gRPC
//!   checker ([`grpc`], cargo feature `grpc`), and turns the checker's line trace into issues.
//! - [`judge`] (`llm_judge`): asks a model a YES/NO question about the response, the question
//!   and the retrieved context; the judge's reason becomes the issue.
//! - [`embedding`] (`embedding_relevance`): the cosine similarity between the question (or the
//!   response) and the retrieved context's chunks, from an OpenAI-compatible embeddings
//!   endpoint, against a threshold.
//! - [`reformulate`]: the command and HTTP reformulation hooks of the input stage.
//!
//! The judges read the request through the [`keys`](enforce_core::context::keys) of the context
//! ([`request`]), so they work as input validators (the text is the question) and as output
//! validators (the text is the answer).
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
pub mod case_context;
pub mod embedding;
pub mod external;
pub mod grpc;
pub mod guard;
pub mod http;
pub mod judge;
pub mod reformulate;
pub mod request;
mod trace;

pub use breaker::CircuitBreaker;
pub use embedding::EmbeddingRelevance;
pub use external::External;
pub use judge::LlmJudge;
pub use reformulate::{CommandReformulator, HttpReformulator};
