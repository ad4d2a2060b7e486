//! enforce's side: the local runner (`enforce-runner-local`, llama.cpp linked in with the
//! feature `local`), timed from its stream: the first `Spent` event is the first answer token.

#[cfg(not(feature = "local"))]
use super::Timing;
#[cfg(not(feature = "local"))]
use std::path::Path;

#[cfg(feature = "local")]
pub use with_llama::open;

/// The llama.cpp the runner links: the version of `llama-cpp-sys-2`, which vendors it, from
/// `cargo metadata` of the checkout the bench runs in.
pub fn llama_version() -> String {
    let metadata = std::process::Command::new("cargo")
        .args(["metadata", "--format-version", "1", "--offline"])
        .stderr(std::process::Stdio::null())
        .output();
    #[derive(serde::Deserialize)]
    struct Metadata {
        packages: Vec<Package>,
    }
    #[derive(serde::Deserialize)]
    struct Package {
        name: String,
        version: String,
    }
    metadata
        .ok()
        .and_then(|o| serde_json::from_slice::<Metadata>(&o.stdout).ok())
        .and_then(|m| m.packages.into_iter().find(|p| p.name == "llama-cpp-sys-2"))
        .map(|p| format!("the llama.cpp vendored by llama-cpp-sys-2 {}", p.version))
        .unwrap_or_else(|| "the llama.cpp vendored by llama-cpp-sys-2".into())
}

/// The CPU seconds of the `tokens - 1` tokens after the first, from the readings at
/// two tokens: the CPU time a token took between them, times the tokens.
#[cfg_attr(not(feature = "local"), allow(dead_code))]
fn cpu_seconds(readings: Option<((u64, u64), (u64, u64))>, tokens: u64) -> Option<f64> {
    let ((from_token, from_ns), (to_token, to_ns)) = readings?;
    let span = to_token.checked_sub(from_token).filter(|n| *n > 0)?;
    let per_token = to_ns.saturating_sub(from_ns) as f64 / 1e9 / span as f64;
    Some(per_token * tokens.saturating_sub(1) as f64)
}

#[cfg(not(feature = "local"))]
/// Without the feature `local` there is no runner to time.
pub enum Local {}

#[cfg(not(feature = "local"))]
/// Says that this build has no local runner.
pub fn open(_gguf: &Path, _threads: u32) -> anyhow::Result<Local> {
    anyhow::bail!(
        "enforce-bench was built without the feature `local` (cargo xtask bench-peers \
         --local-speed builds it with)"
    )
}

#[cfg(not(feature = "local"))]
impl Local {
    pub fn time(
        &self,
        _messages: Vec<enforce_core::Message>,
        _max_tokens: u32,
        _grammar: Option<&str>,
    ) -> anyhow::Result<Timing> {
        match *self {}
    }
}

#[cfg(feature = "local")]
mod with_llama {
    use super::super::Timing;
    use super::cpu_seconds;
    use anyhow::anyhow;
    use enforce_core::{Ask, Message, Request, Runner, StreamEvent};
    use enforce_runner_local::{LocalConfig, LocalRunner};
    use futures_util::StreamExt;
    use serde_json::json;
    use std::path::Path;
    use std::time::Instant;

    /// Nanoseconds on a CPU of the runner's generating thread (named `enforce-local`; one
    /// at a time here), from the kernel's `schedstat`; `None` where that is not available.
    fn generation_cpu_ns() -> Option<u64> {
        std::fs::read_dir("/proc/self/task")
            .ok()?
            .flatten()
            .find(|task| {
                std::fs::read_to_string(task.path().join("comm"))
                    .is_ok_and(|comm| comm.trim() == "enforce-local")
            })
            .and_then(|task| std::fs::read_to_string(task.path().join("schedstat")).ok())
            .and_then(|stat| stat.split_whitespace().next()?.parse().ok())
    }

    /// A loaded model and the runtime its stream is read on.
    pub struct Local {
        runner: LocalRunner,
        rt: tokio::runtime::Runtime,
    }

    /// The runner of `gguf`, its model loaded (loading is not timed).
    pub fn open(gguf: &Path, threads: u32) -> anyhow::Result<Local> {
        let runner = LocalRunner::new(LocalConfig {
            threads,
            temperature: 0.0,
            seed: Some(0),
            ..LocalConfig::new(gguf)
        })?;
        runner.load()?;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Local { runner, rt })
    }

    impl Local {
        /// Times one greedy answer to `messages`, under `grammar` (GBNF) when given.
        pub fn time(
            &self,
            messages: Vec<Message>,
            max_tokens: u32,
            grammar: Option<&str>,
        ) -> anyhow::Result<Timing> {
            let mut request = Request {
                messages,
                ..Request::default()
            };
            request.params.insert("temperature".into(), json!(0));
            request
                .params
                .insert("max_tokens".into(), json!(max_tokens));
            if let Some(gbnf) = grammar {
                request.params.insert("grammar".into(), json!(gbnf));
            }
            self.rt.block_on(async {
                let started = Instant::now();
                let mut stream = self.runner.ask(Ask::new(&request).streamed());
                let (mut first, mut last, mut tokens) = (None, None, 0u64);
                // (tokens so far, CPU ns) at the first and the last token the generating
                // thread was still there to be read at: events wait in a channel, so the
                // thread may have ended before the last ones are read.
                let (mut first_cpu, mut last_cpu) = (None, None);
                while let Some(event) = stream.next().await {
                    match event? {
                        // One `Spent` per answer token, sent as it is sampled (none for the
                        // end-of-generation token).
                        StreamEvent::Spent { .. } => {
                            let now = Instant::now();
                            tokens += 1;
                            first.get_or_insert(now);
                            last = Some(now);
                            if let Some(ns) = generation_cpu_ns() {
                                first_cpu.get_or_insert((tokens, ns));
                                last_cpu = Some((tokens, ns));
                            }
                        }
                        StreamEvent::Done(reply) => {
                            let usage = reply
                                .usage
                                .ok_or_else(|| anyhow!("the reply has no usage"))?;
                            let (first, last) = first.zip(last).unwrap_or((started, started));
                            return Ok(Timing {
                                prompt_tokens: usage.input_tokens,
                                tokens,
                                first_s: (first - started).as_secs_f64(),
                                rest_s: (last - first).as_secs_f64(),
                                rest_cpu_s: cpu_seconds(first_cpu.zip(last_cpu), tokens),
                            });
                        }
                        _ => {}
                    }
                }
                Err(anyhow!("the stream ended without a reply"))
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::cpu_seconds;

    #[test]
    fn cpu_time_between_two_readings_is_scaled_to_every_token_after_the_first() {
        // 2 ms a token between tokens 1 and 5; 9 tokens after the first.
        let s = cpu_seconds(Some(((1, 1_000_000), (5, 9_000_000))), 10).unwrap();
        assert!((s - 0.018).abs() < 1e-12, "{s}");
        assert_eq!(cpu_seconds(Some(((3, 0), (3, 5))), 10), None, "one reading");
        assert_eq!(cpu_seconds(None, 10), None);
    }
}
