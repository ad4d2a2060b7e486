//! [`StrategyStats`]: what each re-ask strategy achieved, per model, profile and issue code,
//! and its file format.

use crate::{policy::Reask, Outcome};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The version of the statistics file format this enforce reads and writes.
pub const STATS_VERSION: u32 = 1;

/// Which re-asks a [`Tally`] counts: those made with `strategy` about an answer of `model`
/// under `profile` that had an error with `code`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StatsKey {
    /// The model's name as the runner names it (empty when the runner names none).
    pub model: String,
    /// The profile.
    pub profile: String,
    /// The issue code of an error in the answer re-asked about.
    pub code: String,
    /// The strategy of the re-ask.
    pub strategy: Reask,
}

/// What re-asks of one [`StatsKey`] achieved. Counts only add up, so tallies of several
/// evals or replicas merge by addition.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Re-asks made. A re-ask the runner failed (no answer) is not counted: it says nothing
    /// about the strategy.
    pub attempts: u64,
    /// Of those, re-asks whose answer no longer had an error with the code. A cut answer
    /// (early abort) fixes nothing: it stopped before the rest was written.
    pub fixed: u64,
    /// Of those, re-asks whose answer had no error at all, as it came (before repairs).
    pub valid: u64,
    /// Tokens (input + output) the re-asks spent, summed over those whose runner reported
    /// usage (reason-then-format's two calls together).
    pub tokens: u64,
    /// How many re-asks `tokens` sums: the mean is `tokens / tokens_counted`.
    pub tokens_counted: u64,
    /// Time the runner took for the re-asks, in microseconds.
    pub runner_us: u64,
}

impl Tally {
    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tally) {
        self.attempts = self.attempts.saturating_add(other.attempts);
        self.fixed = self.fixed.saturating_add(other.fixed);
        self.valid = self.valid.saturating_add(other.valid);
        self.tokens = self.tokens.saturating_add(other.tokens);
        self.tokens_counted = self.tokens_counted.saturating_add(other.tokens_counted);
        self.runner_us = self.runner_us.saturating_add(other.runner_us);
    }

    /// Mean tokens per re-ask, when any reported usage.
    pub fn mean_tokens(&self) -> Option<f64> {
        (self.tokens_counted > 0).then(|| self.tokens as f64 / self.tokens_counted as f64)
    }
}

/// Per (model, profile, issue code, strategy): the re-asks made, the fixes, tokens and time,
/// as [`record`](StrategyStats::record) reads them from outcomes. What `reask: auto` chooses
/// by (see [`ThompsonChooser`](super::ThompsonChooser)).
///
/// A re-ask about an answer with several error codes counts once for each code. Only re-asks
/// made by a strategy count (an attempt whose `reask` is set): neither the first ask nor the
/// re-ask after a truncated answer, which gets more room by rule.
///
/// The file format (JSON, [`STATS_VERSION`]), one row per key, sorted:
///
/// ```json
/// {"version": 1, "rows": [
///   {"model": "qwen2.5-coder-0.5b", "profile": "city", "code": "INVALID_JSON",
///    "strategy": "resample", "attempts": 12, "fixed": 9, "valid": 7,
///    "tokens": 4100, "tokens_counted": 12, "runner_us": 5300000}
/// ]}
/// ```
///
/// ```
/// use enforce_core::policy::Reask;
/// use enforce_core::strategy::{StatsKey, StrategyStats, Tally};
///
/// let key = StatsKey { model: "m".into(), profile: "p".into(), code: "INVALID_JSON".into(),
///                      strategy: Reask::Resample };
/// let mut a = StrategyStats::default();
/// a.add(key.clone(), Tally { attempts: 3, fixed: 2, valid: 1, ..Tally::default() });
/// let b = StrategyStats::from_json(&a.to_json()).unwrap();
/// a.merge(&b);
/// assert_eq!(a.get(&key).unwrap().attempts, 6);
/// assert!(StrategyStats::from_json(r#"{"version": 9, "rows": []}"#).is_err());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "StatsFile", try_from = "StatsFile")]
pub struct StrategyStats {
    tallies: BTreeMap<StatsKey, Tally>,
}

/// A statistics file that cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StatsError {
    /// Not JSON, or not the shape of a statistics file.
    #[error("not a strategy statistics file: {0}")]
    Json(#[from] serde_json::Error),
    /// Another version of the format.
    #[error("statistics file version {found}; this enforce reads version {STATS_VERSION}")]
    Version {
        /// The file's version.
        found: u32,
    },
}

/// The file as written: the version and the rows.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StatsFile {
    version: u32,
    #[serde(default)]
    rows: Vec<Row>,
}

/// Only the version, read first so that another version is named as such, whatever its rows.
#[derive(Deserialize)]
struct VersionOnly {
    version: u32,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    #[serde(default)]
    model: String,
    profile: String,
    code: String,
    strategy: Reask,
    attempts: u64,
    #[serde(default)]
    fixed: u64,
    #[serde(default)]
    valid: u64,
    #[serde(default)]
    tokens: u64,
    #[serde(default)]
    tokens_counted: u64,
    #[serde(default)]
    runner_us: u64,
}

impl Row {
    fn tally(&self) -> Tally {
        Tally {
            attempts: self.attempts,
            fixed: self.fixed,
            valid: self.valid,
            tokens: self.tokens,
            tokens_counted: self.tokens_counted,
            runner_us: self.runner_us,
        }
    }
}

impl From<StrategyStats> for StatsFile {
    fn from(stats: StrategyStats) -> Self {
        let rows = stats
            .tallies
            .into_iter()
            .map(|(key, tally)| Row {
                model: key.model,
                profile: key.profile,
                code: key.code,
                strategy: key.strategy,
                attempts: tally.attempts,
                fixed: tally.fixed,
                valid: tally.valid,
                tokens: tally.tokens,
                tokens_counted: tally.tokens_counted,
                runner_us: tally.runner_us,
            })
            .collect();
        StatsFile {
            version: STATS_VERSION,
            rows,
        }
    }
}

impl TryFrom<StatsFile> for StrategyStats {
    type Error = StatsError;
    fn try_from(file: StatsFile) -> Result<Self, StatsError> {
        if file.version != STATS_VERSION {
            return Err(StatsError::Version {
                found: file.version,
            });
        }
        let mut stats = StrategyStats::default();
        for row in file.rows {
            let tally = row.tally();
            let key = StatsKey {
                model: row.model,
                profile: row.profile,
                code: row.code,
                strategy: row.strategy,
            };
            stats.add(key, tally);
        }
        Ok(stats)
    }
}

impl StrategyStats {
    /// Reads a statistics file's text: refused when it is another version of the format or
    /// not one at all. Rows with the same key add up.
    pub fn from_json(text: &str) -> Result<Self, StatsError> {
        let VersionOnly { version } = serde_json::from_str(text)?;
        if version != STATS_VERSION {
            return Err(StatsError::Version { found: version });
        }
        let file: StatsFile = serde_json::from_str(text)?;
        StrategyStats::try_from(file)
    }

    /// The file's text (pretty JSON, rows sorted by key).
    pub fn to_json(&self) -> String {
        // Strings, integers and enums only: serialization cannot fail.
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// Adds `tally` to `key`'s.
    pub fn add(&mut self, key: StatsKey, tally: Tally) {
        self.tallies.entry(key).or_default().add(&tally);
    }

    /// Adds every tally of `other`: several evals, or replicas, add up.
    pub fn merge(&mut self, other: &StrategyStats) {
        for (key, tally) in &other.tallies {
            self.add(key.clone(), *tally);
        }
    }

    /// The tally of `key`, if any re-ask was counted for it.
    pub fn get(&self, key: &StatsKey) -> Option<&Tally> {
        self.tallies.get(key)
    }

    /// Every key and tally, sorted by key.
    pub fn iter(&self) -> impl Iterator<Item = (&StatsKey, &Tally)> {
        self.tallies.iter()
    }

    /// `true` when nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.tallies.is_empty()
    }

    /// Counts the re-asks of `outcome` (one enforcement of `model` under `profile`): each
    /// attempt a strategy asked (its `reask`) is a re-ask about the last attempt before it
    /// that brought an answer, counted under each error code of that answer.
    pub fn record(&mut self, model: &str, profile: &str, outcome: &Outcome) {
        for effect in super::reask_effects(&outcome.attempts) {
            let usage = effect.attempt.usage;
            let tally = Tally {
                attempts: 1,
                fixed: u64::from(effect.fixed),
                valid: u64::from(effect.valid),
                tokens: usage.map_or(0, |u| u.total()),
                tokens_counted: u64::from(usage.is_some()),
                runner_us: effect.attempt.runner_us,
            };
            let key = StatsKey {
                model: model.to_string(),
                profile: profile.to_string(),
                code: effect.code.to_string(),
                strategy: *effect.strategy,
            };
            self.add(key, tally);
        }
    }
}
