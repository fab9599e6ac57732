//! How a byte figure is written for people: `512 bytes`, `16.0 KiB`, and
//! with the exact count after a rounded one, `407.0 MiB (426763129 bytes)`;
//! the reports' totals and section titles and profilerctl's allocation
//! summary write them alike.
//!
//! Owns the figure's text; it must not parse figures (the CLI's arguments
//! do, with bytesize).

/// A byte figure for people: `512 bytes`, `16.0 KiB`, `407.0 MiB`.
pub fn bytes_text(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} bytes");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// A byte figure for people with its exact count after it, unless it is
/// exact already: `407.0 MiB (426763129 bytes)`, `512 bytes`.
pub fn bytes_with_count(bytes: u64) -> String {
    match bytes < 1024 {
        true => bytes_text(bytes),
        false => format!("{} ({bytes} bytes)", bytes_text(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn byte_figures_have_units() {
        assert_eq!(bytes_text(512), "512 bytes");
        assert_eq!(bytes_text(16 << 10), "16.0 KiB");
        assert_eq!(bytes_text(3 << 40), "3.0 TiB");
        assert_eq!(bytes_text(u64::MAX), "16.0 EiB");
        assert_eq!(bytes_with_count(512), "512 bytes");
        assert_eq!(bytes_with_count(16 << 10), "16.0 KiB (16384 bytes)");
        assert_eq!(bytes_with_count(426_763_129), "407.0 MiB (426763129 bytes)");
    }
}
