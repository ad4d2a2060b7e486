//! Test-only plugin built against interface 1.0.0, before partial checks existed: its
//! validator objects have no `validate_partial` in their vtable. A 1.x host must load it and
//! use it as before; its validators simply have no partial check.
//!
//! `old_forbid` reports `OLD_WORD` for every line holding `OLD`.
// `#[export_root_module]` adds an undocumented static; `#[sabi_trait]` impls are non-local.
#![allow(non_local_definitions)]

use abi_stable::{
    export_root_module,
    prefix_type::PrefixTypeTrait,
    sabi_trait::TD_Opaque,
    std_types::{ROption, RResult, RSlice, RStr, RString, RVec},
};
use enforce_plugin_abi::{
    PluginDescription, PluginError, PluginIssue, PluginModule, PluginModuleRef, ValidatorBox,
    ValidatorDescription, ValidatorObject, ValidatorObject_TO,
};

struct OldForbid;

impl ValidatorObject for OldForbid {
    fn validate(
        &self,
        response: RStr<'_>,
        _context_json: RStr<'_>,
    ) -> RResult<RVec<PluginIssue>, PluginError> {
        RResult::ROk(
            response
                .as_str()
                .lines()
                .enumerate()
                .filter(|(_, line)| line.contains("OLD"))
                .map(|(n, _)| {
                    PluginIssue::error("OLD_WORD", "The text says OLD.")
                        .at_line(u32::try_from(n + 1).unwrap_or(u32::MAX))
                })
                .collect(),
        )
    }

    fn repair(
        &self,
        _response: RStr<'_>,
        _context_json: RStr<'_>,
        _issues: RSlice<'_, PluginIssue>,
    ) -> RResult<ROption<RString>, PluginError> {
        RResult::ROk(ROption::RNone)
    }
}

extern "C" fn describe() -> RResult<PluginDescription, PluginError> {
    RResult::ROk(PluginDescription {
        name: "test-interface-1-0".into(),
        version: "0.1.0".into(),
        validators: vec![ValidatorDescription {
            name: "old_forbid".into(),
            description: "Test only: built for interface 1.0.".into(),
        }]
        .into(),
    })
}

extern "C" fn create_validator(name: RStr<'_>, _: RStr<'_>) -> RResult<ValidatorBox, PluginError> {
    if name.as_str() != "old_forbid" {
        return RResult::RErr(PluginError::unknown_validator("only old_forbid"));
    }
    RResult::ROk(ValidatorObject_TO::from_value(OldForbid, TD_Opaque))
}

/// Exports the 1.0 root module.
#[export_root_module]
pub fn root_module() -> PluginModuleRef {
    PluginModule {
        describe,
        create_validator,
    }
    .leak_into_prefix()
}
