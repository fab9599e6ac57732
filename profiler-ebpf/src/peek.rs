//! The peek sampler: `sample_peek` runs on the per-thread CPU clocks the
//! daemon opens for a peek, and records each tick as the CPU-clock sampler
//! does (`sampler`), the first of each peeked thread as where it was when
//! the peek began.
//!
//! Owns the map of peeked threads (written by the daemon).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid,
    macros::{map, perf_event},
    maps::HashMap,
    programs::PerfEventContext,
};
use profiler_common::{Counter, SampleKind};

use crate::{counters::count, sampler::record_in_generation};

/// Threads being peeked at, written by the daemon: 0 until the thread's
/// first peek sample, which is recorded as a [`SampleKind::PeekInstant`].
/// Sized by the daemon at load time.
#[map]
static PEEK_THREADS: HashMap<u32, u32> = HashMap::with_max_entries(1024, 0);

/// Runs on the per-thread CPU clocks the daemon opens for a peek: only the
/// peeked threads' ticks reach it.
#[perf_event]
pub fn sample_peek(ctx: PerfEventContext) -> u32 {
    count(Counter::PeekSamples);
    let tid = bpf_get_current_pid_tgid() as u32;
    let mut kind = SampleKind::Peek;
    if let Some(first) = PEEK_THREADS.get_ptr_mut(tid) {
        // SAFETY: a live entry; only this thread's ticks write it, and a
        // thread is not sampled on two CPUs at once.
        let seen = unsafe { &mut *first };
        if *seen == 0 {
            *seen = 1;
            kind = SampleKind::PeekInstant;
        }
    }
    // One call only: the verifier walks every inlined copy.
    record_in_generation(&ctx, kind);
    0
}
