//! `reask: auto` in the binary: each profile's statistics file (`reask_auto.stats`) read once,
//! and an enforcer given the chooser for the model it asks (statistics are per model). The
//! chooser reads the statistics live: the outcomes it is told of add to them (`enforce serve`
//! tells it each request's, and writes them back, see `live_stats`).

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
}

impl Choosers {
    /// Reads the statistics file of every profile of `profiles` with `reask: auto`: an error
    /// names the file and the key that names it.
    pub fn load(profiles: &ProfileSet) -> Result<Self, BuildError> {
        let mut choosers = Choosers::default();
        for name in profiles.names() {
            if let Some(profile) = profiles.get(name) {
                choosers.read(profile)?;
            }
        }
        Ok(choosers)
    }

    /// Reads `profile`'s statistics file, if it has `reask: auto` and names one.
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
            auto.settings,
        );
        enforcer.with_chooser(Arc::new(chooser))
    }
}
