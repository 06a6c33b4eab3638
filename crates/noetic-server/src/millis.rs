//! Times and durations on the wire: whole milliseconds (what a browser's `new Date(ms)` takes).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serializer;

/// Serialises a time as milliseconds since the Unix epoch (what a browser's `new Date(ms)` takes).
pub(crate) fn unix_millis<S: Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(unix_ms(*at))
}

/// Milliseconds since the Unix epoch.
pub(crate) fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH).map_or(0, millis_of)
}

/// A duration in whole milliseconds.
pub(crate) fn millis_of(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
