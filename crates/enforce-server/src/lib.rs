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
mod messages;
mod metrics;
mod openai;
mod otel;
mod pipeline;
mod plain_body;
#[cfg(feature = "redis")]
mod redis_state;
mod responses;
mod routes;
mod session;
mod session_cache;
mod session_status;
mod shared;
mod state;
mod stream;
mod tools;
mod turn;
mod verdict;

pub use audit::AuditLog;
pub use auth::constant_time_eq;
pub use config::{
    parse_key_list, ApiKeyEntry, ApiKeySpec, BlankKey, ConcurrencyScope, FailureResponse,
    FsyncPolicy, KeyGrant, Model, ModelOptions, OtlpConfig, OtlpSection, SectionError,
    ServerConfig, ServerSection, StateConfig, StateSection, StreamMode, API_KEYS_ENV,
    DEFAULT_OTLP_LOGS_URL, DEFAULT_OTLP_TRACES_URL, DEFAULT_SERVICE_NAME, OTEL_SDK_DISABLED_ENV,
    OTEL_SERVICE_NAME_ENV, OTLP_ENDPOINT_ENV, OTLP_LOGS_ENDPOINT_ENV, OTLP_TRACES_ENDPOINT_ENV,
};
pub use error::{ApiError, ServerError};
pub use metrics::Metrics;
#[cfg(feature = "redis")]
pub use redis_state::RedisState;
pub use routes::{Classifier, Route, RouteError, Routes, When, DEFAULT_CLASSIFY_PROMPT};
pub use session::{
    answer_digest, chat_dir_name, HiddenMarker, SessionStatus, SessionStore, StepRecord,
    STATUS_FILE,
};
pub use shared::{ReplicaState, SharedState, StateError};
pub use verdict::validation_status;

use axum::routing::{get, post};
use axum::Router;
use metrics::{ModelSeries, AUDIT_WRITE_FAILURES};
use state::App;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// The response header carrying the enforcement status of a non-streaming answer.
pub const ENFORCE_STATUS_HEADER: &str = "x-enforce-status";

/// A request header naming the profile to enforce instead of the model's own (and the response
/// header naming the profile enforced).
pub(crate) const PROFILE_HEADER: &str = "x-enforce-profile";

/// The response header carrying the per-type layer's `validation_status` (`""`,
/// `INVALID_UNRESOLVED`, `<VALIDATOR>_UNAVAILABLE` or the validator's `unavailable_status`), as
/// in the `enforcement` object.
pub const VALIDATION_STATUS_HEADER: &str = "x-enforce-validation-status";

/// Reads the step of a passed answer (e.g. `why` from `<!-- STEP: why -->`) for the chat's
/// step history. The binary wires the `step_marker` validator's extraction here.
pub type StepExtractor = Arc<dyn Fn(&str) -> Option<StepMark> + Send + Sync>;

/// A step marker found in an answer: the step, and where the marker sits, so it can be hidden
/// from the client (`hide_step_marker`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepMark {
    /// The step (e.g. `why`).
    pub step: String,
    /// The byte range of the whole marker in the answer.
    pub range: std::ops::Range<usize>,
}

/// Called before each `/metrics` scrape to set gauges the server cannot see itself, e.g. the
/// circuit-breaker states of external validators.
pub type ScrapeHook = Arc<dyn Fn(&Metrics) + Send + Sync>;

/// Collects the configuration, models and step extractor of a [`Server`].
pub struct ServerBuilder {
    config: ServerConfig,
    models: Vec<Model>,
    step_extractor: Option<StepExtractor>,
    scrape_hook: Option<ScrapeHook>,
    profiles: HashMap<String, Arc<enforce_core::Enforcer>>,
    shared_state: Option<Arc<dyn SharedState>>,
}

impl ServerBuilder {
    /// Shares state with other replicas through `store` instead of the Redis server named in
    /// [`ServerConfig::state`] (whose other settings still apply).
    pub fn shared_state(mut self, store: Arc<dyn SharedState>) -> Self {
        self.shared_state = Some(store);
        self
    }

    /// Adds a public model.
    pub fn model(mut self, model: Model) -> Self {
        self.models.push(model);
        self
    }

    /// Adds several public models.
    pub fn models(mut self, models: impl IntoIterator<Item = Model>) -> Self {
        self.models.extend(models);
        self
    }

    /// Sets the function that finds a passed answer's step marker, for the session history and
    /// `hide_step_marker`.
    pub fn step_extractor(
        mut self,
        extract: impl Fn(&str) -> Option<StepMark> + Send + Sync + 'static,
    ) -> Self {
        self.step_extractor = Some(Arc::new(extract));
        self
    }

    /// Adds a named enforcer a request may pick with the `X-Enforce-Profile` header instead of
    /// its model's own (an unknown name is a 400).
    pub fn profile(
        mut self,
        name: impl Into<String>,
        enforcer: Arc<enforce_core::Enforcer>,
    ) -> Self {
        self.profiles.insert(name.into(), enforcer);
        self
    }

    /// Sets a function run before each `/metrics` scrape (e.g. to export breaker states with
    /// [`Metrics::set_gauge`]).
    pub fn on_scrape(mut self, hook: impl Fn(&Metrics) + Send + Sync + 'static) -> Self {
        self.scrape_hook = Some(Arc::new(hook));
        self
    }

    /// Checks the models, opens the session store and the audit log, and starts the
    /// OpenTelemetry exporter when [`ServerConfig::otlp`] is set (then it must be called
    /// inside the tokio runtime that will serve).
    pub fn build(self) -> Result<Server, ServerError> {
        if self.models.is_empty() {
            return Err(ServerError::NoModels);
        }
        check_api_keys(&self.config)?;
        let mut models = HashMap::new();
        let mut model_order = Vec::new();
        for model in self.models {
            if model.id.trim().is_empty() {
                return Err(ServerError::EmptyModelId);
            }
            if models.contains_key(&model.id) {
                return Err(ServerError::DuplicateModel(model.id));
            }
            model_order.push(model.id.clone());
            models.insert(model.id.clone(), Arc::new(model));
        }
        let metrics = Arc::new(Metrics::new());
        let mut sessions = SessionStore::new(self.config.session_dir.clone())
            .map_err(|source| ServerError::SessionDir {
                path: self
                    .config
                    .session_dir
                    .as_deref()
                    .map(|p| p.display().to_string())
                    .unwrap_or_default(),
                source,
            })?
            .with_limits(
                self.config.max_cached_sessions,
                self.config.max_stored_response_bytes,
            );
        let store = match (self.shared_state, &self.config.state) {
            (Some(store), _) => Some(store),
            (None, Some(state)) => Some(open_store(state)?),
            (None, None) => None,
        };
        let shared = store.map(|store| {
            let replica = self
                .config
                .state
                .as_ref()
                .map_or_else(|| "local".to_string(), |s| s.replica.clone());
            Arc::new(ReplicaState::new(store, replica, metrics.clone()))
        });
        if let Some(shared) = &shared {
            sessions = sessions.with_shared(shared.clone());
        }
        let telemetry = self
            .config
            .otlp
            .as_ref()
            .map(otel::Telemetry::start)
            .transpose()?;
        let audit_logs = telemetry.as_ref().and_then(otel::Telemetry::audit_logs);
        let audit = match &self.config.audit_log {
            None => audit_logs.map(|logs| Arc::new(AuditLog::logs_only(logs))),
            Some(path) => Some(Arc::new(
                AuditLog::open_observed(path, self.config.audit_fsync, {
                    let metrics = metrics.clone();
                    // Present from the start, so an alert can watch it before the first failure.
                    metrics.count(&AUDIT_WRITE_FAILURES, &[], 0);
                    Box::new(move || metrics.count(&AUDIT_WRITE_FAILURES, &[], 1))
                })
                .map_err(|source| ServerError::AuditLog {
                    path: path.display().to_string(),
                    source,
                })?
                .with_logs(audit_logs),
            )),
        };
        let limiter = Arc::new(Semaphore::new(self.config.max_concurrent.max(1)));
        let series = models
            .keys()
            .map(|id| (id.clone(), ModelSeries::new(metrics.clone(), id)))
            .collect();
        let in_flight = metrics.gauge(&metrics::IN_FLIGHT, &[]);
        Ok(Server {
            app: Arc::new(App {
                config: self.config,
                models,
                model_order,
                step_extractor: self.step_extractor,
                scrape_hook: self.scrape_hook,
                profiles: self.profiles,
                sessions,
                shared,
                tool_checks: tools::ToolCheckCache::default(),
                format_checks: tools::FormatCheckCache::default(),
                series,
                in_flight,
                metrics,
                audit,
                limiter,
                telemetry,
                draining: AtomicBool::new(false),
                started: state::unix_now(),
                next_id: AtomicU64::new(0),
            }),
        })
    }
}

/// The proxy. Build it with [`Server::builder`], then [`serve`](Server::serve) it, or mount
/// [`router`](Server::router) in your own axum application.
#[derive(Clone)]
pub struct Server {
    app: Arc<App>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("models", &self.app.model_order)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Starts building a server with `config`.
    pub fn builder(config: ServerConfig) -> ServerBuilder {
        ServerBuilder {
            config,
            models: Vec::new(),
            step_extractor: None,
            scrape_hook: None,
            profiles: HashMap::new(),
            shared_state: None,
        }
    }

    /// The state shared with other replicas, when configured: hand it to the circuit breakers
    /// (see `enforce serve`, which links `enforce-external`'s breakers to it).
    pub fn shared_state(&self) -> Option<Arc<ReplicaState>> {
        self.app.shared.clone()
    }

    /// The metrics registry (what `/metrics` renders).
    pub fn metrics(&self) -> &Metrics {
        &self.app.metrics
    }

    /// The routes, ready to serve.
    pub fn router(&self) -> Router {
        // The pipeline's surfaces check the key themselves, as their first stage.
        let surfaces = Router::new()
            .route(
                "/v1/chat/completions",
                post(pipeline::serve::<openai::Chat>),
            )
            .route("/v1/messages", post(pipeline::serve::<messages::Messages>))
            .route(
                "/v1/responses",
                post(pipeline::serve::<responses::Responses>),
            );
        let authed = Router::new()
            .route("/v1/models", get(app::list_models))
            .route("/v1/models/{id}", get(app::get_model))
            .route(
                "/v1/messages/count_tokens",
                post(count_tokens::count_tokens),
            )
            .route("/v1/responses/{id}", get(app::get_response))
            .route("/v1/sessions/{id}", get(app::get_session))
            .route_layer(axum::middleware::from_fn_with_state(
                self.app.clone(),
                app::require_key,
            ));
        Router::new()
            .merge(surfaces)
            .merge(authed)
            .route("/", get(app::root))
            .route("/healthz", get(app::healthz))
            .route("/metrics", get(app::metrics))
            .fallback(app::unknown_route)
            .method_not_allowed_fallback(app::wrong_method)
            .with_state(self.app.clone())
    }

    /// Serves on `listener` until `shutdown` completes, then stops accepting, lets in-flight
    /// requests finish for at most [`ServerConfig::shutdown_grace`], flushes the audit log and
    /// exports the spans still queued. Connections that never sent a whole request head are
    /// closed at once at shutdown; a request head is due within
    /// [`ServerConfig::header_timeout`]. Accepted connections get `TCP_NODELAY`.
    pub async fn serve<F>(self, listener: TcpListener, shutdown: F) -> Result<(), ServerError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let app = self.app.clone();
        let monitor = app.shared.clone().map(|shared| {
            let sessions_app = app.clone();
            tokio::spawn(shared.monitor(move |chat| sessions_app.sessions.cached(chat)))
        });
        let timer_ahead = tokio::spawn(keep_a_timer_ahead());
        let (stopping_tx, mut stopping_rx) = tokio::sync::watch::channel(false);
        let signal_app = app.clone();
        let signal = async move {
            shutdown.await;
            signal_app.draining.store(true, Ordering::Relaxed);
            tracing::info!("shutting down: no new connections, draining in-flight requests");
            let _ = stopping_tx.send(true);
        };
        let connections = connections::serve(
            listener,
            self.router(),
            app.config.header_timeout,
            stopping_rx.clone(),
        );
        let server = async move {
            tokio::join!(signal, connections);
            Ok::<(), ServerError>(())
        };
        let grace = app.config.shutdown_grace;
        let bounded = async move {
            // Only an actual shutdown starts the grace period.
            if stopping_rx.wait_for(|s| *s).await.is_ok() {
                tokio::time::sleep(grace).await;
            } else {
                std::future::pending::<()>().await;
            }
        };
        let result = tokio::select! {
            result = server => result,
            () = bounded => {
                tracing::warn!(grace_secs = grace.as_secs_f64(), "in-flight requests outlived the shutdown grace period");
                Ok(())
            }
        };
        if let Some(monitor) = monitor {
            monitor.abort();
        }
        timer_ahead.abort();
        if let Some(shared) = &app.shared {
            shared.leave().await;
        }
        if let Some(audit) = app.audit.clone() {
            if tokio::task::spawn_blocking(move || audit.close())
                .await
                .is_err()
            {
                tracing::error!("audit log flush failed");
            }
        }
        if app.telemetry.is_some() {
            // Blocks until the last batch is sent, which the runtime itself sends: off its
            // threads, or a single-threaded runtime would wait for itself.
            let app = app.clone();
            let flushed = tokio::task::spawn_blocking(move || {
                if let Some(telemetry) = &app.telemetry {
                    telemetry.shutdown();
                }
            });
            if flushed.await.is_err() {
                tracing::error!("OpenTelemetry flush failed");
            }
        }
        result
    }
}

/// Refuses a blank accepted key, however the configuration was put together.
fn check_api_keys(config: &ServerConfig) -> Result<(), ServerError> {
    if let Some(index) = config.api_keys.iter().position(|key| key.trim().is_empty()) {
        return Err(ServerError::EmptyApiKey {
            origin: format!("api_keys[{index}]"),
        });
    }
    match config.key_grants.iter().find(|g| g.key.trim().is_empty()) {
        Some(grant) => Err(ServerError::EmptyApiKey {
            origin: grant.name.clone(),
        }),
        None => Ok(()),
    }
}

/// The store for `server.state`.
fn open_store(state: &StateConfig) -> Result<Arc<dyn SharedState>, ServerError> {
    #[cfg(feature = "redis")]
    {
        Ok(Arc::new(RedisState::new(state)?))
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(ServerError::State(StateError(format!(
            "server.state.redis is set ({}) but this build has no Redis support (feature `redis` of enforce-server)",
            state.redis_url
        ))))
    }
}

/// Completes on Ctrl-C or SIGTERM: the usual `shutdown` for [`Server::serve`].
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut sig) => {
                sig.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
}

/// How far ahead [`keep_a_timer_ahead`] keeps its timer.
const TIMER_AHEAD: std::time::Duration = std::time::Duration::from_secs(1);

/// Keeps a timer pending at most [`TIMER_AHEAD`] away, for as long as the server runs.
///
/// tokio wakes its I/O driver (a write to an eventfd: a system call, and one more event for
/// the driver to read) whenever a timer is set to fire before every pending one, even from the
/// thread that runs the driver and so cannot be waiting in it (tokio issue 5207). Each request
/// sets two timers (its deadline and the upstream call's timeout, both seconds away), so
/// without an earlier one pending, an idle server paid two such wake-ups per request; with
/// this timer pending they fall after it and wake nothing. It costs one wake-up a second.
async fn keep_a_timer_ahead() {
    let mut ticks = tokio::time::interval(TIMER_AHEAD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
    }
}
