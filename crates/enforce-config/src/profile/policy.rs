//! A profile's [`Policy`]: defaults and profile settings layered, the fallback file read, the
//! answer format inferred from its validators.

use crate::config::{Config, Defaults, FeedbackConfig, ProfileConfig};
use enforce_core::{feedback::Feedback, policy::AnswerFormat, Policy};
use enforce_validators::BuildError;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The policy fields of defaults or a profile, for layering.
pub(super) struct PolicyFields<'a> {
    max_retries: Option<u32>,
    feedback: Option<&'a FeedbackConfig>,
    budget: Option<enforce_core::Budget>,
    on_unavailable: Option<enforce_core::FailMode>,
    early_abort: Option<bool>,
    partial_check_bytes: Option<usize>,
    reask: Option<&'a enforce_core::policy::Ladder>,
    first_attempt: Option<enforce_core::policy::FirstAttempt>,
    stop_on_no_progress: Option<bool>,
    repair: Option<enforce_core::policy::RepairWhen>,
    repair_first_codes: Option<&'a Vec<String>>,
    max_retries_for: Option<&'a BTreeMap<String, u32>>,
    fallback: Option<&'a String>,
    fallback_file: Option<&'a PathBuf>,
}

impl<'a> From<&'a Defaults> for PolicyFields<'a> {
    fn from(d: &'a Defaults) -> Self {
        PolicyFields {
            max_retries: d.max_retries,
            feedback: d.feedback.as_ref(),
            budget: d.budget,
            on_unavailable: d.on_unavailable,
            early_abort: d.early_abort,
            partial_check_bytes: d.partial_check_bytes,
            reask: d.reask.as_ref(),
            first_attempt: d.first_attempt,
            stop_on_no_progress: d.stop_on_no_progress,
            repair: d.repair,
            repair_first_codes: d.repair_first_codes.as_ref(),
            max_retries_for: d.max_retries_for.as_ref(),
            fallback: d.fallback.as_ref(),
            fallback_file: d.fallback_file.as_ref(),
        }
    }
}

impl<'a> From<&'a ProfileConfig> for PolicyFields<'a> {
    fn from(p: &'a ProfileConfig) -> Self {
        PolicyFields {
            max_retries: p.max_retries,
            feedback: p.feedback.as_ref(),
            budget: p.budget,
            on_unavailable: p.on_unavailable,
            early_abort: p.early_abort,
            partial_check_bytes: p.partial_check_bytes,
            reask: p.reask.as_ref(),
            first_attempt: p.first_attempt,
            stop_on_no_progress: p.stop_on_no_progress,
            repair: p.repair,
            repair_first_codes: p.repair_first_codes.as_ref(),
            max_retries_for: p.max_retries_for.as_ref(),
            fallback: p.fallback.as_ref(),
            fallback_file: p.fallback_file.as_ref(),
        }
    }
}

fn read_fallback(base_dir: &Path, file: &Path, key: &str) -> Result<String, BuildError> {
    let path = if file.is_absolute() {
        file.to_path_buf()
    } else {
        base_dir.join(file)
    };
    std::fs::read_to_string(&path)
        .map_err(|e| BuildError::at(key, format!("cannot read {}: {e}", path.display())))
}

/// Lays `profile` over `defaults` into a [`Policy`]. `key` prefixes error keys.
pub(super) fn build_policy(
    defaults: PolicyFields<'_>,
    profile: Option<(PolicyFields<'_>, &str)>,
    base_dir: &Path,
) -> Result<Policy, BuildError> {
    let mut policy = Policy::default();
    let empty = FeedbackConfig::default();
    let mut feedback = defaults.feedback.cloned().unwrap_or_default();
    if let Some(n) = defaults.max_retries {
        policy.max_retries = n;
    }
    if let Some(b) = defaults.budget {
        policy.budget = b;
    }
    if let Some(m) = defaults.on_unavailable {
        policy.on_unavailable = m;
    }
    if let Some(yes) = defaults.early_abort {
        policy.early_abort = yes;
    }
    if let Some(bytes) = defaults.partial_check_bytes {
        policy.partial_check_bytes = bytes;
    }
    if let Some(reask) = defaults.reask {
        policy.reask = reask.clone();
    }
    if let Some(first) = defaults.first_attempt {
        policy.first_attempt = first;
    }
    if let Some(yes) = defaults.stop_on_no_progress {
        policy.stop_on_no_progress = yes;
    }
    if let Some(when) = defaults.repair {
        policy.repair = when;
    }
    if let Some(codes) = defaults.repair_first_codes {
        policy.repair_first_codes = codes.clone();
    }
    if let Some(budgets) = defaults.max_retries_for {
        policy.max_retries_for = budgets.clone();
    }
    policy.fallback = match (defaults.fallback, defaults.fallback_file) {
        (Some(_), Some(_)) => {
            return Err(BuildError::at(
                "defaults.fallback_file",
                "give either 'fallback' or 'fallback_file', not both",
            ))
        }
        (Some(t), None) => Some(t.clone()),
        (None, Some(f)) => Some(read_fallback(base_dir, f, "defaults.fallback_file")?),
        (None, None) => None,
    };
    if let Some((p, prefix)) = profile {
        if let Some(n) = p.max_retries {
            policy.max_retries = n;
        }
        if let Some(b) = p.budget {
            policy.budget = b;
        }
        if let Some(m) = p.on_unavailable {
            policy.on_unavailable = m;
        }
        if let Some(yes) = p.early_abort {
            policy.early_abort = yes;
        }
        if let Some(bytes) = p.partial_check_bytes {
            policy.partial_check_bytes = bytes;
        }
        if let Some(reask) = p.reask {
            policy.reask = reask.clone();
        }
        if let Some(first) = p.first_attempt {
            policy.first_attempt = first;
        }
        if let Some(yes) = p.stop_on_no_progress {
            policy.stop_on_no_progress = yes;
        }
        if let Some(when) = p.repair {
            policy.repair = when;
        }
        if let Some(codes) = p.repair_first_codes {
            policy.repair_first_codes = codes.clone();
        }
        if let Some(budgets) = p.max_retries_for {
            policy.max_retries_for.extend(budgets.clone());
        }
        feedback = p.feedback.unwrap_or(&empty).over(&feedback);
        match (p.fallback, p.fallback_file) {
            (Some(_), Some(_)) => {
                return Err(BuildError::at(
                    format!("{prefix}.fallback_file"),
                    "give either 'fallback' or 'fallback_file', not both",
                ))
            }
            (Some(t), None) => policy.fallback = Some(t.clone()),
            (None, Some(f)) => {
                policy.fallback = Some(read_fallback(
                    base_dir,
                    f,
                    &format!("{prefix}.fallback_file"),
                )?)
            }
            (None, None) => {}
        }
    }
    policy.feedback = Feedback::new(feedback.template())
        .with_texts(feedback.messages.clone().unwrap_or_default());
    Ok(policy)
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
