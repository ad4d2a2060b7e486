//! Sessions: a conversation continues with its step history, a failed turn is remembered.

use super::{temp_dir, BAD, GOOD};
use crate::common::*;
use enforce_core::{Enforcer, ScriptedRunner};
use enforce_server::{FsyncPolicy, ModelOptions, ServerConfig};
use serde_json::{json, Value};
use std::sync::Arc;

#[tokio::test]
async fn sessions_continue_and_keep_the_step_history() {
    let dir = temp_dir("sessions");
    let runner = Arc::new(Sessions::new(vec![
        "What do you need?\n<!-- STEP: what -->",
        "Because.\n<!-- STEP: why -->",
    ]));
    let config = ServerConfig {
        session_dir: Some(dir.clone()),
        ..ServerConfig::default()
    };
    let server = server_with(
        config,
        runner.clone(),
        marker_enforcer(false),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    for _ in 0..2 {
        let resp = h
            .client
            .post(h.url("/v1/chat/completions"))
            .header("X-OpenWebUI-Chat-Id", "chat-42")
            .json(&user_body(false))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200);
    }
    // The second turn continued the first turn's runner session.
    let calls = runner.calls.lock().unwrap().clone();
    assert_eq!(calls[0].session_id, None);
    assert_eq!(calls[1].session_id.as_deref(), Some("sess-1"));

    let file = dir.join("chat-42").join("status.json");
    let stored: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(stored["runner_session_id"], "sess-2");
    assert_eq!(stored["turns"], 2);
    let steps: Vec<&str> = stored["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["what", "why"]);

    let served = h.get_json("/v1/sessions/chat-42").await;
    assert_eq!(served, stored);
    let missing = h
        .client
        .get(h.url("/v1/sessions/none"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);

    // metadata.chat_id and user identify a chat too; streaming records the step as well.
    let mut body = user_body(true);
    body["metadata"] = json!({"chat_id": "meta-chat"});
    let (_, parsed) = read_stream(h.chat(body).await).await;
    assert!(parsed.openai_result().is_ok());
    let mut body = user_body(false);
    body["user"] = json!("user-7");
    assert_eq!(h.chat(body).await.status(), 200);
    for id in ["meta-chat", "user-7"] {
        let s: Value = h
            .client
            .get(h.url(&format!("/v1/sessions/{id}")))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(s["turns"], 1, "{id}");
        assert_eq!(s["steps"].as_array().unwrap().len(), 1, "{id}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Needs the marker, and remembers the `previous_step` each check saw.
struct SeesPreviousStep {
    seen: Arc<std::sync::Mutex<Vec<Option<String>>>>,
}

#[enforce_core::async_trait]
impl enforce_core::Validator for SeesPreviousStep {
    fn name(&self) -> &str {
        "step_marker"
    }
    async fn validate(
        &self,
        response: &str,
        context: &enforce_core::Context,
    ) -> enforce_core::Validation {
        self.seen
            .lock()
            .unwrap()
            .push(context.get_str("previous_step").map(String::from));
        Ok(if response.contains("<!-- STEP:") {
            vec![]
        } else {
            vec![enforce_core::Issue::error(
                "step_marker",
                "MISSING_STEP_MARKER",
                "no marker",
            )]
        })
    }
}

#[tokio::test]
async fn a_failed_turn_records_the_unknown_step_and_the_next_turn_sees_it() {
    let dir = temp_dir("unknown-step");
    let audit = dir.join("audit.jsonl");
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let runner = Arc::new(ScriptedRunner::texts([BAD, BAD, BAD, GOOD]));
    let config = ServerConfig {
        audit_log: Some(audit.clone()),
        audit_fsync: FsyncPolicy::Always,
        ..ServerConfig::default()
    };
    let enforcer = Enforcer::new(vec![Box::new(SeesPreviousStep { seen: seen.clone() })]);
    let server = server_with(config, runner, enforcer, ModelOptions::default());
    let h = Harness::start(server).await;
    let mut body = user_body(false);
    body["user"] = json!("u1");
    assert_eq!(
        h.chat(body.clone()).await.headers()["x-enforce-status"],
        "unresolved"
    );
    let s = h.get_json("/v1/sessions/u1").await;
    assert_eq!(s["last_status"], "unresolved");
    assert_eq!(s["steps"][0]["step"], "unknown", "{s}");
    assert_eq!(s["steps"][0]["status"], "unresolved", "{s}");
    // The next turn's validators read `previous_step: unknown`, and its own step follows.
    assert_eq!(h.chat(body).await.headers()["x-enforce-status"], "passed");
    assert_eq!(
        seen.lock().unwrap().last().cloned().flatten().as_deref(),
        Some("unknown")
    );
    let s = h.get_json("/v1/sessions/u1").await;
    let steps: Vec<&str> = s["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["step"].as_str().unwrap())
        .collect();
    assert_eq!(steps, ["unknown", "why"]);
    // The audit lines carry the step too.
    let log = std::fs::read_to_string(&audit).unwrap();
    let lines: Vec<Value> = log
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines[0]["step"], "unknown");
    assert_eq!(lines[1]["step"], "why");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A passing answer without a marker (its profile does not require one) records the step
/// `unknown`, not nothing: the flow's history shows the turn where it lost track.
#[tokio::test]
async fn a_passing_answer_without_a_marker_records_the_unknown_step() {
    let runner = Arc::new(ScriptedRunner::texts(["A plain answer, no marker."]));
    let server = server_with(
        ServerConfig::default(),
        runner,
        Enforcer::new(Vec::new()),
        ModelOptions::default(),
    );
    let h = Harness::start(server).await;
    let mut body = user_body(false);
    body["user"] = json!("u-plain");
    assert_eq!(h.chat(body).await.headers()["x-enforce-status"], "passed");
    let s = h.get_json("/v1/sessions/u-plain").await;
    assert_eq!(s["steps"][0]["step"], "unknown", "{s}");
    assert_eq!(s["steps"][0]["status"], "passed", "{s}");
}
