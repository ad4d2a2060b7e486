//! The `reask: auto` statistics replicas share: each replica adds the counts it recorded to
//! shared counters (one per (model, profile, code, strategy) and count, so adding is all a
//! replica ever does and none overwrites another's) and reads the sum back.
//!
//! The counters of one statistics file start from the file's counts, added once by the first
//! replica to find them missing; after that the file written back is the sum, and a replica
//! restarted from it does not add it again.

use crate::shared::ReplicaState;
use enforce_core::policy::Reask;
use enforce_core::strategy::{LiveStats, StatsKey, StrategyStats, Tally};

/// One shared counter: which tally and which of its counts, as the store names it (the
/// JSON of this tuple).
type Field = (String, String, String, Reask, Count);

/// The counts of a [`Tally`], each a counter of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Count {
    Attempts,
    Fixed,
    Valid,
    Tokens,
    TokensCounted,
    RunnerUs,
}

impl Count {
    const ALL: [Count; 6] = [
        Count::Attempts,
        Count::Fixed,
        Count::Valid,
        Count::Tokens,
        Count::TokensCounted,
        Count::RunnerUs,
    ];

    fn of(self, tally: &Tally) -> u64 {
        match self {
            Count::Attempts => tally.attempts,
            Count::Fixed => tally.fixed,
            Count::Valid => tally.valid,
            Count::Tokens => tally.tokens,
            Count::TokensCounted => tally.tokens_counted,
            Count::RunnerUs => tally.runner_us,
        }
    }

    fn tally(self, n: u64) -> Tally {
        let mut tally = Tally::default();
        match self {
            Count::Attempts => tally.attempts = n,
            Count::Fixed => tally.fixed = n,
            Count::Valid => tally.valid = n,
            Count::Tokens => tally.tokens = n,
            Count::TokensCounted => tally.tokens_counted = n,
            Count::RunnerUs => tally.runner_us = n,
        }
        tally
    }
}

/// The counters `stats` adds to: each nonzero count under its field's name.
pub(crate) fn counters(stats: &StrategyStats) -> Vec<(String, u64)> {
    let mut counters = Vec::new();
    for (key, tally) in stats.iter() {
        for count in Count::ALL {
            let n = count.of(tally);
            if n == 0 {
                continue;
            }
            let field: Field = (
                key.model.clone(),
                key.profile.clone(),
                key.code.clone(),
                key.strategy,
                count,
            );
            // Strings and enums: serialization cannot fail.
            if let Ok(name) = serde_json::to_string(&field) {
                counters.push((name, n));
            }
        }
    }
    counters
}

/// The statistics the counters hold; a field of another shape (another enforce's, say) is
/// left out.
pub(crate) fn from_counters(counters: impl IntoIterator<Item = (String, u64)>) -> StrategyStats {
    let mut stats = StrategyStats::default();
    for (name, n) in counters {
        let Ok((model, profile, code, strategy, count)) = serde_json::from_str::<Field>(&name)
        else {
            continue;
        };
        let key = StatsKey {
            model,
            profile,
            code,
            strategy,
        };
        stats.add(key, count.tally(n));
    }
    stats
}

impl ReplicaState {
    /// Starts the shared statistics `name` (a statistics file's name) from `initial` (the
    /// file's counts as read), unless a replica did so before: `false` when the store failed,
    /// and it is to be tried again before the counts are shared.
    pub async fn seed_stats(&self, name: &str, initial: &StrategyStats) -> bool {
        let initial = counters(initial);
        self.observed("stats", self.store.seed_stats(name, &initial))
            .await
            .is_ok()
    }

    /// Adds the counts recorded in `live` since the last call to the shared statistics
    /// `name`, then replaces `live`'s counts by the sum every replica made. When the store
    /// fails, the counts recorded here are kept for the next call and `live` goes on with its
    /// own.
    pub async fn share_stats(&self, name: &str, live: &LiveStats) {
        let recorded = live.take_unshared();
        let added = self
            .observed("stats", self.store.add_stats(name, &counters(&recorded)))
            .await;
        if added.is_err() {
            live.return_unshared(&recorded);
            return;
        }
        if let Ok(Some(all)) = self.observed("stats", self.store.load_stats(name)).await {
            live.set_shared(from_counters(all));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: &str, strategy: Reask) -> StatsKey {
        StatsKey {
            model: "m".into(),
            profile: "p".into(),
            code: code.into(),
            strategy,
        }
    }

    #[test]
    fn counters_read_back_as_the_statistics_they_count_and_add_up() {
        let mut stats = StrategyStats::default();
        let tally = Tally {
            attempts: 4,
            fixed: 3,
            valid: 2,
            tokens: 400,
            tokens_counted: 4,
            runner_us: 9,
        };
        stats.add(key("A", Reask::Resample), tally);
        stats.add(
            key("B", Reask::Feedback),
            Tally {
                attempts: 1,
                ..Tally::default()
            },
        );
        assert_eq!(from_counters(counters(&stats)), stats);
        // A counter twice (two replicas' increments read as rows) adds up; a stranger's
        // field is left out.
        let mut twice = counters(&stats);
        twice.extend(counters(&stats));
        twice.push(("not a field".into(), 7));
        let mut doubled = stats.clone();
        doubled.merge(&stats);
        assert_eq!(from_counters(twice), doubled);
    }
}
