//! A profile's [`Policy`]: defaults and profile settings layered, the fallback file read, the
//! answer format inferred from its validators.

use crate::config::{Config, FeedbackConfig, PolicyKeys};
use enforce_core::{feedback::Feedback, policy::AnswerFormat, Policy};
use enforce_validators::BuildError;
use serde_json::Value;
use std::path::Path;

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
    defaults: PolicyKeys<'_>,
    profile: Option<(PolicyKeys<'_>, &str)>,
    base_dir: &Path,
) -> Result<Policy, BuildError> {
    let mut policy = Policy::default();
    let mut feedback = FeedbackConfig::default();
    for (keys, prefix) in std::iter::once((defaults, "defaults")).chain(profile) {
        lay_over(&mut policy, &keys);
        if let Some(own) = keys.feedback {
            feedback = own.over(&feedback);
        }
        let fallback_key = format!("{prefix}.fallback_file");
        match (keys.fallback, keys.fallback_file) {
            (Some(_), Some(_)) => {
                return Err(BuildError::at(
                    fallback_key,
                    "give either 'fallback' or 'fallback_file', not both",
                ))
            }
            (Some(t), None) => policy.fallback = Some(t.clone()),
            (None, Some(f)) => policy.fallback = Some(read_fallback(base_dir, f, &fallback_key)?),
            (None, None) => {}
        }
    }
    policy.feedback = Feedback::new(feedback.template())
        .with_texts(feedback.messages.clone().unwrap_or_default());
    Ok(policy)
}

/// Sets what `keys` set; `max_retries_for` is laid over per code.
fn lay_over(policy: &mut Policy, keys: &PolicyKeys<'_>) {
    if let Some(n) = keys.max_retries {
        policy.max_retries = n;
    }
    if let Some(b) = keys.budget {
        policy.budget = b;
    }
    if let Some(m) = keys.on_unavailable {
        policy.on_unavailable = m;
    }
    if let Some(yes) = keys.early_abort {
        policy.early_abort = yes;
    }
    if let Some(bytes) = keys.partial_check_bytes {
        policy.partial_check_bytes = bytes;
    }
    if let Some(reask) = keys.reask {
        policy.reask = reask.clone();
    }
    if let Some(first) = keys.first_attempt {
        policy.first_attempt = first;
    }
    if let Some(yes) = keys.stop_on_no_progress {
        policy.stop_on_no_progress = yes;
    }
    if let Some(when) = keys.repair {
        policy.repair = when;
    }
    if let Some(codes) = keys.repair_first_codes {
        policy.repair_first_codes = codes.clone();
    }
    if let Some(budgets) = keys.max_retries_for {
        policy.max_retries_for.extend(budgets.clone());
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
