//! [`LiveStats`]: statistics a running service adds its outcomes to while its choosers read
//! them, and [`LiveChooser`], the chooser that reads them at each choice.

use super::{Choice, ChoiceInput, ReaskChooser, StrategyStats, ThompsonChooser, ThompsonSettings};
use crate::Outcome;
use std::sync::{Arc, PoisonError, RwLock};

/// Statistics kept up to date from live outcomes, shared by the choosers of every enforcer
/// that chooses by them (std locks only: the loop never waits on I/O for them).
///
/// Besides the current counts it keeps the counts recorded since they were last
/// [taken](LiveStats::take_unshared), so that replicas add only what is new to shared
/// counters and [replace](LiveStats::set_shared) theirs with the sum every replica made.
///
/// ```
/// use enforce_core::strategy::{LiveStats, StrategyStats};
///
/// let live = LiveStats::new(StrategyStats::default());
/// assert!(live.snapshot().is_empty());
/// assert!(live.take_unshared().is_empty());
/// ```
#[derive(Debug, Default)]
pub struct LiveStats {
    counts: RwLock<Counts>,
}

#[derive(Debug, Default)]
struct Counts {
    /// What choices are made by.
    current: StrategyStats,
    /// Recorded here and not yet taken to be shared.
    unshared: StrategyStats,
}

impl LiveStats {
    /// Live statistics starting from `initial` (a statistics file's counts).
    pub fn new(initial: StrategyStats) -> Self {
        LiveStats {
            counts: RwLock::new(Counts {
                current: initial,
                unshared: StrategyStats::default(),
            }),
        }
    }

    /// Adds the re-asks of `outcome` (of `model` under `profile`), as
    /// [`StrategyStats::record`] counts them.
    pub fn record(&self, model: &str, profile: &str, outcome: &Outcome) {
        let mut added = StrategyStats::default();
        added.record(model, profile, outcome);
        if added.is_empty() {
            return;
        }
        let mut counts = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        counts.current.merge(&added);
        counts.unshared.merge(&added);
    }

    /// The current counts (what a statistics file written now holds).
    pub fn snapshot(&self) -> StrategyStats {
        self.read(|stats| stats.clone())
    }

    /// Runs `f` over the current counts, under the read lock.
    pub fn read<T>(&self, f: impl FnOnce(&StrategyStats) -> T) -> T {
        let counts = self.counts.read().unwrap_or_else(PoisonError::into_inner);
        f(&counts.current)
    }

    /// The counts recorded since the last call, to be added to shared counters. When adding
    /// them fails, [`return_unshared`](LiveStats::return_unshared) keeps them for the next
    /// time.
    pub fn take_unshared(&self) -> StrategyStats {
        let mut counts = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        std::mem::take(&mut counts.unshared)
    }

    /// Gives back counts [taken](LiveStats::take_unshared) that could not be shared.
    pub fn return_unshared(&self, counts: &StrategyStats) {
        let mut own = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        own.unshared.merge(counts);
    }

    /// Replaces the current counts by `shared` (every replica's, read back from the shared
    /// counters) plus what was recorded here since the last
    /// [`take_unshared`](LiveStats::take_unshared), which `shared` cannot hold yet.
    pub fn set_shared(&self, shared: StrategyStats) {
        let mut counts = self.counts.write().unwrap_or_else(PoisonError::into_inner);
        let mut current = shared;
        current.merge(&counts.unshared);
        counts.current = current;
    }
}

/// The chooser of `reask: auto` over [`LiveStats`], for one model and profile: each choice is
/// a [`ThompsonChooser`]'s over the counts as they are at that moment, and each outcome it is
/// [told of](ReaskChooser::record) adds to them. Building the Thompson chooser filters the
/// counts of the model and profile at each re-ask: a statistics table holds one row per
/// (model, profile, code, strategy), small next to a model call.
#[derive(Debug, Clone)]
pub struct LiveChooser {
    stats: Arc<LiveStats>,
    model: String,
    profile: String,
    settings: ThompsonSettings,
}

impl LiveChooser {
    /// A chooser for `model` under `profile`, over `stats`.
    pub fn new(
        stats: Arc<LiveStats>,
        model: &str,
        profile: &str,
        settings: ThompsonSettings,
    ) -> Self {
        LiveChooser {
            stats,
            model: model.to_string(),
            profile: profile.to_string(),
            settings,
        }
    }

    /// The statistics it chooses by.
    pub fn stats(&self) -> &Arc<LiveStats> {
        &self.stats
    }
}

impl ReaskChooser for LiveChooser {
    fn choose(&self, input: &ChoiceInput<'_>) -> Choice {
        let chooser = self
            .stats
            .read(|stats| ThompsonChooser::new(stats, &self.model, &self.profile, self.settings));
        chooser.choose(input)
    }

    fn record(&self, outcome: &Outcome) {
        self.stats.record(&self.model, &self.profile, outcome);
    }
}
