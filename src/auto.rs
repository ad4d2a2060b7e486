//! `reask: auto` in the binary: each profile's statistics file (`reask_auto.stats`) read once,
//! and an enforcer given the chooser for the model it asks (statistics are per model). The
//! chooser reads the statistics live: the outcomes it is told of add to them (`enforce serve`
//! tells it each request's, and writes them back, see `live_stats`). Where nothing is told
//! (`enforce run`), the statistics stay fixed and the chooser does not explore unless the
//! profile says `explore: true` (see `ReaskAuto::settings`).

use enforce_config::{BuildError, Profile, ProfileSet};
use enforce_core::strategy::{LiveChooser, LiveStats};
use enforce_core::Enforcer;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The statistics files of the profiles with `reask: auto`, read.
#[derive(Debug, Default)]
pub struct Choosers {
    /// By file: several profiles may name one.
    files: BTreeMap<PathBuf, Arc<LiveStats>>,
    /// Whether the choosers are told the outcomes of their choices (`enforce serve`).
    learn: bool,
}

impl Choosers {
    /// Reads the statistics file of every profile of `profiles` with `reask: auto`, for a
    /// service that tells each chooser the outcomes of its choices, so they learn: an error
    /// names the file and the key that names it.
    pub fn load(profiles: &ProfileSet) -> Result<Self, BuildError> {
        let mut choosers = Choosers {
            learn: true,
            ..Choosers::default()
        };
        for name in profiles.names() {
            if let Some(profile) = profiles.get(name) {
                choosers.read(profile)?;
            }
        }
        Ok(choosers)
    }

    /// Reads `profile`'s statistics file, if it has `reask: auto` and names one, for a single
    /// call whose outcome is not learned from.
    pub fn for_profile(profile: &Profile) -> Result<Self, BuildError> {
        let mut choosers = Choosers::default();
        choosers.read(profile)?;
        Ok(choosers)
    }

    fn read(&mut self, profile: &Profile) -> Result<(), BuildError> {
        let Some(auto) = profile.reask_auto() else {
            return Ok(());
        };
        let Some(path) = &auto.stats else {
            return Ok(());
        };
        if !self.files.contains_key(path) {
            if let Some(stats) = auto.read_stats()? {
                self.files
                    .insert(path.clone(), Arc::new(LiveStats::new(stats)));
            }
        }
        Ok(())
    }

    /// The statistics `profile` chooses by, when it has `reask: auto` and they were read.
    pub fn stats_of(&self, profile: &Profile) -> Option<&Arc<LiveStats>> {
        let path = profile.reask_auto()?.stats.as_ref()?;
        self.files.get(path)
    }

    /// Every statistics file read, with the live statistics it started.
    pub fn files(&self) -> impl Iterator<Item = (&Path, &Arc<LiveStats>)> {
        self.files
            .iter()
            .map(|(path, stats)| (path.as_path(), stats))
    }

    /// `enforcer` (one of `profile`'s) with the chooser for `model` (the runner's model name,
    /// none for a runner that names none); unchanged without `reask: auto` or statistics, so
    /// its re-asks take the fallback ladder and the outcome says so.
    pub fn attach(&self, enforcer: Enforcer, profile: &Profile, model: Option<&str>) -> Enforcer {
        let (Some(auto), Some(stats)) = (profile.reask_auto(), self.stats_of(profile)) else {
            return enforcer;
        };
        let chooser = LiveChooser::new(
            stats.clone(),
            model.unwrap_or_default(),
            profile.name(),
            auto.settings(self.learn),
        );
        enforcer.with_chooser(Arc::new(chooser))
    }
}

#[cfg(test)]
mod tests {
    use super::Choosers;
    use crate::config::LoadedConfig;
    use enforce_config::Registry;
    use enforce_core::policy::Reask;
    use enforce_core::strategy::ChoiceInput;
    use std::collections::BTreeSet;

    /// Statistics whose means favour `resample` while `feedback`, measured less, is within the
    /// exploration bound: a chooser that draws takes each on some requests.
    const STATS: &str = r#"{"version": 1, "rows": [
      {"model": "m", "profile": "p", "code": "E", "strategy": "resample",
       "attempts": 40, "fixed": 20, "valid": 20, "tokens": 4000, "tokens_counted": 40},
      {"model": "m", "profile": "p", "code": "E", "strategy": "feedback",
       "attempts": 5, "fixed": 2, "valid": 2, "tokens": 500, "tokens_counted": 5}]}"#;

    /// The strategies the chooser `choosers` gives profile `p` takes over 64 requests.
    fn taken(choosers: &Choosers, loaded: &LoadedConfig) -> BTreeSet<Reask> {
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let profile = profiles.get("p").unwrap();
        let enforcer = choosers.attach(profile.enforcer(), profile, Some("m"));
        let chooser = enforcer.chooser().expect("a chooser").clone();
        let candidates = [Reask::Resample, Reask::Feedback];
        (0..64)
            .map(|key| {
                let input = ChoiceInput::new(&["E"], &candidates, Reask::Resample);
                chooser.choose(&input.of_request(2, key)).strategy
            })
            .collect()
    }

    #[test]
    fn a_chooser_explores_where_it_learns_and_takes_the_best_mean_where_it_does_not() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stats.json"), STATS).unwrap();
        let path = dir.path().join("enforce.yaml");
        let config = |explore: &str| {
            let yaml = format!(
                "profiles:\n  p:\n    validators: []\n    reask: auto\n    \
                 reask_auto: {{stats: stats.json{explore}}}\n"
            );
            std::fs::write(&path, yaml).unwrap();
            LoadedConfig::load(Some(&path)).unwrap()
        };
        let loaded = config("");
        let profiles = loaded.profiles(&Registry::builtin(), None).unwrap();
        let serving = Choosers::load(&profiles).unwrap();
        let one_call = Choosers::for_profile(profiles.get("p").unwrap()).unwrap();
        assert_eq!(
            taken(&serving, &loaded).len(),
            2,
            "enforce serve learns: it explores"
        );
        assert_eq!(
            taken(&one_call, &loaded),
            BTreeSet::from([Reask::Resample]),
            "over fixed statistics: the best mean, every time"
        );
        let told = config(", explore: true");
        let profiles = told.profiles(&Registry::builtin(), None).unwrap();
        let one_call = Choosers::for_profile(profiles.get("p").unwrap()).unwrap();
        assert_eq!(taken(&one_call, &told).len(), 2, "explore: true holds");
    }
}
