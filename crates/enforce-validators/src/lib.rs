//! # enforce-validators
//!
//! The built-in validators of [enforce](enforce_core), the [`Registry`] that builds validators
//! from configuration by type name (and that other code — the plugin host — extends at run
//! time), and [`ProfileSet`]: named validator lists with a policy, loaded from `enforce.yaml`
//! and turned into [`Enforcer`](enforce_core::Enforcer)s.
//!
//! | type | module | codes |
//! |---|---|---|
//! | `step_marker` | [`step_marker`] | `MISSING_STEP_MARKER`, `INVALID_STEP` |
//! | `adr_structure` | [`adr`] | `MISSING_YAML_HEADER`, `INVALID_YAML`, `MISSING_ADR_FIELD`, `MISSING_ADR_SECTION`, `INSUFFICIENT_CRITERIA` |
//! | `file_refs` | [`file_refs`] | `FILE_NOT_FOUND`, `PATH_OUTSIDE_ROOT` |
//! | `json` | [`json`] | `INVALID_JSON`, `SCHEMA_VIOLATION` |
//! | `pattern` | [`pattern`] | configurable (default `FORBIDDEN_PATTERN`, `MISSING_PATTERN`) |
//! | `length` | [`length`] | `TOO_SHORT`, `TOO_LONG` |
//! | `external` | [`external`] | `EXTERNAL_CHECK_FAILED` (and `VALIDATOR_UNAVAILABLE` from the loop) |
//! | `terms` | [`terms`] | configurable (default `MISSING_TERM`, `FORBIDDEN_TERM`, `PREFERRED_TERM`) |
//!
//! Every validator spec also accepts `input` and `when` ([`scope`]) to check a JSON field or a
//! context value, or to apply only under a condition.
//!
//! ```
//! use enforce_validators::{ProfileSet, Registry};
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
#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod adr;
pub mod breaker;
pub mod config;
mod error;
pub mod external;
pub mod file_refs;
pub mod json;
pub mod length;
pub mod pattern;
pub mod profile;
mod registry;
pub mod scope;
pub mod step_marker;
pub mod terms;
pub mod text;
mod yaml_edit;

#[cfg(test)]
mod testing;

pub use config::{Config, ConfigError, ConfigSource};
pub use error::BuildError;
pub use profile::{Profile, ProfileSet};
pub use registry::{BuildEnv, Factory, FactoryInput, Registry, RegistryError, RESERVED_KEYS};
pub use step_marker::extract_step;

use enforce_core::Validator;

fn boxed<V: Validator + 'static>(v: V) -> Box<dyn Validator> {
    Box::new(v)
}

/// The factories of the built-in validator types, by type name.
pub(crate) fn builtin_factories() -> Vec<(&'static str, Factory)> {
    vec![
        (
            "step_marker",
            Box::new(|i: &FactoryInput<'_>| step_marker::StepMarker::from_config(i).map(boxed)),
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
            "external",
            Box::new(|i: &FactoryInput<'_>| external::External::from_config(i).map(boxed)),
        ),
        (
            "terms",
            Box::new(|i: &FactoryInput<'_>| terms::Terms::from_config(i).map(boxed)),
        ),
    ]
}
