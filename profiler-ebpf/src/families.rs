//! Process families (`profilerctl record`): the processes a followed
//! process forks join its family, and so do theirs, as they are forked;
//! the daemon learns of each from a ring buffer, and selects the family's
//! samples by their process ids.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::{btf_tracepoint, map},
    maps::{HashMap, RingBuf},
    programs::BtfTracePointContext,
};
use profiler_common::FamilyJoin;

use crate::{KERNEL_LAYOUT, global};

/// Followed processes, by process id; the value is the family's root. The
/// daemon adds the roots and removes the family when its session ends;
/// members leave when they exit ([`leave`]).
#[map]
static FOLLOWED: HashMap<u32, u32> = HashMap::with_max_entries(4096, 0);

/// New members, for the daemon.
#[map]
static FAMILY_JOINS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// On `sched_process_fork` (a BTF tracepoint: `parent`, `child` tasks), in
/// the parent: a new process (not a thread) of a followed process joins
/// its family.
#[btf_tracepoint(function = "sched_process_fork")]
pub fn follow_forks(ctx: BtfTracePointContext) -> i32 {
    let parent = (bpf_get_current_pid_tgid() >> 32) as u32;
    // The common case, a process nobody follows: one lookup.
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(&root) = (unsafe { FOLLOWED.get(parent) }) else {
        return 0;
    };
    let tgid_offset = global(&KERNEL_LAYOUT.task_tgid);
    let child: u64 = ctx.arg(1);
    if tgid_offset == 0 || child == 0 {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offset comes from the kernel's BTF.
    let Ok(tgid) =
        (unsafe { bpf_probe_read_kernel((child + u64::from(tgid_offset)) as *const i32) })
    else {
        return 0;
    };
    // A thread shares its process's id, which is followed already.
    if tgid <= 0 || tgid as u32 == parent {
        return 0;
    }
    let pid = tgid as u32;
    if FOLLOWED.insert(pid, root, 0).is_ok() {
        let _ = FAMILY_JOINS.output::<FamilyJoin>(&FamilyJoin { root, pid }, 0);
    }
    0
}

/// Process `pid` exits (`forget_on_exit`): it leaves its family, if it
/// was in one.
#[inline(always)]
pub(crate) fn leave(pid: u32) {
    let _ = FOLLOWED.remove(pid);
}
