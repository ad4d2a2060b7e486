//! What the server is given: [`ServerConfig`], one [`Model`] per public model id, and the
//! per-model [`ModelOptions`].

use crate::routes::Routes;
use enforce_core::{Enforcer, Runner};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod keys;
mod otlp;
mod section;
mod served;
#[cfg(test)]
mod tests;
pub use keys::{parse_key_list, ApiKeyEntry, ApiKeySpec, BlankKey, KeyGrant};
pub use otlp::{
    OtlpConfig, OtlpSection, DEFAULT_OTLP_LOGS_URL, DEFAULT_OTLP_TRACES_URL, DEFAULT_SERVICE_NAME,
    OTEL_SDK_DISABLED_ENV, OTEL_SERVICE_NAME_ENV, OTLP_ENDPOINT_ENV, OTLP_LOGS_ENDPOINT_ENV,
    OTLP_TRACES_ENDPOINT_ENV,
};
pub use section::{SectionError, ServerSection, StateSection};
pub use served::{ClassifyConfig, RouteConfig, ServedModelConfig, WhenConfig};

/// Environment variable holding comma-separated bearer keys, read by
/// [`ServerConfig::with_env_api_keys`].
pub const API_KEYS_ENV: &str = "ENFORCE_API_KEYS";

/// How a failed enforcement (unresolved, aborted by a validator, or a validator unavailable)
/// reaches a non-streaming client.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FailureResponse {
    /// A normal `chat.completion` holding the last answer, its status in the `enforcement`
    /// object and the `X-Enforce-Status` header.
    #[default]
    Return,
    /// An OpenAI error: 422 for an unresolved answer, 503 for an unavailable validator.
    Error,
}

/// What a streaming client sees while the loop works.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum StreamMode {
    /// Nothing before the answer has passed (keep-alives and status events only): no
    /// unchecked text is ever shown.
    #[default]
    Hold,
    /// Every attempt streams live as `delta.reasoning_content` (chat UIs show it as a
    /// collapsible "Thinking…" block); only the checked answer is sent as `delta.content`.
    Draft,
}

impl StreamMode {
    /// The `on_unresolved` of a model in this mode that configures none: a chat UI (`draft`)
    /// shows the enforcement error as the answer, since it does not display the status that
    /// travels in the last chunk; `hold` (API clients) returns the answer with its status.
    pub fn default_on_unresolved(self) -> FailureResponse {
        match self {
            StreamMode::Hold => FailureResponse::Return,
            StreamMode::Draft => FailureResponse::Error,
        }
    }
}

/// Per-model behaviour of the proxy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelOptions {
    /// What a client gets when a required validator gave no verdict: the answer with its status
    /// (`return`), or an error. Streams too: the answer goes out with `enforcement.status`.
    pub on_unavailable: FailureResponse,
    /// What a client gets when the answer stayed unresolved (or was aborted by a hard-abort
    /// issue).
    pub on_unresolved: FailureResponse,
    /// Send Open WebUI status events (`{"event":{"type":"status",...}}`) in streams. Generic
    /// OpenAI clients do not understand them, so they are opt-in.
    pub status_events: bool,
    /// Check the tool calls of every answer against the `tools` its request declares
    /// (`UNKNOWN_TOOL`, `INVALID_TOOL_ARGUMENTS`) and re-ask when they fail (default on).
    pub check_tool_calls: bool,
    /// Remove the `<!-- STEP: x -->` marker from what the client receives (chat UIs render it as
    /// text). The step is still recorded, and the marker is put back on assistant turns the
    /// client sends back, so the model keeps seeing its own markers.
    pub hide_step_marker: bool,
    /// What a streaming client sees while the loop works: `hold` (default) or `draft`.
    pub stream_mode: StreamMode,
    /// Let a request lower this model's limits for itself with `X-Enforce-Max-Retries` and
    /// `X-Enforce-Token-Budget` (never above the profile's own). Off by default: the
    /// configuration is the contract, and a request sending either header is refused (400)
    /// rather than served with limits it did not get.
    pub request_limits: bool,
    /// Keep this model's checked answers and replay them for the same request under the same
    /// contract (`None`: no cache).
    pub cache: Option<CacheConfig>,
}

/// A model's `cache:`: checked answers (`passed` or `repaired`) kept for `ttl_secs`, keyed by
/// the request, the model and a digest of the profile's contract, so that any change to the
/// contract is a miss.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CacheConfig {
    /// How long an answer is replayed, in seconds (default 600).
    pub ttl_secs: u64,
    /// Most bytes of answers kept in memory; the least recently used go first (default
    /// 64 MiB). Redis bounds its own memory (`maxmemory`).
    pub max_bytes: u64,
    /// `memory` (default: this replica's own) or `redis` (the shared state of `server.state`,
    /// shared by the replicas; memory when no `server.state` is configured).
    pub store: CacheStore,
}

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            ttl_secs: 600,
            max_bytes: 64 << 20,
            store: CacheStore::Memory,
        }
    }
}

/// Where a model's cached answers are kept.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CacheStore {
    /// In this replica's memory, bounded by `max_bytes`.
    #[default]
    Memory,
    /// In the Redis server of `server.state`, shared by the replicas.
    Redis,
}

impl Default for ModelOptions {
    fn default() -> Self {
        ModelOptions {
            on_unavailable: FailureResponse::default(),
            on_unresolved: FailureResponse::default(),
            status_events: false,
            check_tool_calls: true,
            hide_step_marker: false,
            stream_mode: StreamMode::Hold,
            request_limits: false,
            cache: None,
        }
    }
}

/// One public model: the id clients send in `model`, the runner that asks the real model and the
/// enforcer that checks its answers.
#[derive(Clone)]
pub struct Model {
    /// The public model id (listed by `/v1/models`).
    pub id: String,
    /// The name of the profile its enforcer enforces, reported in `X-Enforce-Profile` and the
    /// audit (empty when unnamed).
    pub profile: String,
    /// Asks the upstream model.
    pub runner: Arc<dyn Runner>,
    /// Validates, re-asks and repairs.
    pub enforcer: Arc<Enforcer>,
    /// How failures and streams are presented.
    pub options: ModelOptions,
    /// The model the runner asks upstream (e.g. `llama3.2`), when known: the
    /// `gen_ai.request.model` of its trace spans (else the public id).
    pub upstream_model: Option<String>,
    /// The kind of runner (`claude`, `openai`, `command`), for the audit log.
    pub runner_kind: Option<String>,
    /// Routes picking the profile per request (`None`: always `profile`, at no cost).
    pub routes: Option<Arc<Routes>>,
    /// Request params that constrain decoding to the profile's contract (`decode:
    /// constrained`), added to each request that does not set them itself. They are not a
    /// contract of the request: the profile's validators check the answer already.
    pub decode_params: serde_json::Map<String, serde_json::Value>,
    /// Where requests to endpoints this proxy does not enforce (`/v1/embeddings`,
    /// `/v1/completions`, ...) naming this model go as they are; `None`: its runner cannot take
    /// them (a CLI, a local model, a command), and they are refused.
    pub passthrough: Option<Upstream>,
}

/// An upstream HTTP API that requests this proxy does not enforce are forwarded to, with the
/// runner's own credentials.
#[derive(Clone)]
pub struct Upstream {
    /// The URL the client's path goes under, up to and including its `/v1` (e.g.
    /// `https://api.openai.com/v1`): `/v1/embeddings` goes to `{base_url}/embeddings`.
    pub base_url: String,
    /// Headers set on every forwarded request, replacing the client's (its key to this proxy
    /// is never sent on).
    pub headers: Vec<(String, String)>,
}

impl Upstream {
    /// An OpenAI-compatible API at `base_url` (ending in its `/v1`), with `Authorization:
    /// Bearer key` when a key is given.
    pub fn openai(base_url: impl Into<String>, key: Option<&str>) -> Self {
        Upstream {
            base_url: base_url.into(),
            headers: key
                .map(|key| vec![("authorization".to_string(), format!("Bearer {key}"))])
                .unwrap_or_default(),
        }
    }

    /// Anthropic's API at `base_url` (without `/v1`, as the Anthropic runner takes it), with
    /// `anthropic-version` and, when a key is given, `x-api-key`.
    pub fn anthropic(base_url: &str, key: Option<&str>, version: &str) -> Self {
        let mut headers = vec![("anthropic-version".to_string(), version.to_string())];
        if let Some(key) = key {
            headers.push(("x-api-key".to_string(), key.to_string()));
        }
        Upstream {
            base_url: format!("{}/v1", base_url.trim_end_matches('/')),
            headers,
        }
    }
}

impl fmt::Debug for Upstream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The header values hold the upstream key.
        let names: Vec<&str> = self.headers.iter().map(|(name, _)| name.as_str()).collect();
        f.debug_struct("Upstream")
            .field("base_url", &self.base_url)
            .field("headers", &names)
            .finish()
    }
}

impl Model {
    /// A model with default options.
    pub fn new(id: impl Into<String>, runner: Arc<dyn Runner>, enforcer: Arc<Enforcer>) -> Self {
        Model {
            id: id.into(),
            profile: String::new(),
            runner,
            enforcer,
            options: ModelOptions::default(),
            upstream_model: None,
            runner_kind: None,
            routes: None,
            decode_params: serde_json::Map::new(),
            passthrough: None,
        }
    }

    /// Forwards the requests this proxy does not enforce to `upstream`, builder style.
    pub fn with_passthrough(mut self, upstream: Upstream) -> Self {
        self.passthrough = Some(upstream);
        self
    }

    /// Sets the params that constrain decoding, builder style.
    pub fn with_decode_params(
        mut self,
        params: serde_json::Map<String, serde_json::Value>,
    ) -> Self {
        self.decode_params = params;
        self
    }

    /// Routes the requests to profiles, builder style (no routes: none are tried).
    pub fn with_routes(mut self, routes: Routes) -> Self {
        self.routes = (!routes.is_empty()).then(|| Arc::new(routes));
        self
    }

    /// Names the profile, builder style.
    pub fn with_profile(mut self, name: impl Into<String>) -> Self {
        self.profile = name.into();
        self
    }

    /// Names the kind of runner (`claude`, `openai`, `command`) for the audit, builder style.
    pub fn with_runner_kind(mut self, kind: impl Into<String>) -> Self {
        self.runner_kind = Some(kind.into());
        self
    }

    /// Replaces the options, builder style.
    pub fn with_options(mut self, options: ModelOptions) -> Self {
        self.options = options;
        self
    }

    /// Names the model the runner asks upstream, builder style.
    pub fn with_upstream_model(mut self, name: impl Into<String>) -> Self {
        self.upstream_model = Some(name.into());
        self
    }
}

impl fmt::Debug for Model {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Model")
            .field("id", &self.id)
            .field("profile", &self.profile)
            .field("validators", &self.enforcer.validators().len())
            .field("options", &self.options)
            .field("upstream_model", &self.upstream_model)
            .field("runner_kind", &self.runner_kind)
            .field("routes", &self.routes)
            .field("passthrough", &self.passthrough)
            .finish_non_exhaustive()
    }
}

/// When the audit log is forced to disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// Leave it to the operating system (lines are still written, and flushed at shutdown).
    #[default]
    Never,
    /// After every line: no record is lost on a crash, at the cost of one fsync per request.
    Always,
    /// At most once per interval, when lines were written since the last sync.
    Interval(Duration),
}

/// Server-wide settings. `Default` gives the documented defaults.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Accepted bearer keys that may use everything; when this and
    /// [`key_grants`](Self::key_grants) are both empty, there is no authentication.
    pub api_keys: Vec<String>,
    /// Accepted named keys, some limited to some models and profiles.
    pub key_grants: Vec<KeyGrant>,
    /// Largest accepted request body in bytes (default 10 MB).
    pub max_body_bytes: usize,
    /// Most request-body bytes held at once by the requests being answered (`None`:
    /// [`max_body_bytes`](Self::max_body_bytes)); see [`body_budget`](Self::body_budget).
    pub max_body_bytes_in_flight: Option<usize>,
    /// Largest JSON of facts a request may carry, per source (`enforce.context` in the body,
    /// the `X-Enforce-Context` header), in bytes (default 16 KiB).
    pub max_context_bytes: usize,
    /// Most enforcements running at once; beyond it requests get 429 with `Retry-After`
    /// (default 64).
    pub max_concurrent: usize,
    /// Seconds sent in `Retry-After` with a 429 (default 1).
    pub retry_after_secs: u64,
    /// Deadline of one request's enforcement, all attempts included (default 300 s).
    pub request_timeout: Duration,
    /// Interval of `: keepalive` comments while a stream waits for a validated answer
    /// (default 5 s). Comments are also sent at every re-ask.
    pub keepalive_interval: Duration,
    /// Directory holding one sub-directory per chat with its `status.json`; `None` keeps
    /// sessions in memory only.
    pub session_dir: Option<PathBuf>,
    /// File the audit log (one JSON line per enforcement) is appended to; `None` disables it.
    pub audit_log: Option<PathBuf>,
    /// When the audit log is synced to disk.
    pub audit_fsync: FsyncPolicy,
    /// How long a graceful shutdown waits for in-flight requests (default 30 s).
    pub shutdown_grace: Duration,
    /// Longest a client connection may take to send a whole request head, counted from when
    /// it opens or its previous answer ends: a head sent slowly and an idle keep-alive
    /// connection are both closed after it (default 30 s). A request's body is read within
    /// its [`request_timeout`](Self::request_timeout).
    pub header_timeout: Duration,
    /// Most bytes of stored Responses answers (`store: true`) kept in memory; beyond it the
    /// oldest go first (default 64 MiB). A session directory or the shared state keeps them
    /// all.
    pub max_stored_response_bytes: usize,
    /// Most chat sessions kept in memory; beyond it the least recently used go first
    /// (default 10,000). With a session directory or the shared state they are read back
    /// from there when needed; without, an evicted chat starts a fresh step history.
    pub max_cached_sessions: usize,
    /// Where to export OpenTelemetry traces; `None` (the default) exports nothing. Needs the
    /// `otel` feature.
    pub otlp: Option<OtlpConfig>,
    /// State shared with other replicas (Redis); `None` keeps everything in this process and
    /// its `session_dir`.
    pub state: Option<StateConfig>,
}

/// Whether `max_concurrent` counts this replica's enforcements or those of all replicas.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConcurrencyScope {
    /// Each replica admits up to `max_concurrent`.
    #[default]
    Local,
    /// All replicas together admit up to `max_concurrent` (leases in the shared state); each
    /// replica still admits no more than `max_concurrent` itself.
    Global,
}

/// Where and how replicas share chat sessions, circuit breakers and the concurrency limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateConfig {
    /// `redis://[user:password@]HOST[:PORT][/DB]`, checked when the configuration is read.
    pub redis_url: String,
    /// Prefix part that separates deployments sharing one Redis: keys are
    /// `enforce:<namespace>:...` (default `default`).
    pub namespace: String,
    /// This replica's name, recorded as the holder of the runner sessions it starts (default:
    /// the host name). Two replicas must never share one.
    pub replica: String,
    /// Scope of `max_concurrent`.
    pub concurrency: ConcurrencyScope,
    /// How long an untouched chat session is kept in Redis (default 30 days).
    pub session_ttl: Duration,
    /// Longest wait for one Redis operation (connect or command) before the request goes on
    /// with local state (default 250 ms).
    pub timeout: Duration,
}

impl StateConfig {
    /// A configuration for `redis_url` with the defaults.
    pub fn redis(redis_url: impl Into<String>) -> Self {
        StateConfig {
            redis_url: redis_url.into(),
            namespace: "default".into(),
            replica: default_replica_name(),
            concurrency: ConcurrencyScope::Local,
            session_ttl: Duration::from_secs(30 * 24 * 3600),
            timeout: Duration::from_millis(250),
        }
    }
}

/// The host name (`HOSTNAME`, else the kernel's), else `enforce`: in a container it is the
/// pod or container name, which differs per replica.
fn default_replica_name() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "enforce".into())
}

/// Checks a Redis URL without connecting: scheme, host, database number.
pub(crate) fn check_redis_url(url: &str) -> Result<(), String> {
    let rest = url
        .strip_prefix("redis://")
        .ok_or_else(|| format!("`{url}` is not a redis:// URL (e.g. redis://127.0.0.1:6379/0)"))?;
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(h, _)| h).unwrap_or(""),
        None => host_port.rsplit_once(':').map_or(host_port, |(h, _)| h),
    };
    if host.is_empty() {
        return Err(format!(
            "`{url}` names no host (e.g. redis://127.0.0.1:6379/0)"
        ));
    }
    if let Some((_, port)) = host_port
        .rsplit_once(':')
        .filter(|_| !host_port.ends_with(']'))
    {
        if port.parse::<u16>().is_err() {
            return Err(format!(
                "`{url}`: the port `{port}` is not a number from 0 to 65535"
            ));
        }
    }
    if !path.is_empty() && path.parse::<u32>().is_err() {
        return Err(format!("`{url}`: the database `{path}` is not a number"));
    }
    #[cfg(feature = "redis")]
    redis::Client::open(url).map_err(|e| format!("`{url}`: {e}"))?;
    Ok(())
}

impl ServerConfig {
    /// The request-body bytes this replica holds at once, over all requests being answered.
    /// `max_concurrent` alone does not bound memory: a body is in memory twice over at its
    /// peaks (the bytes and the parsed request, then the conversation and the upstream
    /// request), so `max_concurrent` large bodies may be many times a replica's idle size.
    /// `max_body_bytes` by default: one largest body at a time (about 20–25 MB over idle at
    /// the default 10 MiB, with the allocator's slack), or as many ordinary ones as
    /// `max_concurrent` admits (64 bodies of 160 KiB).
    pub fn body_budget(&self) -> usize {
        self.max_body_bytes_in_flight.unwrap_or(self.max_body_bytes)
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_keys: Vec::new(),
            key_grants: Vec::new(),
            max_body_bytes: 10 * 1024 * 1024,
            max_body_bytes_in_flight: None,
            max_context_bytes: 16 * 1024,
            max_concurrent: 64,
            retry_after_secs: 1,
            request_timeout: Duration::from_secs(300),
            keepalive_interval: Duration::from_secs(5),
            session_dir: None,
            audit_log: None,
            audit_fsync: FsyncPolicy::Never,
            shutdown_grace: Duration::from_secs(30),
            header_timeout: Duration::from_secs(30),
            max_stored_response_bytes: 64 * 1024 * 1024,
            max_cached_sessions: 10_000,
            otlp: None,
            state: None,
        }
    }
}

impl ServerConfig {
    /// Completes [`otlp`](Self::otlp) from the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    /// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`, `OTEL_SERVICE_NAME`, `OTEL_SDK_DISABLED`) under the
    /// section `otlp` came from: see [`OtlpConfig::resolve`].
    pub fn with_env_otlp(mut self, section: Option<&OtlpSection>) -> Result<Self, SectionError> {
        self.otlp = OtlpConfig::resolve(section, |name| std::env::var(name).ok())?;
        Ok(self)
    }

    /// Adds the keys from [`API_KEYS_ENV`] (comma-separated) to `api_keys`. The variable set
    /// but empty, or with an empty entry, is an error: it usually means a key that was meant to
    /// be there is missing.
    pub fn with_env_api_keys(mut self) -> Result<Self, crate::ServerError> {
        if let Some(value) = std::env::var_os(API_KEYS_ENV) {
            let value = value
                .into_string()
                .map_err(|_| crate::ServerError::EmptyApiKey {
                    origin: format!("{API_KEYS_ENV} (not UTF-8)"),
                })?;
            let keys = parse_key_list(&value).map_err(|e| crate::ServerError::EmptyApiKey {
                origin: format!("{API_KEYS_ENV}: {e}"),
            })?;
            self.api_keys.extend(keys);
        }
        Ok(self)
    }
}
