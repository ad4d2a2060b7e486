//! Why an eval did not finish.

use std::path::PathBuf;

/// Why an eval (or a merge of its parts) did not finish.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum EvalError {
    /// Bad input, found before any trial ran: the dataset, the arms, a profile, the output
    /// directory, parts of a merge that do not make one eval. The message names what and where.
    #[error("{0}")]
    Input(String),
    /// A trial's record could not be written: the eval stopped. The trials recorded before it
    /// stay in the file, and a rerun with the same output directory resumes after them.
    #[error("stopped: cannot record a trial in {}: {source} (rerun to resume)", path.display())]
    Record {
        /// The `attempts.jsonl` written to.
        path: PathBuf,
        /// What the write said.
        #[source]
        source: std::io::Error,
    },
    /// The trials ran but their results could not be written (the records are kept: a rerun
    /// writes the results again without running them).
    #[error("{0}")]
    Output(String),
    /// The async runtime the trials run on could not start.
    #[error("cannot start the async runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

impl EvalError {
    /// Whether the caller's input was at fault (a usage or configuration error), as opposed to
    /// a failure after the eval began.
    pub fn is_input(&self) -> bool {
        matches!(self, EvalError::Input(_) | EvalError::Runtime(_))
    }
}
