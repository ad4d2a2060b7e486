//! An eval of a JSON contract on a model that answers prose first and JSON once it is given
//! feedback: the arm without re-asks never ends valid, the feedback arm always does.

use enforce_config::config::Config;
use enforce_config::{BuildEnv, ProfileSet, Registry};
use enforce_core::{Ask, FollowUp, Reply, ReplyStream, Runner};
use enforce_eval::{Arm, Eval, EvalError, Event, Observer, Shard, Summary};
use serde_json::Map;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Prose to a first ask, the JSON the contract wants to a re-ask with feedback.
#[derive(Default)]
pub(crate) struct LearnsFromFeedback {
    pub(crate) calls: AtomicUsize,
}

impl Runner for LearnsFromFeedback {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let text = match ask.follow_up {
            Some(FollowUp { .. }) => r#"{"city": "Paris"}"#,
            None => "Paris, of course.",
        };
        let reply = Reply {
            text: text.into(),
            ..Reply::default()
        };
        ReplyStream::whole(std::future::ready(Ok(reply)))
    }
}

const CONFIG: &str = "
validators:
  city:
    type: json
    bare: true
    schema: {type: object, required: [city]}
profiles:
  city_json:
    validators: [city]
    max_retries: 2
  city_resample:
    validators: [city]
    max_retries: 2
    reask: resample
";

pub(crate) fn profiles() -> ProfileSet {
    let config: Config = serde_yaml_ng::from_str(CONFIG).expect("a configuration");
    ProfileSet::from_config(&config, &Registry::builtin(), &BuildEnv::default())
        .expect("the profiles")
}

pub(crate) fn dataset(dir: &Path, cases: usize) -> PathBuf {
    let path = dir.join("cities.jsonl");
    let lines: String = (0..cases)
        .map(|i| format!("{{\"id\": \"c{i}\", \"prompt\": \"City {i} as JSON\"}}\n"))
        .collect();
    std::fs::write(&path, lines).expect("dataset written");
    path
}

pub(crate) fn eval(dataset: PathBuf, arms: &str, output: Option<PathBuf>) -> Eval {
    Eval {
        dataset,
        profile: "city_json".into(),
        arms: Arm::parse_list(arms).expect("arms"),
        repeats: 2,
        seed: 7,
        params: Map::new(),
        concurrency: 2,
        shard: Shard::WHOLE,
        runner_provenance: None,
        output,
        runner_kind: "test".into(),
        model: None,
        config: None,
        stats: None,
        stats_from: None,
        split: None,
    }
}

/// Runs `eval`; returns the summary and the events other than finished trials, in words.
pub(crate) fn run(
    eval: Eval,
    model: Arc<LearnsFromFeedback>,
) -> (Result<Summary, EvalError>, Vec<String>) {
    let events = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&events);
    let observer: Observer = Arc::new(move |event| {
        let said = match event {
            Event::Resuming { done, pending, .. } => format!("resuming {done} {pending}"),
            Event::Started { pending } => format!("started {pending}"),
            Event::Trial(_) => return,
            other => format!("{other:?}"),
        };
        seen.lock().expect("events").push(said);
    });
    let result = eval.run(&profiles(), model, &|_, _, _| None, observer);
    let events = events.lock().expect("events").clone();
    (result, events)
}

pub(crate) fn valid(summary: &Summary, arm: &str) -> (u64, u64) {
    let arm = summary
        .arms
        .iter()
        .find(|a| a.arm == arm)
        .expect("the arm is summarised");
    (arm.valid.rate.k, arm.valid.rate.n)
}

#[test]
fn feedback_makes_every_answer_valid_where_one_attempt_makes_none() {
    let dir = tempfile::tempdir().expect("temp dir");
    let model = Arc::new(LearnsFromFeedback::default());
    let (summary, events) = run(
        eval(dataset(dir.path(), 3), "none,feedback", None),
        Arc::clone(&model),
    );
    let summary = summary.expect("the eval ran");
    assert_eq!(valid(&summary, "none"), (0, 6));
    assert_eq!(valid(&summary, "feedback"), (6, 6));
    // One ask per trial without re-asks, two per trial with feedback.
    assert_eq!(model.calls.load(Ordering::SeqCst), 6 + 12);
    assert_eq!(events, ["started 12"]);
    assert_eq!(
        std::fs::read_dir(dir.path()).expect("listed").count(),
        1,
        "without an output directory only the dataset is there"
    );
}

#[test]
fn an_output_directory_is_written_and_a_rerun_resumes_without_asking_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 2);
    let out = dir.path().join("results");
    let model = Arc::new(LearnsFromFeedback::default());
    let (first, _) = run(
        eval(data.clone(), "none,feedback", Some(out.clone())),
        Arc::clone(&model),
    );
    let first = first.expect("the eval ran");
    for file in [
        "attempts.jsonl",
        "answers.jsonl",
        "summary.json",
        "junit.xml",
        "report.html",
        "eval.json",
    ] {
        assert!(out.join(file).is_file(), "{file} written");
    }
    let written: Summary = serde_json::from_str(
        &std::fs::read_to_string(out.join("summary.json")).expect("summary.json"),
    )
    .expect("summary.json reads back as a Summary");
    assert_eq!(written, first);
    let calls = model.calls.load(Ordering::SeqCst);
    let (again, events) = run(eval(data, "none,feedback", Some(out)), Arc::clone(&model));
    assert_eq!(
        model.calls.load(Ordering::SeqCst),
        calls,
        "nothing asked again"
    );
    assert!(events.contains(&"resuming 8 0".to_string()), "{events:?}");
    assert_eq!(valid(&again.expect("resumed"), "feedback"), (4, 4));
}

#[test]
fn bad_input_is_an_input_error_that_names_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 1);
    let mut unknown = eval(data.clone(), "none", None);
    unknown.profile = "nope".into();
    let (result, _) = run(unknown, Arc::default());
    let error = result.expect_err("no such profile");
    assert!(error.is_input());
    assert!(
        error.to_string().contains("no profile named `nope`"),
        "{error}"
    );
    let (result, _) = run(
        eval(dir.path().join("absent.jsonl"), "none", None),
        Arc::default(),
    );
    let error = result.expect_err("no dataset");
    assert!(
        error.is_input() && error.to_string().contains("absent.jsonl"),
        "{error}"
    );
    let error = Arm::parse_list("none,feedbak").expect_err("a typo");
    assert!(
        error.to_string().contains("unknown word `feedbak`"),
        "{error}"
    );
}
