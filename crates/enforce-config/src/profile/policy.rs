//! A profile's [`Policy`]: defaults and profile settings layered, the fallback file read, the
//! answer format inferred from its validators.

use super::auto::{self, ReaskAuto};
use crate::config::{Config, Defaults, ProfileConfig};
use enforce_core::{feedback::Feedback, policy::AnswerFormat, policy::RepairWhen, Policy};
use enforce_validators::BuildError;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn read_fallback(base_dir: &Path, file: &Path, key: &str) -> Result<String, BuildError> {
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        base_dir.join(file)
    };
    std::fs::read_to_string(&path)
        .map_err(|e| BuildError::at(key, format!("cannot read {}: {e}", path.display())))
}

/// Lays `profile` (with its key, the prefix of its error keys) over `defaults` into a
/// [`Policy`], with the profile's `reask: auto` settings when it has them.
pub(super) fn build_policy(
    defaults: &Defaults,
    profile: Option<(&ProfileConfig, &str)>,
    base_dir: &Path,
) -> Result<(Policy, Option<ReaskAuto>), BuildError> {
    let mut policy = Policy::default();
    defaults.lay_policy_over(&mut policy);
    let mut feedback = defaults.feedback.clone().unwrap_or_default();
    let (text, file) = (defaults.fallback.as_ref(), defaults.fallback_file.as_ref());
    policy.fallback = fallback_of(text, file, "defaults", base_dir)?;
    if let Some((p, prefix)) = profile {
        p.lay_policy_over(&mut policy);
        if let Some(own) = &p.feedback {
            feedback = own.over(&feedback);
        }
        let (text, file) = (p.fallback.as_ref(), p.fallback_file.as_ref());
        if let Some(fallback) = fallback_of(text, file, prefix, base_dir)? {
            policy.fallback = Some(fallback);
        }
    }
    policy.feedback = Feedback::new(feedback.template())
        .with_texts(feedback.messages.clone().unwrap_or_default());
    let base = defaults.reask_auto.clone().unwrap_or_default();
    let (auto, stats_prefix) = match profile {
        Some((p, prefix)) => match &p.reask_auto {
            Some(own) if own.stats.is_some() => (own.over(&base), prefix),
            Some(own) => (own.over(&base), "defaults"),
            None => (base, "defaults"),
        },
        None => (base, "defaults"),
    };
    let every_attempt_constrained =
        profile.is_some_and(|(p, _)| p.decode == Some(super::Decode::Constrained));
    let auto = auto::resolve(
        &mut policy,
        &auto,
        stats_prefix,
        base_dir,
        every_attempt_constrained,
    );
    let repair_set = defaults.repair.is_some() || profile.is_some_and(|(p, _)| p.repair.is_some());
    if auto.is_some() && !repair_set {
        // `reask: auto` seeks valid answers per token: a repair that makes the answer clean
        // costs none, so it goes before any re-ask unless the profile says `repair: last`.
        policy.repair = RepairWhen::First;
    }
    Ok((policy, auto))
}

/// The fallback text a layer gives: its `fallback`, or its `fallback_file` read; an error
/// when it gives both. `prefix` is the layer's key.
fn fallback_of(
    text: Option<&String>,
    file: Option<&PathBuf>,
    prefix: &str,
    base_dir: &Path,
) -> Result<Option<String>, BuildError> {
    let key = format!("{prefix}.fallback_file");
    match (text, file) {
        (Some(_), Some(_)) => Err(BuildError::at(
            key,
            "give either 'fallback' or 'fallback_file', not both",
        )),
        (Some(t), None) => Ok(Some(t.clone())),
        (None, Some(f)) => read_fallback(base_dir, f, &key).map(Some),
        (None, None) => Ok(None),
    }
}

/// What a profile's answers are when it does not say: JSON when one of its validators is a
/// `json` check of the whole response (no `input` pointing it at a part), else text.
pub(super) fn answer_format_of(validators: &[String], config: &Config) -> AnswerFormat {
    let whole_json = |name: &String| match config.validators.get(name) {
        Some(Value::Object(spec)) => {
            let kind = spec.get("type").and_then(Value::as_str).unwrap_or(name);
            kind == "json" && !spec.contains_key("input")
        }
        Some(Value::Null) | None => name == "json",
        Some(_) => false,
    };
    if validators.iter().any(whole_json) {
        AnswerFormat::Json
    } else {
        AnswerFormat::Text
    }
}
