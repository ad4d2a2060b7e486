//! Loading one plugin library: [`load_plugin`], [`LoadedPlugin`].

use crate::adapter::{CallOptions, HostedValidator, PluginObject};
use crate::error::{CreateError, LoadError};
use enforce_plugin_abi::abi_stable::library::{lib_header_from_path, RootModule};
use enforce_plugin_abi::abi_stable::std_types::RStr;
use enforce_plugin_abi::{v1_0, PluginModuleRef};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// One validator a loaded plugin offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatorInfo {
    /// The name profiles use.
    pub name: String,
    /// One line on what it checks.
    pub description: String,
}

/// A plugin library that loaded: its identity and the handle to build validators with.
#[derive(Clone)]
pub struct LoadedPlugin {
    pub(crate) path: PathBuf,
    pub(crate) name: String,
    pub(crate) version: String,
    pub(crate) interface_version: String,
    pub(crate) validators: Vec<ValidatorInfo>,
    pub(crate) module: Module,
}

/// A plugin's root module, of the interface version the plugin was built for.
#[derive(Clone, Copy)]
pub(crate) enum Module {
    V1_0(v1_0::PluginModuleRef),
    Current(PluginModuleRef),
}

impl fmt::Debug for LoadedPlugin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LoadedPlugin")
            .field("path", &self.path)
            .field("name", &self.name)
            .field("version", &self.version)
            .field("interface_version", &self.interface_version)
            .field("validators", &self.validators)
            .finish_non_exhaustive()
    }
}

impl LoadedPlugin {
    /// The library file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The plugin's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The plugin's own version.
    pub fn version(&self) -> &str {
        &self.version
    }

    /// The interface version the plugin was built for.
    pub fn interface_version(&self) -> &str {
        &self.interface_version
    }

    /// The validators it offers.
    pub fn validators(&self) -> &[ValidatorInfo] {
        &self.validators
    }

    /// The raw root module, for callers that drive the ABI themselves; `None` for a plugin
    /// built for an earlier minor interface version (it has that version's root module).
    pub fn module(&self) -> Option<PluginModuleRef> {
        match self.module {
            Module::Current(module) => Some(module),
            Module::V1_0(_) => None,
        }
    }

    /// Builds this plugin's validator `validator` from `config` (JSON; `null` for none), named
    /// `name` in issues and reports.
    pub fn create_validator(
        &self,
        validator: &str,
        name: &str,
        config: &Value,
        options: CallOptions,
    ) -> Result<HostedValidator, CreateError> {
        if !self.validators.iter().any(|v| v.name == validator) {
            return Err(CreateError::UnknownValidator {
                validator: validator.to_string(),
            });
        }
        let config_json = if config.is_null() {
            String::new()
        } else {
            config.to_string()
        };
        let (validator_name, config) = (RStr::from(validator), RStr::from(config_json.as_str()));
        let object = match self.module {
            Module::V1_0(m) => (m.create_validator())(validator_name, config)
                .into_result()
                .map(|o| PluginObject::V1_0(Arc::new(o))),
            Module::Current(m) => (m.create_validator())(validator_name, config)
                .into_result()
                .map(|o| PluginObject::Current(Arc::new(o))),
        }
        .map_err(|error| CreateError::Plugin {
            plugin: self.name.clone(),
            validator: validator.to_string(),
            error,
        })?;
        Ok(HostedValidator::new(
            name.to_string(),
            validator.to_string(),
            self.name.clone(),
            object,
            options,
        ))
    }
}

/// Loads the library at `path` on its own and checks it is a compatible enforce plugin.
///
/// Each library is opened through its own header (`lib_header_from_path`), not through
/// `RootModule::load_from_file`, which caches the first module of a type and would hand that one
/// back for every later file. The checks, in order: the file is not a truncated ELF file
/// (whose mapping would kill the process with SIGBUS); it opens as a shared library; it
/// exports the root module header; its abi_stable is compatible; it was built for interface
/// major version [`INTERFACE_VERSION`](enforce_plugin_abi::INTERFACE_VERSION); its root
/// module's layout matches; its loader and `describe` succeed.
///
/// Loaded libraries are never unloaded (abi_stable leaks them on purpose), so a failed file
/// still stays mapped; that is harmless.
pub fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    refuse_truncated(path)?;
    let header = lib_header_from_path(path).map_err(LoadError::from_library_error)?;
    let interface_version = header.version_strings().to_string();
    // A plugin built for 1.0 is checked against 1.0's layouts: abi_stable refuses a library
    // whose prefix types have fewer fields than the host's (see `enforce_plugin_abi::v1_0`).
    let minor_0 = interface_version.split('.').take(2).eq(["1", "0"]);
    let (module, describe) = if minor_0 {
        let module = header
            .init_root_module::<v1_0::PluginModuleRef>()
            .map_err(LoadError::from_library_error)?;
        (Module::V1_0(module), module.describe())
    } else {
        let module = header
            .init_root_module::<PluginModuleRef>()
            .map_err(LoadError::from_library_error)?;
        (Module::Current(module), module.describe())
    };
    let description = describe().into_result().map_err(|e| LoadError::InitError {
        reason: format!("describe failed: {e}"),
    })?;
    Ok(LoadedPlugin {
        path: path.to_path_buf(),
        name: description.name.into_string(),
        version: description.version.into_string(),
        interface_version,
        validators: description
            .validators
            .into_iter()
            .map(|v| ValidatorInfo {
                name: v.name.into_string(),
                description: v.description.into_string(),
            })
            .collect(),
        module,
    })
}

/// The interface version this host was built with, as abi_stable sees it.
pub fn host_interface_version() -> String {
    PluginModuleRef::VERSION_STRINGS.to_string()
}

/// A truncated ELF file never reaches `dlopen`, which would map it and die of SIGBUS.
fn refuse_truncated(path: &Path) -> Result<(), LoadError> {
    match crate::elf::truncation(path) {
        Ok(None) => Ok(()),
        Ok(Some(reason)) => Err(LoadError::NotALibrary { reason }),
        Err(e) => Err(LoadError::NotALibrary {
            reason: format!("cannot read it: {e}"),
        }),
    }
}
