//! Plugin validators in enforce-config's [`Registry`] (feature `registry`).
//!
//! [`PluginHost::register_into`] adds one factory per plugin validator, so a profile names a
//! plugin validator exactly like a built-in one:
//!
//! ```yaml
//! plugin_dirs: [plugins]
//! validators:
//!   prose:
//!     type: german_prose          # a plugin validator
//!     check_scores: false         # its own options, handed to the plugin as JSON
//!     plugin:                     # options for the host (not passed to the plugin)
//!       timeout_ms: 2000
//!       isolation: blocking_thread   # or `inline`
//!       fail_mode: closed            # or `open`
//! profiles:
//!   letter:
//!     validators: [prose, step_marker]
//! ```

use crate::adapter::{CallOptions, Isolation};
use crate::error::CreateError;
use crate::host::PluginHost;
use enforce_config::{BuildError, FactoryInput, Registry, RegistryError};
use enforce_core::{FailMode, Validator};
use serde_json::{Map, Value};
use std::path::PathBuf;
use std::time::Duration;

/// The key of a plugin validator's options that configures the host rather than the plugin;
/// it is removed before the options reach the plugin.
pub const HOST_OPTIONS_KEY: &str = "plugin";

/// A plugin validator that could not be registered (its name is taken, e.g. by a built-in).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegistrationConflict {
    /// The plugin library.
    pub path: PathBuf,
    /// The plugin validator's name.
    pub validator: String,
    /// Why the registry refused it.
    pub error: RegistryError,
}

impl std::fmt::Display for RegistrationConflict {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugin validator `{}` from {} is not registered: {}",
            self.validator,
            self.path.display(),
            self.error
        )
    }
}

impl PluginHost {
    /// Registers a factory for every validator of every loaded plugin.
    ///
    /// Built-in names win: a plugin validator named like a registered type is refused and
    /// reported, never silently replaces it.
    pub fn register_into(&self, registry: &mut Registry) -> Vec<RegistrationConflict> {
        let mut conflicts = Vec::new();
        for plugin in self.plugins() {
            for info in plugin.validators() {
                let plugin_for_factory = plugin.clone();
                let kind = info.name.clone();
                let result = registry.register(&info.name, move |input: &FactoryInput<'_>| {
                    build(&plugin_for_factory, &kind, input)
                });
                if let Err(error) = result {
                    conflicts.push(RegistrationConflict {
                        path: plugin.path().to_path_buf(),
                        validator: info.name.clone(),
                        error,
                    });
                }
            }
        }
        conflicts
    }
}

fn build(
    plugin: &crate::LoadedPlugin,
    kind: &str,
    input: &FactoryInput<'_>,
) -> Result<Box<dyn Validator>, BuildError> {
    let mut config = match input.config {
        Value::Object(map) => map.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(BuildError::new(
                "a validator is configured with a mapping of options",
            ))
        }
    };
    let options = match config.remove(HOST_OPTIONS_KEY) {
        Some(host_options) => {
            call_options(&host_options).map_err(|e| e.prefixed(HOST_OPTIONS_KEY))?
        }
        None => CallOptions::default(),
    };
    plugin
        .create_validator(kind, input.name, &Value::Object(config), options)
        .map(|v| Box::new(v) as Box<dyn Validator>)
        .map_err(|e| match e {
            CreateError::Plugin { plugin, error, .. } => {
                BuildError::new(format!("plugin `{plugin}`: {error}"))
            }
            other => BuildError::new(other.to_string()),
        })
}

/// Reads the host options (`timeout_ms`, `isolation`, `fail_mode`).
///
/// ```
/// # #[cfg(feature = "registry")] {
/// use enforce_plugin_host::{call_options, Isolation};
///
/// let options = call_options(&serde_json::json!({"timeout_ms": 250, "isolation": "inline"})).unwrap();
/// assert_eq!(options.timeout.as_millis(), 250);
/// assert_eq!(options.isolation, Isolation::Inline);
/// assert!(call_options(&serde_json::json!({"timeout": 1})).is_err());
/// # }
/// ```
pub fn call_options(value: &Value) -> Result<CallOptions, BuildError> {
    let map = value
        .as_object()
        .ok_or_else(|| BuildError::new("expected a mapping (timeout_ms, isolation, fail_mode)"))?;
    let mut options = CallOptions::default();
    for (key, value) in map {
        match key.as_str() {
            "timeout_ms" => {
                let ms = value.as_u64().filter(|ms| *ms > 0).ok_or_else(|| {
                    BuildError::at(key, "expected a positive number of milliseconds")
                })?;
                options.timeout = Duration::from_millis(ms);
            }
            "isolation" => {
                options.isolation = match value.as_str() {
                    Some("blocking_thread") => Isolation::BlockingThread,
                    Some("inline") => Isolation::Inline,
                    _ => {
                        return Err(BuildError::at(
                            key,
                            "expected `blocking_thread` or `inline`",
                        ))
                    }
                };
            }
            "fail_mode" => {
                options.fail_mode = Some(match value.as_str() {
                    Some("open") => FailMode::Open,
                    Some("closed") => FailMode::Closed,
                    _ => return Err(BuildError::at(key, "expected `open` or `closed`")),
                });
            }
            other => {
                return Err(BuildError::at(
                    other,
                    "unknown host option (expected timeout_ms, isolation, fail_mode)",
                ))
            }
        }
    }
    Ok(options)
}
