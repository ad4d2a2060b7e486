//! [`App`]: the state every handler and every turn shares.

use crate::audit::{AuditLog, Refusal};
use crate::config::{Model, ServerConfig};
use crate::hooks::{ScrapeHook, StepExtractor};
use crate::metrics::{Gauge, Metrics, ModelSeries, REJECTED};
use crate::otel::Telemetry;
use crate::session::SessionStore;
use crate::shared::ReplicaState;
use crate::tools::{FormatCheckCache, ToolCheckCache};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Everything the handlers and the turns they start share.
pub(crate) struct App {
    pub config: ServerConfig,
    /// Shared with the requests that use them: a request copies its model only to change it
    /// (a profile header, a route, a limit header).
    pub models: HashMap<String, Arc<Model>>,
    /// A model's route reads a field of the request body, so a body is kept until routing.
    pub routes_read_the_body: bool,
    /// Model ids in configuration order, for `/v1/models`.
    pub model_order: Vec<String>,
    pub step_extractor: Option<StepExtractor>,
    /// Enforcers a request may pick by name with `X-Enforce-Profile`.
    pub profiles: HashMap<String, Arc<enforce_core::Enforcer>>,
    pub scrape_hook: Option<ScrapeHook>,
    pub sessions: SessionStore,
    /// State shared with other replicas, when configured.
    pub shared: Option<Arc<ReplicaState>>,
    /// Compiled checks of the `tools` requests declare.
    pub tool_checks: ToolCheckCache,
    /// Compiled checks of the `response_format` requests declare.
    pub format_checks: FormatCheckCache,
    /// The models' answer caches.
    pub caches: crate::cache::AnswerCaches,
    pub metrics: Arc<Metrics>,
    /// Every configured model's own series, by model id.
    pub series: HashMap<String, ModelSeries>,
    /// `enforce_in_flight`.
    pub in_flight: Gauge,
    pub audit: Option<Arc<AuditLog>>,
    pub limiter: Arc<Semaphore>,
    /// The request-body bytes being held, in KiB permits ([`crate::config::ServerConfig::body_budget`]).
    pub body_budget: Arc<Semaphore>,
    /// The pooled client that forwards the endpoints this proxy does not enforce.
    pub http: reqwest::Client,
    /// The OpenTelemetry exporter, when traces are on.
    pub telemetry: Option<Telemetry>,
    pub draining: AtomicBool,
    pub started: u64,
    pub next_id: AtomicU64,
}

/// What an admitted request holds of this replica's limits until its answer is sent: its
/// concurrency permit and the KiB of the body budget its body takes (taken and grown in
/// `pipeline::admission`).
pub(crate) struct Admission {
    pub(crate) _concurrency: OwnedSemaphorePermit,
    pub(crate) body: OwnedSemaphorePermit,
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl App {
    /// Counts a request refused before any enforcement, by its reason, and writes its short
    /// `refused` audit record (queued: a refusal does not wait for the disk).
    pub fn refuse(&self, refusal: Refusal<'_>) {
        self.metrics
            .count(&REJECTED, &[("reason", refusal.reason)], 1);
        if let Some(audit) = &self.audit {
            audit.append(refusal.to_json_line());
        }
    }
}
