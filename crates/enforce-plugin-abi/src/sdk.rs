//! The plugin SDK: implement [`PluginValidator`], list it in a [`PluginSpec`], export the spec
//! with [`export_plugin!`](crate::export_plugin).
//!
//! Every call from the host into a plugin goes through this module, which runs it inside
//! `catch_unwind`: a panicking validator returns a [`PluginError`] of kind
//! [`Panic`](crate::PluginErrorKind::Panic) instead of unwinding into the host (which would abort
//! the whole process). This only works when the plugin is built with `panic = "unwind"`, Rust's
//! default.

use crate::ffi::{
    PluginDescription, PluginError, PluginIssue, PluginModule, PluginModuleRef, ValidatorBox,
    ValidatorDescription, ValidatorObject, ValidatorObject_TO,
};
use abi_stable::{
    prefix_type::PrefixTypeTrait,
    sabi_trait::TD_Opaque,
    std_types::{ROption, RResult, RSlice, RStr, RString, RVec},
};
use serde_json::{Map, Value};
use std::any::Any;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::OnceLock;

/// The request context as a plugin sees it: a JSON object, parsed on first use.
///
/// Most validators never look at the context, so the SDK does not parse it unless asked.
///
/// ```
/// use enforce_plugin_abi::sdk::Context;
///
/// let ctx = Context::new(r#"{"company_name": "ACME", "year": 2026}"#);
/// assert_eq!(ctx.get_str("company_name"), Some("ACME"));
/// assert_eq!(ctx.get("year").and_then(|v| v.as_u64()), Some(2026));
/// assert_eq!(ctx.get_str("missing"), None);
/// ```
#[derive(Debug)]
pub struct Context<'a> {
    raw: &'a str,
    parsed: OnceLock<Map<String, Value>>,
}

impl<'a> Context<'a> {
    /// A context over the JSON text `raw`. Text that is not a JSON object reads as empty.
    pub fn new(raw: &'a str) -> Self {
        Context {
            raw,
            parsed: OnceLock::new(),
        }
    }

    /// The context exactly as the host sent it.
    pub fn raw_json(&self) -> &'a str {
        self.raw
    }

    /// The whole context as a JSON object.
    pub fn as_map(&self) -> &Map<String, Value> {
        self.parsed
            .get_or_init(|| match serde_json::from_str(self.raw) {
                Ok(Value::Object(map)) => map,
                _ => Map::new(),
            })
    }

    /// The value under `key`.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.as_map().get(key)
    }

    /// The value under `key` if it is a string.
    pub fn get_str(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(Value::as_str)
    }
}

/// A validator inside a plugin. Implement this; the SDK turns it into a
/// [`ValidatorObject`] the host can call.
///
/// ```
/// use enforce_plugin_abi::sdk::{Context, PluginValidator};
/// use enforce_plugin_abi::{PluginError, PluginIssue};
///
/// /// Responses must not shout.
/// struct NoShouting;
///
/// impl PluginValidator for NoShouting {
///     fn validate(&self, response: &str, _: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
///         Ok(if response.contains("!!") {
///             vec![PluginIssue::error("SHOUTING", "The response uses `!!`.")]
///         } else {
///             vec![]
///         })
///     }
///
///     fn repair(&self, response: &str, _: &Context<'_>, _: &[PluginIssue]) -> Option<String> {
///         Some(response.replace("!!", "."))
///     }
/// }
///
/// let issues = NoShouting.validate("Great!!", &Context::new("{}")).unwrap();
/// assert_eq!(issues[0].code.as_str(), "SHOUTING");
/// ```
pub trait PluginValidator: Send + Sync + 'static {
    /// Checks `response` and returns every issue found (empty: it passed), or an error when no
    /// verdict can be given.
    fn validate(
        &self,
        response: &str,
        context: &Context<'_>,
    ) -> Result<Vec<PluginIssue>, PluginError>;

    /// Tries a deterministic repair. `issues` are the issues this validator raised on
    /// `response`. Returns the repaired text, or `None` when it cannot repair it.
    fn repair(
        &self,
        response: &str,
        context: &Context<'_>,
        issues: &[PluginIssue],
    ) -> Option<String> {
        let _ = (response, context, issues);
        None
    }

    /// Checks `prefix`, the part of a streamed answer received so far, for early abort:
    /// `Some` with only the issues no continuation can remove (a forbidden word followed by a
    /// space, not one the next bytes could still extend), `None` (the default) when this
    /// validator judges whole answers only.
    ///
    /// Each call gets the whole prefix again (the boundary keeps no state), so keep it cheap.
    /// A wrong "definite" error throws away a good answer: when in doubt, return nothing.
    fn validate_partial(
        &self,
        prefix: &str,
        context: &Context<'_>,
    ) -> Option<Result<Vec<PluginIssue>, PluginError>> {
        let _ = (prefix, context);
        None
    }
}

/// Builds a validator from its configuration (a JSON value; `null` when the profile gives none).
/// An `Err` is reported to the user as an invalid configuration.
pub type BuildValidator = fn(&Value) -> Result<Box<dyn PluginValidator>, String>;

/// One validator a plugin offers.
#[derive(Debug, Clone, Copy)]
pub struct ValidatorSpec {
    /// The name profiles use (`snake_case` by convention, unique among all loaded plugins).
    pub name: &'static str,
    /// One line on what it checks, shown by `enforce validators`.
    pub description: &'static str,
    /// Builds an instance from its configuration.
    pub build: BuildValidator,
}

/// Everything a plugin exports: its name, version and validators.
///
/// Write it as a `static` initializer inside [`export_plugin!`](crate::export_plugin); see the
/// crate docs for a complete plugin.
#[derive(Debug, Clone, Copy)]
pub struct PluginSpec {
    /// The plugin's name (`german-prose`).
    pub name: &'static str,
    /// The plugin's version; `env!("CARGO_PKG_VERSION")` is the usual choice.
    pub version: &'static str,
    /// The validators it offers.
    pub validators: &'static [ValidatorSpec],
}

/// The text of a panic payload, for the error that replaces the panic.
fn panic_message(payload: &(dyn Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "panic with a non-string payload".to_string()
    }
}

/// Runs `call`, turning a panic into a [`PluginError`] of kind `Panic`.
///
/// This is the guard every SDK entry point uses; plugins that implement
/// [`ValidatorObject`] by hand should use it too.
///
/// ```
/// use enforce_plugin_abi::{sdk::guard, PluginErrorKind};
///
/// let result = guard(|| -> Result<u32, _> { panic!("boom") });
/// let err = result.into_result().unwrap_err();
/// assert_eq!(err.kind, PluginErrorKind::Panic);
/// assert!(err.message.as_str().contains("boom"));
/// ```
pub fn guard<T>(call: impl FnOnce() -> Result<T, PluginError>) -> RResult<T, PluginError> {
    match catch_unwind(AssertUnwindSafe(call)) {
        Ok(Ok(value)) => RResult::ROk(value),
        Ok(Err(err)) => RResult::RErr(err),
        Err(payload) => RResult::RErr(PluginError::panic(panic_message(payload.as_ref()))),
    }
}

/// Adapts a [`PluginValidator`] to the FFI trait, guarding every call.
struct Guarded {
    name: &'static str,
    inner: Box<dyn PluginValidator>,
}

impl ValidatorObject for Guarded {
    fn validate(
        &self,
        response: RStr<'_>,
        context_json: RStr<'_>,
    ) -> RResult<RVec<PluginIssue>, PluginError> {
        guard(|| {
            let context = Context::new(context_json.as_str());
            let issues = self.inner.validate(response.as_str(), &context)?;
            Ok(self.named(issues))
        })
    }

    fn repair(
        &self,
        response: RStr<'_>,
        context_json: RStr<'_>,
        issues: RSlice<'_, PluginIssue>,
    ) -> RResult<ROption<RString>, PluginError> {
        guard(|| {
            let context = Context::new(context_json.as_str());
            let repaired = self
                .inner
                .repair(response.as_str(), &context, issues.as_slice());
            Ok(ROption::from(repaired.map(RString::from)))
        })
    }

    fn validate_partial(
        &self,
        prefix: RStr<'_>,
        context_json: RStr<'_>,
    ) -> RResult<ROption<RVec<PluginIssue>>, PluginError> {
        guard(|| {
            let context = Context::new(context_json.as_str());
            match self.inner.validate_partial(prefix.as_str(), &context) {
                None => Ok(ROption::RNone),
                Some(issues) => Ok(ROption::RSome(self.named(issues?))),
            }
        })
    }
}

impl Guarded {
    /// The issues with this validator's name where they have none.
    fn named(&self, issues: Vec<PluginIssue>) -> RVec<PluginIssue> {
        issues
            .into_iter()
            .map(|mut issue| {
                if issue.validator.is_empty() {
                    issue.validator = RString::from(self.name);
                }
                issue
            })
            .collect()
    }
}

/// The `describe` entry point for `spec` (used by [`export_plugin!`](crate::export_plugin)).
pub fn describe(spec: &PluginSpec) -> RResult<PluginDescription, PluginError> {
    guard(|| {
        Ok(PluginDescription {
            name: RString::from(spec.name),
            version: RString::from(spec.version),
            validators: spec
                .validators
                .iter()
                .map(|v| ValidatorDescription {
                    name: RString::from(v.name),
                    description: RString::from(v.description),
                })
                .collect(),
        })
    })
}

/// The `create_validator` entry point for `spec` (used by
/// [`export_plugin!`](crate::export_plugin)).
///
/// An empty `config_json` means "no configuration" and reaches the builder as `null`.
pub fn create_validator(
    spec: &PluginSpec,
    name: RStr<'_>,
    config_json: RStr<'_>,
) -> RResult<ValidatorBox, PluginError> {
    guard(|| {
        let Some(validator) = spec.validators.iter().find(|v| v.name == name.as_str()) else {
            let known: Vec<&str> = spec.validators.iter().map(|v| v.name).collect();
            return Err(PluginError::unknown_validator(format!(
                "plugin `{}` has no validator `{}` (it offers: {})",
                spec.name,
                name,
                known.join(", ")
            )));
        };
        let config: Value = if config_json.trim().is_empty() {
            Value::Null
        } else {
            serde_json::from_str(config_json.as_str())
                .map_err(|e| PluginError::invalid_config(format!("config is not JSON: {e}")))?
        };
        let inner = (validator.build)(&config).map_err(PluginError::invalid_config)?;
        Ok(ValidatorObject_TO::from_value(
            Guarded {
                name: validator.name,
                inner,
            },
            TD_Opaque,
        ))
    })
}

/// Builds the root module from the two entry points (used by
/// [`export_plugin!`](crate::export_plugin)).
pub fn root_module(
    describe: extern "C" fn() -> RResult<PluginDescription, PluginError>,
    create_validator: extern "C" fn(RStr<'_>, RStr<'_>) -> RResult<ValidatorBox, PluginError>,
) -> PluginModuleRef {
    // Leaked once per process: the root loader runs once per library and the module lives as
    // long as the library, which is never unloaded.
    PluginModule {
        describe,
        create_validator,
    }
    .leak_into_prefix()
}

/// Exports a plugin: declares the library's root module from a [`PluginSpec`].
///
/// Use it once, at the top level of a `cdylib` crate. It defines the `static` the host looks up
/// (the name abi_stable's loader expects) and the two `extern "C"` entry points, each of which
/// runs inside `catch_unwind`.
///
/// ```
/// use enforce_plugin_abi::sdk::{Context, PluginSpec, PluginValidator, ValidatorSpec};
/// use enforce_plugin_abi::{export_plugin, PluginError, PluginIssue};
///
/// struct NotEmpty;
///
/// impl PluginValidator for NotEmpty {
///     fn validate(&self, response: &str, _: &Context<'_>) -> Result<Vec<PluginIssue>, PluginError> {
///         Ok(if response.trim().is_empty() {
///             vec![PluginIssue::error("EMPTY_RESPONSE", "The response is empty.")]
///         } else {
///             vec![]
///         })
///     }
/// }
///
/// export_plugin!(PluginSpec {
///     name: "not-empty",
///     version: "0.1.0",
///     validators: &[ValidatorSpec {
///         name: "not_empty",
///         description: "The response has some text.",
///         build: |_config| Ok(Box::new(NotEmpty)),
///     }],
/// });
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! export_plugin {
    ($spec:expr $(,)?) => {
        #[doc(hidden)]
        static __ENFORCE_PLUGIN_SPEC: $crate::sdk::PluginSpec = $spec;

        #[doc(hidden)]
        extern "C" fn __enforce_plugin_describe() -> $crate::abi_stable::std_types::RResult<
            $crate::PluginDescription,
            $crate::PluginError,
        > {
            $crate::sdk::describe(&__ENFORCE_PLUGIN_SPEC)
        }

        #[doc(hidden)]
        extern "C" fn __enforce_plugin_create_validator(
            name: $crate::abi_stable::std_types::RStr<'_>,
            config_json: $crate::abi_stable::std_types::RStr<'_>,
        ) -> $crate::abi_stable::std_types::RResult<$crate::ValidatorBox, $crate::PluginError> {
            $crate::sdk::create_validator(&__ENFORCE_PLUGIN_SPEC, name, config_json)
        }

        #[doc(hidden)]
        fn __enforce_plugin_root_module() -> $crate::PluginModuleRef {
            $crate::sdk::root_module(
                __enforce_plugin_describe,
                __enforce_plugin_create_validator,
            )
        }

        #[doc(hidden)]
        extern "C" fn __enforce_plugin_load_root_module(
        ) -> $crate::abi_stable::library::RootModuleResult {
            // The same call `#[export_root_module]` generates; it catches panics too.
            $crate::abi_stable::library::__call_root_module_loader(__enforce_plugin_root_module)
        }

        /// The header abi_stable's loader looks up by this exact symbol name.
        #[doc(hidden)]
        #[no_mangle]
        #[allow(non_upper_case_globals)]
        pub static _1as_0lib_1header_0root_bmodule_bloader: $crate::abi_stable::library::LibHeader = unsafe {
            // SAFETY: the constructor returns the `PluginModuleRef` built by `root_module`,
            // erased exactly as `#[export_root_module]` does, which is what `from_constructor`
            // requires.
            $crate::abi_stable::library::LibHeader::from_constructor::<$crate::PluginModuleRef>(
                __enforce_plugin_load_root_module,
                $crate::abi_stable::library::CheckTypeLayout::Yes,
            )
        };
    };
}
