//! Durations as the audit records them.

use std::time::Duration;

/// `d` in whole microseconds (saturating).
pub(crate) fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}
