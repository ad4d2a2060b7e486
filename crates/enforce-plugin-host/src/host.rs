//! [`PluginHost`]: every plugin found in the plugin directories, and what failed to load.

use crate::adapter::{CallOptions, HostedValidator};
use crate::discovery::{library_files, DirSource, PluginDir};
use crate::error::{CreateError, LoadError};
use crate::load::{load_plugin, LoadedPlugin, ValidatorInfo};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// A library or directory that could not be used, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadFailure {
    /// The library file (or the directory, for [`LoadError::Directory`]).
    pub path: PathBuf,
    /// Why.
    pub error: LoadError,
}

/// The plugins loaded from a set of directories, and the files that failed.
///
/// One bad library never stops the others: each failure is recorded with its reason and
/// loading goes on.
///
/// ```no_run
/// use enforce_plugin_host::{plugin_search_path_from_env, CallOptions, PluginHost};
///
/// let host = PluginHost::load_dirs(&plugin_search_path_from_env(&[]));
/// for failure in host.failures() {
///     eprintln!("{}: {}", failure.path.display(), failure.error);
/// }
/// let validator = host
///     .create_validator("german_prose", "german_prose", &serde_json::Value::Null, CallOptions::default())
///     .expect("the german-prose plugin is installed");
/// ```
#[derive(Debug, Clone, Default)]
pub struct PluginHost {
    plugins: Vec<LoadedPlugin>,
    failures: Vec<LoadFailure>,
}

impl PluginHost {
    /// A host with nothing loaded.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loads every library in `dirs`, in order.
    pub fn load_dirs(dirs: &[PluginDir]) -> Self {
        let mut host = PluginHost::new();
        for dir in dirs {
            host.load_dir(dir);
        }
        host
    }

    /// Loads every library directly inside `dir`. A missing directory is an error unless it is
    /// the default one.
    pub fn load_dir(&mut self, dir: &PluginDir) {
        if dir.source == DirSource::Default && !dir.path.exists() {
            return;
        }
        if let Some(reason) = world_writable(&dir.path) {
            self.failures.push(LoadFailure {
                path: dir.path.clone(),
                error: LoadError::Insecure {
                    reason: format!("{reason} ({} directory)", dir.source.as_str()),
                },
            });
            return;
        }
        match library_files(&dir.path) {
            Ok(files) => {
                for file in files {
                    // A failure is recorded in `self.failures`; loading goes on.
                    let _ = self.load_file(&file);
                }
            }
            Err(e) => self.failures.push(LoadFailure {
                path: dir.path.clone(),
                error: LoadError::Directory {
                    reason: format!("{e} ({} directory)", dir.source.as_str()),
                },
            }),
        }
    }

    /// Loads one library; on failure records it and returns the error.
    ///
    /// A file already loaded (the same file reached through two directories) is skipped. A
    /// plugin offering a validator name an earlier plugin already offers is refused whole, so
    /// which code runs under a name never depends on more than the directory order.
    pub fn load_file(&mut self, path: &Path) -> Result<(), LoadError> {
        let canonical = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        let seen = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
        if self.plugins.iter().any(|p| seen(&p.path) == canonical)
            || self.failures.iter().any(|f| seen(&f.path) == canonical)
        {
            return Ok(());
        }
        if let Some(reason) = world_writable(path) {
            let error = LoadError::Insecure { reason };
            self.failures.push(LoadFailure {
                path: path.to_path_buf(),
                error: error.clone(),
            });
            return Err(error);
        }
        let result = load_plugin(path).and_then(|plugin| {
            for info in &plugin.validators {
                if let Some(first) = self.plugin_of(&info.name) {
                    return Err(LoadError::DuplicateValidator {
                        validator: info.name.clone(),
                        first: first.path.clone(),
                    });
                }
            }
            Ok(plugin)
        });
        match result {
            Ok(plugin) => {
                self.plugins.push(plugin);
                Ok(())
            }
            Err(error) => {
                self.failures.push(LoadFailure {
                    path: path.to_path_buf(),
                    error: error.clone(),
                });
                Err(error)
            }
        }
    }

    /// The plugins that loaded, in load order.
    pub fn plugins(&self) -> &[LoadedPlugin] {
        &self.plugins
    }

    /// The libraries and directories that failed, in load order.
    pub fn failures(&self) -> &[LoadFailure] {
        &self.failures
    }

    /// Every validator offered by a loaded plugin, with its plugin.
    pub fn validators(&self) -> impl Iterator<Item = (&LoadedPlugin, &ValidatorInfo)> {
        self.plugins
            .iter()
            .flat_map(|p| p.validators.iter().map(move |v| (p, v)))
    }

    /// The plugin offering `validator`.
    pub fn plugin_of(&self, validator: &str) -> Option<&LoadedPlugin> {
        self.plugins
            .iter()
            .find(|p| p.validators.iter().any(|v| v.name == validator))
    }

    /// Builds the plugin validator `validator` from `config` (JSON; `null` for none), named
    /// `name` in issues and reports.
    pub fn create_validator(
        &self,
        validator: &str,
        name: &str,
        config: &Value,
        options: CallOptions,
    ) -> Result<HostedValidator, CreateError> {
        self.plugin_of(validator)
            .ok_or_else(|| CreateError::UnknownValidator {
                validator: validator.to_string(),
            })?
            .create_validator(validator, name, config, options)
    }

    /// Like [`create_validator`](Self::create_validator), with the configuration given as JSON
    /// or YAML text (empty: no configuration).
    pub fn create_validator_from_text(
        &self,
        validator: &str,
        name: &str,
        config: &str,
        options: CallOptions,
    ) -> Result<HostedValidator, CreateError> {
        let value = config_from_text(config).map_err(|reason| CreateError::ConfigText {
            validator: validator.to_string(),
            reason,
        })?;
        self.create_validator(validator, name, &value, options)
    }
}

/// Parses a validator configuration given as JSON or YAML (YAML is a superset of JSON); empty
/// text is `null`.
///
/// ```
/// let yaml = enforce_plugin_host::config_from_text("rules:\n  - code: X\n    forbidden: [a]\n").unwrap();
/// let json = enforce_plugin_host::config_from_text(r#"{"rules":[{"code":"X","forbidden":["a"]}]}"#).unwrap();
/// assert_eq!(yaml, json);
/// assert!(enforce_plugin_host::config_from_text("  ").unwrap().is_null());
/// ```
pub fn config_from_text(text: &str) -> Result<Value, String> {
    if text.trim().is_empty() {
        return Ok(Value::Null);
    }
    serde_yaml_ng::from_str::<Value>(text).map_err(|e| e.to_string())
}

/// `Some(reason)` when `path` (a plugin directory or library, symlinks followed) can be written
/// by every user: loading code from there would run whatever anyone on the machine put there.
#[cfg(unix)]
fn world_writable(path: &Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o002 != 0).then(|| {
        format!(
            "{} is writable by every user (mode {:o}); run `chmod o-w {}`",
            path.display(),
            mode & 0o7777,
            path.display()
        )
    })
}

#[cfg(not(unix))]
fn world_writable(_path: &Path) -> Option<String> {
    None
}
