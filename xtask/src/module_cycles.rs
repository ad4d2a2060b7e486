//! `cargo xtask cycles`: the top-level modules of one crate must not import each other in a
//! loop. A cycle means neither module can be understood, tested or moved without
//! the other; the fix is a third module both use.
//!
//! Plain text scanning, so xtask stays free of a Rust parser: every `src/` file is cut into
//! identifiers and punctuation (comments, doc comments and literals dropped), items under
//! `#[cfg(test)]` are removed (tests may use anything), and each top-level module (`foo.rs`, or
//! `foo/mod.rs` with everything under `foo/`) gets an edge to each other top-level module it
//! names through `crate::NAME`, `crate::{NAME, ..}` or `super::NAME` leading to the crate
//! root. A name the crate root re-exports from a module (`pub use app::App;`) counts as that
//! module. `src/bin/` holds crate roots of their own and is not scanned.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Top-level module → the other top-level modules it references.
type Graph = BTreeMap<String, BTreeSet<String>>;

/// Scans the `src/` of every package (name, manifest path) and fails with one line per cycle.
pub fn check(packages: &[(String, PathBuf)]) -> Result<(), String> {
    let mut packages = packages.to_vec();
    packages.sort();
    let mut found = Vec::new();
    for (name, manifest) in &packages {
        let src = manifest.parent().unwrap_or(Path::new(".")).join("src");
        if !src.is_dir() {
            continue;
        }
        let files = read_sources(&src)?;
        for cycle in find_cycles(&module_graph(&files)) {
            found.push(render_cycle(name, &cycle));
        }
    }
    if found.is_empty() {
        eprintln!("xtask: module cycles: none in {} crate(s)", packages.len());
        Ok(())
    } else {
        Err(format!(
            "modules of one crate import each other in a loop (move what both need into a module of its own):\n  {}",
            found.join("\n  ")
        ))
    }
}

/// `crate: a -> b -> a`.
fn render_cycle(krate: &str, cycle: &[String]) -> String {
    let mut path = cycle.to_vec();
    path.extend(cycle.first().cloned());
    format!("{krate}: {}", path.join(" -> "))
}

/// Every `.rs` file under `src` except `src/bin/`: (path relative to `src`, text).
pub(crate) fn read_sources(src: &Path) -> Result<Vec<(PathBuf, String)>, String> {
    let mut files = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot list {}: {e}", dir.display()))?
                .path();
            let rel = path.strip_prefix(src).unwrap_or(&path).to_path_buf();
            if path.is_dir() {
                if rel != Path::new("bin") {
                    dirs.push(path);
                }
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path)
                    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
                files.push((rel, text));
            }
        }
    }
    files.sort();
    Ok(files)
}

/// The module path of a file relative to `src`: empty for the crate root (`lib.rs`,
/// `main.rs`), `[foo]` for `foo.rs` and `foo/mod.rs`, `[foo, bar]` for `foo/bar.rs`.
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    let last = parts.pop()?;
    let stem = last.strip_suffix(".rs")?;
    if parts.is_empty() && (stem == "lib" || stem == "main") {
        return Some(Vec::new());
    }
    if stem != "mod" || parts.is_empty() {
        parts.push(stem.to_string());
    }
    Some(parts)
}

/// One scanned file: its module path and its tokens without test-only items.
struct Scanned {
    path: Vec<String>,
    tokens: Vec<Token>,
    /// Modules this file declares as `#[cfg(test)] mod NAME;` (their files are test-only).
    test_modules: Vec<String>,
    /// `#![cfg(test)]` at the top: the whole file is test-only.
    test_only: bool,
}

/// The module graph of one crate from its files (path relative to `src`, text).
fn module_graph(files: &[(PathBuf, String)]) -> Graph {
    let scanned: Vec<Scanned> = files
        .iter()
        .filter_map(|(rel, text)| {
            let path = module_path(rel)?;
            let tokens = tokenize(text);
            let test_only = starts_with_inner_cfg_test(&tokens);
            let (tokens, test_modules) = strip_test_items(&tokens);
            Some(Scanned {
                path,
                tokens,
                test_modules,
                test_only,
            })
        })
        .collect();
    let test_prefixes: Vec<Vec<String>> = scanned
        .iter()
        .flat_map(|f| {
            f.test_modules.iter().map(|m| {
                let mut prefix = f.path.clone();
                prefix.push(m.clone());
                prefix
            })
        })
        .collect();
    let live: Vec<&Scanned> = scanned
        .iter()
        .filter(|f| !f.test_only && !test_prefixes.iter().any(|p| f.path.starts_with(p)))
        .collect();
    let modules: BTreeSet<&str> = live
        .iter()
        .filter_map(|f| f.path.first().map(String::as_str))
        .collect();
    let mut exports = BTreeMap::new();
    for root in live.iter().filter(|f| f.path.is_empty()) {
        exports.extend(root_exports(&root.tokens, &modules));
    }
    let mut graph = Graph::new();
    for file in &live {
        let Some(from) = file.path.first() else {
            continue;
        };
        let edges = graph.entry(from.clone()).or_default();
        for name in root_references(&file.tokens, file.path.len()) {
            let to = if modules.contains(name.as_str()) {
                Some(name)
            } else {
                exports.get(&name).cloned()
            };
            if let Some(to) = to.filter(|to| to != from) {
                edges.insert(to);
            }
        }
    }
    graph
}

/// Every cycle a depth-first search meets, each rotated to start at its smallest module.
/// At least one cycle of every loop is reported; breaking it may reveal the next.
fn find_cycles(graph: &Graph) -> Vec<Vec<String>> {
    fn visit<'g>(
        node: &'g str,
        graph: &'g Graph,
        stack: &mut Vec<&'g str>,
        done: &mut BTreeSet<&'g str>,
        found: &mut BTreeSet<Vec<String>>,
    ) {
        stack.push(node);
        for next in graph.get(node).into_iter().flatten() {
            if let Some(at) = stack.iter().position(|n| n == next) {
                let cycle = &stack[at..];
                let start = (0..cycle.len()).min_by_key(|&i| cycle[i]).unwrap_or(0);
                let rotated = cycle[start..].iter().chain(&cycle[..start]);
                found.insert(rotated.map(|s| s.to_string()).collect());
            } else if !done.contains(next.as_str()) {
                visit(next, graph, stack, done, found);
            }
        }
        stack.pop();
        done.insert(node);
    }
    let mut found = BTreeSet::new();
    let mut done = BTreeSet::new();
    for node in graph.keys() {
        if !done.contains(node.as_str()) {
            visit(node, graph, &mut Vec::new(), &mut done, &mut found);
        }
    }
    found.into_iter().collect()
}

// ---------------------------------------------------------------- tokens

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Token {
    Ident(String),
    /// `::`
    PathSep,
    Punct(char),
}

impl Token {
    pub(crate) fn is(&self, ident: &str) -> bool {
        matches!(self, Token::Ident(s) if s == ident)
    }
}

/// Identifiers, `::` and single punctuation characters; whitespace, comments (doc comments
/// included), string, char and number literals and lifetimes are dropped.
pub(crate) fn tokenize(text: &str) -> Vec<Token> {
    let chars: Vec<char> = text.chars().collect();
    let at = |i: usize| chars.get(i).copied().unwrap_or('\0');
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && at(i + 1) == '/' {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && at(i + 1) == '*' {
            // Block comments nest in Rust.
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' {
            i = skip_string(&chars, i + 1);
        } else if c == '\'' {
            if at(i + 1) == '\\' {
                // An escaped char literal: '\n', '\'', '\u{..}'.
                i += 3;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if at(i + 2) == '\'' {
                i += 3;
            } else {
                // A lifetime or label.
                i += 1;
                while at(i).is_alphanumeric() || at(i) == '_' {
                    i += 1;
                }
            }
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let raw_prefix = matches!(word.as_str(), "r" | "br" | "cr");
            let mut hashes = 0;
            while at(i + hashes) == '#' {
                hashes += 1;
            }
            if raw_prefix && at(i + hashes) == '"' {
                i = skip_raw_string(&chars, i + hashes + 1, hashes);
            } else if matches!(word.as_str(), "b" | "c") && at(i) == '"' {
                i = skip_string(&chars, i + 1);
            } else if word == "b" && at(i) == '\'' {
                // A byte literal: lex it as a char literal next round.
            } else if word == "r" && hashes == 1 && (at(i + 1).is_alphabetic() || at(i + 1) == '_')
            {
                // A raw identifier (`r#type`): the identifier follows.
                i += 1;
            } else {
                tokens.push(Token::Ident(word));
            }
        } else if c.is_ascii_digit() {
            while at(i).is_alphanumeric() || at(i) == '_' {
                i += 1;
            }
        } else if c == ':' && at(i + 1) == ':' {
            tokens.push(Token::PathSep);
            i += 2;
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

/// The index after a `"…"` string whose body starts at `i`.
fn skip_string(chars: &[char], mut i: usize) -> usize {
    while i < chars.len() {
        match chars[i] {
            '\\' => i += 2,
            '"' => return i + 1,
            _ => i += 1,
        }
    }
    i
}

/// The index after a raw string with `hashes` `#`s whose body starts at `i`.
fn skip_raw_string(chars: &[char], mut i: usize, hashes: usize) -> usize {
    while i < chars.len() {
        if chars[i] == '"' && (1..=hashes).all(|k| chars.get(i + k) == Some(&'#')) {
            return i + 1 + hashes;
        }
        i += 1;
    }
    i
}

fn punct(tokens: &[Token], i: usize, c: char) -> bool {
    tokens.get(i) == Some(&Token::Punct(c))
}

/// The number of tokens of `#[cfg(test)]` (or `#![cfg(test)]` when `inner`) at `i`, if there.
fn cfg_test_at(tokens: &[Token], i: usize, inner: bool) -> Option<usize> {
    let bang = usize::from(inner);
    let matched = punct(tokens, i, '#')
        && (!inner || punct(tokens, i + 1, '!'))
        && punct(tokens, i + 1 + bang, '[')
        && tokens.get(i + 2 + bang).is_some_and(|t| t.is("cfg"))
        && punct(tokens, i + 3 + bang, '(')
        && tokens.get(i + 4 + bang).is_some_and(|t| t.is("test"))
        && punct(tokens, i + 5 + bang, ')')
        && punct(tokens, i + 6 + bang, ']');
    matched.then_some(7 + bang)
}

fn starts_with_inner_cfg_test(tokens: &[Token]) -> bool {
    cfg_test_at(tokens, 0, true).is_some()
}

/// The index after the balanced `open`…`close` group starting at `i` (which holds `open`).
fn skip_group(tokens: &[Token], mut i: usize, open: char, close: char) -> usize {
    let mut depth = 0usize;
    while i < tokens.len() {
        if punct(tokens, i, open) {
            depth += 1;
        } else if punct(tokens, i, close) {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

/// The tokens without the items marked `#[cfg(test)]`, and the names of test-only modules
/// declared as `#[cfg(test)] mod NAME;` (their code lives in a file of its own).
fn strip_test_items(tokens: &[Token]) -> (Vec<Token>, Vec<String>) {
    let mut kept = Vec::with_capacity(tokens.len());
    let mut test_modules = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Some(len) = cfg_test_at(tokens, i, false) else {
            kept.push(tokens[i].clone());
            i += 1;
            continue;
        };
        i += len;
        // Further attributes and a visibility belong to the same item.
        while punct(tokens, i, '#') && punct(tokens, i + 1, '[') {
            i = skip_group(tokens, i + 1, '[', ']');
        }
        if tokens.get(i).is_some_and(|t| t.is("pub")) {
            i += 1;
            if punct(tokens, i, '(') {
                i = skip_group(tokens, i, '(', ')');
            }
        }
        if let (Some(Token::Ident(kw)), Some(Token::Ident(name)), true) =
            (tokens.get(i), tokens.get(i + 1), punct(tokens, i + 2, ';'))
        {
            if kw == "mod" {
                test_modules.push(name.clone());
                i += 3;
                continue;
            }
        }
        // The item ends at its first `;` or its body's closing brace.
        let mut nesting = 0usize;
        while i < tokens.len() {
            match &tokens[i] {
                Token::Punct('(' | '[') => nesting += 1,
                Token::Punct(')' | ']') => nesting = nesting.saturating_sub(1),
                Token::Punct(';') if nesting == 0 => {
                    i += 1;
                    break;
                }
                Token::Punct('{') if nesting == 0 => {
                    i = skip_group(tokens, i, '{', '}');
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    (kept, test_modules)
}

/// The names a file reaches at the crate root: `crate::NAME`, `crate::{NAME, ..}` and
/// `super::…::NAME` with as many `super`s as the code is deep (`depth` is the file's module
/// depth; inline `mod x { … }` blocks add one each).
fn root_references(tokens: &[Token], depth: usize) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut braces = 0usize;
    // Brace depth inside each open inline module.
    let mut inline_modules: Vec<usize> = Vec::new();
    for i in 0..tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => {
                braces += 1;
                let opens_module =
                    i >= 2 && tokens[i - 2].is("mod") && matches!(tokens[i - 1], Token::Ident(_));
                if opens_module {
                    inline_modules.push(braces);
                }
            }
            Token::Punct('}') => {
                if inline_modules.last() == Some(&braces) {
                    inline_modules.pop();
                }
                braces = braces.saturating_sub(1);
            }
            Token::Ident(word) if i == 0 || tokens[i - 1] != Token::PathSep => {
                let after = match word.as_str() {
                    "crate" if tokens.get(i + 1) == Some(&Token::PathSep) => Some(i + 2),
                    "super" => {
                        let mut ups = 0;
                        let mut j = i;
                        while tokens.get(j).is_some_and(|t| t.is("super"))
                            && tokens.get(j + 1) == Some(&Token::PathSep)
                        {
                            ups += 1;
                            j += 2;
                        }
                        (ups > 0 && ups == depth + inline_modules.len()).then_some(j)
                    }
                    _ => None,
                };
                if let Some(at) = after {
                    names.extend(path_heads(tokens, at));
                }
            }
            _ => {}
        }
    }
    names
}

/// The first segment(s) of the path at `i`: `NAME` or the heads of a `{a, b::c}` group.
fn path_heads(tokens: &[Token], i: usize) -> Vec<String> {
    match tokens.get(i) {
        Some(Token::Ident(name)) if name != "self" => vec![name.clone()],
        Some(Token::Punct('{')) => {
            let mut heads = Vec::new();
            let mut depth = 0usize;
            let mut item_start = true;
            for token in &tokens[i + 1..] {
                match token {
                    Token::Punct('{') => depth += 1,
                    Token::Punct('}') if depth == 0 => break,
                    Token::Punct('}') => depth -= 1,
                    Token::Punct(',') if depth == 0 => {
                        item_start = true;
                        continue;
                    }
                    Token::Ident(name) if item_start && name != "self" => {
                        heads.push(name.clone());
                    }
                    _ => {}
                }
                item_start = false;
            }
            heads
        }
        _ => Vec::new(),
    }
}

/// Names the crate root imports from its modules (`pub use app::{App, Job as J};` maps `App`
/// and `J` to `app`): child modules reach them as `crate::App`.
fn root_exports(tokens: &[Token], modules: &BTreeSet<&str>) -> BTreeMap<String, String> {
    let mut exports = BTreeMap::new();
    let mut braces = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('{') => braces += 1,
            Token::Punct('}') => braces = braces.saturating_sub(1),
            Token::Ident(kw) if kw == "use" && braces == 0 => {
                let end = (i..tokens.len())
                    .find(|&j| punct(tokens, j, ';'))
                    .unwrap_or(tokens.len());
                let mut j = i + 1;
                if tokens.get(j) == Some(&Token::PathSep) {
                    j += 1;
                }
                if tokens.get(j).is_some_and(|t| t.is("crate") || t.is("self"))
                    && tokens.get(j + 1) == Some(&Token::PathSep)
                {
                    j += 2;
                }
                if let Some(Token::Ident(module)) = tokens.get(j) {
                    if modules.contains(module.as_str()) {
                        for k in j + 1..end {
                            let Token::Ident(leaf) = &tokens[k] else {
                                continue;
                            };
                            let ends_path = matches!(
                                tokens.get(k + 1),
                                Some(Token::Punct(',' | '}' | ';')) | None
                            );
                            if ends_path && leaf != "self" && leaf != "_" {
                                exports.insert(leaf.clone(), module.clone());
                            }
                        }
                    }
                }
                i = end;
            }
            _ => {}
        }
        i += 1;
    }
    exports
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph(files: &[(&str, &str)]) -> Graph {
        let files: Vec<(PathBuf, String)> = files
            .iter()
            .map(|(path, text)| (PathBuf::from(path), text.to_string()))
            .collect();
        module_graph(&files)
    }

    fn reported(files: &[(&str, &str)]) -> Vec<String> {
        find_cycles(&graph(files))
            .iter()
            .map(|c| render_cycle("demo", c))
            .collect()
    }

    #[test]
    fn a_cycle_is_found_and_printed_from_its_smallest_module() {
        let found = reported(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("c.rs", "use crate::a::Thing;"),
            (
                "a.rs",
                "pub struct Thing; fn f(other: crate::b::Other) -> crate::b::Other { other }",
            ),
            ("b.rs", "use crate::{c, std_like};"),
        ]);
        assert_eq!(found, ["demo: a -> b -> c -> a"]);
    }

    #[test]
    fn a_chain_without_a_loop_passes() {
        let files = [
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::b::X;"),
            ("b.rs", "use crate::c::Y; use super::c::Z;"),
            ("c.rs", "use std::collections::HashMap;"),
        ];
        assert!(reported(&files).is_empty());
        assert_eq!(graph(&files)["b"], BTreeSet::from(["c".to_string()]));
    }

    #[test]
    fn test_only_references_are_ignored() {
        let found = reported(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::X;"),
            (
                "b.rs",
                "pub struct X;\n#[cfg(test)]\nmod tests {\n    use crate::a;\n    fn f() { super::super::a::g(); }\n}\n\
                 #[cfg(test)]\nuse crate::a::Helper;\n#[cfg(test)]\n#[allow(dead_code)]\nmod more;\n",
            ),
            ("b/more.rs", "use crate::a::Y;"),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn comments_doc_comments_and_strings_are_ignored() {
        let found = reported(&[
            ("a.rs", "use crate::b::X;"),
            (
                "b.rs",
                "//! See [`crate::a`].\n/// Like crate::a::f.\n// crate::a\n/* crate::a /* nested */ crate::a */\n\
                 const S: &str = \"crate::a::x\"; const R: &str = r#\"crate::a\"#; const C: char = '\"';\n\
                 fn f<'a>(x: &'a str) -> &'a str { x }",
            ),
        ]);
        assert!(found.is_empty(), "{found:?}");
    }

    #[test]
    fn super_from_nested_files_and_root_re_exports_count() {
        // `a/inner.rs` reaches the root with one `super` more than `a.rs` would.
        let nested = reported(&[
            ("a/mod.rs", "mod inner;"),
            ("a/inner.rs", "use super::super::b::X; use super::sibling;"),
            ("b.rs", "mod deep { use super::super::a::Y; }"),
        ]);
        assert_eq!(nested, ["demo: a -> b -> a"]);
        // `crate::End` is `app::Ended` re-exported by lib.rs; `crate::ServerError` is the
        // root's own.
        let exported = reported(&[
            (
                "lib.rs",
                "mod app; mod turn; pub use app::{Job, Ended as End}; pub struct ServerError;",
            ),
            ("app.rs", "use crate::turn::Turn;"),
            ("turn.rs", "use crate::End; fn f(_: crate::ServerError) {}"),
        ]);
        assert_eq!(exported, ["demo: app -> turn -> app"]);
    }

    #[test]
    fn module_paths_fold_mod_rs_and_recognise_the_root() {
        let path = |p: &str| module_path(Path::new(p));
        assert_eq!(path("lib.rs"), Some(vec![]));
        assert_eq!(path("main.rs"), Some(vec![]));
        assert_eq!(path("a/mod.rs"), Some(vec!["a".to_string()]));
        assert_eq!(path("a/b.rs"), Some(vec!["a".to_string(), "b".to_string()]));
        assert_eq!(
            path("a/lib.rs"),
            Some(vec!["a".to_string(), "lib".to_string()])
        );
        assert_eq!(path("notes.txt"), None);
    }
}
