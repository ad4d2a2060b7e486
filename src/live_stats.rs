//! `enforce serve` keeps the `reask: auto` statistics files: each request's outcome adds to
//! the live statistics its chooser reads (see `auto`), and [`StatsKeeper`] writes every file
//! back, whole and atomically (a temporary file renamed over it), every [`WRITE_PERIOD`] when
//! it changed and once more at shutdown. A crash loses at most the last period's counts.
//!
//! With a shared state (`server.state`), each period first adds this replica's new counts to
//! the replicas' shared counters and reads their sum back (`ReplicaState::share_stats`), so
//! every replica chooses by, and writes, what all of them measured.

use crate::auto::Choosers;
use enforce_core::strategy::{LiveStats, StrategyStats};
use enforce_eval::atomic::write_atomically;
use enforce_server::ReplicaState;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the statistics are shared and the files written back while serving.
pub const WRITE_PERIOD: Duration = Duration::from_secs(30);

/// Shares the live statistics with the other replicas and writes them back to the files
/// they were read from.
#[derive(Debug)]
pub struct StatsKeeper {
    files: Vec<KeptFile>,
    shared: Option<Arc<ReplicaState>>,
}

#[derive(Debug)]
struct KeptFile {
    path: PathBuf,
    stats: Arc<LiveStats>,
    /// What the file holds: unchanged statistics are not written again.
    written: Mutex<StrategyStats>,
    /// The file's counts as read, which the replicas' shared counters start from.
    initial: StrategyStats,
    /// Whether the shared counters are known to have started from the file's counts.
    seeded: AtomicBool,
}

impl StatsKeeper {
    /// The keeper of every statistics file `choosers` read, shared through `shared` when
    /// replicas share state; `None` when they read none.
    pub fn of(choosers: &Choosers, shared: Option<Arc<ReplicaState>>) -> Option<Self> {
        let files: Vec<KeptFile> = choosers
            .files()
            .map(|(path, stats)| {
                let initial = stats.snapshot();
                KeptFile {
                    path: path.to_path_buf(),
                    written: Mutex::new(initial.clone()),
                    initial,
                    seeded: AtomicBool::new(false),
                    stats: stats.clone(),
                }
            })
            .collect();
        (!files.is_empty()).then_some(StatsKeeper { files, shared })
    }

    /// Shares the counts (with a shared state), then writes the files.
    pub async fn keep(self: &Arc<Self>) {
        if let Some(shared) = &self.shared {
            for file in &self.files {
                file.share(shared).await;
            }
        }
        self.write().await;
    }

    /// Writes every file whose statistics changed since it was last written; a file that
    /// cannot be written is named in a warning and tried again next time.
    async fn write(self: &Arc<Self>) {
        let writer = self.clone();
        let written = tokio::task::spawn_blocking(move || writer.write_now()).await;
        if written.is_err() {
            eprintln!("warning: writing the reask: auto statistics failed");
        }
    }

    fn write_now(&self) {
        for file in &self.files {
            let now = file.stats.snapshot();
            let mut written = file.written.lock().unwrap_or_else(PoisonError::into_inner);
            if *written == now {
                continue;
            }
            match write_atomically(&file.path, &now.to_json()) {
                Ok(()) => *written = now,
                Err(e) => eprintln!(
                    "warning: cannot write the reask: auto statistics file {}: {e}",
                    file.path.display()
                ),
            }
        }
    }

    /// Keeps the statistics ([`keep`](Self::keep)) every `period`, until aborted.
    pub async fn every(self: Arc<Self>, period: Duration) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: nothing has changed yet.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.keep().await;
        }
    }
}

impl KeptFile {
    /// Adds the counts recorded since the last time to the shared counters and reads their
    /// sum back. The counters start from the file's counts first (unless a replica started
    /// them before); until that succeeds nothing is shared, so that a sum without them never
    /// replaces the file's. What is recorded meanwhile waits, counted, for the next time.
    async fn share(&self, shared: &ReplicaState) {
        let name = self.shared_name();
        if !self.seeded.load(Ordering::Relaxed) {
            if !shared.seed_stats(&name, &self.initial).await {
                return;
            }
            self.seeded.store(true, Ordering::Relaxed);
        }
        shared.share_stats(&name, &self.stats).await;
    }

    /// The name the replicas share the file's counts under: its file name, the same for
    /// every replica whatever directory it reads the file from.
    fn shared_name(&self) -> String {
        self.path
            .file_name()
            .map(|name| name.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}
