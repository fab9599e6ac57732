//! The allocation profiles' metrics: how many run and may run, what was
//! refused and why, how profiles ended, and what sampling dropped, by
//! cause.
//!
//! Owns their exposition only; the allocation profiler and the kernel's
//! counters own the figures.

use profiler_common::Counter;
use prometheus_client::encoding::DescriptorEncoder;

use super::{counter, gauge, labelled_counters};
use crate::{allocs::AllocationStats, kernel::drain};

pub(super) fn encode(
    out: &mut DescriptorEncoder,
    stats: &AllocationStats,
    counters: &drain::CounterDeltas,
) -> Result<(), std::fmt::Error> {
    gauge(
        out,
        "allocation_profiles_running",
        "Processes whose allocations are profiled now (their probes attached)",
        stats.running.len() as u64,
    )?;
    gauge(
        out,
        "allocation_profiles_limit",
        "Most processes whose allocations may be profiled at once",
        u64::from(stats.limit),
    )?;
    gauge(
        out,
        "allocation_profiles_reserved",
        "Allocation profiles kept for root and the admin group",
        u64::from(stats.reserved),
    )?;
    let counts = &stats.counts;
    labelled_counters(
        out,
        "allocation_profiles_refused",
        "Allocation profiles refused, by cause",
        "cause",
        [
            ("busy", counts.refused_busy),
            ("full", counts.refused_full),
            ("reserved", counts.refused_reserved),
        ]
        .into_iter(),
    )?;
    counter(
        out,
        "allocation_profiles_abandoned",
        "Allocation profiles ended because whoever asked went away, their probes then taken off",
        counts.abandoned,
    )?;
    counter(
        out,
        "allocation_profiles_process_exited",
        "Allocation profiles ended early because their process exited",
        counts.process_exited,
    )?;
    counter(
        out,
        "allocations_sampled",
        "Allocations sampled, their stacks copied",
        counters[Counter::AllocSampled as usize],
    )?;
    labelled_counters(
        out,
        "allocations_dropped",
        "Sampled allocations dropped (or allocator calls not followed), by cause",
        "cause",
        drain::losses(counters)
            .filter(|(cause, _)| cause.is_allocation())
            .map(|(cause, count)| (cause.name(), count)),
    )?;
    gauge(
        out,
        "allocation_ring_records",
        "Records the allocation ring buffer holds",
        stats.ring_records,
    )?;
    gauge(
        out,
        "allocation_ring_share_records",
        "Records of the allocation ring buffer each profile may hold unread now",
        stats.ring_share,
    )
}
