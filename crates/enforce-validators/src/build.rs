//! What a validator is built from: [`FactoryInput`] (its name and a JSON object of options)
//! and [`BuildEnv`] (where relative paths resolve). Configuration layers (enforce-config's YAML,
//! a plugin host, your own service) produce these; validators only read them, so no validator
//! crate depends on a configuration format.

use crate::error::BuildError;
use enforce_core::Runner;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How the files that options name (a JSON Schema file, say) are parsed. The configuration
/// layer picks the formats it accepts: [`DocumentFormat::JSON`] by default, JSON or YAML
/// under enforce-config.
#[derive(Debug, Clone, Copy)]
pub struct DocumentFormat {
    /// What the format is called in error messages ("JSON", "JSON or YAML").
    pub name: &'static str,
    /// Parses a file's text.
    pub parse: fn(&str) -> Result<Value, String>,
}

impl DocumentFormat {
    /// JSON only.
    pub const JSON: DocumentFormat = DocumentFormat {
        name: "JSON",
        parse: |text| serde_json::from_str(text).map_err(|e| e.to_string()),
    };
}

impl Default for DocumentFormat {
    /// [`DocumentFormat::JSON`].
    fn default() -> Self {
        DocumentFormat::JSON
    }
}

/// What a factory gets to build one validator.
#[derive(Debug, Clone, Copy)]
pub struct FactoryInput<'a> {
    /// The validator's name: issues it raises carry it, and repairs are matched by it. It is
    /// the key under `validators:` in the configuration, or the type name for a validator used
    /// with its default configuration.
    pub name: &'a str,
    /// The type name the factory was registered under.
    pub kind: &'a str,
    /// The validator's own options: a JSON object without the keys the registry handles
    /// itself (`type`, `description`, `input`, `when`, `unavailable_status`). `{}` when the
    /// validator has no options.
    pub config: &'a Value,
    /// Directory that relative paths in `config` are resolved against (the configuration
    /// file's directory; the current directory for built-in profiles).
    pub base_dir: &'a Path,
    /// The project root the user chose (`enforce check --root DIR`), which overrides any root
    /// a validator's configuration names. Validators that check paths use it.
    pub root: Option<&'a Path>,
    /// How files that options name are parsed (see [`read_document`](Self::read_document)).
    pub documents: DocumentFormat,
    /// Builds the runners of validators that ask a model (an LLM judge); `None` where the
    /// configuration layer offers none (see [`runner`](Self::runner)).
    pub runners: Option<&'a dyn RunnerFactory>,
}

impl<'a> FactoryInput<'a> {
    /// Input for the validator `name` with `options`, relative paths resolving against the
    /// current directory, no root override, JSON files only: what a program that builds
    /// validators from JSON options without a configuration layer needs.
    pub fn new(name: &'a str, options: &'a Value) -> Self {
        FactoryInput {
            name,
            kind: name,
            config: options,
            base_dir: Path::new("."),
            root: None,
            documents: DocumentFormat::JSON,
            runners: None,
        }
    }

    /// The runner configured by `config` (a runner configuration object, e.g.
    /// `{type: openai, base_url: ..., model: ...}`), built by [`runners`](Self::runners). The
    /// error says when this configuration layer cannot build runners at all.
    pub fn runner(&self, config: &Value) -> Result<Arc<dyn Runner>, String> {
        match self.runners {
            Some(factory) => factory.runner(config),
            None => Err(format!(
                "validator '{}' asks a model, but runners cannot be configured here",
                self.name
            )),
        }
    }

    /// Deserializes the options into `T`. Errors name the key path (`forbidden[0].regex`), so
    /// use `#[serde(deny_unknown_fields)]` on `T` to turn typos into errors.
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, BuildError> {
        Ok(serde_path_to_error::deserialize(self.config)?)
    }

    /// Reads the file at `path` (resolved with [`resolve`](Self::resolve)) and parses it with
    /// [`documents`](Self::documents). The error says which file and why.
    pub fn read_document(&self, path: &Path) -> Result<Value, String> {
        let path = self.resolve(path);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        (self.documents.parse)(&text)
            .map_err(|e| format!("{} is not {}: {e}", path.display(), self.documents.name))
    }

    /// `path` resolved against [`base_dir`](Self::base_dir) when relative.
    pub fn resolve(&self, path: &Path) -> PathBuf {
        if path.is_absolute() {
            path.to_path_buf()
        } else {
            self.base_dir.join(path)
        }
    }
}

/// Builds a [`Runner`] from a runner configuration object, for validators that ask a model
/// themselves (an LLM judge). The layer that knows runner types (the `enforce` binary)
/// implements it; validator crates see only this trait.
pub trait RunnerFactory: Send + Sync {
    /// The runner `config` describes, or why it cannot be built.
    fn runner(&self, config: &Value) -> Result<Arc<dyn Runner>, String>;
}

impl fmt::Debug for dyn RunnerFactory + '_ {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RunnerFactory")
    }
}

/// Where the validators being built live.
#[derive(Debug, Clone)]
pub struct BuildEnv {
    /// Directory relative paths in validator options resolve against.
    pub base_dir: PathBuf,
    /// The project root chosen by the user, overriding configured roots.
    pub root: Option<PathBuf>,
    /// Builds the runners of validators that ask a model; `None`: such validators cannot be
    /// configured.
    pub runners: Option<Arc<dyn RunnerFactory>>,
}

impl Default for BuildEnv {
    /// Relative paths resolve against the current directory; no root override.
    fn default() -> Self {
        BuildEnv {
            base_dir: PathBuf::from("."),
            root: None,
            runners: None,
        }
    }
}

impl BuildEnv {
    /// Relative paths resolve against `base_dir`.
    pub fn new(base_dir: impl Into<PathBuf>) -> Self {
        BuildEnv {
            base_dir: base_dir.into(),
            root: None,
            runners: None,
        }
    }

    /// Sets the project root override.
    pub fn with_root(mut self, root: Option<PathBuf>) -> Self {
        self.root = root;
        self
    }

    /// Lets validators that ask a model build their runners with `factory`.
    pub fn with_runners(mut self, factory: Arc<dyn RunnerFactory>) -> Self {
        self.runners = Some(factory);
        self
    }
}
