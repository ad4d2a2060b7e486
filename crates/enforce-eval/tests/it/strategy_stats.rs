//! `--stats` and the arm `auto`: the statistics an eval writes, added up over evals, and an
//! `auto` arm choosing by statistics another eval learned.

use crate::eval::{dataset, eval, profiles, run, valid, LearnsFromFeedback};
use enforce_core::policy::Reask;
use enforce_core::strategy::{StrategyStats, Tally};
use enforce_eval::strategy_stats::{add_output, ADDED};
use enforce_eval::{run_split, Eval, Shard, Side, Split, LEARNED, LEARN_DIR};
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;

const MODEL: &str = "scripted";
const PROFILE: &str = "city_resample";

/// An eval of `arms` under the profile whose ladder resamples, by the model `scripted`, three
/// cases, two repeats.
fn learning(data: PathBuf, arms: &str, seed: u64, output: &Path, stats: &Path) -> Eval {
    let mut eval = eval(data, arms, Some(output.to_path_buf()));
    eval.profile = PROFILE.into();
    eval.model = Some(MODEL.into());
    eval.seed = seed;
    eval.stats = Some(stats.to_path_buf());
    eval
}

fn read_stats(path: &Path) -> StrategyStats {
    StrategyStats::from_json(&std::fs::read_to_string(path).expect("the statistics file"))
        .expect("a statistics file")
}

/// The tallies of `strategy`, summed over the codes.
fn tally_of(stats: &StrategyStats, strategy: Reask) -> Tally {
    let mut sum = Tally::default();
    for (key, tally) in stats.iter().filter(|(key, _)| key.strategy == strategy) {
        assert_eq!((key.model.as_str(), key.profile.as_str()), (MODEL, PROFILE));
        sum.add(tally);
    }
    sum
}

/// The re-asks of `strategy` in the records of `dir`'s `attempts.jsonl` (the arm
/// `constrained+feedback`'s aside), counted from the records themselves.
fn reasks_recorded(dir: &Path, strategy: &str) -> u64 {
    let text = std::fs::read_to_string(dir.join("attempts.jsonl")).expect("attempts.jsonl");
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .filter(|record| record["eval"]["arm"] != "constrained+feedback")
        .flat_map(|record| record["attempts"].as_array().cloned().unwrap_or_default())
        .filter(|attempt| attempt["reask"] == strategy)
        .count() as u64
}

#[test]
fn stats_count_the_trials_reasks_and_add_up_over_evals_but_not_over_a_rerun() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 3);
    let stats = dir.path().join("stats.json");
    let first = dir.path().join("first");
    // The arm that constrains every attempt is left out of the statistics.
    let arms = "resample,feedback,constrained+feedback";
    let (summary, events) = run(
        learning(data.clone(), arms, 7, &first, &stats),
        Arc::default(),
    );
    let summary = summary.expect("the eval ran");
    let written = read_stats(&stats);
    let feedback = tally_of(&written, Reask::Feedback);
    // Every feedback trial is valid after its one re-ask; no resample fixes anything.
    assert_eq!(valid(&summary, "feedback").0, feedback.valid);
    assert_eq!(feedback.attempts, reasks_recorded(&first, "feedback"));
    assert_eq!(feedback.fixed, feedback.attempts);
    let resample = tally_of(&written, Reask::Resample);
    assert_eq!(resample.attempts, reasks_recorded(&first, "resample"));
    assert!(resample.attempts > 0);
    assert_eq!((resample.fixed, resample.valid), (0, 0));
    assert!(
        events.iter().any(|e| e.contains("StatsAdded")),
        "{events:?}"
    );

    // A rerun into the same directory resumes: nothing is added twice.
    let (again, _) = run(
        learning(data.clone(), arms, 7, &first, &stats),
        Arc::default(),
    );
    again.expect("resumed");
    assert_eq!(read_stats(&stats), written);
    assert!(first.join(ADDED).is_file());

    // Another eval (other seeds, its own directory) adds its re-asks.
    let second = dir.path().join("second");
    let (other, _) = run(learning(data, arms, 1007, &second, &stats), Arc::default());
    other.expect("the second eval ran");
    let both = tally_of(&read_stats(&stats), Reask::Feedback);
    assert_eq!(
        both.attempts,
        feedback.attempts + reasks_recorded(&second, "feedback")
    );
    assert_eq!(both.valid, both.attempts);
}

#[test]
fn the_auto_arm_takes_the_strategy_that_paid_on_other_seeds() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 3);
    let stats = dir.path().join("stats.json");
    let (learned, _) = run(
        learning(
            data.clone(),
            "resample,feedback",
            7,
            &dir.path().join("train"),
            &stats,
        ),
        Arc::default(),
    );
    learned.expect("the learning eval ran");

    let out = dir.path().join("measured");
    let mut measured = eval(data, "resample,auto", Some(out.clone()));
    measured.profile = PROFILE.into();
    measured.model = Some(MODEL.into());
    measured.seed = 1000;
    measured.stats_from = Some(Arc::new(read_stats(&stats)));
    let (summary, events) = run(measured, Arc::default());
    let summary = summary.expect("the eval ran");
    assert!(
        events.iter().all(|e| !e.contains("AutoWithoutData")),
        "{events:?}"
    );
    // The profile's ladder resamples, which never pays here; `auto` re-asks with feedback.
    let (auto, trials) = valid(&summary, "auto");
    assert_eq!(auto, trials);
    assert!(valid(&summary, "resample").0 < auto);
    let text = std::fs::read_to_string(out.join("attempts.jsonl")).expect("attempts.jsonl");
    let mut choices = 0;
    for record in text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).expect("record"))
    {
        let reasks = record["attempts"].as_array().cloned().unwrap_or_default();
        for attempt in reasks.iter().filter(|a| !a["reask"].is_null()) {
            if record["eval"]["arm"] == "auto" {
                assert_eq!(attempt["reask"], "feedback", "{attempt}");
                // Over fixed statistics the chooser learns nothing, so it does not draw.
                assert_eq!(attempt["reask_choice"]["by"], "mean", "{attempt}");
                choices += 1;
            } else {
                assert!(attempt["reask_choice"].is_null(), "{attempt}");
            }
        }
    }
    assert_eq!(choices, trials);
}

#[test]
fn auto_without_statistics_and_an_unreadable_stats_file_are_input_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 1);
    let model = Arc::new(LearnsFromFeedback::default());
    let (result, _) = run(eval(data.clone(), "none,auto", None), Arc::clone(&model));
    let error = result.expect_err("auto needs statistics");
    assert!(error.is_input(), "{error}");
    assert!(error.to_string().contains("--stats-from"), "{error}");

    let stats = dir.path().join("stats.json");
    std::fs::write(&stats, "{\"version\": 99, \"rows\": []}").expect("written");
    let mut bad = eval(data, "none", None);
    bad.stats = Some(stats.clone());
    let (result, _) = run(bad, Arc::clone(&model));
    let error = result.expect_err("not a statistics file of this version");
    assert!(error.is_input(), "{error}");
    assert!(error.to_string().contains("stats.json"), "{error}");
    assert_eq!(model.calls.load(Ordering::SeqCst), 0, "no trial ran");
    assert_eq!(
        std::fs::read_to_string(&stats).expect("kept"),
        "{\"version\": 99, \"rows\": []}"
    );
}

#[test]
fn a_merge_adds_no_trial_its_parts_added_and_adds_those_they_did_not() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 4);
    let stats = dir.path().join("stats.json");
    let parts: Vec<PathBuf> = (0..2)
        .map(|i| dir.path().join(format!("part-{i}")))
        .collect();
    for (index, part) in parts.iter().enumerate() {
        let mut shard = learning(data.clone(), "resample,feedback", 7, part, &stats);
        shard.shard = Shard {
            index: index as u32,
            count: 2,
        };
        // Only the first part adds its trials to the file.
        if index == 1 {
            shard.stats = None;
        }
        let (summary, _) = run(shard, Arc::default());
        summary.expect("the part ran");
    }
    let after_part = read_stats(&stats);
    let merged = dir.path().join("merged");
    enforce_eval::merge(&parts, &merged).expect("the parts merge");
    let added = add_output(&merged, &stats).expect("added");
    let trials = 4 * 2 * 2;
    assert_eq!(added.added + added.already, trials);
    assert_eq!(added.already, trials / 2, "the first part's trials");
    let total = tally_of(&read_stats(&stats), Reask::Feedback);
    assert_eq!(
        total.attempts,
        reasks_recorded(&merged, "feedback"),
        "every feedback re-ask of the whole eval, once"
    );
    assert!(total.attempts > tally_of(&after_part, Reask::Feedback).attempts);
    // Merging again adds nothing more.
    let again = add_output(&merged, &stats).expect("added");
    assert_eq!((again.added, again.already), (0, trials));
}

/// The (arm, case) pairs recorded in `dir`'s `attempts.jsonl`.
fn recorded(dir: &Path) -> BTreeSet<(String, String)> {
    let text = std::fs::read_to_string(dir.join("attempts.jsonl")).expect("attempts.jsonl");
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("a record"))
        .map(|r| {
            let field = |k: &str| r["eval"][k].as_str().expect("a string").to_string();
            (field("arm"), field("case"))
        })
        .collect()
}

#[test]
fn a_split_measures_auto_only_on_cases_the_other_arms_did_not_learn_on() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dataset(dir.path(), 6);
    let out = dir.path().join("split");
    let mut whole = eval(data, "resample,feedback,auto", Some(out.clone()));
    whole.profile = PROFILE.into();
    whole.model = Some(MODEL.into());
    let split: Split = "2/3".parse().expect("a split");
    let observer: enforce_eval::Observer = Arc::new(|_| {});
    let summary = run_split(
        whole,
        split,
        &profiles(),
        Arc::new(LearnsFromFeedback::default()),
        &|_, _, _| None,
        observer,
    )
    .expect("both sides ran");
    let pairs = |arms: &[&str], cases: &[&str]| -> BTreeSet<(String, String)> {
        arms.iter()
            .flat_map(|a| cases.iter().map(move |c| (a.to_string(), c.to_string())))
            .collect()
    };
    // Cases 0, 1, 3 and 4 learn (position mod 3 < 2); 2 and 5 are measured, by every arm.
    assert_eq!(
        recorded(&out.join(LEARN_DIR)),
        pairs(&["resample", "feedback"], &["c0", "c1", "c3", "c4"])
    );
    assert_eq!(
        recorded(&out),
        pairs(&["resample", "feedback", "auto"], &["c2", "c5"])
    );
    let learned = read_stats(&out.join(LEARN_DIR).join(LEARNED));
    assert_eq!(
        tally_of(&learned, Reask::Feedback).attempts,
        reasks_recorded(&out.join(LEARN_DIR), "feedback")
    );
    // Learned on the other cases, `auto` re-asks with feedback where the profile resamples.
    assert_eq!(valid(&summary, "auto"), (4, 4));
    assert_eq!(valid(&summary, "resample"), (0, 4));
    assert_eq!(summary.setup.split.map(|s| s.side), Some(Side::Measure));

    let alone = run_split(
        eval(dataset(dir.path(), 2), "auto", Some(dir.path().join("x"))),
        split,
        &profiles(),
        Arc::new(LearnsFromFeedback::default()),
        &|_, _, _| None,
        Arc::new(|_| {}),
    );
    let error = alone.expect_err("auto alone learns from nothing");
    assert!(
        error.is_input() && error.to_string().contains("at least one other arm"),
        "{error}"
    );
}
