//! The model the re-ask strategy `escalate` asks: `--escalate-model` in `enforce run` and
//! `enforce eval` (the main model's runner flags with another model), else a profile's
//! `escalate_to` naming a `models:` entry, whose runner is built once per name.

use crate::config::LoadedConfig;
use enforce_config::ProfileSet;
use enforce_core::enforcer::Escalation;
use enforce_core::Runner;
use enforce_runner::RunnerConfig;
use std::sync::Arc;

/// Connects every profile's escalation model: with `flag` (the model's name and runner),
/// every profile escalates to it; else each profile's `escalate_to` names a `models:` entry
/// (its own `runner:`, else the top-level one). An unknown name is an error at the profile's
/// `escalate_to` that lists the entries.
pub fn connect(
    profiles: &mut ProfileSet,
    loaded: &LoadedConfig,
    flag: Option<(String, RunnerConfig)>,
) -> Result<(), String> {
    if let Some((model, config)) = flag {
        let runner: Arc<dyn Runner> = Arc::from(config.build().map_err(|e| e.to_string())?);
        profiles.escalate_all_to(&Escalation { model, runner });
        return Ok(());
    }
    profiles
        .connect_escalations(|name| entry_runner(loaded, name))
        .map_err(|e| loaded.error_at(&e.key, e.message).to_string())
}

/// The runner of the `models:` entry `name`.
fn entry_runner(loaded: &LoadedConfig, name: &str) -> Result<Arc<dyn Runner>, String> {
    let models = &loaded.config.models;
    let Some(entry) = models.iter().find(|m| m.id == name) else {
        let known: Vec<&str> = models.iter().map(|m| m.id.as_str()).collect();
        return Err(if known.is_empty() {
            format!(
                "no model `{name}`: the configuration has no `models:` entries (`enforce run` and `enforce eval` take --escalate-model)"
            )
        } else {
            format!("no model `{name}` (models: {})", known.join(", "))
        });
    };
    let config = entry
        .runner
        .as_ref()
        .or(loaded.config.runner.as_ref())
        .ok_or_else(|| {
            format!("model `{name}` has no `runner:` and the config has no top-level `runner:`")
        })?;
    config
        .build()
        .map(Arc::from)
        .map_err(|e| format!("model `{name}`: {e}"))
}
