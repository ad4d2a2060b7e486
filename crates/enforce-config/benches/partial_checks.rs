//! What early abort costs per streamed chunk when nothing fails: the partial checks of the
//! built-in validators (`terms`, `pattern`, `length`, bare `json`, `adr_structure`), run by the
//! loop every `partial_check_bytes` (32) new bytes, over a 4 KB answer streamed in 4-byte
//! chunks (about one token each).
//!
//! - `partial_checks/per_chunk/<validator>`: one validator's checker fed the growing answer
//!   32 bytes at a time; the figure is for the whole answer, divide by its chunks (1024).
//! - `partial_checks/loop/early_abort_{on,off}`: the whole loop with all five validators and a
//!   scripted streaming runner; the difference divided by 1024 chunks is the added cost per
//!   chunk.
//!
//! Run: `cargo bench -p enforce-config --bench partial_checks`

use criterion::{black_box, criterion_group, criterion_main, Criterion};
use enforce_config::{BuildEnv, Registry};
use enforce_core::{Context, Enforcer, Policy, Request, ScriptedRunner, Status, Validator};
use serde_json::json;
use std::time::Duration;

use futures_executor::block_on;

const ANSWER_BYTES: usize = 4096;
const CHUNK_BYTES: usize = 4;
const EVERY: usize = 32;

/// An answer of about 4 KB that passes every validator below: JSON whose text field is prose.
fn answer() -> String {
    let para = "The proxy keeps per-session state on disk, so a cache keyed by the digest fits. ";
    let mut body = String::new();
    while body.len() + para.len() < ANSWER_BYTES - 40 {
        body.push_str(para);
    }
    json!({"title": "Caching", "body": body}).to_string()
}

fn validators() -> Vec<(&'static str, Box<dyn Validator>)> {
    let registry = Registry::builtin();
    let env = BuildEnv::default();
    let build = |kind: &str, spec: serde_json::Value| registry.build(kind, &spec, &env).unwrap();
    vec![
        (
            "terms",
            build(
                "terms",
                json!({"forbidden": ["Acme", "Globex", "Initech", "guarantee"]}),
            ),
        ),
        (
            "pattern",
            build(
                "pattern",
                json!({"forbidden": [{"regex": "\\d+\\s*%"}, {"regex": "\\bL[1-4]\\b"}]}),
            ),
        ),
        (
            "length",
            build("length", json!({"unit": "words", "max": 5000})),
        ),
        (
            "json",
            build(
                "json",
                json!({"bare": true, "schema": {"type": "object", "required": ["title"]}}),
            ),
        ),
        ("adr_structure", build("adr_structure", json!({}))),
    ]
}

fn per_chunk(c: &mut Criterion) {
    let text = answer();
    let context = Context::new();
    let mut group = c.benchmark_group("partial_checks/per_chunk");
    group.measurement_time(Duration::from_secs(3));
    for (name, validator) in validators() {
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut check = validator
                    .partial_check(&context)
                    .expect("has a partial check");
                let mut found = 0;
                let mut end = EVERY;
                while end <= text.len() {
                    found += block_on(check.check(black_box(&text[..end]))).len();
                    end += EVERY;
                }
                assert_eq!(found, 0, "{name} found an error in a passing answer");
            })
        });
    }
    group.finish();
}

fn whole_loop(c: &mut Criterion) {
    let text = answer();
    let mut group = c.benchmark_group("partial_checks/loop");
    group.measurement_time(Duration::from_secs(3));
    for early_abort in [true, false] {
        let enforcer = Enforcer::new(validators().into_iter().map(|(_, v)| v).collect())
            .with_policy(
                Policy::builder()
                    .early_abort(early_abort)
                    .partial_check_bytes(EVERY)
                    .build(),
            );
        let request = Request::prompt("Write it.");
        let name = if early_abort {
            "early_abort_on"
        } else {
            "early_abort_off"
        };
        group.bench_function(name, |b| {
            b.iter(|| {
                let runner = ScriptedRunner::texts([text.as_str()]).streamed(CHUNK_BYTES);
                let outcome = block_on(enforcer.run(&runner, &request, &Context::new()));
                assert_eq!(outcome.status, Status::Passed);
            })
        });
    }
    group.finish();
}

criterion_group!(benches, per_chunk, whole_loop);
criterion_main!(benches);
