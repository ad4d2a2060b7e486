//! Statistics that count the repeats of one case as one cluster: with `--repeats N` the N
//! answers to one prompt are alike (an easy case is easy every time), so treating them as N
//! independent trials would make intervals too narrow and tests too eager.
//!
//! - [`clustered_rate`]: a rate with a Wilson interval on the effective sample size (the
//!   trials divided by the design effect measured between cases).
//! - [`paired`]: two arms on the same cases: the exact sign test over cases, the rate
//!   difference and the minimum detectable effect of the paired design.
//! - [`holm`]: Holm's step-down adjustment of the p-values of every pair of arms.

use crate::stats::{sign_test, Rate};
use serde::{Deserialize, Serialize};

/// The 97.5th percentile of the standard normal distribution (two-sided α = 0.05).
const Z_975: f64 = 1.959_963_984_540_054;
/// The 80th percentile of the standard normal distribution (power 80 %).
const Z_80: f64 = 0.841_621_233_572_914_3;
/// The significance level of the tests and of the minimum detectable effect.
pub const ALPHA: f64 = 0.05;

/// One case in one arm: valid answers among its repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CaseCount {
    /// Valid answers.
    pub valid: u64,
    /// Trials (repeats run).
    pub trials: u64,
}

/// A rate whose interval accounts for repeats of one case.
/// Read back, a rate without the cluster fields (one written before they existed) is that of
/// independent trials.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ClusteredRate {
    /// The rate, with the 95 % Wilson interval computed on `effective_trials`.
    #[serde(flatten)]
    pub rate: Rate,
    /// Cases (clusters).
    pub cases: u64,
    /// The design effect: how much the repeats of a case agree, as the variance of the rate
    /// between cases over the variance independent trials would give (1 = independent; at
    /// most the repeats per case when every case answers alike every time).
    pub design_effect: f64,
    /// The trials divided by the design effect: the sample size the interval is worth.
    pub effective_trials: f64,
}

impl Default for ClusteredRate {
    fn default() -> ClusteredRate {
        ClusteredRate {
            rate: Rate::default(),
            cases: 0,
            design_effect: 1.0,
            effective_trials: 0.0,
        }
    }
}

/// The rate of `cases` with a cluster-robust interval: the design effect is the ratio of the
/// between-case (cluster-robust, without small-sample correction) variance of the rate to the
/// binomial one, never below 1; the Wilson interval is taken at the trials divided by it. With
/// one repeat per case this is exactly the Wilson interval. When every answer agrees (a rate
/// of 0 or 1) the agreement between repeats cannot be measured, and each case counts once.
pub fn clustered_rate(cases: &[CaseCount]) -> ClusteredRate {
    let cases: Vec<CaseCount> = cases.iter().copied().filter(|c| c.trials > 0).collect();
    let n: u64 = cases.iter().map(|c| c.trials).sum();
    let k: u64 = cases.iter().map(|c| c.valid).sum();
    let m = cases.len() as u64;
    if n == 0 {
        return ClusteredRate {
            rate: Rate::wilson(0, 0),
            cases: 0,
            design_effect: 1.0,
            effective_trials: 0.0,
        };
    }
    let nf = n as f64;
    let p = k as f64 / nf;
    let design_effect = if k == 0 || k == n {
        nf / m as f64
    } else {
        let between: f64 = cases
            .iter()
            .map(|c| (c.valid as f64 - p * c.trials as f64).powi(2))
            .sum::<f64>()
            / (nf * nf);
        let binomial = p * (1.0 - p) / nf;
        (between / binomial).max(1.0)
    };
    let effective_trials = nf / design_effect;
    let (low, high) = wilson_bounds(p, effective_trials);
    ClusteredRate {
        rate: Rate {
            k,
            n,
            rate: p,
            low,
            high,
        },
        cases: m,
        design_effect,
        effective_trials,
    }
}

/// The 95 % Wilson bounds of a rate `p` over `n` trials (`n` need not be whole).
fn wilson_bounds(p: f64, n: f64) -> (f64, f64) {
    if n <= 0.0 {
        return (0.0, 1.0);
    }
    let z2 = Z_975 * Z_975;
    let denominator = 1.0 + z2 / n;
    let centre = (p + z2 / (2.0 * n)) / denominator;
    let half = Z_975 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / denominator;
    ((centre - half).max(0.0), (centre + half).min(1.0))
}

/// Two arms on the same cases: `a[i]` and `b[i]` are case i's counts over the repeats both
/// arms ran.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PairedTest {
    /// Cases where arm a was valid more often than arm b.
    pub cases_a_better: u64,
    /// Cases where arm b was valid more often.
    pub cases_b_better: u64,
    /// Cases compared.
    pub cases: u64,
    /// Valid rate of a minus valid rate of b, over the paired trials.
    pub difference: f64,
    /// Two-sided exact sign test over cases (`cases_a_better` against `cases_b_better`): with
    /// one repeat, McNemar's exact test.
    pub p_value: f64,
    /// The smallest difference of valid rates this run would detect with 80 % power at
    /// two-sided α = 0.05 (`null`: none, too few cases for the test to ever reach α).
    pub minimum_detectable_effect: Option<f64>,
}

/// The paired comparison of two arms case by case (see [`PairedTest`]). The minimum
/// detectable effect is (z₀.₉₇₅ + z₀.₈₀) · s / √m, s the standard deviation of the per-case
/// differences of valid rates and m the cases, but never below the smallest difference the
/// sign test can call significant at all (the fewest cases, all favouring one arm, that reach
/// α, over m): with identical arms s is 0 and that floor is the answer.
pub fn paired(a: &[CaseCount], b: &[CaseCount]) -> PairedTest {
    let mut differences = Vec::new();
    let (mut a_better, mut b_better) = (0u64, 0u64);
    let (mut weighted, mut trials) = (0.0, 0u64);
    for (x, y) in a.iter().zip(b) {
        if x.trials == 0 || y.trials == 0 {
            continue;
        }
        let d = x.valid as f64 / x.trials as f64 - y.valid as f64 / y.trials as f64;
        if d > 0.0 {
            a_better += 1;
        } else if d < 0.0 {
            b_better += 1;
        }
        let n = x.trials.min(y.trials);
        weighted += d * n as f64;
        trials += n;
        differences.push(d);
    }
    let m = differences.len();
    PairedTest {
        cases_a_better: a_better,
        cases_b_better: b_better,
        cases: m as u64,
        difference: if trials == 0 {
            0.0
        } else {
            weighted / trials as f64
        },
        p_value: sign_test(a_better, b_better),
        minimum_detectable_effect: minimum_detectable_effect(&differences),
    }
}

/// See [`paired`].
fn minimum_detectable_effect(differences: &[f64]) -> Option<f64> {
    let m = differences.len();
    let fewest = fewest_significant_cases();
    if (m as u64) < fewest {
        return None;
    }
    let mf = m as f64;
    let mean = differences.iter().sum::<f64>() / mf;
    let variance = if m > 1 {
        differences.iter().map(|d| (d - mean).powi(2)).sum::<f64>() / (mf - 1.0)
    } else {
        0.0
    };
    let normal = (Z_975 + Z_80) * variance.sqrt() / mf.sqrt();
    let effect = normal.max(fewest as f64 / mf);
    (effect <= 1.0).then_some(effect)
}

/// The fewest cases, all favouring one arm, for which the two-sided sign test falls below
/// [`ALPHA`].
fn fewest_significant_cases() -> u64 {
    (1..).find(|&n| sign_test(0, n) < ALPHA).unwrap_or(u64::MAX)
}

/// Holm's step-down adjustment: the p-values of a family of tests made comparable with α
/// (the i-th smallest multiplied by the number of tests left, kept monotone, at most 1), in
/// the order given.
pub fn holm(p_values: &[f64]) -> Vec<f64> {
    let m = p_values.len();
    let mut order: Vec<usize> = (0..m).collect();
    order.sort_by(|&i, &j| p_values[i].total_cmp(&p_values[j]));
    let mut adjusted = vec![1.0; m];
    let mut running = 0.0f64;
    for (rank, &i) in order.iter().enumerate() {
        running = running.max(((m - rank) as f64 * p_values[i]).min(1.0));
        adjusted[i] = running;
    }
    adjusted
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cases(counts: &[(u64, u64)]) -> Vec<CaseCount> {
        counts
            .iter()
            .map(|&(valid, trials)| CaseCount { valid, trials })
            .collect()
    }

    fn close(a: f64, b: f64, tolerance: f64) -> bool {
        (a - b).abs() < tolerance
    }

    #[test]
    fn one_repeat_per_case_gives_the_wilson_interval() {
        let mut counts = vec![(1, 1); 6];
        counts.extend(vec![(0, 1); 14]);
        let r = clustered_rate(&cases(&counts));
        assert_eq!(r.rate, Rate::wilson(6, 20));
        assert_eq!(r.design_effect, 1.0);
    }

    #[test]
    fn correlated_repeats_widen_the_interval_to_one_trial_per_case() {
        // Ten cases of four repeats, half the answers valid. Independent repeats (each case
        // 2 of 4): the interval of 20 of 40 trials, 35.2 %–64.8 %.
        let independent = clustered_rate(&cases(&[(2, 4); 10]));
        assert_eq!(independent.design_effect, 1.0);
        assert!(close(independent.rate.low, 0.3520, 5e-4), "{independent:?}");
        assert!(
            close(independent.rate.high, 0.6480, 5e-4),
            "{independent:?}"
        );
        // Every case all or nothing: the design effect is the 4 repeats, the interval that
        // of 5 of 10 cases, 23.7 %–76.3 %.
        let mut alike = vec![(4, 4); 5];
        alike.extend(vec![(0, 4); 5]);
        let correlated = clustered_rate(&cases(&alike));
        assert!(close(correlated.design_effect, 4.0, 1e-9), "{correlated:?}");
        assert!(close(correlated.effective_trials, 10.0, 1e-9));
        assert!(close(correlated.rate.low, 0.2366, 5e-4), "{correlated:?}");
        assert!(close(correlated.rate.high, 0.7634, 5e-4), "{correlated:?}");
        assert_eq!(correlated.rate.rate, independent.rate.rate);
    }

    #[test]
    fn a_rate_of_zero_counts_each_case_once() {
        let r = clustered_rate(&cases(&[(0, 5); 20]));
        assert_eq!((r.rate.k, r.rate.n), (0, 100));
        // The upper bound of 0 of 20, not of 0 of 100.
        assert!(close(r.rate.high, Rate::wilson(0, 20).high, 1e-12), "{r:?}");
        assert!(clustered_rate(&[]).rate.high == 1.0);
    }

    #[test]
    fn holm_matches_the_textbook_adjustment() {
        // R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02.
        let adjusted = holm(&[0.01, 0.04, 0.03, 0.005]);
        for (got, want) in adjusted.iter().zip([0.03, 0.06, 0.06, 0.02]) {
            assert!(close(*got, want, 1e-12), "{adjusted:?}");
        }
        assert_eq!(holm(&[0.5, 0.9]), vec![1.0, 1.0]);
        assert!(holm(&[]).is_empty());
    }

    #[test]
    fn the_paired_test_counts_cases_not_repeats() {
        // Three cases where a wins every one of four repeats: 12 trials but 3 cases, too
        // few for the sign test (2 · 1/8 = 0.25).
        let a = cases(&[(4, 4), (4, 4), (4, 4), (2, 4)]);
        let b = cases(&[(0, 4), (0, 4), (0, 4), (2, 4)]);
        let t = paired(&a, &b);
        assert_eq!((t.cases_a_better, t.cases_b_better, t.cases), (3, 0, 4));
        assert!(close(t.p_value, 0.25, 1e-12), "{t:?}");
        assert!(close(t.difference, 0.75, 1e-12), "{t:?}");
        assert_eq!(t.minimum_detectable_effect, None, "4 cases never reach α");
    }

    #[test]
    fn the_minimum_detectable_effect_follows_the_spread_of_the_differences() {
        // 100 cases, a better on 10: s = √(9 / 99), MDE = 2.8016 · s / 10 = 8.45 points.
        let mut a = vec![(1, 1); 10];
        a.extend(vec![(0, 1); 90]);
        let b = vec![(0, 1); 100];
        let t = paired(&cases(&a), &cases(&b));
        let mde = t.minimum_detectable_effect.expect("enough cases");
        assert!(close(mde, 0.08447, 5e-5), "{mde}");
        // Identical arms: the floor, the 6 cases the sign test needs, over 100.
        let same = paired(&cases(&b), &cases(&b));
        assert_eq!(fewest_significant_cases(), 6);
        assert!(close(
            same.minimum_detectable_effect.unwrap_or(0.0),
            0.06,
            1e-12
        ));
        assert_eq!(same.p_value, 1.0);
    }
}
