//! The `reask:` key (`auto`, one strategy or a ladder) and the `reask_auto:` block.

use enforce_core::policy::{Ladder, Reask};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;

/// `reask:` as a configuration file writes it: `auto` (each re-ask takes the strategy the
/// statistics favour, `reask_auto:` says how), one strategy, or a list of them (a ladder).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaskConfig {
    /// `auto`.
    Auto,
    /// A strategy or a ladder.
    Ladder(Ladder),
}

const EXPECTED: &str = "`auto`, a re-ask strategy (feedback, resample, feedback_fresh, \
reason_then_format, escalate, constrained) or a list of strategies";

impl<'de> Deserialize<'de> for ReaskConfig {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        use serde::de::{self, value::SeqAccessDeserializer, IntoDeserializer, SeqAccess, Visitor};
        struct Setting;
        impl<'de> Visitor<'de> for Setting {
            type Value = ReaskConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(EXPECTED)
            }
            fn visit_str<E: de::Error>(self, value: &str) -> Result<ReaskConfig, E> {
                if value == "auto" {
                    return Ok(ReaskConfig::Auto);
                }
                Ladder::deserialize(value.into_deserializer())
                    .map(ReaskConfig::Ladder)
                    .map_err(|_: E| {
                        E::custom(format!(
                            "unknown `reask` value `{value}`: expected {EXPECTED}"
                        ))
                    })
            }
            fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<ReaskConfig, A::Error> {
                Ladder::deserialize(SeqAccessDeserializer::new(seq)).map(ReaskConfig::Ladder)
            }
        }
        deserializer.deserialize_any(Setting)
    }
}

impl Serialize for ReaskConfig {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            ReaskConfig::Auto => serializer.serialize_str("auto"),
            ReaskConfig::Ladder(ladder) => ladder.serialize(serializer),
        }
    }
}

/// How each re-ask asks: `auto`, one strategy, or a list of them (a ladder).
#[derive(JsonSchema)]
#[allow(dead_code)]
#[serde(untagged)]
enum ReaskSchema {
    /// Each re-ask takes the strategy the statistics favour (`reask_auto:`).
    Auto(AutoWord),
    /// One strategy, or a ladder of them.
    Ladder(Ladder),
}

#[derive(JsonSchema)]
#[allow(dead_code)]
#[serde(rename_all = "snake_case")]
enum AutoWord {
    Auto,
}

impl JsonSchema for ReaskConfig {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ReaskSetting".into()
    }
    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        ReaskSchema::json_schema(generator)
    }
}

/// How `reask: auto` chooses. A profile's keys are laid over `defaults:`' key by key.
///
/// ```yaml
/// reask: auto
/// reask_auto:
///   stats: stats/qwen.json       # written by `enforce eval`; relative to this file
///   fallback: [feedback, resample]
///   explore: true               # default: only where the chooser learns (enforce serve)
///   seed: 7
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct ReaskAutoConfig {
    /// The statistics file (JSON, version 1: per model, profile, issue code and strategy the
    /// re-asks made, fixed, valid, tokens and time), relative to the configuration file.
    /// Without one, re-asks take `fallback` and the outcome warns `REASK_AUTO_NO_CHOOSER`.
    pub stats: Option<PathBuf>,
    /// The ladder a re-ask takes where no strategy has `min_attempts` re-asks measured for
    /// every error code of the answer, and without statistics (default `[constrained,
    /// resample, feedback]`, without `constrained` under `decode: constrained`).
    pub fallback: Option<Ladder>,
    /// The strategies `auto` may take (default: all). `constrained` only applies when the
    /// contract gives a decoding constraint, `escalate` only with an escalation model;
    /// with `decode: constrained` every attempt is constrained by rule, and `constrained` is
    /// no candidate.
    pub strategies: Option<Vec<Reask>>,
    /// Draw each strategy's rate from its posterior (Thompson sampling, which tries a
    /// strategy measured less in proportion to its chance of being the best, never one
    /// expected to give less than half the best's valid answers per token); `false` always
    /// takes the best expected valid answers per token. Default: `true` where the chooser
    /// learns from its outcomes (`enforce serve`), `false` over a fixed statistics file
    /// (`enforce run`, `enforce eval`, Python), where a draw buys no information.
    pub explore: Option<bool>,
    /// The seed of the draws (default 0): with the request's seed (or its digest) and the
    /// attempt number it fixes each choice, so runs repeat.
    pub seed: Option<u64>,
    /// Re-asks a strategy needs measured for a code before it is compared (default 5).
    pub min_attempts: Option<u64>,
}

impl ReaskAutoConfig {
    /// These keys laid over `base`'s: each key set here wins.
    pub fn over(&self, base: &ReaskAutoConfig) -> ReaskAutoConfig {
        ReaskAutoConfig {
            stats: self.stats.clone().or_else(|| base.stats.clone()),
            fallback: self.fallback.clone().or_else(|| base.fallback.clone()),
            strategies: self.strategies.clone().or_else(|| base.strategies.clone()),
            explore: self.explore.or(base.explore),
            seed: self.seed.or(base.seed),
            min_attempts: self.min_attempts.or(base.min_attempts),
        }
    }
}
