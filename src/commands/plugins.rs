//! `enforce plugins`: list the plugin libraries found in the plugin directories, with each
//! plugin's name, version and validators, or the reason it did not load.
//!
//! Exit codes: 0 every library loaded (also when there are none), 1 some library failed to
//! load, 2 configuration error.

use crate::commands::Format;
use crate::config::LoadedConfig;
use enforce_plugin_host::{
    host_interface_version, DirSource, LoadFailure, LoadedPlugin, PluginDir, PluginHost,
};
use serde_json::{json, Value};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Arguments of `enforce plugins`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Look only in this directory (repeatable) instead of the configured search path.
    #[arg(long = "dir", value_name = "DIR")]
    pub dirs: Vec<PathBuf>,
    /// Configuration file whose `plugin_dirs` are searched [default: ./enforce.yaml when it
    /// exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// One library file: loaded, or failed.
enum Entry<'a> {
    Loaded(&'a LoadedPlugin),
    Failed(&'a LoadFailure),
}

impl Entry<'_> {
    fn path(&self) -> &Path {
        match self {
            Entry::Loaded(p) => p.path(),
            Entry::Failed(f) => &f.path,
        }
    }
}

/// Runs `enforce plugins`.
pub fn run(args: Args) -> ExitCode {
    let dirs = if args.dirs.is_empty() {
        match LoadedConfig::load(args.config.as_deref()) {
            Ok(config) => crate::plugin_host::search_path(&config),
            Err(e) => {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
        }
    } else {
        args.dirs
            .iter()
            .map(|d| PluginDir::new(d, DirSource::CommandLine))
            .collect()
    };
    let host = PluginHost::load_dirs(&dirs);
    let mut entries: Vec<Entry<'_>> = host
        .plugins()
        .iter()
        .map(Entry::Loaded)
        .chain(host.failures().iter().map(Entry::Failed))
        .collect();
    entries.sort_by(|a, b| a.path().cmp(b.path()));

    let printed = match args.format {
        Format::Text => print_text(&dirs, &entries),
        Format::Json => print_json(&dirs, &entries),
    };
    let done = if host.failures().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    super::after_printing(printed, "listing", done)
}

fn print_text(dirs: &[PluginDir], entries: &[Entry<'_>]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "plugin directories (interface {}):",
        host_interface_version()
    )?;
    if dirs.is_empty() {
        writeln!(out, "  (none)")?;
    }
    for dir in dirs {
        let missing = if dir.path.is_dir() { "" } else { ", missing" };
        writeln!(
            out,
            "  {} ({}{missing})",
            dir.path.display(),
            dir.source.as_str()
        )?;
    }
    if entries.is_empty() {
        writeln!(out, "\nno plugin libraries found")?;
    }
    for entry in entries {
        writeln!(out)?;
        match entry {
            Entry::Loaded(plugin) => {
                writeln!(out, "{}", plugin.path().display())?;
                writeln!(
                    out,
                    "  plugin {} {} (interface {})",
                    plugin.name(),
                    plugin.version(),
                    plugin.interface_version()
                )?;
                for v in plugin.validators() {
                    writeln!(out, "  validator {}: {}", v.name, v.description)?;
                }
            }
            Entry::Failed(failure) => {
                writeln!(out, "{}", failure.path.display())?;
                writeln!(out, "  error[{}]: {}", failure.error.kind(), failure.error)?;
            }
        }
    }
    Ok(())
}

fn print_json(dirs: &[PluginDir], entries: &[Entry<'_>]) -> std::io::Result<()> {
    let entries: Vec<Value> = entries
        .iter()
        .map(|entry| match entry {
            Entry::Loaded(p) => json!({
                "file": p.path(),
                "status": "loaded",
                "name": p.name(),
                "version": p.version(),
                "interface_version": p.interface_version(),
                "validators": p.validators().iter().map(|v| json!({
                    "name": v.name,
                    "description": v.description,
                })).collect::<Vec<_>>(),
            }),
            Entry::Failed(f) => json!({
                "file": f.path,
                "status": "error",
                "error": {"kind": f.error.kind(), "message": f.error.to_string()},
            }),
        })
        .collect();
    let doc = json!({
        "interface_version": host_interface_version(),
        "dirs": dirs.iter().map(|d| json!({
            "path": d.path,
            "source": d.source.as_str(),
            "exists": d.path.is_dir(),
        })).collect::<Vec<_>>(),
        "plugins": entries,
    });
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &doc)?;
    writeln!(out)
}
