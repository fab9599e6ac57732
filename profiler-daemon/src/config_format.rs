//! How the configuration file writes durations (`500ms`, `10m`): the serde
//! helpers that read and write them, for the daemon's settings and the
//! exporters' alike. A leaf: it uses no other module of the daemon.
//!
//! Owns only the text form; it must not decide what a duration may be (the
//! settings that hold one validate it).

use std::time::Duration;

use serde::{Deserialize as _, Deserializer, Serializer, de::Error as _};

/// Reads a duration as humantime writes it, with examples when it fails.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 1s, 500ms, 10m)"))
}

/// serde's `deserialize_with` for a duration.
pub fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    let text = String::deserialize(deserializer)?;
    parse_duration(&text).map_err(D::Error::custom)
}

/// serde's `serialize_with` for a duration.
pub fn duration_text<S: Serializer>(duration: &Duration, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&humantime::format_duration(*duration).to_string())
}

/// serde's `serialize_with` for an optional duration.
pub fn optional_duration_text<S: Serializer>(
    duration: &Option<Duration>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match duration {
        Some(duration) => duration_text(duration, serializer),
        None => serializer.serialize_none(),
    }
}

/// serde's `deserialize_with` for an optional duration (present: `Some`).
pub fn optional_duration<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Duration>, D::Error> {
    duration(deserializer).map(Some)
}
