//! `cargo xtask architecture`: every repository path and `crate::item` that ARCHITECTURE.md
//! names in a code span exists, so the map cannot send a newcomer to a file or item that was
//! renamed or removed.
//!
//! A code span is a **path** when it is one word with a `/` (not a URL, not a route such as
//! `/metrics`, no glob): it must name a file or directory relative to the repository. It is an
//! **item** when it is `enforce…::…`: the first segment names a crate (`enforce_core` is
//! `crates/enforce-core`, `enforce` the binary's `src/`), every lower-case segment in between a
//! module of that crate, and the last one a `pub` definition (struct, enum, trait, type, fn,
//! const, static, mod, an exported macro) or a `pub use` of that name; after a type
//! (`enforce_core::Enforcer::run_with`) it is a method of any visibility. Items are looked up by
//! name in the crate's sources, wherever they sit: the map names what exists, not how it is
//! re-exported. Code blocks are not read.

use crate::module_cycles::{read_sources, tokenize, Token};
use std::collections::BTreeMap;
use std::path::Path;

/// Checks ARCHITECTURE.md at the repository's root.
pub fn check() -> Result<(), String> {
    let root = crate::root();
    let text = std::fs::read_to_string(root.join("ARCHITECTURE.md"))
        .map_err(|e| format!("cannot read ARCHITECTURE.md: {e}"))?;
    let names = Names::of(&text);
    let missing = names.missing(&root)?;
    if missing.is_empty() {
        eprintln!(
            "xtask: architecture ok: {} path(s) and {} item(s) named in ARCHITECTURE.md exist",
            names.paths.len(),
            names.items.len()
        );
        Ok(())
    } else {
        Err(format!(
            "ARCHITECTURE.md names what does not exist (fix the name or the map):\n  {}",
            missing.join("\n  ")
        ))
    }
}

/// The paths and items a Markdown text names in its code spans.
#[derive(Debug, Default)]
struct Names {
    paths: Vec<String>,
    items: Vec<String>,
}

impl Names {
    fn of(markdown: &str) -> Names {
        let mut names = Names::default();
        for span in code_spans(markdown) {
            if is_item(&span) {
                names.items.push(span);
            } else if is_path(&span) {
                names.paths.push(span);
            }
        }
        names
    }

    /// One line per name that does not resolve under `root`.
    fn missing(&self, root: &Path) -> Result<Vec<String>, String> {
        let mut missing: Vec<String> = self
            .paths
            .iter()
            .filter(|p| !root.join(p.trim_end_matches('/')).exists())
            .map(|p| format!("`{p}`: no such file or directory"))
            .collect();
        let mut crates = BTreeMap::new();
        for item in &self.items {
            let krate = item.split("::").next().unwrap_or_default();
            if !crates.contains_key(krate) {
                crates.insert(krate.to_string(), CrateTokens::read(root, krate)?);
            }
            let found = match &crates[krate] {
                Some(tokens) => tokens.resolve(item),
                None => Err(format!("no crate `{krate}` in the workspace")),
            };
            if let Err(why) = found {
                missing.push(format!("`{item}`: {why}"));
            }
        }
        Ok(missing)
    }
}

/// The code spans of a Markdown text outside fenced code blocks.
fn code_spans(markdown: &str) -> Vec<String> {
    let mut spans = Vec::new();
    let mut in_block = false;
    let mut prose = String::new();
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
        } else if !in_block {
            prose.push_str(line);
            prose.push('\n');
        }
    }
    for (i, part) in prose.split('`').enumerate() {
        if i % 2 == 1 {
            spans.push(unwrapped(part));
        }
    }
    spans
}

/// A code span that wraps onto the next line as Markdown shows it (the break a space), except
/// that a path or item broken after its `/` or `::` is one name again.
fn unwrapped(span: &str) -> String {
    let mut joined = String::new();
    for (i, line) in span.lines().enumerate() {
        let line = if i == 0 { line } else { line.trim_start() };
        if i > 0 && !joined.ends_with(['/', ':']) {
            joined.push(' ');
        }
        joined.push_str(line);
    }
    joined.trim().to_string()
}

fn is_item(span: &str) -> bool {
    let mut segments = span.split("::");
    let first = segments.next().unwrap_or_default();
    span.contains("::")
        && (first == "enforce" || first.starts_with("enforce_"))
        && span
            .split("::")
            .all(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'))
}

fn is_path(span: &str) -> bool {
    span.contains('/')
        && !span.starts_with('/')
        && !span.contains("://")
        && span
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '-' | '_'))
}

/// The tokens of one crate's sources, for looking names up.
struct CrateTokens {
    files: Vec<Vec<Token>>,
}

impl CrateTokens {
    /// The sources of crate `krate` (`enforce_core` → `crates/enforce-core/src`, `enforce` →
    /// `src`), or `None` when there is no such crate.
    fn read(root: &Path, krate: &str) -> Result<Option<CrateTokens>, String> {
        let src = if krate == "enforce" {
            root.join("src")
        } else {
            root.join("crates")
                .join(krate.replace('_', "-"))
                .join("src")
        };
        if !src.is_dir() {
            return Ok(None);
        }
        let files = read_sources(&src)?
            .iter()
            .map(|(_, text)| tokenize(text))
            .collect();
        Ok(Some(CrateTokens { files }))
    }

    /// Whether every segment of `item` after the crate exists, or which does not.
    fn resolve(&self, item: &str) -> Result<(), String> {
        let segments: Vec<&str> = item.split("::").skip(1).collect();
        for (i, name) in segments.iter().enumerate() {
            let after_type = i > 0 && starts_upper(segments[i - 1]);
            let last = i + 1 == segments.len();
            let found = if after_type {
                self.defines(&["fn"], name, false)
            } else if !last && !starts_upper(name) {
                self.defines(&["mod"], name, false)
            } else {
                self.defines(DEFINITIONS, name, true) || self.exports(name)
            };
            if !found {
                let kind = match (after_type, last || starts_upper(name)) {
                    (true, _) => "method",
                    (false, false) => "module",
                    (false, true) => "public item",
                };
                return Err(format!("no {kind} `{name}` in the crate's sources"));
            }
        }
        Ok(())
    }

    /// Whether `keyword name` (`fn run`, `struct Enforcer`, `macro_rules! name`) appears,
    /// preceded by a `pub` visibility when `public`.
    fn defines(&self, keywords: &[&str], name: &str, public: bool) -> bool {
        self.files.iter().any(|tokens| {
            tokens.windows(2).enumerate().any(|(at, pair)| {
                let defined = keywords.iter().any(|k| pair[0].is(k)) && pair[1].is(name);
                defined && (!public || is_public(tokens, at))
                    || pair[0].is("macro_rules") && tokens.get(at + 2).is_some_and(|t| t.is(name))
            })
        })
    }

    /// Whether a `pub use` statement names `name`.
    fn exports(&self, name: &str) -> bool {
        self.files.iter().any(|tokens| {
            tokens.iter().enumerate().any(|(at, token)| {
                token.is("use")
                    && is_public(tokens, at)
                    && tokens[at..]
                        .iter()
                        .take_while(|t| **t != Token::Punct(';'))
                        .any(|t| t.is(name))
            })
        })
    }
}

/// What a public item is defined with.
const DEFINITIONS: &[&str] = &[
    "struct", "enum", "trait", "type", "fn", "const", "static", "union", "mod",
];

/// Whether the item whose keyword is at `at` is `pub`, `pub(crate)`, `pub(super)`, ... after
/// its qualifiers (`pub(crate) async fn`, `pub const unsafe fn`).
fn is_public(tokens: &[Token], at: usize) -> bool {
    let mut i = at;
    while i > 0
        && ["async", "unsafe", "const", "extern"]
            .iter()
            .any(|q| tokens[i - 1].is(q))
    {
        i -= 1;
    }
    if i >= 3 && tokens[i - 1] == Token::Punct(')') && tokens[i - 3] == Token::Punct('(') {
        i -= 3;
    }
    i > 0 && tokens[i - 1].is("pub")
}

fn starts_upper(segment: &str) -> bool {
    segment.starts_with(|c: char| c.is_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn architecture_md_names_only_what_exists() {
        check().unwrap();
    }

    #[test]
    fn misspelt_paths_and_items_are_reported_and_real_ones_pass() {
        let markdown = "\
The loop is `enforce_core::Enforcer` (`crates/enforce-core/src/enforcer.rs`), run by
`enforce_core::Enforcer::run_with`; `enforce_core::Enforcr` is not, nor
`crates/enforce-core/src/enforcr.rs`, `enforce_core::Enforcer::run_wiht`,
`enforce_core::nosuchmodule::Enforcer` or `enforce_nothing::Item`. A module:
`enforce_validators::build::FactoryInput`; the binary: `src/commands/`, a crate-private
function: `enforce_server::pipeline::serve`, a private one is not public:
`enforce_core::seed_of`.

```
`crates/not/in/a/code/block.rs`
```

Not names: `/metrics`, `crates/*/README.md`, `Runner::ask`, `http://example.com/a`.
";
        let names = Names::of(markdown);
        let missing = names.missing(&crate::root()).unwrap();
        let shown: Vec<&str> = missing
            .iter()
            .map(|m| m.split('`').nth(1).unwrap_or_default())
            .collect();
        assert_eq!(
            shown,
            [
                "crates/enforce-core/src/enforcr.rs",
                "enforce_core::Enforcr",
                "enforce_core::Enforcer::run_wiht",
                "enforce_core::nosuchmodule::Enforcer",
                "enforce_nothing::Item",
                "enforce_core::seed_of",
            ],
            "{missing:#?}"
        );
        assert_eq!(names.paths.len(), 3, "{:?}", names.paths);
        assert_eq!(names.items.len(), 9, "{:?}", names.items);
    }

    #[test]
    fn a_name_wrapped_after_its_separator_is_one_name() {
        let names = Names::of(
            "see `enforce_core::\n  Enforcer` and `crates/enforce-core/\n  src`, `enforce\n  run`",
        );
        assert_eq!(names.items, ["enforce_core::Enforcer"]);
        assert_eq!(names.paths, ["crates/enforce-core/src"]);
    }
}
