//! `enforce validators`: list the validator types a configuration can use — the built-ins and
//! those of the loaded plugins.
//!
//! Exit codes: 0 listed (plugins that failed to load are warned about on stderr), 2
//! configuration error.

use crate::commands::Format;
use crate::config::LoadedConfig;
use serde_json::{json, Value};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// Arguments of `enforce validators`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file whose `plugin_dirs` are searched [default: ./enforce.yaml when it
    /// exists].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
}

/// One validator type.
struct Listed {
    name: String,
    source: &'static str,
    plugin: Option<(String, String, PathBuf)>,
    description: Option<String>,
}

/// Runs `enforce validators`.
pub fn run(args: Args) -> ExitCode {
    let config = match LoadedConfig::load(args.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let (registry, host) = crate::plugin_host::registry_with_plugins(&config);
    let mut listed: Vec<Listed> = Vec::new();
    for kind in registry.kinds() {
        let from_plugin = host.plugin_of(kind).and_then(|p| {
            p.validators()
                .iter()
                .find(|v| v.name == kind)
                .map(|v| (p, v))
        });
        listed.push(match from_plugin {
            Some((plugin, info)) => Listed {
                name: kind.to_string(),
                source: "plugin",
                plugin: Some((
                    plugin.name().to_string(),
                    plugin.version().to_string(),
                    plugin.path().to_path_buf(),
                )),
                description: Some(info.description.clone()),
            },
            None => Listed {
                name: kind.to_string(),
                source: "built-in",
                plugin: None,
                description: None,
            },
        });
    }
    // Built-ins first, then plugin validators; each group sorted by name.
    listed
        .sort_by(|a, b| (a.source != "built-in", &a.name).cmp(&(b.source != "built-in", &b.name)));

    let printed = match args.format {
        Format::Text => print_text(&listed),
        Format::Json => print_json(&listed),
    };
    super::after_printing(printed, "listing", ExitCode::SUCCESS)
}

fn print_text(listed: &[Listed]) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    let width = listed.iter().map(|l| l.name.len()).max().unwrap_or(0);
    for l in listed {
        match &l.plugin {
            None => match enforce_config::alias_of(&l.name) {
                Some(target) => writeln!(out, "{:width$}  built-in (alias of {target})", l.name)?,
                None => writeln!(out, "{:width$}  built-in", l.name)?,
            },
            Some((plugin, version, path)) => writeln!(
                out,
                "{:width$}  plugin {plugin} {version} ({}){}",
                l.name,
                path.display(),
                l.description
                    .as_deref()
                    .filter(|d| !d.is_empty())
                    .map(|d| format!(": {d}"))
                    .unwrap_or_default()
            )?,
        }
    }
    Ok(())
}

fn print_json(listed: &[Listed]) -> std::io::Result<()> {
    let items: Vec<Value> = listed
        .iter()
        .map(|l| {
            let mut item = json!({"name": l.name, "source": l.source});
            if let Some(target) = enforce_config::alias_of(&l.name) {
                item["alias_of"] = json!(target);
            }
            if let Some((plugin, version, path)) = &l.plugin {
                item["plugin"] = json!({"name": plugin, "version": version, "file": path});
                item["description"] = json!(l.description);
            }
            item
        })
        .collect();
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &json!({ "validators": items }))?;
    writeln!(out)
}
