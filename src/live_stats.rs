//! `enforce serve` keeps the `reask: auto` statistics files: each request's outcome adds to
//! the live statistics its chooser reads (see `auto`), and [`StatsWriter`] writes every file
//! back, whole and atomically (a temporary file renamed over it), every [`WRITE_PERIOD`] when
//! it changed and once more at shutdown. A crash loses at most the last period's counts.

use crate::auto::Choosers;
use crate::commands::check::write_atomically;
use enforce_core::strategy::{LiveStats, StrategyStats};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// How often the statistics files are written back while serving.
pub const WRITE_PERIOD: Duration = Duration::from_secs(30);

/// Writes the live statistics back to the files they were read from.
#[derive(Debug)]
pub struct StatsWriter {
    files: Vec<KeptFile>,
}

#[derive(Debug)]
struct KeptFile {
    path: PathBuf,
    stats: Arc<LiveStats>,
    /// What the file holds: unchanged statistics are not written again.
    written: Mutex<StrategyStats>,
}

impl StatsWriter {
    /// A writer of every statistics file `choosers` read; `None` when they read none.
    pub fn of(choosers: &Choosers) -> Option<Self> {
        let files: Vec<KeptFile> = choosers
            .files()
            .map(|(path, stats)| KeptFile {
                path: path.to_path_buf(),
                written: Mutex::new(stats.snapshot()),
                stats: stats.clone(),
            })
            .collect();
        (!files.is_empty()).then_some(StatsWriter { files })
    }

    /// Writes every file whose statistics changed since it was last written; a file that
    /// cannot be written is named in a warning and tried again next time.
    pub async fn write(self: &Arc<Self>) {
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

    /// Writes the files every `period`, until dropped (aborted).
    pub async fn every(self: Arc<Self>, period: Duration) {
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first tick is immediate: nothing has changed yet.
        ticks.tick().await;
        loop {
            ticks.tick().await;
            self.write().await;
        }
    }
}
