//! # enforce-config
//!
//! The configuration layer of [enforce](enforce_core): `enforce.yaml` ([`Config`], read with
//! file:line:key errors by [`ConfigSource`]), the [`Registry`] that builds validators by type
//! name (the one place that knows every validator crate — `enforce-validators`,
//! `enforce-documents`, `enforce-external` — and that the plugin host extends at run time), and
//! [`ProfileSet`]: named validator lists with a policy, turned into
//! [`Enforcer`](enforce_core::Enforcer)s.
//!
//! | type | crate | codes |
//! |---|---|---|
//! | `step_marker` | enforce-documents | `MISSING_STEP_MARKER`, `INVALID_STEP` |
//! | `step_transition` | enforce-documents | `STEP_NOT_ALLOWED` |
//! | `one_of` | enforce-validators | `VALUE_NOT_ALLOWED` (renamable) |
//! | `adr_structure` | enforce-documents | `MISSING_YAML_HEADER`, `INVALID_YAML`, `MISSING_ADR_FIELD`, `MISSING_ADR_SECTION`, `INSUFFICIENT_CRITERIA` |
//! | `file_refs` (alias `file_existence`) | enforce-documents | `FILE_NOT_FOUND`, `PATH_OUTSIDE_ROOT` |
//! | `json` | enforce-validators | `INVALID_JSON`, `SCHEMA_VIOLATION` |
//! | `pattern` | enforce-validators | configurable (default `FORBIDDEN_PATTERN`, `MISSING_PATTERN`) |
//! | `length` | enforce-validators | `TOO_SHORT`, `TOO_LONG` |
//! | `terms` | enforce-validators | configurable (default `MISSING_TERM`, `FORBIDDEN_TERM`, `PREFERRED_TERM`) |
//! | `external` | enforce-external | `EXTERNAL_CHECK_FAILED` (and `VALIDATOR_UNAVAILABLE` from the loop) |
//! | `llm_judge` | enforce-external | configurable (default `JUDGE_REJECTED`), `REQUEST_DATA_MISSING` |
//! | `embedding_relevance` | enforce-external | configurable (default `CONTEXT_NOT_RELEVANT`), `REQUEST_DATA_MISSING` |
//!
//! [`schema`] generates the JSON Schema of `enforce.yaml` from these types, for editor completion
//! and checks.
//!
//! Every validator spec also accepts `input` and `when`
//! ([`enforce_validators::scope`]) to check a JSON field or a context value, or to apply only
//! under a condition.
//!
//! ```
//! use enforce_config::{ProfileSet, Registry};
//! use enforce_core::{Context, Status};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let profiles = ProfileSet::builtin(&Registry::builtin(), None).unwrap();
//! let chat = profiles.enforcer("chat").unwrap();
//! let outcome = block_on(chat.check("Which database do you use?", &Context::new(), enforce_core::Check::Repair));
//! assert_eq!(outcome.status, Status::Repaired);
//! assert!(outcome.response.unwrap().ends_with("<!-- STEP: what -->"));
//! ```
#![deny(missing_docs, missing_debug_implementations)]
#![forbid(unsafe_code)]

pub mod config;
pub mod env;
pub mod profile;
mod registry;
pub mod schema;

#[cfg(test)]
mod testing;

pub use config::{Config, ConfigError, ConfigSource};
pub use enforce_validators::{BuildEnv, BuildError, DocumentFormat, FactoryInput, RunnerFactory};
pub use profile::{Profile, ProfileSet};
pub use registry::{Factory, Registry, RegistryError, RESERVED_KEYS};

use enforce_core::Validator;
use enforce_documents::{adr, file_refs, step_marker, step_transition};
use enforce_validators::{json, length, one_of, pattern, terms};

/// Files that validator options name (a JSON Schema file) may be JSON or YAML.
pub const JSON_OR_YAML: DocumentFormat = DocumentFormat {
    name: "JSON or YAML",
    // JSON is YAML, so one parser reads both.
    parse: |text| serde_yaml_ng::from_str(text).map_err(|e| e.to_string()),
};

/// Other names of built-in validator types, with the type each stands for: `file_existence`
/// is what the HELIX seed calls `file_refs`, so its configurations read as written.
pub const BUILTIN_ALIASES: &[(&str, &str)] = &[("file_existence", "file_refs")];

/// The built-in type `kind` is another name of, when it is an alias.
pub fn alias_of(kind: &str) -> Option<&'static str> {
    BUILTIN_ALIASES
        .iter()
        .find(|(alias, _)| *alias == kind)
        .map(|(_, target)| *target)
}

fn boxed<V: Validator + 'static>(v: V) -> Box<dyn Validator> {
    Box::new(v)
}

/// The built-in validator types with the JSON Schema of their options, and whether the type can
/// be used without options (`step_marker: ~`, or just its name in a profile).
fn builtin_options() -> Vec<(&'static str, schema::OptionsSchema, bool)> {
    vec![
        ("step_marker", step_marker::StepMarker::options_schema, true),
        (
            "step_transition",
            step_transition::StepTransition::options_schema,
            false,
        ),
        ("adr_structure", adr::AdrStructure::options_schema, true),
        ("file_refs", file_refs::FileRefs::options_schema, true),
        ("file_existence", file_refs::FileRefs::options_schema, true),
        ("json", json::JsonValidator::options_schema, true),
        ("pattern", pattern::Pattern::options_schema, false),
        ("length", length::Length::options_schema, false),
        ("one_of", one_of::OneOf::options_schema, false),
        (
            "external",
            enforce_external::External::options_schema,
            false,
        ),
        ("terms", terms::Terms::options_schema, false),
        (
            "llm_judge",
            enforce_external::LlmJudge::options_schema,
            false,
        ),
        (
            "embedding_relevance",
            enforce_external::EmbeddingRelevance::options_schema,
            false,
        ),
    ]
}

/// The factories of the built-in validator types, by type name.
fn builtin_factories() -> Vec<(&'static str, Factory)> {
    vec![
        (
            "step_marker",
            Box::new(|i: &FactoryInput<'_>| step_marker::StepMarker::from_config(i).map(boxed)),
        ),
        (
            "step_transition",
            Box::new(|i: &FactoryInput<'_>| {
                step_transition::StepTransition::from_config(i).map(boxed)
            }),
        ),
        (
            "adr_structure",
            Box::new(|i: &FactoryInput<'_>| adr::AdrStructure::from_config(i).map(boxed)),
        ),
        (
            "file_refs",
            Box::new(|i: &FactoryInput<'_>| file_refs::FileRefs::from_config(i).map(boxed)),
        ),
        (
            "file_existence",
            Box::new(|i: &FactoryInput<'_>| file_refs::FileRefs::from_config(i).map(boxed)),
        ),
        (
            "json",
            Box::new(|i: &FactoryInput<'_>| json::JsonValidator::from_config(i).map(boxed)),
        ),
        (
            "pattern",
            Box::new(|i: &FactoryInput<'_>| pattern::Pattern::from_config(i).map(boxed)),
        ),
        (
            "length",
            Box::new(|i: &FactoryInput<'_>| length::Length::from_config(i).map(boxed)),
        ),
        (
            "one_of",
            Box::new(|i: &FactoryInput<'_>| one_of::OneOf::from_config(i).map(boxed)),
        ),
        (
            "external",
            Box::new(|i: &FactoryInput<'_>| enforce_external::External::from_config(i).map(boxed)),
        ),
        (
            "terms",
            Box::new(|i: &FactoryInput<'_>| terms::Terms::from_config(i).map(boxed)),
        ),
        (
            "llm_judge",
            Box::new(|i: &FactoryInput<'_>| enforce_external::LlmJudge::from_config(i).map(boxed)),
        ),
        (
            "embedding_relevance",
            Box::new(|i: &FactoryInput<'_>| {
                enforce_external::EmbeddingRelevance::from_config(i).map(boxed)
            }),
        ),
    ]
}
