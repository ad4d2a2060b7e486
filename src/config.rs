//! The `enforce.yaml` the binary reads: the validation sections of `enforce-validators`, plus
//! (later) the binary's own sections.

use enforce_validators::config::{Config, ConfigError, ConfigSource, Defaults, ProfileConfig};
use enforce_validators::{BuildEnv, ProfileSet, Registry};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File looked for in the current directory when no `--config` is given.
pub const DEFAULT_CONFIG_FILE: &str = "enforce.yaml";

/// The whole configuration file. Every section is optional; unknown keys are errors.
///
/// To add a section (`runner`, `models`, `server`, ...), add a field here: the file's errors
/// keep their line numbers because the struct is parsed directly (no `flatten`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RootConfig {
    /// Directories validator plugins are loaded from (relative to the file).
    pub plugin_dirs: Vec<PathBuf>,
    /// Policy defaults and the default profile.
    pub defaults: Defaults,
    /// Named validator configurations.
    pub validators: BTreeMap<String, serde_json::Value>,
    /// Named profiles.
    pub profiles: BTreeMap<String, ProfileConfig>,
}

impl RootConfig {
    /// The validation sections, as `enforce-validators` takes them.
    pub fn validation(&self) -> Config {
        Config {
            plugin_dirs: self.plugin_dirs.clone(),
            defaults: self.defaults.clone(),
            validators: self.validators.clone(),
            profiles: self.profiles.clone(),
        }
    }
}

/// A configuration as loaded: the parsed file (if any) and its text for error locations.
#[derive(Debug, Clone, Default)]
pub struct LoadedConfig {
    /// The file's text; `None` when running without a configuration file.
    pub source: Option<ConfigSource>,
    /// The parsed configuration (all defaults without a file).
    pub config: RootConfig,
}

impl LoadedConfig {
    /// Loads `explicit`, else `./enforce.yaml` when it exists, else nothing (built-in profiles).
    pub fn load(explicit: Option<&Path>) -> Result<Self, ConfigError> {
        let path = match explicit {
            Some(p) => p.to_path_buf(),
            None => {
                let p = PathBuf::from(DEFAULT_CONFIG_FILE);
                if !p.exists() {
                    return Ok(LoadedConfig::default());
                }
                p
            }
        };
        let source = ConfigSource::read(&path)?;
        let config = source.parse::<RootConfig>()?;
        Ok(LoadedConfig {
            source: Some(source),
            config,
        })
    }

    /// Plugin directories, resolved against the file's directory.
    #[allow(dead_code)] // used by the plugin host wiring
    pub fn plugin_dirs(&self) -> Vec<PathBuf> {
        let base = self
            .source
            .as_ref()
            .map_or_else(|| PathBuf::from("."), ConfigSource::base_dir);
        self.config
            .plugin_dirs
            .iter()
            .map(|d| {
                if d.is_absolute() {
                    d.clone()
                } else {
                    base.join(d)
                }
            })
            .collect()
    }

    /// Builds every profile with `registry`; `root` overrides path-checking roots.
    pub fn profiles(
        &self,
        registry: &Registry,
        root: Option<PathBuf>,
    ) -> Result<ProfileSet, ConfigError> {
        match &self.source {
            None => ProfileSet::builtin(registry, root).map_err(|e| ConfigError {
                file: None,
                line: None,
                column: None,
                key: Some(e.key),
                message: e.message,
            }),
            Some(source) => {
                let env = BuildEnv::new(source.base_dir()).with_root(root);
                ProfileSet::from_config(&self.config.validation(), registry, &env)
                    .map_err(|e| source.build_error(e))
            }
        }
    }
}
