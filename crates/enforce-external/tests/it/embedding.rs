//! `embedding_relevance` against the mock's `/v1/embeddings` (bag-of-words vectors: texts
//! sharing words score higher), its faults, and the vector cache.

use enforce_config::{BuildEnv, Registry};
use enforce_core::{context::keys, Context, Validator};
use enforce_testkit::{bag_of_words_embedding, EmbeddingsFault, MockOpenAi, MockScript};
use serde_json::{json, Value};
use std::time::Duration;

const DIMENSIONS: usize = 256;

async fn mock() -> MockOpenAi {
    MockOpenAi::start(MockScript::new().embedding_dimensions(DIMENSIONS))
        .await
        .unwrap()
}

fn relevance(mock: &MockOpenAi, options: Value) -> Box<dyn Validator> {
    let mut spec = json!({"type": "embedding_relevance", "base_url": mock.url(),
                          "model": "mock-embed"});
    if let (Some(spec), Some(options)) = (spec.as_object_mut(), options.as_object()) {
        spec.extend(options.clone());
    }
    Registry::builtin()
        .build("relevance", &spec, &BuildEnv::default())
        .unwrap()
}

const QUESTION: &str = "What does the Pro plan cost per month?";
const RELEVANT: [&str; 2] = [
    "The Pro plan costs 20 EUR per month.",
    "Billing happens monthly by invoice.",
];
const IRRELEVANT: [&str; 2] = [
    "Our office dogs are named Rex and Bella.",
    "Lunch is served at noon in the canteen.",
];

fn ctx(chunks: &[&str]) -> Context {
    Context::new()
        .with(keys::QUESTION, QUESTION)
        .with(keys::RETRIEVED_CONTEXT, json!(chunks))
}

fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let dot: f32 = a.iter().zip(b).map(|(x, y)| x * y).sum();
    let n = |v: &[f32]| v.iter().map(|x| x * x).sum::<f32>().sqrt();
    dot / (n(a) * n(b))
}

/// The mean score as the validator defines it: cosine with the mean of the unit vectors.
fn expected_mean(question: &str, chunks: &[&str]) -> f32 {
    let q = bag_of_words_embedding(question, DIMENSIONS);
    let mut mean = vec![0f32; DIMENSIONS];
    for c in chunks {
        // The mock's vectors have length 1 already.
        for (m, x) in mean.iter_mut().zip(bag_of_words_embedding(c, DIMENSIONS)) {
            *m += x / chunks.len() as f32;
        }
    }
    cosine(&q, &mean)
}

#[tokio::test]
async fn relevant_context_passes_and_irrelevant_fails_with_the_score() {
    let mock = mock().await;
    let v = relevance(&mock, json!({"threshold": 0.3}));
    assert!(v.reads_request());
    let relevant = expected_mean(QUESTION, &RELEVANT);
    let irrelevant = expected_mean(QUESTION, &IRRELEVANT);
    assert!(
        relevant > 0.3 && irrelevant < 0.3,
        "{relevant} {irrelevant}"
    );
    assert!(v.validate("", &ctx(&RELEVANT)).await.unwrap().is_empty());
    let issues = v.validate("", &ctx(&IRRELEVANT)).await.unwrap();
    assert_eq!(issues.len(), 1, "{issues:?}");
    assert_eq!(issues[0].code, "CONTEXT_NOT_RELEVANT");
    assert!(issues[0].is_error());
    assert!(
        issues[0]
            .message
            .contains(&format!("similarity {irrelevant:.3} (mean of 2 chunks)")),
        "{issues:?}"
    );
    assert!(issues[0].message.contains("threshold 0.300"), "{issues:?}");
}

#[tokio::test]
async fn mean_and_max_aggregate_differently() {
    let mock = mock().await;
    let mean = expected_mean(QUESTION, &RELEVANT);
    let best = cosine(
        &bag_of_words_embedding(QUESTION, DIMENSIONS),
        &bag_of_words_embedding(RELEVANT[0], DIMENSIONS),
    );
    let threshold = (mean + best) / 2.0;
    assert!(mean < threshold && threshold < best, "{mean} {best}");
    let by_mean = relevance(&mock, json!({"threshold": threshold}));
    let by_max = relevance(&mock, json!({"threshold": threshold, "aggregate": "max"}));
    assert_eq!(
        by_mean.validate("", &ctx(&RELEVANT)).await.unwrap().len(),
        1
    );
    assert!(by_max
        .validate("", &ctx(&RELEVANT))
        .await
        .unwrap()
        .is_empty());
}

#[tokio::test]
async fn one_batched_call_per_distinct_text_and_cached_across_checks() {
    let mock = mock().await;
    let v = relevance(&mock, json!({"threshold": 0.1}));
    let chunks = [RELEVANT[0], RELEVANT[0], RELEVANT[1], QUESTION];
    v.validate("", &ctx(&chunks)).await.unwrap();
    let calls = mock.embedding_requests();
    assert_eq!(calls.len(), 1);
    assert_eq!(calls[0].body["model"], "mock-embed");
    assert_eq!(
        calls[0].body["input"],
        json!([QUESTION, RELEVANT[0], RELEVANT[1]])
    );
    // A second check (a re-ask) with the same request embeds nothing again.
    v.validate("another answer", &ctx(&chunks)).await.unwrap();
    assert_eq!(mock.embedding_requests().len(), 1);
    // A new question is the only text sent.
    let other = ctx(&chunks).with(keys::QUESTION, "How do I cancel?");
    v.validate("", &other).await.unwrap();
    let calls = mock.embedding_requests();
    assert_eq!(calls.len(), 2);
    assert_eq!(calls[1].body["input"], json!(["How do I cancel?"]));
    // Without a cache, every check calls (still once per distinct text).
    let uncached = relevance(&mock, json!({"threshold": 0.1, "cache_entries": 0}));
    uncached.validate("", &ctx(&chunks)).await.unwrap();
    uncached.validate("", &ctx(&chunks)).await.unwrap();
    let calls = mock.embedding_requests();
    assert_eq!(calls.len(), 4);
    assert_eq!(calls[3].body["input"].as_array().unwrap().len(), 3);
}

#[tokio::test]
async fn endpoint_faults_are_unavailable_and_open_the_breaker() {
    let mock = mock().await;
    let v = relevance(
        &mock,
        json!({"threshold": 0.3, "timeout_ms": 100, "failure_threshold": 4,
               "cooldown_ms": 60000, "cache_entries": 0}),
    );
    let cases = [
        (EmbeddingsFault::Status(500), "HTTP status 500"),
        (
            EmbeddingsFault::MissingVector,
            "asked for 3 embeddings, got 2",
        ),
        (EmbeddingsFault::MixedDimensions, "dimensions differ"),
        (
            EmbeddingsFault::Delay(Duration::from_millis(500)),
            "within 100 ms",
        ),
    ];
    for (fault, says) in cases {
        mock.set_embeddings_fault(Some(fault));
        let err = v.validate("", &ctx(&RELEVANT)).await.unwrap_err();
        assert!(err.reason.contains(says), "{says}: {err}");
    }
    // Four failures in a row: the breaker is open, no call is made even once the endpoint
    // works again.
    mock.set_embeddings_fault(None);
    let calls = mock.embedding_requests().len();
    let err = v.validate("", &ctx(&RELEVANT)).await.unwrap_err();
    assert!(err.reason.contains("is open"), "{err}");
    assert_eq!(mock.embedding_requests().len(), calls);
}

#[tokio::test]
async fn missing_data_string_contexts_and_comparing_the_response() {
    let mock = mock().await;
    let v = relevance(&mock, json!({"threshold": 0.3}));
    let issues = v
        .validate("", &Context::new().with(keys::QUESTION, QUESTION))
        .await
        .unwrap();
    assert_eq!(issues[0].code, "REQUEST_DATA_MISSING");
    assert!(issues[0].message.contains("retrieved context"));
    let no_question = Context::new().with(keys::RETRIEVED_CONTEXT, json!(RELEVANT));
    let issues = v.validate("", &no_question).await.unwrap();
    assert!(issues[0].message.contains("question"), "{issues:?}");
    let strict = relevance(&mock, json!({"threshold": 0.3, "on_missing": "fail"}));
    let issues = strict.validate("", &Context::new()).await.unwrap();
    assert_eq!(issues[0].code, "CONTEXT_NOT_RELEVANT");
    assert!(mock.embedding_requests().is_empty());
    // `compare: response` needs no question; a context string is split at the separator.
    let grounded = relevance(
        &mock,
        json!({"threshold": 0.3, "compare": "response", "separator": "---"}),
    );
    let context = Context::new().with(keys::RETRIEVED_CONTEXT, RELEVANT.join("\n---\n").as_str());
    assert!(grounded
        .validate("The Pro plan costs 20 EUR per month.", &context)
        .await
        .unwrap()
        .is_empty());
    let issues = grounded
        .validate("Dogs named Rex.", &context)
        .await
        .unwrap();
    assert!(issues[0].message.contains("to the response"), "{issues:?}");
    let calls = mock.embedding_requests();
    assert_eq!(
        calls[0].body["input"],
        json!(["The Pro plan costs 20 EUR per month.", RELEVANT[1]])
    );
}

#[tokio::test]
async fn config_errors_and_the_api_key() {
    let mock = mock().await;
    let build = |spec: Value| Registry::builtin().build("r", &spec, &BuildEnv::default());
    let base = mock.url();
    let err = build(
        json!({"type": "embedding_relevance", "base_url": base, "model": "m",
                           "threshold": 1.5}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("threshold"), "{err}");
    let err = build(
        json!({"type": "embedding_relevance", "base_url": "ftp://x", "model": "m",
                           "threshold": 0.5}),
    )
    .unwrap_err();
    assert!(err.to_string().contains("base_url"), "{err}");
    let err = build(
        json!({"type": "embedding_relevance", "base_url": base, "model": "m",
                           "threshold": 0.5, "api_key_env": "ENFORCE_IT_UNSET_EMBED_KEY"}),
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("ENFORCE_IT_UNSET_EMBED_KEY"),
        "{err}"
    );
    std::env::set_var("ENFORCE_IT_EMBED_KEY", "sk-embed");
    let v = build(
        json!({"type": "embedding_relevance", "base_url": base, "model": "m",
                         "threshold": 0.1, "api_key_env": "ENFORCE_IT_EMBED_KEY"}),
    )
    .unwrap();
    v.validate("", &ctx(&RELEVANT)).await.unwrap();
    assert_eq!(
        mock.embedding_requests()[0].authorization.as_deref(),
        Some("Bearer sk-embed")
    );
}
