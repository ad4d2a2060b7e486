//! Early abort: streamed answers checked while they arrive, cut at a definite error, re-asked.

use crate::req;
use enforce_core::{
    async_trait, outcome::Cut, scripted::ScriptedCall, Context, Enforcer, Event, Issue,
    PartialCheck, Policy, ScriptedRunner, Severity, Status, StopReason, Validation, Validator,
};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Forbids a word. Its partial check reports the word once a character that cannot belong to
/// the word follows it (before that, "Acme" could still become "Acmeology").
pub(crate) struct Forbidden {
    word: &'static str,
    severity: Severity,
    repairable: bool,
    repair_fixes: bool,
    /// Bytes the partial checks looked at, summed over calls.
    scanned: AtomicUsize,
}

impl Forbidden {
    pub(crate) fn new(word: &'static str) -> Self {
        Forbidden {
            word,
            severity: Severity::Error,
            repairable: true,
            repair_fixes: false,
            scanned: AtomicUsize::new(0),
        }
    }

    fn issue(&self) -> Issue {
        Issue::new(
            self.severity,
            "FORBIDDEN",
            format!("Do not write \"{}\".", self.word),
        )
        .with_repairable(self.repairable)
    }

    fn definite(&self, text: &str) -> bool {
        text.match_indices(self.word).any(|(at, w)| {
            text[at + w.len()..]
                .chars()
                .next()
                .is_some_and(|c| !c.is_alphanumeric())
        })
    }
}

#[async_trait]
impl Validator for Forbidden {
    fn name(&self) -> &str {
        "forbidden"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains(self.word) {
            vec![self.issue()]
        } else {
            vec![]
        })
    }
    fn partial_check<'a>(&'a self, _: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(ForbiddenCheck { validator: self }))
    }
    fn repair_fixes(&self, issue: &Issue) -> bool {
        assert_eq!(
            issue.validator, "forbidden",
            "the loop names partial issues"
        );
        self.repair_fixes
    }
}

struct ForbiddenCheck<'a> {
    validator: &'a Forbidden,
}

#[async_trait]
impl PartialCheck for ForbiddenCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        self.validator
            .scanned
            .fetch_add(prefix.len(), Ordering::Relaxed);
        if self.validator.definite(prefix) {
            vec![self.validator.issue()]
        } else {
            vec![]
        }
    }
}

pub(crate) const BAD: &str =
    "Thanks for asking. We recommend Acme, which is a fine choice for a long \
                   list of reasons that the model would go on to write for quite a while.";
pub(crate) const GOOD: &str = "Thanks for asking. We recommend a local supplier.";

fn enforcer(validator: Forbidden, policy: Policy) -> Enforcer {
    Enforcer::new(vec![Box::new(validator)]).with_policy(policy)
}

fn every(bytes: usize) -> Policy {
    Policy::builder().partial_check_bytes(bytes).build()
}

#[tokio::test]
async fn a_definite_error_cuts_the_answer_and_the_reask_quotes_excerpt_and_code() {
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
    let outcome = enforcer(Forbidden::new("Acme"), every(8))
        .run(&runner, &req(), &Context::new())
        .await;

    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(outcome.response.as_deref(), Some(GOOD));
    let delivered = runner.delivered();
    let at = BAD.find("Acme").unwrap();
    assert!(
        delivered[0] > at + 4 && delivered[0] < at + 4 + 8 + 4,
        "cut within one check interval after the term: {delivered:?}"
    );
    assert_eq!(delivered[1], GOOD.len(), "the re-ask streamed to its end");

    let first = &outcome.attempts[0];
    let cut = first.cut.as_ref().expect("the first attempt was cut");
    assert_eq!(
        cut,
        &Cut {
            bytes: delivered[0],
            codes: vec!["FORBIDDEN".into()]
        }
    );
    assert_eq!(first.response_bytes, delivered[0]);
    assert_eq!(first.issues[0].validator, "forbidden");
    assert!(outcome.attempts[1].cut.is_none());

    // Usage counts what was generated before the cut: one token per chunk streamed.
    let generated = delivered[0].div_ceil(4) as u64;
    assert_eq!(first.usage.unwrap().output_tokens, generated);
    assert_eq!(outcome.usage.unwrap().output_tokens, generated);

    let calls = runner.calls();
    let ScriptedCall::FollowUp {
        feedback, previous, ..
    } = &calls[1]
    else {
        panic!("the second call is a follow-up: {calls:?}")
    };
    assert_eq!(
        previous.len(),
        delivered[0],
        "the follow-up is about the part received"
    );
    assert!(feedback.contains("was stopped"), "{feedback}");
    assert!(feedback.contains("[FORBIDDEN]"), "{feedback}");
    assert!(
        feedback.contains("recommend Acme,"),
        "quotes the excerpt: {feedback}"
    );
}

#[tokio::test]
async fn early_abort_false_never_cuts() {
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
    let validator = Forbidden::new("Acme");
    let policy = Policy::builder()
        .early_abort(false)
        .partial_check_bytes(8)
        .build();
    let enforcer = Enforcer::new(vec![Box::new(validator)]).with_policy(policy);
    let outcome = enforcer.run(&runner, &req(), &Context::new()).await;
    assert_eq!(outcome.status, Status::Passed);
    assert_eq!(runner.delivered(), vec![BAD.len(), GOOD.len()]);
    assert!(outcome.attempts.iter().all(|a| a.cut.is_none()));
    let feedback = runner.calls()[1].feedback().unwrap().to_string();
    assert!(!feedback.contains("was stopped"), "{feedback}");
}

#[tokio::test]
async fn warnings_hard_aborts_and_errors_a_repair_fixes_do_not_cut() {
    let warning = Forbidden {
        severity: Severity::Warning,
        ..Forbidden::new("Acme")
    };
    let hard = Forbidden {
        repairable: false,
        ..Forbidden::new("Acme")
    };
    let repaired = Forbidden {
        repair_fixes: true,
        ..Forbidden::new("Acme")
    };
    for validator in [warning, hard, repaired] {
        let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
        let outcome = enforcer(validator, every(8))
            .run(&runner, &req(), &Context::new())
            .await;
        assert_eq!(runner.delivered()[0], BAD.len(), "{outcome:?}");
        assert!(outcome.attempts[0].cut.is_none());
        assert_eq!(outcome.attempts[0].response_bytes, BAD.len());
    }
}

#[tokio::test]
async fn the_last_allowed_attempt_is_not_cut() {
    let runner = ScriptedRunner::texts([BAD]).streamed(4);
    let policy = Policy::builder()
        .max_retries(0)
        .partial_check_bytes(8)
        .build();
    let outcome = enforcer(Forbidden::new("Acme"), policy)
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Unresolved);
    assert_eq!(
        outcome.response.as_deref(),
        Some(BAD),
        "the whole answer, as it came"
    );
    assert!(outcome.attempts[0].cut.is_none());
}

#[tokio::test]
async fn the_same_cut_twice_is_not_no_progress_and_the_whole_last_answer_is_delivered() {
    // Two cuts with the same code must not end the loop on the fragment.
    let runner = ScriptedRunner::texts([BAD, BAD, BAD]).streamed(4);
    let outcome = enforcer(Forbidden::new("Acme"), every(8))
        .run(&runner, &req(), &Context::new())
        .await;
    assert_eq!(outcome.status, Status::Unresolved);
    assert_eq!(outcome.stop_reason, StopReason::RetriesExhausted);
    assert_eq!(outcome.attempts.len(), 3);
    assert!(outcome.attempts[..2].iter().all(|a| a.cut.is_some()));
    assert!(
        outcome.attempts[2].cut.is_none(),
        "the last attempt runs uncut"
    );
    assert_eq!(outcome.response.as_deref(), Some(BAD), "a whole answer");
    assert_eq!(runner.delivered()[2], BAD.len());
    assert_eq!(outcome.issues[0].code, "FORBIDDEN");
}

#[tokio::test]
async fn partial_checks_run_every_n_bytes_not_per_delta() {
    let validator = Arc::new(Forbidden::new("Zzz"));
    let runner = ScriptedRunner::texts([GOOD]).streamed(1);
    let enforcer = Enforcer::new(vec![Box::new(validator.clone())]).with_policy(every(10));
    let outcome = enforcer.run(&runner, &req(), &Context::new()).await;
    assert_eq!(outcome.status, Status::Passed);
    // One check per 10 new bytes (this checker rescans the prefix it gets), none per delta.
    let expected: usize = (1..=GOOD.len() / 10).map(|k| 10 * k).sum();
    assert_eq!(validator.scanned.load(Ordering::Relaxed), expected);
}

#[tokio::test]
async fn observers_see_the_deltas_and_the_cut() {
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(16);
    let seen = Mutex::new(Vec::new());
    let observer = |event: &Event<'_>| match event {
        Event::Streamed { attempt, text } => seen
            .lock()
            .unwrap()
            .push(format!("{attempt}:{}", text.len())),
        Event::Cut {
            attempt,
            bytes,
            issues,
        } => seen
            .lock()
            .unwrap()
            .push(format!("cut {attempt} at {bytes} by {}", issues[0].code)),
        _ => {}
    };
    let outcome = enforcer(Forbidden::new("Acme"), every(16))
        .run_observed(&runner, &req(), &Context::new(), &observer)
        .await;
    assert_eq!(outcome.status, Status::Passed);
    let seen = seen.into_inner().unwrap();
    let cut = seen.iter().position(|s| s.starts_with("cut")).unwrap();
    assert_eq!(
        seen[cut],
        format!("cut 1 at {} by FORBIDDEN", runner.delivered()[0])
    );
    assert!(seen[..cut].iter().all(|s| s.starts_with("1:")));
    assert!(seen[cut + 1..].iter().all(|s| s.starts_with("2:")));
}

#[tokio::test]
async fn the_audit_records_the_cut_and_leaves_it_out_otherwise() {
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
    let outcome = enforcer(Forbidden::new("Acme"), every(8))
        .run(&runner, &req(), &Context::new())
        .await;
    let record: serde_json::Value = serde_json::from_str(&outcome.to_json_line()).unwrap();
    let cut = &record["attempts"][0]["cut"];
    assert_eq!(cut["bytes"], runner.delivered()[0]);
    assert_eq!(cut["codes"], serde_json::json!(["FORBIDDEN"]));
    assert!(record["attempts"][1].get("cut").is_none());
    let back: enforce_core::Outcome = serde_json::from_value(record).unwrap();
    assert_eq!(back.attempts[0].cut, outcome.attempts[0].cut);
}

#[tokio::test]
async fn recorded_events_carry_the_cut_as_audited() {
    // What a caller keeps for an interrupted run (the proxy's deadline) matches the audit.
    let runner = ScriptedRunner::texts([BAD, GOOD]).streamed(4);
    let recorded = Mutex::new(Vec::new());
    let observer = |event: &Event<'_>| {
        if let Event::Recorded { attempt } = event {
            recorded.lock().unwrap().push((*attempt).clone());
        }
    };
    let outcome = enforcer(Forbidden::new("Acme"), every(8))
        .run_observed(&runner, &req(), &Context::new(), &observer)
        .await;
    let recorded = recorded.into_inner().unwrap();
    assert!(recorded[0].cut.is_some());
    assert_eq!(recorded, outcome.attempts);
}

/// Counts the deltas it sees; `deltas` says whether it asks for them.
struct DeltaCounter {
    deltas: bool,
    seen: AtomicUsize,
}

impl enforce_core::Observer for DeltaCounter {
    fn on_event(&self, event: &Event<'_>) {
        if let Event::Streamed { .. } = event {
            self.seen.fetch_add(1, Ordering::Relaxed);
        }
    }
    fn wants_deltas(&self) -> bool {
        self.deltas
    }
}

#[tokio::test]
async fn the_whole_answer_is_asked_for_when_nothing_could_cut_it_and_nobody_watches() {
    /// A check with no partial check: it can only judge whole answers.
    struct WholeOnly;
    #[async_trait]
    impl Validator for WholeOnly {
        fn name(&self) -> &str {
            "whole_only"
        }
        async fn validate(&self, _: &str, _: &Context) -> Validation {
            Ok(Vec::new())
        }
    }
    for (deltas, streamed) in [(false, false), (true, true)] {
        let runner = ScriptedRunner::texts([GOOD]).streamed(4);
        let observer = DeltaCounter {
            deltas,
            seen: AtomicUsize::new(0),
        };
        let outcome = Enforcer::new(vec![Box::new(WholeOnly)])
            .run_observed(&runner, &req(), &Context::new(), &observer)
            .await;
        assert_eq!(outcome.status, Status::Passed);
        assert_eq!(
            observer.seen.load(Ordering::Relaxed) > 0,
            streamed,
            "deltas wanted: {deltas}"
        );
    }
    // A validator that can decide on a prefix makes the loop stream, watched or not.
    let runner = ScriptedRunner::texts([GOOD]).streamed(4);
    let observer = DeltaCounter {
        deltas: false,
        seen: AtomicUsize::new(0),
    };
    Enforcer::new(vec![Box::new(Forbidden::new("Acme"))])
        .run_observed(&runner, &req(), &Context::new(), &observer)
        .await;
    assert!(observer.seen.load(Ordering::Relaxed) > 0);
}
