//! The `external` validator: pipes the response (or each fenced block of one language) to a
//! command, POSTs it to an HTTP endpoint or calls a gRPC method, and turns the checker's line-by-line output into
//! issues with lines, so the feedback tells the model exactly what failed where.
//!
//! ```yaml
//! python_syntax:
//!   type: external
//!   command: [python3, -m, py_compile, "{file}"]   # {file}: the input in a temporary file;
//!                                                  # without it the input goes to stdin
//!   blocks: python          # check each ```python block (lines map into the response)
//!   require_block: true     # default with `blocks`: an answer without one is an error
//!   timeout_ms: 2000        # default 2000; 0 disables the validator (or timeout_s: 2)
//!   failure_threshold: 3    # circuit breaker: open after 3 consecutive failures
//!   cooldown_ms: 30000      # ... and probe again after 30 s (or cooldown_s: 30)
//!   fail_mode: open         # open: pass with a warning when unavailable; closed: stop
//! shell_syntax:
//!   type: external
//!   command: [sh, -n]
//!   blocks: sh
//! remote_lint:
//!   type: external
//!   url: https://lint.internal:9000/check
//!   ca_file: certs/internal-ca.pem   # optional: a private CA (PEM), for https:// URLs
//! avap_parser:
//!   type: external
//!   grpc:                   # cargo feature `grpc`; see the `grpc` module
//!     url: http://127.0.0.1:50051
//!     proto: protos/parser.proto
//!     method: avap.Parser/Validate
//!     request: { code_field: code, fields: { language: avap } }
//!     response: { valid_field: valid, trace_field: trace }
//!   blocks: avap
//! ```
//!
//! **The case**: `{context.KEY}` in a command's arguments is replaced by the request
//! context's `KEY` (a string as it is, other values as JSON), and in a `url` by the same value
//! percent-encoded (in the path or query only); a key the context lacks makes the check
//! unavailable, naming it. A command also gets the whole context as JSON in the environment
//! variable `ENFORCE_CONTEXT` (above 96 KiB: in a file named by `ENFORCE_CONTEXT_FILE`); an
//! HTTP checker gets it with `context_field: NAME`, which POSTs
//! `{"input": "...", "NAME": {context}}` as `application/json` instead of the plain input. So
//! an eval case's `context` (its tests) reaches the checker:
//!
//! ```yaml
//! tests_pass:
//!   type: external
//!   command: [python3, run_tests.py, "{file}", "{context.tests}"]
//!   blocks: python
//! ```
//!
//! **Command**: exit status 0 means the input passed. Any other exit status is a failed check:
//! its stdout and stderr become issues; a command killed by a signal (a crash) gave no verdict
//! and counts as unavailable. **HTTP** (`http://` or `https://`): the input is POSTed as
//! `text/plain; charset=utf-8`; status 200 with an empty body (or `{"issues": []}`) passes,
//! 200 with a body is a failed check (plain lines, or JSON `{"issues": [{"message", "line",
//! "column"}]}`), any other status counts as unavailable. **gRPC**: the input goes into the
//! request's `code_field`; the response's `valid_field` says whether it passed and its
//! `trace_field` is the checker's output; any gRPC error status counts as unavailable.
//!
//! Output lines understood: `Line N: message`, `file:N:col: message`, `file:N: message`,
//! `bash: line N: message` and Python's `File "x", line N` + `SomeError: message` (with
//! `{file}`, only frames of that file give a line: a test harness's own lines are not lines
//! of the answer). Other output becomes one issue without a line, whose hint does not point
//! at one.
//!
//! | code | when |
//! |---|---|
//! | `EXTERNAL_CHECK_FAILED` | the checker rejected the input |
//! | `CODE_BLOCK_MISSING` | `blocks` is set, `require_block` is on (the default) and the answer has no block of that language; when it has blocks of another language (or none named) the message says which |
//! | `VALIDATOR_UNAVAILABLE` | (raised by the loop) the checker could not run, timed out, or the breaker is open, and the validator fails open |
//!
//! A command that does not finish within the timeout is killed; for gRPC the timeout is also
//! sent as the call's deadline. Starting failures, timeouts and HTTP or gRPC errors count towards the [`CircuitBreaker`]; while it is open no call is made and the
//! validator reports [`Unavailable`].

use crate::breaker::CircuitBreaker;
use crate::case_context;
use crate::grpc::GrpcConfig;
#[cfg(feature = "grpc")]
use crate::grpc::GrpcTarget;
use crate::guard::{millis_of, Guard};
use crate::http::HttpTarget;
pub use crate::trace::{parse_trace, parse_trace_of, TraceLine};
use enforce_core::{
    async_trait, Context, FailMode, Issue, Severity, Unavailable, Validation, Validator,
};
use enforce_validators::text::fences;
use enforce_validators::BuildError;
use enforce_validators::FactoryInput;
use serde::Deserialize;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

/// Code: the checker rejected the input.
pub const EXTERNAL_CHECK_FAILED: &str = "EXTERNAL_CHECK_FAILED";

/// Code: `blocks` names a language, `require_block` is on, and the answer has no such block.
pub const CODE_BLOCK_MISSING: &str = "CODE_BLOCK_MISSING";

/// Most output kept from a checker (the rest is read and dropped).
pub const MAX_OUTPUT_BYTES: usize = 64 * 1024;

/// Most issues produced from one checker output.
const MAX_ISSUES: usize = 20;

fn default_timeout_ms() -> u64 {
    2000
}

/// Options of the `external` validator: exactly one of `command`, `url` and `grpc`.
#[cfg_attr(feature = "config-schema", derive(schemars::JsonSchema))]
#[cfg_attr(
    feature = "config-schema",
    schemars(
        rename = "ExternalOptions",
        // `key: ~` is no key to the parser: "given" means present and not null.
        extend("oneOf" = [
            {"required": ["command"], "properties": {"command": {"type": "array"}}},
            {"required": ["url"], "properties": {"url": {"type": "string"}}},
            {"required": ["grpc"], "properties": {"grpc": {"type": "object"}}}
        ])
    )
)]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExternalConfig {
    /// Program and arguments; `{file}` is replaced by a temporary file holding the input,
    /// else the input goes to stdin.
    #[cfg_attr(feature = "config-schema", schemars(length(min = 1)))]
    command: Option<Vec<String>>,
    /// An `http://` or `https://` endpoint the input is POSTed to.
    #[cfg_attr(feature = "config-schema", schemars(extend("pattern" = "^https?://")))]
    url: Option<String>,
    /// A unary method of a gRPC checker, called with the input (needs the cargo feature
    /// `grpc`).
    grpc: Option<GrpcConfig>,
    /// PEM certificates of a private CA trusted for `https://` (HTTP and gRPC), relative to the
    /// configuration file; the built-in web roots stay trusted.
    ca_file: Option<PathBuf>,
    /// Check each fenced block of this language instead of the whole response.
    blocks: Option<String>,
    /// With `blocks`: an answer without a block of that language is an error
    /// (`CODE_BLOCK_MISSING`, re-asked like any other), so no code answer skips the checker.
    /// Default `true`; `false` lets an answer without such a block pass unchecked.
    require_block: Option<bool>,
    /// Suffix of the temporary file (default from `blocks`, else `.txt`).
    suffix: Option<String>,
    /// Longest one check may take, in milliseconds (default 2000); 0 disables the validator.
    timeout_ms: Option<u64>,
    /// The same in seconds (`timeout_s: 2`), instead of `timeout_ms`.
    #[cfg_attr(feature = "config-schema", schemars(range(min = 0.0)))]
    timeout_s: Option<f64>,
    /// Consecutive failures that open the circuit breaker.
    #[serde(default = "crate::guard::default_threshold")]
    #[cfg_attr(feature = "config-schema", schemars(range(min = 1)))]
    failure_threshold: u32,
    /// How long the open breaker waits before probing again, in milliseconds (default 30000).
    cooldown_ms: Option<u64>,
    /// The same in seconds (`cooldown_s: 30`), instead of `cooldown_ms`.
    #[cfg_attr(feature = "config-schema", schemars(range(min = 0.0)))]
    cooldown_s: Option<f64>,
    /// `open`: pass with a warning when unavailable; `closed`: stop (default: the profile's).
    fail_mode: Option<FailMode>,
    /// Severity of the checker's issues (default `error`).
    severity: Option<Severity>,
    /// Hint attached to the checker's issues.
    hint: Option<String>,
    /// HTTP: POST `{"input": …, NAME: the request context}` as JSON instead of the plain
    /// input, so the checker sees the case (e.g. an eval case's tests).
    context_field: Option<String>,
    /// Directory the command runs in, relative to the configuration file.
    working_dir: Option<PathBuf>,
}

/// Where the check runs.
#[derive(Debug)]
#[non_exhaustive]
pub enum Target {
    /// A command: program and arguments (`{file}` is replaced by a temporary file).
    Command(Vec<String>),
    /// An `http://` or `https://` endpoint.
    Http(HttpTarget),
    /// A unary gRPC method.
    #[cfg(feature = "grpc")]
    Grpc(Box<GrpcTarget>),
}

/// The `external` validator. See the [module docs](self).
#[derive(Debug)]
pub struct External {
    name: String,
    target: Target,
    blocks: Option<String>,
    /// With `blocks`: no block of that language is an error.
    require_block: bool,
    suffix: String,
    severity: Severity,
    hint: Option<String>,
    working_dir: Option<PathBuf>,
    /// HTTP: the JSON body's field for the request context (`None`: the plain input).
    context_field: Option<String>,
    /// Timeout, breaker and fail mode, as for every validator of this crate that calls out.
    guard: Guard,
}

fn suffix_for(language: &str) -> &'static str {
    match language {
        "python" | "py" | "python3" => ".py",
        "sh" | "bash" | "shell" | "zsh" => ".sh",
        "javascript" | "js" => ".js",
        "typescript" | "ts" => ".ts",
        "rust" | "rs" => ".rs",
        "json" => ".json",
        "yaml" | "yml" => ".yaml",
        "toml" => ".toml",
        "sql" => ".sql",
        "go" => ".go",
        _ => ".txt",
    }
}

impl External {
    /// A command validator named `name` with default timeout and breaker settings.
    pub fn command(name: impl Into<String>, argv: Vec<String>) -> Result<Self, BuildError> {
        if argv.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(BuildError::at(
                "command",
                "the command needs a program name",
            ));
        }
        let name = name.into();
        Ok(External {
            guard: Guard::with_timeout(&name, Duration::from_millis(default_timeout_ms())),
            name,
            target: Target::Command(argv),
            blocks: None,
            require_block: true,
            suffix: ".txt".into(),
            severity: Severity::Error,
            hint: None,
            working_dir: None,
            context_field: None,
        })
    }

    /// Checks each fenced block of `language` instead of the whole response.
    pub fn blocks(mut self, language: &str) -> Self {
        let language = language.to_ascii_lowercase();
        self.suffix = suffix_for(&language).into();
        self.blocks = Some(language);
        self
    }

    /// Whether an answer without a block of the [`blocks`](Self::blocks) language is an error
    /// (`CODE_BLOCK_MISSING`; the default) or passes unchecked.
    pub fn require_block(mut self, required: bool) -> Self {
        self.require_block = required;
        self
    }

    /// Sets the timeout (zero disables the validator).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.guard.set_timeout(timeout);
        self
    }

    /// Sets the breaker: open after `threshold` consecutive failures, probe after `cooldown`.
    pub fn breaker(mut self, threshold: u32, cooldown: Duration) -> Self {
        self.guard.set_breaker(threshold, cooldown);
        self
    }

    /// Sets what the loop does when this validator is unavailable.
    pub fn fail_mode(mut self, mode: FailMode) -> Self {
        self.guard.set_fail_mode(mode);
        self
    }

    /// The timeout of one check.
    pub fn call_timeout(&self) -> Duration {
        self.guard.timeout()
    }

    /// The circuit breaker guarding the calls.
    pub fn circuit_breaker(&self) -> &CircuitBreaker {
        self.guard.breaker()
    }

    /// The JSON Schema of the options [`from_config`](Self::from_config) reads: an inline
    /// object schema; the types it refers to are added to `generator`'s definitions.
    #[cfg(feature = "config-schema")]
    pub fn options_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        <ExternalConfig as schemars::JsonSchema>::json_schema(generator)
    }

    /// Builds it from configuration (see the [module docs](self)).
    pub fn from_config(input: &FactoryInput<'_>) -> Result<Self, BuildError> {
        let c: ExternalConfig = input.parse()?;
        let ca_pem = match &c.ca_file {
            Some(path) => Some(crate::http::read_ca_file(&input.resolve(path))?),
            None => None,
        };
        let target = match (c.command, c.url, c.grpc) {
            (Some(argv), None, None) => {
                if argv.first().is_none_or(|p| p.trim().is_empty()) {
                    return Err(BuildError::at(
                        "command",
                        "the command needs a program name",
                    ));
                }
                Target::Command(argv)
            }
            (None, Some(url), None) => Target::Http(HttpTarget::new(&url, ca_pem.as_deref())?),
            #[cfg(feature = "grpc")]
            (None, None, Some(grpc)) => {
                Target::Grpc(Box::new(GrpcTarget::new(&grpc, input, ca_pem.as_deref())?))
            }
            #[cfg(not(feature = "grpc"))]
            (None, None, Some(_)) => {
                return Err(BuildError::at(
                    "grpc",
                    "this enforce is built without gRPC support (cargo feature `grpc`)",
                ))
            }
            _ => {
                return Err(BuildError::new(
                    "an external validator needs exactly one of 'command', 'url' and 'grpc'",
                ))
            }
        };
        if c.context_field.is_some() && !matches!(target, Target::Http(_)) {
            return Err(BuildError::at(
                "context_field",
                "is for `url` targets (a command gets the context in ENFORCE_CONTEXT, a gRPC checker with grpc.request.context_field)",
            ));
        }
        if c.context_field
            .as_deref()
            .is_some_and(|f| f.trim().is_empty() || f == "input")
        {
            return Err(BuildError::at(
                "context_field",
                "name a field other than `input` (which holds the checked text)",
            ));
        }
        if ca_pem.is_some() && matches!(target, Target::Command(_)) {
            return Err(BuildError::at(
                "ca_file",
                "a CA file is for https:// targets",
            ));
        }
        if c.failure_threshold == 0 {
            return Err(BuildError::at("failure_threshold", "must be at least 1"));
        }
        let language = c.blocks.map(|l| l.trim().to_ascii_lowercase());
        if language.as_deref().is_some_and(str::is_empty) {
            return Err(BuildError::at("blocks", "name a language, e.g. python"));
        }
        if c.require_block.is_some() && language.is_none() {
            return Err(BuildError::at(
                "require_block",
                "only applies with 'blocks' (the whole answer is checked otherwise)",
            ));
        }
        let suffix = c
            .suffix
            .unwrap_or_else(|| language.as_deref().map_or(".txt", suffix_for).to_string());
        if suffix.contains(['/', '\\']) {
            return Err(BuildError::at(
                "suffix",
                "a suffix cannot contain a path separator",
            ));
        }
        let working_dir = c.working_dir.map(|d| input.resolve(&d));
        if let Some(d) = &working_dir {
            if !d.is_dir() {
                return Err(BuildError::at(
                    "working_dir",
                    format!("{} is not a directory", d.display()),
                ));
            }
        }
        Ok(External {
            name: input.name.to_string(),
            target,
            blocks: language,
            require_block: c.require_block.unwrap_or(true),
            suffix,
            severity: c.severity.unwrap_or(Severity::Error),
            hint: c.hint,
            working_dir,
            context_field: c.context_field,
            guard: Guard::from_options(
                input.name,
                millis_of(c.timeout_ms, c.timeout_s, "timeout", default_timeout_ms())?,
                c.failure_threshold,
                millis_of(
                    c.cooldown_ms,
                    c.cooldown_s,
                    "cooldown",
                    crate::guard::DEFAULT_COOLDOWN_MS,
                )?,
                c.fail_mode,
            )?,
        })
    }

    /// The inputs to check: (text, line offset into the response).
    fn inputs<'a>(&self, response: &'a str) -> Vec<(&'a str, u32)> {
        match &self.blocks {
            None => vec![(response, 0)],
            Some(lang) => fences(response)
                .into_iter()
                .filter(|f| &f.language == lang)
                .map(|f| (&response[f.content.clone()], f.open_line))
                .collect(),
        }
    }

    /// The issue of an answer without a block of the expected language, or `None` when one is
    /// not required. Blocks in other languages are named, so the model learns what it did.
    fn missing_block(&self, response: &str) -> Option<Issue> {
        let lang = self.blocks.as_deref().filter(|_| self.require_block)?;
        let others = fences(response);
        let hint =
            format!("Put the code in a fenced block that starts with ```{lang} and ends with ```.");
        let issue = match others.first() {
            None => Issue::error(
                &self.name,
                CODE_BLOCK_MISSING,
                format!(
                    "the answer has no ```{lang} code block for {} to check",
                    self.name
                ),
            ),
            Some(first) => {
                let mut seen: Vec<String> = Vec::new();
                for f in &others {
                    let l = if f.language.is_empty() {
                        "(no language)".to_string()
                    } else {
                        f.language.clone()
                    };
                    if !seen.contains(&l) {
                        seen.push(l);
                    }
                }
                Issue::error(
                    &self.name,
                    CODE_BLOCK_MISSING,
                    format!(
                        "expected a ```{lang} code block, found a block in another language: {}",
                        seen.join(", ")
                    ),
                )
                .at_line(first.open_line)
            }
        };
        Some(issue.with_hint(hint))
    }

    /// Runs the check once; `Ok(None)` = passed, `Ok(Some(output))` = rejected with output,
    /// and, for a command, the input file's path (frames of other files give no line).
    async fn call(
        &self,
        input: &str,
        context: &Context,
    ) -> Result<(Option<String>, Option<String>), Unavailable> {
        match &self.target {
            Target::Command(argv) => self.run_command(argv, input, context).await,
            Target::Http(http) => {
                let url = http.url_for(context)?;
                let sent = match &self.context_field {
                    None => http.post_to(url, "text/plain; charset=utf-8", input.to_string()),
                    Some(field) => {
                        let body = serde_json::json!({"input": input, field.as_str(): context});
                        http.post_to(url, "application/json", body.to_string())
                    }
                };
                Ok((self.guard.within_timeout(sent).await?, None))
            }
            #[cfg(feature = "grpc")]
            Target::Grpc(grpc) => self
                .guard
                .within_timeout(grpc.call(input, context, self.guard.timeout()))
                .await
                .map(|trace| (trace.map(cap_output), None)),
        }
    }

    async fn run_command(
        &self,
        argv: &[String],
        input: &str,
        context: &Context,
    ) -> Result<(Option<String>, Option<String>), Unavailable> {
        let uses_file = argv.iter().any(|a| a.contains("{file}"));
        let temp = if uses_file {
            Some(TempFile::create(&self.suffix, input).map_err(|e| {
                Unavailable::new(format!(
                    "cannot write a temporary file for {}: {e}",
                    self.name
                ))
            })?)
        } else {
            None
        };
        let input_path = temp.as_ref().map(|t| t.path.to_string_lossy().into_owned());
        let args = argv
            .iter()
            .map(|a| {
                let a = case_context::fill(a, context, str::to_string).map_err(Unavailable::new)?;
                Ok(match &input_path {
                    Some(path) => a.replace("{file}", path),
                    None => a,
                })
            })
            .collect::<Result<Vec<String>, Unavailable>>()?;
        let mut cmd = tokio::process::Command::new(&args[0]);
        let context_json = case_context::context_json(context);
        // Kept alive until the command ended: it holds the context the command may read.
        let _context_file = if context_json.len() > case_context::MAX_CONTEXT_ENV_BYTES {
            let file = TempFile::create(".json", &context_json).map_err(|e| {
                Unavailable::new(format!(
                    "cannot write the request context for {}: {e}",
                    self.name
                ))
            })?;
            cmd.env(case_context::CONTEXT_FILE_ENV, &file.path)
                .env_remove(case_context::CONTEXT_ENV);
            Some(file)
        } else {
            cmd.env(case_context::CONTEXT_ENV, &context_json)
                .env_remove(case_context::CONTEXT_FILE_ENV);
            None
        };
        cmd.args(&args[1..])
            .stdin(if uses_file {
                Stdio::null()
            } else {
                Stdio::piped()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        if let Some(d) = &self.working_dir {
            cmd.current_dir(d);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| Unavailable::new(format!("cannot start '{}': {e}", args[0])))?;
        let stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let run = async {
            let write = async {
                if let Some(mut s) = stdin {
                    // A checker that exits without reading its input closes the pipe: fine.
                    let _ = s.write_all(input.as_bytes()).await;
                    let _ = s.shutdown().await;
                }
            };
            let (_, out, err, status) = tokio::join!(
                write,
                read_capped(stdout),
                read_capped(stderr),
                child.wait()
            );
            (out, err, status)
        };
        let (out, err, status) = match tokio::time::timeout(self.guard.timeout(), run).await {
            Ok(r) => r,
            Err(_) => {
                // Dropping the future dropped `child`, whose kill_on_drop kills the process.
                return Err(Unavailable::new(format!(
                    "'{}' did not finish within {} ms and was killed",
                    args[0],
                    self.guard.timeout().as_millis()
                )));
            }
        };
        let status = status.map_err(|e| Unavailable::new(format!("'{}' failed: {e}", args[0])))?;
        if status.success() {
            return Ok((None, input_path));
        }
        // A checker killed by a signal (crash, OOM kill) gave no verdict: unavailable, so the
        // breaker counts it, rather than a failed check the model would be asked to fix.
        if status.code().is_none() {
            return Err(Unavailable::new(format!(
                "'{}' crashed (terminated by a signal) without a verdict",
                args[0]
            )));
        }
        let mut output = out;
        if !output.is_empty() && !err.is_empty() && !output.ends_with('\n') {
            output.push('\n');
        }
        output.push_str(&err);
        if output.trim().is_empty() {
            output = format!(
                "'{}' exited with status {}",
                args[0],
                status.code().unwrap_or_default()
            );
        }
        Ok((Some(output), input_path))
    }
}

/// The first [`MAX_OUTPUT_BYTES`] of a checker's output (cut at a character boundary).
#[cfg(feature = "grpc")]
fn cap_output(mut output: String) -> String {
    if output.len() > MAX_OUTPUT_BYTES {
        let mut cut = MAX_OUTPUT_BYTES;
        while !output.is_char_boundary(cut) {
            cut -= 1;
        }
        output.truncate(cut);
    }
    output
}

/// Reads a pipe to its end, keeping the first [`MAX_OUTPUT_BYTES`].
async fn read_capped<R: AsyncRead + Unpin>(pipe: Option<R>) -> String {
    let Some(mut pipe) = pipe else {
        return String::new();
    };
    let mut kept = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        match pipe.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let room = MAX_OUTPUT_BYTES.saturating_sub(kept.len());
                kept.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
    String::from_utf8_lossy(&kept).into_owned()
}

/// A temporary file holding a checker's input, removed on drop.
struct TempFile {
    path: PathBuf,
}

impl TempFile {
    fn create(suffix: &str, contents: &str) -> std::io::Result<Self> {
        use std::io::Write;
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "enforce-check-{}-{n}-{nanos}{suffix}",
            std::process::id()
        ));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)?;
        f.write_all(contents.as_bytes())?;
        Ok(TempFile { path })
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[async_trait]
impl Validator for External {
    fn name(&self) -> &str {
        &self.name
    }

    async fn validate(&self, response: &str, context: &Context) -> Validation {
        if let Some(disabled) = self.guard.disabled_issue() {
            // Switched off, but never silently: the outcome says this check did not run.
            return Ok(vec![disabled]);
        }
        let inputs = self.inputs(response);
        if inputs.is_empty() {
            // With `blocks` and `require_block`, no block is an error: a code answer never
            // passes without the checker having seen code.
            return Ok(self.missing_block(response).into_iter().collect());
        }
        let permit = self
            .guard
            .breaker()
            .acquire()
            .await
            .map_err(|r| Unavailable::new(r.to_string()))?;
        let mut issues = Vec::new();
        for (text, line_offset) in inputs {
            let (output, input_path) = match self.call(text, context).await {
                Ok(o) => o,
                Err(u) => {
                    permit.failure(&u.reason).await;
                    return Err(u);
                }
            };
            let Some(output) = output else { continue };
            issues.extend(self.issues_of(&output, input_path.as_deref(), line_offset));
        }
        permit.success().await;
        Ok(issues)
    }

    fn fail_mode(&self) -> Option<FailMode> {
        self.guard.fail_mode()
    }
}

impl External {
    /// The issues of one rejected input: one per finding of the checker's output, else one
    /// for the whole output. Only a finding with a line is placed and hinted at its line;
    /// `line_offset` is where the checked block starts in the answer (0: the whole answer).
    fn issues_of(&self, output: &str, input_path: Option<&str>, line_offset: u32) -> Vec<Issue> {
        let hint = |line: Option<u32>| match (&self.hint, line) {
            (Some(hint), _) => hint.clone(),
            (None, Some(_)) => format!("Fix what {} reports at that line.", self.name),
            (None, None) => format!("Fix what {} reports.", self.name),
        };
        let parsed = parse_trace_of(output, input_path);
        if parsed.is_empty() {
            let summary: String = output.lines().take(10).collect::<Vec<_>>().join("\n");
            return vec![Issue::error(
                &self.name,
                EXTERNAL_CHECK_FAILED,
                format!("{} rejected the input: {}", self.name, summary.trim()),
            )
            .with_severity(self.severity)
            .with_hint(hint(None))];
        }
        parsed
            .into_iter()
            .take(MAX_ISSUES)
            .map(|t| {
                let mut issue = Issue::error(&self.name, EXTERNAL_CHECK_FAILED, t.message)
                    .with_severity(self.severity)
                    .with_hint(hint(t.line));
                if let Some(l) = t.line {
                    issue.line = Some(l.saturating_add(line_offset));
                    issue.column = t.column;
                }
                issue
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checker(hint: Option<&str>) -> External {
        let mut e = External::command("tests", vec!["true".into()]).unwrap();
        e.hint = hint.map(str::to_string);
        e
    }

    #[test]
    fn a_message_without_a_line_is_an_issue_without_a_line_and_a_hint_without_one() {
        let issues = checker(None).issues_of("AssertionError: f(2) returned 5\n", None, 7);
        assert_eq!(issues.len(), 1);
        assert_eq!(issues[0].line, None);
        assert_eq!(issues[0].hint.as_deref(), Some("Fix what tests reports."));
        let whole = checker(None).issues_of("it failed somehow\n", None, 7);
        assert_eq!(whole[0].line, None, "not the block's line either");
        assert!(!whole[0].hint.as_deref().unwrap_or("").contains("line"));
        let placed = checker(None).issues_of("Line 2: bad\n", None, 7);
        assert_eq!(placed[0].line, Some(9));
        assert_eq!(
            placed[0].hint.as_deref(),
            Some("Fix what tests reports at that line.")
        );
        let own = checker(Some("Make the tests pass.")).issues_of("x\n", None, 0);
        assert_eq!(own[0].hint.as_deref(), Some("Make the tests pass."));
    }
}
