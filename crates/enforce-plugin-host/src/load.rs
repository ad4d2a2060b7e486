//! Loading one plugin library: [`load_plugin`], [`LoadedPlugin`], [`LoadError`].

use crate::adapter::{CallOptions, HostedValidator};
use crate::host::CreateError;
use enforce_plugin_abi::abi_stable::library::{lib_header_from_path, LibraryError, RootModule};
use enforce_plugin_abi::abi_stable::std_types::RStr;
use enforce_plugin_abi::{PluginModuleRef, INTERFACE_VERSION};
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};

/// Why a library file could not be used as a plugin.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LoadError {
    /// The file is not a shared library the system loader accepts (a text file named `x.so`, a
    /// library for another platform, a library whose own dependencies are missing).
    #[error("not a loadable library: {reason}")]
    NotALibrary {
        /// The system loader's message.
        reason: String,
    },
    /// A shared library, but not an enforce plugin: it exports no root module.
    #[error(
        "missing root module: the library exports no enforce plugin root module \
         (was it built with `export_plugin!`?)"
    )]
    MissingRootModule,
    /// The library uses an `abi_stable` whose header this host cannot read.
    #[error("incompatible abi_stable: {details}")]
    IncompatibleAbiStable {
        /// What was found.
        details: String,
    },
    /// The library was built for another major version of the plugin interface.
    #[error(
        "wrong interface version: the plugin was built for interface {found}, \
         this host supports {supported}"
    )]
    WrongInterfaceVersion {
        /// The interface version in the library.
        found: String,
        /// The host's interface version ([`INTERFACE_VERSION`]).
        supported: String,
    },
    /// The library claims a compatible interface version but its root module has another layout.
    #[error(
        "layout mismatch: the plugin's root module does not match interface {supported}: {details}"
    )]
    LayoutMismatch {
        /// The host's interface version.
        supported: String,
        /// The first lines of abi_stable's layout report.
        details: String,
    },
    /// The plugin's initialisation failed (its root module loader or `describe` returned an
    /// error or panicked).
    #[error("init error: {reason}")]
    InitError {
        /// What the plugin reported.
        reason: String,
    },
    /// Another plugin, loaded earlier, already provides a validator of the same name.
    #[error("validator `{validator}` is already provided by {}", .first.display())]
    DuplicateValidator {
        /// The contested validator name.
        validator: String,
        /// The library that provides it.
        first: PathBuf,
    },
    /// A configured plugin directory could not be read.
    #[error("cannot read plugin directory: {reason}")]
    Directory {
        /// The I/O error.
        reason: String,
    },
    /// The directory or the library file is writable by every user, so anyone on the machine
    /// could have put code there; nothing in it is loaded.
    #[error("refused: {reason}")]
    Insecure {
        /// What is writable by whom, and how to fix it.
        reason: String,
    },
}

impl LoadError {
    /// A stable snake_case name of the failure kind (`not_a_library`, `missing_root_module`,
    /// `incompatible_abi_stable`, `wrong_interface_version`, `layout_mismatch`, `init_error`,
    /// `duplicate_validator`, `directory`), for machine-readable output.
    pub fn kind(&self) -> &'static str {
        match self {
            LoadError::NotALibrary { .. } => "not_a_library",
            LoadError::MissingRootModule => "missing_root_module",
            LoadError::IncompatibleAbiStable { .. } => "incompatible_abi_stable",
            LoadError::WrongInterfaceVersion { .. } => "wrong_interface_version",
            LoadError::LayoutMismatch { .. } => "layout_mismatch",
            LoadError::InitError { .. } => "init_error",
            LoadError::DuplicateValidator { .. } => "duplicate_validator",
            LoadError::Directory { .. } => "directory",
            LoadError::Insecure { .. } => "insecure_permissions",
        }
    }

    fn from_library_error(err: LibraryError) -> Self {
        match err {
            LibraryError::OpenError { err, .. } => LoadError::NotALibrary {
                reason: err.to_string(),
            },
            LibraryError::GetSymbolError { .. } => LoadError::MissingRootModule,
            LibraryError::InvalidAbiHeader(header) => LoadError::IncompatibleAbiStable {
                details: format!("the library's abi_stable header is {header:?}"),
            },
            LibraryError::InvalidCAbi { expected, found } => LoadError::LayoutMismatch {
                supported: INTERFACE_VERSION.to_string(),
                details: format!("C ABI differs: expected {expected}, found {found}"),
            },
            LibraryError::ParseVersionError(e) => LoadError::WrongInterfaceVersion {
                found: format!("an unreadable version ({e})"),
                supported: INTERFACE_VERSION.to_string(),
            },
            LibraryError::IncompatibleVersionNumber { actual_version, .. } => {
                LoadError::WrongInterfaceVersion {
                    found: actual_version.to_string(),
                    supported: INTERFACE_VERSION.to_string(),
                }
            }
            LibraryError::AbiInstability(report) => LoadError::LayoutMismatch {
                supported: INTERFACE_VERSION.to_string(),
                details: summarize_layout_report(&report.to_string()),
            },
            LibraryError::RootModule { err, .. } => LoadError::InitError {
                reason: one_line(&err.to_string()),
            },
            LibraryError::Many(errors) => match errors.into_iter().next() {
                Some(first) => LoadError::from_library_error(first),
                None => LoadError::InitError {
                    reason: "the loader reported an empty list of errors".into(),
                },
            },
        }
    }
}

/// Keeps abi_stable's multi-line reports readable in a one-line listing.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The gist of abi_stable's layout report: its `Error:` lines with what was expected and
/// found (`mismatched type; expected PluginModule; found WrongModule`), instead of the full
/// dump of both layouts.
fn summarize_layout_report(report: &str) -> String {
    let lines: Vec<&str> = report
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let mut parts: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if let Some(error) = line.strip_prefix("Error:") {
            let mut part = error.trim().to_string();
            let mut rest = lines[i + 1..].iter();
            while let Some(label @ (&"Expected:" | &"Found:")) = rest.next() {
                if let Some(value) = rest.next() {
                    part.push_str(&format!(
                        "; {} {value}",
                        label.trim_end_matches(':').to_lowercase()
                    ));
                }
            }
            if !parts.contains(&part) {
                parts.push(part);
            }
        }
    }
    if parts.is_empty() {
        let mut head: Vec<&str> = lines.iter().take(4).copied().collect();
        if lines.len() > 4 {
            head.push("...");
        }
        return head.join(" | ");
    }
    parts.truncate(3);
    parts.join(" | ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_reports_are_cut_to_their_errors() {
        let report = "Compared <this>:\n --- Type Layout ---\n type:A\n\n Error:mismatched type\n  Expected:\n   PluginModule\n  Found:\n   WrongModule\n more dump\n";
        assert_eq!(
            summarize_layout_report(report),
            "mismatched type; expected PluginModule; found WrongModule"
        );
        assert_eq!(summarize_layout_report("a\nb"), "a | b");
    }
}

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
/// major version [`INTERFACE_VERSION`]; its root module's layout matches; its loader and
/// `describe` succeed.
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
