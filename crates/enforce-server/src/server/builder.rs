//! [`ServerBuilder`]: the models, profiles and hooks of a [`Server`], checked and opened into
//! its shared state.

use super::Server;
use crate::audit::AuditLog;
use crate::config::{Model, ServerConfig, StateConfig};
use crate::error::ServerError;
use crate::hooks::{ScrapeHook, StepExtractor, StepMark};
use crate::metrics::{self, Metrics, ModelSeries, AUDIT_WRITE_FAILURES};
use crate::otel::{self, AuditLogs};
use crate::session::SessionStore;
use crate::shared::{ReplicaState, SharedState};
use crate::state::{self, App};
use crate::tools;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use tokio::sync::Semaphore;

/// Collects the configuration, models and step extractor of a [`Server`].
pub struct ServerBuilder {
    config: ServerConfig,
    models: Vec<Model>,
    step_extractor: Option<StepExtractor>,
    scrape_hook: Option<ScrapeHook>,
    profiles: HashMap<String, Arc<enforce_core::Enforcer>>,
    shared_state: Option<Arc<dyn SharedState>>,
    contracts: HashMap<String, String>,
}

impl ServerBuilder {
    /// An empty builder; [`Server::builder`] is how callers start one.
    pub(super) fn new(config: ServerConfig) -> Self {
        ServerBuilder {
            config,
            models: Vec::new(),
            step_extractor: None,
            scrape_hook: None,
            profiles: HashMap::new(),
            shared_state: None,
            contracts: HashMap::new(),
        }
    }

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

    /// Names the contract of profile `name` by its `fingerprint`
    /// ([`contract_fingerprint`](crate::contract_fingerprint) of its validators, their
    /// options, its policy and the plugins' versions): the answer cache of a model with
    /// `cache:` is keyed by it, so that a changed contract never replays an answer checked
    /// under the old one. A profile without a fingerprint is never cached.
    pub fn contract(mut self, name: impl Into<String>, fingerprint: impl Into<String>) -> Self {
        self.contracts.insert(name.into(), fingerprint.into());
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
        let (models, model_order) = index_models(self.models)?;
        let metrics = Arc::new(Metrics::new());
        let mut sessions = open_sessions(&self.config)?;
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
        let audit = open_audit(&self.config, &metrics, audit_logs)?;
        let limiter = Arc::new(Semaphore::new(self.config.max_concurrent.max(1)));
        let body_budget = Arc::new(Semaphore::new(crate::pipeline::kib(
            self.config.body_budget(),
        )));
        let series = models
            .keys()
            .map(|id| (id.clone(), ModelSeries::new(metrics.clone(), id)))
            .collect();
        let in_flight = metrics.gauge(&metrics::IN_FLIGHT, &[]);
        let http = reqwest::Client::builder()
            .build()
            .map_err(|e| ServerError::PassthroughClient(e.to_string()))?;
        let caches = crate::cache::AnswerCaches::new(
            models.values().map(|m| m.as_ref()),
            shared.clone(),
            self.contracts,
        );
        let routes_read_the_body = models
            .values()
            .any(|m| m.routes.as_ref().is_some_and(|r| r.read_the_body()));
        Ok(Server {
            app: Arc::new(App {
                config: self.config,
                routes_read_the_body,
                models,
                model_order,
                step_extractor: self.step_extractor,
                scrape_hook: self.scrape_hook,
                profiles: self.profiles,
                sessions,
                shared,
                tool_checks: tools::ToolCheckCache::default(),
                format_checks: tools::FormatCheckCache::default(),
                caches,
                series,
                in_flight,
                metrics,
                audit,
                limiter,
                body_budget,
                http,
                telemetry,
                draining: AtomicBool::new(false),
                started: state::unix_now(),
                next_id: AtomicU64::new(0),
            }),
        })
    }
}

/// The models by id.
type ModelsById = HashMap<String, Arc<Model>>;

/// The models by id, and their ids in the order given; a blank or repeated id is an error.
fn index_models(given: Vec<Model>) -> Result<(ModelsById, Vec<String>), ServerError> {
    let mut models = HashMap::new();
    let mut model_order = Vec::new();
    for model in given {
        if model.id.trim().is_empty() {
            return Err(ServerError::EmptyModelId);
        }
        if models.contains_key(&model.id) {
            return Err(ServerError::DuplicateModel(model.id));
        }
        model_order.push(model.id.clone());
        models.insert(model.id.clone(), Arc::new(model));
    }
    Ok((models, model_order))
}

/// The session store of `config.session_dir` (memory only without one), with its limits.
fn open_sessions(config: &ServerConfig) -> Result<SessionStore, ServerError> {
    let store = SessionStore::new(config.session_dir.clone()).map_err(|source| {
        ServerError::SessionDir {
            path: config
                .session_dir
                .as_deref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            source,
        }
    })?;
    Ok(store.with_limits(config.max_cached_sessions, config.max_stored_response_bytes))
}

/// The audit log of `config.audit_log`, counting its failed writes in `metrics`, and sending
/// every record to `logs` too (the OTLP logs exporter) when there is one.
fn open_audit(
    config: &ServerConfig,
    metrics: &Arc<Metrics>,
    logs: Option<AuditLogs>,
) -> Result<Option<Arc<AuditLog>>, ServerError> {
    let Some(path) = &config.audit_log else {
        return Ok(logs.map(|logs| Arc::new(AuditLog::logs_only(logs))));
    };
    let metrics = metrics.clone();
    // Present from the start, so an alert can watch it before the first failure.
    metrics.count(&AUDIT_WRITE_FAILURES, &[], 0);
    let on_failure = Box::new(move || metrics.count(&AUDIT_WRITE_FAILURES, &[], 1));
    let log = AuditLog::open_observed(path, config.audit_fsync, on_failure).map_err(|source| {
        ServerError::AuditLog {
            path: path.display().to_string(),
            source,
        }
    })?;
    Ok(Some(Arc::new(log.with_logs(logs))))
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
        Ok(Arc::new(crate::redis_state::RedisState::new(state)?))
    }
    #[cfg(not(feature = "redis"))]
    {
        Err(ServerError::State(crate::shared::StateError(format!(
            "server.state.redis is set ({}) but this build has no Redis support (feature `redis` of enforce-server)",
            state.redis_url
        ))))
    }
}
