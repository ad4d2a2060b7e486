//! Where plugins are looked for: [`PluginDir`]s from the config, `ENFORCE_PLUGIN_PATH` and a
//! default directory, and the library files inside them.

use std::ffi::OsStr;
use std::io;
use std::path::{Path, PathBuf};

/// The environment variable holding extra plugin directories, separated by `:` (`;` on
/// Windows), like `PATH`.
pub const PLUGIN_PATH_ENV: &str = "ENFORCE_PLUGIN_PATH";

/// Where a plugin directory came from; decides whether a missing directory is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DirSource {
    /// Given on the command line (`--dir`).
    CommandLine,
    /// The config file's `plugin_dirs`.
    Config,
    /// The `ENFORCE_PLUGIN_PATH` environment variable.
    Environment,
    /// The per-user default ([`default_plugin_dir`]); it is fine for it not to exist.
    Default,
}

impl DirSource {
    /// A short lowercase label (`command line`, `config`, `environment`, `default`).
    pub fn as_str(self) -> &'static str {
        match self {
            DirSource::CommandLine => "command line",
            DirSource::Config => "config",
            DirSource::Environment => "environment",
            DirSource::Default => "default",
        }
    }
}

/// A directory to look for plugin libraries in.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PluginDir {
    /// The directory.
    pub path: PathBuf,
    /// Where it was configured.
    pub source: DirSource,
}

impl PluginDir {
    /// A directory from `source`.
    pub fn new(path: impl Into<PathBuf>, source: DirSource) -> Self {
        PluginDir {
            path: path.into(),
            source,
        }
    }
}

/// The per-user default plugin directory: `$XDG_DATA_HOME/enforce/plugins`, else
/// `$HOME/.local/share/enforce/plugins`; `None` when neither variable is set.
pub fn default_plugin_dir() -> Option<PathBuf> {
    default_plugin_dir_from(
        std::env::var_os("XDG_DATA_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

fn default_plugin_dir_from(xdg_data_home: Option<&OsStr>, home: Option<&OsStr>) -> Option<PathBuf> {
    let data = match xdg_data_home.filter(|v| !v.is_empty()) {
        Some(xdg) => PathBuf::from(xdg),
        None => Path::new(home.filter(|v| !v.is_empty())?).join(".local/share"),
    };
    Some(data.join("enforce").join("plugins"))
}

/// The plugin search path: the config's `plugin_dirs`, then the entries of
/// `ENFORCE_PLUGIN_PATH`, then the default directory, without duplicates.
///
/// ```
/// use enforce_plugin_host::{plugin_search_path, DirSource};
/// use std::path::PathBuf;
///
/// let dirs = plugin_search_path(
///     &[PathBuf::from("/etc/enforce/plugins")],
///     Some("/opt/a:/opt/b::/opt/a".as_ref()),
///     Some(PathBuf::from("/home/u/.local/share/enforce/plugins")),
/// );
/// let listed: Vec<(&str, DirSource)> =
///     dirs.iter().map(|d| (d.path.to_str().unwrap(), d.source)).collect();
/// assert_eq!(listed, vec![
///     ("/etc/enforce/plugins", DirSource::Config),
///     ("/opt/a", DirSource::Environment),
///     ("/opt/b", DirSource::Environment),
///     ("/home/u/.local/share/enforce/plugins", DirSource::Default),
/// ]);
/// ```
pub fn plugin_search_path(
    config_dirs: &[PathBuf],
    env_value: Option<&OsStr>,
    default_dir: Option<PathBuf>,
) -> Vec<PluginDir> {
    let mut dirs: Vec<PluginDir> = Vec::new();
    let mut push = |path: PathBuf, source| {
        if !path.as_os_str().is_empty() && !dirs.iter().any(|d| d.path == path) {
            dirs.push(PluginDir::new(path, source));
        }
    };
    for dir in config_dirs {
        push(dir.clone(), DirSource::Config);
    }
    if let Some(value) = env_value {
        for dir in std::env::split_paths(value) {
            push(dir, DirSource::Environment);
        }
    }
    if let Some(dir) = default_dir {
        push(dir, DirSource::Default);
    }
    dirs
}

/// [`plugin_search_path`] with `ENFORCE_PLUGIN_PATH` and the default directory read from the
/// environment.
pub fn plugin_search_path_from_env(config_dirs: &[PathBuf]) -> Vec<PluginDir> {
    plugin_search_path(
        config_dirs,
        std::env::var_os(PLUGIN_PATH_ENV).as_deref(),
        default_plugin_dir(),
    )
}

/// `true` for a file name with this platform's shared-library extension (`.so`, `.dylib` on
/// macOS, `.dll` on Windows).
pub fn is_library_file_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ext == std::env::consts::DLL_EXTENSION)
}

/// The library files directly inside `dir`, sorted by name so loading order (and so which
/// plugin wins a name clash) does not depend on the file system.
pub fn library_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if is_library_file_name(&path) && path.is_file() {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_dir_prefers_xdg_data_home() {
        assert_eq!(
            default_plugin_dir_from(Some("/x".as_ref()), Some("/home/u".as_ref())),
            Some(PathBuf::from("/x/enforce/plugins"))
        );
        assert_eq!(
            default_plugin_dir_from(Some("".as_ref()), Some("/home/u".as_ref())),
            Some(PathBuf::from("/home/u/.local/share/enforce/plugins"))
        );
        assert_eq!(default_plugin_dir_from(None, None), None);
    }

    #[test]
    fn library_files_lists_only_libraries_sorted() {
        let dir = tempfile::tempdir().unwrap();
        let ext = std::env::consts::DLL_EXTENSION;
        for name in [format!("b.{ext}"), format!("a.{ext}"), "notes.txt".into()] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::create_dir(dir.path().join(format!("dir.{ext}"))).unwrap();
        let names: Vec<String> = library_files(dir.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![format!("a.{ext}"), format!("b.{ext}")]);
    }
}
