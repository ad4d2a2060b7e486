//! Test-only plugin of the right interface and layout whose root module loader returns an
//! error, as a plugin that cannot initialise (missing licence file, bad environment) would.
// No `deny(missing_docs)`: `#[export_root_module]` adds an undocumented static.

use abi_stable::{export_root_module, std_types::RBoxError};
use enforce_plugin_abi::PluginModuleRef;

/// Fails to build the root module.
#[export_root_module]
pub fn root_module() -> Result<PluginModuleRef, RBoxError> {
    Err(RBoxError::from_fmt(
        &"test-init-error refuses to initialise (on purpose)",
    ))
}
