//! The proxy's memory under oversized requests (RELIABILITY.md, "Hostile clients"): many
//! concurrent bodies near `max_body_bytes` raise its resident memory by no more than its body
//! budget (`max_body_bytes_in_flight`) allows, and every request is answered.

use crate::serve::{client, temp_dir, Proxy, GOOD};
use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};
use serde_json::json;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

const MIB: u64 = 1024 * 1024;
/// The body budget of the test's proxy: two of its bodies at once, where `max_concurrent`
/// alone would admit eight.
const BUDGET: u64 = 4 * MIB;
const BODY: usize = 1_900_000;
const REQUESTS: usize = 20;

/// The resident memory of process `pid`, in bytes (Linux's `/proc/<pid>/status`).
fn rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A request refused while its body was still being sent (see below).
const REFUSED_WHILE_SENDING: u16 = 0;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_large_bodies_raise_memory_by_the_body_budget_and_all_are_answered() {
    if rss(std::process::id()).is_none() {
        eprintln!("skipped: no /proc/<pid>/status on this system");
        return;
    }
    // Slow enough that the admitted requests still hold their bodies when the rest arrive.
    let reply = MockReply::text(GOOD).delayed(Duration::from_millis(400));
    let upstream = MockOpenAi::start(MockScript::new().reply(reply).then(Then::RepeatLast))
        .await
        .unwrap();
    let dir = temp_dir("memory-bound");
    let config = dir.join("enforce.yaml");
    std::fs::write(
        &config,
        format!(
            "profiles:\n  plain:\n    validators: []\nmodels:\n  - id: m\n    profile: plain\n    runner: {{ type: openai, base_url: \"{}\", model: x }}\nserver:\n  max_concurrent: 8\n  max_body_bytes: 2000000\n  max_body_bytes_in_flight: {BUDGET}\n",
            upstream.url()
        ),
    )
    .unwrap();
    let proxy = Proxy::start(&["--config", config.to_str().unwrap()]);
    let small = json!({"model": "m", "messages": [{"role": "user", "content": "Why?"}]});
    let warm = client().post(proxy.url("/chat/completions")).json(&small);
    assert_eq!(warm.send().await.unwrap().status(), 200);
    let pid = proxy.pid();
    let idle = rss(pid).unwrap();

    let peak = Arc::new(AtomicU64::new(idle));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (peak.clone(), done.clone());
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                if let Some(now) = rss(pid) {
                    peak.fetch_max(now, Ordering::Relaxed);
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        })
    };
    let body = serde_json::to_vec(&json!({
        "model": "m",
        "messages": [{"role": "user", "content": "x".repeat(BODY - 100)}],
    }))
    .unwrap();
    let mut sends = tokio::task::JoinSet::new();
    for _ in 0..REQUESTS {
        let request = client()
            .post(proxy.url("/chat/completions"))
            .header("content-type", "application/json")
            .body(body.clone());
        sends.spawn(async move {
            match request.send().await {
                Ok(answer) => Ok(answer.status().as_u16()),
                // Refused before its body was read, a request still being sent may see the
                // connection closed under it instead of the 429 (HTTP/1.1 without
                // `Expect: 100-continue`): refused all the same, and never asked upstream.
                Err(e) if e.is_request() => Ok(REFUSED_WHILE_SENDING),
                Err(e) => Err(e),
            }
        });
    }
    let statuses = sends.join_all().await;
    done.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let peak = peak.load(Ordering::Relaxed);

    let answered: Vec<u16> = statuses.into_iter().map(|s| s.unwrap()).collect();
    assert!(
        answered
            .iter()
            .all(|s| [200, 429, 503, REFUSED_WHILE_SENDING].contains(s)),
        "every request answered 200 or refused: {answered:?}"
    );
    assert!(answered.contains(&200), "{answered:?}");
    assert!(
        answered.contains(&429) || answered.contains(&REFUSED_WHILE_SENDING),
        "{answered:?}"
    );
    // A body is in memory twice over at its peaks (the bytes and the parsed request, then the
    // conversation and the upstream request), the allocator grows RSS in 2 MB huge pages on
    // top, and twenty connections and the threads' heaps take some 10-20 MiB of their own.
    // Without the budget (eight bodies at once) the proxy grew by about 48 MB here.
    let grown = peak.saturating_sub(idle);
    eprintln!("idle {idle} peak {peak} grown {grown} ({answered:?})");
    assert!(
        grown <= BUDGET * 5 / 2 + 20 * MIB,
        "resident memory grew by {} MiB over an idle {} MiB (budget {} MiB)",
        grown / MIB,
        idle / MIB,
        BUDGET / MIB
    );
}
