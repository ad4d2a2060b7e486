//! A usage or configuration problem, which the commands that take one report with exit code 2
//! (`enforce run`, `enforce eval`), and the messages they share.

use enforce_config::ProfileSet;

/// A usage or configuration problem (exit code 2): the message to print.
#[derive(Debug)]
pub struct UsageError(pub String);

impl<E: std::fmt::Display> From<E> for UsageError {
    fn from(e: E) -> Self {
        UsageError(e.to_string())
    }
}

/// "no profile named `x` (known: a, b)"; `whose` follows the name (e.g. " (case `7`)").
pub fn unknown_profile(profiles: &ProfileSet, name: &str, whose: &str) -> UsageError {
    let known: Vec<&str> = profiles.names().collect();
    UsageError(format!(
        "no profile named `{name}`{whose} (known: {})",
        known.join(", ")
    ))
}
