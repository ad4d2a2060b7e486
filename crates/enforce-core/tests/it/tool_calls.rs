//! Replies that call tools: text validators leave them alone, request validators judge them,
//! follow-ups carry the rejected calls, and the outcome hands the calls on.

use crate::req;
use enforce_core::{
    async_trait, runner::follow_up_messages, runner::ToolCall, runner::ToolFeedback,
    runner::REJECTED_TOOL_CALL, Context, Enforcer, Issue, Message, Policy, Reply, Request, Role,
    ScriptedRunner, Status, Validation, Validator,
};

/// A text rule that fails anything without "ok".
struct SaysOk;

#[async_trait]
impl Validator for SaysOk {
    fn name(&self) -> &str {
        "says_ok"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("ok") {
            vec![]
        } else {
            vec![Issue::error("says_ok", "NOT_OK", "Say ok.")]
        })
    }
}

/// A per-request check: every call must be to `lookup`.
struct OnlyLookup;

#[async_trait]
impl Validator for OnlyLookup {
    fn name(&self) -> &str {
        "tools"
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Ok(vec![])
    }
    async fn validate_reply(&self, reply: &Reply, _: &Context) -> Validation {
        Ok(reply
            .tool_calls
            .iter()
            .filter(|c| c.name != "lookup")
            .map(|c| Issue::error("", "UNKNOWN_TOOL", format!("no tool `{}`", c.name)))
            .collect())
    }
}

fn calling(name: &str) -> Reply {
    Reply {
        tool_calls: vec![ToolCall::new("call_1", name, r#"{"q":"x"}"#)],
        ..Reply::default()
    }
}

#[tokio::test]
async fn a_reply_of_only_tool_calls_passes_text_validators_and_keeps_its_calls() {
    let runner = ScriptedRunner::new([Ok(calling("lookup"))]);
    let outcome = Enforcer::new(vec![Box::new(SaysOk)])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.tool_calls, calling("lookup").tool_calls);
    assert_eq!(outcome.response.as_deref(), Some(""));
    let line = outcome.to_json_line();
    assert!(
        line.contains(r#""tool_calls":[{"id":"call_1","name":"lookup""#),
        "{line}"
    );
}

#[tokio::test]
async fn text_beside_tool_calls_is_still_checked() {
    let mut reply = calling("lookup");
    reply.text = "nope".into();
    let runner = ScriptedRunner::new([Ok(reply), Ok(Reply::text("ok"))]);
    let outcome = Enforcer::new(vec![Box::new(SaysOk)])
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.attempts.len(), 2);
    assert_eq!(outcome.attempts[0].issues[0].code, "NOT_OK");
}

#[tokio::test]
async fn request_validators_run_first_and_are_re_asked_with_the_rejected_call() {
    let runner = ScriptedRunner::new([Ok(calling("delete_all")), Ok(calling("lookup"))]);
    let enforcer = Enforcer::new(vec![Box::new(SaysOk)]);
    let checks: Vec<Box<dyn Validator>> = vec![Box::new(OnlyLookup)];
    let outcome = enforcer
        .run_with(&runner, &req(), &Context::new(), &(), &checks)
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let first = &outcome.attempts[0].issues;
    assert_eq!(first.len(), 1);
    // The loop stamps the request validator's name on its issue.
    assert_eq!(
        (first[0].validator.as_str(), first[0].code.as_str()),
        ("tools", "UNKNOWN_TOOL")
    );
    let calls = runner.calls();
    let feedback = calls[1].feedback().unwrap_or_default();
    assert!(feedback.contains("UNKNOWN_TOOL"), "{feedback}");
    // The enforcer itself keeps no trace of the request's validators.
    let again = ScriptedRunner::new([Ok(calling("delete_all"))]);
    let plain = enforcer.run(&again, &req(), &Context::new()).await;
    assert_eq!(plain.status, Status::Passed);
}

#[tokio::test]
async fn the_fallback_replaces_tool_calls_too() {
    let runner = ScriptedRunner::new([Ok(calling("delete_all")), Ok(calling("delete_all"))]);
    let policy = Policy::builder().max_retries(1).fallback("Sorry.").build();
    let checks: Vec<Box<dyn Validator>> = vec![Box::new(OnlyLookup)];
    let outcome = Enforcer::new(vec![])
        .with_policy(policy)
        .run_with(&runner, &req(), &Context::new(), &(), &checks)
        .await;
    assert!(outcome.fallback_used);
    assert_eq!(outcome.response.as_deref(), Some("Sorry."));
    assert!(outcome.tool_calls.is_empty());
}

#[test]
fn tool_message_follow_up_answers_every_call_then_gives_the_feedback() {
    let request = Request {
        messages: vec![Message::user("find x")],
        ..Request::default()
    };
    let mut previous = calling("delete_all");
    previous
        .tool_calls
        .push(ToolCall::new("call_2", "lookup", "{}"));
    let messages = follow_up_messages(
        &request,
        &previous,
        "Fix: UNKNOWN_TOOL",
        ToolFeedback::ToolMessages,
    );
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(
        roles,
        [
            Role::User,
            Role::Assistant,
            Role::Tool,
            Role::Tool,
            Role::User
        ]
    );
    assert_eq!(messages[1].tool_calls, previous.tool_calls);
    assert_eq!(messages[2].tool_call_id.as_deref(), Some("call_1"));
    assert_eq!(messages[3].tool_call_id.as_deref(), Some("call_2"));
    assert_eq!(messages[2].content, REJECTED_TOOL_CALL);
    assert_eq!(messages[4].content, "Fix: UNKNOWN_TOOL");
}

#[test]
fn user_message_follow_up_writes_the_calls_out_as_text() {
    let request = Request::prompt("find x");
    let messages = follow_up_messages(
        &request,
        &calling("delete_all"),
        "Fix it",
        ToolFeedback::UserMessage,
    );
    let roles: Vec<Role> = messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::User, Role::Assistant, Role::User]);
    assert!(messages.iter().all(|m| m.tool_calls.is_empty()));
    assert!(messages[1]
        .content
        .contains(r#"delete_all with arguments {"q":"x"}"#));
}
