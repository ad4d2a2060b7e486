//! # enforce-runner-local
//!
//! A [`Runner`](enforce_core::Runner) for [enforce](enforce_core) that needs no model server:
//! [`LocalRunner`] runs a GGUF model in this process through llama.cpp (the `llama-cpp-2`
//! crate, which builds a vendored llama.cpp with cmake), on the CPU, streamed token by token so
//! the loop's early abort stops the generation for real.
//!
//! [`LocalConfig`] is always compiled, so configuration files and their JSON Schema know
//! `type: local` in every build; the runner itself needs the default feature `llama`. This is
//! the only crate of the workspace that touches llama.cpp (FFI); enforce-core stays free of it.
//!
//! What the runner guarantees (details on [`LocalRunner`]):
//!
//! - the model's own chat template; `seed`, `temperature`, `max_tokens` and `response_format`
//!   of a request's `params` over the configuration;
//! - exact prompt and completion token counts; `finish_reason` `stop` or `length`;
//! - optional constrained generation: a JSON Schema or a regex through llguidance (or a JSON
//!   Schema turned into GBNF, `constraint_engine: gbnf`), or a GBNF grammar;
//! - a missing, corrupt or oversized model and a prompt longer than the context are
//!   [`RunnerError::Unavailable`](enforce_core::RunnerError::Unavailable), never a crash.
#![deny(missing_docs)]

mod config;
mod constraint;
#[cfg(feature = "llama")]
mod generate;
#[cfg(feature = "llama")]
mod model;
#[cfg(feature = "llama")]
mod runner;
mod schema_grammar;

pub use config::{
    ConstraintEngine, LocalConfig, LocalConfigError, DEFAULT_CONTEXT_SIZE, DEFAULT_MAX_TOKENS,
};
pub use constraint::{plan_regex, plan_schema, SchemaPlan};
#[cfg(feature = "llama")]
pub use runner::LocalRunner;
pub use schema_grammar::{
    choices_to_gbnf, json_schema_to_gbnf, SchemaGrammar, SchemaGrammarError, MAX_GRAMMAR_DEPTH,
    MAX_GRAMMAR_REPETITION,
};
