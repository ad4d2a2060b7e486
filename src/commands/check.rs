//! `enforce check`: validate files (or stdin) against a profile without a model, report like a
//! compiler, and optionally apply the deterministic repairs.
//!
//! Exit codes: 0 every input passed (warnings allowed; with `--fix`, repaired counts as
//! passed), 1 any input failed, 2 usage, configuration or read error.

use crate::commands::Format;
use crate::config::LoadedConfig;
use annotate_snippets::{Level, Renderer, Snippet};
use enforce_config::ProfileSet;
use enforce_core::{Check, Context, Issue, Outcome, Severity, Status};
use enforce_eval::atomic::write_atomically;
use serde_json::{json, Value};
use std::io::{IsTerminal, Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Largest input read (a larger one is a read error, not an out-of-memory).
const MAX_INPUT_BYTES: u64 = 256 * 1024 * 1024;

/// Arguments of `enforce check`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Configuration file [default: ./enforce.yaml when it exists, else built-in profiles].
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Profile to check against [default: the configuration's default, else `chat`].
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Project root that file references must stay below [default: the configured root, else
    /// the current directory].
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Request context for the validators, e.g. `--context company_name=ACME` (repeatable).
    #[arg(long = "context", value_name = "KEY=VALUE", value_parser = parse_context)]
    pub context: Vec<(String, String)>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Apply the repairs and print the repaired text (diagnostics go to stderr in text format).
    #[arg(long)]
    pub fix: bool,
    /// With --fix: replace each repaired file in place, atomically (a symlink's target, not the
    /// link).
    #[arg(long, requires = "fix")]
    pub write: bool,
    /// Files to check (regular files up to 256 MiB; a FIFO or device is refused); `-` reads
    /// standard input.
    #[arg(required = true, value_name = "FILE")]
    pub inputs: Vec<String>,
}

fn parse_context(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("expected KEY=VALUE, got '{s}'")),
    }
}

/// The result of one input.
struct Checked {
    source: String,
    text: String,
    outcome: Outcome,
    /// Per issue of [`issues`](Self::issues): a validator's deterministic repair fixes it.
    repair_fixes: Vec<bool>,
}

impl Checked {
    fn status(&self) -> &'static str {
        match self.outcome.status {
            Status::Passed => "passed",
            Status::Repaired => "repaired",
            _ => "failed",
        }
    }

    /// Every issue found in the input as given (for `repaired`, what the repairs fixed), plus
    /// a failing validator that gave no verdict.
    fn issues(&self) -> Vec<Issue> {
        let mut issues = self
            .outcome
            .attempts
            .first()
            .map(|a| a.issues.clone())
            .unwrap_or_default();
        if let Some(u) = self.outcome.unavailable() {
            issues.push(Issue::error(
                u.validator.clone(),
                enforce_core::validator::VALIDATOR_UNAVAILABLE,
                format!("The validator gave no verdict: {}", u.reason),
            ));
        }
        issues
    }

    fn repaired(&self) -> Option<&str> {
        (self.outcome.status == Status::Repaired)
            .then_some(self.outcome.response.as_deref())
            .flatten()
    }
}

/// Runs `enforce check`.
pub fn run(args: Args) -> ExitCode {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| run_inner(args))) {
        Ok(Ok(code)) => code,
        Ok(Err(message)) => {
            eprintln!("error: {message}");
            ExitCode::from(2)
        }
        Err(_) => {
            eprintln!("error: internal error while checking (this is a bug in enforce)");
            ExitCode::from(2)
        }
    }
}

/// The exit code of the check, or the message of an error that stops it before (exit 2).
fn run_inner(args: Args) -> Result<ExitCode, String> {
    if args.write && args.inputs.iter().any(|i| i == "-") {
        return Err("--write cannot replace standard input; name files instead of '-'".into());
    }
    if args.inputs.iter().filter(|i| *i == "-").count() > 1 {
        return Err("standard input ('-') can be read only once".into());
    }
    let profiles = load_profiles(&args)?;
    let profile_name = args
        .profile
        .clone()
        .unwrap_or_else(|| profiles.default_name().to_string());
    let Some(profile) = profiles.get(&profile_name) else {
        let names = profiles.names().collect::<Vec<_>>().join(", ");
        return Err(format!(
            "no profile named '{profile_name}' (profiles: {names})"
        ));
    };
    let enforcer = profile.enforcer();
    let check_mode = if args.fix {
        Check::Repair
    } else {
        Check::Report
    };
    let mut context = Context::new();
    for (k, v) in &args.context {
        context.insert(k.clone(), v.clone());
    }
    let runtime = super::current_thread_runtime()?;

    let mut results = Vec::new();
    let mut read_failed = false;
    for input in &args.inputs {
        let text = match read_input(input) {
            Ok(t) => t,
            Err(message) => {
                eprintln!("error: {message}");
                read_failed = true;
                continue;
            }
        };
        let outcome = runtime.block_on(enforcer.check(&text, &context, check_mode));
        let mut checked = Checked {
            source: input.clone(),
            text,
            outcome,
            repair_fixes: Vec::new(),
        };
        checked.repair_fixes = checked
            .issues()
            .iter()
            .map(|i| enforcer.repair_fixes(i))
            .collect();
        results.push(checked);
    }

    let mut write_failed = false;
    if args.write {
        for r in &results {
            if let Some(repaired) = r.repaired() {
                if let Err(e) = write_atomically(Path::new(&r.source), repaired) {
                    eprintln!("error: cannot write {}: {e}", r.source);
                    write_failed = true;
                }
            }
        }
    }

    let printed = match args.format {
        Format::Json => print_json(&results, args.fix),
        Format::Text => print_text(&results, &args),
    };
    let done = if read_failed || write_failed {
        ExitCode::from(2)
    } else if results.iter().all(|r| r.status() != "failed") {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    };
    Ok(super::after_printing(printed, "report", done))
}

fn load_profiles(args: &Args) -> Result<ProfileSet, String> {
    if let Some(root) = &args.root {
        if !root.is_dir() {
            return Err(format!("--root {} is not a directory", root.display()));
        }
    }
    let loaded = LoadedConfig::load(args.config.as_deref()).map_err(|e| e.to_string())?;
    let (registry, _plugins) = crate::plugin_host::registry_with_plugins(&loaded);
    loaded
        .profiles(&registry, args.root.clone())
        .map_err(|e| e.to_string())
}

fn read_input(input: &str) -> Result<String, String> {
    let mut bytes = Vec::new();
    let name = if input == "-" { "<stdin>" } else { input };
    let too_large = || format!("{name} is larger than {} MiB", MAX_INPUT_BYTES >> 20);
    let result = if input == "-" {
        std::io::stdin()
            .lock()
            .take(MAX_INPUT_BYTES + 1)
            .read_to_end(&mut bytes)
    } else {
        let file = open_regular_file(input)?;
        if file.size > MAX_INPUT_BYTES {
            return Err(too_large());
        }
        file.file.take(MAX_INPUT_BYTES + 1).read_to_end(&mut bytes)
    };
    result.map_err(|e| format!("cannot read {name}: {e}"))?;
    if bytes.len() as u64 > MAX_INPUT_BYTES {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|e| {
        let offset = e.utf8_error().valid_up_to();
        format!("{name} is not valid UTF-8 (invalid byte at offset {offset})")
    })
}

/// An opened input file and its size.
struct RegularFile {
    file: std::fs::File,
    size: u64,
}

/// Opens `path` when it is a regular file (symlinks followed). Anything else is refused before
/// it is opened: opening a FIFO waits for a writer forever, and a device such as `/dev/zero`
/// never ends.
fn open_regular_file(path: &str) -> Result<RegularFile, String> {
    let kind = |meta: &std::fs::Metadata| {
        let kind = meta.file_type();
        if kind.is_file() {
            return None;
        }
        Some(if kind.is_dir() {
            "a directory"
        } else {
            special_file_kind(&kind)
        })
    };
    let refuse =
        |what: &str| format!("{path} is {what}, not a regular file; pipe it in with '-' instead");
    let cannot_read = |e: std::io::Error| format!("cannot read {path}: {e}");
    let meta = std::fs::metadata(path).map_err(cannot_read)?;
    if let Some(what) = kind(&meta) {
        return Err(refuse(what));
    }
    let file = std::fs::File::open(path).map_err(cannot_read)?;
    // What was opened is what counts: the path may have been replaced in between.
    let meta = file.metadata().map_err(cannot_read)?;
    if let Some(what) = kind(&meta) {
        return Err(refuse(what));
    }
    Ok(RegularFile {
        file,
        size: meta.len(),
    })
}

#[cfg(unix)]
fn special_file_kind(kind: &std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a special file"
    }
}

#[cfg(not(unix))]
fn special_file_kind(_: &std::fs::FileType) -> &'static str {
    "a special file"
}

/// One issue as JSON. `repairable` is the issue's own flag ("asking the model again may fix
/// it"; `false` is a hard abort); `repair_fixes` says whether a deterministic repair fixes it.
fn issue_json(issue: &Issue, repair_fixes: bool) -> Value {
    json!({
        "validator": issue.validator,
        "code": issue.code,
        "severity": issue.severity.as_str(),
        "message": issue.message,
        "hint": issue.hint,
        "line": issue.line,
        "repairable": issue.repairable,
        "repair_fixes": repair_fixes,
    })
}

fn print_json(results: &[Checked], fix: bool) -> std::io::Result<()> {
    let items: Vec<Value> = results
        .iter()
        .map(|r| {
            let mut item = json!({
                "source": r.source,
                "status": r.status(),
                "issues": r
                    .issues()
                    .iter()
                    .enumerate()
                    .map(|(i, issue)| issue_json(issue, r.repair_fixes.get(i).copied().unwrap_or(false)))
                    .collect::<Vec<_>>(),
            });
            if fix {
                item["repaired"] = r
                    .repaired()
                    .map_or(Value::Null, |t| Value::String(t.to_string()));
            }
            item
        })
        .collect();
    let doc = json!({ "results": items });
    let mut out = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut out, &doc)?;
    writeln!(out)?;
    out.flush()
}

/// Whether to colour output written to a stream.
fn use_colour(is_terminal: bool) -> bool {
    is_terminal && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// The line `line` (1-based) of `text` with its byte offset, without the newline.
fn source_line(text: &str, line: u32) -> Option<(usize, &str)> {
    let idx = usize::try_from(line.checked_sub(1)?).ok()?;
    let mut offset = 0;
    for (i, l) in text.split_inclusive('\n').enumerate() {
        if i == idx {
            return Some((offset, l.trim_end_matches(['\n', '\r'])));
        }
        offset += l.len();
    }
    None
}

/// Byte range to underline in `line_text`: from the column to the end of that word, or the
/// line's non-blank part.
fn underline(line_text: &str, column: Option<u32>) -> std::ops::Range<usize> {
    let start = match column {
        Some(c) if c > 1 => line_text
            .char_indices()
            .nth(usize::try_from(c - 1).unwrap_or(0))
            .map_or(line_text.len(), |(i, _)| i),
        _ => line_text.len() - line_text.trim_start().len(),
    };
    let end = if column.is_some_and(|c| c > 1) {
        line_text[start..]
            .find(char::is_whitespace)
            .map_or(line_text.len(), |e| start + e)
    } else {
        line_text.trim_end().len()
    };
    if end > start {
        start..end
    } else {
        start..(start + line_text[start..].chars().next().map_or(0, char::len_utf8))
    }
}

fn render_issue(r: &Checked, issue: &Issue, colour: bool) -> String {
    let (sev, paint) = match issue.severity {
        Severity::Error => ("error", "\x1b[1;31m"),
        Severity::Warning => ("warning", "\x1b[1;33m"),
    };
    let location = match issue.line {
        Some(l) => format!("{}:{l}", r.source),
        None => r.source.clone(),
    };
    let head = if colour {
        format!(
            "\x1b[1m{location}:\x1b[0m {paint}{sev}[{}]\x1b[0m\x1b[1m {}\x1b[0m",
            issue.code, issue.message
        )
    } else {
        format!("{location}: {sev}[{}] {}", issue.code, issue.message)
    };
    let mut out = head;
    out.push('\n');
    let snippet_line = issue
        .line
        .and_then(|l| source_line(&r.text, l).map(|(_, t)| (l, t)));
    match snippet_line {
        Some((line, text)) => {
            let renderer = if colour {
                Renderer::styled()
            } else {
                Renderer::plain()
            };
            let title = issue.hint.as_deref().unwrap_or("here");
            let level = if issue.hint.is_some() {
                Level::Help
            } else {
                Level::Note
            };
            let label_level = match issue.severity {
                Severity::Error => Level::Error,
                Severity::Warning => Level::Warning,
            };
            let origin = r.source.as_str();
            let message = level.title(title).snippet(
                Snippet::source(text)
                    .line_start(usize::try_from(line).unwrap_or(1))
                    .origin(origin)
                    .annotation(
                        label_level
                            .span(underline(text, issue.column))
                            .label(&issue.code),
                    ),
            );
            out.push_str(&renderer.render(message).to_string());
            out.push('\n');
        }
        None => {
            if let Some(hint) = &issue.hint {
                out.push_str(&format!("  = help: {hint}\n"));
            }
        }
    }
    out
}

fn print_text(results: &[Checked], args: &Args) -> std::io::Result<()> {
    // With --fix (and no --write) stdout carries the repaired text, so diagnostics go to stderr.
    let to_stderr = args.fix && !args.write;
    let colour = if to_stderr {
        use_colour(std::io::stderr().is_terminal())
    } else {
        use_colour(std::io::stdout().is_terminal())
    };
    let mut report = String::new();
    for r in results {
        let issues = r.issues();
        for issue in &issues {
            report.push_str(&render_issue(r, issue, colour));
            report.push('\n');
        }
        let errors = issues.iter().filter(|i| i.is_error()).count();
        let warnings = issues.len() - errors;
        let mut summary = format!("{}: {}", r.source, r.status());
        if r.status() == "repaired" {
            summary.push_str(&format!(" ({errors} error(s) fixed"));
            if let Some(a) = r.outcome.attempts.first() {
                if !a.repairs.is_empty() {
                    summary.push_str(&format!(" by {}", a.repairs.join(", ")));
                }
            }
            summary.push_str(if args.write { ", file written)" } else { ")" });
        } else if errors + warnings > 0 {
            summary.push_str(&format!(" ({errors} error(s), {warnings} warning(s))"));
        }
        report.push_str(&summary);
        report.push('\n');
    }
    if to_stderr {
        let mut err = std::io::stderr().lock();
        err.write_all(report.as_bytes())?;
        let mut out = std::io::stdout().lock();
        for r in results {
            if let Some(repaired) = r.repaired() {
                out.write_all(repaired.as_bytes())?;
                if !repaired.ends_with('\n') {
                    out.write_all(b"\n")?;
                }
            }
        }
        out.flush()
    } else {
        let mut out = std::io::stdout().lock();
        out.write_all(report.as_bytes())?;
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_pairs_parse() {
        assert_eq!(parse_context("a=b=c").unwrap(), ("a".into(), "b=c".into()));
        assert!(parse_context("novalue").is_err());
        assert!(parse_context("=x").is_err());
    }

    #[test]
    fn underline_covers_the_word_at_the_column_or_the_line() {
        assert_eq!(underline("  ## Kontxt  ", None), 2..11);
        assert_eq!(underline("a <!-- STEP: dance -->", Some(14)), 13..18);
        assert_eq!(underline("", None), 0..0);
        assert_eq!(underline("äöü x", Some(3)), 4..6);
    }

    #[test]
    fn source_line_finds_lines_with_crlf() {
        assert_eq!(source_line("a\r\nb\nc", 2), Some((3, "b")));
        assert_eq!(source_line("a", 0), None);
        assert_eq!(source_line("a", 5), None);
    }
}
