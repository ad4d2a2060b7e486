//! # enforce-server
//!
//! The OpenAI-compatible enforcement proxy of enforce. Clients (Open WebUI, the OpenAI SDKs,
//! curl) call `POST /v1/chat/completions` as usual; each answer goes through an
//! [`Enforcer`](enforce_core::Enforcer) — validated, re-asked with feedback, repaired — before it
//! is delivered. Streams hold the answer back until it has passed, send `: keepalive` comments
//! while the loop works, and end with the content or one error chunk, then `data: [DONE]`.
//!
//! The crate knows nothing about concrete runners or validators: it is given, per public model
//! id, an `Arc<dyn Runner>`, an `Arc<Enforcer>` and [`ModelOptions`], plus an optional
//! [`StepExtractor`] that reads the step marker of a passed answer for the session history.
//!
//! Routes: `GET /v1/models`, `GET /v1/models/{id}`, `POST /v1/chat/completions`,
//! `POST /v1/messages` (the Anthropic Messages API; `x-api-key` accepted as the key),
//! `GET /v1/sessions/{id}` (bearer auth when keys are configured), `GET /healthz` and
//! `GET /metrics` (Prometheus text, no auth).
//!
//! ```no_run
//! use enforce_core::{Enforcer, ScriptedRunner};
//! use enforce_server::{Model, Server, ServerConfig, StepMark};
//! use std::sync::Arc;
//!
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let runner = Arc::new(ScriptedRunner::texts(["Hello!"]));
//! let model = Model::new("chat", runner, Arc::new(Enforcer::new(vec![])));
//! let server = Server::builder(ServerConfig::default().with_env_api_keys()?)
//!     .model(model)
//!     .step_extractor(|text: &str| {
//!         let at = text.find("<!-- STEP: done -->")?;
//!         Some(StepMark { step: "done".into(), range: at..at + "<!-- STEP: done -->".len() })
//!     })
//!     .build()?;
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! server.serve(listener, enforce_server::shutdown_signal()).await?;
//! # Ok(()) }
//! ```
#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod app;
mod audit;
mod auth;
mod cache;
mod config;
mod connections;
mod controls;
mod count_tokens;
mod error;
mod facts;
#[cfg(any(fuzzing, test))]
#[doc(hidden)]
pub mod fuzzing;
mod headers;
mod hooks;
mod messages;
mod metrics;
mod openai;
mod otel;
mod passthrough;
mod pipeline;
#[cfg(feature = "redis")]
mod redis_state;
mod responses;
mod routes;
mod server;
mod session;
mod session_cache;
mod session_status;
mod shared;
mod shared_stats;
mod shutdown;
mod state;
mod stream;
mod tools;
mod turn;
mod verdict;

pub use audit::AuditLog;
pub use auth::constant_time_eq;
pub use cache::contract_fingerprint;
pub use config::{
    parse_key_list, ApiKeyEntry, ApiKeySpec, BlankKey, CacheConfig, CacheStore, ClassifyConfig,
    ConcurrencyScope, FailureResponse, FsyncPolicy, KeyGrant, Model, ModelOptions, OtlpConfig,
    OtlpSection, RouteConfig, SectionError, ServedModelConfig, ServerConfig, ServerSection,
    StateConfig, StateSection, StreamMode, Upstream, WhenConfig, API_KEYS_ENV,
    DEFAULT_OTLP_LOGS_URL, DEFAULT_OTLP_TRACES_URL, DEFAULT_SERVICE_NAME, OTEL_SDK_DISABLED_ENV,
    OTEL_SERVICE_NAME_ENV, OTLP_ENDPOINT_ENV, OTLP_LOGS_ENDPOINT_ENV, OTLP_TRACES_ENDPOINT_ENV,
};
pub use error::{ApiError, ServerError};
pub use headers::{ENFORCE_STATUS_HEADER, VALIDATION_STATUS_HEADER};
pub use hooks::{ScrapeHook, StepExtractor, StepMark};
pub use metrics::Metrics;
#[cfg(feature = "redis")]
pub use redis_state::RedisState;
pub use routes::{Classifier, Route, RouteError, Routes, When, DEFAULT_CLASSIFY_PROMPT};
pub use server::{builder::ServerBuilder, Server};
pub use session::{
    answer_digest, chat_dir_name, HiddenMarker, SessionStatus, SessionStore, StepRecord,
    STATUS_FILE,
};
pub use shared::{ReplicaState, SharedState, StateError};
pub use shutdown::shutdown_signal;
pub use verdict::validation_status;
