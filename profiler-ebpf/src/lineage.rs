//! Where forked processes come from: at every fork of a new process (not a
//! thread), the child's process id is recorded with its parent's and the
//! layout of the program they then share, so that the daemon can give a
//! child its parent's mappings without reading procfs; an exec is passed
//! on too (the program is then the process's own). Both go into a ring
//! buffer the daemon reads as it unwinds, without waking it.

use aya_ebpf::{
    bindings::BPF_RB_NO_WAKEUP,
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_current_task},
    macros::{btf_tracepoint, map},
    maps::RingBuf,
    programs::BtfTracePointContext,
};
use profiler_common::ForkLineage;

use crate::{KERNEL_LAYOUT, counters::count, global};

/// Forks of new processes and execs, in order (sized by the daemon).
#[map]
static FORK_LINEAGES: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Passes `lineage` on to the daemon, or counts it lost.
#[inline(always)]
fn pass_on(lineage: &ForkLineage) {
    if FORK_LINEAGES
        .output::<ForkLineage>(lineage, BPF_RB_NO_WAKEUP.into())
        .is_err()
    {
        count(profiler_common::Counter::LostForkRecord);
    }
}

/// On `sched_process_fork` (a BTF tracepoint: `parent`, `child` tasks), in
/// the parent: records a new process's parent and program layout.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn record_forks(ctx: BtfTracePointContext) -> i32 {
    // Each 0 when the daemon did not find it in the kernel's BTF: nothing
    // is recorded then.
    let offsets = [
        global(&KERNEL_LAYOUT.task_tgid),
        global(&KERNEL_LAYOUT.task_mm),
        global(&KERNEL_LAYOUT.mm_start_code),
        global(&KERNEL_LAYOUT.mm_end_code),
        global(&KERNEL_LAYOUT.mm_start_stack),
    ];
    if offsets.contains(&0) {
        return 0;
    }
    let [tgid_offset, mm_offset, start_code, end_code, start_stack] = offsets.map(u64::from);
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    let child: u64 = ctx.arg(1);
    let mut tgid = 0_u32;
    read_kernel_into(&mut tgid, child + tgid_offset);
    // A thread shares its process's id (and memory).
    if tgid == 0 || tgid == parent {
        return 0;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    let mut mm = 0_u64;
    read_kernel_into(&mut mm, task + mm_offset);
    if mm == 0 {
        return 0;
    }
    let mut lineage = ForkLineage {
        child: tgid,
        parent,
        ..ForkLineage::default()
    };
    read_kernel_into(&mut lineage.start_code, mm + start_code);
    read_kernel_into(&mut lineage.end_code, mm + end_code);
    read_kernel_into(&mut lineage.start_stack, mm + start_stack);
    pass_on(&lineage);
    0
}

/// On `sched_process_exec` (a BTF tracepoint), in the process: its program
/// is no longer its parent's.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn forget_forks_on_exec(_ctx: BtfTracePointContext) -> i32 {
    pass_on(&ForkLineage {
        child: (bpf_get_current_pid_tgid() >> 32) as u32,
        ..ForkLineage::default()
    });
    0
}

/// Reads a `T` of kernel memory at `address` into `value`, which is zeroed
/// when the read fails.
#[inline(always)]
fn read_kernel_into<T>(value: &mut T, address: u64) {
    // SAFETY: bpf_probe_read_kernel writes exactly size_of::<T>() bytes to
    // `value` (zeros when it fails rather than faulting on a bad address).
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            (value as *mut T).cast::<core::ffi::c_void>(),
            core::mem::size_of::<T>() as u32,
            address as *const core::ffi::c_void,
        )
    };
}
