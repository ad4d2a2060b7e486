//! The answer cache of models with `cache:` ([`CacheConfig`]): a checked answer (`passed` or
//! `repaired`, never a fallback, a failure or an answer cut short) replayed to the same request
//! under the same contract.
//!
//! A gateway's cache keyed by the request alone replays answers no check has seen once the
//! checks change. This one is keyed ([`key`]) by a SHA-256 digest of the surface-neutral
//! request (messages, the params that change the answer, the validators' context), the
//! surface, the model, the key name of a limited key, and the **fingerprint of the profile's
//! contract** (its validators and their options, its policy, the plugins' versions: given by
//! whoever builds the server, [`ServerBuilder::contract`](crate::ServerBuilder::contract)). A
//! profile without a fingerprint is never cached, so any change to a contract is a miss.
//!
//! What is kept is the answer, not its rendering ([`CachedAnswer`]): a hit runs the rest of
//! the pipeline as an enforcement that ended at once, so it gets its own id, its surface's
//! shape, a stream for a streamed request (the events a held stream writes), the audit and
//! the metrics.

use crate::config::{CacheConfig, CacheStore, KeyGrant, Model};
use crate::metrics::{Metrics, CACHE_LOOKUPS, CACHE_TOKENS_SAVED};
use crate::shared::ReplicaState;
use axum::http::{header, HeaderMap, HeaderValue};
use bytes::Bytes;
use enforce_core::runner::ToolCall;
use enforce_core::{Context, Issue, Message, Outcome, Status, StopReason, Usage};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Request params that do not change the answer's content: how it is delivered.
const DELIVERY_PARAMS: [&str; 2] = ["stream", "stream_options"];

/// What the cache keeps of an answer: enough to conclude a turn as the loop would have.
#[derive(Debug, Serialize, Deserialize)]
struct CachedAnswer {
    status: Status,
    response: String,
    #[serde(default)]
    tool_calls: Vec<ToolCall>,
    #[serde(default)]
    warnings: Vec<Issue>,
    /// What the answer cost when it was made: the tokens a hit saves.
    #[serde(default)]
    usage: Option<Usage>,
}

impl CachedAnswer {
    /// The answer of `outcome`, when it may be cached: checked (`passed` or `repaired`), not
    /// the fallback, every validator run, nothing cut.
    fn of(outcome: &Outcome) -> Option<Self> {
        let checked = matches!(outcome.status, Status::Passed | Status::Repaired)
            && matches!(outcome.stop_reason, StopReason::Clean)
            && !outcome.fallback_used
            && outcome.unchecked_validators().is_empty();
        Some(CachedAnswer {
            status: outcome.status,
            response: outcome.response.clone().filter(|_| checked)?,
            tool_calls: outcome.tool_calls.clone(),
            warnings: outcome.warnings.clone(),
            usage: outcome.usage,
        })
    }

    /// The outcome of an enforcement that ended at once with this answer: no attempts, no
    /// tokens spent.
    fn into_outcome(self) -> Outcome {
        let mut outcome = Outcome::interrupted(StopReason::Clean, Vec::new(), Duration::ZERO);
        outcome.status = self.status;
        outcome.response = Some(self.response);
        outcome.tool_calls = self.tool_calls;
        outcome.warnings = self.warnings;
        outcome
    }
}

/// A model's answers in this replica's memory, bounded by bytes; the least recently used go
/// first.
#[derive(Debug)]
pub(crate) struct MemoryCache {
    max_bytes: u64,
    entries: Mutex<Entries>,
}

#[derive(Debug, Default)]
struct Entries {
    by_key: HashMap<String, Entry>,
    /// Keys by their last use, oldest first.
    by_use: BTreeMap<u64, String>,
    next_use: u64,
    bytes: u64,
}

#[derive(Debug)]
struct Entry {
    answer: Bytes,
    expires: Instant,
    used: u64,
}

impl MemoryCache {
    /// An empty cache holding at most `max_bytes` of keys and answers.
    pub(crate) fn new(max_bytes: u64) -> Self {
        MemoryCache {
            max_bytes,
            entries: Mutex::new(Entries::default()),
        }
    }

    fn get(&self, key: &str, now: Instant) -> Option<Bytes> {
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        let expired = entries.by_key.get(key)?.expires <= now;
        if expired {
            entries.remove(key);
            return None;
        }
        let used = entries.next_use;
        entries.next_use += 1;
        let entry = entries.by_key.get_mut(key)?;
        let last = std::mem::replace(&mut entry.used, used);
        let answer = entry.answer.clone();
        entries.by_use.remove(&last);
        entries.by_use.insert(used, key.to_string());
        Some(answer)
    }

    fn put(&self, key: &str, answer: Bytes, expires: Instant) {
        let size = cost(key, &answer);
        if size > self.max_bytes {
            return;
        }
        let mut entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.remove(key);
        while entries.bytes + size > self.max_bytes {
            let Some((_, oldest)) = entries.by_use.pop_first() else {
                break;
            };
            entries.remove(&oldest);
        }
        let used = entries.next_use;
        entries.next_use += 1;
        entries.bytes += size;
        entries.by_use.insert(used, key.to_string());
        entries.by_key.insert(
            key.to_string(),
            Entry {
                answer,
                expires,
                used,
            },
        );
    }
}

impl Entries {
    fn remove(&mut self, key: &str) {
        if let Some(entry) = self.by_key.remove(key) {
            self.by_use.remove(&entry.used);
            self.bytes = self.bytes.saturating_sub(cost(key, &entry.answer));
        }
    }
}

/// The bytes an entry counts against `max_bytes`.
fn cost(key: &str, answer: &[u8]) -> u64 {
    (key.len() + answer.len()) as u64
}

/// Where one model's answers are kept.
#[derive(Debug, Clone)]
enum Store {
    Memory(Arc<MemoryCache>),
    Shared(Arc<ReplicaState>),
}

impl Store {
    async fn get(&self, key: &str) -> Option<Vec<u8>> {
        match self {
            Store::Memory(memory) => memory.get(key, Instant::now()).map(Vec::from),
            Store::Shared(shared) => shared.cache_get(key).await,
        }
    }

    async fn put(&self, key: &str, answer: Vec<u8>, ttl: Duration) {
        match self {
            Store::Memory(memory) => memory.put(key, Bytes::from(answer), Instant::now() + ttl),
            Store::Shared(shared) => shared.cache_put(key, &answer, ttl).await,
        }
    }
}

/// The caches of the served models and the contracts they are keyed by.
#[derive(Debug, Default)]
pub(crate) struct AnswerCaches {
    /// Each model's memory cache, by model id (for `store: memory`, and `redis` without a
    /// shared state).
    memory: HashMap<String, Arc<MemoryCache>>,
    /// The shared state, for `store: redis`.
    shared: Option<Arc<ReplicaState>>,
    /// Each profile's contract fingerprint, by profile name.
    contracts: HashMap<String, String>,
}

impl AnswerCaches {
    /// The caches of `models` (the memory ones made now), keyed by `contracts`.
    pub(crate) fn new<'a>(
        models: impl IntoIterator<Item = &'a Model>,
        shared: Option<Arc<ReplicaState>>,
        contracts: HashMap<String, String>,
    ) -> Self {
        let memory = models
            .into_iter()
            .filter_map(|m| Some((m.id.clone(), m.options.cache?)))
            .filter(|(_, c)| c.store == CacheStore::Memory || shared.is_none())
            .map(|(id, c)| (id, Arc::new(MemoryCache::new(c.max_bytes))))
            .collect();
        AnswerCaches {
            memory,
            shared,
            contracts,
        }
    }

    fn store(&self, model: &str, config: &CacheConfig) -> Option<Store> {
        match (&self.shared, config.store) {
            (Some(shared), CacheStore::Redis) => Some(Store::Shared(Arc::clone(shared))),
            _ => self.memory.get(model).cloned().map(Store::Memory),
        }
    }
}

/// What the cache made of a request, kept by its turn: its `X-Enforce-Cache`, its audit, and
/// where a fresh answer is to be kept.
#[derive(Debug, Default)]
pub(crate) enum Lookup {
    /// The model has no cache (or its profile no contract fingerprint).
    #[default]
    Off,
    /// Answered from the cache.
    Hit { tokens_saved: u64 },
    /// Not in the cache: the answer is kept once checked.
    Miss(Pending),
    /// The request asked not to be answered from the cache (`Cache-Control: no-cache`); its
    /// fresh answer is kept.
    Bypass(Pending),
}

/// Where a fresh answer goes.
#[derive(Debug)]
pub(crate) struct Pending {
    key: String,
    ttl: Duration,
    store: Store,
}

impl Lookup {
    fn word(&self) -> Option<&'static str> {
        match self {
            Lookup::Off => None,
            Lookup::Hit { .. } => Some("hit"),
            Lookup::Miss(_) => Some("miss"),
            Lookup::Bypass(_) => Some("bypass"),
        }
    }

    /// Whether the request was answered from the cache: its outcome's attempts were made,
    /// and counted, by the request that filled the cache.
    pub(crate) fn is_hit(&self) -> bool {
        matches!(self, Lookup::Hit { .. })
    }

    /// The `X-Enforce-Cache` value.
    pub(crate) fn header(&self) -> Option<HeaderValue> {
        self.word().map(HeaderValue::from_static)
    }

    /// The audit record's `cache`: `{"status": "hit", "tokens_saved": 812}`.
    pub(crate) fn audit(&self) -> Option<Value> {
        let status = self.word()?;
        let mut object = Map::new();
        object.insert("status".into(), status.into());
        if let Lookup::Hit { tokens_saved } = self {
            object.insert("tokens_saved".into(), (*tokens_saved).into());
        }
        Some(Value::Object(object))
    }

    /// Keeps `outcome`'s answer when it may be cached and the request looked it up.
    pub(crate) async fn keep(&self, outcome: &Outcome) {
        let (Lookup::Miss(pending) | Lookup::Bypass(pending)) = self else {
            return;
        };
        let Some(answer) = CachedAnswer::of(outcome) else {
            return;
        };
        if let Ok(bytes) = serde_json::to_vec(&answer) {
            pending.store.put(&pending.key, bytes, pending.ttl).await;
        }
    }
}

/// The request as the cache key sees it.
pub(crate) struct Asked<'a> {
    /// The surface's name: answers are written per surface.
    pub surface: &'static str,
    pub messages: &'a [Message],
    pub params: &'a Map<String, Value>,
    pub context: &'a Context,
    pub headers: &'a HeaderMap,
    pub grant: Option<&'a KeyGrant>,
}

/// Looks the request up for `model` (after routing: its profile is the one enforced). A hit's
/// outcome comes back with it.
pub(crate) async fn look_up(
    caches: &AnswerCaches,
    metrics: &Metrics,
    model: &Model,
    asked: &Asked<'_>,
) -> (Lookup, Option<Outcome>) {
    let Some(config) = model.options.cache else {
        return (Lookup::Off, None);
    };
    let (Some(contract), Some(store)) = (
        caches.contracts.get(&model.profile),
        caches.store(&model.id, &config),
    ) else {
        return (Lookup::Off, None);
    };
    let pending = Pending {
        key: key(model, contract, asked),
        ttl: Duration::from_secs(config.ttl_secs),
        store,
    };
    let count = |result: &'static str| {
        metrics.count(
            &CACHE_LOOKUPS,
            &[("model", model.id.as_str()), ("result", result)],
            1,
        );
    };
    if no_cache(asked.headers) {
        count("bypass");
        return (Lookup::Bypass(pending), None);
    }
    let found = pending.store.get(&pending.key).await;
    let Some(answer) = found.and_then(|b| serde_json::from_slice::<CachedAnswer>(&b).ok()) else {
        count("miss");
        return (Lookup::Miss(pending), None);
    };
    count("hit");
    let tokens_saved = answer.usage.map_or(0, |u| u.total());
    metrics.count(
        &CACHE_TOKENS_SAVED,
        &[("model", model.id.as_str())],
        tokens_saved,
    );
    (Lookup::Hit { tokens_saved }, Some(answer.into_outcome()))
}

/// Whether the request's `Cache-Control` says `no-cache`.
fn no_cache(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CACHE_CONTROL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|directive| directive.trim().eq_ignore_ascii_case("no-cache"))
}

/// What a cache key is a digest of.
#[derive(Serialize)]
struct KeyMaterial<'a> {
    surface: &'a str,
    model: &'a str,
    upstream_model: Option<&'a str>,
    profile: &'a str,
    contract: &'a str,
    /// The key's name, for a key with limits: its answers are its own.
    key: Option<&'a str>,
    messages: &'a [Message],
    params: AnswerParams<'a>,
    decode_params: &'a Map<String, Value>,
    context: &'a Context,
}

/// The request params that change the answer (all but [`DELIVERY_PARAMS`]).
struct AnswerParams<'a>(&'a Map<String, Value>);

impl Serialize for AnswerParams<'_> {
    fn serialize<S: serde::Serializer>(&self, to: S) -> Result<S::Ok, S::Error> {
        to.collect_map(
            self.0
                .iter()
                .filter(|(name, _)| !DELIVERY_PARAMS.contains(&name.as_str())),
        )
    }
}

/// The cache key of `asked` for `model` under `contract`: a SHA-256 digest in hex.
fn key(model: &Model, contract: &str, asked: &Asked<'_>) -> String {
    let material = KeyMaterial {
        surface: asked.surface,
        model: &model.id,
        upstream_model: model.upstream_model.as_deref(),
        profile: &model.profile,
        contract,
        key: asked
            .grant
            .filter(|g| g.is_limited())
            .map(|g| g.name.as_str()),
        messages: asked.messages,
        params: AnswerParams(asked.params),
        decode_params: &model.decode_params,
        context: asked.context,
    };
    let mut digest = Sha256::new();
    // Writing into a digest cannot fail; a value serde cannot write would leave the digest
    // of what was written, still a key of this request alone.
    let _ = serde_json::to_writer(&mut digest, &material);
    format!("{:x}", digest.finalize())
}

/// A contract's fingerprint: the SHA-256 digest, in hex, of its description (`contract`: the
/// validators and their options, the policy, the plugins' versions, serialized).
pub fn contract_fingerprint(contract: &Value) -> String {
    let mut digest = Sha256::new();
    let _ = serde_json::to_writer(&mut digest, contract);
    format!("{:x}", digest.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    #[test]
    fn memory_evicts_the_least_recently_used_past_its_bytes() {
        // Room for two entries of 10 bytes (key and answer), not three.
        let cache = MemoryCache::new(25);
        cache.put("a", Bytes::from_static(b"123456789"), far());
        cache.put("b", Bytes::from_static(b"123456789"), far());
        assert!(cache.get("a", Instant::now()).is_some(), "a used last");
        cache.put("c", Bytes::from_static(b"123456789"), far());
        assert!(cache.get("b", Instant::now()).is_none(), "b went first");
        assert!(cache.get("a", Instant::now()).is_some());
        assert!(cache.get("c", Instant::now()).is_some());
        cache.put("d", Bytes::from(vec![0; 30]), far());
        assert!(
            cache.get("d", Instant::now()).is_none(),
            "larger than the cache"
        );
    }

    #[test]
    fn memory_forgets_an_answer_past_its_ttl() {
        let cache = MemoryCache::new(100);
        let now = Instant::now();
        cache.put(
            "a",
            Bytes::from_static(b"x"),
            now + Duration::from_millis(5),
        );
        assert!(cache.get("a", now).is_some());
        assert!(cache.get("a", now + Duration::from_millis(5)).is_none());
        let entries = cache.entries.lock().unwrap();
        assert_eq!((entries.bytes, entries.by_use.len()), (0, 0));
    }

    #[test]
    fn only_checked_answers_are_kept() {
        let mut outcome = Outcome::interrupted(StopReason::Clean, Vec::new(), Duration::ZERO);
        outcome.response = Some("ok".into());
        outcome.status = Status::Passed;
        assert!(CachedAnswer::of(&outcome).is_some());
        outcome.fallback_used = true;
        assert!(CachedAnswer::of(&outcome).is_none(), "a fallback");
        outcome.fallback_used = false;
        outcome.status = Status::Unresolved;
        assert!(CachedAnswer::of(&outcome).is_none(), "a failure");
        outcome.status = Status::Passed;
        outcome.stop_reason = StopReason::DeadlineExceeded;
        assert!(CachedAnswer::of(&outcome).is_none(), "cut short");
    }

    #[test]
    fn no_cache_is_read_from_any_cache_control_directive() {
        let mut headers = HeaderMap::new();
        assert!(!no_cache(&headers));
        headers.insert(
            header::CACHE_CONTROL,
            HeaderValue::from_static("max-age=0, No-Cache"),
        );
        assert!(no_cache(&headers));
    }
}
