//! `enforce run --session ID`: a multi-turn flow from the command line, as the proxy keeps one
//! per chat. The session is a JSON file `<dir>/<ID>.json` (dir: `ENFORCE_SESSION_DIR`, else
//! `.enforce/sessions`) holding the conversation's delivered turns and the runner's session id.
//!
//! A runner with sessions (the Claude CLI) continues its own session (`--resume <id>`) and is
//! sent only the new prompt; a stateless runner (OpenAI-compatible, command) is sent the stored
//! history followed by the new prompt. Only a delivered answer (passed, repaired, a fallback,
//! or printed with `--always-print`) joins the history, so a failed turn is not replayed.

use enforce_core::{Message, Outcome, Request, Role};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Where session files live when `ENFORCE_SESSION_DIR` is not set.
pub const DEFAULT_SESSION_DIR: &str = ".enforce/sessions";

/// One conversation kept between `enforce run` invocations.
#[derive(Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct SessionFile {
    /// The runner's session to resume (a Claude CLI session id), if it reported one.
    #[serde(default)]
    pub runner_session_id: Option<String>,
    /// The delivered turns: user prompts and assistant answers, in order.
    #[serde(default)]
    pub messages: Vec<Message>,
}

/// The file of session `id` in `dir`. The id is one name (letters, digits, `.`, `_`, `-`, not
/// starting with `.`), so it cannot point outside the directory.
pub fn path_of(dir: &Path, id: &str) -> Result<PathBuf, String> {
    let ok = !id.is_empty()
        && id.len() <= 128
        && !id.starts_with('.')
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if !ok {
        return Err(format!(
            "--session `{id}`: use letters, digits, '.', '_' and '-' (not starting with '.')"
        ));
    }
    Ok(dir.join(format!("{id}.json")))
}

/// The session directory: `ENFORCE_SESSION_DIR`, else [`DEFAULT_SESSION_DIR`].
pub fn session_dir() -> PathBuf {
    std::env::var_os("ENFORCE_SESSION_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from(DEFAULT_SESSION_DIR), PathBuf::from)
}

impl SessionFile {
    /// Reads the session at `path`; a missing file is a new, empty session.
    pub fn load(path: &Path) -> Result<Self, String> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes)
                .map_err(|e| format!("session file {}: {e}", path.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SessionFile::default()),
            Err(e) => Err(format!("cannot read session file {}: {e}", path.display())),
        }
    }

    /// Puts the session into `request`: a session runner resumes its session; a stateless one
    /// gets the history before the request's own messages (after its system prompt).
    pub fn continue_in(&self, request: &mut Request, runner_has_sessions: bool) {
        if runner_has_sessions {
            if let Some(id) = &self.runner_session_id {
                request.session_id = Some(id.clone());
                return;
            }
        }
        let at = request
            .messages
            .iter()
            .take_while(|m| m.role == Role::System)
            .count();
        request
            .messages
            .splice(at..at, self.messages.iter().cloned());
    }

    /// Adds the turn of `prompt` to the session when its answer was delivered, and keeps the
    /// runner's latest session id.
    pub fn record(&mut self, prompt: &str, outcome: &Outcome, delivered: bool) {
        if let Some(id) = &outcome.session_id {
            self.runner_session_id = Some(id.clone());
        }
        if let (true, Some(answer)) = (delivered, &outcome.response) {
            self.messages.push(Message::user(prompt.to_string()));
            self.messages.push(Message::assistant(answer.clone()));
        }
    }

    /// Writes the session to `path` (creating its directory), through a temporary file so a
    /// crash never leaves half a session.
    pub fn save(&self, path: &Path) -> Result<(), String> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        }
        let json = serde_json::to_vec_pretty(self).map_err(|e| e.to_string())?;
        let temp = path.with_extension("json.tmp");
        std::fs::write(&temp, json)
            .and_then(|()| std::fs::rename(&temp, path))
            .map_err(|e| format!("cannot write session file {}: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_cannot_leave_the_directory() {
        let dir = Path::new("/s");
        assert_eq!(path_of(dir, "chat-1").unwrap(), Path::new("/s/chat-1.json"));
        for bad in ["", "../x", "a/b", ".hidden", "a b"] {
            assert!(path_of(dir, bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_stateless_runner_gets_the_history_a_session_runner_its_session() {
        let session = SessionFile {
            runner_session_id: Some("claude-1".into()),
            messages: vec![Message::user("first"), Message::assistant("answer")],
        };
        let mut stateless = Request::prompt("second");
        stateless.messages.insert(0, Message::system("sys"));
        session.continue_in(&mut stateless, false);
        let texts: Vec<&str> = stateless
            .messages
            .iter()
            .map(|m| m.content.as_str())
            .collect();
        assert_eq!(texts, ["sys", "first", "answer", "second"]);
        assert_eq!(stateless.session_id, None);
        let mut resumed = Request::prompt("second");
        session.continue_in(&mut resumed, true);
        assert_eq!(resumed.session_id.as_deref(), Some("claude-1"));
        assert_eq!(resumed.messages.len(), 1);
    }
}
