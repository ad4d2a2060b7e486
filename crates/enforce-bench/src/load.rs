//! The load driver: the same plan for every target.
//!
//! warm-up → 300 sequential requests on one keep-alive connection → c=10 for a fixed time →
//! a fixed-rate (open-loop) phase. Each phase records p50/p99 latency, time to first byte,
//! full-response time, errors, and the target's CPU time per request (from `/proc`, the target
//! process and its descendants); the target's peak RSS is read at the end.

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The API a request speaks: its body's shape (the URL names the route).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Surface {
    /// `POST /v1/chat/completions`.
    Chat,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/messages`.
    Messages,
}

impl Surface {
    /// Every surface, in the order the report lists them.
    pub const ALL: [Surface; 3] = [Surface::Chat, Surface::Responses, Surface::Messages];

    /// The route, after the base URL's `/v1`.
    pub fn path(self) -> &'static str {
        match self {
            Surface::Chat => "/chat/completions",
            Surface::Responses => "/responses",
            Surface::Messages => "/messages",
        }
    }

    /// The name on the command line and in the report.
    pub fn name(self) -> &'static str {
        match self {
            Surface::Chat => "chat",
            Surface::Responses => "responses",
            Surface::Messages => "messages",
        }
    }

    /// The benchmark's one question, in this surface's request shape.
    fn body(self, model: &str, stream: bool) -> serde_json::Value {
        const QUESTION: &str = "Who is Ada? Answer as JSON.";
        match self {
            Surface::Chat => json!({
                "model": model,
                "messages": [{"role": "user", "content": QUESTION}],
                "stream": stream,
            }),
            Surface::Responses => json!({"model": model, "input": QUESTION, "stream": stream}),
            Surface::Messages => json!({
                "model": model,
                "max_tokens": 256,
                "messages": [{"role": "user", "content": QUESTION}],
                "stream": stream,
            }),
        }
    }
}

/// What to drive.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// The URL posted to (`…/v1/chat/completions`, `…/v1/responses`, `…/v1/messages`).
    #[arg(long)]
    pub url: String,
    /// The request body's API.
    #[arg(long, value_enum, default_value = "chat")]
    pub surface: Surface,
    /// Model name sent in the body.
    #[arg(long, default_value = "mock")]
    pub model: String,
    /// Bearer key.
    #[arg(long, default_value = "sk-bench")]
    pub key: String,
    /// Ask for SSE.
    #[arg(long)]
    pub stream: bool,
    /// Process id of the target (CPU time and RSS); 0 = not measured.
    #[arg(long, default_value_t = 0)]
    pub pid: u32,
    /// Warm-up requests.
    #[arg(long, default_value_t = 30)]
    pub warmup: usize,
    /// Sequential requests on one connection.
    #[arg(long, default_value_t = 300)]
    pub sequential: usize,
    /// Concurrency of the fixed-time phase (0 skips it).
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Seconds of the concurrent phase.
    #[arg(long, default_value_t = 5.0)]
    pub seconds: f64,
    /// Requests per second of the fixed-rate phase (0 skips it).
    #[arg(long, default_value_t = 20.0)]
    pub rate: f64,
    /// Seconds of the fixed-rate phase.
    #[arg(long, default_value_t = 3.0)]
    pub rate_seconds: f64,
}

/// One phase's figures (milliseconds).
#[derive(Debug, Default, Serialize)]
pub struct Phase {
    pub requests: usize,
    pub errors: usize,
    pub first_error: Option<String>,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub ttfb_p50_ms: f64,
    pub ttfb_p99_ms: f64,
    pub full_p50_ms: f64,
    pub throughput_rps: f64,
    pub cpu_ms_per_request: Option<f64>,
}

/// Everything the driver measured.
#[derive(Debug, Default, Serialize)]
pub struct LoadReport {
    pub sequential: Phase,
    pub concurrent: Phase,
    pub fixed_rate: Phase,
    pub peak_rss_mib: Option<f64>,
}

struct Sample {
    ttfb: Duration,
    full: Duration,
    error: Option<String>,
}

async fn one(client: &reqwest::Client, args: &LoadArgs, body: &str, start: Instant) -> Sample {
    let sent = client
        .post(&args.url)
        .bearer_auth(&args.key)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await;
    let response = match sent {
        Ok(r) => r,
        Err(e) => {
            return Sample {
                ttfb: start.elapsed(),
                full: start.elapsed(),
                error: Some(e.to_string()),
            }
        }
    };
    let status = response.status();
    let mut ttfb = None;
    let mut text = Vec::new();
    let mut stream = response.bytes_stream();
    let mut error = None;
    while let Some(chunk) = stream.next().await {
        match chunk {
            Ok(c) => {
                if ttfb.is_none() && !c.is_empty() {
                    ttfb = Some(start.elapsed());
                }
                text.extend_from_slice(&c);
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    let full = start.elapsed();
    if error.is_none() {
        let body = String::from_utf8_lossy(&text);
        if !status.is_success() {
            error = Some(format!(
                "HTTP {status}: {}",
                body.chars().take(200).collect::<String>()
            ));
        } else if !(body.contains("Ada") || body.contains("[DONE]")) {
            error = Some(format!(
                "unexpected body: {}",
                body.chars().take(200).collect::<String>()
            ));
        }
    }
    Sample {
        ttfb: ttfb.unwrap_or(full),
        full,
        error,
    }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * (sorted.len() as f64 - 1.0)).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn summarize(samples: &[Sample], wall: Duration, cpu: Option<f64>) -> Phase {
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let mut full: Vec<f64> = samples.iter().map(|s| ms(s.full)).collect();
    let mut ttfb: Vec<f64> = samples.iter().map(|s| ms(s.ttfb)).collect();
    full.sort_by(f64::total_cmp);
    ttfb.sort_by(f64::total_cmp);
    let errors: Vec<&Sample> = samples.iter().filter(|s| s.error.is_some()).collect();
    Phase {
        requests: samples.len(),
        errors: errors.len(),
        first_error: errors.first().and_then(|s| s.error.clone()),
        p50_ms: percentile(&full, 50.0),
        p99_ms: percentile(&full, 99.0),
        ttfb_p50_ms: percentile(&ttfb, 50.0),
        ttfb_p99_ms: percentile(&ttfb, 99.0),
        full_p50_ms: percentile(&full, 50.0),
        throughput_rps: samples.len() as f64 / wall.as_secs_f64().max(1e-9),
        cpu_ms_per_request: cpu.map(|c| c / samples.len().max(1) as f64),
    }
}

/// Runs the plan against one target.
pub async fn run(args: LoadArgs) -> anyhow::Result<LoadReport> {
    let body = args.surface.body(&args.model, args.stream).to_string();
    let args = Arc::new(args);
    let single = reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .build()?;
    for _ in 0..args.warmup {
        let _ = one(&single, &args, &body, Instant::now()).await;
    }
    let mut report = LoadReport::default();

    // Sequential, one keep-alive connection.
    let cpu0 = proc_tree::cpu_ms(args.pid);
    let t0 = Instant::now();
    let mut samples = Vec::with_capacity(args.sequential);
    for _ in 0..args.sequential {
        samples.push(one(&single, &args, &body, Instant::now()).await);
    }
    report.sequential = summarize(
        &samples,
        t0.elapsed(),
        diff(cpu0, proc_tree::cpu_ms(args.pid)),
    );

    // c = N for a fixed time.
    if args.concurrency > 0 {
        let client = reqwest::Client::builder()
            .pool_max_idle_per_host(args.concurrency)
            .build()?;
        let deadline = Instant::now() + Duration::from_secs_f64(args.seconds);
        let cpu0 = proc_tree::cpu_ms(args.pid);
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..args.concurrency {
            let (client, args, body) = (client.clone(), args.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                let mut out = Vec::new();
                while Instant::now() < deadline {
                    out.push(one(&client, &args, &body, Instant::now()).await);
                }
                out
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            all.extend(t.await.unwrap_or_default());
        }
        report.concurrent = summarize(&all, t0.elapsed(), diff(cpu0, proc_tree::cpu_ms(args.pid)));
    }

    // Fixed rate, open loop: latency counts from the scheduled start.
    if args.rate > 0.0 {
        let client = reqwest::Client::builder().build()?;
        let n = (args.rate * args.rate_seconds).round() as usize;
        let period = Duration::from_secs_f64(1.0 / args.rate);
        let cpu0 = proc_tree::cpu_ms(args.pid);
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for i in 0..n {
            let scheduled = t0 + period * i as u32;
            tokio::time::sleep_until(scheduled.into()).await;
            let (client, args, body) = (client.clone(), args.clone(), body.clone());
            tasks.push(tokio::spawn(async move {
                one(&client, &args, &body, scheduled).await
            }));
        }
        let mut all = Vec::new();
        for t in tasks {
            if let Ok(s) = t.await {
                all.push(s);
            }
        }
        report.fixed_rate = summarize(&all, t0.elapsed(), diff(cpu0, proc_tree::cpu_ms(args.pid)));
    }
    report.peak_rss_mib = proc_tree::peak_rss_mib(args.pid);
    Ok(report)
}

fn diff(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    Some(b? - a?)
}

/// CPU time and peak RSS of a process and its descendants, from `/proc` (Linux only; `None`
/// elsewhere or for pid 0).
pub mod proc_tree {
    use std::fs;

    /// Clock ticks per second of `/proc/<pid>/stat` (USER_HZ, 100 on every Linux port we run on).
    const TICKS_PER_SECOND: f64 = 100.0;

    fn stat_fields(pid: u32) -> Option<Vec<String>> {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // The command name is in parentheses and may hold spaces: split after the last ')'.
        let (_, rest) = stat.rsplit_once(')')?;
        Some(rest.split_whitespace().map(str::to_string).collect())
    }

    /// The pid and every descendant.
    pub fn tree(root: u32) -> Vec<u32> {
        let mut parents = Vec::new();
        if let Ok(dir) = fs::read_dir("/proc") {
            for e in dir.flatten() {
                if let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) {
                    // Field 4 of stat (index 1 after the name) is the parent pid.
                    if let Some(ppid) = stat_fields(pid).and_then(|f| f.get(1)?.parse::<u32>().ok())
                    {
                        parents.push((pid, ppid));
                    }
                }
            }
        }
        let mut out = vec![root];
        let mut i = 0;
        while i < out.len() {
            let p = out[i];
            out.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
            i += 1;
        }
        out
    }

    /// User + system CPU time of the tree, in milliseconds.
    pub fn cpu_ms(root: u32) -> Option<f64> {
        if root == 0 {
            return None;
        }
        let mut ticks = 0u64;
        for pid in tree(root) {
            let f = stat_fields(pid)?;
            // utime, stime are fields 14 and 15 (indices 11, 12 after the name).
            ticks += f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        }
        Some(ticks as f64 * 1e3 / TICKS_PER_SECOND)
    }

    /// Sum of `VmHWM` over the tree, in MiB.
    pub fn peak_rss_mib(root: u32) -> Option<f64> {
        if root == 0 {
            return None;
        }
        let mut kib = 0u64;
        for pid in tree(root) {
            let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            kib += line.split_whitespace().nth(1)?.parse::<u64>().ok()?;
        }
        Some(kib as f64 / 1024.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_a_sorted_list() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), 51.0);
        assert_eq!(percentile(&v, 99.0), 99.0);
        assert!(percentile(&[], 50.0).is_nan());
    }

    #[test]
    fn own_process_has_cpu_time_and_rss() {
        let me = std::process::id();
        assert!(proc_tree::cpu_ms(me).is_some());
        assert!(proc_tree::peak_rss_mib(me).unwrap_or(0.0) > 0.0);
        assert!(proc_tree::cpu_ms(0).is_none());
    }
}
