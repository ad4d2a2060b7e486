//! The `embedding_relevance` validator: the cosine similarity between the embedding of the
//! question (or of the text validated) and the retrieved context's chunks, from an
//! OpenAI-compatible `POST {base_url}/embeddings` endpoint, against a threshold. A cheap,
//! discriminative relevance gate: one embeddings call instead of a model's YES/NO.
//!
//! ```yaml
//! context_relevant:
//!   type: embedding_relevance
//!   base_url: http://127.0.0.1:11434/v1
//!   model: bge-m3
//!   api_key_env: EMBEDDINGS_API_KEY   # optional: sent as a bearer token
//!   threshold: 0.5                    # required, 0..1
//!   compare: question                 # question (default) or response
//!   aggregate: mean                   # mean (default) or max
//!   separator: "\n\n"                 # splits a context string into chunks (default blank line)
//!   timeout_ms: 2000                  # as for `external`; 0 switches it off
//!   failure_threshold: 3
//!   cooldown_ms: 30000
//!   fail_mode: open
//! ```
//!
//! **Score.** `compare: question` embeds the question (the last user message; as an input
//! validator that is also the text validated); `compare: response` embeds the text validated
//! (an answer's closeness to its sources). Chunks are the retrieved context's list items, or
//! its string split at `separator` (at most `max_chunks`). `aggregate: mean` is the cosine
//! between that vector and the mean of the chunks' unit vectors (the mean direction of the
//! context, each chunk weighing the same); `max` is the best cosine of any one chunk (one
//! relevant passage is enough). A score below `threshold` is an issue.
//!
//! **Calls.** All distinct texts of a check that are not cached go to the endpoint in one
//! batched request (`{"model", "input": [...]}`). Vectors are cached by text (at most
//! `cache_entries`, oldest out first), so a re-ask with the same question and context embeds
//! only what changed. An endpoint that fails, times out, answers a status other than 2xx,
//! returns the wrong number of vectors or vectors of different dimensions gave no verdict: the
//! breaker counts it and `fail_mode` decides.
//!
//! | code | when |
//! |---|---|
//! | `CONTEXT_NOT_RELEVANT` (configurable `code`) | the similarity is below the threshold; the message holds the score |
//! | `REQUEST_DATA_MISSING` | no question or no retrieved context (`on_missing: warn`) |

use crate::guard::{excerpt, Guard};
use crate::request::{self, OnMissing};
use enforce_core::{
    async_trait, Context, FailMode, Issue, Severity, Unavailable, Validation, Validator,
};
use enforce_validators::{BuildError, FactoryInput};
use serde::Deserialize;
use std::collections::{HashMap, HashSet, VecDeque};
use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// Default code of a context found not relevant.
pub const CONTEXT_NOT_RELEVANT: &str = "CONTEXT_NOT_RELEVANT";

/// Most bytes read from an embeddings answer.
const MAX_ANSWER_BYTES: usize = 32 * 1024 * 1024;

/// Gives texts their embedding vectors: the seam between the validator and the endpoint
/// ([`OpenAiEmbeddings`]), which also lets a benchmark measure the validator alone.
#[async_trait]
pub trait Embedder: Send + Sync + fmt::Debug {
    /// One vector per text, in the order of `texts`; `Err` says what failed.
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String>;
}

/// An OpenAI-compatible embeddings endpoint: `POST {base_url}/embeddings`.
#[derive(Debug)]
pub struct OpenAiEmbeddings {
    client: reqwest::Client,
    url: reqwest::Url,
    model: String,
    api_key: Option<String>,
}

impl OpenAiEmbeddings {
    /// The endpoint under `base_url` (e.g. `http://127.0.0.1:11434/v1`) for `model`, with an
    /// optional bearer token. The error names the key at fault.
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> Result<Self, BuildError> {
        let url = reqwest::Url::parse(&format!("{}/embeddings", base_url.trim_end_matches('/')))
            .map_err(|e| BuildError::at("base_url", format!("not a URL: {e}")))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(BuildError::at("base_url", "use an http:// or https:// URL"));
        }
        if model.trim().is_empty() {
            return Err(BuildError::at("model", "name the embedding model"));
        }
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| BuildError::at("base_url", format!("no HTTP client: {e}")))?;
        Ok(OpenAiEmbeddings {
            client,
            url,
            model: model.to_string(),
            api_key,
        })
    }
}

#[derive(Deserialize)]
struct EmbeddingsAnswer {
    data: Vec<EmbeddingItem>,
}

#[derive(Deserialize)]
struct EmbeddingItem {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

#[async_trait]
impl Embedder for OpenAiEmbeddings {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        let mut request = self
            .client
            .post(self.url.clone())
            .json(&serde_json::json!({"model": self.model, "input": texts}));
        if let Some(key) = &self.api_key {
            request = request.bearer_auth(key);
        }
        let mut answer = request
            .send()
            .await
            .map_err(|e| format!("cannot reach {}: {e}", self.url))?;
        let status = answer.status();
        let mut body = Vec::new();
        while let Some(chunk) = answer
            .chunk()
            .await
            .map_err(|e| format!("cannot read the answer of {}: {e}", self.url))?
        {
            if body.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(format!(
                    "{} answered more than {MAX_ANSWER_BYTES} bytes",
                    self.url
                ));
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(format!(
                "{} answered HTTP status {}: {}",
                self.url,
                status.as_u16(),
                excerpt(&String::from_utf8_lossy(&body), 200)
            ));
        }
        let answer: EmbeddingsAnswer = serde_json::from_slice(&body)
            .map_err(|e| format!("{} answered no embeddings list: {e}", self.url))?;
        let mut items = answer.data;
        // Servers may answer out of order; `index` says which input a vector belongs to.
        if items.iter().all(|i| i.index.is_some()) {
            items.sort_by_key(|i| i.index);
            if items.iter().enumerate().any(|(n, i)| i.index != Some(n)) {
                return Err("the embeddings' indexes are not 0, 1, 2, ...".to_string());
            }
        }
        Ok(items.into_iter().map(|i| i.embedding).collect())
    }
}

/// What is compared with the context.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Compare {
    /// The question (the last user message).
    #[default]
    Question,
    /// The text validated (the answer, for an output validator).
    Response,
}

/// How the chunks' similarities make one score.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Aggregate {
    /// Cosine with the mean of the chunks' unit vectors.
    #[default]
    Mean,
    /// The best cosine of any one chunk.
    Max,
}

fn default_separator() -> String {
    "\n\n".to_string()
}
fn default_max_chunks() -> usize {
    64
}
fn default_cache_entries() -> usize {
    1024
}
fn default_timeout_ms() -> u64 {
    2000
}

/// Options of the `embedding_relevance` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(rename = "EmbeddingRelevanceOptions")
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct EmbeddingConfig {
    /// Base URL of the OpenAI-compatible API (`{base_url}/embeddings` is called).
    #[cfg_attr(feature = "config-schema", schemars(extend("pattern" = "^https?://")))]
    base_url: String,
    /// The embedding model.
    #[cfg_attr(feature = "config-schema", schemars(length(min = 1)))]
    model: String,
    /// Environment variable holding the API key (sent as a bearer token).
    api_key_env: Option<String>,
    /// Lowest similarity that passes, 0..1.
    #[cfg_attr(feature = "config-schema", schemars(range(min = 0.0, max = 1.0)))]
    threshold: f32,
    /// `question` (default): the question against the context; `response`: the text validated.
    #[serde(default)]
    compare: Compare,
    /// `mean` (default): cosine with the chunks' mean; `max`: the best chunk's cosine.
    #[serde(default)]
    aggregate: Aggregate,
    /// Splits a context string into chunks (default a blank line; empty: one chunk).
    #[serde(default = "default_separator")]
    separator: String,
    /// Most chunks embedded; later ones are ignored (default 64).
    #[serde(default = "default_max_chunks")]
    #[cfg_attr(feature = "config-schema", schemars(range(min = 1)))]
    max_chunks: usize,
    /// Most vectors kept in the cache by text (default 1024; 0: no cache beyond one check).
    #[serde(default = "default_cache_entries")]
    cache_entries: usize,
    /// Code of the issue (default `CONTEXT_NOT_RELEVANT`).
    code: Option<String>,
    /// Severity of the issue (default `error`).
    severity: Option<Severity>,
    /// Hint of the issue.
    hint: Option<String>,
    /// When the request has no question or no retrieved context: `warn` (default), `fail`
    /// or `unavailable`.
    #[serde(default)]
    on_missing: OnMissing,
    /// Longest the embeddings call may take, in milliseconds; 0 disables the validator.
    #[serde(default = "default_timeout_ms")]
    timeout_ms: u64,
    /// Consecutive failed calls that open the circuit breaker.
    #[serde(default = "crate::guard::default_threshold")]
    #[cfg_attr(feature = "config-schema", schemars(range(min = 1)))]
    failure_threshold: u32,
    /// How long the open breaker waits before probing again, in milliseconds.
    #[serde(default = "crate::guard::default_cooldown_ms")]
    cooldown_ms: u64,
    /// `open`: pass with a warning when unavailable; `closed`: stop (default: the profile's).
    fail_mode: Option<FailMode>,
}

/// Vectors by text, oldest out first.
#[derive(Debug, Default)]
struct VectorCache {
    capacity: usize,
    vectors: HashMap<String, Arc<[f32]>>,
    order: VecDeque<String>,
}

impl VectorCache {
    fn insert(&mut self, text: &str, vector: Arc<[f32]>) {
        if self.capacity == 0 || self.vectors.contains_key(text) {
            return;
        }
        while self.order.len() >= self.capacity {
            match self.order.pop_front() {
                Some(old) => {
                    self.vectors.remove(&old);
                }
                None => break,
            }
        }
        self.order.push_back(text.to_string());
        self.vectors.insert(text.to_string(), vector);
    }

    fn clear(&mut self) {
        self.vectors.clear();
        self.order.clear();
    }
}

/// The `embedding_relevance` validator. See the [module docs](self).
#[derive(Debug)]
pub struct EmbeddingRelevance {
    name: String,
    embedder: Arc<dyn Embedder>,
    threshold: f32,
    compare: Compare,
    aggregate: Aggregate,
    separator: String,
    max_chunks: usize,
    code: String,
    severity: Severity,
    hint: Option<String>,
    on_missing: OnMissing,
    guard: Guard,
    cache: Mutex<VectorCache>,
}

impl EmbeddingRelevance {
    /// A validator named `name` scoring with `embedder` against `threshold`, with the default
    /// options (question against the mean of the chunks, 2 s timeout, cache of 1024 vectors).
    pub fn new(name: &str, embedder: Arc<dyn Embedder>, threshold: f32) -> Self {
        EmbeddingRelevance {
            name: name.to_string(),
            embedder,
            threshold,
            compare: Compare::Question,
            aggregate: Aggregate::Mean,
            separator: default_separator(),
            max_chunks: default_max_chunks(),
            code: CONTEXT_NOT_RELEVANT.to_string(),
            severity: Severity::Error,
            hint: None,
            on_missing: OnMissing::Warn,
            guard: Guard::with_timeout(name, Duration::from_millis(default_timeout_ms())),
            cache: Mutex::new(VectorCache {
                capacity: default_cache_entries(),
                ..VectorCache::default()
            }),
        }
    }

    /// What is compared with the context.
    pub fn compare(mut self, compare: Compare) -> Self {
        self.compare = compare;
        self
    }

    /// How the chunks' similarities make one score.
    pub fn aggregate(mut self, aggregate: Aggregate) -> Self {
        self.aggregate = aggregate;
        self
    }

    /// How many vectors the cache keeps (0: none beyond one check).
    pub fn cache_entries(self, entries: usize) -> Self {
        self.lock_cache().capacity = entries;
        self.lock_cache().clear();
        self
    }

    /// Sets the timeout, breaker and fail mode.
    pub fn guard(mut self, guard: Guard) -> Self {
        self.guard = guard;
        self
    }

    /// The timeout, breaker and fail mode around the embeddings calls.
    pub fn call_guard(&self) -> &Guard {
        &self.guard
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <EmbeddingConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration (see the [module docs](self)).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: EmbeddingConfig = input.parse()?;
        if !(0.0..=1.0).contains(&c.threshold) {
            return Err(BuildError::at("threshold", "must be between 0 and 1"));
        }
        if c.max_chunks == 0 {
            return Err(BuildError::at("max_chunks", "must be at least 1"));
        }
        let api_key = match &c.api_key_env {
            Some(var) => Some(std::env::var(var).map_err(|_| {
                BuildError::at("api_key_env", format!("the variable {var} is not set"))
            })?),
            None => None,
        };
        let code = c.code.unwrap_or_else(|| CONTEXT_NOT_RELEVANT.to_string());
        if code.trim().is_empty() {
            return Err(BuildError::at("code", "an issue code cannot be empty"));
        }
        let embedder = OpenAiEmbeddings::new(&c.base_url, &c.model, api_key)?;
        Ok(EmbeddingRelevance {
            name: input.name.to_string(),
            embedder: Arc::new(embedder),
            threshold: c.threshold,
            compare: c.compare,
            aggregate: c.aggregate,
            separator: c.separator,
            max_chunks: c.max_chunks,
            code,
            severity: c.severity.unwrap_or(Severity::Error),
            hint: c.hint,
            on_missing: c.on_missing,
            guard: Guard::from_options(
                input.name,
                c.timeout_ms,
                c.failure_threshold,
                c.cooldown_ms,
                c.fail_mode,
            )?,
            cache: Mutex::new(VectorCache {
                capacity: c.cache_entries,
                ..VectorCache::default()
            }),
        })
    }

    fn lock_cache(&self) -> std::sync::MutexGuard<'_, VectorCache> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Vectors for `texts` from the embedder, checked: one per text, all of one non-zero
    /// dimension.
    async fn fetch(&self, texts: &[String]) -> Result<Vec<Arc<[f32]>>, String> {
        let vectors = self.embedder.embed(texts).await?;
        if vectors.len() != texts.len() {
            return Err(format!(
                "asked for {} embeddings, got {}",
                texts.len(),
                vectors.len()
            ));
        }
        let dimension = vectors.first().map_or(0, Vec::len);
        if dimension == 0 {
            return Err("the endpoint answered empty vectors".to_string());
        }
        if let Some(other) = vectors.iter().find(|v| v.len() != dimension) {
            return Err(format!(
                "the vectors' dimensions differ ({dimension} and {})",
                other.len()
            ));
        }
        Ok(vectors.into_iter().map(Arc::from).collect())
    }

    /// The vector of every text in `texts`, from the cache or one batched call.
    async fn vectors(&self, texts: &[&str]) -> Result<HashMap<String, Arc<[f32]>>, Unavailable> {
        let mut found: HashMap<String, Arc<[f32]>> = HashMap::with_capacity(texts.len());
        let mut missing: Vec<String> = Vec::new();
        {
            let cache = self.lock_cache();
            let mut seen = HashSet::with_capacity(texts.len());
            for text in texts {
                if !seen.insert(*text) {
                    continue;
                }
                match cache.vectors.get(*text) {
                    Some(v) => {
                        found.insert((*text).to_string(), Arc::clone(v));
                    }
                    None => missing.push((*text).to_string()),
                }
            }
        }
        if missing.is_empty() {
            return Ok(found);
        }
        let fresh = self.guard.call(self.fetch(&missing)).await?;
        let mut cache = self.lock_cache();
        for (text, vector) in missing.into_iter().zip(fresh) {
            cache.insert(&text, Arc::clone(&vector));
            found.insert(text, vector);
        }
        Ok(found)
    }

    /// The similarity of `target` to `chunks` (see [`Aggregate`]); `Err` when vectors cannot
    /// be compared.
    pub fn score(&self, target: &[f32], chunks: &[&[f32]]) -> Result<f32, String> {
        score(self.aggregate, target, chunks)
    }
}

/// The dot product of two vectors of one length. Eight independent f32 lanes let the compiler
/// vectorise the loop (a single running sum cannot be reordered); the lanes add up in f64.
fn dot(a: &[f32], b: &[f32]) -> f64 {
    const LANES: usize = 8;
    let mut lanes = [0f32; LANES];
    let (a_body, a_tail) = a.split_at(a.len() - a.len() % LANES);
    let (b_body, b_tail) = b.split_at(a_body.len().min(b.len()));
    for (x, y) in a_body.chunks_exact(LANES).zip(b_body.chunks_exact(LANES)) {
        for i in 0..LANES {
            lanes[i] += x[i] * y[i];
        }
    }
    let tail: f64 = a_tail
        .iter()
        .zip(b_tail)
        .map(|(x, y)| f64::from(*x) * f64::from(*y))
        .sum();
    lanes.iter().map(|l| f64::from(*l)).sum::<f64>() + tail
}

fn norm(v: &[f32]) -> f64 {
    dot(v, v).sqrt()
}

/// The score of `target` against `chunks` by `aggregate`.
fn score(aggregate: Aggregate, target: &[f32], chunks: &[&[f32]]) -> Result<f32, String> {
    let dimension = target.len();
    if let Some(other) = chunks.iter().find(|c| c.len() != dimension) {
        return Err(format!(
            "the vectors' dimensions differ ({dimension} and {})",
            other.len()
        ));
    }
    let target_norm = norm(target);
    if target_norm == 0.0 || !target_norm.is_finite() {
        return Err("the compared text's embedding is a zero vector".to_string());
    }
    let usable = |n: f64| n > 0.0 && n.is_finite();
    let value = match aggregate {
        Aggregate::Max => chunks
            .iter()
            .filter_map(|chunk| {
                let n = norm(chunk);
                usable(n).then(|| dot(target, chunk) / (target_norm * n))
            })
            .fold(None, |best: Option<f64>, c| {
                Some(best.map_or(c, |b| b.max(c)))
            }),
        Aggregate::Mean => {
            // The sum of the unit vectors points where their mean does: no need to divide.
            let mut sum = vec![0f32; dimension];
            let mut counted = 0usize;
            for chunk in chunks {
                let n = norm(chunk);
                if !usable(n) {
                    continue;
                }
                counted += 1;
                #[allow(clippy::cast_possible_truncation)] // 1/n of a finite norm
                let inverse = (1.0 / n) as f32;
                for (s, x) in sum.iter_mut().zip(chunk.iter()) {
                    *s += x * inverse;
                }
            }
            let sum_norm = norm(&sum);
            (counted > 0 && usable(sum_norm)).then(|| dot(&sum, target) / (sum_norm * target_norm))
        }
    };
    #[allow(clippy::cast_possible_truncation)] // a cosine is within -1..1
    value
        .map(|v| v.clamp(-1.0, 1.0) as f32)
        .ok_or_else(|| "every chunk's embedding is a zero vector".to_string())
}

#[async_trait]
impl Validator for EmbeddingRelevance {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, text: &str, context: &Context) -> Validation {
        if let Some(disabled) = self.guard.disabled_issue() {
            return Ok(vec![disabled]);
        }
        let target = match self.compare {
            Compare::Response => text.to_string(),
            Compare::Question => match request::question(context) {
                Some(q) => q,
                None => {
                    return request::missing(
                        &self.name,
                        self.on_missing,
                        "question",
                        &self.code,
                        self.severity,
                    )
                }
            },
        };
        let Some(mut chunks) = request::retrieved_chunks(context, &self.separator) else {
            return request::missing(
                &self.name,
                self.on_missing,
                "retrieved context",
                &self.code,
                self.severity,
            );
        };
        chunks.truncate(self.max_chunks);
        let mut texts: Vec<&str> = Vec::with_capacity(chunks.len() + 1);
        texts.push(&target);
        texts.extend(chunks.iter().map(String::as_str));
        let vectors = self.vectors(&texts).await?;
        let vector = |t: &str| {
            vectors
                .get(t)
                .map(|v| &v[..])
                .ok_or_else(|| Unavailable::new(format!("{}: a vector went missing", self.name)))
        };
        let target_vector = vector(&target)?;
        let chunk_vectors = chunks
            .iter()
            .map(|c| vector(c))
            .collect::<Result<Vec<_>, _>>()?;
        let score = self.score(target_vector, &chunk_vectors).map_err(|e| {
            // Vectors of another dimension in the cache: the endpoint changed; start afresh.
            self.lock_cache().clear();
            Unavailable::new(format!("{}: {e}", self.name))
        })?;
        if score >= self.threshold {
            return Ok(Vec::new());
        }
        let against = match self.compare {
            Compare::Question => "question",
            Compare::Response => "response",
        };
        let how = match self.aggregate {
            Aggregate::Mean => format!("mean of {} chunks", chunks.len()),
            Aggregate::Max => format!("best of {} chunks", chunks.len()),
        };
        let message = format!(
            "the retrieved context is not relevant enough to the {against}: similarity {score:.3} ({how}) is below the threshold {:.3}",
            self.threshold
        );
        let hint = self.hint.clone().unwrap_or_else(|| match self.compare {
            Compare::Question => {
                "The retrieved context may not answer the question: say so instead of guessing."
                    .to_string()
            }
            Compare::Response => {
                "Answer from the retrieved context only, and say so where it does not cover the question."
                    .to_string()
            }
        });
        Ok(vec![Issue::error(&self.name, &self.code, message)
            .with_severity(self.severity)
            .with_hint(hint)])
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.guard.fail_mode()
    }

    fn reads_request(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mean_and_max_differ_as_defined() {
        let q = [1.0, 0.0];
        let on = [2.0f32, 0.0];
        let off = [0.0f32, 3.0];
        let max = score(Aggregate::Max, &q, &[&on, &off]).unwrap();
        assert!((max - 1.0).abs() < 1e-6, "{max}");
        // Mean of the unit vectors (1,0) and (0,1) is (0.5,0.5): cosine 1/sqrt(2).
        let mean = score(Aggregate::Mean, &q, &[&on, &off]).unwrap();
        assert!(
            (mean - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6,
            "{mean}"
        );
        assert!(score(Aggregate::Mean, &q, &[&[1.0, 0.0, 0.0][..]]).is_err());
        assert!(score(Aggregate::Mean, &[0.0, 0.0], &[&on]).is_err());
        assert!(score(Aggregate::Max, &q, &[&[0.0, 0.0][..]]).is_err());
    }

    #[test]
    fn the_cache_drops_its_oldest_vectors() {
        let mut cache = VectorCache {
            capacity: 2,
            ..VectorCache::default()
        };
        for t in ["a", "b", "c"] {
            cache.insert(t, Arc::from(vec![1.0f32]));
        }
        assert!(!cache.vectors.contains_key("a"));
        assert!(cache.vectors.contains_key("b") && cache.vectors.contains_key("c"));
        let mut none = VectorCache::default();
        none.insert("a", Arc::from(vec![1.0f32]));
        assert!(none.vectors.is_empty());
    }
}
