//! Where forked processes come from: at every fork of a new process (not a
//! thread), the child's process id is recorded with its parent's and the
//! layout of the program they then share, so that the daemon can give a
//! child its parent's mappings without reading procfs; an exec forgets it.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_get_current_task},
    macros::{btf_tracepoint, map},
    maps::LruHashMap,
    programs::BtfTracePointContext,
};
use profiler_common::ForkLineage;

use crate::global;

/// Byte offsets of `mm_struct.start_code` and `end_code`, found by the
/// daemon in the kernel's BTF (0: unknown, nothing is recorded).
#[unsafe(no_mangle)]
static MM_START_CODE_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static MM_END_CODE_OFFSET: u32 = 0;

/// Processes forked without exec since, by process id (least recently
/// forked go first when full; sized by the daemon).
#[map]
static FORK_LINEAGES: LruHashMap<u32, ForkLineage> = LruHashMap::with_max_entries(1024, 0);

/// On `sched_process_fork` (a BTF tracepoint: `parent`, `child` tasks), in
/// the parent: records a new process's parent and program layout.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn record_forks(ctx: BtfTracePointContext) -> i32 {
    let offsets = [
        global(&crate::signals::TASK_TGID_OFFSET),
        global(&crate::sampler::TASK_MM_OFFSET),
        global(&MM_START_CODE_OFFSET),
        global(&MM_END_CODE_OFFSET),
        global(&crate::sampler::MM_START_STACK_OFFSET),
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
        parent,
        ..ForkLineage::default()
    };
    read_kernel_into(&mut lineage.start_code, mm + start_code);
    read_kernel_into(&mut lineage.end_code, mm + end_code);
    read_kernel_into(&mut lineage.start_stack, mm + start_stack);
    let _ = FORK_LINEAGES.insert(tgid, lineage, 0);
    0
}

/// On `sched_process_exec` (a BTF tracepoint), in the process: its program
/// is no longer its parent's.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn forget_forks_on_exec(_ctx: BtfTracePointContext) -> i32 {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = FORK_LINEAGES.remove(pid);
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
