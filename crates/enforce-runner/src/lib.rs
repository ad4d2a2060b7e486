//! # enforce-runner
//!
//! How [enforce](enforce_core) asks a model. The [`Runner`](enforce_core::Runner)s:
//!
//! - [`ClaudeRunner`]: the Claude Code CLI (`claude -p --output-format json`, prompt on stdin);
//!   follow-ups resume the session with `--resume <id>` and send only the feedback.
//! - [`OpenAiRunner`]: any OpenAI-compatible chat completions server (OpenAI, Ollama, vLLM,
//!   llama.cpp); stateless follow-ups carrying exactly one earlier answer; bounded retries with
//!   jittered backoff that honour `Retry-After`.
//! - [`AnthropicRunner`]: the Anthropic Messages API (`/v1/messages`, or a compatible server),
//!   streamed, with tool use, the same retries and typed errors as the OpenAI runner; the key
//!   from `ANTHROPIC_API_KEY` unless configured.
//! - [`CommandRunner`]: any program, prompt on stdin, reply on stdout.
//! - `LocalRunner` (feature `local`, from enforce-runner-local): a GGUF model in this process
//!   through llama.cpp. Its [`LocalConfig`] is here in every build, so `type: local` always
//!   parses; without the feature, building it is a [`ConfigError`] that says how to get it.
//!
//! Processes run in their own process group: on timeout the group is interrupted, then killed,
//! so no child outlives the call. [`RunnerConfig`] builds any of them from a config file.
//!
//! ```
//! use enforce_core::{Context, Enforcer, Request};
//! use enforce_runner::RunnerConfig;
//!
//! let config: RunnerConfig = serde_json::from_str(
//!     r#"{"type": "command", "program": "cat", "timeout_secs": 5}"#).unwrap();
//! let runner = config.build().unwrap();
//! let enforcer = Enforcer::new(vec![]);
//! let outcome = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
//!     .block_on(enforcer.run(&runner, &Request::prompt("echo me"), &Context::new()));
//! assert_eq!(outcome.response.as_deref(), Some("echo me"));
//! ```
#![deny(missing_docs)]
#![deny(unsafe_code)]

mod anthropic;
mod anthropic_events;
mod claude;
mod command;
mod config;
mod error;
mod http;
mod openai;
mod openai_responses;
mod process;
mod prompt;
mod sse;
mod transport;
mod upload;

pub use anthropic::{
    anthropic_error_status, parse_message, AnthropicConfig, AnthropicRunner, ANTHROPIC_API_KEY_ENV,
    DEFAULT_ANTHROPIC_VERSION,
};
pub use claude::{
    parse_result, parse_stream_line, ClaudeConfig, ClaudeResult, ClaudeRunner, StreamLine,
};
pub use command::{CommandConfig, CommandRunner};
pub use config::RunnerConfig;
#[cfg(feature = "local")]
pub use enforce_runner_local::LocalRunner;
pub use enforce_runner_local::{LocalConfig, LocalConfigError};
pub use error::ConfigError;
pub use http::{
    backoff_delay, error_message, parse_retry_after, RetryConfig, DEFAULT_MAX_RESPONSE_BYTES,
};
pub use openai::{parse_completion, OpenAiApi, OpenAiConfig, OpenAiRunner};
pub use prompt::{render_prompt, PromptText};
