//! The audit log: one JSON line per enforcement (the [`Outcome`](enforce_core::Outcome)
//! record), appended by a dedicated thread so that file I/O and fsync never block the runtime,
//! and, with `server.otlp.logs`, each line also sent as an OpenTelemetry log record.

use crate::config::FsyncPolicy;
use crate::otel::AuditLogs;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::{Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// A request refused before its enforcement started (a bad key, body or model, a key's
/// limits, load), as its short `refused` audit record names it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refusal<'a> {
    /// The `enforce_rejected_total` reason (`unauthorized`, `forbidden`, `bad_request`,
    /// `unknown_model`, `body_too_large`, `overloaded`, ...).
    pub reason: &'static str,
    /// The HTTP status the client got.
    pub status: u16,
    /// The model the request asked for, when its body was read that far.
    pub model: Option<&'a str>,
    /// The name of the key it presented (never the key itself), when it was a named one.
    pub key: Option<&'a str>,
}

impl Refusal<'_> {
    /// The record as one JSON line: `ts`, `model`, `key` (when named), `status: "refused"`,
    /// `reason`, `http_status`.
    pub(crate) fn to_json_line(self) -> String {
        #[derive(serde::Serialize)]
        struct Refused {
            reason: &'static str,
            http_status: u16,
        }
        let refused = Refused {
            reason: self.reason,
            http_status: self.status,
        };
        short_record(self.model, self.key, "refused", refused)
    }
}

/// The short audit record of a request the loop did not run, as one JSON line: `ts`, `model`,
/// `key` (when named), `status`, then the fields of its kind (`fields`).
pub(crate) fn short_record(
    model: Option<&str>,
    key: Option<&str>,
    status: &'static str,
    fields: impl serde::Serialize,
) -> String {
    #[derive(serde::Serialize)]
    struct Line<'a, F> {
        ts: String,
        model: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        key: Option<&'a str>,
        status: &'static str,
        #[serde(flatten)]
        fields: F,
    }
    serde_json::to_string(&Line {
        ts: enforce_core::audit::rfc3339_millis(std::time::SystemTime::now()),
        model,
        key,
        status,
        fields,
    })
    .unwrap_or_default()
}

/// Called by the writer thread once per line that could not be written or synced.
pub type FailureHook = Box<dyn Fn() + Send + 'static>;

/// One queued line and, when the caller waits for durability, whom to tell once it is on disk.
struct Entry {
    line: String,
    written: Option<oneshot::Sender<bool>>,
}

/// Appends lines to a file from a background thread. [`AuditLog::close`] flushes and syncs.
pub struct AuditLog {
    sender: Mutex<Option<Sender<Entry>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
    policy: FsyncPolicy,
    /// Where every line goes too: OpenTelemetry log records.
    logs: Option<AuditLogs>,
}

impl std::fmt::Debug for AuditLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuditLog")
            .field("policy", &self.policy)
            .finish_non_exhaustive()
    }
}

impl AuditLog {
    /// Opens (creating if needed) `path` for appending and starts the writer thread.
    pub fn open(path: &Path, policy: FsyncPolicy) -> io::Result<Self> {
        Self::open_observed(path, policy, Box::new(|| {}))
    }

    /// Like [`open`](Self::open); `on_failure` runs on the writer thread for every line that
    /// could not be written, flushed or synced (disk full, file gone read-only), e.g. to raise
    /// a metric. The error itself is logged.
    pub fn open_observed(
        path: &Path,
        policy: FsyncPolicy,
        on_failure: FailureHook,
    ) -> io::Result<Self> {
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        let (sender, receiver) = mpsc::channel::<Entry>();
        let writer = std::thread::Builder::new()
            .name("enforce-audit".into())
            .spawn(move || write_lines(file, policy, receiver, on_failure))?;
        Ok(AuditLog {
            sender: Mutex::new(Some(sender)),
            writer: Mutex::new(Some(writer)),
            policy,
            logs: None,
        })
    }

    /// An audit without a file: every line goes to `logs` only.
    pub(crate) fn logs_only(logs: AuditLogs) -> Self {
        AuditLog {
            sender: Mutex::new(None),
            writer: Mutex::new(None),
            policy: FsyncPolicy::Never,
            logs: Some(logs),
        }
    }

    /// Sends every line to `logs` too (when given), as it is queued for the file.
    pub(crate) fn with_logs(mut self, logs: Option<AuditLogs>) -> Self {
        self.logs = logs;
        self
    }

    /// The fsync policy this log was opened with.
    pub fn policy(&self) -> FsyncPolicy {
        self.policy
    }

    /// Queues one line (a newline is added). Lines after [`close`](Self::close) are dropped.
    pub fn append(&self, line: String) {
        self.send(Entry {
            line,
            written: None,
        });
    }

    /// Queues one line and resolves once the writer has handled it: `true` when the line was
    /// written (and, with [`FsyncPolicy::Always`], synced to disk), `false` when writing failed
    /// or the log is closed. The proxy awaits this under `always` before it answers, so every
    /// answer a client received is in the log even if the process is killed right after.
    pub async fn append_durable(&self, line: String) -> bool {
        let (tx, rx) = oneshot::channel();
        self.send(Entry {
            line,
            written: Some(tx),
        });
        rx.await.unwrap_or(false)
    }

    fn send(&self, entry: Entry) {
        if let Some(logs) = &self.logs {
            logs.emit(&entry.line);
        }
        let sender = self.sender.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(sender) = sender.as_ref() {
            // The writer only stops after close(): a send error means it already did, and the
            // dropped `written` sender tells a waiting caller so.
            let _ = sender.send(entry);
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

fn write_lines(
    file: File,
    policy: FsyncPolicy,
    receiver: mpsc::Receiver<Entry>,
    on_failure: FailureHook,
) {
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
            Ok(Entry { line, written }) => {
                // One write call per line: a line is never split across writes of the buffer,
                // so a crash leaves at most the last line torn.
                let mut ok = match writeln!(out, "{line}") {
                    Ok(()) => true,
                    Err(e) => {
                        tracing::error!(error = %e, "audit log write failed");
                        // A failed write may leave a partial line in the buffer; drop it so the
                        // next line starts clean.
                        out = BufWriter::new(out.into_parts().0);
                        false
                    }
                };
                if ok {
                    dirty = true;
                    if policy == FsyncPolicy::Always || written.is_some() {
                        ok = sync(&mut out);
                        dirty = false;
                        last_sync = Instant::now();
                    }
                }
                if !ok {
                    on_failure();
                }
                if let Some(written) = written {
                    let _ = written.send(ok);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        if dirty {
            match policy {
                FsyncPolicy::Interval(every) if last_sync.elapsed() >= every => {
                    if !sync(&mut out) {
                        on_failure();
                    }
                    dirty = false;
                    last_sync = Instant::now();
                }
                FsyncPolicy::Never => {
                    if let Err(e) = out.flush() {
                        tracing::error!(error = %e, "audit log flush failed");
                        out = BufWriter::new(out.into_parts().0);
                        on_failure();
                    }
                    dirty = false;
                }
                _ => {}
            }
        }
    }
    if !sync(&mut out) {
        on_failure();
    }
}

fn sync(out: &mut BufWriter<File>) -> bool {
    match out.flush().and_then(|()| out.get_ref().sync_data()) {
        Ok(()) => true,
        Err(e) => {
            tracing::error!(error = %e, "audit log sync failed");
            false
        }
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
