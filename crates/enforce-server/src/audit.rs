//! The audit log: one JSON line per enforcement (the [`Outcome`](enforce_core::Outcome)
//! record), appended by a dedicated thread so that file I/O and fsync never block the runtime.

use crate::config::FsyncPolicy;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Appends lines to a file from a background thread. [`AuditLog::close`] flushes and syncs.
#[derive(Debug)]
pub struct AuditLog {
    sender: Mutex<Option<Sender<String>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl AuditLog {
    /// Opens (creating if needed) `path` for appending and starts the writer thread.
    pub fn open(path: &Path, policy: FsyncPolicy) -> io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = mpsc::channel::<String>();
        let writer = std::thread::Builder::new()
            .name("enforce-audit".into())
            .spawn(move || write_lines(file, policy, receiver))?;
        Ok(AuditLog {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
        })
    }

    /// Queues one line (a newline is added). Lines after [`close`](Self::close) are dropped.
    pub fn append(&self, line: String) {
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = sender.as_ref() {
            // The writer only stops after close(): a send error means it already did.
            let _ = sender.send(line);
        }
    }

    /// Stops accepting lines, writes what is queued, flushes and syncs the file. Blocking:
    /// call it from `spawn_blocking` inside a runtime.
    pub fn close(&self) {
        drop(
            self.sender
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take(),
        );
        let writer = self
            .writer
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(writer) = writer {
            if writer.join().is_err() {
                tracing::error!("audit writer thread panicked");
            }
        }
    }
}

impl Drop for AuditLog {
    fn drop(&mut self) {
        self.close();
    }
}

fn write_lines(file: File, policy: FsyncPolicy, receiver: mpsc::Receiver<String>) {
    let mut out = BufWriter::new(file);
    let mut dirty = false;
    let mut last_sync = Instant::now();
    let wait = match policy {
        FsyncPolicy::Interval(every) => every.max(Duration::from_millis(1)),
        // Flush the buffer to the OS soon after a burst, so `tail -f` sees lines.
        FsyncPolicy::Never | FsyncPolicy::Always => Duration::from_millis(200),
    };
    loop {
        match receiver.recv_timeout(wait) {
            Ok(line) => {
                if let Err(e) = writeln!(out, "{line}") {
                    tracing::error!(error = %e, "audit log write failed");
                    continue;
                }
                dirty = true;
                if policy == FsyncPolicy::Always {
                    sync(&mut out);
                    dirty = false;
                    last_sync = Instant::now();
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if dirty {
            match policy {
                FsyncPolicy::Interval(every) if last_sync.elapsed() >= every => {
                    sync(&mut out);
                    dirty = false;
                    last_sync = Instant::now();
                }
                FsyncPolicy::Never => {
                    if let Err(e) = out.flush() {
                        tracing::error!(error = %e, "audit log flush failed");
                    }
                    dirty = false;
                }
                _ => {}
            }
        }
    }
    sync(&mut out);
}

fn sync(out: &mut BufWriter<File>) {
    if let Err(e) = out.flush().and_then(|()| out.get_ref().sync_data()) {
        tracing::error!(error = %e, "audit log sync failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn close_writes_every_queued_line() {
        let dir = std::env::temp_dir().join(format!("enforce-audit-{}", std::process::id()));
        let path = dir.join("audit.jsonl");
        let _ = std::fs::remove_file(&path);
        for policy in [
            FsyncPolicy::Never,
            FsyncPolicy::Always,
            FsyncPolicy::Interval(Duration::from_millis(5)),
        ] {
            let log = AuditLog::open(&path, policy).unwrap();
            log.append("{\"a\":1}".into());
            log.append("{\"a\":2}".into());
            log.close();
            log.append("dropped".into());
        }
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(text.lines().count(), 6);
        assert!(!text.contains("dropped"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
