//! # enforce-testkit
//!
//! Fakes that follow the real wire formats, for the tests (and benchmarks) of enforce:
//!
//! - [`MockOpenAi`]: an in-process OpenAI-compatible server on `127.0.0.1` (free port) with
//!   scripted replies and faults — status codes, `Retry-After`, the error shapes of OpenAI,
//!   Ollama, vLLM and llama.cpp, delays, SSE streaming with configurable chunking, a stream cut
//!   mid-way, garbage — that records every request; and `/v1/embeddings` with deterministic
//!   bag-of-words vectors ([`bag_of_words_embedding`]) and faults ([`EmbeddingsFault`]).
//! - [`MockAnthropic`]: an in-process Anthropic Messages API (`/v1/messages`), for the real
//!   Claude CLI or, scripted with [`AnthropicReply`]s, for the `anthropic` runner: text, tool
//!   use, thinking, errors in Anthropic's shape, an error event mid-stream, a stream cut short.
//! - [`sse`]: a client-side SSE parser (WHATWG rules) and [`sse::ParsedStream`], a stream read
//!   the way openai-python and Open WebUI read it.
//! - [`FakeClaude`]: drives the `fake-claude` executable (crate `enforce-fake-claude`), a stand-in
//!   for `claude -p --output-format json`, with a script and a record of every call.
//! - [`ToyParser`] (cargo feature `grpc`): an in-process gRPC code checker implementing
//!   `protos/parser.proto` (a toy parser that reports unknown commands line by line), with a
//!   delay knob and optional TLS, for the gRPC target of the `external` validator.
//! - [`models`]: where the real-model tests find their GGUF model ([`models::test_gguf`]).
//! - [`plugins`]: where the plugin libraries built by `cargo xtask build-plugins` are, building
//!   them on first use under a plain `cargo test`.
//!
//! ```
//! use enforce_testkit::{MockOpenAi, MockReply, MockScript};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let mock = MockOpenAi::start(MockScript::new().reply(MockReply::text("Hello"))).await.unwrap();
//! assert!(mock.url().starts_with("http://127.0.0.1:"));
//! assert!(mock.requests().is_empty());
//! # });
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod fake_claude;
mod logs;
mod loopback;
pub mod mock_anthropic;
mod mock_openai;
pub mod models;
pub mod plugins;
pub mod sse;
#[cfg(feature = "grpc")]
pub mod toy_parser;

pub use fake_claude::{fake_claude_path, process_is_gone, FakeClaude, FakeClaudeCall, ScratchDir};
pub use logs::LogBuffer;
pub use mock_anthropic::{AnthropicReply, MockAnthropic, RecordedMessages};
pub use mock_openai::{
    bag_of_words_embedding, EmbeddingsFault, ErrorShape, MockOpenAi, MockReply, MockScript,
    RecordedRequest, Then, ToolHistory, DEFAULT_EMBEDDING_DIMENSIONS,
};
#[cfg(feature = "grpc")]
pub use toy_parser::{ToyParser, ToyParserOptions};
