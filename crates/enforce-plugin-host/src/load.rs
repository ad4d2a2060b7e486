//! Loading one plugin library: [`load_plugin`], [`LoadedPlugin`].

use crate::adapter::{CallOptions, HostedValidator};
use crate::error::{CreateError, LoadError};
use enforce_plugin_abi::abi_stable::library::{lib_header_from_path, RootModule};
use enforce_plugin_abi::abi_stable::std_types::RStr;
use enforce_plugin_abi::PluginModuleRef;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};

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
    pub(crate) module: PluginModuleRef,
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

    /// The raw root module, for callers that drive the ABI themselves.
    pub fn module(&self) -> PluginModuleRef {
        self.module
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
        let object = (self.module.create_validator())(
            RStr::from(validator),
            RStr::from(config_json.as_str()),
        )
        .into_result()
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
/// back for every later file. The checks, in order: the file opens as a shared library; it
/// exports the root module header; its abi_stable is compatible; it was built for interface
/// major version [`INTERFACE_VERSION`](enforce_plugin_abi::INTERFACE_VERSION); its root
/// module's layout matches; its loader and `describe` succeed.
///
/// Loaded libraries are never unloaded (abi_stable leaks them on purpose), so a failed file
/// still stays mapped; that is harmless.
pub fn load_plugin(path: &Path) -> Result<LoadedPlugin, LoadError> {
    let header = lib_header_from_path(path).map_err(LoadError::from_library_error)?;
    let interface_version = header.version_strings().to_string();
    let module = header
        .init_root_module::<PluginModuleRef>()
        .map_err(LoadError::from_library_error)?;
    let description = (module.describe())()
        .into_result()
        .map_err(|e| LoadError::InitError {
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
