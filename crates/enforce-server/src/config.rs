//! What the server is given: [`ServerConfig`], one [`Model`] per public model id, and the
//! per-model [`ModelOptions`].

use crate::routes::Routes;
use enforce_core::{Enforcer, Runner};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

mod otlp;
pub use otlp::{
    OtlpConfig, OtlpSection, DEFAULT_OTLP_TRACES_URL, DEFAULT_SERVICE_NAME, OTEL_SDK_DISABLED_ENV,
    OTEL_SERVICE_NAME_ENV, OTLP_ENDPOINT_ENV, OTLP_TRACES_ENDPOINT_ENV,
};

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
        }
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

/// A named key (a `server.api_keys` entry given as a mapping), which the audit record names,
/// and which may be limited to some models and profiles (`models:`, `profiles:`). A request
/// with a limited key for another model, or enforced with another profile, is refused with
/// 403; `/v1/models` lists only its models.
#[derive(Clone, PartialEq, Eq)]
pub struct KeyGrant {
    /// The name logs and `enforce config explain` show for it (never the key).
    pub name: String,
    /// The key itself.
    pub key: String,
    /// The public model ids it may use; `None`: every model.
    pub models: Option<Vec<String>>,
    /// The profiles its requests may be enforced with (the model's own, a route's or
    /// `X-Enforce-Profile`'s); `None`: every profile.
    pub profiles: Option<Vec<String>>,
}

impl KeyGrant {
    /// Whether it is limited to some models or profiles (else it may use everything, like an
    /// anonymous key, and is kept for its name).
    pub fn is_limited(&self) -> bool {
        self.models.is_some() || self.profiles.is_some()
    }

    /// Whether this key may use model `id`.
    pub fn allows_model(&self, id: &str) -> bool {
        self.models
            .as_ref()
            .is_none_or(|models| models.iter().any(|m| m == id))
    }

    /// Whether this key's requests may be enforced with profile `name`.
    pub fn allows_profile(&self, name: &str) -> bool {
        self.profiles
            .as_ref()
            .is_none_or(|profiles| profiles.iter().any(|p| p == name))
    }
}

impl fmt::Debug for KeyGrant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The key stays out of logs and panics.
        f.debug_struct("KeyGrant")
            .field("name", &self.name)
            .field("models", &self.models)
            .field("profiles", &self.profiles)
            .finish_non_exhaustive()
    }
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

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            api_keys: Vec::new(),
            key_grants: Vec::new(),
            max_body_bytes: 10 * 1024 * 1024,
            max_context_bytes: 16 * 1024,
            max_concurrent: 64,
            retry_after_secs: 1,
            request_timeout: Duration::from_secs(300),
            keepalive_interval: Duration::from_secs(5),
            session_dir: None,
            audit_log: None,
            audit_fsync: FsyncPolicy::Never,
            shutdown_grace: Duration::from_secs(30),
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

    /// Adds the keys from [`API_KEYS_ENV`] (comma-separated, blanks ignored) to `api_keys`.
    pub fn with_env_api_keys(mut self) -> Self {
        if let Ok(value) = std::env::var(API_KEYS_ENV) {
            self.api_keys.extend(parse_key_list(&value));
        }
        self
    }
}

/// The `server:` section of a config file; every field optional. Durations in seconds.
///
/// ```
/// let section: enforce_server::ServerSection = serde_json::from_str(
///     r#"{"listen": "127.0.0.1:9000", "max_concurrent": 8, "audit_fsync": "interval",
///         "audit_fsync_interval_secs": 2, "session_dir": "sessions"}"#).unwrap();
/// let config = section.to_config().unwrap();
/// assert_eq!(config.max_concurrent, 8);
/// assert_eq!(section.listen.as_deref(), Some("127.0.0.1:9000"));
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerSection {
    /// Address to listen on (the command line's `--listen` wins).
    pub listen: Option<String>,
    /// Accepted keys (added to `ENFORCE_API_KEYS`): a key as a string may use every model;
    /// an entry `{name, key | key_env, models, profiles}` only the models and profiles it
    /// lists (403 otherwise).
    pub api_keys: Vec<ApiKeyEntry>,
    /// Let requests lower their model's limits with `X-Enforce-Max-Retries` and
    /// `X-Enforce-Token-Budget` (default false: such a request gets a 400). A model's own
    /// `allow_request_limits` wins.
    pub allow_request_limits: Option<bool>,
    /// Largest request body in bytes.
    pub max_body_bytes: Option<usize>,
    /// Largest JSON of facts per request source (`enforce.context`, `X-Enforce-Context`).
    pub max_context_bytes: Option<usize>,
    /// Most enforcements at once.
    pub max_concurrent: Option<usize>,
    /// `Retry-After` seconds with a 429.
    pub retry_after_secs: Option<u64>,
    /// Deadline of one request.
    pub request_timeout_secs: Option<f64>,
    /// Interval of `: keepalive` comments.
    pub keepalive_secs: Option<f64>,
    /// Directory of per-chat `status.json` files.
    pub session_dir: Option<PathBuf>,
    /// Audit log file.
    pub audit_log: Option<PathBuf>,
    /// `never`, `always` or `interval`.
    #[cfg_attr(
        feature = "config-schema",
        schemars(extend("enum" = ["never", "always", "interval", null]))
    )]
    pub audit_fsync: Option<String>,
    /// Interval for `audit_fsync: interval` (default 1 s).
    pub audit_fsync_interval_secs: Option<f64>,
    /// Longest wait for in-flight requests at shutdown.
    pub shutdown_grace_secs: Option<f64>,
    /// Export OpenTelemetry traces over OTLP/HTTP: a span per request, per attempt and per
    /// validator run. Off when absent (unless `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
    pub otlp: Option<OtlpSection>,
    /// State shared by replicas behind one load balancer (chat sessions, circuit breakers,
    /// optionally the concurrency limit) in Redis. Without it everything stays in this process
    /// and `session_dir`.
    pub state: Option<StateSection>,
}

/// The `server.state:` section.
///
/// ```
/// let section: enforce_server::ServerSection = serde_json::from_str(
///     r#"{"state": {"redis": "redis://127.0.0.1:6379/0", "concurrency": "global",
///                   "replica": "a"}}"#).unwrap();
/// let state = section.to_config().unwrap().state.unwrap();
/// assert_eq!(state.replica, "a");
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateSection {
    /// The Redis server, `redis://[user:password@]HOST[:PORT][/DB]`.
    pub redis: Option<String>,
    /// Separates deployments sharing one Redis: keys are `enforce:<namespace>:...` (default
    /// `default`).
    pub namespace: Option<String>,
    /// This replica's name (default: the host name); must differ between replicas.
    pub replica: Option<String>,
    /// `local` (default): `max_concurrent` per replica; `global`: for all replicas together.
    pub concurrency: Option<ConcurrencyScope>,
    /// How long an untouched chat session is kept in Redis (default 30 days).
    pub session_ttl_secs: Option<u64>,
    /// Longest wait for one Redis operation before a request goes on with local state
    /// (default 250).
    pub timeout_ms: Option<u64>,
}

impl StateSection {
    fn to_config(&self) -> Result<StateConfig, SectionError> {
        let error = |field: &str, message: String| SectionError {
            field: field.into(),
            message,
        };
        let url = self
            .redis
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .ok_or_else(|| {
                error(
                    "state.redis",
                    "give the Redis URL, e.g. redis://127.0.0.1:6379/0".into(),
                )
            })?;
        check_redis_url(url).map_err(|m| error("state.redis", m))?;
        let mut c = StateConfig::redis(url);
        if let Some(ns) = &self.namespace {
            if ns.is_empty() || ns.contains(|ch: char| ch.is_whitespace() || ch == ':') {
                return Err(error(
                    "state.namespace",
                    format!("must be a non-empty word without spaces or `:`, got `{ns}`"),
                ));
            }
            c.namespace = ns.clone();
        }
        if let Some(replica) = &self.replica {
            if replica.trim().is_empty() {
                return Err(error("state.replica", "must not be empty".into()));
            }
            c.replica = replica.trim().to_string();
        }
        if let Some(scope) = self.concurrency {
            c.concurrency = scope;
        }
        if let Some(secs) = self.session_ttl_secs {
            if secs == 0 {
                return Err(error("state.session_ttl_secs", "must be at least 1".into()));
            }
            c.session_ttl = Duration::from_secs(secs);
        }
        if let Some(ms) = self.timeout_ms {
            if ms == 0 {
                return Err(error("state.timeout_ms", "must be at least 1".into()));
            }
            c.timeout = Duration::from_millis(ms);
        }
        Ok(c)
    }
}

/// A `server:` value that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("server.{field}: {message}")]
pub struct SectionError {
    /// The field, below `server.` (`api_keys[1].key_env`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn seconds(field: &'static str, value: Option<f64>) -> Result<Option<Duration>, SectionError> {
    value
        .map(|v| {
            Duration::try_from_secs_f64(v).map_err(|_| SectionError {
                field: field.into(),
                message: format!("must be a non-negative number of seconds, got {v}"),
            })
        })
        .transpose()
}

impl ServerSection {
    /// The settings, on top of the defaults.
    pub fn to_config(&self) -> Result<ServerConfig, SectionError> {
        let (api_keys, key_grants) = self.keys(|name| std::env::var(name).ok())?;
        let mut c = ServerConfig {
            api_keys,
            key_grants,
            session_dir: self.session_dir.clone(),
            audit_log: self.audit_log.clone(),
            ..ServerConfig::default()
        };
        if let Some(section) = &self.otlp {
            c.otlp = OtlpConfig::resolve(Some(section), |_| None)?;
        }
        if let Some(v) = self.max_body_bytes {
            c.max_body_bytes = v;
        }
        if let Some(v) = self.max_context_bytes {
            c.max_context_bytes = v;
        }
        if let Some(v) = self.max_concurrent {
            if v == 0 {
                return Err(SectionError {
                    field: "max_concurrent".into(),
                    message: "must be at least 1".into(),
                });
            }
            c.max_concurrent = v;
        }
        if let Some(v) = self.retry_after_secs {
            c.retry_after_secs = v;
        }
        if let Some(d) = seconds("request_timeout_secs", self.request_timeout_secs)? {
            c.request_timeout = d;
        }
        if let Some(d) = seconds("keepalive_secs", self.keepalive_secs)? {
            if d.is_zero() {
                return Err(SectionError {
                    field: "keepalive_secs".into(),
                    message: "must be more than 0".into(),
                });
            }
            c.keepalive_interval = d;
        }
        if let Some(d) = seconds("shutdown_grace_secs", self.shutdown_grace_secs)? {
            c.shutdown_grace = d;
        }
        c.audit_fsync = self.fsync_policy()?;
        c.state = self
            .state
            .as_ref()
            .map(StateSection::to_config)
            .transpose()?;
        Ok(c)
    }

    /// The keys of `api_keys`: the plain ones, and the named ones, some limited to some
    /// models or profiles (their `key_env` read through `var`).
    pub fn keys(
        &self,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<(Vec<String>, Vec<KeyGrant>), SectionError> {
        let mut plain = Vec::new();
        let mut grants = Vec::new();
        for (index, entry) in self.api_keys.iter().enumerate() {
            let at = |key: &str, message: String| SectionError {
                field: format!("api_keys[{index}]{key}"),
                message,
            };
            let spec = match entry {
                ApiKeyEntry::Key(key) if key.trim().is_empty() => {
                    return Err(at("", "is empty".into()))
                }
                ApiKeyEntry::Key(key) => {
                    plain.push(key.trim().to_string());
                    continue;
                }
                ApiKeyEntry::Scoped(spec) => spec,
            };
            let key = match (&spec.key, &spec.key_env) {
                (Some(key), None) => key.trim().to_string(),
                (None, Some(name)) => var(name).map(|v| v.trim().to_string()).ok_or_else(|| {
                    at(
                        ".key_env",
                        format!("the environment variable `{name}` is not set"),
                    )
                })?,
                _ => return Err(at("", "give exactly one of `key` or `key_env`".into())),
            };
            if key.is_empty() {
                let which = if spec.key.is_some() {
                    ".key"
                } else {
                    ".key_env"
                };
                return Err(at(which, "the key is empty".into()));
            }
            for (list, what) in [(&spec.models, "models"), (&spec.profiles, "profiles")] {
                if let Some(i) = list.iter().flatten().position(|n| n.trim().is_empty()) {
                    return Err(at(&format!(".{what}[{i}]"), "is empty".into()));
                }
            }
            grants.push(KeyGrant {
                name: spec
                    .name
                    .clone()
                    .unwrap_or_else(|| format!("api_keys[{index}]")),
                key,
                models: spec.models.clone(),
                profiles: spec.profiles.clone(),
            });
        }
        Ok((plain, grants))
    }

    /// `audit_fsync` (with `audit_fsync_interval_secs`, default 1 s) as a policy; `never`
    /// when not given. `enforce run --audit` reads it too, so both writers sync alike.
    pub fn fsync_policy(&self) -> Result<FsyncPolicy, SectionError> {
        let every = seconds("audit_fsync_interval_secs", self.audit_fsync_interval_secs)?
            .unwrap_or(Duration::from_secs(1));
        match self.audit_fsync.as_deref() {
            None | Some("never") => Ok(FsyncPolicy::Never),
            Some("always") => Ok(FsyncPolicy::Always),
            Some("interval") => Ok(FsyncPolicy::Interval(every)),
            Some(other) => Err(SectionError {
                field: "audit_fsync".into(),
                message: format!("must be never, always or interval, got `{other}`"),
            }),
        }
    }
}

/// One entry of `server.api_keys`: a key as a string, or a key with what it may use.
///
/// ```yaml
/// server:
///   api_keys:
///     - sk-admin-1                      # every model and profile
///     - name: support-app
///       key_env: SUPPORT_APP_KEY        # or key: "..."
///       models: [support]               # 403 for any other model
///       profiles: [support, support-json]
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ApiKeyEntry {
    /// A key that may use every model and profile.
    Key(String),
    /// A key with a name (the audit record shows it), possibly limited to some models or
    /// profiles.
    Scoped(ApiKeySpec),
}

impl<'de> Deserialize<'de> for ApiKeyEntry {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, MapAccess, Visitor};
        // By hand rather than `untagged`, so that a wrong field in a mapping is reported by
        // name instead of as "matches no variant".
        struct Entry;
        impl<'de> Visitor<'de> for Entry {
            type Value = ApiKeyEntry;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a key, or a mapping with `key` or `key_env` and `models`/`profiles`")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<ApiKeyEntry, E> {
                Ok(ApiKeyEntry::Key(v.to_string()))
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<ApiKeyEntry, A::Error> {
                ApiKeySpec::deserialize(de::value::MapAccessDeserializer::new(map))
                    .map(ApiKeyEntry::Scoped)
            }
        }
        deserializer.deserialize_any(Entry)
    }
}

/// A `server.api_keys` entry given as a mapping.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ApiKeySpec {
    /// Its name in the audit record, logs and `enforce config explain` (default `api_keys[N]`).
    pub name: Option<String>,
    /// The key (prefer `key_env`: a key in a file is a key in backups).
    pub key: Option<String>,
    /// The environment variable holding the key.
    pub key_env: Option<String>,
    /// The model ids it may use (default: all).
    pub models: Option<Vec<String>>,
    /// The profiles its requests may be enforced with (default: all).
    pub profiles: Option<Vec<String>>,
}

/// Splits a comma-separated key list, trimming blanks and dropping empty entries.
pub fn parse_key_list(value: &str) -> Vec<String> {
    value
        .split(',')
        .map(str::trim)
        .filter(|k| !k.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_list_ignores_blanks() {
        assert_eq!(parse_key_list(" a, ,b ,"), vec!["a", "b"]);
    }

    #[test]
    fn section_rejects_bad_values() {
        let bad: ServerSection = serde_json::from_str(r#"{"audit_fsync":"sometimes"}"#).unwrap();
        assert_eq!(bad.to_config().unwrap_err().field, "audit_fsync");
        let bad: ServerSection = serde_json::from_str(r#"{"request_timeout_secs":-1}"#).unwrap();
        assert!(bad.to_config().is_err());
        assert!(serde_json::from_str::<ServerSection>(r#"{"nope":1}"#).is_err());
        let ok = ServerSection::default().to_config().unwrap();
        assert_eq!(ok.max_body_bytes, 10 * 1024 * 1024);
    }

    pub(super) fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        }
    }

    #[test]
    fn state_section_checks_the_redis_url() {
        let state = |json: &str| {
            serde_json::from_str::<ServerSection>(&format!(r#"{{"state": {json}}}"#))
                .unwrap()
                .to_config()
        };
        let ok = state(r#"{"redis": "redis://127.0.0.1:6379/2", "namespace": "prod"}"#)
            .unwrap()
            .state
            .unwrap();
        assert_eq!(ok.namespace, "prod");
        assert_eq!(ok.concurrency, ConcurrencyScope::Local);
        assert_eq!(ok.timeout, Duration::from_millis(250));
        assert!(state(r#"{"redis": "redis://user:pw@cache/0"}"#).is_ok());
        for (bad, says) in [
            (
                r#"{"redis": "http://127.0.0.1:6379"}"#,
                "not a redis:// URL",
            ),
            (r#"{"redis": "redis://:6379"}"#, "names no host"),
            (r#"{"redis": "redis://host:99999"}"#, "port"),
            (r#"{"redis": "redis://host/db0"}"#, "database"),
            (r#"{}"#, "give the Redis URL"),
            (r#"{"redis": "redis://h", "namespace": "a:b"}"#, "namespace"),
        ] {
            let e = state(bad).unwrap_err();
            assert!(e.field.starts_with("state."), "{bad}: {e}");
            assert!(e.to_string().contains(says), "{bad}: {e}");
        }
        assert!(ServerSection::default()
            .to_config()
            .unwrap()
            .state
            .is_none());
    }

    #[test]
    fn api_keys_take_plain_keys_and_limited_entries() {
        let section: ServerSection = serde_json::from_value(serde_json::json!({"api_keys": [
            "plain-1",
            {"name": "app", "key_env": "APP_KEY", "models": ["m"]},
            {"key": " inline ", "profiles": ["p"]},
            {"name": "unlimited", "key": "k-all"},
        ]}))
        .unwrap();
        let env = vars(&[("APP_KEY", "from-env")]);
        let (plain, grants) = section.keys(&env).unwrap();
        assert_eq!(plain, ["plain-1"]);
        assert_eq!(grants.len(), 3);
        assert_eq!(
            (grants[0].name.as_str(), grants[0].key.as_str()),
            ("app", "from-env")
        );
        assert!(grants[0].allows_model("m") && !grants[0].allows_model("n"));
        assert!(grants[0].allows_profile("anything"));
        assert_eq!(
            (grants[1].name.as_str(), grants[1].key.as_str()),
            ("api_keys[2]", "inline")
        );
        assert!(grants[1].allows_model("n") && !grants[1].allows_profile("q"));
        // A named key without limits is kept for its name (the audit names it).
        assert_eq!(grants[2].name, "unlimited");
        assert!(grants[0].is_limited() && grants[1].is_limited() && !grants[2].is_limited());
        assert!(grants[2].allows_model("n") && grants[2].allows_profile("q"));
        assert!(
            !format!("{:?}", grants[0]).contains("from-env"),
            "no key in Debug"
        );
        for (entry, field, says) in [
            (
                serde_json::json!({"key_env": "UNSET"}),
                "api_keys[0].key_env",
                "`UNSET` is not set",
            ),
            (
                serde_json::json!({"key": "a", "key_env": "APP_KEY"}),
                "api_keys[0]",
                "exactly one",
            ),
            (
                serde_json::json!({"models": ["m"]}),
                "api_keys[0]",
                "exactly one",
            ),
            (
                serde_json::json!({"key": "a", "models": [" "]}),
                "api_keys[0].models[0]",
                "empty",
            ),
            (serde_json::json!(" "), "api_keys[0]", "empty"),
        ] {
            let section: ServerSection =
                serde_json::from_value(serde_json::json!({"api_keys": [entry]})).unwrap();
            let e = section.keys(&env).unwrap_err();
            assert_eq!(e.field, field, "{e}");
            assert!(e.message.contains(says), "{e}");
        }
        let typo = serde_json::from_value::<ServerSection>(
            serde_json::json!({"api_keys": [{"key": "a", "model": ["m"]}]}),
        );
        assert!(typo
            .unwrap_err()
            .to_string()
            .contains("unknown field `model`"));
    }

    #[test]
    fn options_parse_from_config_words() {
        let o: ModelOptions =
            serde_json::from_str(r#"{"on_unresolved":"error","status_events":true}"#).unwrap();
        assert_eq!(o.on_unresolved, FailureResponse::Error);
        assert_eq!(o.on_unavailable, FailureResponse::Return);
        assert!(o.status_events);
    }
}
