//! Benchmarks for the figures in the README:
//! step_marker on a 1 MB response, the `adr` profile on a realistic 8 KB ADR and on a 1 MB
//! response, and one regex rule on a 200-byte string.
//!
//! Run: `cargo bench -p enforce-validators --bench validators`

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use enforce_config::{BuildEnv, ProfileSet, Registry};
use enforce_core::{Context, Validator};
use std::sync::Arc;
use std::time::Duration;

use futures_executor::block_on;

/// A realistic ADR of about 8 KB that passes the `adr` profile (paths exist in this crate).
fn adr_8k() -> String {
    let mut s = String::from(
        "Here is the ADR for the caching layer:\n\n---\nadr_id: ADR-0042\ntitle: Cache validated responses per session\n\
         status: Proposed\ndate: 2026-11-20\nauthors: [platform-team]\nfiles:\n  modify:\n    - Cargo.toml\n    - src/lib.rs\n\
         \x20   - src/profile.rs\n  create:\n    - src/cache.rs\n---\n\n# ADR-0042: Cache validated responses per session\n\n## Kontext\n\n",
    );
    let para =
        "Validated responses are requested again when a user reloads a conversation, and each \
                reload currently repeats the full validation. The proxy keeps per-session state on \
                disk already, so a cache keyed by the response digest fits the existing design. \
                Large ADR responses dominate the cost, while chat answers are cheap to check.\n\n";
    while s.len() < 3000 {
        s.push_str(para);
    }
    s.push_str("## Entscheidung\n\nWe cache the outcome of a check by digest and profile name.\n\n```rust\nfn key(digest: &str, profile: &str) -> String {\n    format!(\"{profile}:{digest}\")\n}\n```\n\n");
    while s.len() < 5500 {
        s.push_str(para);
    }
    s.push_str("## Akzeptanzkriterien\n\n");
    for i in 1..=8 {
        s.push_str(&format!(
            "- [ ] Criterion {i}: a cached outcome is returned without re-validation\n"
        ));
    }
    s.push_str("\n## Konsequenzen\n\n");
    while s.len() < 8100 {
        s.push_str(para);
    }
    s.push_str("<!-- STEP: generate -->\n");
    s
}

/// About 1 MB of chat prose with a code fence every ~8 KB and the marker at the end.
fn chat_1mb() -> String {
    let para = "The migration runs in three phases. First the schema is extended, then the data is \
                copied in batches, and finally the old columns are dropped once nothing reads them.\n\n";
    let fence = "```sql\nALTER TABLE t ADD COLUMN c int;\n```\n\n";
    let mut s = String::with_capacity(1 << 20);
    while s.len() < (1 << 20) - 64 {
        for _ in 0..45 {
            s.push_str(para);
        }
        s.push_str(fence);
    }
    s.push_str("Shall I continue?\n<!-- STEP: what -->\n");
    s
}

/// About 1 MB where every paragraph has a code fence (a worst case for fence tracking).
fn fence_dense_1mb() -> String {
    let chunk = "Run this:\n\n```sh\nmake migrate\n```\n\n";
    let mut s = String::with_capacity(1 << 20);
    while s.len() < (1 << 20) - 64 {
        s.push_str(chunk);
    }
    s.push_str("Done.\n<!-- STEP: done -->\n");
    s
}

fn benches(c: &mut Criterion) {
    let registry = Registry::builtin();
    let root = Some(std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    let profiles = ProfileSet::builtin(&registry, root).expect("built-in profiles");
    let adr: Vec<Arc<dyn Validator>> = profiles.get("adr").expect("adr").validators().to_vec();
    let ctx = Context::new();

    let adr_text = adr_8k();
    let issues: usize = adr
        .iter()
        .map(|v| block_on(v.validate(&adr_text, &ctx)).map_or(99, |i| i.len()))
        .sum();
    assert_eq!(issues, 0, "the 8 KB ADR must pass");
    let big = chat_1mb();

    let step = registry
        .build(
            "step_marker",
            &serde_json::Value::Null,
            &BuildEnv::default(),
        )
        .expect("step_marker");
    let mut g = c.benchmark_group("step_marker");
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("1MB", |b| {
        b.iter(|| block_on(step.validate(black_box(&big), &ctx)))
    });
    g.bench_function("extract_step_1MB", |b| {
        b.iter(|| enforce_documents::extract_step(black_box(&big)))
    });
    let dense = fence_dense_1mb();
    g.bench_function("1MB_fence_every_40_bytes", |b| {
        b.iter(|| block_on(step.validate(black_box(&dense), &ctx)))
    });
    g.finish();

    let mut g = c.benchmark_group("adr_profile");
    g.throughput(Throughput::Bytes(adr_text.len() as u64));
    g.bench_function("adr_8KB", |b| {
        b.iter(|| {
            for v in &adr {
                black_box(block_on(v.validate(black_box(&adr_text), &ctx)).ok());
            }
        })
    });
    for v in &adr {
        g.bench_function(format!("adr_8KB_only_{}", v.name()), |b| {
            b.iter(|| block_on(v.validate(black_box(&adr_text), &ctx)))
        });
    }
    let enforcer = profiles.enforcer("adr").expect("adr");
    g.bench_function("adr_8KB_enforcer_check", |b| {
        b.iter(|| block_on(enforcer.check(black_box(&adr_text), &ctx, enforce_core::Check::Report)))
    });
    g.throughput(Throughput::Bytes(big.len() as u64));
    g.bench_function("response_1MB", |b| {
        b.iter(|| {
            for v in &adr {
                black_box(block_on(v.validate(black_box(&big), &ctx)).ok());
            }
        })
    });
    g.finish();

    let spec = serde_json::json!({"type": "pattern", "forbidden": [{"regex": "\\d+\\s*%", "code": "NO_NUMERIC_SCORES"}]});
    let rule = registry
        .build("no_scores", &spec, &BuildEnv::default())
        .expect("pattern");
    let short = "Die Muster GmbH hat ihre Prozesse im letzten Jahr deutlich verbessert und dokumentiert \
                 die Maßnahmen nun zentral; die Abdeckung liegt bei rund achtzig Prozent der Standorte. \
                 Details folgen.";
    assert!((190..=210).contains(&short.len()), "{}", short.len());
    let mut g = c.benchmark_group("pattern");
    g.bench_function("one_rule_200B", |b| {
        b.iter(|| block_on(rule.validate(black_box(short), &ctx)))
    });
    g.finish();
}

criterion_group! {
    name = validators;
    config = Criterion::default().sample_size(30).measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = benches
}
criterion_main!(validators);
