//! profilerd's eBPF programs: the object the daemon ships, one module per
//! program group (as the daemon loads and attaches them, see its
//! `kernel::programs::ProgramGroup`):
//!
//! - `sampler`: `sample_cpu` runs on every tick of the software CPU clock,
//!   on every CPU: it copies the stacks of tasks with user memory into the
//!   stack-copy ring buffer, aggregates the others in the kernel (one
//!   counts entry per distinct pid/tid/comm/stacks key) into the
//!   generation of maps the daemon selected, counts every sample it takes
//!   and every way one is lost, and announces processes it sees for the
//!   first time.
//! - `lifecycle`: `forget_on_exec` and `forget_on_exit` keep those
//!   announcements fresh.
//! - `peek`: `sample_peek` does what `sample_cpu` does on the per-thread
//!   clocks the daemon opens for a peek.
//! - `signals`: `watch_signals` tells the daemon when a peek signal is sent.
//! - `signal_guard`: `guard_peek_signal` (BPF LSM, where the kernel allows
//!   it) keeps a peek signal from killing a process without a handler.
//! - `families`: `follow_forks` tells the daemon of the processes a
//!   followed process forks.
//! - `lineage`: `record_forks` and `forget_forks_on_exec` say where
//!   processes forked without exec come from.
//! - `offcpu`: `record_switch`, `record_wakeup` and `read_waiting_threads`
//!   record where the threads the daemon asked for wait off CPU, and for
//!   how long.
//! - `allocs`: `allocator_entry` and `allocator_return` (uprobes on the
//!   allocator's functions in the profiled processes) sample allocations
//!   and keep those still held.
//!
//! What several groups share has a module of its own: `counters` (the
//! per-CPU loss and sample counters), `task` (what the programs read of
//! the current task: ids, who may see it, its memory), `stack_copy` (one
//! sample's stacks copied into a ring buffer for the daemon to unwind),
//! `announcements` (processes seen for the first time), `ring_wake` (when
//! a ring buffer's reader is woken); the library holds
//! what the prototype's object shares too (`registers`, `stacks`). The
//! kernel's layout comes as one global, [`KERNEL_LAYOUT`].
//!
//! The programs must not block, allocate or log on the hot path.
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
mod announcements;
#[cfg(target_arch = "bpf")]
mod counters;
#[cfg(target_arch = "bpf")]
mod families;
#[cfg(target_arch = "bpf")]
mod lifecycle;
#[cfg(target_arch = "bpf")]
mod lineage;
#[cfg(target_arch = "bpf")]
mod offcpu;
#[cfg(target_arch = "bpf")]
mod peek;
#[cfg(target_arch = "bpf")]
mod python;
#[cfg(target_arch = "bpf")]
mod ring_wake;
#[cfg(target_arch = "bpf")]
mod sampler;
#[cfg(target_arch = "bpf")]
mod signal_guard;
#[cfg(target_arch = "bpf")]
mod signals;
#[cfg(target_arch = "bpf")]
mod stack_copy;
#[cfg(target_arch = "bpf")]
mod task;

#[cfg(not(target_arch = "bpf"))]
fn main() {
    // Host builds of the workspace compile this crate too; there is nothing to run.
}

/// Where the kernel keeps the fields the programs read, set by the daemon
/// once at load time (a field it could not find stays 0). Read its fields
/// with [`global`].
#[cfg(target_arch = "bpf")]
#[unsafe(no_mangle)]
static KERNEL_LAYOUT: profiler_common::KernelLayout = profiler_common::KernelLayout::UNKNOWN;

/// A global (or a field of one) the daemon sets at load time.
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
