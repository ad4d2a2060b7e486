//! The types that cross the boundary between the enforce host and a plugin library.
//!
//! Everything here is `#[repr(C)]` and derives [`StableAbi`], so the host checks at load time that
//! the plugin was compiled against a layout it understands.

use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

/// The version of the plugin interface this crate defines.
///
/// It is checked when a plugin is loaded: the major number must match the host's. Minor versions
/// only add fields at the end of [`PluginModule`] and methods (with a default) at the end of
/// [`ValidatorObject`]. A newer plugin loads in an older 1.x host as it is; for older plugins
/// the crate keeps each earlier minor version's root module and object types (module
/// [`v1_0`](crate::v1_0)), which the host picks by the version in the library's header.
///
/// | version | adds |
/// |---|---|
/// | 1.0 | `describe`, `create_validator`; `validate`, `repair` |
/// | 1.1 | [`ValidatorObject::validate_partial`] (early abort); a 1.0 plugin has none |
pub const INTERFACE_VERSION: &str = "1.1.0";

/// How much an issue matters, mirroring `enforce_core::Severity`.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginSeverity {
    /// The response breaks the contract: it fails and is asked again.
    Error,
    /// Worth knowing, but the response is acceptable.
    Warning,
}

/// One finding of a plugin validator, with the same fields as `enforce_core::Issue`.
///
/// Build one with [`PluginIssue::error`] or [`PluginIssue::warning`] and the `with_*`/`at*`
/// builders:
///
/// ```
/// use enforce_plugin_abi::PluginIssue;
///
/// let issue = PluginIssue::error("DIRECT_ADDRESS", "The text addresses the reader as `Sie`.")
///     .with_hint("Write about the company in the third person.")
///     .at(3, 14);
/// assert_eq!(issue.code.as_str(), "DIRECT_ADDRESS");
/// assert_eq!(issue.line.into_option(), Some(3));
/// ```
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginIssue {
    /// Name of the validator that raised the issue. Left empty, the SDK fills in the validator's
    /// name; the host always replaces it with the name the validator was configured under.
    pub validator: RString,
    /// Stable, upper-case issue code.
    pub code: RString,
    /// What is wrong, in words a person understands.
    pub message: RString,
    /// How to fix it, if the validator knows.
    pub hint: ROption<RString>,
    /// Error or warning.
    pub severity: PluginSeverity,
    /// `false` marks a hard abort: asking the model again cannot help.
    pub repairable: bool,
    /// 1-based line in the response, when the issue has a place.
    pub line: ROption<u32>,
    /// 1-based column (in characters) within `line`, when known.
    pub column: ROption<u32>,
}

impl PluginIssue {
    /// A repairable error without hint or location.
    pub fn error(code: impl Into<String>, message: impl Into<String>) -> Self {
        PluginIssue {
            validator: RString::new(),
            code: RString::from(code.into()),
            message: RString::from(message.into()),
            hint: ROption::RNone,
            severity: PluginSeverity::Error,
            repairable: true,
            line: ROption::RNone,
            column: ROption::RNone,
        }
    }

    /// A warning without hint or location.
    pub fn warning(code: impl Into<String>, message: impl Into<String>) -> Self {
        PluginIssue {
            severity: PluginSeverity::Warning,
            ..PluginIssue::error(code, message)
        }
    }

    /// Adds a hint.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = ROption::RSome(RString::from(hint.into()));
        self
    }

    /// Sets the 1-based line.
    pub fn at_line(mut self, line: u32) -> Self {
        self.line = ROption::RSome(line);
        self
    }

    /// Sets the 1-based line and column.
    pub fn at(mut self, line: u32, column: u32) -> Self {
        self.line = ROption::RSome(line);
        self.column = ROption::RSome(column);
        self
    }

    /// Sets the severity.
    pub fn with_severity(mut self, severity: PluginSeverity) -> Self {
        self.severity = severity;
        self
    }

    /// Marks the issue as a hard abort (asking the model again cannot help).
    pub fn hard_abort(mut self) -> Self {
        self.repairable = false;
        self
    }
}

/// Why a plugin call gave no result.
#[repr(u8)]
#[derive(StableAbi, Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PluginErrorKind {
    /// The plugin panicked; the SDK caught the panic at the boundary.
    Panic,
    /// The validator's configuration was rejected.
    InvalidConfig,
    /// The plugin has no validator of the requested name.
    UnknownValidator,
    /// The validator could not give a verdict (e.g. a resource it needs is down).
    Unavailable,
    /// Any other failure inside the plugin.
    Failed,
}

/// An error returned by a plugin call instead of a result.
///
/// ```
/// use enforce_plugin_abi::{PluginError, PluginErrorKind};
///
/// let err = PluginError::invalid_config("`terms` must be a list");
/// assert_eq!(err.kind, PluginErrorKind::InvalidConfig);
/// assert_eq!(err.to_string(), "invalid config: `terms` must be a list");
/// ```
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginError {
    /// What kind of failure this is.
    pub kind: PluginErrorKind,
    /// What happened, in words.
    pub message: RString,
}

impl PluginError {
    /// An error of the given kind.
    pub fn new(kind: PluginErrorKind, message: impl Into<String>) -> Self {
        PluginError {
            kind,
            message: RString::from(message.into()),
        }
    }

    /// A caught panic with its message.
    pub fn panic(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Panic, message)
    }

    /// A rejected configuration.
    pub fn invalid_config(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::InvalidConfig, message)
    }

    /// No validator of that name in this plugin.
    pub fn unknown_validator(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::UnknownValidator, message)
    }

    /// No verdict could be given.
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Unavailable, message)
    }

    /// Any other failure.
    pub fn failed(message: impl Into<String>) -> Self {
        Self::new(PluginErrorKind::Failed, message)
    }
}

impl std::fmt::Display for PluginError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.kind {
            PluginErrorKind::Panic => "plugin panicked",
            PluginErrorKind::InvalidConfig => "invalid config",
            PluginErrorKind::UnknownValidator => "unknown validator",
            PluginErrorKind::Unavailable => "unavailable",
            PluginErrorKind::Failed => "failed",
        };
        write!(f, "{kind}: {}", self.message)
    }
}

impl std::error::Error for PluginError {}

/// One validator a plugin offers.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct ValidatorDescription {
    /// The name profiles use to refer to it (`german_prose`).
    pub name: RString,
    /// One line on what it checks.
    pub description: RString,
}

/// What a plugin says about itself when it is loaded.
#[repr(C)]
#[derive(StableAbi, Debug, Clone, PartialEq, Eq)]
pub struct PluginDescription {
    /// The plugin's name (`german-prose`).
    pub name: RString,
    /// The plugin's own version (usually its crate version).
    pub version: RString,
    /// The validators it can build.
    pub validators: RVec<ValidatorDescription>,
}

// `#[sabi_trait]` expands to impls inside a generated module, which the
// `non_local_definitions` lint flags although nothing leaks out of it.
#[allow(non_local_definitions)]
mod validator_object {
    use super::*;

    /// A validator built by a plugin, as an FFI-safe trait object.
    ///
    /// Calls are synchronous; the host runs them on a blocking thread with a timeout. Plugin
    /// authors do not implement this trait directly: they implement
    /// [`sdk::PluginValidator`](crate::sdk::PluginValidator) and the SDK wraps every call in
    /// `catch_unwind`.
    #[sabi_trait]
    pub trait ValidatorObject: Send + Sync {
        /// Checks `response`. `context_json` is the request context as a JSON object.
        fn validate(
            &self,
            response: RStr<'_>,
            context_json: RStr<'_>,
        ) -> RResult<RVec<PluginIssue>, PluginError>;

        /// Tries a deterministic repair of `response`, given the issues this validator raised.
        /// `RNone` means it cannot repair it.
        #[sabi(last_prefix_field)]
        fn repair(
            &self,
            response: RStr<'_>,
            context_json: RStr<'_>,
            issues: RSlice<'_, PluginIssue>,
        ) -> RResult<ROption<RString>, PluginError>;

        /// Interface 1.1: checks `prefix`, the part of a streamed answer received so far, and
        /// returns only **definite** issues, ones no continuation of the text can remove (see
        /// `enforce_core::PartialCheck`). `RNone`: this validator has no partial check, and the
        /// host stops asking for this answer.
        ///
        /// The default answers `RNone`. A plugin built for interface 1.0 has no such method at
        /// all: the host loads it through [`v1_0`](crate::v1_0) and gives it no partial check.
        fn validate_partial(
            &self,
            prefix: RStr<'_>,
            context_json: RStr<'_>,
        ) -> RResult<ROption<RVec<PluginIssue>>, PluginError> {
            let _ = (prefix, context_json);
            RResult::ROk(ROption::RNone)
        }
    }
}

pub use validator_object::{ValidatorObject, ValidatorObject_TO};

/// An owned plugin validator as it crosses the boundary.
pub type ValidatorBox = ValidatorObject_TO<'static, RBox<()>>;

/// The root module every plugin library exports: a prefix type, so later interface versions can
/// append fields without breaking plugins built for earlier ones.
///
/// Plugins do not build it by hand: [`export_plugin!`](crate::export_plugin) does.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef, prefix_fields = PluginModulePrefix)))]
pub struct PluginModule {
    /// The plugin's name, version and validators.
    pub describe: extern "C" fn() -> RResult<PluginDescription, PluginError>,

    /// Builds the validator `name` from its configuration, a JSON document (the host converts
    /// YAML configs to JSON before the call).
    #[sabi(last_prefix_field)]
    pub create_validator:
        extern "C" fn(name: RStr<'_>, config_json: RStr<'_>) -> RResult<ValidatorBox, PluginError>,
}

impl RootModule for PluginModuleRef {
    declare_root_module_statics! {PluginModuleRef}
    const BASE_NAME: &'static str = "enforce_plugin";
    const NAME: &'static str = "enforce validator plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new(INTERFACE_VERSION);
}
