//! `enforce run`: ask a model through a runner and enforce a profile on its answer.

use super::session_file::{self, SessionFile};
use crate::auto::Choosers;
use crate::config::LoadedConfig;
use crate::runner_options::{model_of, RunnerOptions, SamplingOptions};
use crate::usage::{unknown_profile, UsageError};
use clap::{Args as ClapArgs, ValueEnum};
use enforce_config::ProfileSet;
use enforce_core::{AuditRecord, Context, Outcome, Request, Status, StopReason};
use enforce_runner::RunnerConfig;
use enforce_server::FsyncPolicy;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Exit code: the response passed or was repaired.
pub const EXIT_OK: u8 = 0;
/// Exit code: unresolved or aborted.
pub const EXIT_UNRESOLVED: u8 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: u8 = 2;
/// Exit code: a required validator was unavailable.
pub const EXIT_UNAVAILABLE: u8 = 3;
/// Exit code: the runner failed.
pub const EXIT_RUNNER: u8 = 4;

/// When `--audit` syncs its line to disk (the proxy's `audit_fsync` words).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuditFsync {
    /// Leave it to the operating system.
    Never,
    /// Sync the line before exiting.
    Always,
    /// The proxy syncs at most once per interval and when it closes its log; a run writes one
    /// line and closes, so it syncs before exiting, like `always`.
    Interval,
}

impl From<AuditFsync> for FsyncPolicy {
    fn from(v: AuditFsync) -> Self {
        match v {
            AuditFsync::Never => FsyncPolicy::Never,
            AuditFsync::Always => FsyncPolicy::Always,
            // The interval does not matter for one line written at exit.
            AuditFsync::Interval => FsyncPolicy::Interval(Duration::from_secs(1)),
        }
    }
}

/// Ask a model and enforce a profile on its answer.
///
/// The final response goes to stdout, a one-line summary (status, attempts, issue codes) to
/// stderr. Exit codes: 0 passed/repaired, 1 unresolved/aborted, 2 usage or configuration error,
/// 3 a required validator unavailable, 4 runner failure.
#[derive(Debug, ClapArgs)]
pub struct Args {
    /// The prompt, or `-` to read it from stdin.
    pub prompt: String,
    /// Configuration file (profiles, validators, `runner:` section); default `./enforce.yaml`
    /// when it exists.
    #[arg(long, short = 'c', env = "ENFORCE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Profile to enforce (default: the configuration's default, else `chat`).
    #[arg(long, short = 'p')]
    pub profile: Option<String>,
    /// Append the audit record (one JSON line, the same shape as `enforce serve`'s audit log)
    /// to this file.
    #[arg(long)]
    pub audit: Option<PathBuf>,
    /// When the audit line is synced to disk: `never` leaves it to the operating system,
    /// `always` and `interval` sync it before `enforce run` exits (one line, then the file is
    /// closed, as the proxy syncs when it closes its log) [default: the configuration's
    /// `server.audit_fsync`, else never].
    #[arg(long, value_enum, value_name = "WHEN")]
    pub audit_fsync: Option<AuditFsync>,
    #[command(flatten)]
    pub runner: RunnerOptions,
    /// `--seed`, `--temperature`, `--max-tokens`: sent with the request as its parameters
    /// (the local runner reads them; an OpenAI server gets them as request fields).
    #[command(flatten)]
    pub sampling: SamplingOptions,
    /// Re-asks after the first attempt (overrides the profile).
    #[arg(long)]
    pub max_retries: Option<u32>,
    /// Root for path-checking validators (default: the current directory).
    #[arg(long)]
    pub root: Option<PathBuf>,
    /// A system message sent before the prompt.
    #[arg(long)]
    pub system: Option<String>,
    /// Request context for placeholders such as `{{company_name}}`, as KEY=VALUE.
    #[arg(long = "context", value_name = "KEY=VALUE")]
    pub context: Vec<String>,
    /// Print the last response on stdout even when it did not pass.
    #[arg(long)]
    pub always_print: bool,
    /// Continue the conversation named ID across invocations (kept in
    /// `$ENFORCE_SESSION_DIR/ID.json`, default `.enforce/sessions/`): the Claude CLI resumes its
    /// session (`--resume`), other runners are sent the delivered turns so far.
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
}

/// What `enforce run` takes from the configuration.
struct Loaded {
    profiles: ProfileSet,
    runner: Option<RunnerConfig>,
    /// `server.audit_fsync`, the proxy's setting (`never` without one).
    audit_fsync: FsyncPolicy,
}

/// Profiles, the runner configuration and the audit fsync policy, from `--config`,
/// `./enforce.yaml`, or the built-in defaults.
fn load(args: &Args) -> Result<Loaded, UsageError> {
    let loaded = LoadedConfig::load(args.config.as_deref())?;
    // Libraries are never unloaded, so the host need not outlive this function.
    let (registry, _host) = crate::plugin_host::registry_with_plugins(&loaded);
    let mut profiles = loaded.profiles(&registry, args.root.clone())?;
    let escalation = args.runner.escalation(loaded.config.runner.clone())?;
    crate::escalation::connect(&mut profiles, &loaded, escalation)?;
    let audit_fsync = match &loaded.config.server {
        Some(server) => server.fsync_policy()?,
        None => FsyncPolicy::Never,
    };
    Ok(Loaded {
        profiles,
        runner: loaded.config.runner,
        audit_fsync,
    })
}

fn read_prompt(arg: &str) -> Result<String, UsageError> {
    let prompt = if arg == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| UsageError(format!("cannot read the prompt from stdin: {e}")))?;
        text
    } else {
        arg.to_string()
    };
    if prompt.trim().is_empty() {
        return Err(UsageError("the prompt is empty".into()));
    }
    Ok(prompt)
}

fn context(pairs: &[String]) -> Result<Context, UsageError> {
    let mut context = Context::new();
    for pair in pairs {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| UsageError(format!("--context wants KEY=VALUE, got `{pair}`")))?;
        context.insert(key.trim(), value);
    }
    Ok(context)
}

/// The exit code for an outcome.
pub fn exit_code(outcome: &Outcome) -> u8 {
    match outcome.status {
        Status::Passed | Status::Repaired => EXIT_OK,
        Status::Unavailable => EXIT_UNAVAILABLE,
        _ if matches!(outcome.stop_reason, StopReason::RunnerFailed { .. }) => EXIT_RUNNER,
        Status::Unresolved | Status::Aborted => EXIT_UNRESOLVED,
    }
}

/// An id for this run's audit record: `run-` + the start time in milliseconds and the process
/// id, in hex (unique per machine unless two runs start in the same millisecond with one pid).
fn request_id() -> String {
    let millis = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis());
    format!("run-{millis:x}-{:x}", std::process::id())
}

/// Appends `line` to `path`; syncs it to disk unless `policy` is `never`. Returns whether it
/// synced.
fn append_line(path: &Path, line: &str, policy: FsyncPolicy) -> std::io::Result<bool> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    // One write for the line and its newline: a crash leaves at most this line torn.
    file.write_all(format!("{line}\n").as_bytes())?;
    if policy == FsyncPolicy::Never {
        return Ok(false);
    }
    file.sync_data()?;
    Ok(true)
}

/// Runs `enforce run`.
pub fn run(args: Args) -> ExitCode {
    match execute(&args) {
        Ok(code) => ExitCode::from(code),
        Err(UsageError(message)) => {
            eprintln!("enforce run: {message}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

fn execute(args: &Args) -> Result<u8, UsageError> {
    let prompt = read_prompt(&args.prompt)?;
    let context = context(&args.context)?;
    let Loaded {
        profiles,
        runner: runner_from_file,
        audit_fsync,
    } = load(args)?;
    let audit_fsync = args.audit_fsync.map_or(audit_fsync, FsyncPolicy::from);
    let profile_name = args
        .profile
        .clone()
        .unwrap_or_else(|| profiles.default_name().to_string());
    let profile = profiles
        .get(&profile_name)
        .ok_or_else(|| unknown_profile(&profiles, &profile_name, ""))?;
    let mut enforcer = profile.enforcer();
    if let Some(n) = args.max_retries {
        let mut policy = enforcer.policy().clone();
        policy.max_retries = n;
        enforcer = enforcer.with_policy(policy);
    }
    let runner_config = args.runner.runner_config(runner_from_file)?;
    let runner = runner_config.build()?;
    let choosers = Choosers::for_profile(profile)?;
    let enforcer = choosers.attach(enforcer, profile, model_of(&runner_config));

    let mut request = Request::prompt(prompt.clone());
    request.params = args.sampling.params();
    let constrained = crate::decode::for_profile(profile, enforcer.policy(), &runner_config, false);
    if let Some(constrained) = &constrained {
        for note in &constrained.notes {
            eprintln!("enforce run: decode: constrained: {note}");
        }
        constrained.apply_to(&mut request);
    }
    if let Some(system) = &args.system {
        request
            .messages
            .insert(0, enforce_core::Message::system(system.clone()));
    }
    let session = match &args.session {
        Some(id) => {
            let path =
                session_file::path_of(&session_file::session_dir(), id).map_err(UsageError)?;
            let file = SessionFile::load(&path).map_err(UsageError)?;
            file.continue_in(&mut request, runner_config.kind() == "claude");
            Some((path, file))
        }
        None => None,
    };
    let runtime = super::current_thread_runtime().map_err(UsageError)?;
    let mut outcome = runtime.block_on(enforcer.run(&runner, &request, &context));
    outcome
        .warnings
        .extend(constrained.iter().flat_map(|c| c.warnings()));

    if let Some(text) = &outcome.response {
        if outcome.status.is_success() || outcome.fallback_used || args.always_print {
            let mut out = std::io::stdout().lock();
            // A closed stdout (e.g. `| head`) is not worth a different exit code.
            let _ignored = writeln!(out, "{text}").and_then(|()| out.flush());
        }
    }
    if let Some((path, mut file)) = session {
        let delivered = outcome.status.is_success() || outcome.fallback_used || args.always_print;
        file.record(&prompt, &outcome, delivered);
        if let Err(e) = file.save(&path) {
            eprintln!("enforce run: {e}");
            return Ok(EXIT_USAGE);
        }
    }
    eprintln!(
        "enforce: {} [profile {profile_name}, runner {}]",
        outcome.summary(),
        runner_config.kind()
    );
    if let Some(path) = &args.audit {
        let id = request_id();
        let line = AuditRecord::new(&id, &outcome)
            .model(model_of(&runner_config))
            .profile(profile_name.as_str())
            .runner(runner_config.kind())
            .to_json_line();
        if let Err(e) = append_line(path, &line, audit_fsync) {
            eprintln!(
                "enforce run: cannot append the audit to {}: {e}",
                path.display()
            );
            return Ok(EXIT_USAGE);
        }
    }
    Ok(exit_code(&outcome))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: &str, stop_reason: &str, runner_error: bool) -> Outcome {
        let mut v = serde_json::json!({
            "status": status, "stop_reason": {"reason": stop_reason}, "response": null,
            "issues": [], "warnings": [], "attempts": [], "total_us": 0, "runner_us": 0,
        });
        if runner_error {
            v["runner_error"] = serde_json::json!({"kind": "timeout", "after_ms": 5});
        }
        if stop_reason == "validator_unavailable" {
            // The record names the validator beside the stop reason, as the loop writes it.
            v["unavailable"] = serde_json::json!({"validator": "v", "reason": "down"});
        }
        serde_json::from_value(v).expect("a valid outcome")
    }

    #[test]
    fn exit_codes_follow_the_status() {
        assert_eq!(exit_code(&outcome("passed", "clean", false)), EXIT_OK);
        assert_eq!(
            exit_code(&outcome("repaired", "retries_exhausted", false)),
            EXIT_OK
        );
        assert_eq!(
            exit_code(&outcome("unresolved", "retries_exhausted", false)),
            EXIT_UNRESOLVED
        );
        assert_eq!(
            exit_code(&outcome("aborted", "hard_abort", false)),
            EXIT_UNRESOLVED
        );
        assert_eq!(
            exit_code(&outcome("unavailable", "validator_unavailable", false)),
            EXIT_UNAVAILABLE
        );
        assert_eq!(
            exit_code(&outcome("aborted", "runner_failed", true)),
            EXIT_RUNNER
        );
    }

    #[test]
    fn audit_lines_are_appended_and_synced_unless_never() {
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.jsonl");
        for (when, synced) in [
            (AuditFsync::Never, false),
            (AuditFsync::Always, true),
            (AuditFsync::Interval, true),
        ] {
            let line = format!("{{\"n\":\"{when:?}\"}}");
            assert_eq!(
                append_line(&path, &line, when.into()).expect("written"),
                synced
            );
        }
        let text = std::fs::read_to_string(&path).expect("read");
        assert_eq!(
            text,
            "{\"n\":\"Never\"}\n{\"n\":\"Always\"}\n{\"n\":\"Interval\"}\n"
        );
    }

    #[test]
    fn request_ids_name_the_run() {
        let id = request_id();
        assert!(id.starts_with("run-"), "{id}");
        assert!(id.len() > 8, "{id}");
    }

    #[test]
    fn context_pairs() {
        let c = context(&["company_name=ACME".into()]).expect("valid");
        assert_eq!(c.get_str("company_name"), Some("ACME"));
        assert!(context(&["nokey".into()]).is_err());
    }
}
