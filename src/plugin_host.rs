//! Plugin loading shared by the subcommands: the search path from the configuration and the
//! environment, and a validator registry holding the built-ins plus every plugin validator.

use crate::config::LoadedConfig;
use enforce_config::Registry;
use enforce_plugin_host::{plugin_search_path_from_env, PluginDir, PluginHost};

/// The plugin directories: the configuration's `plugin_dirs` (relative to the file), then
/// `ENFORCE_PLUGIN_PATH`, then the per-user default.
pub fn search_path(config: &LoadedConfig) -> Vec<PluginDir> {
    plugin_search_path_from_env(&config.plugin_dirs())
}

/// Loads the plugins of `config` and returns a registry with the built-in validators and every
/// plugin validator, plus the host (for listings). Libraries that fail to load and validator
/// names that clash are reported on stderr as warnings; the rest keep working.
pub fn registry_with_plugins(config: &LoadedConfig) -> (Registry, PluginHost) {
    let host = PluginHost::load_dirs(&search_path(config));
    for failure in host.failures() {
        eprintln!(
            "warning: plugin {} not loaded: {}",
            failure.path.display(),
            failure.error
        );
    }
    let mut registry = Registry::builtin();
    for conflict in host.register_into(&mut registry) {
        eprintln!("warning: {conflict}");
    }
    (registry, host)
}
