//! Cost-matched comparison: what an arm's tokens would have bought by blind resampling.
//!
//! The estimator ("resample at equal tokens"). Blind samples are the attempts that asked the
//! profile's request as it is: the first attempt of the arms that ask plainly, and every
//! attempt of an arm that only resamples; an attempt is counted once per (case, seed), since
//! with a seeded model the same seed gives the same answer. Per case, s passed of n samples,
//! each spending t tokens on average (prompt + completion). The pass probability p of a case
//! gets a Beta prior fitted to all cases by the method of moments (the spread of the cases'
//! pass rates beyond what sampling noise gives; none measurable, as with one sample per case,
//! means every case shares the overall rate), and its posterior Beta(α + s, β + n − s).
//! Blind resampling that stops at the first valid answer and makes at most K attempts then
//! gives 1 − E[(1 − p)^K] valid answers per trial and spends t · Σ_{j<K} E[(1 − p)^j] tokens.
//! An arm's baseline is this policy at the K whose expected tokens equal the arm's, K
//! interpolated between whole attempts (K + 1 attempts for a share of the trials), summed over
//! the arm's trials of each case. Nothing is simulated; where a `resample` arm ran, its
//! measured numbers check the estimate.

use crate::trials::{attempt_passed, Trial};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};

/// Resampling stops at this many attempts per trial (a case that never passes would
/// otherwise take every token).
const MOST_ATTEMPTS: u32 = 1000;

/// Which of an arm's attempts are blind samples of the profile's request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Sampling {
    /// None: its first attempt is already steered (constrained decoding, early abort,
    /// reason-then-format, repairs first).
    Steered,
    /// The first attempt only (its re-asks are steered).
    First,
    /// Every attempt (it only resamples).
    Every,
}

/// One case's pass probability (a Beta distribution) and cost, and how many trials of it an
/// arm ran.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CaseResample {
    /// The mean of the pass probability.
    pub pass_rate: f64,
    /// α + β of its Beta distribution; infinite when the probability is known (every case
    /// shares the overall rate).
    pub strength: f64,
    /// Mean tokens of an attempt (t).
    pub tokens_per_attempt: f64,
    /// Trials of the case the baseline is matched over.
    pub trials: f64,
}

impl CaseResample {
    /// E[(1 − p)^(j + 1)] / E[(1 − p)^j]: the chance attempt j + 1 fails given the j before
    /// it did (a Beta's moments).
    fn fails_again(&self, j: u32) -> f64 {
        let fail = (1.0 - self.pass_rate).clamp(0.0, 1.0);
        if self.strength.is_infinite() {
            fail
        } else {
            let j = f64::from(j);
            (fail * self.strength + j) / (self.strength + j)
        }
    }
}

/// Blind resampling over a set of cases: expected valid answers and tokens by the attempts
/// allowed.
#[derive(Debug, Clone, PartialEq)]
pub struct ResampleCurve {
    cases: Vec<CaseResample>,
}

/// What blind resampling would give with an arm's tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ResampleEstimate {
    /// Expected valid answers.
    pub valid: f64,
    /// Expected valid answers over the arm's trials.
    pub rate: f64,
    /// Attempts per trial the tokens allow (K; a fraction means K + 1 for that share of the
    /// trials).
    pub attempts: f64,
}

impl ResampleCurve {
    /// The curve of `cases`.
    pub fn new(cases: Vec<CaseResample>) -> ResampleCurve {
        ResampleCurve { cases }
    }

    fn trials(&self) -> f64 {
        self.cases.iter().map(|c| c.trials).sum()
    }

    /// Expected (valid answers, tokens) with at most 1, 2, ... attempts per trial, up to
    /// [`MOST_ATTEMPTS`].
    fn steps(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        // Per case: E[(1 − p)^k] (every attempt so far failed) and the attempts made on average.
        let mut state: Vec<(f64, f64)> = vec![(1.0, 0.0); self.cases.len()];
        (0..MOST_ATTEMPTS).map(move |k| {
            let (mut valid, mut tokens) = (0.0, 0.0);
            for (c, (all_failed, attempts)) in self.cases.iter().zip(state.iter_mut()) {
                *attempts += *all_failed;
                *all_failed *= c.fails_again(k);
                valid += c.trials * (1.0 - *all_failed);
                tokens += c.trials * c.tokens_per_attempt * *attempts;
            }
            (valid, tokens)
        })
    }

    /// Expected (valid answers, tokens) with at most `k` attempts per trial.
    pub fn at_attempts(&self, k: u32) -> (f64, f64) {
        if k == 0 {
            return (0.0, 0.0);
        }
        self.steps().nth(k as usize - 1).unwrap_or((0.0, 0.0))
    }

    /// Blind resampling with `tokens` tokens in all (see the module's estimator); `None`
    /// without any trial.
    pub fn at_tokens(&self, tokens: f64) -> Option<ResampleEstimate> {
        let trials = self.trials();
        if trials <= 0.0 {
            return None;
        }
        let estimate = |valid: f64, attempts: f64| ResampleEstimate {
            valid,
            rate: valid / trials,
            attempts,
        };
        let (mut valid_before, mut tokens_before) = (0.0, 0.0);
        for (k, (valid, spent)) in (0u32..).zip(self.steps()) {
            if spent >= tokens {
                let share = if spent > tokens_before {
                    ((tokens - tokens_before) / (spent - tokens_before)).clamp(0.0, 1.0)
                } else {
                    1.0
                };
                return Some(estimate(
                    valid_before + share * (valid - valid_before),
                    f64::from(k) + share,
                ));
            }
            // Every case passes by now: more attempts would cost nothing more.
            if spent - tokens_before <= f64::EPSILON * spent.max(1.0) {
                return Some(estimate(valid, f64::from(k)));
            }
            (valid_before, tokens_before) = (valid, spent);
        }
        Some(estimate(valid_before, f64::from(MOST_ATTEMPTS)))
    }

    /// The curve as (tokens per trial, valid rate) points, from no attempt up to `up_to`
    /// tokens per trial (or until more attempts change nothing).
    pub fn points(&self, up_to: f64) -> Vec<(f64, f64)> {
        let trials = self.trials();
        let mut points = vec![(0.0, 0.0)];
        if trials <= 0.0 {
            return points;
        }
        for (valid, tokens) in self.steps() {
            let point = (tokens / trials, valid / trials);
            let last = points.last().copied().unwrap_or((0.0, 0.0));
            if point.0 - last.0 <= f64::EPSILON * point.0.max(1.0) {
                break;
            }
            points.push(point);
            if point.0 >= up_to {
                break;
            }
        }
        points
    }
}

/// One arm's cost-matched figures.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ArmCost {
    /// Valid answers per 1,000 tokens (prompt + completion); `null` without usage reported.
    pub valid_per_1k_tokens: Option<f64>,
    /// What blind resampling would give with the arm's tokens (see the module's estimator);
    /// `null` without usage reported or without blind samples.
    pub resample_at_equal_tokens: Option<ResampleEstimate>,
    /// pass@t: `[tokens, rate]` points, the share of the arm's trials valid within that many
    /// tokens (prompt + completion of the whole trial).
    pub pass_at_tokens: Vec<(f64, f64)>,
}

/// A case's blind samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Samples {
    /// Samples that passed every validator.
    pub passed: u64,
    /// Samples.
    pub samples: u64,
    /// Tokens of the samples with usage reported.
    pub tokens: u64,
    /// Samples with usage reported.
    pub with_usage: u64,
}

/// The tokens (prompt + completion) a trial spent; `None` without usage reported.
fn trial_tokens(trial: &Trial) -> Option<u64> {
    trial
        .outcome
        .usage
        .map(|u| u.input_tokens + u.output_tokens)
}

/// The blind samples per case id (see the module's estimator).
fn samples<'a>(
    trials: &'a [Trial],
    sampling: &dyn Fn(&str) -> Sampling,
) -> BTreeMap<&'a str, Samples> {
    let mut seen: HashSet<(&str, u64)> = HashSet::new();
    let mut cases: BTreeMap<&str, Samples> = BTreeMap::new();
    for trial in trials {
        let blind = match sampling(&trial.key.arm) {
            Sampling::Steered => 0,
            Sampling::First => 1,
            Sampling::Every => trial.outcome.attempts.len(),
        };
        let case = trial.key.case.as_str();
        for (i, attempt) in trial.outcome.attempts.iter().take(blind).enumerate() {
            if !seen.insert((case, trial.key.seed.wrapping_add(i as u64))) {
                continue;
            }
            let counts = cases.entry(case).or_default();
            counts.samples += 1;
            counts.passed += u64::from(attempt_passed(&trial.outcome, i));
            if let Some(usage) = attempt.usage {
                counts.tokens += usage.input_tokens + usage.output_tokens;
                counts.with_usage += 1;
            }
        }
    }
    cases
}

/// The Beta prior of the cases' pass probabilities by the method of moments: (mean, α + β),
/// α + β infinite when the cases' rates spread no more than sampling noise explains.
pub fn fit_prior(cases: &[Samples]) -> (f64, f64) {
    let cases: Vec<&Samples> = cases.iter().filter(|c| c.samples > 0).collect();
    let samples: u64 = cases.iter().map(|c| c.samples).sum();
    if samples == 0 {
        return (0.0, f64::INFINITY);
    }
    let mean = cases.iter().map(|c| c.passed).sum::<u64>() as f64 / samples as f64;
    let m = cases.len() as f64;
    let spread = cases
        .iter()
        .map(|c| (c.passed as f64 / c.samples as f64 - mean).powi(2))
        .sum::<f64>()
        / m;
    let inverse_n = cases.iter().map(|c| 1.0 / c.samples as f64).sum::<f64>() / m;
    let binomial = mean * (1.0 - mean);
    // Var(rate) = μ(1 − μ) · (1/n + ρ (1 − 1/n)) for a Beta-binomial, ρ = 1 / (α + β + 1).
    if binomial <= 0.0 || inverse_n >= 1.0 {
        return (mean, f64::INFINITY);
    }
    let rho = (spread / binomial - inverse_n) / (1.0 - inverse_n);
    if rho <= 0.0 {
        return (mean, f64::INFINITY);
    }
    // ρ near 1 (every case all or nothing) is a prior as weak as a Beta can usefully be.
    let strength = (1.0 / rho.min(0.999) - 1.0).max(1e-3);
    (mean, strength)
}

/// The cost-matched figures of `arms` (in that order), and the resampling curve of one trial
/// per case for the pass@t chart. `sampling` says which attempts of an arm are blind samples.
pub fn cost_matched(
    arms: &[String],
    trials: &[Trial],
    sampling: &dyn Fn(&str) -> Sampling,
) -> (Vec<ArmCost>, Option<ResampleCurve>) {
    let cases = samples(trials, sampling);
    let counts: Vec<Samples> = cases.values().copied().collect();
    let (mean, strength) = fit_prior(&counts);
    let (tokens, with_usage) = counts
        .iter()
        .fold((0, 0), |(t, n), c| (t + c.tokens, n + c.with_usage));
    let fitted = Fitted {
        cases,
        mean,
        strength,
        mean_tokens: (with_usage > 0).then(|| tokens as f64 / with_usage as f64),
    };
    let costs = arms
        .iter()
        .map(|arm| arm_cost(arm, trials, &fitted))
        .collect();
    let one_each: BTreeMap<&str, f64> = fitted.cases.keys().map(|id| (*id, 1.0)).collect();
    (costs, fitted.curve(&one_each))
}

/// The cases' samples with the fitted prior.
struct Fitted<'a> {
    cases: BTreeMap<&'a str, Samples>,
    mean: f64,
    strength: f64,
    /// Mean tokens of a sample; `None` without usage reported.
    mean_tokens: Option<f64>,
}

impl Fitted<'_> {
    /// The resampling curve over the cases, each weighted by its trials in `weights`.
    fn curve(&self, weights: &BTreeMap<&str, f64>) -> Option<ResampleCurve> {
        let mean_tokens = self.mean_tokens?;
        let (mean, strength) = (self.mean, self.strength);
        let curve = self
            .cases
            .iter()
            .map(|(id, c)| CaseResample {
                pass_rate: if strength.is_infinite() {
                    mean
                } else {
                    (mean * strength + c.passed as f64) / (strength + c.samples as f64)
                },
                strength: strength + c.samples as f64,
                // A case without usage reported takes the mean of the others.
                tokens_per_attempt: if c.with_usage > 0 {
                    c.tokens as f64 / c.with_usage as f64
                } else {
                    mean_tokens
                },
                trials: weights.get(id).copied().unwrap_or(0.0),
            })
            .collect();
        Some(ResampleCurve::new(curve))
    }
}

/// One arm's cost-matched figures.
fn arm_cost(arm: &str, trials: &[Trial], fitted: &Fitted) -> ArmCost {
    let mine: Vec<&Trial> = trials.iter().filter(|t| t.key.arm == arm).collect();
    let mut weights: BTreeMap<&str, f64> = BTreeMap::new();
    for t in &mine {
        *weights.entry(t.key.case.as_str()).or_default() += 1.0;
    }
    let Some(spent) = mine
        .iter()
        .filter_map(|t| trial_tokens(t))
        .reduce(|a, b| a + b)
    else {
        return ArmCost {
            valid_per_1k_tokens: None,
            resample_at_equal_tokens: None,
            pass_at_tokens: Vec::new(),
        };
    };
    let valid: Vec<u64> = mine
        .iter()
        .filter(|t| t.outcome.status.is_success())
        .map(|t| trial_tokens(t).unwrap_or(0))
        .collect();
    ArmCost {
        valid_per_1k_tokens: valid_per_1k_tokens(valid.len() as u64, spent),
        resample_at_equal_tokens: fitted
            .curve(&weights)
            .and_then(|curve| curve.at_tokens(spent as f64)),
        pass_at_tokens: pass_at_tokens(valid, mine.len() as u64),
    }
}

/// Valid answers per 1,000 tokens; `None` when no token was counted.
pub fn valid_per_1k_tokens(valid: u64, tokens: u64) -> Option<f64> {
    (tokens > 0).then(|| valid as f64 * 1000.0 / tokens as f64)
}

/// pass@t: for each token count a valid trial ended at (ascending), the share of `trials`
/// valid within that many tokens. `valid_tokens` are the tokens of the valid trials.
pub fn pass_at_tokens(mut valid_tokens: Vec<u64>, trials: u64) -> Vec<(f64, f64)> {
    let mut points = vec![(0.0, 0.0)];
    if trials == 0 {
        return points;
    }
    valid_tokens.sort_unstable();
    for (i, tokens) in valid_tokens.iter().enumerate() {
        let rate = (i + 1) as f64 / trials as f64;
        match points.last_mut() {
            Some(last) if last.0 == *tokens as f64 => last.1 = rate,
            _ => points.push((*tokens as f64, rate)),
        }
    }
    points
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(pass_rate: f64, tokens_per_attempt: f64) -> CaseResample {
        CaseResample {
            pass_rate,
            strength: f64::INFINITY,
            tokens_per_attempt,
            trials: 1.0,
        }
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    #[test]
    fn one_attempts_worth_of_tokens_buys_the_first_attempt_pass_rate() {
        let curve = ResampleCurve::new(vec![case(0.5, 100.0), case(0.2, 50.0)]);
        let first = curve.at_tokens(150.0).expect("trials");
        assert!(close(first.valid, 0.7), "{first:?}");
        assert!(close(first.attempts, 1.0), "{first:?}");
        // Two attempts allowed: case 1 makes 1.5 on average (150 tokens), case 2 1.8 (90).
        let (valid, tokens) = curve.at_attempts(2);
        assert!(close(valid, 0.75 + 0.36));
        assert!(close(tokens, 240.0));
        let two = curve.at_tokens(240.0).expect("trials");
        assert!(
            close(two.valid, 1.11) && close(two.attempts, 2.0),
            "{two:?}"
        );
        // Halfway between one and two attempts: half of the extra valid answers.
        let between = curve.at_tokens(195.0).expect("trials");
        assert!(close(between.valid, 0.7 + 0.5 * 0.41), "{between:?}");
        assert!(close(between.attempts, 1.5), "{between:?}");
    }

    #[test]
    fn a_case_that_always_passes_costs_one_attempt_however_many_are_allowed() {
        let curve = ResampleCurve::new(vec![case(1.0, 80.0)]);
        let rich = curve.at_tokens(10_000.0).expect("trials");
        assert!(close(rich.valid, 1.0) && close(rich.rate, 1.0), "{rich:?}");
        assert!(close(rich.attempts, 1.0), "{rich:?}");
        assert_eq!(curve.points(1e9), vec![(0.0, 0.0), (80.0, 1.0)]);
    }

    #[test]
    fn a_case_that_never_passes_buys_nothing() {
        let curve = ResampleCurve::new(vec![case(0.0, 10.0)]);
        let estimate = curve.at_tokens(55.0).expect("trials");
        assert_eq!(estimate.valid, 0.0);
        assert!(close(estimate.attempts, 5.5), "{estimate:?}");
        assert_eq!(ResampleCurve::new(Vec::new()).at_tokens(5.0), None);
    }

    #[test]
    fn the_curve_rises_with_tokens_towards_every_case_that_can_pass() {
        let curve = ResampleCurve::new(vec![case(0.3, 20.0), case(0.0, 20.0)]);
        let points = curve.points(400.0);
        assert!(points
            .windows(2)
            .all(|w| w[1].0 > w[0].0 && w[1].1 >= w[0].1));
        let last = points.last().copied().unwrap_or_default();
        assert!(last.0 >= 400.0, "{last:?}");
        assert!(
            last.1 < 0.5 && last.1 > 0.49,
            "half the cases can pass: {last:?}"
        );
    }

    #[test]
    fn spread_out_cases_gain_less_from_resampling() {
        // p uniform on 0..1 (Beta(1, 1)): two attempts give 1 − E[(1 − p)²] = 2/3, where a
        // known p of 1/2 gives 3/4; the second attempt is made 1/2 of the time either way.
        let uniform = CaseResample {
            strength: 2.0,
            ..case(0.5, 10.0)
        };
        let (valid, tokens) = ResampleCurve::new(vec![uniform]).at_attempts(2);
        assert!(
            close(valid, 2.0 / 3.0) && close(tokens, 15.0),
            "{valid} {tokens}"
        );
        let (known, _) = ResampleCurve::new(vec![case(0.5, 10.0)]).at_attempts(2);
        assert!(close(known, 0.75));
    }

    fn samples(passed: u64, samples: u64) -> Samples {
        Samples {
            passed,
            samples,
            ..Samples::default()
        }
    }

    #[test]
    fn the_prior_is_fitted_to_the_spread_between_cases() {
        // One sample per case cannot tell cases apart: every case shares the rate.
        let one_each: Vec<Samples> = (0..10).map(|i| samples(u64::from(i < 3), 1)).collect();
        let (mean, strength) = fit_prior(&one_each);
        assert!(close(mean, 0.3) && strength.is_infinite());
        // Four samples a case, each case 2 of 4: no spread beyond noise.
        let (mean, strength) = fit_prior(&vec![samples(2, 4); 10]);
        assert!(close(mean, 0.5) && strength.is_infinite());
        // All or nothing: as spread out as can be.
        let mut split = vec![samples(4, 4); 5];
        split.extend(vec![samples(0, 4); 5]);
        let (mean, strength) = fit_prior(&split);
        assert!(close(mean, 0.5) && strength < 0.01, "{strength}");
        // Cases at 3/4 and 1/4 of four samples: a spread of 1/16, just the noise of four
        // samples of a shared 1/2.
        let mut noise = vec![samples(3, 4); 5];
        noise.extend(vec![samples(1, 4); 5]);
        assert!(fit_prior(&noise).1.is_infinite());
        // Cases at 4/4 and 1/4: μ = 5/8, spread 9/64 = 0.6 μ(1 − μ), so
        // ρ = (0.6 − 1/4) / (3/4) = 7/15 and α + β = 1/ρ − 1 = 8/7.
        let mut some = vec![samples(4, 4); 5];
        some.extend(vec![samples(1, 4); 5]);
        let (mean, strength) = fit_prior(&some);
        assert!(
            close(mean, 0.625) && close(strength, 8.0 / 7.0),
            "{strength}"
        );
    }

    #[test]
    fn pass_at_tokens_counts_the_trials_valid_within_each_budget() {
        let points = pass_at_tokens(vec![30, 10, 30, 50], 8);
        assert_eq!(
            points,
            vec![(0.0, 0.0), (10.0, 0.125), (30.0, 0.375), (50.0, 0.5)]
        );
        assert_eq!(valid_per_1k_tokens(3, 600), Some(5.0));
        assert_eq!(valid_per_1k_tokens(3, 0), None);
    }
}
