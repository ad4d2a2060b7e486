//! Per-chat state: the runner session to continue and the step history, kept in memory and,
//! when a directory is configured, in `<dir>/<chat>/status.json` written atomically.

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file each chat directory holds.
pub const STATUS_FILE: &str = "status.json";

/// One step taken from a passed answer's marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepRecord {
    /// The step name (e.g. `why`).
    pub step: String,
    /// The turn (1-based) whose answer carried it.
    pub turn: u64,
    /// The enforcement status of that answer (`passed` or `repaired`).
    pub status: String,
    /// Seconds since the Unix epoch.
    pub at: u64,
    /// The marker, when it was hidden from the client (`hide_step_marker`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hidden: Option<HiddenMarker>,
}

/// A step marker removed from what the client received, kept so it can be put back when the
/// client sends the answer back as history.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HiddenMarker {
    /// The marker as the model wrote it (`<!-- STEP: why -->`).
    pub marker: String,
    /// [`answer_digest`] of the answer as the client received it.
    pub answer_digest: String,
}

/// The digest that recognizes an answer the client sends back: of its text with surrounding
/// whitespace trimmed (clients trim).
pub fn answer_digest(text: &str) -> String {
    fnv1a_hex(text.trim())
}

/// What is known about one chat; the content of its `status.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionStatus {
    /// The chat id (from `X-OpenWebUI-Chat-Id`, `metadata.chat_id` or `user`).
    pub chat_id: String,
    /// The public model of the last turn.
    pub model: String,
    /// The runner session the next turn continues (e.g. a Claude CLI session id).
    #[serde(default)]
    pub runner_session_id: Option<String>,
    /// Turns enforced so far.
    pub turns: u64,
    /// Status of the last turn.
    #[serde(default)]
    pub last_status: Option<String>,
    /// Steps of the passed answers, oldest first.
    #[serde(default)]
    pub steps: Vec<StepRecord>,
    /// Seconds since the Unix epoch of the last update.
    pub updated_at: u64,
}

/// What one finished turn adds to a chat.
#[derive(Debug, Clone)]
pub struct TurnRecord<'a> {
    /// The public model.
    pub model: &'a str,
    /// The enforcement status.
    pub status: &'a str,
    /// The runner session the turn ended in, if any.
    pub runner_session_id: Option<&'a str>,
    /// The step of the answer, when it passed and carried one.
    pub step: Option<String>,
    /// The marker, when it was hidden from the client.
    pub hidden: Option<HiddenMarker>,
}

/// The session store. Share it in an `Arc`.
#[derive(Debug)]
pub struct SessionStore {
    dir: Option<PathBuf>,
    cache: Mutex<HashMap<String, SessionStatus>>,
    /// Serializes file writes so an older snapshot never replaces a newer one.
    write: tokio::sync::Mutex<()>,
    temp_counter: AtomicU64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The directory name of a chat: the id itself when it is short and made of safe characters,
/// else `h-` and a digest, so no id can escape the store or clash with `.` and `..`.
pub fn chat_dir_name(chat_id: &str) -> String {
    let safe = !chat_id.is_empty()
        && chat_id.len() <= 128
        && !chat_id.starts_with('.')
        && !chat_id.starts_with("h-")
        && chat_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if safe {
        chat_id.to_string()
    } else {
        format!("h-{}", fnv1a_hex(chat_id))
    }
}

/// FNV-1a 64-bit digest of `text` as 16 hex digits. Names chat directories on disk, so it must
/// never change: a store written by an earlier version has to stay findable.
fn fnv1a_hex(text: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in text.as_bytes() {
        hash ^= u64::from(b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

impl SessionStore {
    /// A store; with `dir`, chats are persisted below it (created when missing).
    pub fn new(dir: Option<PathBuf>) -> io::Result<Self> {
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir)?;
        }
        Ok(SessionStore {
            dir,
            cache: Mutex::new(HashMap::new()),
            write: tokio::sync::Mutex::new(()),
            temp_counter: AtomicU64::new(0),
        })
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<String, SessionStatus>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The chat's state: from memory, else from its `status.json` (after a restart).
    pub async fn get(&self, chat_id: &str) -> Option<SessionStatus> {
        if let Some(found) = self.cache().get(chat_id) {
            return Some(found.clone());
        }
        let path = self
            .dir
            .as_ref()?
            .join(chat_dir_name(chat_id))
            .join(STATUS_FILE);
        let text = tokio::fs::read_to_string(&path).await.ok()?;
        let status: SessionStatus = match serde_json::from_str(&text) {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "unreadable session status");
                return None;
            }
        };
        // A digest-named directory could in theory hold another chat: check.
        if status.chat_id != chat_id {
            return None;
        }
        self.cache()
            .entry(chat_id.to_string())
            .or_insert_with(|| status.clone());
        Some(status)
    }

    /// Records a finished turn and persists the chat. Returns the new state.
    pub async fn record_turn(
        &self,
        chat_id: &str,
        turn: TurnRecord<'_>,
    ) -> io::Result<SessionStatus> {
        // Load a persisted chat first so a restart does not lose its history.
        let _ = self.get(chat_id).await;
        let _writing = self.write.lock().await;
        let snapshot = {
            let mut cache = self.cache();
            let entry = cache
                .entry(chat_id.to_string())
                .or_insert_with(|| SessionStatus {
                    chat_id: chat_id.to_string(),
                    model: turn.model.to_string(),
                    runner_session_id: None,
                    turns: 0,
                    last_status: None,
                    steps: Vec::new(),
                    updated_at: 0,
                });
            entry.model = turn.model.to_string();
            entry.turns = entry.turns.saturating_add(1);
            entry.last_status = Some(turn.status.to_string());
            if let Some(id) = turn.runner_session_id {
                entry.runner_session_id = Some(id.to_string());
            }
            let now = now_secs();
            if let Some(step) = turn.step {
                entry.steps.push(StepRecord {
                    step,
                    turn: entry.turns,
                    status: turn.status.to_string(),
                    at: now,
                    hidden: turn.hidden,
                });
            }
            entry.updated_at = now;
            entry.clone()
        };
        if let Some(dir) = &self.dir {
            let chat_dir = dir.join(chat_dir_name(chat_id));
            let body = serde_json::to_vec_pretty(&snapshot).map_err(io::Error::other)?;
            let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
            tokio::task::spawn_blocking(move || write_atomically(&chat_dir, &body, n))
                .await
                .map_err(io::Error::other)??;
        }
        Ok(snapshot)
    }
}

/// Writes `status.json` in `dir` so that readers see the old or the new file, never a torn
/// one: a temp file in the same directory, fsync, rename, fsync of the directory.
fn write_atomically(dir: &Path, body: &[u8], n: u64) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".{STATUS_FILE}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(body)?;
        file.sync_all()?;
        std::fs::rename(&temp, dir.join(STATUS_FILE))?;
        // The rename is durable only once the directory entry is.
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsafe_ids_get_digest_names() {
        assert_eq!(chat_dir_name("abc-123_x"), "abc-123_x");
        assert!(chat_dir_name("../etc").starts_with("h-"));
        assert!(chat_dir_name("..").starts_with("h-"));
        assert!(chat_dir_name("a/b").starts_with("h-"));
        assert!(chat_dir_name("").starts_with("h-"));
        assert_ne!(chat_dir_name("h-x"), "h-x");
        // Directory names of existing stores: the digest never changes.
        assert_eq!(chat_dir_name("a/b"), "h-e620c3190468cf61");
        assert_eq!(chat_dir_name("chat/1 ü"), "h-f8f0741009d00e8a");
    }

    #[tokio::test]
    async fn turns_persist_and_reload() {
        let dir = std::env::temp_dir().join(format!("enforce-sessions-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = SessionStore::new(Some(dir.clone())).unwrap();
        let turn = |step: Option<&str>, sid: Option<&'static str>| TurnRecord {
            model: "m",
            status: "passed",
            runner_session_id: sid,
            step: step.map(str::to_string),
            hidden: None,
        };
        store
            .record_turn("chat/1", turn(Some("what"), Some("s1")))
            .await
            .unwrap();
        store
            .record_turn("chat/1", turn(Some("why"), None))
            .await
            .unwrap();
        let reopened = SessionStore::new(Some(dir.clone())).unwrap();
        let status = reopened.get("chat/1").await.unwrap();
        assert_eq!(status.turns, 2);
        assert_eq!(status.runner_session_id.as_deref(), Some("s1"));
        let steps: Vec<&str> = status.steps.iter().map(|s| s.step.as_str()).collect();
        assert_eq!(steps, ["what", "why"]);
        let leftovers = std::fs::read_dir(dir.join(chat_dir_name("chat/1")))
            .unwrap()
            .count();
        assert_eq!(leftovers, 1, "only status.json, no temp files");
        assert!(reopened.get("other").await.is_none());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
