//! Test-only plugin built for interface version 2.0.0.
//!
//! It is what a plugin compiled against a future `enforce-plugin-abi` 2.x would export: a root
//! module with a new field and the interface version `2.0.0` in its header. A host of interface
//! 1.x must refuse it with a "wrong interface version" error before touching the module.
// No `deny(missing_docs)`: `#[export_root_module]` adds an undocumented static.
// `#[derive(StableAbi)]` on a prefix type generates items the lint flags.
#![allow(non_local_definitions)]

use abi_stable::{
    declare_root_module_statics, export_root_module,
    library::RootModule,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RResult, RStr, RString, RVec},
    StableAbi,
};
use enforce_plugin_abi::{PluginDescription, PluginError, ValidatorBox};

/// The 2.0 root module: the 1.0 fields plus one more.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = FutureModuleRef, prefix_fields = FutureModulePrefix)))]
pub struct FutureModule {
    /// As in 1.0.
    pub describe: extern "C" fn() -> RResult<PluginDescription, PluginError>,
    /// As in 1.0.
    pub create_validator: extern "C" fn(RStr<'_>, RStr<'_>) -> RResult<ValidatorBox, PluginError>,
    /// New in the imagined 2.0.
    #[sabi(last_prefix_field)]
    pub capabilities: extern "C" fn() -> RVec<RString>,
}

impl RootModule for FutureModuleRef {
    declare_root_module_statics! {FutureModuleRef}
    const BASE_NAME: &'static str = "enforce_plugin";
    const NAME: &'static str = "enforce validator plugin";
    const VERSION_STRINGS: VersionStrings = VersionStrings::new("2.0.0");
}

extern "C" fn describe() -> RResult<PluginDescription, PluginError> {
    RResult::ROk(PluginDescription {
        name: "test-future-interface".into(),
        version: "2.0.0".into(),
        validators: RVec::new(),
    })
}

extern "C" fn create_validator(_: RStr<'_>, _: RStr<'_>) -> RResult<ValidatorBox, PluginError> {
    RResult::RErr(PluginError::unknown_validator("this plugin offers none"))
}

extern "C" fn capabilities() -> RVec<RString> {
    RVec::new()
}

/// Exports the 2.0 root module.
#[export_root_module]
pub fn root_module() -> FutureModuleRef {
    FutureModule {
        describe,
        create_validator,
        capabilities,
    }
    .leak_into_prefix()
}
