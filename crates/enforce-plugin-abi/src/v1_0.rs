//! Interface 1.0's root module and validator object, as plugins built for 1.0 export them.
//!
//! abi_stable accepts a library whose prefix types have *more* fields than the host expects
//! (a newer plugin), not fewer: a 1.1 host checking a 1.0 plugin against the 1.1 layouts would
//! refuse it. So the host reads the interface version in the library's header first and checks
//! a 1.0 plugin against these types, which keep 1.0's names and layouts exactly (the plain data
//! types — [`PluginIssue`], [`PluginError`], [`PluginDescription`] — did not change and are
//! shared). Plugin authors never use this module: the SDK exports the current interface.
//!
//! The compatibility test plugin `plugins/test-interface-1-0` is built against a frozen copy
//! of the 1.0 crate, so a drift of these types from the released ones fails the tests.

use crate::ffi::{PluginDescription, PluginError, PluginIssue};
use abi_stable::{
    declare_root_module_statics,
    library::RootModule,
    sabi_trait,
    sabi_types::VersionStrings,
    std_types::{RBox, ROption, RResult, RSlice, RStr, RString, RVec},
    StableAbi,
};

/// The interface version of this module's types.
pub const INTERFACE_VERSION: &str = "1.0.0";

// `#[sabi_trait]` expands to impls inside a generated module, which the
// `non_local_definitions` lint flags although nothing leaks out of it.
#[allow(non_local_definitions)]
mod validator_object {
    use super::*;

    /// A 1.0 validator object: `validate` and `repair`, no partial check.
    #[sabi_trait]
    pub trait ValidatorObject: Send + Sync {
        /// As [`crate::ValidatorObject::validate`].
        fn validate(
            &self,
            response: RStr<'_>,
            context_json: RStr<'_>,
        ) -> RResult<RVec<PluginIssue>, PluginError>;

        /// As [`crate::ValidatorObject::repair`].
        #[sabi(last_prefix_field)]
        fn repair(
            &self,
            response: RStr<'_>,
            context_json: RStr<'_>,
            issues: RSlice<'_, PluginIssue>,
        ) -> RResult<ROption<RString>, PluginError>;
    }
}

pub use validator_object::{ValidatorObject, ValidatorObject_TO};

/// An owned 1.0 validator object.
pub type ValidatorBox = ValidatorObject_TO<'static, RBox<()>>;

/// The 1.0 root module.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = PluginModuleRef, prefix_fields = PluginModulePrefix)))]
pub struct PluginModule {
    /// As [`crate::PluginModule::describe`].
    pub describe: extern "C" fn() -> RResult<PluginDescription, PluginError>,

    /// As [`crate::PluginModule::create_validator`], returning a 1.0 object.
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
