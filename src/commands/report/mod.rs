//! `enforce report`: what enforcement did, from the audit files of `enforce run --audit` and
//! `enforce serve`. Split into reading (`read`: streaming lines, gzip, torn lines), counting
//! (`aggregate`: the [`Report`](aggregate::Report)) and showing it (`tables`, shown by `text`
//! and by `html` under its `chart`s; `--format json` is the report serialized).
//!
//! Exit codes: 0 report written, 2 usage error, a file that cannot be opened, or output that
//! cannot be written.

mod aggregate;
mod html;
mod read;
mod tables;
mod text;

use aggregate::{Aggregator, Bucket, Options};
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{SystemTime, UNIX_EPOCH};

/// Output format on standard output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// Compact tables.
    Text,
    /// One JSON document with every number (tables not cut to --top).
    Json,
}

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
    #[arg(long, value_name = "TIME", value_parser = parse_since)]
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
    pub bucket: Option<Bucket>,
    /// Rows of the longer tables (issue codes, re-ask fixes, time buckets) in text and HTML;
    /// JSON lists everything.
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub top: usize,
}

/// `--since`: an RFC 3339 time, a date, or a span back from now, as Unix milliseconds.
fn parse_since(text: &str) -> Result<i64, String> {
    if let Some(ms) = read::parse_time_ms(text) {
        return Ok(ms);
    }
    if let Some(ms) = read::parse_time_ms(&format!("{}T00:00:00Z", text.trim())) {
        return Ok(ms);
    }
    match humantime::parse_duration(text.trim()) {
        Ok(span) => {
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis());
            let back = now.saturating_sub(span.as_millis());
            Ok(i64::try_from(back).unwrap_or(0))
        }
        Err(_) => Err(format!(
            "`{text}` is neither an RFC 3339 UTC time (2026-11-23T08:00:00Z), a date \
             (2026-11-23) nor a span back from now (24h, 7d, 30min)"
        )),
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
    let mut aggregator = Aggregator::new(Options {
        since_ms: args.since,
        bucket: args.bucket,
    });
    let mut files = Vec::with_capacity(args.files.len());
    for path in &args.files {
        let summary = read::read_file(path, &mut |record| aggregator.add(&record))
            .map_err(|e| e.to_string())?;
        if let Some(error) = &summary.error {
            eprintln!("enforce report: warning: {error}");
        }
        aggregator.add_file(&summary);
        files.push(summary);
    }
    let report = aggregator.finish(files, args.since.map(aggregate::format_time_ms));

    if let Some(path) = &args.html {
        let page = html::render(&report, args.top).map_err(|e| e.to_string())?;
        std::fs::write(path, page).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let out = match args.format {
        Format::Text => text::render(&report, args.top),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn since_takes_times_dates_and_spans() {
        assert_eq!(parse_since("2026-11-23T22:10:00Z"), Ok(1_795_471_800_000));
        assert_eq!(parse_since("2026-11-23"), Ok(1_795_392_000_000));
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .expect("clock after 1970");
        let day_ago = parse_since("24h").expect("a span");
        assert!((now - 86_400_000 - day_ago).abs() < 60_000, "{day_ago}");
        let week_ago = parse_since("7d").expect("a span");
        assert!((now - 7 * 86_400_000 - week_ago).abs() < 60_000);
        assert!(parse_since("last tuesday").is_err());
    }
}
