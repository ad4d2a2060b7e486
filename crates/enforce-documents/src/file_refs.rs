//! The `file_refs` validator: every path an ADR lists under `files.modify` exists below the
//! project root.
//!
//! The paths are read from the ADR front matter (found as `adr_structure` finds it); a response
//! without an ADR, or an ADR without the key, has nothing to check.
//!
//! | code | when |
//! |---|---|
//! | `FILE_NOT_FOUND` | a listed path does not exist below the root |
//! | `PATH_OUTSIDE_ROOT` | an absolute path, a `..` escape, or a symlink resolving outside the root |
//! | `INVALID_YAML` | the key holds something other than a list of paths |
//!
//! Security: the file system outside the root is never probed. Absolute paths and `..` escapes
//! are rejected without any system call, and symlinks are resolved one component at a time
//! with `readlink`, checking each target before it is followed.
//!
//! Repair: paths that do not exist are moved from `files.modify` to `files.create` by editing
//! the YAML text, so comments, key order and the rest of the document stay byte for byte.
//!
//! Early abort: once a streamed answer's front matter is closed, its paths are checked; a path
//! outside the root or a key of the wrong shape is definite and cuts the answer, a missing file
//! does not (the repair moves it).
//!
//! ```
//! use enforce_documents::file_refs::FileRefs;
//! use enforce_core::{Context, Validator};
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     let mut f = std::pin::pin!(f);
//! #     let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
//! #     loop { if let std::task::Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
//! # }
//! let v = FileRefs::new("file_refs", env!("CARGO_MANIFEST_DIR"));
//! let adr = "---\nadr_id: 1\nfiles:\n  modify:\n    - Cargo.toml  # exists\n    - src/new.rs\n    - ../../etc/passwd\n---\n";
//! let issues = block_on(v.validate(adr, &Context::new())).unwrap();
//! let codes: Vec<_> = issues.iter().map(|i| i.code.as_str()).collect();
//! assert_eq!(codes, ["FILE_NOT_FOUND", "PATH_OUTSIDE_ROOT"]);
//! let fixed = v.repair(adr, &Context::new(), &issues).unwrap();
//! assert!(fixed.contains("  modify:\n    - Cargo.toml  # exists\n    - ../../etc/passwd\n  create:\n    - src/new.rs\n"), "{fixed}");
//! ```

use crate::adr::{find_adr, FrontMatterWatch, INVALID_YAML};
use enforce_core::{async_trait, Context, Issue, PartialCheck, Validation, Validator};
use enforce_validators::text::line_of_offset;
use enforce_validators::BuildError;
use enforce_validators::FactoryInput;
use serde::Deserialize;
use std::collections::VecDeque;
use std::ffi::OsString;
use std::path::{Component, Path, PathBuf};

/// Code: a listed path does not exist.
pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
/// Code: a listed path leaves the root.
pub const PATH_OUTSIDE_ROOT: &str = "PATH_OUTSIDE_ROOT";

/// Most listed paths checked per response (each costs a few system calls).
pub const MAX_PATHS: usize = 1000;

/// Most symlinks followed while resolving one path.
const MAX_SYMLINK_HOPS: usize = 40;

/// The verdict on one listed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathCheck {
    /// The path exists below the root.
    Exists,
    /// The path does not exist (or cannot be resolved) below the root.
    NotFound,
    /// The path leaves the root; the reason says how.
    Outside(&'static str),
}

/// Splits a listed path into components, treating `\` as a separator too (models write
/// Windows paths). Returns `Err` for absolute paths.
fn components(path: &str) -> Result<Vec<&str>, &'static str> {
    let bytes = path.as_bytes();
    let drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if path.starts_with(['/', '\\']) || drive {
        return Err("it is an absolute path");
    }
    if path == "~" || path.starts_with("~/") || path.starts_with("~\\") {
        return Err("it points into a home directory");
    }
    Ok(path
        .split(['/', '\\'])
        .filter(|c| !c.is_empty() && *c != ".")
        .collect())
}

/// Lexically normalises an absolute path (`.` and `..` removed without touching the disk).
fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// Checks `listed` (relative, as written in the ADR) against `root`, which must be canonical.
/// Only paths below `root` are ever passed to the file system.
pub fn check_path(root: &Path, listed: &str) -> PathCheck {
    if listed.trim().is_empty() || listed.contains('\0') {
        return PathCheck::NotFound;
    }
    let parts = match components(listed.trim()) {
        Ok(parts) => parts,
        Err(reason) => return PathCheck::Outside(reason),
    };
    // Lexical pre-check: a `..` that climbs above the root is rejected before any probe.
    let mut depth: usize = 0;
    for p in &parts {
        if *p == ".." {
            if depth == 0 {
                return PathCheck::Outside("'..' leads out of the project root");
            }
            depth -= 1;
        } else {
            depth += 1;
        }
    }
    let mut queue: VecDeque<OsString> = parts.iter().map(OsString::from).collect();
    let mut current = root.to_path_buf();
    let mut hops = 0;
    while let Some(part) = queue.pop_front() {
        if part == ".." {
            if current == root {
                return PathCheck::Outside("'..' leads out of the project root");
            }
            current.pop();
            continue;
        }
        if part == "." || part.is_empty() {
            continue;
        }
        let next = current.join(&part);
        let meta = match std::fs::symlink_metadata(&next) {
            Ok(m) => m,
            Err(_) => return PathCheck::NotFound,
        };
        if !meta.file_type().is_symlink() {
            current = next;
            continue;
        }
        hops += 1;
        if hops > MAX_SYMLINK_HOPS {
            return PathCheck::NotFound;
        }
        let Ok(target) = std::fs::read_link(&next) else {
            return PathCheck::NotFound;
        };
        let rest: Vec<OsString> = if target.is_absolute() {
            let target = normalize(&target);
            let Ok(inside) = target.strip_prefix(root) else {
                return PathCheck::Outside("a symlink resolves outside the project root");
            };
            current = root.to_path_buf();
            inside
                .components()
                .map(|c| c.as_os_str().to_owned())
                .collect()
        } else {
            target
                .components()
                .filter_map(|c| match c {
                    Component::Normal(s) => Some(s.to_owned()),
                    Component::ParentDir => Some(OsString::from("..")),
                    _ => None,
                })
                .collect()
        };
        for c in rest.into_iter().rev() {
            queue.push_front(c);
        }
        // A relative target that climbs out is caught by the `..` rule above.
    }
    PathCheck::Exists
}

/// Options of the `file_refs` validator.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(feature = "config-schema", schemars(rename = "FileRefsOptions"))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRefsConfig {
    /// Dotted front matter key listing the paths to check.
    #[serde(default = "default_key")]
    key: String,
    /// Dotted front matter key the repair moves missing paths to.
    #[serde(default = "default_create_key")]
    create_key: String,
    /// Directory the paths must exist below, relative to the configuration file (default its
    /// directory; `--root` wins).
    root: Option<PathBuf>,
}

fn default_key() -> String {
    "files.modify".into()
}

fn default_create_key() -> String {
    "files.create".into()
}

/// The `file_refs` validator. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct FileRefs {
    name: String,
    root: PathBuf,
    /// `root` resolved once at build time (`None` when it did not resolve then).
    canonical_root: Option<PathBuf>,
    key: Vec<String>,
    create_key: Vec<String>,
}

impl FileRefs {
    /// Checks `files.modify` against `root`.
    pub fn new(name: impl Into<String>, root: impl Into<PathBuf>) -> Self {
        let root: PathBuf = root.into();
        FileRefs {
            name: name.into(),
            canonical_root: root.canonicalize().ok(),
            root,
            key: split_key(&default_key()),
            create_key: split_key(&default_create_key()),
        }
    }

    /// The dotted front-matter keys of the list to check (default `files.modify`) and of the
    /// list the repair moves missing paths to (default `files.create`); fails on an empty key.
    pub fn keys(mut self, key: &str, create_key: &str) -> Result<Self, BuildError> {
        for (k, v) in [("key", key), ("create_key", create_key)] {
            if split_key(v).is_empty() {
                return Err(BuildError::at(k, "the key is empty"));
            }
        }
        self.key = split_key(key);
        self.create_key = split_key(create_key);
        Ok(self)
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <FileRefsConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration: `key` (dotted, default `files.modify`), `create_key`
    /// (default `files.create`), `root` (relative to the configuration file; default its
    /// directory). A root given by the user (`--root`) wins. A missing root is an error.
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: FileRefsConfig = input.parse()?;
        let (root, key) = match (input.root, &c.root) {
            (Some(r), _) => (r.to_path_buf(), "root"),
            (None, Some(r)) => (input.resolve(r), "root"),
            (None, None) => (input.base_dir.to_path_buf(), ""),
        };
        if !root.is_dir() {
            return Err(BuildError::at(
                key,
                format!("the root {} is not a directory", root.display()),
            ));
        }
        FileRefs::new(input.name, root).keys(&c.key, &c.create_key)
    }

    fn key_text(&self) -> String {
        self.key.join(".")
    }

    /// The listed paths with their verdicts, or an issue when the key holds no list.
    fn check(&self, response: &str) -> Result<Vec<(String, u32, PathCheck)>, Issue> {
        let Some(fm) = find_adr(response) else {
            return Ok(Vec::new());
        };
        let yaml = fm.yaml_text(response);
        if !fm.closed
            || yaml.len() > crate::adr::MAX_FRONT_MATTER_BYTES
            || enforce_validators::text::yaml_flow_depth_exceeded(
                yaml,
                enforce_validators::text::MAX_YAML_FLOW_DEPTH,
            )
            .is_some()
        {
            return Ok(Vec::new());
        }
        let Ok(doc) = crate::adr::parse_front_matter(yaml) else {
            return Ok(Vec::new()); // adr_structure reports INVALID_YAML
        };
        let mut node: &serde_yaml_ng::Value = &doc;
        for seg in &self.key {
            match node.get(seg.as_str()) {
                Some(n) => node = n,
                None => return Ok(Vec::new()),
            }
        }
        let bad_shape = |what: &str| {
            Issue::error(
                &self.name,
                INVALID_YAML,
                format!(
                    "'{}' must be a list of paths, found {what}.",
                    self.key_text()
                ),
            )
            .with_hint(format!(
                "Write `{}` as a YAML list: one `- path` per line.",
                self.key_text()
            ))
            .at_line(fm.open_line)
        };
        let items = match node {
            serde_yaml_ng::Value::Null => return Ok(Vec::new()),
            serde_yaml_ng::Value::Sequence(items) => items,
            serde_yaml_ng::Value::String(_) => return Err(bad_shape("a single string")),
            serde_yaml_ng::Value::Mapping(_) => return Err(bad_shape("a mapping")),
            _ => return Err(bad_shape("a scalar")),
        };
        let root = match &self.canonical_root {
            Some(r) => std::borrow::Cow::Borrowed(r),
            None => std::borrow::Cow::Owned(
                self.root
                    .canonicalize()
                    .unwrap_or_else(|_| self.root.clone()),
            ),
        };
        let mut out = Vec::new();
        // Paths are listed in order: search each one from where the previous one was found,
        // and count lines incrementally, so long lists stay linear.
        let base_line = line_of_offset(response, fm.yaml.start);
        let mut lines = enforce_validators::text::LineCounter::new(yaml);
        let mut cursor = 0;
        for item in items.iter().take(MAX_PATHS) {
            let Some(path) = item.as_str() else {
                return Err(bad_shape("an entry that is not a path"));
            };
            let found = (!path.is_empty())
                .then(|| memchr::memmem::find(&yaml.as_bytes()[cursor..], path.as_bytes()))
                .flatten()
                .map(|p| cursor + p);
            let line = match found {
                Some(p) => {
                    cursor = p + path.len();
                    base_line + lines.line_of(p) - 1
                }
                None => fm.open_line,
            };
            out.push((path.to_string(), line, check_path(&root, path)));
        }
        Ok(out)
    }
}

fn split_key(key: &str) -> Vec<String> {
    key.split('.')
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The partial check of [`FileRefs`]: the listed paths, once the front matter is closed.
struct FileRefsCheck<'a> {
    validator: &'a FileRefs,
    context: &'a Context,
    watch: FrontMatterWatch,
    judged: Option<Vec<Issue>>,
}

#[async_trait]
impl PartialCheck for FileRefsCheck<'_> {
    async fn check(&mut self, prefix: &str) -> Vec<Issue> {
        if self.judged.is_none() && self.watch.feed(prefix).is_some() {
            let verdict = self.validator.validate(prefix, self.context).await;
            self.judged = Some(verdict.unwrap_or_default());
        }
        self.judged.clone().unwrap_or_default()
    }
}

#[async_trait]
impl Validator for FileRefs {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, _context: &Context) -> Validation {
        let checked = match self.check(response) {
            Ok(c) => c,
            Err(issue) => return Ok(vec![issue]),
        };
        let mut issues = Vec::new();
        for (path, line, verdict) in checked {
            match verdict {
                PathCheck::Exists => {}
                PathCheck::NotFound => issues.push(
                    Issue::error(
                        &self.name,
                        FILE_NOT_FOUND,
                        format!(
                            "'{path}' (listed under {}) does not exist in the project.",
                            self.key_text()
                        ),
                    )
                    .with_hint(format!(
                        "List only existing files under {}; move new files to {}.",
                        self.key_text(),
                        self.create_key.join(".")
                    ))
                    .at_line(line),
                ),
                PathCheck::Outside(reason) => issues.push(
                    Issue::error(
                        &self.name,
                        PATH_OUTSIDE_ROOT,
                        format!("'{path}' is outside the project root: {reason}."),
                    )
                    .with_hint("Use paths relative to the project root, without '..'.")
                    .at_line(line),
                ),
            }
        }
        Ok(issues)
    }

    fn partial_check<'a>(&'a self, context: &'a Context) -> Option<Box<dyn PartialCheck + 'a>> {
        Some(Box::new(FileRefsCheck {
            validator: self,
            context,
            watch: FrontMatterWatch::default(),
            judged: None,
        }))
    }

    fn repair_fixes(&self, issue: &Issue) -> bool {
        issue.code == FILE_NOT_FOUND
    }

    fn repair(&self, response: &str, _context: &Context, _issues: &[Issue]) -> Option<String> {
        let checked = self.check(response).ok()?;
        let missing: Vec<&str> = checked
            .iter()
            .filter(|(_, _, v)| *v == PathCheck::NotFound)
            .map(|(p, _, _)| p.as_str())
            .collect();
        if missing.is_empty() {
            return None;
        }
        let fm = find_adr(response)?;
        let yaml = fm.yaml_text(response);
        let edited = crate::yaml_edit::move_items(yaml, &self.key, &self.create_key, &missing)?;
        // The edit must leave valid YAML that lists the paths where they belong.
        let doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(&edited).ok()?;
        let mut node = &doc;
        for seg in &self.create_key {
            node = node.get(seg.as_str())?;
        }
        let created = node.as_sequence()?;
        if !missing
            .iter()
            .all(|m| created.iter().any(|c| c.as_str() == Some(m)))
        {
            return None;
        }
        let mut out = String::with_capacity(response.len() + 32);
        out.push_str(&response[..fm.yaml.start]);
        out.push_str(&edited);
        out.push_str(&response[fm.yaml.end..]);
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{block_on, TempDir};

    fn project() -> TempDir {
        let dir = TempDir::new("file-refs");
        std::fs::create_dir_all(dir.path().join("src/core")).unwrap();
        std::fs::write(dir.path().join("src/core/lib.rs"), "").unwrap();
        std::fs::write(dir.path().join("README.md"), "").unwrap();
        dir
    }

    fn adr(list: &str) -> String {
        format!(
            "Here you go:\n---\nadr_id: 3\ntitle: T\nfiles:\n  modify:{list}\n---\n## Kontext\n"
        )
    }

    fn codes(v: &FileRefs, text: &str) -> Vec<String> {
        block_on(v.validate(text, &Context::new()))
            .unwrap()
            .into_iter()
            .map(|i| i.code)
            .collect()
    }

    #[test]
    fn existing_paths_pass_and_missing_ones_fail_with_their_line() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path());
        assert!(codes(
            &v,
            &adr("\n    - src/core/lib.rs\n    - ./README.md\n    - src\\core\\lib.rs")
        )
        .is_empty());
        let text = adr("\n    - src/core/lib.rs\n    - src/missing.rs");
        let issues = block_on(v.validate(&text, &Context::new())).unwrap();
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].code, FILE_NOT_FOUND);
        assert_eq!(issues[0].line, Some(8));
        assert!(codes(&v, "no adr here").is_empty());
        assert!(codes(&v, "---\nadr_id: 1\n---\n").is_empty());
    }

    #[test]
    fn escapes_and_absolute_paths_are_outside() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path());
        let root = dir.path().canonicalize().unwrap();
        for p in [
            "/etc/passwd",
            "../secret",
            "src/../../x",
            "C:\\Windows",
            "\\\\server\\share",
            "~/x",
        ] {
            assert!(matches!(check_path(&root, p), PathCheck::Outside(_)), "{p}");
            assert_eq!(
                codes(&v, &adr(&format!("\n    - '{p}'"))),
                vec![PATH_OUTSIDE_ROOT],
                "{p}"
            );
        }
        // `..` that stays inside is fine.
        assert!(codes(&v, &adr("\n    - src/core/../core/lib.rs")).is_empty());
    }

    #[cfg(unix)]
    #[test]
    fn symlinks_are_followed_only_inside_the_root() {
        let dir = project();
        let outside = TempDir::new("file-refs-outside");
        std::fs::write(outside.path().join("secret.txt"), "").unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join("escape")).unwrap();
        std::os::unix::fs::symlink("../..", dir.path().join("src/up")).unwrap();
        std::os::unix::fs::symlink("core", dir.path().join("src/alias")).unwrap();
        std::os::unix::fs::symlink(
            dir.path().canonicalize().unwrap().join("README.md"),
            dir.path().join("abs-inside"),
        )
        .unwrap();
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        let root = dir.path().canonicalize().unwrap();
        assert!(matches!(
            check_path(&root, "escape/secret.txt"),
            PathCheck::Outside(_)
        ));
        assert!(matches!(
            check_path(&root, "src/up/x"),
            PathCheck::Outside(_)
        ));
        assert_eq!(check_path(&root, "src/alias/lib.rs"), PathCheck::Exists);
        assert_eq!(check_path(&root, "abs-inside"), PathCheck::Exists);
        assert_eq!(check_path(&root, "loop"), PathCheck::NotFound);
        assert_eq!(check_path(&root, "README.md/x"), PathCheck::NotFound);
    }

    #[test]
    fn a_value_that_is_not_a_list_is_an_issue() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path());
        assert_eq!(codes(&v, &adr(" src/core/lib.rs")), vec![INVALID_YAML]);
        assert_eq!(codes(&v, &adr("\n    a: b")), vec![INVALID_YAML]);
        assert_eq!(codes(&v, &adr(" 3")), vec![INVALID_YAML]);
        assert_eq!(codes(&v, &adr("\n    - [nested]")), vec![INVALID_YAML]);
        assert!(codes(&v, &adr("")).is_empty());
        assert!(codes(&v, &adr(" []")).is_empty());
    }

    #[test]
    fn repair_moves_missing_paths_and_keeps_everything_else() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path());
        let text = "Intro\r\n---\r\nadr_id: 3 # the id\r\nfiles:\r\n  # what changes\r\n  modify:\r\n    - src/core/lib.rs   # keep\r\n    - src/new.rs\r\n  create:\r\n    - docs/x.md\r\nstatus: Proposed\r\n---\r\n## Kontext\r\n";
        let issues = block_on(v.validate(text, &Context::new())).unwrap();
        let fixed = v.repair(text, &Context::new(), &issues).unwrap();
        assert_eq!(
            fixed,
            "Intro\r\n---\r\nadr_id: 3 # the id\r\nfiles:\r\n  # what changes\r\n  modify:\r\n    - src/core/lib.rs   # keep\r\n  create:\r\n    - docs/x.md\r\n    - src/new.rs\r\nstatus: Proposed\r\n---\r\n## Kontext\r\n"
        );
        assert!(codes(&v, &fixed).is_empty());
    }

    #[test]
    fn repair_handles_flow_lists_and_emptied_lists() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path());
        let text = "---\nadr_id: 3\nfiles:\n  modify: [src/a.rs, 'src/b.rs']\n  other: 1\n---\n";
        let fixed = v.repair(text, &Context::new(), &[]).unwrap();
        assert_eq!(fixed, "---\nadr_id: 3\nfiles:\n  modify: []\n  create:\n    - src/a.rs\n    - src/b.rs\n  other: 1\n---\n");
        assert!(codes(&v, &fixed).is_empty());
        let text = "---\nadr_id: 3\nfiles:\n  modify:\n  - gone.rs\n---\n";
        let fixed = v.repair(text, &Context::new(), &[]).unwrap();
        assert_eq!(
            fixed,
            "---\nadr_id: 3\nfiles:\n  modify: []\n  create:\n  - gone.rs\n---\n"
        );
    }

    #[test]
    fn other_keys_are_checked_and_repaired_and_empty_keys_refused() {
        let dir = project();
        let v = FileRefs::new("file_refs", dir.path())
            .keys("changes.touch", "changes.add")
            .unwrap();
        let text = "---\nadr_id: 3\nchanges:\n  touch:\n    - README.md\n    - gone.rs\n---\n";
        let issues = block_on(v.validate(text, &Context::new())).unwrap();
        assert_eq!(issues.len(), 1);
        assert!(issues[0].message.contains("gone.rs"), "{issues:?}");
        let fixed = v.repair(text, &Context::new(), &issues).unwrap();
        assert_eq!(
            fixed,
            "---\nadr_id: 3\nchanges:\n  touch:\n    - README.md\n  add:\n    - gone.rs\n---\n"
        );
        assert_eq!(
            FileRefs::new("f", dir.path())
                .keys("", "x")
                .unwrap_err()
                .key,
            "key"
        );
        assert_eq!(
            FileRefs::new("f", dir.path())
                .keys("a", "")
                .unwrap_err()
                .key,
            "create_key"
        );
    }
}
