//! The numbers of an eval, per arm and between arms, built from the finished trials (so a
//! resumed eval and a whole one give the same summary), and their tables.

use super::arms::Arm;
use super::clustered::{self, CaseCount, ClusteredRate, PairedTest};
use super::cost::{self, ArmCost, Sampling};
use super::provenance::Provenance;
use super::shard::Shard;
use super::split::SplitSide;
use super::trials::{attempt_passed, error_codes, Trial};
use enforce_core::policy::{FirstAttempt, Reask, RepairWhen};
use enforce_core::{Outcome, Status};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What was run.
    pub setup: Setup,
    /// What produced the numbers: version, runner and model, seeds, digests, machines.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub provenance: Option<Provenance>,
    /// One entry per arm, in the order of `--arms`.
    pub arms: Vec<ArmSummary>,
    /// Per issue code (on first attempts), in every arm.
    pub issue_codes: Vec<CodeSummary>,
    /// Every pair of arms, compared trial by trial and case by case.
    pub pairs: Vec<PairSummary>,
    /// Blind resampling estimated from the run's own samples, as `[tokens per trial, valid
    /// rate]` points from no attempt to the most tokens per trial any arm spent (empty without
    /// usage reported): the reference line of the pass@t chart.
    pub resample_curve: Vec<(f64, f64)>,
}

impl Summary {
    /// The most attempts any trial made (the length of `valid_after_attempts`).
    pub fn most_attempts(&self) -> usize {
        self.arms
            .iter()
            .map(|a| a.valid_after_attempts.len())
            .max()
            .unwrap_or(1)
    }
}

/// The eval's setup.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setup {
    /// The dataset file.
    pub dataset: String,
    /// Number of cases.
    pub cases: usize,
    /// Runs per case and arm.
    pub repeats: u32,
    /// The first seed.
    pub seed: u64,
    /// The profile (cases may name their own).
    pub profile: String,
    /// The runner's kind.
    pub runner: String,
    /// The model, when the runner names one.
    pub model: Option<String>,
    /// Sampling parameters sent with every request.
    pub params: serde_json::Map<String, serde_json::Value>,
    /// The part of the dataset run (`--shard`); absent for the whole dataset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard: Option<Shard>,
    /// The side of a train/test split run (`--split`); absent when the eval takes every case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<SplitSide>,
}

/// One arm's numbers. "Valid" means passed or repaired; every rate's interval counts a
/// case's repeats as one cluster. Read back, a field the record lacks (one written before the
/// field existed) is its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArmSummary {
    /// The arm.
    pub arm: String,
    /// Trials run (cases × repeats).
    pub trials: u64,
    /// The first attempt passed every validator (no repair).
    pub first_attempt_passed: ClusteredRate,
    /// `valid_after_attempts[k]`: valid within k + 1 attempts (cumulative).
    pub valid_after_attempts: Vec<ClusteredRate>,
    /// Valid at the end.
    pub valid: ClusteredRate,
    /// Outcomes by status (every status, zeros included).
    pub outcomes: BTreeMap<String, u64>,
    /// Attempts made, in all.
    pub attempts: u64,
    /// Of those, attempts the escalation model answered (`attempts[].escalated_to`).
    pub escalated_attempts: u64,
    /// Prompt (input) tokens, in all.
    pub prompt_tokens: u64,
    /// Completion (output) tokens, in all.
    pub completion_tokens: u64,
    /// Of those, tokens the records mark as estimated.
    pub estimated_tokens: u64,
    /// Wall time of all trials, in milliseconds.
    pub wall_ms: f64,
    /// Prompt tokens per valid answer (`null` without a valid answer or without any usage
    /// reported).
    pub prompt_tokens_per_valid: Option<f64>,
    /// Completion tokens per valid answer.
    pub completion_tokens_per_valid: Option<f64>,
    /// Wall time per valid answer, in milliseconds.
    pub wall_ms_per_valid: Option<f64>,
    /// Valid answers per 1,000 tokens, blind resampling at equal tokens, pass@t.
    #[serde(flatten)]
    pub cost: ArmCost,
}

/// One issue code across arms.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeSummary {
    /// The code.
    pub code: String,
    /// Per arm, in the order of `--arms`.
    pub arms: Vec<CodeInArm>,
}

/// One issue code in one arm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CodeInArm {
    /// The arm.
    pub arm: String,
    /// Trials whose first attempt had this error.
    pub first_attempt: u64,
    /// Attempts with this error, over all trials.
    pub attempts: u64,
    /// Trials whose first attempt had it and whose final answer is valid.
    pub fixed: u64,
}

/// Two arms compared on the same (case, repeat).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PairSummary {
    /// The first arm.
    pub a: String,
    /// The second arm.
    pub b: String,
    /// Trials in both arms.
    pub paired: u64,
    /// Valid in both.
    pub both_valid: u64,
    /// Valid in `a` only.
    pub only_a: u64,
    /// Valid in `b` only.
    pub only_b: u64,
    /// Valid in neither.
    pub neither: u64,
    /// The comparison case by case: the sign test over cases, the difference of valid
    /// rates, the minimum detectable effect.
    #[serde(flatten)]
    pub test: PairedTest,
    /// `p_value` adjusted by Holm's method for the number of pairs compared: read it against
    /// α = 0.05.
    pub p_adjusted: f64,
}

/// The statuses in table order.
pub const STATUSES: [Status; 5] = [
    Status::Passed,
    Status::Repaired,
    Status::Unresolved,
    Status::Aborted,
    Status::Unavailable,
];

fn first_attempt_passed(outcome: &Outcome) -> bool {
    attempt_passed(outcome, 0)
}

/// The case ids of `trials`, each once, sorted: the same order however the trials finished,
/// so that sums over cases come out the same to the last bit.
fn case_ids(trials: &[Trial]) -> Vec<&str> {
    let ids: BTreeSet<&str> = trials.iter().map(|t| t.key.case.as_str()).collect();
    ids.into_iter().collect()
}

/// The rate of the trials of `arm` that `meets`, clustered by case.
fn rate_of(
    trials: &[Trial],
    arm: &str,
    cases: &[&str],
    meets: impl Fn(&Trial) -> bool,
) -> ClusteredRate {
    let mut counts: HashMap<&str, CaseCount> = HashMap::new();
    for t in in_arm(trials, arm) {
        let count = counts.entry(t.key.case.as_str()).or_default();
        count.trials += 1;
        count.valid += u64::from(meets(t));
    }
    let per_case: Vec<CaseCount> = cases
        .iter()
        .filter_map(|c| counts.get(c).copied())
        .collect();
    clustered::clustered_rate(&per_case)
}

/// Which attempts of the arm named `name` are blind samples of the profile's request: none
/// when its first attempt is steered (constrained decoding, early abort, reason-then-format,
/// repairs before a re-ask), every one when it only resamples, else the first.
fn sampling_of(name: &str) -> Sampling {
    let Ok(arm) = Arm::parse(name) else {
        return Sampling::Steered;
    };
    if arm.constrained
        || arm.early_abort
        || arm.repair != RepairWhen::Last
        || arm.first_attempt != FirstAttempt::Direct
    {
        Sampling::Steered
    } else if arm.reasks && matches!(arm.reask.rungs(), [Reask::Resample]) {
        Sampling::Every
    } else {
        Sampling::First
    }
}

fn in_arm<'a>(trials: &'a [Trial], arm: &'a str) -> impl Iterator<Item = &'a Trial> + 'a {
    trials.iter().filter(move |t| t.key.arm == arm)
}

fn per(total: f64, valid: u64) -> Option<f64> {
    (valid > 0).then(|| total / valid as f64)
}

/// The summary of `trials` (in any order) for `arms`, in that order.
pub fn build(setup: Setup, arms: &[String], trials: &[Trial]) -> Summary {
    let longest = trials
        .iter()
        .map(|t| t.outcome.attempts.len())
        .max()
        .unwrap_or(1)
        .max(1);
    let cases = case_ids(trials);
    let (costs, curve) = cost::cost_matched(arms, trials, &sampling_of);
    let arm_summaries: Vec<ArmSummary> = arms
        .iter()
        .zip(costs)
        .map(|(arm, cost)| arm_summary(arm, trials, &cases, longest, cost))
        .collect();
    // The curve reaches as far as the arm that spent the most tokens per trial.
    let widest = arm_summaries
        .iter()
        .filter(|a| a.trials > 0)
        .map(|a| (a.prompt_tokens + a.completion_tokens) as f64 / a.trials as f64)
        .fold(0.0, f64::max);
    Summary {
        setup,
        provenance: None,
        arms: arm_summaries,
        issue_codes: codes(arms, trials),
        pairs: pairs(arms, trials),
        resample_curve: curve.map(|c| c.points(widest)).unwrap_or_default(),
    }
}

/// The numbers of `arm` (rates over `cases`, `longest` attempts at most).
fn arm_summary(
    arm: &str,
    trials: &[Trial],
    cases: &[&str],
    longest: usize,
    cost: ArmCost,
) -> ArmSummary {
    let n = in_arm(trials, arm).count() as u64;
    let valid = in_arm(trials, arm)
        .filter(|t| t.outcome.status.is_success())
        .count() as u64;
    let valid_after_attempts = (1..=longest)
        .map(|k| {
            rate_of(trials, arm, cases, |t| {
                t.outcome.status.is_success() && t.outcome.attempts.len() <= k
            })
        })
        .collect();
    let outcomes = STATUSES
        .iter()
        .map(|s| {
            let count = in_arm(trials, arm)
                .filter(|t| t.outcome.status == *s)
                .count();
            (s.as_str().to_string(), count as u64)
        })
        .collect();
    let (mut prompt, mut completion, mut estimated, mut wall_us, mut attempts) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut escalated_attempts = 0u64;
    let mut with_usage = false;
    for t in in_arm(trials, arm) {
        if let Some(u) = t.outcome.usage {
            with_usage = true;
            prompt += u.input_tokens;
            completion += u.output_tokens;
        }
        estimated += t.estimated_tokens;
        wall_us += t.outcome.total_us;
        attempts += t.outcome.attempts.len() as u64;
        escalated_attempts += t
            .outcome
            .attempts
            .iter()
            .filter(|a| a.escalated_to.is_some())
            .count() as u64;
    }
    let wall_ms = wall_us as f64 / 1000.0;
    ArmSummary {
        arm: arm.to_string(),
        trials: n,
        first_attempt_passed: rate_of(trials, arm, cases, |t| first_attempt_passed(&t.outcome)),
        valid_after_attempts,
        valid: rate_of(trials, arm, cases, |t| t.outcome.status.is_success()),
        outcomes,
        attempts,
        escalated_attempts,
        prompt_tokens: prompt,
        completion_tokens: completion,
        estimated_tokens: estimated,
        wall_ms,
        // Without any usage reported, tokens per answer are unknown rather than 0.
        prompt_tokens_per_valid: per(prompt as f64, valid).filter(|_| with_usage),
        completion_tokens_per_valid: per(completion as f64, valid).filter(|_| with_usage),
        wall_ms_per_valid: per(wall_ms, valid),
        cost,
    }
}

fn codes(arms: &[String], trials: &[Trial]) -> Vec<CodeSummary> {
    // code → arm → (first attempt, attempts, fixed)
    let mut counts: BTreeMap<String, HashMap<&str, (u64, u64, u64)>> = BTreeMap::new();
    for t in trials {
        for (i, attempt) in t.outcome.attempts.iter().enumerate() {
            for code in error_codes(&attempt.issues) {
                let entry = counts
                    .entry(code.to_string())
                    .or_default()
                    .entry(t.key.arm.as_str())
                    .or_default();
                entry.1 += 1;
                if i == 0 {
                    entry.0 += 1;
                    if t.outcome.status.is_success() {
                        entry.2 += 1;
                    }
                }
            }
        }
    }
    let mut codes: Vec<CodeSummary> = counts
        .into_iter()
        .map(|(code, per_arm)| CodeSummary {
            arms: arms
                .iter()
                .map(|arm| {
                    let (first_attempt, attempts, fixed) =
                        per_arm.get(arm.as_str()).copied().unwrap_or_default();
                    CodeInArm {
                        arm: arm.clone(),
                        first_attempt,
                        attempts,
                        fixed,
                    }
                })
                .collect(),
            code,
        })
        .collect();
    // The most frequent first.
    codes.sort_by_key(|c| std::cmp::Reverse(c.arms.iter().map(|a| a.attempts).sum::<u64>()));
    codes
}

fn pairs(arms: &[String], trials: &[Trial]) -> Vec<PairSummary> {
    let mut valid: HashMap<(&str, &str, u32), bool> = HashMap::new();
    for t in trials {
        valid.insert(
            (t.key.arm.as_str(), t.key.case.as_str(), t.key.repeat),
            t.outcome.status.is_success(),
        );
    }
    let cases = case_ids(trials);
    let mut out = Vec::new();
    for (i, a) in arms.iter().enumerate() {
        for b in &arms[i + 1..] {
            let (mut paired, mut both_valid, mut only_a, mut only_b, mut neither) = (0, 0, 0, 0, 0);
            // Per case, over the repeats both arms ran.
            let mut per_case: HashMap<&str, (CaseCount, CaseCount)> = HashMap::new();
            for t in trials.iter().filter(|t| &t.key.arm == a) {
                let Some(&vb) = valid.get(&(b.as_str(), t.key.case.as_str(), t.key.repeat)) else {
                    continue;
                };
                let va = t.outcome.status.is_success();
                paired += 1;
                match (va, vb) {
                    (true, true) => both_valid += 1,
                    (true, false) => only_a += 1,
                    (false, true) => only_b += 1,
                    (false, false) => neither += 1,
                }
                let (ca, cb) = per_case.entry(t.key.case.as_str()).or_default();
                ca.trials += 1;
                cb.trials += 1;
                ca.valid += u64::from(va);
                cb.valid += u64::from(vb);
            }
            let (in_a, in_b): (Vec<CaseCount>, Vec<CaseCount>) = cases
                .iter()
                .filter_map(|c| per_case.get(c).copied())
                .unzip();
            out.push(PairSummary {
                a: a.clone(),
                b: b.clone(),
                paired,
                both_valid,
                only_a,
                only_b,
                neither,
                test: clustered::paired(&in_a, &in_b),
                p_adjusted: 1.0,
            });
        }
    }
    let p_values: Vec<f64> = out.iter().map(|p| p.test.p_value).collect();
    for (pair, adjusted) in out.iter_mut().zip(clustered::holm(&p_values)) {
        pair.p_adjusted = adjusted;
    }
    out
}
