//! What is known about one chat ([`SessionStatus`], the content of its `status.json` and of its
//! Redis key), apart from where it is stored, so the session store and the shared state both
//! use it without importing each other.

use serde::{Deserialize, Serialize};

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
    /// The digest of the answer as the client received it (`answer_digest`).
    pub answer_digest: String,
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
    /// The replica that started the runner session, when replicas share state: a Claude CLI
    /// session lives in that replica's files and can be continued only there.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_replica: Option<String>,
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
