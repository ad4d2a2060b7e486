//! Validators compose: `Vec` and `Option` groups, `with_fail_mode`, `boxed`, and the names the
//! loop stamps on issues.

use enforce_core::{
    async_trait, validator::VALIDATOR_UNAVAILABLE, Check, Context, Enforcer, FailMode, Issue,
    Policy, Severity, Status, StopReason, Unavailable, Validation, Validator, ValidatorExt,
};
use std::sync::{Arc, Mutex};

/// Requires `word` in the text; its issues carry no name (the loop stamps it); the repair
/// appends the word and records the issues it was given.
struct Needs {
    name: &'static str,
    word: &'static str,
    seen: Arc<Mutex<Vec<Vec<Issue>>>>,
}

fn needs(name: &'static str, word: &'static str) -> Needs {
    Needs {
        name,
        word,
        seen: Arc::default(),
    }
}

#[async_trait]
impl Validator for Needs {
    fn name(&self) -> &str {
        self.name
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains(self.word) {
            vec![]
        } else {
            vec![Issue::new(
                Severity::Error,
                format!("MISSING_{}", self.word.to_uppercase()),
                format!("No {}.", self.word),
            )]
        })
    }
    fn repair(&self, response: &str, _: &Context, issues: &[Issue]) -> Option<String> {
        self.seen.lock().unwrap().push(issues.to_vec());
        Some(format!("{response} {}", self.word))
    }
}

/// Never gives a verdict; optionally with a fail mode of its own.
struct Down {
    name: &'static str,
    mode: Option<FailMode>,
}

#[async_trait]
impl Validator for Down {
    fn name(&self) -> &str {
        self.name
    }
    async fn validate(&self, _: &str, _: &Context) -> Validation {
        Err(Unavailable::new("service down"))
    }
    fn fail_mode(&self) -> Option<FailMode> {
        self.mode
    }
}

fn down(name: &'static str) -> Down {
    Down { name, mode: None }
}

fn open_policy() -> Policy {
    let mut policy = Policy::default();
    policy.on_unavailable = FailMode::Open;
    policy
}

#[tokio::test]
async fn the_loop_names_unnamed_issues_after_their_validator() {
    let e = Enforcer::new(vec![needs("greeting", "hello").boxed()]);
    let out = e.check("hi", &Context::new(), Check::Report).await;
    assert_eq!(out.issues[0].validator, "greeting");
    assert_eq!(out.attempts[0].issues[0].validator, "greeting");

    // A name given by the validator is kept.
    struct Named;
    #[async_trait]
    impl Validator for Named {
        fn name(&self) -> &str {
            "outer"
        }
        async fn validate(&self, _: &str, _: &Context) -> Validation {
            Ok(vec![Issue::error("inner", "X", "x")])
        }
    }
    let out = Enforcer::new(vec![Named.boxed()])
        .check("", &Context::new(), Check::Report)
        .await;
    assert_eq!(out.issues[0].validator, "inner");
}

#[tokio::test]
async fn a_vec_counts_as_its_members_listed_one_by_one() {
    let hello = needs("greeting", "hello");
    let bye = needs("farewell", "bye");
    let (hello_seen, bye_seen) = (hello.seen.clone(), bye.seen.clone());
    let group = vec![hello, bye];
    let e = Enforcer::new(vec![group.boxed(), needs("name", "Ann").boxed()]);

    let out = e.check("text", &Context::new(), Check::Report).await;
    let names: Vec<&str> = out.issues.iter().map(|i| i.validator.as_str()).collect();
    assert_eq!(names, ["greeting", "farewell", "name"]);

    let out = e.check("text", &Context::new(), Check::Repair).await;
    assert_eq!(out.status, Status::Repaired);
    assert_eq!(out.response.as_deref(), Some("text hello bye Ann"));
    assert_eq!(out.attempts[0].repairs, ["greeting", "farewell", "name"]);
    // Each member's repair got exactly its own issues.
    let hello_seen = hello_seen.lock().unwrap();
    assert_eq!(hello_seen.len(), 1);
    assert_eq!(hello_seen[0].len(), 1);
    assert_eq!(hello_seen[0][0].code, "MISSING_HELLO");
    assert_eq!(hello_seen[0][0].validator, "greeting");
    assert_eq!(bye_seen.lock().unwrap()[0][0].code, "MISSING_BYE");
}

#[tokio::test]
async fn members_of_a_group_fail_open_or_closed_on_their_own() {
    // Policy open: the unavailable member becomes a warning, the other member still counts.
    let group = vec![down("spell").boxed(), needs("greeting", "hello").boxed()];
    let out = Enforcer::new(vec![group.boxed()])
        .with_policy(open_policy())
        .check("text", &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Unresolved);
    assert_eq!(out.codes(), ["MISSING_HELLO"]);
    assert_eq!(out.warnings[0].code, VALIDATOR_UNAVAILABLE);
    assert_eq!(out.warnings[0].validator, "spell");

    // Policy closed (the default): the member stops the loop under its own name.
    let group = vec![needs("greeting", "hello").boxed(), down("spell").boxed()];
    let out = Enforcer::new(vec![group.boxed()])
        .check("text", &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Unavailable);
    assert_eq!(
        out.unavailable().map(|u| u.validator.as_str()),
        Some("spell")
    );
    assert!(matches!(
        out.stop_reason,
        StopReason::ValidatorUnavailable { .. }
    ));
}

#[tokio::test]
async fn with_fail_mode_overrides_a_validator_and_sets_a_default_for_a_group() {
    // On one validator it wins over the validator's own answer.
    let strict = Down {
        name: "spell",
        mode: Some(FailMode::Closed),
    };
    let out = Enforcer::new(vec![strict.with_fail_mode(FailMode::Open).boxed()])
        .check("text", &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.warnings[0].validator, "spell");

    // On a group it answers for members without an answer of their own.
    let strict = Down {
        name: "strict",
        mode: Some(FailMode::Closed),
    };
    let lenient = vec![down("spell").boxed(), needs("greeting", "hello").boxed()]
        .with_fail_mode(FailMode::Open);
    let e = Enforcer::new(vec![lenient.boxed()]);
    let out = e.check("hello", &Context::new(), Check::Report).await;
    assert_eq!(out.status, Status::Passed);
    assert_eq!(out.warnings[0].validator, "spell");
    let mixed = vec![strict.boxed(), down("spell").boxed()].with_fail_mode(FailMode::Open);
    let out = Enforcer::new(vec![mixed.boxed()])
        .check("hello", &Context::new(), Check::Report)
        .await;
    assert_eq!(out.status, Status::Unavailable);
    assert_eq!(
        out.unavailable().map(|u| u.validator.as_str()),
        Some("strict")
    );
}

#[tokio::test]
async fn an_option_is_its_validator_or_nothing() {
    let none: Option<Needs> = None;
    let e = Enforcer::new(vec![none.boxed()]);
    let out = e.check("text", &Context::new(), Check::Report).await;
    assert_eq!(out.status, Status::Passed);

    let some = Some(needs("greeting", "hello"));
    assert_eq!(some.name(), "greeting");
    let out = Enforcer::new(vec![some.boxed()])
        .check("text", &Context::new(), Check::Repair)
        .await;
    assert_eq!(out.status, Status::Repaired);
    assert_eq!(out.attempts[0].repairs, ["greeting"]);
}

#[tokio::test]
async fn a_group_called_directly_validates_and_repairs_member_by_member() {
    let group = vec![needs("greeting", "hello"), needs("farewell", "bye")];
    assert_eq!(group.name(), "");
    let ctx = Context::new();
    let issues = group.validate("text", &ctx).await.expect("a verdict");
    let names: Vec<&str> = issues.iter().map(|i| i.validator.as_str()).collect();
    assert_eq!(names, ["greeting", "farewell"]);
    // Only the farewell's issue: only its repair runs.
    let repaired = group.repair("text", &ctx, &issues[1..]);
    assert_eq!(repaired.as_deref(), Some("text bye"));
    assert!(group[0].seen.lock().unwrap().is_empty());
    assert_eq!(group.repair("text", &ctx, &[]), None);

    // A member without verdict and without a mode of its own makes the group unavailable.
    let group = vec![needs("greeting", "hello").boxed(), down("spell").boxed()];
    let err = group.validate("text", &ctx).await.expect_err("no verdict");
    assert_eq!(err.reason, "spell: service down");
    // With a mode for the group, the member fails open inside it.
    let group = group.with_fail_mode(FailMode::Open);
    let issues = group.validate("text", &ctx).await.expect("a verdict");
    let codes: Vec<&str> = issues.iter().map(|i| i.code.as_str()).collect();
    assert_eq!(codes, ["MISSING_HELLO", VALIDATOR_UNAVAILABLE]);
}

#[test]
fn debug_shows_validator_names_and_groups() {
    let e = Enforcer::new(vec![
        vec![needs("greeting", "hello"), needs("farewell", "bye")].boxed(),
        needs("name", "Ann").boxed(),
    ]);
    let text = format!("{e:?}");
    assert!(
        text.contains(
            r#"[Validator { name: "greeting", .. }, Validator { name: "farewell", .. }]"#
        ),
        "{text}"
    );
    assert!(text.contains(r#"Validator { name: "name", .. }"#), "{text}");
}
