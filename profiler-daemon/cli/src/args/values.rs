//! The parsers of flag values: each refuses a bad value with a message in
//! the CLI's terms (what the value is, an example of a good one).
//!
//! Owns the values' syntax; it must not know which flag takes which.

use std::time::{Duration, SystemTime};

pub(super) fn parse_bytes(text: &str) -> Result<u64, String> {
    match text.trim().parse::<bytesize::ByteSize>() {
        Ok(bytes) if bytes.as_u64() > 0 => Ok(bytes.as_u64()),
        Ok(_) => Err("the mean sampling interval must be at least 1 byte".to_owned()),
        Err(err) => Err(format!("{err} (examples: 512KiB, 1MiB, 4096)")),
    }
}

pub(super) fn parse_rate(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(rate) if rate > 0.0 && rate <= 1.0 => Ok(rate),
        _ => Err("a sampling rate is a probability above 0 and at most 1 (e.g. 0.01)".to_owned()),
    }
}

/// A duration with its unit (10s, 500ms, 2m), or a number of seconds
/// without one (5, 0.5), as perf and py-spy take it.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    if text.trim_start().starts_with('-') {
        return Err("a duration cannot be negative (examples: 10s, 500ms, 2m)".to_owned());
    }
    if let Ok(seconds) = text.trim().parse::<f64>() {
        return Duration::try_from_secs_f64(seconds).map_err(|_| {
            format!("{text} seconds is not a duration (examples: 10s, 500ms, 2m, 5)")
        });
    }
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 10s, 500ms, 2m, 5)"))
}

pub(super) fn parse_time(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(text)
        .map_err(|err| format!("{err} (example: 2026-11-21T17:30:00Z, in UTC)"))
}

pub(super) fn parse_noisefloor(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(value) if value.is_finite() && value >= 0.0 => Ok(value),
        _ => Err("the noise floor is a number of 0 or more (try 2.0)".to_owned()),
    }
}

/// A parser of ids (pids, tids, uids), which says what is wrong with a
/// negative or non-numeric one.
pub(super) fn id(what: &'static str) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |text| whole_number(text, what, u32::MAX.into()).map(|id| id as u32)
}

/// A parser of counts that fit 32 bits.
pub(super) fn count(what: &'static str) -> impl Fn(&str) -> Result<u32, String> + Clone {
    move |text| whole_number(text, what, u32::MAX.into()).map(|count| count as u32)
}

/// A parser of counts that fit 64 bits.
pub(super) fn count64(what: &'static str) -> impl Fn(&str) -> Result<u64, String> + Clone {
    move |text| whole_number(text, what, u64::MAX)
}

fn whole_number(text: &str, what: &str, max: u64) -> Result<u64, String> {
    if text.trim().starts_with('-') {
        return Err(format!("{what} cannot be negative"));
    }
    match text.trim().parse::<u64>() {
        Ok(value) if value <= max => Ok(value),
        Ok(_) => Err(format!("{what} is at most {max}")),
        Err(_) => Err(format!("{what} is a whole number, 0 to {max}")),
    }
}
