//! A profile's `reask: auto`, resolved from `reask_auto:` (defaults and profile layered): the
//! fallback ladder and the strategies go into the policy, the rest is what a caller needs to
//! build the chooser, and the statistics file is read here, not in the loop.

use crate::config::ReaskAutoConfig;
use enforce_core::policy::{AutoReask, Reask};
use enforce_core::strategy::{StrategyStats, ThompsonChooser, ThompsonSettings};
use enforce_core::Policy;
use enforce_validators::BuildError;
use std::path::{Path, PathBuf};

/// A profile's `reask: auto` settings, resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct ReaskAuto {
    /// The statistics file, resolved against the configuration file's directory.
    pub stats: Option<PathBuf>,
    /// The key that names it (`profiles.NAME.reask_auto.stats` or
    /// `defaults.reask_auto.stats`), for errors about the file.
    pub stats_key: String,
    /// How the chooser chooses, but for `explore`: see [`settings`](ReaskAuto::settings).
    settings: ThompsonSettings,
    /// `reask_auto.explore`, when the configuration sets it.
    explore: Option<bool>,
}

impl ReaskAuto {
    /// Reads the statistics file, when one is named: an error that names the file and the
    /// key when it cannot be read or is not a statistics file of this version.
    pub fn read_stats(&self) -> Result<Option<StrategyStats>, BuildError> {
        self.stats
            .as_deref()
            .map(|path| read_stats(path, &self.stats_key))
            .transpose()
    }

    /// How a chooser chooses; `learns` says whether the outcomes of its choices are added to
    /// the statistics it chooses by (`enforce serve`'s are). Exploring buys information, and
    /// only a chooser that learns gets any: over fixed statistics a draw that departs from the
    /// best expected valid answers per token only costs. So where `reask_auto.explore` is not
    /// set, a chooser explores exactly when it learns.
    pub fn settings(&self, learns: bool) -> ThompsonSettings {
        let mut settings = self.settings;
        settings.explore = self.explore.unwrap_or(learns);
        settings
    }

    /// The chooser for `model` under `profile`, over the fixed statistics `stats` (it does not
    /// learn: see [`settings`](ReaskAuto::settings)).
    pub fn chooser(&self, stats: &StrategyStats, model: &str, profile: &str) -> ThompsonChooser {
        ThompsonChooser::new(stats, model, profile, self.settings(false))
    }
}

/// Reads the statistics file at `path`; `key` is the configuration key that names it.
pub fn read_stats(path: &Path, key: &str) -> Result<StrategyStats, BuildError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        BuildError::at(
            key,
            format!("cannot read the statistics file {}: {e}", path.display()),
        )
    })?;
    StrategyStats::from_json(&text)
        .map_err(|e| BuildError::at(key, format!("{}: {e}", path.display())))
}

/// With `reask: auto` in `policy`: the fallback ladder and the strategies from `auto` (the
/// layered `reask_auto:`), set in the policy, and the resolved settings. `prefix` is the
/// layer whose `reask_auto.stats` names the file, `base_dir` the configuration's directory;
/// `every_attempt_constrained` under `decode: constrained` (the default fallback then has no
/// `constrained` rung).
pub(super) fn resolve(
    policy: &mut Policy,
    auto: &ReaskAutoConfig,
    stats_prefix: &str,
    base_dir: &Path,
    every_attempt_constrained: bool,
) -> Option<ReaskAuto> {
    let reask_auto = policy.reask_auto.as_mut()?;
    policy.reask = auto
        .fallback
        .clone()
        .unwrap_or_else(|| AutoReask::default_fallback(every_attempt_constrained));
    reask_auto.strategies = match &auto.strategies {
        Some(strategies) => strategies.clone(),
        None => AutoReask::default().strategies,
    };
    let mut settings = ThompsonSettings::default();
    settings.seed = auto.seed.unwrap_or(settings.seed);
    settings.min_attempts = auto.min_attempts.unwrap_or(settings.min_attempts);
    Some(ReaskAuto {
        stats: auto.stats.as_ref().map(|file| base_dir.join(file)),
        stats_key: format!("{stats_prefix}.reask_auto.stats"),
        settings,
        explore: auto.explore,
    })
}

/// Under `decode: constrained` every attempt is constrained by rule: `auto` does not bet on
/// the strategy `constrained`, which would be a plain resample.
pub(super) fn without_constrained(policy: &mut Policy) {
    if let Some(auto) = policy.reask_auto.as_mut() {
        auto.strategies.retain(|s| *s != Reask::Constrained);
    }
}
