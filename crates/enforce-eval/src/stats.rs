//! The statistics of an eval: Wilson score intervals for rates and the exact sign test
//! (McNemar's exact test) for paired arms.

use serde::{Deserialize, Serialize};

/// A rate with its 95 % Wilson score interval.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rate {
    /// Successes.
    pub k: u64,
    /// Trials.
    pub n: u64,
    /// k / n (0 when n is 0).
    pub rate: f64,
    /// Lower bound of the 95 % interval.
    pub low: f64,
    /// Upper bound of the 95 % interval.
    pub high: f64,
}

/// The 97.5th percentile of the standard normal distribution.
const Z95: f64 = 1.959_963_984_540_054;

impl Rate {
    /// `k` of `n`, with the Wilson interval (0..1 when `n` is 0: nothing is known).
    pub fn wilson(k: u64, n: u64) -> Rate {
        if n == 0 {
            return Rate {
                k,
                n,
                rate: 0.0,
                low: 0.0,
                high: 1.0,
            };
        }
        let nf = n as f64;
        let p = k as f64 / nf;
        let z2 = Z95 * Z95;
        let denominator = 1.0 + z2 / nf;
        let centre = (p + z2 / (2.0 * nf)) / denominator;
        let half = Z95 * (p * (1.0 - p) / nf + z2 / (4.0 * nf * nf)).sqrt() / denominator;
        Rate {
            k,
            n,
            rate: p,
            low: (centre - half).max(0.0),
            high: (centre + half).min(1.0),
        }
    }

    /// `73% [52–87%]`.
    pub fn display(&self) -> String {
        if self.n == 0 {
            return "-".into();
        }
        format!(
            "{:.0}% [{:.0}–{:.0}%]",
            self.rate * 100.0,
            self.low * 100.0,
            self.high * 100.0
        )
    }
}

/// The two-sided exact sign test of `b` against `c` discordant pairs (McNemar's exact test):
/// the chance, if both arms were equally good, of a split at least this uneven.
pub fn sign_test(b: u64, c: u64) -> f64 {
    let n = b + c;
    if n == 0 {
        return 1.0;
    }
    let low = b.min(c);
    // Σ_{i ≤ low} C(n, i) / 2^n, in logs so that large n does not overflow.
    let ln_half_n = n as f64 * 0.5f64.ln();
    let mut ln_choose = 0.0; // ln C(n, 0)
    let mut tail = 0.0;
    for i in 0..=low {
        if i > 0 {
            ln_choose += ((n - i + 1) as f64).ln() - (i as f64).ln();
        }
        tail += (ln_choose + ln_half_n).exp();
    }
    (2.0 * tail).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wilson_matches_known_values() {
        // Reference values: the Wilson interval for 6/20 is 14.5 %–51.9 %.
        let r = Rate::wilson(6, 20);
        assert!((r.low - 0.1455).abs() < 5e-4, "{r:?}");
        assert!((r.high - 0.5190).abs() < 5e-4, "{r:?}");
        let r = Rate::wilson(0, 20);
        assert_eq!(r.low, 0.0);
        assert!((r.high - 0.1611).abs() < 5e-4, "{r:?}");
        let r = Rate::wilson(20, 20);
        assert_eq!(r.high, 1.0);
        assert!((r.low - 0.8389).abs() < 5e-4, "{r:?}");
        assert_eq!(Rate::wilson(0, 0).display(), "-");
    }

    #[test]
    fn sign_test_matches_the_binomial() {
        assert_eq!(sign_test(0, 0), 1.0);
        // 0 of 5: 2 · (1/32) = 0.0625.
        assert!((sign_test(0, 5) - 0.0625).abs() < 1e-12);
        assert!((sign_test(5, 0) - 0.0625).abs() < 1e-12);
        // 1 vs 9: 2 · (1 + 10) / 1024.
        assert!((sign_test(1, 9) - 22.0 / 1024.0).abs() < 1e-12);
        assert_eq!(sign_test(3, 3), 1.0);
        assert!(sign_test(0, 2000) < 1e-100);
    }
}
