//! `enforce report`: what enforcement did, from the audit files of `enforce run --audit` and
//! `enforce serve`. The reading, counting and rendering are the `enforce-report` crate's; this
//! module is the flags and the printing (`--format json` is the report serialized).
//!
//! Exit codes: 0 report written, 2 usage error, a file that cannot be opened, or output that
//! cannot be written.

use crate::commands::Format;
use enforce_report::{Bucket, Options};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

/// The long help of `enforce report` (set on its subcommand in `main.rs`).
pub const ABOUT: &str = "\
Summarise audit files: outcomes over time, the most frequent issue codes per validator and \
profile, how often a re-ask fixed each code, repairs, attempts per request, tokens and cost of \
re-asks against first attempts, latency percentiles, early cuts of streamed answers, the routes the proxy picked and what the input stage did.

Reads the JSON-lines audit of `enforce run --audit FILE` and of `enforce serve` \
(`server.audit_log`), from any version: lines without a time are counted but left out of the \
time series, lines without a profile count under the profile `(unknown)`. Files are read line \
by line, however large; rotated files may be gzip'd (recognised by their content, not their \
name). Lines that are not audit records (torn by a crash, cut by a full disk) are skipped, \
counted and their line numbers shown. The proxy's `refused` records (requests refused before \
any enforcement) are counted apart, not as requests.

Re-ask fixes: an error code in attempt n counts as re-asked when attempt n+1 exists, and as \
fixed when attempt n+1 no longer has it and the request ended passed or repaired.

Re-ask strategies: each re-ask (an attempt with a `reask` strategy) counts once per error code \
of the last answer before it, under its strategy and how it was chosen (`ladder`, or reask: \
auto's `sampled`, `mean`, `no_data`, `no_chooser`); fixed when its own whole answer no longer \
has the code, whatever became of the request. Tokens are input + output of the re-asks whose \
runner reported usage; tokens per fix divides them by the fixes among those.

Spend: attempt 1 of each request against attempts 2 and later, as the runners reported tokens \
and cost (attempts without them are counted apart).

Latency: nearest-rank percentiles of total_us (total), runner_us (upstream: waiting on the \
model) and total_us - runner_us (enforce's own: validation, repairs, bookkeeping).

Early cuts: attempts whose streamed answer was cut as soon as a validator failed on it (the \
attempt's `cut` field), by code.

Routes: requests by the `route` the proxy picked (name, profile, what matched). Input checks: requests of profiles with `input_validators`, by what the input stage did (`none`, `rejected`, `hinted`, `reformulated`, `reformulation_failed`). Keys: requests by the name of the API key that made them (`key`), and how many set their own limits with X-Enforce-Max-Retries / X-Enforce-Token-Budget (`request_limits`).

Examples:
  enforce report audit.jsonl
  enforce report audit.jsonl audit.jsonl.1 audit.jsonl.2.gz --since 7d --html report.html
  enforce report --format json --since 2026-11-01 audit.jsonl > report.json";

/// Arguments of `enforce report`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Audit files (JSON lines, plain or gzip'd), e.g. a log and its rotated predecessors.
    #[arg(required = true, value_name = "AUDIT.jsonl")]
    pub files: Vec<PathBuf>,
    /// Count only requests that finished at or after TIME: RFC 3339 in UTC
    /// (`2026-11-23T08:00:00Z`, or a date `2026-11-23`) or a span back from now (`24h`, `7d`,
    /// `30min`). Records without a time are then left out (and counted as such).
    #[arg(long, value_name = "TIME", value_parser = enforce_report::read::parse_since)]
    pub since: Option<i64>,
    /// Output format on standard output.
    #[arg(long, value_enum, default_value_t = Format::Text)]
    pub format: Format,
    /// Also write the report as one self-contained HTML file (inline SVG charts, each with a
    /// table; no script, no network) to FILE.
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Time bucket of "outcomes over time" [default: hour up to 2 days of records, day up to
    /// 4 months, week beyond].
    #[arg(long, value_enum)]
    pub bucket: Option<BucketArg>,
    /// Rows of the longer tables (issue codes, re-ask fixes, time buckets) in text and HTML;
    /// JSON lists everything.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// `--bucket`: [`Bucket`] as a flag value (the library crate has no command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BucketArg {
    /// One hour.
    Hour,
    /// One day (UTC).
    Day,
    /// One week, Monday to Sunday (UTC).
    Week,
}

impl From<BucketArg> for Bucket {
    fn from(arg: BucketArg) -> Bucket {
        match arg {
            BucketArg::Hour => Bucket::Hour,
            BucketArg::Day => Bucket::Day,
            BucketArg::Week => Bucket::Week,
        }
    }
}

/// Runs `enforce report`.
pub fn run(args: Args) -> ExitCode {
    match execute(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("enforce report: {message}");
            ExitCode::from(2)
        }
    }
}

fn execute(args: &Args) -> Result<(), String> {
    let options = Options {
        since_ms: args.since,
        bucket: args.bucket.map(Bucket::from),
    };
    let report = enforce_report::summarize(&args.files, options).map_err(|e| e.to_string())?;
    for error in report.files.iter().filter_map(|file| file.error.as_ref()) {
        eprintln!("enforce report: warning: {error}");
    }

    if let Some(path) = &args.html {
        let page = enforce_report::html::render(&report, args.top).map_err(|e| e.to_string())?;
        std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let out = match args.format {
        Format::Text => enforce_report::text::render(&report, args.top),
        Format::Json => {
            let mut json = serde_json::to_string_pretty(&report)
                .map_err(|e| format!("cannot serialize the report: {e}"))?;
            json.push('\n');
            json
        }
    };
    let mut stdout = std::io::stdout().lock();
    match stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
    {
        Ok(()) => Ok(()),
        // `enforce report ... | head` is fine.
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(format!("cannot write the report: {e}")),
    }
}
