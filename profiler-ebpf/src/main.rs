//! profilerd's eBPF programs: the object the daemon ships.
//!
//! `sample_cpu` runs on every tick of the software CPU clock, on every CPU.
//! It owns nothing but what it writes: it aggregates samples in the kernel
//! (one counts entry per distinct pid/tid/comm/stacks key) into the
//! generation of maps the daemon selected, counts every sample it takes and
//! every way one is lost, and announces processes it sees for the first time.
//! `sample_peek` does the same on the per-thread clocks the daemon opens for
//! a peek, `watch_signals` tells the daemon when a peek signal is sent, and
//! `guard_peek_signal` (BPF LSM, where the kernel allows it) keeps a peek
//! signal from killing a process without a handler, and `follow_forks`
//! tells the daemon of the processes a followed process forks.
//! `record_switch` and `record_wakeup` record where the threads the daemon
//! asked for wait off CPU, and for how long (`offcpu`).
//! `allocator_entry` and `allocator_return` (uprobes on the allocator's
//! functions in the profiled processes) sample allocations and keep those
//! still held (`allocs`).
//! They must not block, allocate or log on the hot path.
#![cfg_attr(target_arch = "bpf", no_std, no_main)]
// The atomic adds of the off-CPU pending counts and the allocation
// counters: the BPF target has the
// instruction but no atomic types.
#![cfg_attr(
    target_arch = "bpf",
    feature(core_intrinsics),
    expect(
        internal_features,
        reason = "core_intrinsics, for the atomic add the BPF target has no type for"
    )
)]

#[cfg(target_arch = "bpf")]
mod allocs;
#[cfg(target_arch = "bpf")]
mod families;
#[cfg(target_arch = "bpf")]
mod lineage;
#[cfg(target_arch = "bpf")]
mod offcpu;
#[cfg(target_arch = "bpf")]
mod sampler;
#[cfg(target_arch = "bpf")]
mod signals;

#[cfg(not(target_arch = "bpf"))]
fn main() {
    // Host builds of the workspace compile this crate too; there is nothing to run.
}

/// A global the daemon sets at load time.
#[cfg(target_arch = "bpf")]
#[inline(always)]
fn global(value: &u32) -> u32 {
    // SAFETY: a volatile read of a global the daemon sets at load time.
    unsafe { core::ptr::read_volatile(value) }
}

#[cfg(target_arch = "bpf")]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    // The verifier rejects programs that can reach this; it exists to satisfy no_std.
    loop {}
}

/// The kernel only lends GPL-only helpers (stack walking among them) to
/// programs under a GPL-compatible licence.
#[cfg(target_arch = "bpf")]
#[unsafe(link_section = "license")]
#[unsafe(no_mangle)]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
