//! The eval engine on an in-process model whose answers depend only on the conversation and
//! the seed, so every property below is checked without a real model.

use super::arms::Arm;
use super::dataset::Case;
use super::summary;
use super::trials::{self, Plan, Sink, Trial};
use enforce_core::{
    async_trait, Context, Enforcer, Issue, Message, Reply, Request, Runner, Usage, Validation,
    Validator,
};
use enforce_core::{Ask, FollowUp, ReplyStream};
use serde_json::Map;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Errors `NOT_OK` unless the answer holds `OK`.
struct NeedsOk;

#[async_trait]
impl Validator for NeedsOk {
    fn name(&self) -> &str {
        "needs_ok"
    }
    async fn validate(&self, response: &str, _: &Context) -> Validation {
        Ok(if response.contains("OK") {
            Vec::new()
        } else {
            vec![Issue::error("needs_ok", "NOT_OK", "say OK")]
        })
    }
}

fn mix(text: &str, seed: u64) -> u64 {
    let mut h = seed ^ 0x9e37_79b9_7f4a_7c15;
    for b in text.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A seeded model: the first answer is `OK` for about a third of (prompt, seed); after
/// feedback it answers `OK` for about half. Counts its calls.
#[derive(Default)]
struct SeededModel {
    calls: AtomicUsize,
}

fn reply(text: String) -> Reply {
    Reply {
        usage: Some(Usage {
            input_tokens: 10,
            output_tokens: text.len() as u64,
        }),
        text,
        ..Reply::default()
    }
}

fn seed_of(request: &Request) -> u64 {
    request
        .params
        .get("seed")
        .and_then(|v| v.as_u64())
        .unwrap_or(u64::MAX)
}

impl Runner for SeededModel {
    fn ask<'a>(&'a self, ask: Ask<'a>) -> ReplyStream<'a> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let request = ask.request;
        let text = match ask.follow_up {
            None => {
                let prompt = request.last_user_text().unwrap_or_default();
                let h = mix(prompt, seed_of(request));
                if h % 3 == 0 {
                    format!("OK {h}")
                } else {
                    format!("no {h}")
                }
            }
            Some(FollowUp { previous, feedback }) => {
                let h = mix(&format!("{}{feedback}", previous.text), seed_of(request));
                if h % 2 == 0 {
                    format!("OK again {h}")
                } else {
                    format!("still no {h}")
                }
            }
        };
        ReplyStream::whole(std::future::ready(Ok(reply(text))))
    }
}

fn plan(arms: &str, cases: usize, repeats: u32, seed: u64) -> Plan {
    let arms = Arm::parse_list(arms).expect("arms");
    let cases: Vec<Case> = (0..cases)
        .map(|i| Case {
            id: format!("case-{}", i + 1),
            messages: vec![Message::user(format!("question {i}"))],
            context: Context::new(),
            profile: None,
        })
        .collect();
    let enforcers = cases
        .iter()
        .map(|_| {
            arms.iter()
                .map(|arm| {
                    let base = enforce_core::Policy::default();
                    Arc::new(Enforcer::new(vec![Box::new(NeedsOk)]).with_policy(arm.policy(&base)))
                })
                .collect()
        })
        .collect();
    Plan {
        profiles: vec!["test".into(); cases.len()],
        constrained: vec![vec![None; arms.len()]; cases.len()],
        cases,
        arms,
        enforcers,
        repeats,
        seed,
        params: Map::new(),
        runner_kind: "test".into(),
        model: None,
        config: None,
    }
}

/// A runtime like the eval's, with two workers.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn run(plan: Plan, concurrency: usize, model: Arc<SeededModel>) -> Vec<Trial> {
    let plan = Arc::new(plan);
    let jobs = plan.jobs();
    let runtime = runtime();
    runtime
        .block_on(trials::run_all(
            Arc::clone(&plan),
            model,
            jobs,
            concurrency,
            Sink {
                file: None,
                answers: None,
                on_trial: Box::new(|_| {}),
            },
        ))
        .expect("no file, no error")
}

fn valid(trials: &[Trial], arm: &str, case: &str, repeat: u32) -> bool {
    trials
        .iter()
        .find(|t| t.key.arm == arm && t.key.case == case && t.key.repeat == repeat)
        .expect("every trial ran")
        .outcome
        .status
        .is_success()
}

#[test]
fn with_a_seeded_model_no_reasking_arm_passes_fewer_than_none() {
    let arms = ["none", "feedback", "feedback+abort"];
    let trials = run(plan(&arms.join(","), 30, 2, 7), 3, Arc::default());
    assert_eq!(trials.len(), 30 * 2 * 3);
    // The first attempt is the same answer in every arm: same seed, same prompt.
    for t in &trials {
        let first = |arm: &str| {
            trials
                .iter()
                .find(|o| {
                    o.key.arm == arm && o.key.case == t.key.case && o.key.repeat == t.key.repeat
                })
                .map(|o| o.outcome.attempts[0].response_digest.clone())
        };
        assert_eq!(first("none"), first(&t.key.arm), "{:?}", t.key);
    }
    let mut none_valid = 0;
    let mut some_failed_first = false;
    for case in 1..=30 {
        for repeat in 0..2 {
            let case = format!("case-{case}");
            let v = valid(&trials, "none", &case, repeat);
            none_valid += u32::from(v);
            some_failed_first |= !v;
            for arm in &arms[1..] {
                assert!(
                    !v || valid(&trials, arm, &case, repeat),
                    "{arm} lost {case} #{repeat} that `none` passed"
                );
            }
        }
    }
    assert!(
        some_failed_first && none_valid > 0,
        "the model fails some first attempts"
    );
    let arm_names: Vec<String> = arms.iter().map(|a| a.to_string()).collect();
    let summary = summary::build(setup(), &arm_names, &trials);
    let none = &summary.arms[0];
    for arm in &summary.arms[1..] {
        assert!(arm.valid.rate.k >= none.valid.rate.k, "{} vs none", arm.arm);
        // Re-asking recovered some: the feedback answers OK half the time.
        assert!(arm.valid.rate.k > none.valid.rate.k, "{}", arm.arm);
        assert_eq!(arm.first_attempt_passed, none.first_attempt_passed);
    }
    // The pair none/feedback: `none` is never the only valid one.
    let pair = &summary.pairs[0];
    assert_eq!((pair.a.as_str(), pair.b.as_str()), ("none", "feedback"));
    assert_eq!(pair.only_a, 0);
    assert!(pair.only_b > 0);
    assert_eq!(pair.paired, 60);
}

fn setup() -> summary::Setup {
    summary::Setup {
        dataset: "d.jsonl".into(),
        cases: 0,
        repeats: 1,
        seed: 0,
        profile: "test".into(),
        runner: "test".into(),
        model: None,
        params: Map::new(),
        shard: None,
        split: None,
    }
}

#[test]
fn seeds_are_the_same_in_every_arm_and_differ_by_case_and_repeat() {
    let p = plan("none,feedback", 3, 2, 100);
    let mut seen = std::collections::BTreeMap::new();
    for job in p.jobs() {
        let seed = trials_seed(&p, job);
        let key = (job.case, job.repeat);
        assert_eq!(*seen.entry(key).or_insert(seed), seed, "same in every arm");
    }
    let seeds: std::collections::BTreeSet<u64> = seen.values().copied().collect();
    assert_eq!(seeds, (100..106).collect());
}

/// The arm `constrained` sends the profile's constraint with its requests; the other arms
/// of the same eval do not, and the constraint's notes reach the outcome's warnings.
#[test]
fn only_a_constrained_arm_carries_the_constraint() {
    let mut p = plan("feedback,constrained+feedback", 1, 1, 0);
    let schema = serde_json::json!({"type": "object"});
    let constraint = enforce_config::profile::Constrained {
        params: serde_json::json!({"response_format": {"json_schema": {"schema": schema}}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        ..Default::default()
    };
    let per_arm: Vec<_> = p
        .arms
        .iter()
        .map(|arm| arm.constrained.then(|| constraint.clone()))
        .collect();
    p.constrained = vec![per_arm];
    let job = |arm| trials::Job {
        arm,
        case: 0,
        repeat: 0,
    };
    assert!(p.request(job(0)).params.get("response_format").is_none());
    assert_eq!(
        p.request(job(1)).params["response_format"]["json_schema"]["schema"],
        serde_json::json!({"type": "object"})
    );
}

fn trials_seed(p: &Plan, job: trials::Job) -> u64 {
    p.request(job).params["seed"]
        .as_u64()
        .expect("an integer seed")
}

#[test]
fn concurrency_does_not_change_the_numbers() {
    let model = Arc::new(SeededModel::default());
    let one = run(plan("none,feedback", 12, 1, 3), 1, Arc::clone(&model));
    let calls = model.calls.load(Ordering::SeqCst);
    let many = run(plan("none,feedback", 12, 1, 3), 8, Arc::default());
    let names = vec!["none".to_string(), "feedback".to_string()];
    let strip = |s: summary::Summary| {
        let mut v = serde_json::to_value(s).expect("json");
        for arm in v["arms"].as_array_mut().expect("arms") {
            let arm = arm.as_object_mut().expect("object");
            arm.retain(|k, _| !k.starts_with("wall_ms"));
        }
        v
    };
    assert_eq!(
        strip(summary::build(setup(), &names, &one)),
        strip(summary::build(setup(), &names, &many))
    );
    // Every attempt is one call.
    let attempts: usize = one.iter().map(|t| t.outcome.attempts.len()).sum();
    assert_eq!(calls, attempts);
}

#[test]
fn records_read_back_with_their_key_and_estimated_tokens() {
    let p = plan("none", 1, 1, 5);
    let trials = run(plan("none", 1, 1, 5), 1, Arc::default());
    let job = p.jobs()[0];
    let line = p.record_line(job, &trials[0].outcome);
    let back = trials::parse_line(&line).expect("an eval record");
    assert_eq!(back.key, p.key(job));
    assert_eq!(back.outcome, trials[0].outcome);
    assert_eq!(back.estimated_tokens, 0);
    // An attempt whose usage is marked estimated counts.
    let mut value: serde_json::Value = serde_json::from_str(&line).expect("json");
    value["attempts"][0]["usage"]["estimated"] = true.into();
    let marked = trials::parse_line(&value.to_string()).expect("still a record");
    let usage = trials[0].outcome.attempts[0].usage.expect("usage");
    assert_eq!(marked.estimated_tokens, usage.total());
    assert!(
        trials::parse_line(&line[..line.len() / 2]).is_none(),
        "a torn line"
    );
}

#[test]
fn an_answer_whose_checker_never_ran_did_not_pass() {
    // A trial of the code contract on Qwen2.5-Coder-1.5B whose tests' checker timed out on a
    // loaded machine: no issues, because the check never ran.
    let line = r#"{"ts": "2026-12-02T12:38:26.213Z", "request_id": "eval-ladder-fibonacci-0", "model": "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", "profile": "code", "runner": "local", "status": "unavailable", "stop_reason": {"reason": "validator_unavailable"}, "response": "def fibonacci(n): ...", "issues": [], "warnings": [], "attempts": [{"number": 1, "response_bytes": 218, "response_digest": "9cf82512b9ad94fa", "issues": [], "runner_us": 122867018, "validation_us": 10036788, "usage": {"input_tokens": 58, "output_tokens": 80}, "repairs": [], "finish_reason": "stop", "seed": 49}], "fallback_used": false, "unavailable": {"validator": "tests_pass", "reason": "'python3' did not finish within 10000 ms and was killed"}, "total_us": 132903829, "runner_us": 122867018, "eval": {"arm": "ladder", "case": "fibonacci", "repeat": 0, "seed": 49}}"#;
    let unchecked = trials::parse_line(line).expect("an eval record");
    assert!(!trials::attempt_passed(&unchecked.outcome, 0));
    let mut passed: serde_json::Value = serde_json::from_str(line).expect("json");
    passed["status"] = "passed".into();
    passed["stop_reason"] = serde_json::json!({"reason": "clean"});
    passed["unavailable"] = serde_json::Value::Null;
    let checked = trials::parse_line(&passed.to_string()).expect("an eval record");
    assert!(trials::attempt_passed(&checked.outcome, 0));
    assert!(
        !trials::attempt_passed(&checked.outcome, 1),
        "no second attempt"
    );
}

#[test]
fn answers_jsonl_has_one_line_per_attempt_with_the_text_the_model_wrote() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let path = dir.path().join("answers.jsonl");
    let file = std::fs::File::create(&path).expect("created");
    let plan = Arc::new(plan("none,feedback", 6, 1, 11));
    let jobs = plan.jobs();
    let runtime = runtime();
    let trials = runtime
        .block_on(trials::run_all(
            Arc::clone(&plan),
            Arc::new(SeededModel::default()),
            jobs,
            2,
            Sink {
                file: None,
                answers: Some(file),
                on_trial: Box::new(|_| {}),
            },
        ))
        .expect("written");
    let text = std::fs::read_to_string(&path).expect("read back");
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    let attempts: usize = trials.iter().map(|t| t.outcome.attempts.len()).sum();
    assert_eq!(lines.len(), attempts);
    assert!(attempts > trials.len(), "some trial was re-asked");
    for trial in &trials {
        let id = format!("{}/{}/{}", trial.key.arm, trial.key.case, trial.key.repeat);
        for attempt in &trial.outcome.attempts {
            let line = lines
                .iter()
                .find(|l| l["id"] == format!("{id}/{}", attempt.number))
                .unwrap_or_else(|| panic!("no line for {id} attempt {}", attempt.number));
            let answer = line["answer"].as_str().expect("text");
            assert_eq!(answer.len(), attempt.response_bytes, "{id}");
            assert_eq!(line["contract"], "test");
            assert!(line["prompt"]
                .as_str()
                .expect("text")
                .starts_with("question "));
        }
    }
}

/// The arm `resample` is blind resampling: the estimate of what blind resampling gives with
/// its tokens, made from the run's own samples, lands near what it measured.
#[test]
fn the_resample_estimate_matches_an_arm_that_resamples() {
    let trials = run(plan("none,resample,feedback", 40, 3, 11), 4, Arc::default());
    let names: Vec<String> = ["none", "resample", "feedback"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let summary = summary::build(setup(), &names, &trials);
    let resample = &summary.arms[1];
    let estimate = resample
        .cost
        .resample_at_equal_tokens
        .expect("the model reports usage");
    let measured = resample.valid.rate.k as f64;
    assert!(
        (estimate.valid - measured).abs() <= 0.1 * resample.trials as f64,
        "estimated {estimate:?}, measured {measured}"
    );
    assert!(estimate.attempts > 1.0, "{estimate:?}");
    // `none` spends one attempt a trial: its baseline is one attempt's pass rate.
    let none = summary.arms[0]
        .cost
        .resample_at_equal_tokens
        .expect("usage");
    assert!((none.attempts - 1.0).abs() < 0.2, "{none:?}");
    let tokens = (resample.prompt_tokens + resample.completion_tokens) as f64;
    let per_1k = resample.cost.valid_per_1k_tokens.expect("usage");
    assert!((per_1k - measured * 1000.0 / tokens).abs() < 1e-9);
    // pass@t reaches the arm's valid rate at its costliest valid trial.
    let last = resample
        .cost
        .pass_at_tokens
        .last()
        .copied()
        .unwrap_or_default();
    assert!(
        (last.1 - resample.valid.rate.rate).abs() < 1e-12,
        "{last:?}"
    );
    assert!(summary.resample_curve.len() > 2);
}
