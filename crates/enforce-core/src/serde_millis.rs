//! Optional durations as whole milliseconds in JSON, so records stay readable.

use serde::{Deserialize, Deserializer, Serializer};
use std::time::Duration;

/// `Option<Duration>` as milliseconds or null.
pub mod option {
    use super::*;

    /// Serializes an optional `Duration` as milliseconds or null.
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
            None => s.serialize_none(),
        }
    }

    /// Deserializes optional milliseconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Option::<u64>::deserialize(d).map(|o| o.map(Duration::from_millis))
    }
}
