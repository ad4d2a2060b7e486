//! Per-chat state: the runner session to continue and the step history, kept in memory and,
//! when a directory is configured, in `<dir>/<chat>/status.json` written atomically; with a
//! shared state (Redis), also there, which then is the copy read first.

use crate::session_cache::{Fifo, Lru};
pub use crate::session_status::{HiddenMarker, SessionStatus, StepRecord};
use crate::shared::ReplicaState;
use bytes::Bytes;
use std::borrow::Cow;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

/// The file each chat directory holds.
pub const STATUS_FILE: &str = "status.json";

/// The digest that recognizes an answer the client sends back: of its text with surrounding
/// whitespace trimmed (clients trim).
pub fn answer_digest(text: &str) -> String {
    enforce_core::outcome::fnv1a_hex(text.trim())
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

/// Most stored Responses answers kept in memory, whatever their size; the oldest go first
/// (a directory or the shared state keeps them all).
const KEPT_RESPONSES: usize = 1024;

/// [`ServerConfig::max_cached_sessions`](crate::ServerConfig::max_cached_sessions)'s default.
const DEFAULT_CACHED_SESSIONS: usize = 10_000;

/// [`ServerConfig::max_stored_response_bytes`](crate::ServerConfig::max_stored_response_bytes)'s
/// default.
const DEFAULT_STORED_RESPONSE_BYTES: usize = 64 * 1024 * 1024;

/// The directory under the session directory that holds stored responses.
const RESPONSES_DIR: &str = "responses";

/// A response kept for `GET /v1/responses/{id}` and `previous_response_id`: the object as it
/// was sent, and the conversation up to and including its answer. Written (in a file, in the
/// shared state) as `{"response": {...}, "conversation": [...], "chat_id": ...}`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub(crate) struct StoredResponse {
    /// The `response` object: the bytes of the body sent, shared with it (no copy, no tree).
    #[serde(with = "raw_json")]
    pub response: Bytes,
    /// The conversation it answered (without system messages) and its answer, for the turn
    /// that continues it.
    pub conversation: Vec<enforce_core::Message>,
    /// The chat it belonged to, which a continuation inherits.
    #[serde(default)]
    pub chat_id: Option<String>,
}

/// The session store. Share it in an `Arc`.
#[derive(Debug)]
pub struct SessionStore {
    dir: Option<PathBuf>,
    /// The chats, the least recently used evicted beyond `max_cached_sessions` (a directory
    /// or the shared state still has them).
    cache: Mutex<Lru<SessionStatus>>,
    /// Stored responses, the oldest evicted beyond a count and `max_stored_response_bytes`.
    responses: Mutex<Fifo<StoredResponse>>,
    /// Serializes file writes so an older snapshot never replaces a newer one.
    write: tokio::sync::Mutex<()>,
    temp_counter: AtomicU64,
    shared: Option<Arc<ReplicaState>>,
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
        format!("h-{}", enforce_core::outcome::fnv1a_hex(chat_id))
    }
}

impl SessionStore {
    /// A store; with `dir`, chats are persisted below it (created when missing).
    pub fn new(dir: Option<PathBuf>) -> io::Result<Self> {
        if let Some(dir) = &dir {
            std::fs::create_dir_all(dir)?;
        }
        Ok(SessionStore {
            dir,
            cache: Mutex::new(Lru::new(DEFAULT_CACHED_SESSIONS)),
            responses: Mutex::new(Fifo::new(KEPT_RESPONSES, DEFAULT_STORED_RESPONSE_BYTES)),
            write: tokio::sync::Mutex::new(()),
            temp_counter: AtomicU64::new(0),
            shared: None,
        })
    }

    /// Keeps at most `max_cached_sessions` chats in memory (the least recently used go first)
    /// and at most `max_stored_response_bytes` of stored responses (the oldest go first).
    pub fn with_limits(self, max_cached_sessions: usize, max_stored_response_bytes: usize) -> Self {
        SessionStore {
            cache: Mutex::new(Lru::new(max_cached_sessions)),
            responses: Mutex::new(Fifo::new(KEPT_RESPONSES, max_stored_response_bytes)),
            ..self
        }
    }

    /// Shares the sessions with other replicas through `shared`.
    pub(crate) fn with_shared(mut self, shared: Arc<ReplicaState>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// This replica's copy of the chat's state, from memory only.
    pub(crate) fn cached(&self, chat_id: &str) -> Option<SessionStatus> {
        self.cache().get(chat_id).cloned()
    }

    fn cache(&self) -> MutexGuard<'_, Lru<SessionStatus>> {
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The chat's state: from the shared state when there is one and it answers, else from
    /// memory, else from its `status.json` (after a restart).
    pub async fn get(&self, chat_id: &str) -> Option<SessionStatus> {
        if let Some(shared) = &self.shared {
            // Nothing shared (never stored, expired, or written here while Redis was away) or
            // Redis failing: this replica's copy is the best there is.
            if let Some(Some(status)) = shared.load_session(chat_id).await {
                self.cache().insert(chat_id.to_string(), status.clone());
                return Some(status);
            }
        }
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
        self.cache().get_or_insert_with(chat_id, || status.clone());
        Some(status)
    }

    /// Records a finished turn and persists the chat. Returns the new state.
    pub async fn record_turn(
        &self,
        chat_id: &str,
        turn: TurnRecord<'_>,
    ) -> io::Result<SessionStatus> {
        // Load a persisted or shared chat first so a restart or another replica's turns are
        // not lost.
        let _ = self.get(chat_id).await;
        let _writing = self.write.lock().await;
        let snapshot = {
            let mut cache = self.cache();
            let entry = cache.get_or_insert_with(chat_id, || SessionStatus {
                chat_id: chat_id.to_string(),
                model: turn.model.to_string(),
                runner_session_id: None,
                runner_replica: None,
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
                entry.runner_replica = self.shared.as_ref().map(|s| s.replica().to_string());
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
        let written = match &self.dir {
            Some(dir) => {
                let chat_dir = dir.join(chat_dir_name(chat_id));
                let body = serde_json::to_vec_pretty(&snapshot).map_err(io::Error::other)?;
                let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
                tokio::task::spawn_blocking(move || write_atomically(&chat_dir, &body, n))
                    .await
                    .map_err(io::Error::other)
                    .and_then(|r| r)
            }
            None => Ok(()),
        };
        if let Some(shared) = &self.shared {
            // Under the write lock too, so an older snapshot never replaces a newer one there.
            shared.save_session(&snapshot).await;
        }
        written.map(|()| snapshot)
    }
}

/// The bytes of a JSON value, written and read as the value itself.
mod raw_json {
    use bytes::Bytes;
    use serde::{ser::Error as _, Deserialize, Deserializer, Serialize, Serializer};
    use serde_json::value::RawValue;

    pub(super) fn serialize<S: Serializer>(json: &Bytes, to: S) -> Result<S::Ok, S::Error> {
        // Checked once more, as only a valid value may go into the surrounding JSON.
        let raw: &RawValue = serde_json::from_slice(json).map_err(S::Error::custom)?;
        raw.serialize(to)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(from: D) -> Result<Bytes, D::Error> {
        let raw = Box::<RawValue>::deserialize(from)?;
        Ok(Bytes::from(Box::<str>::from(raw).into_boxed_bytes()))
    }
}

impl StoredResponse {
    /// About the bytes it holds in memory: the response's and the conversation's text.
    fn size(&self) -> usize {
        let message = |m: &enforce_core::Message| {
            m.content.len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.id.len() + c.name.len() + c.arguments.len())
                    .sum::<usize>()
        };
        self.response.len()
            + self.conversation.iter().map(message).sum::<usize>()
            + self.chat_id.as_ref().map_or(0, String::len)
    }

    /// What access checks read of the response: its `id` and `model`, read from the bytes
    /// without building the whole object (`None` for a response that is not an object).
    pub(crate) fn head(&self) -> Option<ResponseHead<'_>> {
        serde_json::from_slice(&self.response).ok()
    }
}

/// The fields of a stored response that are checked before it is handed out.
#[derive(Debug, serde::Deserialize)]
pub(crate) struct ResponseHead<'a> {
    /// Borrowed from the bytes (a response id has nothing to unescape).
    #[serde(borrow, default)]
    pub id: Cow<'a, str>,
    #[serde(default)]
    pub model: Option<String>,
}

impl SessionStore {
    /// Keeps a response: in memory (the newest [`KEPT_RESPONSES`]), under the session directory
    /// (`responses/<id>/response.json`) and in the shared state, when they are configured.
    pub(crate) async fn store_response(&self, id: &str, stored: StoredResponse) -> io::Result<()> {
        // Written out only where it is kept outside this process (none by default).
        let body = match (&self.shared, &self.dir) {
            (None, None) => None,
            _ => Some(serde_json::to_vec(&stored).map_err(io::Error::other)?),
        };
        let size = stored.size();
        self.responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(id.to_string(), stored, size);
        let Some(body) = body else {
            return Ok(());
        };
        if let Some(shared) = &self.shared {
            shared.save_response(id, &body).await;
        }
        let Some(dir) = &self.dir else {
            return Ok(());
        };
        let dir = dir.join(RESPONSES_DIR).join(chat_dir_name(id));
        let n = self.temp_counter.fetch_add(1, Ordering::Relaxed);
        tokio::task::spawn_blocking(move || write_file_atomically(&dir, "response.json", &body, n))
            .await
            .map_err(io::Error::other)?
    }

    /// A stored response: from the shared state, else memory, else the session directory.
    pub(crate) async fn stored_response(&self, id: &str) -> Option<StoredResponse> {
        let read = |body: &[u8]| match serde_json::from_slice::<StoredResponse>(body) {
            Ok(stored) if stored.head().is_some_and(|h| h.id == id) => Some(stored),
            Ok(_) => None,
            Err(e) => {
                tracing::warn!(response_id = id, error = %e, "unreadable stored response");
                None
            }
        };
        if let Some(shared) = &self.shared {
            if let Some(Some(body)) = shared.load_response(id).await {
                if let Some(stored) = read(&body) {
                    return Some(stored);
                }
            }
        }
        let cached = self
            .responses
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(id)
            .cloned();
        if cached.is_some() {
            return cached;
        }
        let path = self
            .dir
            .as_ref()?
            .join(RESPONSES_DIR)
            .join(chat_dir_name(id))
            .join("response.json");
        read(&tokio::fs::read(&path).await.ok()?)
    }
}

/// Writes `status.json` in `dir` so that readers see the old or the new file, never a torn
/// one: a temp file in the same directory, fsync, rename, fsync of the directory.
fn write_atomically(dir: &Path, body: &[u8], n: u64) -> io::Result<()> {
    write_file_atomically(dir, STATUS_FILE, body, n)
}

/// Writes `name` in `dir` atomically (see [`write_atomically`]).
fn write_file_atomically(dir: &Path, name: &str, body: &[u8], n: u64) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let temp = dir.join(format!(".{name}.{}.{n}.tmp", std::process::id()));
    let result = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(body)?;
        file.sync_all()?;
        std::fs::rename(&temp, dir.join(name))?;
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

    /// A stored response of about `text_bytes` bytes under `id`.
    fn stored(id: &str, text_bytes: usize) -> StoredResponse {
        let text = "x".repeat(text_bytes);
        StoredResponse {
            response: Bytes::from(format!(r#"{{"id":"{id}","model":"m","text":"{text}"}}"#)),
            conversation: vec![enforce_core::Message::assistant(text)],
            chat_id: None,
        }
    }

    #[tokio::test]
    async fn stored_responses_in_memory_are_bounded_by_bytes_oldest_out_first() {
        // Each response holds about 2 × 3,000 bytes: two fit in 13,000, three do not.
        let store = SessionStore::new(None).unwrap().with_limits(10, 13_000);
        for id in ["resp_1", "resp_2", "resp_3"] {
            store.store_response(id, stored(id, 3_000)).await.unwrap();
        }
        assert!(store.stored_response("resp_1").await.is_none());
        for id in ["resp_2", "resp_3"] {
            assert!(store.stored_response(id).await.is_some(), "{id}");
        }
        // One larger than the whole budget is not kept, and pushes none out.
        store
            .store_response("resp_big", stored("resp_big", 20_000))
            .await
            .unwrap();
        assert!(store.stored_response("resp_big").await.is_none());
        assert!(store.stored_response("resp_2").await.is_some());
    }

    #[tokio::test]
    async fn the_session_cache_keeps_the_most_recently_used_chats_and_a_directory_the_rest() {
        let turn = || TurnRecord {
            model: "m",
            status: "passed",
            runner_session_id: None,
            step: Some("why".into()),
            hidden: None,
        };
        let dir = tempfile::tempdir().unwrap();
        for directory in [None, Some(dir.path().to_path_buf())] {
            let store = SessionStore::new(directory.clone())
                .unwrap()
                .with_limits(2, usize::MAX);
            for chat in ["a", "b", "c"] {
                store.record_turn(chat, turn()).await.unwrap();
            }
            assert!(store.cached("a").is_none(), "{directory:?}");
            assert!(store.cached("b").is_some() && store.cached("c").is_some());
            // Read back from the directory when there is one; gone from memory without.
            let a = store.get("a").await;
            assert_eq!(
                a.map(|s| s.turns),
                directory.as_ref().map(|_| 1),
                "{directory:?}"
            );
        }
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

    /// A stored response as the `Value`-holding store wrote it (`serde_json::to_vec` of
    /// `{response, conversation, chat_id}`).
    const WRITTEN_BEFORE: &str = r#"{"response":{"created_at":1764000000,"enforcement":{"status":"passed"},"id":"resp_enf1","model":"m","object":"response","output":[{"content":[{"annotations":[],"text":"a \"b\"","type":"output_text"}],"id":"msg_enf1","role":"assistant","status":"completed","type":"message"}],"status":"completed"},"conversation":[{"role":"user","content":"q"},{"role":"assistant","content":"a \"b\""}],"chat_id":"c1"}"#;

    fn response_file(dir: &Path, id: &str) -> PathBuf {
        dir.join(RESPONSES_DIR)
            .join(chat_dir_name(id))
            .join("response.json")
    }

    #[tokio::test]
    async fn a_response_stored_by_the_value_holding_store_loads_as_the_bytes_it_was_sent_as() {
        let dir = std::env::temp_dir().join(format!("enforce-responses-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for id in ["resp_enf1", "resp_other"] {
            let file = response_file(&dir, id);
            std::fs::create_dir_all(file.parent().unwrap()).unwrap();
            std::fs::write(&file, WRITTEN_BEFORE).unwrap();
        }
        let store = SessionStore::new(Some(dir.clone())).unwrap();
        let stored = store.stored_response("resp_enf1").await.unwrap();
        let start = WRITTEN_BEFORE.find(r#"{"created_at""#).unwrap();
        let end = WRITTEN_BEFORE.find(r#","conversation""#).unwrap();
        assert_eq!(stored.response, &WRITTEN_BEFORE.as_bytes()[start..end]);
        assert_eq!(stored.conversation.len(), 2);
        assert_eq!(stored.conversation[1].content, "a \"b\"");
        assert_eq!(stored.chat_id.as_deref(), Some("c1"));
        assert_eq!(stored.head().unwrap().model.as_deref(), Some("m"));
        // The file under another id holds `resp_enf1`: not handed out as `resp_other`.
        assert!(store.stored_response("resp_other").await.is_none());

        // Stored again, it is written as it was before, byte for byte.
        #[derive(serde::Serialize)]
        struct Before {
            response: serde_json::Value,
            conversation: Vec<enforce_core::Message>,
            chat_id: Option<String>,
        }
        store
            .store_response("resp_enf2", stored.clone())
            .await
            .unwrap();
        let before = Before {
            response: serde_json::from_slice(&stored.response).unwrap(),
            conversation: stored.conversation.clone(),
            chat_id: stored.chat_id.clone(),
        };
        let written = std::fs::read(response_file(&dir, "resp_enf2")).unwrap();
        assert_eq!(
            String::from_utf8(written).unwrap(),
            serde_json::to_string(&before).unwrap()
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
