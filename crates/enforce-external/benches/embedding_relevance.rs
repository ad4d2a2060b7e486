//! What `embedding_relevance` costs beyond the embeddings call: 8 context chunks and a question,
//! 1024-dimensional vectors, answered by an in-process stub [`Embedder`] instead of HTTP.
//!
//! - `stub_call`: the stub alone (looks the 9 vectors up and copies them): the floor that a real
//!   endpoint replaces with its network and model time.
//! - `uncached`: a whole check without cache (`cache_entries: 0`): reading the request,
//!   splitting and de-duplicating chunks, the breaker, the stub call, the vector checks and the
//!   mean-cosine score. Its cost beyond the embeddings call is `uncached - stub_call`.
//! - `cached`: a whole check whose vectors are all cached (a re-ask of the same request): no
//!   call at all.
//!
//! `cargo bench -p enforce-external --bench embedding_relevance`

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use enforce_core::{async_trait, context::keys, Context, Validator};
use enforce_external::embedding::{Embedder, EmbeddingRelevance};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;

const CHUNKS: usize = 8;
const DIMENSIONS: usize = 1024;

/// Answers precomputed vectors by text.
#[derive(Debug)]
struct Stub(HashMap<String, Vec<f32>>);

#[async_trait]
impl Embedder for Stub {
    async fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, String> {
        texts
            .iter()
            .map(|t| {
                self.0
                    .get(t)
                    .cloned()
                    .ok_or_else(|| format!("no vector for {t}"))
            })
            .collect()
    }
}

/// A deterministic pseudo-random vector (xorshift), components in -1..1.
fn vector(seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..DIMENSIONS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % 2000) as f32 / 1000.0 - 1.0
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let question = "How do I rotate the API keys of a project?".to_string();
    let chunks: Vec<String> = (0..CHUNKS)
        .map(|i| format!("Chunk {i}: keys are rotated under Settings, API, Rotate. {i}"))
        .collect();
    // Each chunk shares the question's direction plus noise: the check passes (cosine ≈ 0.7).
    let question_vector = vector(1);
    let mut vectors = HashMap::new();
    for (i, chunk) in chunks.iter().enumerate() {
        let noise = vector(i as u64 + 2);
        let mixed = noise
            .iter()
            .zip(&question_vector)
            .map(|(n, q)| n + q)
            .collect();
        vectors.insert(chunk.clone(), mixed);
    }
    vectors.insert(question.clone(), question_vector);
    let stub = Arc::new(Stub(vectors));
    let context = Context::new()
        .with(keys::QUESTION, question.as_str())
        .with(keys::RETRIEVED_CONTEXT, chunks.clone());
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let uncached = EmbeddingRelevance::new("relevance", stub.clone(), 0.5).cache_entries(0);
    let cached = EmbeddingRelevance::new("relevance", stub.clone(), 0.5);
    let all_texts: Vec<String> = std::iter::once(question.clone()).chain(chunks).collect();
    let first = runtime.block_on(uncached.validate("answer", &context));
    assert!(
        first.as_ref().is_ok_and(Vec::is_empty),
        "the check passes: {first:?}"
    );
    runtime
        .block_on(cached.validate("answer", &context))
        .expect("fills the cache");

    let id = format!("{CHUNKS}x{DIMENSIONS}");
    let mut group = c.benchmark_group("embedding_relevance");
    group.bench_function(BenchmarkId::new("stub_call", &id), |b| {
        b.iter(|| runtime.block_on(stub.embed(black_box(&all_texts))))
    });
    group.bench_function(BenchmarkId::new("uncached", &id), |b| {
        b.iter(|| runtime.block_on(uncached.validate(black_box("answer"), black_box(&context))))
    });
    group.bench_function(BenchmarkId::new("cached", &id), |b| {
        b.iter(|| runtime.block_on(cached.validate(black_box("answer"), black_box(&context))))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
