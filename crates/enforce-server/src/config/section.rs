//! The `server:` section of a config file as written ([`ServerSection`], [`StateSection`]) and
//! its check into a [`ServerConfig`](super::ServerConfig); [`SectionError`] names the bad key.

use super::{
    check_redis_url, ApiKeyEntry, ConcurrencyScope, FsyncPolicy, KeyGrant, OtlpConfig, OtlpSection,
    ServerConfig, StateConfig,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
    /// Most request-body bytes held at once by the requests being answered (default
    /// `max_body_bytes`); beyond it requests get 429 with `Retry-After`.
    pub max_body_bytes_in_flight: Option<usize>,
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
    /// Longest a client connection may take to send a whole request head, from when it opens
    /// or its previous answer ends: slow heads and idle keep-alive connections are closed
    /// after it (default 30).
    pub header_timeout_secs: Option<f64>,
    /// Most bytes of stored Responses answers kept in memory, oldest evicted first (default
    /// 64 MiB).
    pub max_stored_response_bytes: Option<usize>,
    /// Most chat sessions kept in memory, least recently used evicted first (default 10000).
    pub max_cached_sessions: Option<usize>,
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
        c.concurrency = self.concurrency.unwrap_or(c.concurrency);
        if let Some(secs) = self.session_ttl_secs {
            let secs = positive("state.session_ttl_secs", secs, AT_LEAST_ONE)?;
            c.session_ttl = Duration::from_secs(secs);
        }
        if let Some(ms) = self.timeout_ms {
            c.timeout = Duration::from_millis(positive("state.timeout_ms", ms, AT_LEAST_ONE)?);
        }
        Ok(c)
    }
}

/// The error of an entry whose key entry `first` already has (the key itself is never shown).
fn same_key(first: usize) -> String {
    format!("the same key as api_keys[{first}]: one key has one set of limits")
}

/// The index of the first of `entries` whose key is `key` (a `key_env` read through `var`).
fn first_with_key(
    entries: &[ApiKeyEntry],
    key: &str,
    var: impl Fn(&str) -> Option<String>,
) -> Option<usize> {
    entries.iter().position(|entry| {
        let other = match entry {
            ApiKeyEntry::Key(k) => Some(k.trim().to_string()),
            ApiKeyEntry::Scoped(spec) => match (&spec.key, &spec.key_env) {
                (Some(k), _) => Some(k.trim().to_string()),
                (None, Some(name)) => var(name).map(|v| v.trim().to_string()),
                (None, None) => None,
            },
        };
        other.as_deref() == Some(key)
    })
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

const AT_LEAST_ONE: &str = "must be at least 1";
const MORE_THAN_ZERO: &str = "must be more than 0";

/// `value` when it is above zero (a zero limit would refuse everything); else `message`.
fn positive<T: Default + PartialEq>(
    field: &'static str,
    value: T,
    message: &str,
) -> Result<T, SectionError> {
    if value == T::default() {
        return Err(SectionError {
            field: field.into(),
            message: message.into(),
        });
    }
    Ok(value)
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
            c.max_body_bytes = positive("max_body_bytes", v, AT_LEAST_ONE)?;
        }
        if let Some(v) = self.max_body_bytes_in_flight {
            c.max_body_bytes_in_flight =
                Some(positive("max_body_bytes_in_flight", v, AT_LEAST_ONE)?);
        }
        c.max_context_bytes = self.max_context_bytes.unwrap_or(c.max_context_bytes);
        if let Some(v) = self.max_concurrent {
            c.max_concurrent = positive("max_concurrent", v, AT_LEAST_ONE)?;
        }
        c.retry_after_secs = self.retry_after_secs.unwrap_or(c.retry_after_secs);
        if let Some(d) = seconds("request_timeout_secs", self.request_timeout_secs)? {
            let why = "must be more than 0 (every request would time out at once)";
            c.request_timeout = positive("request_timeout_secs", d, why)?;
        }
        if let Some(d) = seconds("keepalive_secs", self.keepalive_secs)? {
            c.keepalive_interval = positive("keepalive_secs", d, MORE_THAN_ZERO)?;
        }
        if let Some(d) = seconds("shutdown_grace_secs", self.shutdown_grace_secs)? {
            c.shutdown_grace = d;
        }
        if let Some(d) = seconds("header_timeout_secs", self.header_timeout_secs)? {
            c.header_timeout = positive("header_timeout_secs", d, MORE_THAN_ZERO)?;
        }
        c.max_stored_response_bytes =
            (self.max_stored_response_bytes).unwrap_or(c.max_stored_response_bytes);
        if let Some(v) = self.max_cached_sessions {
            c.max_cached_sessions = positive("max_cached_sessions", v, MORE_THAN_ZERO)?;
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
                    let key = key.trim();
                    if let Some(first) = first_with_key(&self.api_keys[..index], key, &var) {
                        return Err(at("", same_key(first)));
                    }
                    plain.push(key.to_string());
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
            if let Some(first) = first_with_key(&self.api_keys[..index], &key, &var) {
                return Err(at("", same_key(first)));
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
