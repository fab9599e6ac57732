//! The kernel-side cost of a profiler's eBPF programs, from the kernel's own
//! run-time statistics (BPF_ENABLE_STATS): time spent in each program and
//! how many times it ran, independent of how noisy wall-clock times are.

use std::{collections::HashMap, os::fd::OwnedFd};

use anyhow::{Context as _, Result};

/// Keeps the kernel's BPF run-time statistics on while it lives (they cost
/// a few tens of nanoseconds per program run, for every profiler alike).
pub struct StatsEnabled(
    #[expect(
        dead_code,
        reason = "held, not read: the statistics stay on while it lives"
    )]
    OwnedFd,
);

pub fn enable_stats() -> Result<StatsEnabled> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime)
        .map(StatsEnabled)
        .context("enabling the kernel's BPF run-time statistics")
}

/// Runs and time of a set of programs.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cost {
    pub runs: u64,
    pub nanos: u64,
}

impl Cost {
    pub fn nanos_per_run(&self) -> f64 {
        self.nanos as f64 / self.runs.max(1) as f64
    }
}

/// Every loaded perf_event program, by id.
pub fn perf_event_programs() -> HashMap<u32, Cost> {
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        // aya does not re-export the program type enum; its name is stable.
        .filter(|info| format!("{:?}", info.program_type()) == "BPF_PROG_TYPE_PERF_EVENT")
        .map(|info| {
            (
                info.id(),
                Cost {
                    runs: info.run_count(),
                    nanos: info.run_time().as_nanos() as u64,
                },
            )
        })
        .collect()
}

/// What the programs in `after` but not in `existing` (a profiler's own)
/// did between two snapshots.
pub fn growth(
    existing: &HashMap<u32, Cost>,
    before: &HashMap<u32, Cost>,
    after: &HashMap<u32, Cost>,
) -> Cost {
    let mut total = Cost::default();
    for (id, cost) in after {
        if existing.contains_key(id) {
            continue;
        }
        let start = before.get(id).copied().unwrap_or_default();
        total.runs += cost.runs.saturating_sub(start.runs);
        total.nanos += cost.nanos.saturating_sub(start.nanos);
    }
    total
}

/// Runs and time of the loaded programs named `name` (the kernel keeps the
/// first 15 bytes of a name).
pub fn programs_named(name: &str) -> Cost {
    let name = &name[..name.len().min(15)];
    aya::programs::loaded_programs()
        .filter_map(Result::ok)
        .filter(|info| info.name_as_str() == Some(name))
        .fold(Cost::default(), |total, info| Cost {
            runs: total.runs + info.run_count(),
            nanos: total.nanos + info.run_time().as_nanos() as u64,
        })
}
