//! The numbers of an eval, per arm and between arms, built from the finished trials (so a
//! resumed eval and a whole one give the same summary), and their tables.

use super::shard::Shard;
use super::stats::{sign_test, Rate};
use super::trials::Trial;
use enforce_core::{Outcome, Status};
use enforce_report::render::table::Table;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet, HashMap};

/// What `summary.json` holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What was run.
    pub setup: Setup,
    /// One entry per arm, in the order of `--arms`.
    pub arms: Vec<ArmSummary>,
    /// Per issue code (on first attempts), in every arm.
    pub issue_codes: Vec<CodeSummary>,
    /// Every pair of arms, compared trial by trial.
    pub pairs: Vec<PairSummary>,
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
}

/// One arm's numbers. "Valid" means passed or repaired. Read back, a field the record lacks
/// (one written before the field existed) is its default.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArmSummary {
    /// The arm.
    pub arm: String,
    /// Trials run (cases × repeats).
    pub trials: u64,
    /// The first attempt passed every validator (no repair).
    pub first_attempt_passed: Rate,
    /// `valid_after_attempts[k]`: valid within k + 1 attempts (cumulative).
    pub valid_after_attempts: Vec<Rate>,
    /// Valid at the end.
    pub valid: Rate,
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
    /// Two-sided exact sign test (McNemar) of `only_a` against `only_b`.
    pub p_value: f64,
}

/// The statuses in table order.
pub const STATUSES: [Status; 5] = [
    Status::Passed,
    Status::Repaired,
    Status::Unresolved,
    Status::Aborted,
    Status::Unavailable,
];

/// The distinct codes of the errors (not warnings) among `issues`.
fn error_codes(issues: &[enforce_core::Issue]) -> BTreeSet<&str> {
    issues
        .iter()
        .filter(|i| i.is_error())
        .map(|i| i.code.as_str())
        .collect()
}

fn first_attempt_passed(outcome: &Outcome) -> bool {
    outcome
        .attempts
        .first()
        .is_some_and(|a| a.cut.is_none() && error_codes(&a.issues).is_empty())
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
    let mut arm_summaries = Vec::new();
    for arm in arms {
        let n = in_arm(trials, arm).count() as u64;
        let valid = in_arm(trials, arm)
            .filter(|t| t.outcome.status.is_success())
            .count() as u64;
        let first = in_arm(trials, arm)
            .filter(|t| first_attempt_passed(&t.outcome))
            .count() as u64;
        let valid_after_attempts = (1..=longest)
            .map(|k| {
                let within = in_arm(trials, arm)
                    .filter(|t| t.outcome.status.is_success() && t.outcome.attempts.len() <= k)
                    .count() as u64;
                Rate::wilson(within, n)
            })
            .collect();
        let outcomes = STATUSES
            .iter()
            .map(|s| {
                (
                    s.as_str().to_string(),
                    in_arm(trials, arm)
                        .filter(|t| t.outcome.status == *s)
                        .count() as u64,
                )
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
        arm_summaries.push(ArmSummary {
            arm: arm.clone(),
            trials: n,
            first_attempt_passed: Rate::wilson(first, n),
            valid_after_attempts,
            valid: Rate::wilson(valid, n),
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
        });
    }
    Summary {
        setup,
        arms: arm_summaries,
        issue_codes: codes(arms, trials),
        pairs: pairs(arms, trials),
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
    let mut out = Vec::new();
    for (i, a) in arms.iter().enumerate() {
        for b in &arms[i + 1..] {
            let mut pair = PairSummary {
                a: a.clone(),
                b: b.clone(),
                paired: 0,
                both_valid: 0,
                only_a: 0,
                only_b: 0,
                neither: 0,
                p_value: 1.0,
            };
            for t in trials.iter().filter(|t| &t.key.arm == a) {
                let Some(&vb) = valid.get(&(b.as_str(), t.key.case.as_str(), t.key.repeat)) else {
                    continue;
                };
                pair.paired += 1;
                match (t.outcome.status.is_success(), vb) {
                    (true, true) => pair.both_valid += 1,
                    (true, false) => pair.only_a += 1,
                    (false, true) => pair.only_b += 1,
                    (false, false) => pair.neither += 1,
                }
            }
            pair.p_value = sign_test(pair.only_a, pair.only_b);
            out.push(pair);
        }
    }
    out
}

fn opt(value: Option<f64>, decimals: usize) -> String {
    value.map_or("-".into(), |v| format!("{v:.decimals$}"))
}

/// The tables of a summary.
pub struct Tables {
    /// Valid answers per arm.
    pub arms: Table,
    /// Outcomes per arm.
    pub outcomes: Table,
    /// Tokens and time.
    pub cost: Table,
    /// Issue codes.
    pub codes: Table,
    /// Pairs of arms.
    pub pairs: Table,
}

/// The tables: arms, outcomes, tokens and time, issue codes, pairs.
pub fn tables(summary: &Summary) -> Tables {
    let longest = summary.most_attempts();
    let mut headers = vec!["arm".to_string(), "trials".into(), "first attempt".into()];
    headers.extend((1..=longest).map(|k| format!("valid ≤{k} att.")));
    headers.push("valid".into());
    let mut arms = Table::new(
        "Valid answers per arm (95 % Wilson intervals)",
        &[],
        1..headers.len(),
    )
    .note(Some(
        "valid = passed or repaired; \"valid ≤k att.\" counts answers valid within k attempts"
            .into(),
    ));
    arms.headers = headers;
    for a in &summary.arms {
        let mut row = vec![
            a.arm.clone(),
            a.trials.to_string(),
            a.first_attempt_passed.display(),
        ];
        row.extend(a.valid_after_attempts.iter().map(Rate::display));
        row.push(a.valid.display());
        arms.rows.push(row);
    }

    let mut outcome_headers = vec!["arm"];
    outcome_headers.extend(STATUSES.iter().map(|s| s.as_str()));
    let mut outcomes = Table::new("Outcomes per arm", &outcome_headers, 1..6);
    for a in &summary.arms {
        let mut row = vec![a.arm.clone()];
        row.extend(
            STATUSES
                .iter()
                .map(|s| a.outcomes.get(s.as_str()).copied().unwrap_or(0).to_string()),
        );
        outcomes.rows.push(row);
    }

    let mut cost = Table::new(
        "Spend per valid answer",
        &[
            "arm",
            "attempts",
            "escalated",
            "prompt tok",
            "completion tok",
            "estimated tok",
            "prompt tok/valid",
            "completion tok/valid",
            "ms/valid",
        ],
        1..9,
    )
    .note(Some(
        "all tokens and time of the arm divided by its valid answers; escalated = attempts \
         the escalation model answered; estimated = counted from the chunks received, not \
         reported by the model"
            .into(),
    ));
    for a in &summary.arms {
        cost.rows.push(vec![
            a.arm.clone(),
            a.attempts.to_string(),
            a.escalated_attempts.to_string(),
            a.prompt_tokens.to_string(),
            a.completion_tokens.to_string(),
            a.estimated_tokens.to_string(),
            opt(a.prompt_tokens_per_valid, 0),
            opt(a.completion_tokens_per_valid, 0),
            opt(a.wall_ms_per_valid, 1),
        ]);
    }

    let mut code_headers = vec!["code".to_string()];
    for a in &summary.arms {
        code_headers.push(format!("{}: first/fixed", a.arm));
    }
    let mut codes = Table::new(
        "Issue codes on the first attempt, and how often each arm fixed them",
        &[],
        1..code_headers.len(),
    )
    .note(Some(
        "first = trials whose first attempt had the error; fixed = of those, valid at the end"
            .into(),
    ));
    codes.headers = code_headers;
    for c in &summary.issue_codes {
        let mut row = vec![c.code.clone()];
        row.extend(
            c.arms
                .iter()
                .map(|a| format!("{}/{}", a.first_attempt, a.fixed)),
        );
        codes.rows.push(row);
    }

    let mut pairs = Table::new(
        "Arms compared on the same trials",
        &["a", "b", "paired", "both valid", "only a", "only b", "neither", "p (sign test)"],
        2..8,
    )
    .note(Some(
        "p: the chance of a split of \"only a\" against \"only b\" at least this uneven if both arms were equally good"
            .into(),
    ));
    for p in &summary.pairs {
        pairs.rows.push(vec![
            p.a.clone(),
            p.b.clone(),
            p.paired.to_string(),
            p.both_valid.to_string(),
            p.only_a.to_string(),
            p.only_b.to_string(),
            p.neither.to_string(),
            format!("{:.3}", p.p_value),
        ]);
    }
    Tables {
        arms,
        outcomes,
        cost,
        codes,
        pairs,
    }
}

/// The summary as text tables, for the terminal.
pub fn text(summary: &Summary) -> String {
    let s = &summary.setup;
    let mut out = format!(
        "enforce eval: {} ({} case(s) × {} repeat(s), seed {}){}, profile {}, runner {}{}\n",
        s.dataset,
        s.cases,
        s.repeats,
        s.seed,
        s.shard
            .map(|shard| format!(", shard {shard}"))
            .unwrap_or_default(),
        s.profile,
        s.runner,
        s.model
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    );
    let t = tables(summary);
    for table in [t.arms, t.outcomes, t.cost, t.codes, t.pairs] {
        out.push('\n');
        enforce_report::render::table::write_text(&mut out, &table);
    }
    out
}
