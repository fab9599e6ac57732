//! Processes seen for the first time, announced to the daemon on a ring
//! buffer so that it records their memory mappings while they are alive;
//! each is announced once, until it execs or exits (`lifecycle`).
//!
//! Owns the map of processes announced and the announcements' ring buffer.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose, as in the sampler"
)]

use aya_ebpf::{
    bindings::BPF_NOEXIST,
    macros::map,
    maps::{LruHashMap, PerCpuArray, RingBuf},
};
use profiler_common::Counter;

use crate::counters::count;

/// Sizes are placeholders: the daemon sizes the map at load time.
const DEFAULT_ENTRIES: u32 = 1024;

/// Processes already announced to the daemon.
#[map]
static KNOWN_PIDS: LruHashMap<u32, u8> = LruHashMap::with_max_entries(DEFAULT_ENTRIES, 0);

/// Pids of processes seen for the first time, so the daemon can record their
/// memory mappings while they are alive.
#[map]
static NEW_PROCESSES: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// Per CPU: the process this CPU last found announced, as its pid and the
/// address of its memory (`mm_struct`, which an exec replaces): a CPU that
/// keeps sampling one process looks it up in [`KNOWN_PIDS`] once, not at
/// every sample.
#[map]
static LAST_KNOWN: PerCpuArray<[u64; 2]> = PerCpuArray::with_max_entries(1, 0);

/// Announces process `pid`, whose memory is at `mm` (0 if unknown), to the
/// daemon, unless it was already.
#[inline(always)]
pub(crate) fn announce_process(pid: u32, mm: u64) {
    let last = LAST_KNOWN.get_ptr_mut(0);
    let this = [u64::from(pid), mm];
    if let Some(last) = last
        && mm != 0
        // SAFETY: this CPU's entry, read and written in this run only (the
        // programs that announce do not nest on one CPU).
        && unsafe { *last } == this
    {
        return;
    }
    if announced(pid)
        && let Some(last) = last
        && mm != 0
    {
        // SAFETY: as above.
        unsafe { *last = this };
    }
}

/// Announces `pid` unless [`KNOWN_PIDS`] holds it; whether it does now.
#[inline(always)]
fn announced(pid: u32) -> bool {
    if KNOWN_PIDS.get_ptr(&pid).is_some() {
        return true;
    }
    // Only the CPU whose insert wins announces the process.
    if KNOWN_PIDS.insert(&pid, &0, BPF_NOEXIST.into()).is_err() {
        return true;
    }
    if NEW_PROCESSES.output::<u32>(&pid, 0).is_err() {
        count(Counter::LostProcessNotification);
        // Forget it, so that a later sample tries again.
        let _ = KNOWN_PIDS.remove(&pid);
        return false;
    }
    true
}

/// Forgets that process `pid` was announced: its next sample announces it
/// again.
#[inline(always)]
pub(crate) fn forget_process(pid: u32) {
    let _ = KNOWN_PIDS.remove(&pid);
}
