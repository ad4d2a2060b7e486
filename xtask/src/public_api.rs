//! `cargo xtask public-api`: the public items of the crates whose API is a promise
//! (docs/stability.md), listed from their sources into `crates/<crate>/public-api.txt`, so a
//! change to that API shows in review as a change of that file. A test fails when a list is not
//! what the sources say (regenerate it with `cargo xtask public-api`).
//!
//! The listing reads rustfmt-formatted sources (`cargo xtask ci` checks the formatting), no
//! nightly rustdoc JSON: every `pub` item at the top of a module, the `pub` fields of a `pub
//! struct`, the variants of a `pub enum`, the items of a `pub trait`, the `pub` methods of an
//! `impl` block and the exported macros, each as its declaration without a body. It lists a
//! `pub` item of a private module too, and no trait implementations: enough to see a change.

use crate::generated::{self, Generated};
use crate::{root, Result};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The crates whose public API is recorded.
pub(crate) const RECORDED: &[&str] = &["enforce-core", "enforce-validators", "enforce-plugin-abi"];

/// Every crate's list: (path relative to the repository, content).
fn lists() -> Result<Vec<Generated>> {
    RECORDED
        .iter()
        .map(|krate| Ok((format!("crates/{krate}/public-api.txt"), list_crate(krate)?)))
        .collect()
}

/// Writes every crate's list.
pub(crate) fn write() -> Result<()> {
    generated::write(&lists()?)
}

/// The list of one crate: its `src/` files in path order, each with its public items.
fn list_crate(krate: &str) -> Result<String> {
    let src = root().join("crates").join(krate).join("src");
    let mut files = Vec::new();
    collect_rs(&src, &mut files)?;
    files.sort();
    let mut out = format!(
        "# The public API of {krate}, listed from its sources by `cargo xtask public-api`.\n\
         # A change here is a change of the API: see docs/stability.md before merging it.\n"
    );
    for file in files {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
        let items = list_source(&text);
        if items.is_empty() {
            continue;
        }
        let relative = file.strip_prefix(&src).unwrap_or(&file);
        let _ = writeln!(out, "\n{}", module_path(krate, relative));
        for item in items {
            let _ = writeln!(out, "{item}");
        }
    }
    Ok(out)
}

fn collect_rs(dir: &Path, files: &mut Vec<PathBuf>) -> Result<()> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_rs(&path, files)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    Ok(())
}

/// `enforce_core::policy` for `policy.rs`, `enforce_core` for `lib.rs`, `a::b` for `a/b.rs`
/// and `a/b/mod.rs`.
fn module_path(krate: &str, relative: &Path) -> String {
    let mut parts = vec![krate.replace('-', "_")];
    let components: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    for (i, part) in components.iter().enumerate() {
        let last = i + 1 == components.len();
        if last && (part == "lib" || part == "mod") {
            continue;
        }
        parts.push(part.clone());
    }
    parts.join("::")
}

/// What kind of block the lines at indentation 4 belong to.
#[derive(Clone, Copy, PartialEq)]
enum Container {
    /// Members are listed when they say `pub`.
    PubOnly,
    /// Every member is public (enum variants).
    Variants,
    /// Every `fn`, `type` and `const` (trait items).
    TraitItems,
    /// Nothing inside is listed (private types, functions, test modules).
    None,
}

/// The public items of one rustfmt-formatted source file, each indented by its depth.
fn list_source(text: &str) -> Vec<String> {
    let lines: Vec<&str> = text.lines().collect();
    let mut items = Vec::new();
    let mut container = Container::None;
    // The header of the current `impl` block, printed before its first public method.
    let mut pending_impl: Option<String> = None;
    // The next top-level item carries `#[cfg(test)]` or `#[cfg(doctest)]`.
    let mut only_in_tests = false;
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let indent = line.len() - line.trim_start().len();
        let trimmed = line.trim();
        // Unit tests sit at the end of a file, in a `#[cfg(test)]` module.
        if indent == 0 && trimmed == "#[cfg(test)]" {
            let next = lines.get(i + 1).map(|l| l.trim()).unwrap_or_default();
            if next.starts_with("mod ") || next.starts_with("pub(crate) mod ") {
                break;
            }
        }
        if indent == 0 && (trimmed == "#[cfg(doctest)]" || trimmed == "#[cfg(test)]") {
            only_in_tests = true;
        }
        if trimmed.is_empty() || trimmed.starts_with("//") || trimmed.starts_with('#') {
            i += 1;
            continue;
        }
        if indent == 0 {
            let (decl, next) = declaration(&lines, i, false);
            container = Container::None;
            pending_impl = None;
            if std::mem::take(&mut only_in_tests) {
                // Not part of the API: an item that exists only in test or doctest builds.
            } else if let Some(rest) = trimmed.strip_prefix("macro_rules! ") {
                items.push(format!("macro_rules! {}", rest.trim_end_matches(" {")));
            } else if trimmed.starts_with("pub ") {
                container = if decl.starts_with("pub enum ") {
                    Container::Variants
                } else if decl.starts_with("pub trait ") || decl.starts_with("pub unsafe trait ") {
                    Container::TraitItems
                } else if decl.starts_with("pub struct ") {
                    Container::PubOnly
                } else {
                    Container::None
                };
                items.push(decl);
            } else if trimmed.starts_with("impl") || trimmed.starts_with("unsafe impl") {
                container = Container::PubOnly;
                pending_impl = Some(decl);
            }
            i = next;
            continue;
        }
        if indent == 4 && container != Container::None {
            let listed = match container {
                Container::PubOnly => trimmed.starts_with("pub "),
                Container::Variants => !trimmed.starts_with('}'),
                Container::TraitItems => ["fn ", "async fn ", "unsafe fn ", "type ", "const "]
                    .iter()
                    .any(|p| trimmed.starts_with(p)),
                Container::None => false,
            };
            if listed {
                let (decl, next) = declaration(&lines, i, container == Container::Variants);
                if let Some(header) = pending_impl.take() {
                    items.push(header);
                }
                items.push(format!("    {decl}"));
                i = next;
                continue;
            }
        }
        i += 1;
    }
    items
}

/// The declaration starting at line `start`, without its body, on one line; and the index of
/// the first line after it (after its body's opening line when it has one). `whole` keeps
/// braces (an enum variant's fields) instead of cutting the text at the first one.
fn declaration(lines: &[&str], start: usize, whole: bool) -> (String, usize) {
    let first = lines[start].trim();
    let is_use = first.contains("use ") && first.split_whitespace().any(|w| w == "use");
    // A function, not a field whose type is a function pointer (`pub describe: extern "C" fn()`).
    let is_fn = first
        .split('(')
        .next()
        .and_then(|head| head.split(':').next())
        .is_some_and(|head| head.split_whitespace().any(|w| w == "fn"));
    let mut text = String::new();
    let mut depth: i32 = 0;
    let mut end = start;
    for (n, line) in lines.iter().enumerate().skip(start) {
        end = n + 1;
        let line = line.trim();
        if !text.is_empty() {
            text.push(' ');
        }
        text.push_str(line);
        for c in line.chars() {
            match c {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                '{' if whole => depth += 1,
                '}' if whole => depth -= 1,
                _ => {}
            }
        }
        if depth > 0 {
            continue;
        }
        let done = if is_use {
            line.ends_with(';')
        } else if is_fn {
            line.ends_with('{') || line.ends_with(';') || line.ends_with('}')
        } else {
            line.ends_with('{') || line.ends_with(';') || line.ends_with(',') || line.ends_with('}')
        };
        if done {
            break;
        }
    }
    // The body is not part of the declaration; a one-line body (`{ .. }`) neither.
    if !is_use && !whole {
        if let Some(open) = body_start(&text) {
            text.truncate(open);
        }
    }
    (normalise(&text), end)
}

/// Where a `{` opens a body or a braced struct/variant (not inside parentheses or brackets).
fn body_start(text: &str) -> Option<usize> {
    let mut depth = 0;
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' => depth += 1,
            ')' | ']' => depth -= 1,
            '{' if depth == 0 => return Some(i),
            _ => {}
        }
    }
    None
}

/// One space between tokens, none just inside parentheses, no trailing comma before `)`.
fn normalise(text: &str) -> String {
    let mut out = text.split_whitespace().collect::<Vec<_>>().join(" ");
    for (from, to) in [
        ("( ", "("),
        (" )", ")"),
        (",)", ")"),
        ("[ ", "["),
        (",]", "]"),
    ] {
        while out.contains(from) {
            out = out.replace(from, to);
        }
    }
    out.trim_end_matches([',', ' ']).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_declarations_without_bodies_and_skips_private_items_and_tests() {
        let source = r#"
//! A module.
use std::fmt;

/// Docs.
pub use inner::{
    Alpha, Beta,
};

pub const VERSION: &str = "1.1.0";

/// A struct.
#[derive(Debug)]
pub struct Policy {
    /// Shown.
    pub max_retries: u32,
    pub describe: extern "C" fn() -> RResult<Description, Error>,
    hidden: u32,
}

struct Private {
    pub not_listed: u32,
}

pub enum Status {
    /// Passed.
    Passed,
    Failed { code: String },
    Cut {
        bytes: usize,
    },
}

pub trait Validator: Send {
    fn name(&self) -> &str;
    async fn validate(&self, response: &str) -> Validation {
        Ok(Vec::new())
    }
}

impl Policy {
    pub fn builder(
        max: u32,
        min: u32,
    ) -> Builder {
        Builder
    }

    fn private(&self) {}
}

impl fmt::Display for Private {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        Ok(())
    }
}

pub fn generic<T>(value: T) -> T
where
    T: Clone,
{
    value
}

#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;

#[macro_export]
macro_rules! export_plugin {
    ($spec:expr) => {};
}

#[cfg(test)]
mod tests {
    pub fn not_listed() {}
}
"#;
        assert_eq!(
            list_source(source),
            [
                "pub use inner::{ Alpha, Beta, };",
                "pub const VERSION: &str = \"1.1.0\";",
                "pub struct Policy",
                "    pub max_retries: u32",
                "    pub describe: extern \"C\" fn() -> RResult<Description, Error>",
                "pub enum Status",
                "    Passed",
                "    Failed { code: String }",
                "    Cut { bytes: usize, }",
                "pub trait Validator: Send",
                "    fn name(&self) -> &str;",
                "    async fn validate(&self, response: &str) -> Validation",
                "impl Policy",
                "    pub fn builder(max: u32, min: u32) -> Builder",
                "pub fn generic<T>(value: T) -> T where T: Clone",
                "macro_rules! export_plugin",
            ]
        );
    }

    #[test]
    fn module_paths_follow_the_file_layout() {
        assert_eq!(
            module_path("enforce-core", Path::new("lib.rs")),
            "enforce_core"
        );
        assert_eq!(
            module_path("enforce-core", Path::new("policy.rs")),
            "enforce_core::policy"
        );
        assert_eq!(
            module_path("enforce-validators", Path::new("json/mod.rs")),
            "enforce_validators::json"
        );
    }

    /// The checked-in lists are what the sources say. When this fails after a deliberate API
    /// change, run `cargo xtask public-api` and commit the lists with the change.
    #[test]
    fn recorded_public_apis_are_current() {
        let stale = generated::stale(&lists().expect("sources readable"));
        assert!(
            stale.is_empty(),
            "the public API of {stale:?} changed: review the change against docs/stability.md, \
             then regenerate the lists with `cargo xtask public-api` and commit them"
        );
    }
}
