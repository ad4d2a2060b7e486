//! Load harness (not part of CI): N concurrent clients through the real `enforce serve` binary
//! against in-process mock upstreams, streaming and not, with a share of re-asks. Every answer
//! must carry its own request's token (the mock echoes it): zero lost, zero mixed. Samples the
//! proxy's resident memory to show whether it is stable.
//!
//! ```text
//! cargo build --profile dist --bin enforce
//! ulimit -n 8192
//! cargo run --profile dist --example load -- [clients=1000] [seconds=60] [reask_percent=20]
//! ```
//!
//! It exits non-zero when any answer was lost or mixed.

use enforce_testkit::{MockOpenAi, MockReply, MockScript, Then};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const VALID: &str = "Answer for {{token}}.\n<!-- STEP: done -->";

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    reasked: AtomicU64,
    lost: AtomicU64,
    mixed: AtomicU64,
    errors: AtomicU64,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let clients = args.first().copied().unwrap_or(1000);
    let seconds = args.get(1).copied().unwrap_or(60);
    let reask_percent = args.get(2).copied().unwrap_or(20);

    let plain = MockOpenAi::start(
        MockScript::new()
            .reply(MockReply::text(VALID))
            .then(Then::RepeatLast),
    )
    .await?;
    let reask = MockOpenAi::start(MockScript::new().then(Then::FailFirst {
        invalid: "No marker for {{token}}.".into(),
        valid: VALID.into(),
        marker: "MISSING_STEP_MARKER".into(),
    }))
    .await?;
    let dir = std::env::temp_dir().join(format!("enforce-load-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let config = dir.join("enforce.yaml");
    let model = |id: &str, url: &str| {
        format!("  - id: {id}\n    profile: chat\n    runner:\n      type: openai\n      base_url: {url}\n      model: mock-model\n      timeout_secs: 30\n")
    };
    std::fs::write(
        &config,
        format!(
            "models:\n{}{}server:\n  max_concurrent: {}\n  audit_log: {}\n",
            model("plain", &plain.url()),
            model("reask", &reask.url()),
            clients * 2,
            dir.join("audit.jsonl").display()
        ),
    )?;
    let exe = std::env::var("ENFORCE_BIN").unwrap_or_else(|_| "target/dist/enforce".into());
    let mut child = Command::new(&exe)
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let mut lines = BufReader::new(child.stderr.take().ok_or("stderr")?).lines();
    let base = loop {
        let line = lines.next().ok_or("enforce serve did not start")??;
        if let Some(rest) = line.split("listening on ").nth(1) {
            break rest.trim().to_string();
        }
    };
    std::thread::spawn(move || for _ in lines.by_ref() {});
    let pid = child.id();

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(clients as usize)
        .build()?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, base, counts, stop) =
            (client.clone(), base.clone(), counts.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            let mut n: u64 = 0;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let token = format!("c{c}-n{n}");
                let stream = (c + n) % 2 == 0;
                let reasked = (c * 7 + n * 13) % 100 < reask_percent;
                let model = if reasked { "reask" } else { "plain" };
                let body = json!({"model": model, "stream": stream,
                    "messages": [{"role": "user", "content": format!("Question [token:{token}]")}]});
                let result = client.post(format!("{base}/chat/completions")).json(&body).send().await;
                let text = match result {
                    Ok(resp) if resp.status().is_success() => resp.text().await.unwrap_or_default(),
                    _ => {
                        counts.errors.fetch_add(1, Ordering::Relaxed);
                        continue;
                    }
                };
                let content: String = if stream {
                    text.lines()
                        .filter_map(|l| l.strip_prefix("data: "))
                        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
                        .filter_map(|v| v["choices"][0]["delta"]["content"].as_str().map(str::to_string))
                        .collect()
                } else {
                    serde_json::from_str::<Value>(&text)
                        .ok()
                        .and_then(|v| v["choices"][0]["message"]["content"].as_str().map(str::to_string))
                        .unwrap_or_default()
                };
                if content.is_empty() {
                    counts.lost.fetch_add(1, Ordering::Relaxed);
                } else if content != format!("Answer for {token}.\n<!-- STEP: done -->") {
                    counts.mixed.fetch_add(1, Ordering::Relaxed);
                    eprintln!("MIXED: request {token} got {content:?}");
                } else {
                    counts.ok.fetch_add(1, Ordering::Relaxed);
                    if reasked {
                        counts.reasked.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    let mut rss = Vec::new();
    while started.elapsed() < Duration::from_secs(seconds) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if let Some(kib) = rss_kib(pid) {
            rss.push(kib);
            eprintln!(
                "t={:>3}s ok={} rss={} KiB",
                started.elapsed().as_secs(),
                counts.ok.load(Ordering::Relaxed),
                kib
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    let ok = counts.ok.load(Ordering::Relaxed);
    let lost = counts.lost.load(Ordering::Relaxed);
    let mixed = counts.mixed.load(Ordering::Relaxed);
    let errors = counts.errors.load(Ordering::Relaxed);
    println!("clients={clients} seconds={elapsed:.1} reask_percent={reask_percent}");
    println!(
        "answers_ok={ok} reasked_ok={} lost={lost} mixed={mixed} http_errors={errors} throughput={:.0}/s",
        counts.reasked.load(Ordering::Relaxed),
        ok as f64 / elapsed
    );
    println!(
        "upstream_calls plain={} reask={}",
        plain.chat_requests().len(),
        reask.chat_requests().len()
    );
    println!("proxy_rss_kib samples={rss:?}");
    let _ = std::fs::remove_dir_all(&dir);
    if lost + mixed + errors > 0 {
        std::process::exit(1);
    }
    Ok(())
}
