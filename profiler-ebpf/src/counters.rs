//! The per-CPU counters every program adds to: the samples taken and
//! every way one is lost, by [`Counter`]; the daemon reads their totals at
//! each drain.
//!
//! Owns the counters map; the programs only add to it.

use aya_ebpf::{macros::map, maps::PerCpuArray};
use profiler_common::{COUNTER_COUNT, Counter};

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_COUNT, 0);

/// Adds one to `counter` on this CPU.
#[inline(always)]
pub(crate) fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot; this program does not nest on one CPU.
        unsafe { *slot += 1 };
    }
}
