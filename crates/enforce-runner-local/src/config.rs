//! [`LocalConfig`]: which GGUF model the local runner loads and how it samples, and
//! [`LocalConfigError`], why a configuration cannot be used.
//!
//! Always compiled (no llama.cpp needed), so a configuration file and its JSON Schema know
//! `type: local` whether or not the runner itself was built.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::path::PathBuf;

/// How the local runner loads its model and samples its answers.
///
/// The sampling defaults are llama.cpp server's (`top_k` 40, `top_p` 0.95, `min_p` 0.05), so an
/// answer here reads like one from `llama-server` with the same model. A request's `params`
/// (`seed`, `temperature`, `max_tokens`, `response_format`) override `seed`, `temperature`,
/// `max_tokens` and the grammar for that request.
///
/// ```
/// use enforce_runner_local::LocalConfig;
///
/// let c: LocalConfig = serde_json::from_str(
///     r#"{"model": "models/SmolLM2-135M-Instruct.Q4_1.gguf", "seed": 7, "max_tokens": 256}"#)
///     .unwrap();
/// assert_eq!(c.threads, 1);
/// assert!(c.check().is_ok());
/// ```
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct LocalConfig {
    /// The GGUF model file (loaded once per runner, on the first request).
    pub model: PathBuf,
    /// CPU threads per generation (default 1: on a busy machine with few cores one thread ran
    /// twice as fast as two).
    pub threads: u32,
    /// Sampling temperature (default 0.8); 0 picks the most likely token every time (greedy).
    pub temperature: f32,
    /// Keep only the `top_k` most likely tokens (default 40; 0 keeps all).
    pub top_k: u32,
    /// Keep the most likely tokens up to this probability mass (default 0.95; 1 keeps all).
    pub top_p: f32,
    /// Drop tokens less likely than `min_p` times the most likely one (default 0.05; 0 keeps
    /// all).
    pub min_p: f32,
    /// Seed of the sampler; the same seed, prompt and settings give the same answer. Absent:
    /// a random seed per request.
    pub seed: Option<u64>,
    /// Most tokens an answer may have (default 512); an answer that reaches it ends with
    /// `finish_reason: length`.
    pub max_tokens: u32,
    /// Largest context in tokens, prompt plus answer (default 4096, at most the model's
    /// training context). A prompt that does not fit is an `unavailable` runner error.
    pub context_size: u32,
    /// A llama.cpp grammar (GBNF, root rule `root`) every answer must follow.
    pub grammar: Option<String>,
    /// A JSON Schema every answer must follow, compiled by `constraint_engine`. A request's
    /// `response_format` (`json_schema` or `json_object`) replaces it for that request.
    pub json_schema: Option<Value>,
    /// What compiles a JSON Schema into the sampler's constraint: `llguidance` (default) or
    /// `gbnf`.
    pub constraint_engine: ConstraintEngine,
}

/// What turns a JSON Schema into the constraint the local runner samples under.
///
/// `llguidance` takes the schema itself, `pattern`, `format`, numeric bounds and long
/// `maxLength`s included; a schema it rejects is compiled to GBNF instead, and the reason is a
/// decode note. `gbnf` is enforce's own JSON Schema → GBNF converter run by llama.cpp's grammar
/// sampler: the shape only (types, keys, lengths up to 2000, enums). A regex always goes to
/// llguidance. The two are compared side by side in docs/benchmarks.md.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum ConstraintEngine {
    /// llguidance: the whole JSON Schema.
    #[default]
    Llguidance,
    /// enforce's GBNF converter and llama.cpp's grammar sampler: the schema's shape.
    Gbnf,
}

impl ConstraintEngine {
    /// The name as written in a configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            ConstraintEngine::Llguidance => "llguidance",
            ConstraintEngine::Gbnf => "gbnf",
        }
    }
}

/// Default of [`LocalConfig::max_tokens`].
pub const DEFAULT_MAX_TOKENS: u32 = 512;
/// Default of [`LocalConfig::context_size`].
pub const DEFAULT_CONTEXT_SIZE: u32 = 4096;

impl Default for LocalConfig {
    fn default() -> Self {
        LocalConfig {
            model: PathBuf::new(),
            threads: 1,
            temperature: 0.8,
            top_k: 40,
            top_p: 0.95,
            min_p: 0.05,
            seed: None,
            max_tokens: DEFAULT_MAX_TOKENS,
            context_size: DEFAULT_CONTEXT_SIZE,
            grammar: None,
            json_schema: None,
            constraint_engine: ConstraintEngine::default(),
        }
    }
}

/// A local runner configuration that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LocalConfigError {
    /// `model` is empty.
    #[error(
        "`model` must name a GGUF file (e.g. `model: models/SmolLM2-135M-Instruct.Q4_1.gguf`)"
    )]
    MissingModel,
    /// A number is out of its range.
    #[error("`{field}` must be {expected}, got {value}")]
    OutOfRange {
        /// The config field.
        field: &'static str,
        /// What it must be.
        expected: &'static str,
        /// The value as written.
        value: String,
    },
    /// Both `grammar` and `json_schema` are set.
    #[error("set `grammar` or `json_schema`, not both")]
    TwoGrammars,
    /// `json_schema` is not a JSON object (or `true`).
    #[error("`json_schema` must be a JSON Schema object, got {0}")]
    BadSchema(String),
    /// The runner was asked for, but this build has no llama.cpp.
    #[error(
        "the local runner is not in this build: build enforce with `cargo build --release \
         --features local` (needs cmake and libclang: Debian `apt-get install cmake \
         libclang-dev`)"
    )]
    NotBuilt,
}

impl LocalConfig {
    /// A configuration for `model` with every other setting at its default.
    pub fn new(model: impl Into<PathBuf>) -> Self {
        LocalConfig {
            model: model.into(),
            ..LocalConfig::default()
        }
    }

    /// Checks the settings without touching the model file (a missing or broken file is a
    /// runner error of the first request, so a server starts and says which model is missing).
    pub fn check(&self) -> Result<(), LocalConfigError> {
        if self.model.as_os_str().is_empty() {
            return Err(LocalConfigError::MissingModel);
        }
        let range = |field, expected, ok: bool, value: String| {
            if ok {
                Ok(())
            } else {
                Err(LocalConfigError::OutOfRange {
                    field,
                    expected,
                    value,
                })
            }
        };
        range(
            "threads",
            "between 1 and 512",
            (1..=512).contains(&self.threads),
            self.threads.to_string(),
        )?;
        range(
            "temperature",
            "a number from 0 to 100",
            (0.0..=100.0).contains(&self.temperature),
            self.temperature.to_string(),
        )?;
        range(
            "top_p",
            "a number from 0 to 1",
            (0.0..=1.0).contains(&self.top_p),
            self.top_p.to_string(),
        )?;
        range(
            "min_p",
            "a number from 0 to 1",
            (0.0..=1.0).contains(&self.min_p),
            self.min_p.to_string(),
        )?;
        range(
            "top_k",
            "at most 1000000",
            self.top_k <= 1_000_000,
            self.top_k.to_string(),
        )?;
        range(
            "max_tokens",
            "at least 1",
            self.max_tokens >= 1,
            self.max_tokens.to_string(),
        )?;
        range(
            "context_size",
            "between 16 and 1048576 tokens",
            (16..=1 << 20).contains(&self.context_size),
            self.context_size.to_string(),
        )?;
        if self.grammar.is_some() && self.json_schema.is_some() {
            return Err(LocalConfigError::TwoGrammars);
        }
        match &self.json_schema {
            None | Some(Value::Object(_)) | Some(Value::Bool(true)) => Ok(()),
            Some(other) => Err(LocalConfigError::BadSchema(other.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_check_once_a_model_is_named() {
        assert_eq!(
            LocalConfig::default().check(),
            Err(LocalConfigError::MissingModel)
        );
        assert_eq!(LocalConfig::new("m.gguf").check(), Ok(()));
    }

    #[test]
    fn out_of_range_values_name_their_field() {
        let bad = [
            LocalConfig {
                threads: 0,
                ..LocalConfig::new("m.gguf")
            },
            LocalConfig {
                temperature: -1.0,
                ..LocalConfig::new("m.gguf")
            },
            LocalConfig {
                top_p: 1.5,
                ..LocalConfig::new("m.gguf")
            },
            LocalConfig {
                max_tokens: 0,
                ..LocalConfig::new("m.gguf")
            },
            LocalConfig {
                context_size: 8,
                ..LocalConfig::new("m.gguf")
            },
        ];
        let fields: Vec<&str> = bad
            .iter()
            .map(|c| match c.check() {
                Err(LocalConfigError::OutOfRange { field, .. }) => field,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(
            fields,
            [
                "threads",
                "temperature",
                "top_p",
                "max_tokens",
                "context_size"
            ]
        );
        let nan = LocalConfig {
            temperature: f32::NAN,
            ..LocalConfig::new("m.gguf")
        };
        assert!(nan.check().is_err());
    }

    #[test]
    fn grammar_options_are_checked() {
        let both = LocalConfig {
            grammar: Some("root ::= \"a\"".into()),
            json_schema: Some(serde_json::json!({"type": "object"})),
            ..LocalConfig::new("m.gguf")
        };
        assert_eq!(both.check(), Err(LocalConfigError::TwoGrammars));
        let not_schema = LocalConfig {
            json_schema: Some(serde_json::json!("object")),
            ..LocalConfig::new("m.gguf")
        };
        assert!(matches!(
            not_schema.check(),
            Err(LocalConfigError::BadSchema(_))
        ));
    }

    #[test]
    fn the_constraint_engine_is_named_in_lowercase() {
        let c: LocalConfig =
            serde_json::from_str(r#"{"model":"m","constraint_engine":"gbnf"}"#).unwrap();
        assert_eq!(c.constraint_engine, ConstraintEngine::Gbnf);
        assert_eq!(
            LocalConfig::default().constraint_engine,
            ConstraintEngine::Llguidance
        );
        assert!(
            serde_json::from_str::<LocalConfig>(r#"{"model":"m","constraint_engine":"x"}"#)
                .is_err()
        );
    }

    #[test]
    fn unknown_keys_are_rejected() {
        assert!(serde_json::from_str::<LocalConfig>(r#"{"model":"m","thread":2}"#).is_err());
    }
}
