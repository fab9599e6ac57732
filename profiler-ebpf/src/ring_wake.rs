//! When a ring buffer's reader is woken: only once a quarter of the ring
//! waits to be read. The daemon's drain thread sleeps until then, its own
//! schedule (a drain a second) or a new process's announcement, so an idle
//! or lightly sampled machine costs it no wake-ups, and a busy one wakes
//! it long before the ring fills. (The kernel's default wakes the reader
//! at the first record after each read: a wake-up per read, for nothing.)
//!
//! Owns nothing; it must not write to a ring.

use aya_ebpf::{
    bindings::{BPF_RB_AVAIL_DATA, BPF_RB_FORCE_WAKEUP, BPF_RB_NO_WAKEUP, BPF_RB_RING_SIZE},
    maps::RingBuf,
};

/// The flags to submit (or output) a record to `ring` with.
#[inline(always)]
pub(crate) fn wake_flags(ring: &RingBuf) -> u64 {
    let waiting = ring.query(BPF_RB_AVAIL_DATA.into());
    let size = ring.query(BPF_RB_RING_SIZE.into());
    if waiting >= size / 4 {
        BPF_RB_FORCE_WAKEUP.into()
    } else {
        BPF_RB_NO_WAKEUP.into()
    }
}
