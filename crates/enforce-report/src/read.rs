//! Reading audit files: one JSON record per line, streamed (a file is never held in memory
//! whole), gzip'd files (rotated logs) recognised by their magic bytes. Lines that are not a
//! record — torn by a crash, cut by a full disk, hand-edited — are skipped and counted.

use enforce_core::{Severity, Status, Usage};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// Longest line read as a record; the rest of a longer line is skipped and it counts as
/// invalid. Records hold the whole response, so this is generous, but it bounds memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// How many invalid line numbers a file's summary keeps, to point at them.
const INVALID_LINES_KEPT: usize = 5;

/// The first bytes of a gzip member.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// A file that could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReadError {
    /// The file could not be opened.
    #[error("cannot open {path}: {source}")]
    Open {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// Reading stopped part-way (an I/O error, a truncated or corrupt gzip stream); the lines
    /// before it were counted.
    #[error("{path}: reading stopped after line {line}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// The last line read whole.
        line: u64,
        /// Why.
        source: io::Error,
    },
}

/// One audit line as the report reads it: the fields it uses, each optional except the status,
/// so that lines from older versions (without `ts`, `profile`, ...) count too. Other fields,
/// the response text among them, are skipped unread.
#[derive(Debug, Clone, Deserialize)]
pub struct Record {
    /// The verdict.
    pub status: Status,
    /// When the request finished, RFC 3339 (`enforce run` and `enforce serve` lines).
    #[serde(default)]
    pub ts: Option<String>,
    /// When the request finished, Unix milliseconds (older `enforce run --audit` lines).
    #[serde(default)]
    pub timestamp_ms: Option<u64>,
    /// The profile enforced; missing in older proxy lines.
    #[serde(default)]
    pub profile: Option<String>,
    /// Every attempt, in order.
    #[serde(default)]
    pub attempts: Vec<AttemptRecord>,
    /// Wall time of the whole enforcement, µs.
    #[serde(default)]
    pub total_us: Option<u64>,
    /// Of that, time spent waiting on the runner, µs.
    #[serde(default)]
    pub runner_us: Option<u64>,
    /// The route the proxy picked (`enforce serve` with `routes:`).
    #[serde(default)]
    pub route: Option<RouteRecord>,
    /// The input stage's verdict (profiles with `input_validators`).
    #[serde(default)]
    pub input: Option<InputRecord>,
    /// The name of the API key that made the request (`enforce serve` with named keys).
    #[serde(default)]
    pub key: Option<String>,
    /// The limits the request set itself (`X-Enforce-Max-Retries`, `X-Enforce-Token-Budget`);
    /// only whether it did is read.
    #[serde(default)]
    pub request_limits: Option<serde::de::IgnoredAny>,
}

/// The `route` of a [`Record`]: which route picked which profile, and how.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct RouteRecord {
    /// The route's name.
    pub name: String,
    /// The profile it picked.
    pub profile: String,
    /// What matched: `field`, `header`, `matches`, `classify` or `default`.
    pub by: String,
}

/// The `input` of a [`Record`]: what the input stage did.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct InputRecord {
    /// `none`, `rejected`, `hinted`, `reformulated` or `reformulation_failed`.
    #[serde(default)]
    pub action: String,
}

/// One attempt of a [`Record`].
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct AttemptRecord {
    /// 1-based attempt number.
    pub number: Option<u32>,
    /// The issues found in this attempt's response.
    pub issues: Vec<IssueRecord>,
    /// Token usage the runner reported.
    pub usage: Option<Usage>,
    /// Cost the runner reported, USD.
    pub cost_usd: Option<f64>,
    /// Validators whose repair changed this response.
    pub repairs: Vec<String>,
    /// Set when a streamed answer was cut early because a validator already failed on it.
    /// Read leniently: a `cut` of another shape still counts as a cut, without details.
    #[serde(default, deserialize_with = "lenient_cut")]
    pub cut: Option<CutRecord>,
    /// Time spent waiting on the runner for this attempt, µs.
    pub runner_us: Option<u64>,
    /// `true` when `usage` is enforce's own count (a cut attempt the runner had reported no
    /// usage for); absent from older records.
    pub usage_estimated: bool,
    /// The strategy that asked this attempt (`feedback`, `resample`, ...): absent for the
    /// first ask and a re-ask after a truncated answer.
    pub reask: Option<String>,
    /// Why `reask: auto` chose it, when it did.
    pub reask_choice: Option<ChoiceRecord>,
    /// Set (to anything) when the runner failed on this attempt: it brought no answer.
    pub runner_error: Option<serde_json::Value>,
}

/// The `reask_choice` of an [`AttemptRecord`] (`enforce_core::outcome::ChoiceReason`), as far
/// as the report reads it.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct ChoiceRecord {
    /// How: `sampled`, `mean`, `no_data` or `no_chooser`.
    pub by: String,
}

/// One issue of an [`AttemptRecord`]: who raised which code.
#[derive(Debug, Clone, Deserialize)]
pub struct IssueRecord {
    /// The validator.
    #[serde(default)]
    pub validator: String,
    /// The stable issue code.
    pub code: String,
    /// Error or warning (an issue without one counts as an error).
    #[serde(default = "error_severity")]
    pub severity: Severity,
}

fn error_severity() -> Severity {
    Severity::Error
}

/// An early cut of a streamed attempt (`enforce_core::outcome::Cut`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default)]
pub struct CutRecord {
    /// Bytes of the answer received when it was cut.
    pub bytes: Option<u64>,
    /// The codes that caused the cut.
    pub codes: Vec<String>,
}

/// A `cut` object as [`CutRecord`]; any other non-null value as a cut without details. Never
/// fails, so that a field still being settled cannot make a whole record unreadable.
fn lenient_cut<'de, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<CutRecord>, D::Error> {
    let value = serde_json::Value::deserialize(deserializer)?;
    Ok(match value {
        serde_json::Value::Null | serde_json::Value::Bool(false) => None,
        value => Some(serde_json::from_value(value).unwrap_or_default()),
    })
}

impl Record {
    /// When the request finished, in Unix milliseconds: `ts` when it parses, else
    /// `timestamp_ms`; `None` for lines that carry no time.
    pub fn time_ms(&self) -> Option<i64> {
        self.ts
            .as_deref()
            .and_then(parse_time_ms)
            .or_else(|| self.timestamp_ms.and_then(|ms| i64::try_from(ms).ok()))
    }
}

/// Parses an RFC 3339 time in UTC (`2026-11-23T22:10:00.123Z`; a space for `T` and a missing
/// `Z` are accepted) into Unix milliseconds.
pub fn parse_time_ms(text: &str) -> Option<i64> {
    let at = humantime::parse_rfc3339_weak(text.trim()).ok()?;
    let ms = at.duration_since(UNIX_EPOCH).ok()?.as_millis();
    i64::try_from(ms).ok()
}

/// A `--since` bound as Unix milliseconds: an RFC 3339 UTC time (`2026-11-23T08:00:00Z`), a date
/// (`2026-11-23`, its midnight UTC) or a span back from now (`24h`, `7d`, `30min`). The error
/// says which forms are accepted.
pub fn parse_since(text: &str) -> Result<i64, String> {
    if let Some(ms) = parse_time_ms(text) {
        return Ok(ms);
    }
    if let Some(ms) = parse_time_ms(&format!("{}T00:00:00Z", text.trim())) {
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

/// What reading one file gave.
#[derive(Debug, Clone, Default, Serialize)]
pub struct FileSummary {
    /// The file as named.
    pub path: String,
    /// `true` when the file was gzip'd.
    pub gzip: bool,
    /// Lines read (blank lines included).
    pub lines: u64,
    /// Lines that were audit records.
    pub records: u64,
    /// Lines that were `refused` records of the proxy (a request refused before any
    /// enforcement): not enforcements, counted apart.
    pub refused: u64,
    /// Lines that were not (torn, cut, not JSON, no `status`), blank lines excepted.
    pub invalid: u64,
    /// The first few invalid line numbers, 1-based.
    pub invalid_lines: Vec<u64>,
    /// Why reading stopped before the end of the file, if it did.
    pub error: Option<String>,
}

/// Reads the audit file at `path` line by line and hands each record to `on_record`.
///
/// Only a file that cannot be opened is an error; a read error part-way ends the file and is
/// noted in the summary (with everything before it counted).
pub fn read_file(path: &Path, on_record: &mut dyn FnMut(Record)) -> Result<FileSummary, ReadError> {
    let open_error = |source| ReadError::Open {
        path: path.to_path_buf(),
        source,
    };
    let file = File::open(path).map_err(open_error)?;
    let mut plain = BufReader::with_capacity(256 * 1024, file);
    let gzip = plain
        .fill_buf()
        .map_err(open_error)?
        .starts_with(&GZIP_MAGIC);
    let mut summary = FileSummary {
        path: path.display().to_string(),
        gzip,
        ..FileSummary::default()
    };
    let result = if gzip {
        // Multi-member: `cat a.gz b.gz` and some rotators write several members to one file.
        let mut reader = BufReader::new(flate2::bufread::MultiGzDecoder::new(plain));
        read_lines(&mut reader, &mut summary, on_record)
    } else {
        read_lines(&mut plain, &mut summary, on_record)
    };
    if let Err(source) = result {
        summary.error = Some(
            ReadError::Read {
                path: path.to_path_buf(),
                line: summary.lines,
                source,
            }
            .to_string(),
        );
    }
    Ok(summary)
}

/// Reads records from any line source (a file, a decompressor, a test's bytes).
pub fn read_lines(
    reader: &mut dyn BufRead,
    summary: &mut FileSummary,
    on_record: &mut dyn FnMut(Record),
) -> io::Result<()> {
    let mut line = Vec::new();
    while let Some(complete) = next_line(reader, &mut line, MAX_LINE_BYTES)? {
        summary.lines += 1;
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(record) if complete => {
                summary.records += 1;
                on_record(record);
            }
            _ if complete && is_refusal(&line) => summary.refused += 1,
            _ => {
                summary.invalid += 1;
                if summary.invalid_lines.len() < INVALID_LINES_KEPT {
                    summary.invalid_lines.push(summary.lines);
                }
            }
        }
    }
    Ok(())
}

/// Whether `line` is the proxy's record of a refused request (`"status": "refused"`).
fn is_refusal(line: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Status<'a> {
        #[serde(borrow)]
        status: &'a str,
    }
    serde_json::from_slice::<Status>(line).is_ok_and(|s| s.status == "refused")
}

/// Reads the next line into `line` (without its newline), keeping at most `cap` bytes and
/// skipping the rest. `Ok(Some(false))` means the line was longer than `cap`; `Ok(None)` means
/// the end of input.
fn next_line(reader: &mut dyn BufRead, line: &mut Vec<u8>, cap: usize) -> io::Result<Option<bool>> {
    line.clear();
    let mut complete = true;
    let mut any = false;
    loop {
        let available = match reader.fill_buf() {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if available.is_empty() {
            return Ok(any.then_some(complete));
        }
        any = true;
        let (chunk, used, done) = match memchr::memchr(b'\n', available) {
            Some(at) => (&available[..at], at + 1, true),
            None => (available, available.len(), false),
        };
        let room = cap.saturating_sub(line.len());
        if chunk.len() > room {
            complete = false;
        }
        line.extend_from_slice(&chunk[..chunk.len().min(room)]);
        reader.consume(used);
        if done {
            return Ok(Some(complete));
        }
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

    fn read(text: &[u8]) -> (FileSummary, Vec<Record>) {
        let mut summary = FileSummary::default();
        let mut records = Vec::new();
        read_lines(&mut &text[..], &mut summary, &mut |r| records.push(r)).expect("in memory");
        (summary, records)
    }

    #[test]
    fn torn_blank_and_foreign_lines_are_counted_not_fatal() {
        let text = b"{\"status\":\"passed\",\"attempts\":[]}\n\
            \n\
            {\"status\":\"repai\n\
            [1,2]\n\
            {\"status\":\"maybe\"}\n\
            {\"status\":\"aborted\"}";
        let (summary, records) = read(text);
        assert_eq!(summary.lines, 6);
        assert_eq!(summary.records, 2);
        assert_eq!(summary.invalid, 3);
        assert_eq!(summary.invalid_lines, vec![3, 4, 5]);
        assert_eq!(records[0].status, Status::Passed);
        // The last line has no newline (a torn tail that happens to be whole JSON) and counts.
        assert_eq!(records[1].status, Status::Aborted);
    }

    #[test]
    fn the_proxys_refused_records_are_counted_apart_not_as_invalid() {
        let text = b"{\"ts\":\"2026-12-01T00:00:00.000Z\",\"model\":\"m\",\"status\":\"refused\",\"reason\":\"forbidden\",\"http_status\":403}\n\
            {\"status\":\"passed\",\"attempts\":[]}\n";
        let (summary, records) = read(text);
        assert_eq!(
            (summary.records, summary.refused, summary.invalid),
            (1, 1, 0)
        );
        assert_eq!(records.len(), 1);
    }

    #[test]
    fn an_overlong_line_is_skipped_and_the_next_one_read() {
        let mut line = Vec::new();
        let mut input: &[u8] = b"0123456789\n{\"x\":1}\n";
        assert_eq!(
            next_line(&mut input, &mut line, 4).expect("mem"),
            Some(false)
        );
        assert_eq!(line, b"0123");
        assert_eq!(
            next_line(&mut input, &mut line, 4).expect("mem"),
            Some(false)
        );
        assert_eq!(next_line(&mut input, &mut line, 100).expect("mem"), None);
    }

    #[test]
    fn a_cut_of_another_shape_counts_without_details() {
        let r: Record = serde_json::from_str(
            r#"{"status":"passed","attempts":[
                {"number":1,"cut":{"bytes":"many","codes":"X"}},
                {"number":2,"cut":true},
                {"number":3,"cut":null},
                {"number":4,"cut":{"bytes":12,"codes":["A"]}}]}"#,
        )
        .expect("record");
        let cuts: Vec<Option<(Option<u64>, usize)>> = r
            .attempts
            .iter()
            .map(|a| a.cut.as_ref().map(|c| (c.bytes, c.codes.len())))
            .collect();
        assert_eq!(
            cuts,
            [Some((None, 0)), Some((None, 0)), None, Some((Some(12), 1))]
        );
    }

    #[test]
    fn time_comes_from_ts_else_timestamp_ms() {
        let r: Record = serde_json::from_str(
            r#"{"status":"passed","ts":"2026-11-23T22:10:00.123Z","timestamp_ms":5}"#,
        )
        .expect("record");
        assert_eq!(r.time_ms(), Some(1_795_471_800_123));
        let r: Record = serde_json::from_str(r#"{"status":"passed","timestamp_ms":1795471800000}"#)
            .expect("record");
        assert_eq!(r.time_ms(), Some(1_795_471_800_000));
        let r: Record =
            serde_json::from_str(r#"{"status":"passed","ts":"yesterday"}"#).expect("record");
        assert_eq!(r.time_ms(), None);
    }

    #[test]
    fn gzip_files_are_read_like_plain_ones() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("audit.jsonl.1.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{\"status\":\"unresolved\"}\n{\"sta")
            .expect("mem");
        std::fs::write(&path, gz.finish().expect("mem")).expect("write");
        let mut statuses = Vec::new();
        let summary = read_file(&path, &mut |r| statuses.push(r.status)).expect("opens");
        assert!(summary.gzip);
        assert_eq!(statuses, vec![Status::Unresolved]);
        assert_eq!((summary.records, summary.invalid), (1, 1));
        assert_eq!(summary.error, None);
    }

    #[test]
    fn a_truncated_gzip_file_keeps_what_was_read_and_says_why_it_stopped() {
        use std::io::Write;
        let dir = tempfile::tempdir().expect("temp dir");
        let path = dir.path().join("cut.gz");
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        for _ in 0..2000 {
            gz.write_all(b"{\"status\":\"passed\"}\n").expect("mem");
        }
        let bytes = gz.finish().expect("mem");
        std::fs::write(&path, &bytes[..bytes.len() - 12]).expect("write");
        let mut n = 0;
        let summary = read_file(&path, &mut |_| n += 1).expect("opens");
        assert!(summary.error.is_some(), "{summary:?}");
        assert_eq!(summary.records, n);
    }

    #[test]
    fn a_missing_file_is_an_open_error() {
        let err =
            read_file(Path::new("/nonexistent/audit.jsonl"), &mut |_| {}).expect_err("missing");
        assert!(matches!(err, ReadError::Open { .. }), "{err}");
    }
}
