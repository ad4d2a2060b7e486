//! Which re-ask strategy fixed which issue code, at what token cost: the report's
//! [`StrategyFixes`], counted from each attempt's `reask` and `reask_choice`.
//!
//! Re-asks are counted by the rule the `reask: auto` statistics count them by
//! ([`enforce_core::strategy::reask_effects`]): a re-ask is about the last attempt before it
//! that brought an answer, once for each error code of that answer, and it fixed a code when
//! its own answer, whole (not cut), no longer had it, whatever became of the request.

use crate::read::{AttemptRecord, Record};
use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};

/// What re-asks of one strategy, chosen one way, did about one issue code.
#[derive(Debug, Clone, Serialize)]
pub struct StrategyFixes {
    /// The strategy (`feedback`, `resample`, `constrained`, ...).
    pub strategy: String,
    /// How it was chosen: `ladder` (the configured rung), or `reask: auto`'s reason
    /// (`sampled`, `mean`, `no_data`, `no_chooser`).
    pub chosen: String,
    /// The issue code of the answer re-asked about.
    pub code: String,
    /// Re-asks made.
    pub reasks: u64,
    /// Of those, re-asks whose answer no longer had the code.
    pub fixed: u64,
    /// `fixed / reasks`.
    pub rate: f64,
    /// Of the re-asks, those whose runner reported token usage.
    pub with_usage: u64,
    /// Tokens (input + output) those re-asks spent.
    pub tokens: u64,
    /// Tokens spent per fix, over the re-asks with usage: `None` without a fix among them.
    pub tokens_per_fix: Option<f64>,
}

/// (reasks, fixed, with_usage, fixed_with_usage, tokens).
type Counts = (u64, u64, u64, u64, u64);

/// Counts re-asks by (strategy, chosen, code), record by record.
#[derive(Debug, Default)]
pub struct StrategyCounter {
    counts: BTreeMap<(String, String, String), Counts>,
}

impl enforce_core::strategy::ReaskedAttempt for AttemptRecord {
    type Strategy = str;

    fn reask(&self) -> Option<&str> {
        self.reask.as_deref()
    }

    fn runner_failed(&self) -> bool {
        self.runner_error.is_some()
    }

    fn error_codes(&self) -> Vec<&str> {
        let codes: BTreeSet<&str> = self
            .issues
            .iter()
            .filter(|i| i.severity == enforce_core::Severity::Error)
            .map(|i| i.code.as_str())
            .collect();
        codes.into_iter().collect()
    }

    fn cut(&self) -> bool {
        self.cut.is_some()
    }
}

impl StrategyCounter {
    /// Counts the re-asks of `record`.
    pub fn add(&mut self, record: &Record) {
        let mut attempts: Vec<&AttemptRecord> = record.attempts.iter().collect();
        attempts.sort_by_key(|a| a.number);
        for effect in enforce_core::strategy::reask_effects(attempts) {
            let attempt = effect.attempt;
            let chosen = attempt
                .reask_choice
                .as_ref()
                .map_or("ladder", |c| c.by.as_str());
            let key = (
                effect.strategy.to_string(),
                chosen.to_string(),
                effect.code.to_string(),
            );
            let slot = self.counts.entry(key).or_default();
            slot.0 += 1;
            slot.1 += u64::from(effect.fixed);
            if let Some(u) = attempt.usage {
                slot.2 += 1;
                slot.3 += u64::from(effect.fixed);
                slot.4 = slot
                    .4
                    .saturating_add(u.input_tokens.saturating_add(u.output_tokens));
            }
        }
    }

    /// The rows, most re-asks first.
    pub fn finish(self) -> Vec<StrategyFixes> {
        let mut rows: Vec<StrategyFixes> = self
            .counts
            .into_iter()
            .map(
                |(
                    (strategy, chosen, code),
                    (reasks, fixed, with_usage, fixed_with_usage, tokens),
                )| {
                    StrategyFixes {
                        strategy,
                        chosen,
                        code,
                        reasks,
                        fixed,
                        rate: if reasks == 0 {
                            0.0
                        } else {
                            fixed as f64 / reasks as f64
                        },
                        with_usage,
                        tokens,
                        tokens_per_fix: (fixed_with_usage > 0)
                            .then(|| tokens as f64 / fixed_with_usage as f64),
                    }
                },
            )
            .collect();
        rows.sort_by_key(|r| std::cmp::Reverse(r.reasks));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn issues(codes: &[&str]) -> String {
        let issues: Vec<String> = codes
            .iter()
            .map(|c| format!(r#"{{"validator": "v", "code": "{c}", "severity": "error"}}"#))
            .collect();
        format!("[{}]", issues.join(", "))
    }

    /// An audit line with the given attempts' JSON.
    fn line(attempts: &[String]) -> Record {
        let text = format!(
            r#"{{"status": "passed", "attempts": [{}]}}"#,
            attempts.join(", ")
        );
        serde_json::from_str(&text).expect("an audit record")
    }

    fn attempt(number: u32, codes: &[&str], extra: &str) -> String {
        format!(
            r#"{{"number": {number}, "issues": {}{extra}}}"#,
            issues(codes)
        )
    }

    fn row<'a>(
        rows: &'a [StrategyFixes],
        strategy: &str,
        chosen: &str,
        code: &str,
    ) -> &'a StrategyFixes {
        rows.iter()
            .find(|r| {
                (r.strategy.as_str(), r.chosen.as_str(), r.code.as_str())
                    == (strategy, chosen, code)
            })
            .unwrap_or_else(|| panic!("no row {strategy} {chosen} {code}: {rows:?}"))
    }

    #[test]
    fn each_reask_counts_per_code_of_the_answer_it_was_about() {
        let usage =
            |i: u64, o: u64| format!(r#", "usage": {{"input_tokens": {i}, "output_tokens": {o}}}"#);
        let mut counter = StrategyCounter::default();
        // The ladder's feedback fixes A but not B; auto's resample then fixes B.
        counter.add(&line(&[
            attempt(1, &["A", "B"], ""),
            attempt(
                2,
                &["B"],
                &format!(r#", "reask": "feedback"{}"#, usage(40, 10)),
            ),
            attempt(
                3,
                &[],
                &format!(
                    r#", "reask": "resample", "reask_choice": {{"by": "mean"}}{}"#,
                    usage(20, 5)
                ),
            ),
        ]));
        // A cut answer fixes nothing, though it showed no error yet.
        counter.add(&line(&[
            attempt(1, &["A"], ""),
            attempt(
                2,
                &[],
                r#", "reask": "resample", "reask_choice": {"by": "sampled"}, "cut": {"bytes": 9}"#,
            ),
        ]));
        // A re-ask the runner failed is no answer: the next re-ask is about attempt 1's.
        counter.add(&line(&[
            attempt(1, &["A"], ""),
            attempt(
                2,
                &[],
                r#", "reask": "feedback", "runner_error": {"kind": "timeout"}"#,
            ),
            attempt(
                3,
                &[],
                r#", "reask": "resample", "reask_choice": {"by": "mean"}"#,
            ),
        ]));
        let rows = counter.finish();
        assert_eq!(rows.len(), 5, "{rows:?}");
        let a = row(&rows, "feedback", "ladder", "A");
        assert_eq!(
            (a.reasks, a.fixed, a.tokens, a.tokens_per_fix),
            (1, 1, 50, Some(50.0))
        );
        let b = row(&rows, "feedback", "ladder", "B");
        assert_eq!((b.reasks, b.fixed, b.tokens_per_fix), (1, 0, None));
        let resample_b = row(&rows, "resample", "mean", "B");
        assert_eq!(
            (resample_b.fixed, resample_b.tokens_per_fix),
            (1, Some(25.0))
        );
        let cut = row(&rows, "resample", "sampled", "A");
        assert_eq!((cut.reasks, cut.fixed), (1, 0));
        let after_failure = row(&rows, "resample", "mean", "A");
        assert_eq!(
            (
                after_failure.reasks,
                after_failure.fixed,
                after_failure.with_usage
            ),
            (1, 1, 0)
        );
    }

    #[test]
    fn the_report_shows_the_table_in_text_html_and_json() {
        let text = r#"{"status": "passed", "attempts": [
            {"number": 1, "issues": [{"validator": "v", "code": "NO_JSON", "severity": "error"}]},
            {"number": 2, "issues": [], "reask": "resample", "reask_choice": {"by": "mean"},
             "usage": {"input_tokens": 30, "output_tokens": 12}}]}"#;
        let record: Record = serde_json::from_str(text).unwrap();
        let mut aggregator = crate::Aggregator::new(crate::Options::default());
        aggregator.add(&record);
        let report = aggregator.finish(Vec::new(), None);
        let shown = crate::text::render(&report, 10);
        let table = shown
            .split("Re-ask strategies")
            .nth(1)
            .expect("the strategies table");
        let row = table
            .lines()
            .find(|l| l.contains("NO_JSON"))
            .expect("a row for the code");
        let cells: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(
            cells,
            ["resample", "mean", "NO_JSON", "1", "1", "100%", "42", "42"]
        );
        let page = crate::html::render(&report, 10).unwrap();
        assert!(page.contains("Fix rate by re-ask strategy"), "html");
        let json = serde_json::to_value(&report).unwrap();
        assert_eq!(json["strategies"][0]["tokens_per_fix"], 42.0);
    }
}
