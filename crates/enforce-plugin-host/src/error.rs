//! Why a plugin could not be loaded ([`LoadError`]) or one of its validators built
//! ([`CreateError`]). Both the host and the loader raise them, so they live apart from both.

use enforce_plugin_abi::abi_stable::library::LibraryError;
use enforce_plugin_abi::{PluginError, INTERFACE_VERSION};
use std::path::PathBuf;

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

    /// The failure behind abi_stable's error when opening a library.
    pub(crate) fn from_library_error(err: LibraryError) -> Self {
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

/// Why a plugin validator could not be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CreateError {
    /// No loaded plugin offers a validator of that name.
    #[error("no loaded plugin offers a validator named `{validator}`")]
    UnknownValidator {
        /// The requested name.
        validator: String,
    },
    /// The configuration text is neither JSON nor YAML.
    #[error("the configuration of `{validator}` is neither JSON nor YAML: {reason}")]
    ConfigText {
        /// The validator being configured.
        validator: String,
        /// The parser's message.
        reason: String,
    },
    /// The plugin refused to build it (bad configuration, a panic while building, ...).
    #[error("plugin `{plugin}` could not build validator `{validator}`: {error}")]
    Plugin {
        /// The plugin's name.
        plugin: String,
        /// The validator's name.
        validator: String,
        /// What the plugin said.
        error: PluginError,
    },
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
