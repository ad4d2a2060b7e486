//! Partial verdicts against full verdicts on every prefix of the answers under
//! `tests/fixtures/real-answers/` (see its README): a partial check never cuts an answer whose
//! full check passes or is repaired, and a cutting error survives the validator's own repair.
//! Every line of every `*.jsonl` file there is checked, so recorded answers added later are
//! held to the same rules.

use crate::{block_on, repo};
use enforce_config::{ConfigSource, Profile, ProfileSet, Registry};
use enforce_core::{
    Check, Context, Enforcer, Issue, Policy, Request, ScriptedRunner, Status, Validator,
};
use serde::Deserialize;
use std::collections::HashMap;
use std::path::PathBuf;

/// One answer of the corpus.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Answer {
    id: String,
    contract: String,
    prompt: String,
    answer: String,
    finish_reason: String,
    source: String,
    /// The configuration the contract is a profile of, relative to the repository (an answer
    /// recorded by `enforce eval`); `contracts.yaml` here when absent.
    #[serde(default)]
    config: Option<String>,
    /// Set by `enforce eval` on the part of an answer early abort cut: not an answer.
    #[serde(default)]
    cut: bool,
}

fn corpus_dir() -> PathBuf {
    repo().join("tests/fixtures/real-answers")
}

/// Every answer of every JSONL file, with the file and line it came from.
fn corpus() -> Vec<(String, Answer)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(corpus_dir())
        .expect("the corpus directory")
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no *.jsonl under {:?}", corpus_dir());
    let mut answers = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("readable");
        for (n, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let at = format!("{}:{}", file.display(), n + 1);
            let answer: Answer = serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("{at}: not an answer line: {e}"));
            assert!(!answer.source.trim().is_empty(), "{at}: `source` is empty");
            assert!(!answer.prompt.trim().is_empty(), "{at}: `prompt` is empty");
            assert!(
                !answer.cut,
                "{at}: a cut answer is only the part received before early abort, not an answer"
            );
            answers.push((at, answer));
        }
    }
    answers
}

/// The contracts: the profiles of `contracts.yaml` and of every other configuration an
/// answer names.
struct Contracts(HashMap<Option<String>, ProfileSet>);

impl Contracts {
    fn load(answers: &[(String, Answer)]) -> Self {
        let mut sets = HashMap::new();
        for config in std::iter::once(None).chain(answers.iter().map(|(_, a)| a.config.clone())) {
            sets.entry(config.clone()).or_insert_with(|| {
                let path = match &config {
                    Some(path) => repo().join(path),
                    None => corpus_dir().join("contracts.yaml"),
                };
                let source =
                    ConfigSource::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                ProfileSet::load(&source, &Registry::builtin(), None)
                    .unwrap_or_else(|e| panic!("{}: the contracts build: {e}", path.display()))
            });
        }
        Contracts(sets)
    }

    fn of(&self, at: &str, answer: &Answer) -> &Profile {
        self.0
            .get(&answer.config)
            .and_then(|set| set.get(&answer.contract))
            .unwrap_or_else(|| {
                panic!(
                    "{at}: no contract `{}` in {:?}",
                    answer.contract, answer.config
                )
            })
    }
}

fn profiles() -> ProfileSet {
    let source = ConfigSource::read(&corpus_dir().join("contracts.yaml")).expect("contracts");
    ProfileSet::load(&source, &Registry::builtin(), None).expect("the contracts build")
}

fn errors(v: &dyn Validator, text: &str) -> Vec<Issue> {
    block_on(v.validate(text, &Context::new()))
        .unwrap_or_default()
        .into_iter()
        .filter(Issue::is_error)
        .collect()
}

/// The errors of `v` on `text` that its own repair leaves.
fn errors_after_repair(v: &dyn Validator, text: &str) -> Vec<Issue> {
    let found = errors(v, text);
    if found.is_empty() {
        return found;
    }
    match v.repair(text, &Context::new(), &found) {
        Some(repaired) => errors(v, &repaired),
        None => found,
    }
}

/// The first prefix (and its cutting errors) at which `v`'s partial check would cut `text`,
/// fed every prefix in order, as the loop feeds a streamed answer.
fn first_cut(v: &dyn Validator, text: &str) -> Option<(usize, Vec<Issue>)> {
    let context = Context::new();
    let mut check = v.partial_check(&context)?;
    for end in (1..=text.len()).filter(|&e| text.is_char_boundary(e)) {
        let cutting: Vec<Issue> = block_on(check.check(&text[..end]))
            .into_iter()
            .filter(|i| i.is_error() && i.repairable && !v.repair_fixes(i))
            .collect();
        if !cutting.is_empty() {
            return Some((end, cutting));
        }
    }
    None
}

#[test]
fn no_partial_check_cuts_an_answer_whose_full_check_passes_or_is_repaired() {
    let mut cuts = 0;
    let answers = corpus();
    let contracts = Contracts::load(&answers);
    for (at, answer) in &answers {
        let profile = contracts.of(at, answer);
        let full = block_on(profile.enforcer().check(
            &answer.answer,
            &Context::new(),
            Check::Repair,
        ));
        for v in profile.validators() {
            let Some((end, cutting)) = first_cut(v.as_ref(), &answer.answer) else {
                continue;
            };
            cuts += 1;
            let prefix = &answer.answer[..end];
            assert!(
                !full.status.is_success(),
                "{at} ({}): {} cut {prefix:?} with {cutting:?}, but the whole answer is {}",
                answer.id,
                v.name(),
                full.status
            );
            assert!(
                !errors_after_repair(v.as_ref(), &answer.answer).is_empty(),
                "{at} ({}): {} cut {prefix:?}, but its repair fixes the whole answer",
                answer.id,
                v.name()
            );
        }
    }
    // The corpus holds answers that must be cut (a trailing comma, a schema violation): the
    // partial checks are exercised, not only silent.
    assert!(cuts > 0, "no answer of {} was cut", answers.len());
}

#[test]
fn the_fenced_json_of_issue_24_is_not_cut_and_is_repaired() {
    let profiles = profiles();
    let answers = corpus();
    let fenced = &answers
        .iter()
        .find(|(_, a)| a.id == "json-fenced")
        .expect("the fenced answer")
        .1;
    let fragment = &answers
        .iter()
        .find(|(_, a)| a.id == "json-cut-fragment-truncated")
        .expect("the fragment")
        .1;
    assert_eq!(fragment.finish_reason, "length");
    let json = profiles.get("json_schema").expect("the JSON contract");
    for v in json.validators() {
        assert!(
            first_cut(v.as_ref(), &fragment.answer).is_none(),
            "the fragment a small model's cut answer left is a possible start of a repairable answer"
        );
    }
    // End to end: the fenced answer streamed in small chunks with re-asks left: not cut,
    // repaired on the spot.
    let runner = ScriptedRunner::texts([fenced.answer.as_str()]).streamed(3);
    let enforcer: Enforcer = json.enforcer().with_policy(
        Policy::builder()
            .partial_check_bytes(1)
            .repair(enforce_core::policy::RepairWhen::First)
            .build(),
    );
    let outcome = block_on(enforcer.run(
        &runner,
        &Request::prompt(fenced.prompt.as_str()),
        &Context::new(),
    ));
    assert_eq!(outcome.status, Status::Repaired, "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 1);
    assert!(outcome.attempts[0].cut.is_none());
    assert_eq!(runner.delivered(), vec![fenced.answer.len()]);
}

#[test]
fn every_answer_streamed_through_the_loop_is_cut_only_when_it_fails() {
    let answers = corpus();
    let contracts = Contracts::load(&answers);
    for (at, answer) in &answers {
        let profile = contracts.of(at, answer);
        let full = block_on(profile.enforcer().check(
            &answer.answer,
            &Context::new(),
            Check::Repair,
        ));
        // One re-ask is left, so the first attempt may be cut; the re-ask gets the same text.
        let runner =
            ScriptedRunner::texts([answer.answer.as_str(), answer.answer.as_str()]).streamed(4);
        let enforcer = profile.enforcer().with_policy(
            Policy::builder()
                .max_retries(1)
                .partial_check_bytes(4)
                .build(),
        );
        let outcome = block_on(enforcer.run(
            &runner,
            &Request::prompt(answer.prompt.as_str()),
            &Context::new(),
        ));
        if full.status.is_success() {
            assert!(
                outcome.attempts[0].cut.is_none(),
                "{at} ({}): a {} answer was cut: {:?}",
                answer.id,
                full.status,
                outcome.attempts[0]
            );
        }
        // Whatever happened, the answer delivered is never a cut fragment.
        if let Some(response) = &outcome.response {
            if outcome.status != Status::Repaired {
                assert_eq!(response, &answer.answer, "{at} ({})", answer.id);
            }
        }
    }
}

/// The answer of `id` in the corpus.
fn recorded(answers: &[(String, Answer)], id: &str) -> String {
    answers
        .iter()
        .find(|(_, a)| a.id == id)
        .map(|(_, a)| a.answer.clone())
        .unwrap_or_else(|| panic!("no answer `{id}` in the corpus"))
}

/// SmolLM2 answered a feedback re-ask with its failed answer (recorded once, as the first
/// attempt's) byte for byte, though the re-ask carried a new seed (it copied its own turn from the conversation); a resample then drew a
/// valid one. Feedback alone stops on the repeat; the ladder climbs to resample and wins.
#[test]
fn the_ladder_climbs_past_a_feedback_reask_the_model_copied_byte_for_byte() {
    let answers = corpus();
    let failed = recorded(&answers, "none/city-oslo/0/1");
    let resampled = recorded(&answers, "ladder/city-oslo/0/3");
    let contracts = Contracts::load(&answers);
    let (at, oslo) = answers
        .iter()
        .find(|(_, a)| a.id == "none/city-oslo/0/1")
        .expect("the Oslo case");
    let profile = contracts.of(at, oslo);
    let run = |reask: enforce_core::policy::Ladder| {
        let runner = ScriptedRunner::texts([failed.as_str(), failed.as_str(), resampled.as_str()]);
        let enforcer = profile
            .enforcer()
            .with_policy(Policy::builder().max_retries(2).reask(reask).build());
        block_on(enforcer.run(
            &runner,
            &Request::prompt(oslo.prompt.as_str()),
            &Context::new(),
        ))
    };
    let feedback = run(enforce_core::policy::Reask::Feedback.into());
    assert_eq!(feedback.stop_reason, enforce_core::StopReason::NoProgress);
    assert_eq!(feedback.attempts.len(), 2);
    let ladder = enforce_core::policy::Ladder::new(vec![
        enforce_core::policy::Reask::Feedback,
        enforce_core::policy::Reask::Resample,
    ])
    .expect("two rungs");
    let outcome = run(ladder);
    assert!(outcome.status.is_success(), "{outcome:?}");
    assert_eq!(outcome.attempts.len(), 3);
    assert!(
        outcome
            .response
            .as_deref()
            .is_some_and(|r| r.contains("Oslo")),
        "{outcome:?}"
    );
}
