//! The one rule by which re-asks are counted: what each re-ask did about the errors of the
//! answer before it. [`StrategyStats::record`](super::StrategyStats::record) counts
//! enforce's own attempts by it, and `enforce report` the attempts of audit records.

use crate::Attempt;

/// An attempt as the re-ask counting reads it.
pub trait ReaskedAttempt {
    /// How the attempt names the strategy that asked for it.
    type Strategy: ?Sized;
    /// The strategy of the re-ask that asked for this attempt; `None` for a first attempt.
    fn reask(&self) -> Option<&Self::Strategy>;
    /// The runner failed: there is no answer to count.
    fn runner_failed(&self) -> bool;
    /// The issue codes of the answer's errors, each once.
    fn error_codes(&self) -> Vec<&str>;
    /// The answer was cut short (early abort): it stopped before the rest was written.
    fn cut(&self) -> bool;
}

/// What one re-ask did about one error code of the answer it re-asked about.
#[derive(Debug)]
pub struct ReaskEffect<'a, A: ReaskedAttempt + ?Sized> {
    /// The re-ask's attempt.
    pub attempt: &'a A,
    /// Its strategy.
    pub strategy: &'a A::Strategy,
    /// An error code of the last answer before it.
    pub code: &'a str,
    /// Its answer, whole, no longer had an error with `code`.
    pub fixed: bool,
    /// Its answer, whole, had no error at all (as it came, before repairs).
    pub valid: bool,
}

/// Each re-ask of `attempts` (in the order they were made) once per error code of the last
/// answer before it. A re-ask whose runner failed is skipped, and the next one is about the
/// same answer; a cut answer fixes nothing.
pub fn reask_effects<'a, A: ReaskedAttempt>(
    attempts: impl IntoIterator<Item = &'a A>,
) -> Vec<ReaskEffect<'a, A>> {
    let mut effects = Vec::new();
    let mut previous: Option<Vec<&'a str>> = None;
    for attempt in attempts {
        if attempt.runner_failed() {
            continue;
        }
        let codes = attempt.error_codes();
        if let (Some(strategy), Some(about)) = (attempt.reask(), &previous) {
            let whole = !attempt.cut();
            for code in about {
                effects.push(ReaskEffect {
                    attempt,
                    strategy,
                    code,
                    fixed: whole && !codes.contains(code),
                    valid: whole && codes.is_empty(),
                });
            }
        }
        previous = Some(codes);
    }
    effects
}

impl ReaskedAttempt for Attempt {
    type Strategy = crate::policy::Reask;

    fn reask(&self) -> Option<&Self::Strategy> {
        self.reask.as_ref()
    }

    fn runner_failed(&self) -> bool {
        self.runner_error.is_some()
    }

    fn error_codes(&self) -> Vec<&str> {
        crate::issue::error_codes(&self.issues)
    }

    fn cut(&self) -> bool {
        self.cut.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An attempt of the shape an audit record gives: the strategy by name.
    struct Seen {
        reask: Option<&'static str>,
        failed: bool,
        codes: Vec<&'static str>,
        cut: bool,
    }

    impl ReaskedAttempt for Seen {
        type Strategy = str;
        fn reask(&self) -> Option<&str> {
            self.reask
        }
        fn runner_failed(&self) -> bool {
            self.failed
        }
        fn error_codes(&self) -> Vec<&str> {
            self.codes.clone()
        }
        fn cut(&self) -> bool {
            self.cut
        }
    }

    fn seen(reask: Option<&'static str>, codes: &[&'static str]) -> Seen {
        Seen {
            reask,
            failed: false,
            codes: codes.to_vec(),
            cut: false,
        }
    }

    #[test]
    fn a_reask_counts_once_per_error_of_the_last_answer_before_it() {
        let failed = Seen {
            failed: true,
            ..seen(Some("feedback"), &[])
        };
        let cut = Seen {
            cut: true,
            ..seen(Some("resample"), &["C"])
        };
        let attempts = [
            seen(None, &["A", "B"]),
            failed,
            seen(Some("feedback"), &["B"]),
            cut,
            seen(Some("constrained"), &[]),
        ];
        let said: Vec<(&str, &str, bool, bool)> = reask_effects(&attempts)
            .iter()
            .map(|e| (e.strategy, e.code, e.fixed, e.valid))
            .collect();
        assert_eq!(
            said,
            [
                // The failed re-ask is skipped: the next is about the first answer.
                ("feedback", "A", true, false),
                ("feedback", "B", false, false),
                // A cut answer fixes nothing, though B was gone from it.
                ("resample", "B", false, false),
                // The cut answer is the one the next re-ask is about.
                ("constrained", "C", true, true),
            ]
        );
    }
}
