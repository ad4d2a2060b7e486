//! # enforce-plugin-abi
//!
//! The stable interface between [enforce](https://example.invalid/enforce) and third-party
//! validator plugins, and the SDK plugin authors use to implement it.
//!
//! A plugin is a `cdylib` crate that depends on this crate (and nothing of enforce's), implements
//! [`sdk::PluginValidator`] for each of its validators and exports them with [`export_plugin!`].
//! The enforce host finds the library in its plugin directories at startup, checks that it was
//! built for a compatible [`INTERFACE_VERSION`] and type layout, and then uses its validators in
//! profiles exactly like built-in ones.
//!
//! The interface itself is small:
//!
//! - [`PluginModule`], the root module (an abi_stable *prefix type*, so later versions can append
//!   fields): `describe()` returns the plugin's name, version and validators;
//!   `create_validator(name, config_json)` builds one validator from its configuration.
//! - [`ValidatorObject`], an FFI-safe trait object: `validate(response, context_json)` returns
//!   [`PluginIssue`]s (the same fields as `enforce_core::Issue`) or a [`PluginError`];
//!   `repair(...)` optionally returns a repaired text; since interface 1.1,
//!   `validate_partial(prefix, context_json)` optionally returns the definite issues of a
//!   streamed answer's prefix (early abort). Plugins built for 1.0 load through [`v1_0`].
//!
//! Calls are synchronous. Every call into a plugin built with the SDK runs inside
//! `catch_unwind`, so a panic comes back as a [`PluginError`] of kind
//! [`PluginErrorKind::Panic`] (which the host reports as a `PLUGIN_PANIC` issue) instead of
//! aborting the host.
//!
//! ## A complete plugin
//!
//! ```
//! use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
//! use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue};
//!
//! /// Forbids a configurable word.
//! struct NoWord {
//!     word: String,
//! }
//!
//! impl NoWord {
//!     fn from_config(config: &serde_json::Value) -> Result<Self, String> {
//!         let word = config
//!             .get("word")
//!             .and_then(|w| w.as_str())
//!             .ok_or("`word` (a string) is required")?;
//!         Ok(NoWord { word: word.to_string() })
//!     }
//! }
//!
//! impl PluginValidator for NoWord {
//!     fn validate(&self, response: &str, _: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
//!         Ok(response
//!             .lines()
//!             .enumerate()
//!             .filter(|(_, line)| line.contains(&self.word))
//!             .map(|(n, _)| {
//!                 PluginIssue::error("FORBIDDEN_WORD", format!("`{}` is not allowed.", self.word))
//!                     .at_line(n as u32 + 1)
//!             })
//!             .collect())
//!     }
//! }
//!
//! export_plugin!(PluginSpec {
//!     name: "no-word",
//!     version: env!("CARGO_PKG_VERSION"),
//!     validators: &[ValidatorSpec {
//!         name: "no_word",
//!         description: "Forbids the configured word.",
//!         build: |config| Ok(Box::new(NoWord::from_config(config)?)),
//!     }],
//! });
//! # fn main() {}
//! ```
//!
//! Build it with `crate-type = ["cdylib"]` and copy the `.so` into a plugin directory; see
//! `plugins/README.md` in the enforce repository for the whole walk-through.
#![deny(missing_docs)]

mod ffi;
pub mod sdk;
pub mod v1_0;

pub use ffi::{
    PluginDescription, PluginError, PluginErrorKind, PluginIssue, PluginModule, PluginModulePrefix,
    PluginModuleRef, PluginSeverity, ValidatorBox, ValidatorDescription, ValidatorObject,
    ValidatorObject_TO, INTERFACE_VERSION,
};

/// The `abi_stable` version this interface is built on, re-exported so the host and
/// [`export_plugin!`] use exactly the same one.
pub use abi_stable;

#[cfg(test)]
mod tests {
    use super::*;
    use abi_stable::library::RootModule;
    use abi_stable::std_types::{RSlice, RStr};
    use sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};

    #[test]
    fn export_macro_uses_the_symbol_abi_stable_looks_up() {
        // `export_plugin!` spells the header's symbol out; it must be the loader's name.
        assert_eq!(
            abi_stable::library::ROOT_MODULE_LOADER_NAME,
            "_1as_0lib_1header_0root_bmodule_bloader"
        );
    }

    #[test]
    fn interface_version_is_the_root_module_version() {
        assert_eq!(
            PluginModuleRef::VERSION_STRINGS.to_string(),
            INTERFACE_VERSION
        );
    }

    struct Flaky;

    impl PluginValidator for Flaky {
        fn validate(
            &self,
            response: &str,
            context: &Context<'_>,
        ) -> Result<Vec<PluginIssue>, PluginError> {
            match response {
                "panic" => panic!("asked to panic"),
                "down" => Err(PluginError::unavailable("backend down")),
                _ => Ok(vec![PluginIssue::warning(
                    "SEEN",
                    context.get_str("who").unwrap_or("nobody"),
                )]),
            }
        }

        fn repair(
            &self,
            response: &str,
            _: &Context<'_>,
            issues: &[PluginIssue],
        ) -> Option<String> {
            if response == "panic" {
                panic!("repair panicked");
            }
            Some(format!("{response} ({} issues)", issues.len()))
        }
    }

    static SPEC: PluginSpec = PluginSpec {
        name: "flaky",
        version: "9.9.9",
        validators: &[ValidatorSpec {
            name: "flaky",
            description: "panics on demand",
            build: |config| {
                if config.get("reject").is_some() {
                    Err("rejected on purpose".into())
                } else {
                    Ok(Box::new(Flaky))
                }
            },
        }],
    };

    #[test]
    fn describe_lists_the_validators() {
        let desc = sdk::describe(&SPEC).into_result().unwrap();
        assert_eq!(desc.name.as_str(), "flaky");
        assert_eq!(desc.version.as_str(), "9.9.9");
        assert_eq!(desc.validators.len(), 1);
        assert_eq!(desc.validators[0].name.as_str(), "flaky");
    }

    #[test]
    fn create_reports_unknown_names_and_bad_configs() {
        let err = sdk::create_validator(&SPEC, RStr::from("nope"), RStr::from(""))
            .into_result()
            .err()
            .unwrap();
        assert_eq!(err.kind, PluginErrorKind::UnknownValidator);
        assert!(err.message.contains("flaky"));

        let err = sdk::create_validator(&SPEC, RStr::from("flaky"), RStr::from("{not json"))
            .into_result()
            .err()
            .unwrap();
        assert_eq!(err.kind, PluginErrorKind::InvalidConfig);

        let err = sdk::create_validator(&SPEC, RStr::from("flaky"), RStr::from(r#"{"reject":1}"#))
            .into_result()
            .err()
            .unwrap();
        assert_eq!(err.kind, PluginErrorKind::InvalidConfig);
        assert!(err.message.contains("rejected on purpose"));
    }

    #[test]
    fn calls_through_the_object_fill_names_and_catch_panics() {
        let obj = sdk::create_validator(&SPEC, RStr::from("flaky"), RStr::from(""))
            .into_result()
            .ok()
            .unwrap();
        let issues = obj
            .validate(RStr::from("fine"), RStr::from(r#"{"who":"ACME"}"#))
            .into_result()
            .unwrap();
        assert_eq!(issues[0].validator.as_str(), "flaky");
        assert_eq!(issues[0].message.as_str(), "ACME");
        assert_eq!(issues[0].severity, PluginSeverity::Warning);

        let err = obj
            .validate(RStr::from("panic"), RStr::from("{}"))
            .into_result()
            .unwrap_err();
        assert_eq!(err.kind, PluginErrorKind::Panic);
        assert!(err.message.contains("asked to panic"));

        let err = obj
            .validate(RStr::from("down"), RStr::from("{}"))
            .into_result()
            .unwrap_err();
        assert_eq!(err.kind, PluginErrorKind::Unavailable);

        let repaired = obj
            .repair(
                RStr::from("x"),
                RStr::from("{}"),
                RSlice::from_slice(&issues),
            )
            .into_result()
            .unwrap();
        assert_eq!(repaired.into_option().unwrap().as_str(), "x (1 issues)");
        let err = obj
            .repair(
                RStr::from("panic"),
                RStr::from("{}"),
                RSlice::from_slice(&[]),
            )
            .into_result()
            .unwrap_err();
        assert_eq!(err.kind, PluginErrorKind::Panic);
    }
}
