//! A plugin validator against the same logic built in, on a short response.
//!
//! `german_prose` runs three ways on the same text:
//! - `builtin`: `GermanProse::check` linked into the binary behind enforce-core's `Validator`;
//! - `plugin_inline`: the german-prose plugin library through the ABI (`Isolation::Inline`);
//! - `plugin_blocking_thread`: the same, with the default isolation (a pool thread plus the
//!   timeout), inside a multi-thread runtime.
//!
//! The plugin library is the cdylib cargo builds, with the bench profile, for the dev-dependency
//! on `enforce-plugin-german-prose` (next to the bench executable); `ENFORCE_BENCH_PLUGIN` can
//! name another one.
//!
//! Run: `cargo bench -p enforce-plugin-host --bench plugin_vs_builtin`

use criterion::{criterion_group, criterion_main, Criterion};
use enforce_core::{async_trait, Context, Issue, Validation, Validator};
use enforce_plugin_german_prose::GermanProse;
use enforce_plugin_host::{CallOptions, HostedValidator, Isolation, PluginHost};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;

/// About 300 characters of German business prose with one direct address.
const SHORT_RESPONSE: &str = "Die Analyse zeigt, dass das Unternehmen seine Lieferzeiten im \
letzten Quartal deutlich verkürzt hat.\nDie neue Lagerlogistik trägt dazu bei, und das Team \
plant weitere Schritte.\nWir empfehlen Ihnen, die Ergebnisse im nächsten Termin zu besprechen.";

/// The same logic as the plugin, built in.
struct BuiltinGermanProse(GermanProse);

#[async_trait]
impl Validator for BuiltinGermanProse {
    fn name(&self) -> &str {
        "german_prose"
    }

    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(self
            .0
            .check(response)
            .into_iter()
            .map(|finding| {
                let (message, hint) = finding.message_and_hint();
                Issue::error("german_prose", finding.code, message)
                    .with_hint(hint)
                    .at(finding.line, finding.column)
            })
            .collect())
    }
}

fn release_plugin() -> PathBuf {
    if let Some(path) = std::env::var_os("ENFORCE_BENCH_PLUGIN") {
        return PathBuf::from(path);
    }
    let file = format!(
        "{}enforce_plugin_german_prose{}",
        std::env::consts::DLL_PREFIX,
        std::env::consts::DLL_SUFFIX
    );
    // The dev-dependency on the plugin crate makes cargo build its cdylib with the bench
    // profile, next to this executable: the same optimisation as the built-in side.
    if let Some(beside) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|dir| dir.join(&file)))
        .filter(|path| path.is_file())
    {
        return beside;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let target = root.join("target").join("bench-plugins");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--release",
            "--quiet",
            "-p",
            "enforce-plugin-german-prose",
        ])
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&root)
        .status()
        .expect("cannot start cargo");
    assert!(status.success(), "building the german-prose plugin failed");
    target.join("release").join(file)
}

fn hosted(isolation: Isolation) -> HostedValidator {
    let mut host = PluginHost::new();
    let path = release_plugin();
    host.load_file(&path)
        .expect("the german-prose plugin loads");
    host.create_validator(
        "german_prose",
        "german_prose",
        &serde_json::Value::Null,
        CallOptions {
            isolation,
            ..CallOptions::default()
        },
    )
    .expect("german_prose builds")
}

/// Polls a future that is ready at once (built-in and inline validators never wait).
fn ready<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context as TaskContext, Poll, Waker};
    let mut future = std::pin::pin!(future);
    match future
        .as_mut()
        .poll(&mut TaskContext::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("expected a ready future"),
    }
}

fn bench(c: &mut Criterion) {
    let context = Context::new();
    let builtin = BuiltinGermanProse(GermanProse::default());
    let inline = hosted(Isolation::Inline);
    let threaded = hosted(Isolation::BlockingThread);

    // All three must agree before their speed means anything.
    let expected = ready(builtin.validate(SHORT_RESPONSE, &context)).expect("builtin");
    assert_eq!(expected.len(), 1);
    assert_eq!(
        ready(inline.validate(SHORT_RESPONSE, &context)).expect("inline"),
        expected
    );
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("tokio runtime");
    assert_eq!(
        runtime
            .block_on(threaded.validate(SHORT_RESPONSE, &context))
            .expect("threaded"),
        expected
    );

    let mut group = c.benchmark_group("german_prose_short_response");
    group.bench_function("builtin", |b| {
        b.iter(|| ready(builtin.validate(black_box(SHORT_RESPONSE), &context)))
    });
    group.bench_function("plugin_inline", |b| {
        b.iter(|| ready(inline.validate(black_box(SHORT_RESPONSE), &context)))
    });
    group.bench_function("plugin_blocking_thread", |b| {
        b.iter(|| runtime.block_on(threaded.validate(black_box(SHORT_RESPONSE), &context)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
