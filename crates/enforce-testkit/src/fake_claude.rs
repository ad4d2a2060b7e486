//! Finding and scripting the `fake-claude` executable.

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A fresh directory under the system temp dir, removed (with its contents) when dropped.
#[derive(Debug)]
pub struct ScratchDir {
    path: PathBuf,
}

impl ScratchDir {
    /// Creates a new, empty directory whose name starts with `prefix`.
    pub fn new(prefix: &str) -> std::io::Result<Self> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let path = std::env::temp_dir().join(format!(
            "{prefix}-{}-{}-{nanos}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path)?;
        Ok(ScratchDir { path })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        // Best effort: a leftover temp dir is harmless.
        let _ignored = std::fs::remove_dir_all(&self.path);
    }
}

/// The `fake-claude` executable.
///
/// Looked up, in order: the `ENFORCE_FAKE_CLAUDE` variable; next to the running test binary
/// (`target/<profile>/`, where `cargo test --workspace` puts it); otherwise it is built with
/// `cargo build -p enforce-fake-claude` into `target/enforce-testkit/` (a target dir of its own,
/// so the build does not wait on the lock of the `cargo test` that runs us).
pub fn fake_claude_path() -> Result<PathBuf, String> {
    if let Some(path) = std::env::var_os("ENFORCE_FAKE_CLAUDE") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe().map_err(|e| format!("cannot find the test binary: {e}"))?;
    let mut dirs = Vec::new();
    if let Some(dir) = exe.parent() {
        dirs.push(dir.to_path_buf());
        if let Some(up) = dir.parent() {
            dirs.push(up.to_path_buf());
        }
    }
    for dir in &dirs {
        let candidate = dir.join("fake-claude");
        if candidate.is_file() {
            return Ok(candidate);
        }
    }
    // target/<profile>/deps/test-bin -> target/
    let target = dirs
        .get(1)
        .and_then(|profile| profile.parent())
        .ok_or_else(|| format!("unexpected test binary location {}", exe.display()))?;
    let own_target = target.join("enforce-testkit");
    let built = own_target.join("debug").join("fake-claude");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "enforce-fake-claude",
            "--target-dir",
        ])
        .arg(&own_target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .map_err(|e| format!("cannot run cargo to build fake-claude: {e}"))?;
    if !status.success() || !built.is_file() {
        return Err(format!("building fake-claude failed ({status})"));
    }
    Ok(built)
}

/// One call the fake CLI received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeClaudeCall {
    /// Its arguments.
    pub args: Vec<String>,
    /// Its stdin (the prompt or the feedback).
    pub stdin: String,
    /// Its process id.
    pub pid: u32,
    /// The child it started (hang steps with `"child": true`).
    pub child_pid: Option<u32>,
}

impl FakeClaudeCall {
    /// The value after `flag`, e.g. `value_of("--resume")`.
    pub fn value_of(&self, flag: &str) -> Option<&str> {
        self.args
            .iter()
            .position(|a| a == flag)
            .and_then(|i| self.args.get(i + 1))
            .map(String::as_str)
    }

    /// The session id given with `--resume`.
    pub fn resume_id(&self) -> Option<&str> {
        self.value_of("--resume")
    }
}

/// A scripted `fake-claude`: the executable, a script of steps (one per call, the last
/// repeats) and the record of calls, in a scratch directory.
///
/// ```no_run
/// use enforce_testkit::FakeClaude;
/// use serde_json::json;
///
/// let fake = FakeClaude::new(json!([
///     {"kind": "success", "result": "draft", "session_id": "s-1"},
///     {"kind": "error", "subtype": "error_max_turns", "errors": ["Reached max turns"]},
/// ])).unwrap();
/// // Run fake.binary() with fake.env(), then:
/// assert!(fake.calls().is_empty());
/// ```
#[derive(Debug)]
pub struct FakeClaude {
    dir: ScratchDir,
    binary: PathBuf,
}

impl FakeClaude {
    /// Writes `steps` (a JSON array, see `enforce-fake-claude`) as the script.
    pub fn new(steps: Value) -> Result<Self, String> {
        let binary = fake_claude_path()?;
        let dir = ScratchDir::new("fake-claude").map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join("script.json"), steps.to_string())
            .map_err(|e| e.to_string())?;
        Ok(FakeClaude { dir, binary })
    }

    /// The executable.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The scratch directory (script, record, and room for the test's own files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The environment the executable needs: `FAKE_CLAUDE_SCRIPT` and `FAKE_CLAUDE_RECORD`.
    pub fn env(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                "FAKE_CLAUDE_SCRIPT".to_string(),
                self.dir.path().join("script.json").display().to_string(),
            ),
            (
                "FAKE_CLAUDE_RECORD".to_string(),
                self.dir.path().join("calls.jsonl").display().to_string(),
            ),
        ])
    }

    /// The calls interrupted by SIGINT while they streamed: (pid, chunks of text sent).
    pub fn interrupted(&self) -> Vec<(u32, u64)> {
        let path = self.dir.path().join("calls.jsonl.interrupted");
        let text = std::fs::read_to_string(path).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|v| {
                let field = |k: &str| v.get(k).and_then(Value::as_u64).unwrap_or(0);
                (
                    u32::try_from(field("pid")).unwrap_or(0),
                    field("chunks_sent"),
                )
            })
            .collect()
    }

    /// Every call recorded so far, in order.
    pub fn calls(&self) -> Vec<FakeClaudeCall> {
        let text = std::fs::read_to_string(self.dir.path().join("calls.jsonl")).unwrap_or_default();
        text.lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .map(|v| FakeClaudeCall {
                args: v
                    .get("args")
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_string)
                            .collect()
                    })
                    .unwrap_or_default(),
                stdin: v
                    .get("stdin")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                pid: v
                    .get("pid")
                    .and_then(Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok())
                    .unwrap_or(0),
                child_pid: v
                    .get("child_pid")
                    .and_then(Value::as_u64)
                    .and_then(|p| u32::try_from(p).ok()),
            })
            .collect()
    }
}

/// `true` when process `pid` no longer runs: it is gone, or a zombie waiting to be reaped by
/// whoever inherited it (Linux `/proc`).
pub fn process_is_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // The state follows the command name in parentheses, which may itself hold spaces.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}
