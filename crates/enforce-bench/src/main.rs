//! `enforce-bench`: the harness behind `cargo xtask bench-peers`.
//!
//! - `enforce-bench mock`        the mock OpenAI-compatible upstream (prints its address)
//! - `enforce-bench relay`       a byte relay (the floor of any proxy on this machine)
//! - `enforce-bench load`        the load driver against one target (prints JSON)
//! - `enforce-bench validators`  enforce's side of scenario 1 (prints JSON)
//! - `enforce-bench loop`        enforce's side of scenario 2 (prints JSON)
//! - `enforce-bench stream`      scenario 4, streaming: early abort, draft mode (prints JSON)
//! - `enforce-bench peers`       everything: installs the peers, runs every scenario, writes
//!   BENCHMARKS.md
//! - `enforce-bench real-model`  `enforce eval` with the local runner on every example contract,
//!   and the peers' loops on the same model; writes the real-model section of BENCHMARKS.md
//! - `enforce-bench local-speed` the local runner's tokens/s beside llama.cpp's own
//!   (node-llama-cpp) on the same GGUF; writes the local-speed section of BENCHMARKS.md
//! - `enforce-bench local-speed-answer` (hidden) one timed answer of the local runner, for
//!   local-speed's side of the harness built for this CPU (prints JSON)
//! - `enforce-bench python`      enforce from Python (the enforce-llm wheel) against Guardrails
//!   and Instructor; writes the Python section of BENCHMARKS.md

mod cache;
mod inproc;
mod load;
mod local_speed;
mod mock;
mod peers;
mod python_api;
mod real_model;
mod relay;
mod report;
mod results;
mod section;
mod stats;
mod streaming;
mod surfaces;

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(
    name = "enforce-bench",
    about = "Side-by-side benchmarks of enforce against its peers"
)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The mock upstream.
    Mock {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long, value_enum, default_value = "ok")]
        mode: mock::Mode,
        /// Stream chunks per answer.
        #[arg(long, default_value_t = 8)]
        chunks: usize,
        /// Milliseconds between stream chunks.
        #[arg(long, default_value_t = 0)]
        gap_ms: u64,
    },
    /// A TCP byte relay to `upstream` (host:port): the floor of any proxy.
    Relay {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        #[arg(long)]
        upstream: String,
        /// Parse HTTP on both sides (axum's server, hyper's client) instead of copying bytes.
        #[arg(long)]
        http: bool,
    },
    /// The load driver.
    Load(load::LoadArgs),
    /// Scenario 1, enforce's side.
    Validators {
        #[arg(long, default_value_t = 10_000)]
        strings: usize,
        #[arg(long)]
        adr: PathBuf,
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
    /// Scenario 2, enforce's side.
    Loop {
        #[arg(long)]
        ok_url: String,
        #[arg(long)]
        fail_first_url: String,
        #[arg(long, default_value_t = 300)]
        runs: usize,
    },
    /// Scenario 4, streaming (enforce only: no peer cuts and re-asks).
    Stream(streaming::StreamArgs),
    /// Every scenario against every peer; writes BENCHMARKS.md.
    Peers(peers::PeersArgs),
    /// The real-model section: enforce eval and the peers' loops on a local GGUF model.
    RealModel(real_model::RealModelArgs),
    /// The local-speed section: the local runner's tokens/s beside llama.cpp's on the same GGUF.
    LocalSpeed(local_speed::LocalSpeedArgs),
    /// One timed answer of the local runner (local-speed runs it from the harness built for
    /// this CPU).
    #[command(hide = true)]
    LocalSpeedAnswer(local_speed::AnswerArgs),
    /// The Python section: enforce-llm's check and loop against Guardrails and Instructor.
    Python(python_api::PythonArgs),
    /// The surfaces section: the proxy's added latency on every API surface at c=1.
    Surfaces(surfaces::SurfacesArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // One worker thread: the process is pinned to one core anyway, and a single-threaded
    // driver measures the target, not cross-thread wakeups.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    match cli.command {
        Cmd::Mock {
            listen,
            mode,
            chunks,
            gap_ms,
        } => rt.block_on(mock::serve(&listen, mode, chunks, gap_ms)),
        Cmd::Relay {
            listen,
            upstream,
            http,
        } => {
            if http {
                rt.block_on(relay::serve_http(&listen, &upstream))
            } else {
                rt.block_on(relay::serve(&listen, &upstream))
            }
        }
        Cmd::Load(args) => {
            let report = rt.block_on(load::run(args))?;
            println!("{}", serde_json::to_string(&report)?);
            Ok(())
        }
        Cmd::Validators { strings, adr, root } => {
            let f = rt.block_on(inproc::validators(strings, adr, root))?;
            println!("{}", serde_json::to_string(&f)?);
            Ok(())
        }
        Cmd::Loop {
            ok_url,
            fail_first_url,
            runs,
        } => {
            let f = rt.block_on(inproc::looped(&ok_url, &fail_first_url, runs))?;
            println!("{}", serde_json::to_string(&f)?);
            Ok(())
        }
        Cmd::Stream(args) => {
            // Hundreds of streams: a multi-threaded runtime, unlike the single-core drivers.
            let rt = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()?;
            let f = rt.block_on(streaming::run(args))?;
            println!("{}", serde_json::to_string(&f)?);
            Ok(())
        }
        Cmd::Peers(args) => {
            // Every surface's added latency too; when it cannot be measured, the section of
            // the last measured run stays.
            let surfaces = surfaces::SurfacesArgs::after_peers(&args);
            peers::run(args)?;
            if let Err(e) = surfaces::run(surfaces) {
                eprintln!("bench: the surfaces section was not measured: {e}");
            }
            Ok(())
        }
        Cmd::RealModel(args) => real_model::run(args),
        Cmd::LocalSpeed(args) => local_speed::run(args),
        Cmd::LocalSpeedAnswer(args) => local_speed::answer(args),
        Cmd::Python(args) => python_api::run(args),
        Cmd::Surfaces(args) => surfaces::run(args),
    }
}
