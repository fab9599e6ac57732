//! The kernel side of allocation profiling, as the daemon sees it: how a
//! profiled process is sampled (written to the targets map), the table of
//! intervals the byte sampling draws from, and what the kernel held for a
//! process when its probes came off (its sampled allocations still live,
//! and its losses). The probes themselves are attached by
//! [`super::sampler::KernelAllocationProbes`].
//!
//! Owns these values; it must not unwind, symbolize or aggregate.

use std::collections::HashSet;

use profiler_common::allocs::{INTERVAL_SHIFT, INTERVAL_TABLE_LEN, Target, mode};

/// Processes whose allocations can be profiled at once.
pub const MAX_PROFILED_PROCESSES: usize = 16;

/// How a profiled process's allocations are sampled.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    /// By bytes: one sample per this many bytes allocated, on average (an
    /// allocation of `s` bytes is sampled with probability
    /// `1 - exp(-s / mean)`).
    Bytes(u64),
    /// Each allocation with this probability (0 < p ≤ 1), as Julia's
    /// `sample_rate`.
    Rate(f64),
}

impl Sampling {
    /// The default: one sample per 512 KiB allocated, as Go and tcmalloc.
    pub const DEFAULT: Sampling = Sampling::Bytes(512 * 1024);

    /// What the programs are told.
    pub fn target(self) -> Target {
        match self {
            Sampling::Bytes(mean) => Target {
                mode: mode::BYTES,
                mean_bytes: mean.max(1),
                ..Target::default()
            },
            Sampling::Rate(rate) => Target {
                mode: mode::RATE,
                threshold: (rate.clamp(0.0, 1.0) * 4_294_967_296.0).round() as u64,
                ..Target::default()
            },
        }
    }

    /// The chance an allocation of `size` bytes is sampled.
    pub fn chance(self, size: u64) -> f64 {
        match self {
            Sampling::Bytes(mean) => {
                let size = size.min(profiler_common::allocs::MAX_COUNTED_SIZE);
                -(-(size as f64) / mean.max(1) as f64).exp_m1()
            }
            Sampling::Rate(rate) => rate,
        }
    }

    /// As the reports state it.
    pub fn describe(self) -> String {
        match self {
            Sampling::Bytes(mean) => format!("one sample per {mean} bytes allocated on average"),
            Sampling::Rate(rate) => format!("each allocation with probability {rate}"),
        }
    }
}

/// The byte sampling's intervals: exponentially distributed with mean 1
/// (in fixed point, `1 << INTERVAL_SHIFT`), each entry the mean of its
/// slice of quantiles, so that the table's mean is exactly the
/// distribution's.
pub fn interval_table() -> Vec<u32> {
    let slices = f64::from(INTERVAL_TABLE_LEN);
    // ∫ -ln u du = u - u ln u, which is 0 at u = 0.
    let integral = |u: f64| if u <= 0.0 { 0.0 } else { u - u * u.ln() };
    let unit = f64::from(1_u32 << INTERVAL_SHIFT);
    (0..INTERVAL_TABLE_LEN)
        .map(|slice| {
            let (low, high) = (f64::from(slice) / slices, f64::from(slice + 1) / slices);
            let mean = (integral(high) - integral(low)) * slices;
            (mean * unit).round().clamp(1.0, f64::from(u32::MAX)) as u32
        })
        .collect()
}

/// What the kernel held for a profiled process when its probes came off.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KernelAllocations {
    /// The ids of its sampled allocations not freed.
    pub live: HashSet<u64>,
    /// Sampled allocations whose stack copy was lost, and their bytes.
    pub lost: u64,
    pub lost_bytes: u64,
    /// Sampled allocations whose address could not be kept (the live map
    /// was full).
    pub untracked: u64,
}

/// Why allocation probes could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("allocation profiling is off in this daemon: {0}")]
    Unavailable(String),
    #[error(
        "the allocations of process {0} are already being profiled; wait for that profile to \
         end (profilerctl sessions lists open ones)"
    )]
    Busy(u32),
    #[error(
        "{MAX_PROFILED_PROCESSES} processes are already being profiled for allocations; wait for \
         one of those profiles to end"
    )]
    TooMany,
    #[error("cannot attach to {symbol} in {path}: {reason}")]
    Attach {
        path: String,
        symbol: &'static str,
        reason: String,
    },
    #[error("cannot tell the allocation programs about process {pid}: {reason}")]
    Target { pid: u32, reason: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interval_table_has_the_mean_and_shape_of_an_exponential() {
        let table = interval_table();
        assert_eq!(table.len(), INTERVAL_TABLE_LEN as usize);
        let unit = f64::from(1_u32 << INTERVAL_SHIFT);
        let mean = table.iter().map(|&v| f64::from(v)).sum::<f64>() / table.len() as f64 / unit;
        assert!((mean - 1.0).abs() < 1e-4, "mean {mean}");
        // The median of Exp(1) is ln 2.
        let mut sorted = table.clone();
        sorted.sort_unstable();
        let median = f64::from(sorted[sorted.len() / 2]) / unit;
        assert!(
            (median - std::f64::consts::LN_2).abs() < 0.01,
            "median {median}"
        );
        assert!(table.iter().all(|&v| v >= 1));
    }

    #[test]
    fn chances_by_bytes_and_by_rate() {
        let bytes = Sampling::Bytes(1024);
        assert!((bytes.chance(1024) - (1.0 - (-1.0_f64).exp())).abs() < 1e-12);
        assert!((bytes.chance(1) - 1.0 / 1024.0).abs() < 1e-6);
        assert_eq!(Sampling::Rate(0.25).chance(1 << 20), 0.25);
        assert_eq!(Sampling::Rate(1.0).target().threshold, 1 << 32);
        assert_eq!(Sampling::Bytes(0).target().mean_bytes, 1);
    }
}
