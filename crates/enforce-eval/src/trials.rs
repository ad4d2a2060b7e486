//! Running the trials of an eval (arm × case × repeat) and their audit records in
//! `attempts.jsonl`: written as each trial ends, read back to resume an interrupted eval.

use super::answers::{self, Provenance, Recorder};
use super::arms::Arm;
use super::dataset::Case;
use enforce_config::profile::Constrained;
use enforce_core::{AuditRecord, Enforcer, Issue, Outcome, Request, Runner, Status};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeSet, HashSet};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Which trial a record belongs to: the `eval` object of its audit line.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct TrialKey {
    /// The arm's name.
    pub arm: String,
    /// The case's id.
    pub case: String,
    /// 0-based repeat.
    pub repeat: u32,
    /// The seed of the request (the same in every arm).
    pub seed: u64,
}

/// One finished trial: its key and outcome, and the tokens its record marks as estimated.
#[derive(Debug, Clone, PartialEq)]
pub struct Trial {
    /// Which trial.
    pub key: TrialKey,
    /// The profile the case was enforced under (its record's `profile`).
    pub profile: String,
    /// What the loop returned.
    pub outcome: Outcome,
    /// Tokens of attempts whose usage is marked `estimated` (counted from the chunks received
    /// rather than reported by the model).
    pub estimated_tokens: u64,
}

/// What every trial shares: the cases, the arms, an enforcer per (case, arm), the runner and
/// the request parameters.
pub struct Plan {
    /// The dataset.
    pub cases: Vec<Case>,
    /// The arms compared.
    pub arms: Vec<Arm>,
    /// `enforcers[case][arm]`: the case's profile with the arm's policy.
    pub enforcers: Vec<Vec<Arc<Enforcer>>>,
    /// `constrained[case][arm]`: the decoding constraint sent with the case's requests in that
    /// arm (`decode: constrained`, or the arm `constrained`), if any.
    pub constrained: Vec<Vec<Option<Constrained>>>,
    /// `profiles[case]`: the profile's name, for the record.
    pub profiles: Vec<String>,
    /// Runs per case and arm.
    pub repeats: u32,
    /// The first seed.
    pub seed: u64,
    /// Sampling parameters sent with every request (`temperature`, `max_tokens`).
    pub params: Map<String, Value>,
    /// The runner's kind, for the record.
    pub runner_kind: String,
    /// The model, for the record.
    pub model: Option<String>,
    /// The configuration file, as given, for the answers' lines.
    pub config: Option<String>,
}

/// One trial to run: indices into the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Job {
    /// Index into `Plan::arms`.
    pub arm: usize,
    /// Index into `Plan::cases`.
    pub case: usize,
    /// 0-based repeat.
    pub repeat: u32,
}

/// The seed of (case, repeat) in an eval whose first seed is `first`: the first plus the index
/// of (case, repeat) in the whole dataset, so a shard asks exactly what the whole run asks.
pub fn seed_of(first: u64, repeats: u32, case: usize, repeat: u32) -> u64 {
    let index = case as u64 * u64::from(repeats) + u64::from(repeat);
    first.wrapping_add(index)
}

impl Plan {
    /// The seed of (case, repeat): the first seed plus its index, the same in every arm.
    pub fn seed_of(&self, case: usize, repeat: u32) -> u64 {
        seed_of(self.seed, self.repeats, case, repeat)
    }

    /// The key of a job.
    pub fn key(&self, job: Job) -> TrialKey {
        TrialKey {
            arm: self.arms[job.arm].name.clone(),
            case: self.cases[job.case].id.clone(),
            repeat: job.repeat,
            seed: self.seed_of(job.case, job.repeat),
        }
    }

    /// Every job, case by case (each case's arms together, so a partial run compares arms on
    /// the same cases).
    pub fn jobs(&self) -> Vec<Job> {
        let mut jobs = Vec::new();
        for case in 0..self.cases.len() {
            for repeat in 0..self.repeats {
                for arm in 0..self.arms.len() {
                    jobs.push(Job { arm, case, repeat });
                }
            }
        }
        jobs
    }

    /// The request of a job: the case's messages and the parameters with its seed.
    pub fn request(&self, job: Job) -> Request {
        let mut params = self.params.clone();
        params.insert(
            "seed".into(),
            Value::from(self.seed_of(job.case, job.repeat)),
        );
        let mut request = Request {
            messages: self.cases[job.case].messages.clone(),
            params,
            ..Request::default()
        };
        if let Some(constrained) = self.constrained_of(job) {
            constrained.apply_to(&mut request);
        }
        request
    }

    fn constrained_of(&self, job: Job) -> Option<&Constrained> {
        self.constrained.get(job.case)?.get(job.arm)?.as_ref()
    }

    /// Runs one job; returns its outcome and the lines of its answers (`answers.jsonl`).
    pub async fn run(&self, runner: &Arc<dyn Runner>, job: Job) -> (Outcome, String) {
        let enforcer = &self.enforcers[job.case][job.arm];
        let request = self.request(job);
        let recorder = Recorder::new(Arc::clone(runner));
        let mut outcome = enforcer
            .run(&recorder, &request, &self.cases[job.case].context)
            .await;
        if let Some(constrained) = self.constrained_of(job) {
            outcome.warnings.extend(constrained.warnings());
        }
        let key = self.key(job);
        let provenance = Provenance {
            trial: &format!("{}/{}/{}", key.arm, key.case, key.repeat),
            profile: &self.profiles[job.case],
            config: self.config.as_deref(),
            source: &self.source(key.seed),
        };
        let lines = answers::lines(&recorder.answers(), &request, &provenance);
        (outcome, lines)
    }

    /// Where an answer of this eval comes from, in words: the runner, the model and the
    /// sampling, as a `source` of `tests/fixtures/real-answers/` says it.
    fn source(&self, seed: u64) -> String {
        let mut words = format!("{} runner", self.runner_kind);
        if let Some(model) = &self.model {
            words.push_str(&format!(", model {model}"));
        }
        for (key, value) in &self.params {
            words.push_str(&format!(", {key} {value}"));
        }
        words.push_str(&format!(", seed {seed} (enforce eval)"));
        words
    }

    /// The audit line of a finished job: `enforce serve`'s record plus the `eval` object.
    pub fn record_line(&self, job: Job, outcome: &Outcome) -> String {
        let key = self.key(job);
        let id = format!("eval-{}-{}-{}", key.arm, key.case, key.repeat);
        let line = AuditRecord::new(&id, outcome)
            .model(self.model.as_deref())
            .profile(self.profiles[job.case].as_str())
            .runner(self.runner_kind.as_str())
            .to_json_line();
        with_eval(&line, &key)
    }
}

/// `line` (one JSON object) with `"eval": key` added last.
fn with_eval(line: &str, key: &TrialKey) -> String {
    let eval = serde_json::to_string(key).unwrap_or_else(|_| "null".into());
    match line.strip_suffix('}') {
        Some(head) => format!("{head},\"eval\":{eval}}}"),
        None => line.to_string(),
    }
}

/// The distinct codes of the errors (not warnings) among `issues`.
pub fn error_codes(issues: &[Issue]) -> BTreeSet<&str> {
    issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| i.code.as_str())
        .collect()
}

/// Attempt `i` of `outcome` passed every validator and was not cut short. The last attempt of
/// an outcome a validator could not check (`unavailable`: a checker that timed out, say) did
/// not: it has no issues only because that check never ran.
pub fn attempt_passed(outcome: &Outcome, i: usize) -> bool {
    let unchecked = outcome.status == Status::Unavailable && i + 1 == outcome.attempts.len();
    !unchecked
        && outcome
            .attempts
            .get(i)
            .is_some_and(|a| a.cut.is_none() && error_codes(&a.issues).is_empty())
}

/// Reads one audit line of an eval; `None` when it is not one (torn, or without `eval`).
pub fn parse_line(line: &str) -> Option<Trial> {
    let value: Value = serde_json::from_str(line).ok()?;
    let key: TrialKey = serde_json::from_value(value.get("eval")?.clone()).ok()?;
    let estimated_tokens = value
        .get("attempts")
        .and_then(Value::as_array)
        .map_or(0, |attempts| attempts.iter().map(estimated).sum());
    let profile = value
        .get("profile")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let outcome: Outcome = serde_json::from_value(value).ok()?;
    Some(Trial {
        key,
        profile,
        outcome,
        estimated_tokens,
    })
}

/// The tokens of one attempt's record when its usage is marked as estimated.
fn estimated(attempt: &Value) -> u64 {
    let usage = &attempt["usage"];
    let marked =
        usage["estimated"] == Value::Bool(true) || attempt["usage_estimated"] == Value::Bool(true);
    if !marked {
        return 0;
    }
    let count = |k: &str| usage[k].as_u64().unwrap_or(0);
    count("input_tokens").saturating_add(count("output_tokens"))
}

/// The eval records among the lines of `text`, each with its line, and whether some
/// non-blank line was not one (torn, or not an eval's).
pub fn records(text: &str) -> (Vec<(String, Trial)>, bool) {
    let mut records = Vec::new();
    let mut other = false;
    for line in text.split('\n').filter(|line| !line.trim().is_empty()) {
        match parse_line(line) {
            Some(trial) => records.push((line.to_string(), trial)),
            None => other = true,
        }
    }
    (records, other)
}

/// The records of `recorded` whose key is `wanted` (the first of each key), and how many
/// belong to another eval.
pub fn select(
    recorded: Vec<(String, Trial)>,
    wanted: &HashSet<TrialKey>,
) -> (Vec<(String, Trial)>, usize) {
    let mut seen = HashSet::new();
    let mut kept = Vec::new();
    let mut ignored = 0;
    for (line, trial) in recorded {
        if !wanted.contains(&trial.key) {
            ignored += 1;
        } else if seen.insert(trial.key.clone()) {
            kept.push((line, trial));
        }
    }
    (kept, ignored)
}

/// The records already in `path` (an interrupted eval's `attempts.jsonl`). Lines that are not
/// eval records (a line torn by the interruption) are dropped from the file, so that appending
/// goes on after whole lines only. A missing file holds no records.
pub fn resume(path: &Path) -> std::io::Result<Vec<(String, Trial)>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let text = String::from_utf8_lossy(&bytes);
    let (records, dropped) = records(&text);
    if dropped || !text.ends_with('\n') && !text.is_empty() {
        let kept: String = records
            .iter()
            .map(|(line, _)| format!("{line}\n"))
            .collect();
        crate::atomic::write_atomically(path, &kept)?;
    }
    Ok(records)
}

/// Where finished trials go: the audit file (one line each, written as soon as the trial
/// ends, so an interruption loses only the trials running), the answers' file and a callback
/// for progress.
pub struct Sink<'a> {
    /// The open `attempts.jsonl`, appended to.
    pub file: Option<std::fs::File>,
    /// The open `answers.jsonl`, appended to.
    pub answers: Option<std::fs::File>,
    /// Called once per finished trial.
    pub on_trial: Box<dyn Fn(&Trial) + Send + 'a>,
}

/// Runs `jobs` on `runner`, `concurrency` at a time, writing each record to `sink` as it
/// ends. Returns the finished trials in the order they ended; an error writing the file
/// stops the run.
pub async fn run_all(
    plan: Arc<Plan>,
    runner: Arc<dyn Runner>,
    jobs: Vec<Job>,
    concurrency: usize,
    sink: Sink<'static>,
) -> std::io::Result<Vec<Trial>> {
    let jobs = Arc::new(jobs);
    let next = Arc::new(AtomicUsize::new(0));
    let state = Arc::new(Mutex::new((
        sink,
        Vec::<Trial>::new(),
        None::<std::io::Error>,
    )));
    let mut workers = Vec::new();
    for _ in 0..concurrency.max(1) {
        let (plan, runner, jobs, next, state) = (
            Arc::clone(&plan),
            Arc::clone(&runner),
            Arc::clone(&jobs),
            Arc::clone(&next),
            Arc::clone(&state),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(&job) = jobs.get(i) else { break };
                let (outcome, answer_lines) = plan.run(&runner, job).await;
                let line = plan.record_line(job, &outcome);
                let Ok(mut guard) = state.lock() else { break };
                let (sink, trials, error) = &mut *guard;
                if error.is_some() {
                    break;
                }
                if let Some(file) = &mut sink.file {
                    // One write per line: an interruption tears at most the line being written.
                    if let Err(e) = file.write_all(format!("{line}\n").as_bytes()) {
                        *error = Some(e);
                        break;
                    }
                }
                if let Some(file) = &mut sink.answers {
                    if let Err(e) = file.write_all(answer_lines.as_bytes()) {
                        *error = Some(e);
                        break;
                    }
                }
                let trial = parse_line(&line).unwrap_or(Trial {
                    key: plan.key(job),
                    profile: plan.profiles[job.case].clone(),
                    outcome,
                    estimated_tokens: 0,
                });
                (sink.on_trial)(&trial);
                trials.push(trial);
            }
        }));
    }
    for worker in workers {
        if let Err(e) = worker.await {
            return Err(std::io::Error::other(format!("a trial panicked: {e}")));
        }
    }
    let mut guard = state
        .lock()
        .map_err(|_| std::io::Error::other("a trial panicked while recording"))?;
    let (_, trials, error) = &mut *guard;
    if let Some(e) = error.take() {
        return Err(e);
    }
    Ok(std::mem::take(trials))
}

/// The keys of `trials`, to skip the jobs already done.
pub fn done(trials: &[Trial]) -> HashSet<TrialKey> {
    trials.iter().map(|t| t.key.clone()).collect()
}
