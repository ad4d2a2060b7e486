//! The integration tests of enforce-server in one test binary (one link instead of one per
//! file): `cargo test -p enforce-server --test it`.
//!
//! One process for all of them: `hostile_input` installs the process-wide tracing subscriber
//! (TRACE, captured in memory) the first time it runs, and the other modules then log into it
//! too. No other test may install a global subscriber (`logs` uses thread-scoped ones).

mod ai_sdk;
mod anthropic_sdk;
mod audit_gaps;
mod audit_record;
mod common;
mod connections;
mod controls;
mod dropin;
mod early_errors;
mod facts;
mod fault_matrix;
mod hostile_input;
mod input_stage;
mod logs;
mod messages;
mod messages_extras;
mod openai_clients;
#[cfg(feature = "otel")]
mod otel;
mod passthrough;
mod proxy;
mod responses;
mod responses_extras;
mod routes;
mod routes_surfaces;
mod sdk;
mod shared_state;
mod streaming;
mod tools;
#[cfg(target_os = "linux")]
mod wakeups;
