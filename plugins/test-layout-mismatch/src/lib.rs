//! Test-only plugin whose root module claims interface 1.0.0 but has another layout (its
//! `describe` returns a plain string). abi_stable's layout check must catch it at load time.
// No `deny(missing_docs)`: `#[export_root_module]` adds an undocumented static.
// `#[derive(StableAbi)]` on a prefix type generates items the lint flags.
#![allow(non_local_definitions)]

use abi_stable::{
    declare_root_module_statics, export_root_module,
    library::RootModule,
    prefix_type::PrefixTypeTrait,
    sabi_types::VersionStrings,
    std_types::{RStr, RString},
    StableAbi,
};

/// A root module that does not match `enforce_plugin_abi::PluginModule`.
#[repr(C)]
#[derive(StableAbi)]
#[sabi(kind(Prefix(prefix_ref = WrongModuleRef, prefix_fields = WrongModulePrefix)))]
pub struct WrongModule {
    /// Returns a string where 1.0 returns a description.
    pub describe: extern "C" fn() -> RString,
    /// Takes one argument where 1.0 takes two.
    #[sabi(last_prefix_field)]
    pub create_validator: extern "C" fn(RStr<'_>) -> RString,
}

impl RootModule for WrongModuleRef {
    declare_root_module_statics! {WrongModuleRef}
    const BASE_NAME: &'static str = "enforce_plugin";
    const NAME: &'static str = "enforce validator plugin";
    const VERSION_STRINGS: VersionStrings =
        VersionStrings::new(enforce_plugin_abi::INTERFACE_VERSION);
}

extern "C" fn describe() -> RString {
    "not a description".into()
}

extern "C" fn create_validator(_: RStr<'_>) -> RString {
    RString::new()
}

/// Exports the mismatching root module.
#[export_root_module]
pub fn root_module() -> WrongModuleRef {
    WrongModule {
        describe,
        create_validator,
    }
    .leak_into_prefix()
}
