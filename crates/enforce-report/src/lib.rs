//! # enforce-report
//!
//! What enforcement did, from the JSON-lines audit files of `enforce run --audit`,
//! `enforce serve` (`server.audit_log`) and `enforce eval` (`attempts.jsonl`): the numbers behind
//! `enforce report` and `enforce_llm.report()`.
//!
//! Split into reading ([`read`]: streamed lines, gzip'd rotated files, torn lines counted and
//! skipped), counting ([`aggregate`]: the [`Report`], gathered record by record so that memory
//! never grows with file size) and showing it ([`text`] and [`html`], both from the tables of
//! [`tables`]; the JSON form is the [`Report`] serialized). [`render`] holds the pieces shared
//! with `enforce eval`'s pages: SVG charts, tables as text and HTML.
//!
//! ```no_run
//! use enforce_report::{summarize, Options};
//!
//! let report = summarize(&["audit.jsonl", "audit.jsonl.1.gz"], Options::default())?;
//! println!("{}", enforce_report::text::render(&report, 10));
//! # Ok::<(), enforce_report::ReadError>(())
//! ```
#![deny(missing_docs)]

pub mod aggregate;
pub mod html;
pub mod read;
pub mod render;
pub mod strategies;
pub mod tables;
pub mod text;

pub use aggregate::{Aggregator, Bucket, Options, Report};
pub use read::{FileSummary, ReadError, Record};

use std::path::Path;

/// Reads every file in order and counts its records into one [`Report`].
///
/// Only a file that cannot be opened is an error; a file whose reading stopped part-way (a
/// truncated gzip stream, an I/O error) is counted up to there and says why in its
/// [`FileSummary::error`].
pub fn summarize<P: AsRef<Path>>(paths: &[P], options: Options) -> Result<Report, ReadError> {
    let mut aggregator = Aggregator::new(options);
    let mut files = Vec::with_capacity(paths.len());
    for path in paths {
        let summary = read::read_file(path.as_ref(), &mut |record| aggregator.add(&record))?;
        aggregator.add_file(&summary);
        files.push(summary);
    }
    Ok(aggregator.finish(files, options.since_ms.map(aggregate::format_time_ms)))
}
