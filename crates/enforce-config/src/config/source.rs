//! Reading a configuration file: [`ConfigSource`] parses the YAML and locates what goes
//! wrong in it ([`ConfigError`]: the file, line, column and dotted key).

use super::MAX_CONFIG_BYTES;
use crate::env::{self, Expanded};
use enforce_validators::BuildError;
use serde::de::DeserializeOwned;
use std::fmt;
use std::path::{Path, PathBuf};

/// A configuration problem, located as precisely as possible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    /// The file at fault.
    pub file: Option<PathBuf>,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// 1-based column, when known.
    pub column: Option<usize>,
    /// Dotted key path of the offending value (`profiles.adr.validators[2]`), when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(file) = &self.file {
            write!(f, "{}", file.display())?;
            if let Some(line) = self.line {
                write!(f, ":{line}")?;
                if let Some(col) = self.column {
                    write!(f, ":{col}")?;
                }
            }
            f.write_str(": ")?;
        }
        if let Some(key) = self.key.as_deref().filter(|k| !k.is_empty()) {
            write!(f, "{key}: ")?;
        }
        f.write_str(&self.message)
    }
}

impl ConfigError {
    /// An error about a file as a whole.
    pub fn file(file: impl Into<PathBuf>, message: impl Into<String>) -> Self {
        ConfigError {
            file: Some(file.into()),
            line: None,
            column: None,
            key: None,
            message: message.into(),
        }
    }
}

/// The text of one configuration file, kept to locate errors found after parsing.
///
/// Every source is read through [`env::expand`](crate::env): `${VAR}` and `${VAR:-default}`
/// are replaced before the YAML is parsed (see that module for the rules: comments are not
/// expanded, `$${` is a literal `${`, a value may not change the file's shape). A reference
/// that cannot be expanded (an unset variable without default) is the error [`parse`]
/// returns, located at the reference.
///
/// [`parse`]: ConfigSource::parse
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSource {
    path: PathBuf,
    /// The file as written: keys are located in it, so columns are the author's.
    original: String,
    /// The text parsed: `original` with its references expanded (same lines).
    expanded: Expanded,
    /// Why the references could not be expanded.
    env_error: Option<ConfigError>,
}

impl ConfigSource {
    /// Reads `path` (at most [`MAX_CONFIG_BYTES`], UTF-8).
    pub fn read(path: &Path) -> Result<Self, ConfigError> {
        let meta = std::fs::metadata(path)
            .map_err(|e| ConfigError::file(path, format!("cannot read the configuration: {e}")))?;
        if !meta.is_file() {
            return Err(ConfigError::file(
                path,
                "the configuration is not a regular file",
            ));
        }
        if meta.len() > MAX_CONFIG_BYTES {
            return Err(ConfigError::file(
                path,
                format!(
                    "the configuration is larger than {} MiB",
                    MAX_CONFIG_BYTES >> 20
                ),
            ));
        }
        let bytes = std::fs::read(path)
            .map_err(|e| ConfigError::file(path, format!("cannot read the configuration: {e}")))?;
        let text = String::from_utf8(bytes).map_err(|e| {
            ConfigError::file(
                path,
                format!(
                    "the configuration is not UTF-8 (byte {})",
                    e.utf8_error().valid_up_to()
                ),
            )
        })?;
        Ok(Self::from_string(path, text))
    }

    /// A source from text, its `${VAR}` references expanded from the process environment;
    /// `path` is only used in messages and to resolve relative paths.
    pub fn from_string(path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        Self::from_string_with_env(path, text, &env::process_env)
    }

    /// A source from text, its `${VAR}` references expanded with `lookup` (`None`: unset).
    pub fn from_string_with_env(
        path: impl Into<PathBuf>,
        text: impl Into<String>,
        lookup: &dyn Fn(&str) -> Option<String>,
    ) -> Self {
        let path = path.into();
        let original = text.into();
        let (expanded, env_error) = match env::expand(&original, lookup) {
            Ok(expanded) => (expanded, None),
            Err(e) => {
                let error = ConfigError {
                    file: Some(path.clone()),
                    line: Some(e.line),
                    column: Some(e.column),
                    key: None,
                    message: e.message,
                };
                (Expanded::default(), Some(error))
            }
        };
        ConfigSource {
            path,
            original,
            expanded,
            env_error,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The text parsed: the file with its `${VAR}` references expanded (empty when they
    /// could not be).
    pub fn text(&self) -> &str {
        &self.expanded.text
    }

    /// The file's text as written, references unexpanded.
    pub fn original_text(&self) -> &str {
        &self.original
    }

    /// The directory relative paths in the file resolve against.
    pub fn base_dir(&self) -> PathBuf {
        match self.path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }

    /// Deserializes the whole file into `T`. An empty file (or one holding only comments) is
    /// `T::default()`. Errors name the line, column and key path.
    pub fn parse<T: DeserializeOwned + Default>(&self) -> Result<T, ConfigError> {
        if let Some(error) = &self.env_error {
            return Err(error.clone());
        }
        let text = self.text();
        if text
            .lines()
            .all(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || l.trim() == "---")
        {
            return Ok(T::default());
        }
        if text.len() as u64 > MAX_CONFIG_BYTES {
            return Err(ConfigError::file(
                &self.path,
                "the configuration is too large",
            ));
        }
        if let Some(offset) = enforce_validators::text::yaml_flow_depth_exceeded(
            text,
            enforce_validators::text::MAX_YAML_FLOW_DEPTH,
        ) {
            return Err(ConfigError {
                file: Some(self.path.clone()),
                line: Some(enforce_validators::text::line_of_offset(text, offset) as usize),
                column: None,
                key: None,
                message: format!(
                    "nesting deeper than {} levels",
                    enforce_validators::text::MAX_YAML_FLOW_DEPTH
                ),
            });
        }
        let de = serde_yaml_ng::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|err| {
            let key = err.path().to_string();
            let key = (key != ".").then_some(key);
            let inner = err.into_inner();
            let (line, column) = match inner.location() {
                Some(loc) => (
                    Some(loc.line()),
                    Some(self.expanded.original_column(loc.line(), loc.column())),
                ),
                None => match key.as_deref().and_then(|k| locate_key(&self.original, k)) {
                    Some((l, c)) => (Some(l), Some(c)),
                    None => (None, None),
                },
            };
            let message = strip_path(&strip_location(&inner.to_string()), key.as_deref());
            ConfigError {
                file: Some(self.path.clone()),
                line,
                column,
                key,
                message,
            }
        })
    }

    /// An error about the value at the dotted key path `key`, located in this file.
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let (line, column) = match locate_key(&self.original, key) {
            Some((l, c)) => (Some(l), Some(c)),
            None => (None, None),
        };
        ConfigError {
            file: Some(self.path.clone()),
            line,
            column,
            key: (!key.is_empty()).then(|| key.to_string()),
            message: message.into(),
        }
    }

    /// A [`BuildError`] (whose key is relative to the file's root) located in this file.
    pub fn build_error(&self, err: BuildError) -> ConfigError {
        self.error_at(&err.key, err.message)
    }
}

/// serde_yaml_ng appends " at line L column C" to messages; the location is reported apart.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(pos) => message[..pos].to_string(),
        None => message.to_string(),
    }
}

/// serde_yaml_ng starts some messages with the path of the mapping at fault; the key path is
/// reported apart, so that prefix is dropped.
fn strip_path(message: &str, key: Option<&str>) -> String {
    if let (Some((prefix, rest)), Some(key)) = (message.split_once(": "), key) {
        if !prefix.contains(' ') && key.starts_with(prefix) {
            return rest.to_string();
        }
    }
    message.to_string()
}

/// Parses `a.b[2].c` into segments.
fn key_segments(key: &str) -> Vec<Segment<'_>> {
    let mut out = Vec::new();
    for part in key.split('.').filter(|p| !p.is_empty()) {
        let (name, mut rest) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            out.push(Segment::Key(name));
        }
        while let Some(stripped) = rest.strip_prefix('[') {
            let Some(end) = stripped.find(']') else { break };
            if let Ok(i) = stripped[..end].parse() {
                out.push(Segment::Index(i));
            }
            rest = &stripped[end + 1..];
        }
    }
    out
}

enum Segment<'a> {
    Key(&'a str),
    Index(usize),
}

/// Finds the 1-based line and column of the dotted key path `key` in block-style YAML.
///
/// Best effort, for error messages: it follows indentation, `key:` lines and `- ` list items,
/// and stops at the deepest segment it can find (so an error always points somewhere near).
/// Flow collections (`[a, b]`) are located at their parent key.
pub fn locate_key(text: &str, key: &str) -> Option<(usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut found: Option<(usize, usize)> = None;
    // The block being searched: its first line, the indent its children must exceed (or, for
    // a key's block, may equal when they are list items), and the list item line, if the
    // block is a list item (its first key sits after "- ").
    let mut scope_start = 0usize;
    let mut scope_indent: Option<usize> = None;
    let mut item_line: Option<usize> = None;
    'segments: for seg in key_segments(key) {
        let mut index_seen = 0usize;
        let mut child_indent: Option<usize> = None;
        for (i, &line) in lines.iter().enumerate().skip(scope_start) {
            let trimmed = line.trim_start();
            if trimmed.is_empty() || trimmed.starts_with('#') || trimmed == "---" {
                continue;
            }
            let (indent, content) = match item_line {
                Some(l) if l == i => {
                    let after = trimmed.strip_prefix('-').unwrap_or(trimmed);
                    let inner = after.trim_start();
                    (line.len() - inner.len(), inner)
                }
                _ => (line.len() - trimmed.len(), trimmed),
            };
            if let Some(si) = scope_indent {
                let list_item_of_key = item_line.is_none() && content.starts_with('-');
                if indent < si || (indent == si && !list_item_of_key) {
                    break;
                }
            }
            let ci = *child_indent.get_or_insert(indent);
            if indent != ci {
                continue;
            }
            match seg {
                Segment::Key(name) => {
                    let t = content.trim_start_matches(['"', '\'']);
                    if let Some(rest) = t.strip_prefix(name) {
                        let rest = rest.trim_start_matches(['"', '\'']);
                        if rest.trim_start().starts_with(':') {
                            let col = line.len() - t.len();
                            found = Some((i + 1, col + 1));
                            scope_start = i + 1;
                            scope_indent = Some(col);
                            item_line = None;
                            continue 'segments;
                        }
                    }
                }
                Segment::Index(n) => {
                    if content == "-" || content.starts_with("- ") {
                        if index_seen == n {
                            found = Some((i + 1, indent + 1));
                            scope_start = i;
                            scope_indent = Some(indent);
                            item_line = Some(i);
                            continue 'segments;
                        }
                        index_seen += 1;
                    }
                }
            }
        }
        break; // segment not found: report the deepest match
    }
    found
}
