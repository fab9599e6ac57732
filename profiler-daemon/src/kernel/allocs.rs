//! The kernel side of allocation profiling, as the daemon sees it: how a
//! profiled process is sampled (written to the targets map), the table of
//! intervals the byte sampling draws from, how much of the allocation ring
//! buffer each profile may hold unread, and what the kernel held for a
//! process when its probes came off (its sampled allocations still live,
//! and what was dropped), and where a probe goes ([`ProbeSite`], found in
//! the process's files by `symbols::allocator_functions`). The probes
//! themselves are attached by [`super::programs::KernelAllocationProbes`].
//!
//! Owns these values; it must not unwind, symbolize or aggregate.

use std::{collections::HashSet, path::PathBuf};

pub use profiler_common::allocs::MAX_PROFILED_PROCESSES;
use profiler_common::allocs::{
    Function, INTERVAL_SHIFT, INTERVAL_TABLE_LEN, ProfileCounts, Target, mode,
};

/// Where one allocator uprobe goes: one function of the allocator in one
/// file the profiled process maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeSite {
    /// The file as the daemon opens it (through the process's root, so a
    /// container's file is found).
    pub file: PathBuf,
    /// The file's path in the process (for errors).
    pub path: String,
    pub symbol: &'static str,
    pub function: Function,
    /// Where the probe goes in the file: the function's offset, or just
    /// past a leading instruction the kernel cannot emulate.
    pub offset: u64,
}

/// Profiles kept for root and the admin group: other users together may
/// run at most [`MAX_PROFILED_PROCESSES`] less these at once.
pub const RESERVED_FOR_ADMINS: u32 = MAX_PROFILED_PROCESSES / 4;

/// The records of the allocation ring buffer each profile may hold unread
/// when `running` profiles run, of a ring of `records`: an equal share (at
/// least one), so that no profile's samples are dropped for another's.
pub fn ring_share(records: u64, running: usize) -> u64 {
    (records / running.max(1) as u64).max(1)
}

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
    /// Its sampled allocations whose records reached the allocation ring.
    pub written: u64,
    /// Sampled allocations dropped, by cause, with their bytes.
    pub dropped: AllocationDrops,
    /// Sampled allocations whose address could not be kept (the live map
    /// was full).
    pub untracked: u64,
    /// Allocator calls not followed (the map of calls under way was full).
    pub calls_not_followed: u64,
}

/// Sampled allocations a profile dropped, and their bytes, by cause.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AllocationDrops {
    /// Its records the daemon had not read yet filled its share of the
    /// allocation ring buffer.
    pub share_full: u64,
    pub share_full_bytes: u64,
    /// The allocation ring buffer was full.
    pub ring_full: u64,
    pub ring_full_bytes: u64,
}

impl AllocationDrops {
    pub fn total(&self) -> u64 {
        self.share_full + self.ring_full
    }

    pub fn total_bytes(&self) -> u64 {
        self.share_full_bytes + self.ring_full_bytes
    }
}

impl KernelAllocations {
    /// What the programs counted for a profile, with no live allocation.
    pub fn counted(counts: &ProfileCounts) -> Self {
        Self {
            live: HashSet::new(),
            written: counts.written,
            dropped: AllocationDrops {
                share_full: counts.share_full,
                share_full_bytes: counts.share_full_bytes,
                ring_full: counts.ring_full,
                ring_full_bytes: counts.ring_full_bytes,
            },
            untracked: counts.untracked,
            calls_not_followed: counts.calls_not_followed,
        }
    }
}

/// Why allocation probes could not be attached.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    #[error("allocation profiling is off in this daemon: {0}")]
    Unavailable(String),
    #[error(
        "the allocations of process {0} are already being profiled; wait for that profile to \
         end (`profilerctl status` counts the profiles running)"
    )]
    Busy(u32),
    #[error(
        "{MAX_PROFILED_PROCESSES} processes are already being profiled for allocations (the \
         most at once); wait for one of those profiles to end"
    )]
    TooMany,
    #[error(
        "{running} allocation profiles of users are running, and the last \
         {RESERVED_FOR_ADMINS} of the {MAX_PROFILED_PROCESSES} are kept for root and the admin \
         group; wait for one of those profiles to end"
    )]
    Reserved { running: usize },
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
    fn the_ring_is_shared_equally_among_the_profiles_running() {
        assert_eq!(ring_share(478, 0), 478);
        assert_eq!(ring_share(478, 1), 478);
        assert_eq!(ring_share(478, 2), 239);
        assert_eq!(ring_share(478, 16), 29);
        // However small the ring, each profile may hold a record.
        assert_eq!(ring_share(3, 16), 1);
        const { assert!(RESERVED_FOR_ADMINS >= 1 && RESERVED_FOR_ADMINS < MAX_PROFILED_PROCESSES) };
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
