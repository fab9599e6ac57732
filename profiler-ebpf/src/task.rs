//! What the programs read of the current task: its real ids, whether only
//! root and the admin group may see its samples (the kernel's own rule for
//! who may trace it), whether it has user memory and where its process's
//! main stack ends, through the kernel's layout the daemon hands over
//! ([`crate::KERNEL_LAYOUT`]).
//!
//! Owns no map; it only reads the current task.

use aya_ebpf::helpers::{
    bpf_get_current_uid_gid, bpf_probe_read_kernel, generated::bpf_get_current_task,
};
use profiler_common::{cred_ids, sample_flags};

use crate::{KERNEL_LAYOUT, global};

/// The current task, as the programs see it.
#[derive(Clone, Copy)]
pub(crate) struct CurrentTask {
    /// The task's real user and group ids.
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// Only root and the admin group may see its samples: the kernel lets
    /// its owner trace a task (`ptrace_may_access`) only when its real,
    /// effective and saved ids are all the same and it is dumpable; and
    /// when its credentials cannot be read.
    pub(crate) protected: bool,
    /// It has user memory: false for kernel threads (and exiting tasks);
    /// true when the kernel's layout is unknown.
    pub(crate) user_memory: bool,
    /// Where the frames of its process's main thread end
    /// (`mm_struct.start_stack`); 0 if unknown.
    pub(crate) main_stack_top: u64,
    /// The address of its process's memory (`mm_struct`); 0 if unknown.
    pub(crate) mm: u64,
}

impl CurrentTask {
    /// The [`sample_flags`] its samples carry from the start.
    #[inline(always)]
    pub(crate) fn sample_flags(&self) -> u32 {
        if self.protected {
            sample_flags::PROTECTED
        } else {
            0
        }
    }
}

/// Reads the current task.
#[inline(always)]
pub(crate) fn current_task() -> CurrentTask {
    let ids = bpf_get_current_uid_gid();
    let (uid, gid) = (ids as u32, (ids >> 32) as u32);
    let unknown = CurrentTask {
        uid,
        gid,
        protected: true,
        user_memory: true,
        main_stack_top: 0,
        mm: 0,
    };
    let (cred_offset, ids_offset) = (
        global(&KERNEL_LAYOUT.task_real_cred),
        global(&KERNEL_LAYOUT.cred_ids),
    );
    let (mm_offset, flags_offset) = (
        global(&KERNEL_LAYOUT.task_mm),
        global(&KERNEL_LAYOUT.mm_flags),
    );
    if cred_offset == 0 || ids_offset == 0 || mm_offset == 0 || flags_offset == 0 {
        return unknown;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offsets come from the kernel's BTF.
    let Ok(cred) =
        (unsafe { bpf_probe_read_kernel((task + u64::from(cred_offset)) as *const u64) })
    else {
        return unknown;
    };
    // SAFETY: as above.
    let Ok([uid, gid, suid, sgid, euid, egid]) =
        (unsafe { bpf_probe_read_kernel((cred + u64::from(ids_offset)) as *const [u32; 6]) })
    else {
        return unknown;
    };
    let mixed = uid != suid || uid != euid || gid != sgid || gid != egid;
    // SAFETY: as above.
    let mm = unsafe { bpf_probe_read_kernel((task + u64::from(mm_offset)) as *const u64) };
    // A task without memory (a kernel thread, or one exiting) has no
    // dumpability, and ptrace_may_access does not ask for one.
    let dumpable = match mm {
        Ok(mm) if mm != 0 => {
            // SAFETY: as above.
            let flags =
                unsafe { bpf_probe_read_kernel((mm + u64::from(flags_offset)) as *const u64) };
            flags.is_ok_and(|flags| flags & cred_ids::DUMPABLE_MASK == cred_ids::SUID_DUMP_USER)
        }
        Ok(_) => true,
        Err(_) => false,
    };
    let start_stack_offset = global(&KERNEL_LAYOUT.mm_start_stack);
    let main_stack_top = match mm {
        Ok(mm) if mm != 0 && start_stack_offset != 0 => {
            // SAFETY: as above.
            unsafe { bpf_probe_read_kernel((mm + u64::from(start_stack_offset)) as *const u64) }
                .unwrap_or(0)
        }
        _ => 0,
    };
    CurrentTask {
        uid,
        gid,
        protected: mixed || !dumpable,
        user_memory: !matches!(mm, Ok(0)),
        main_stack_top,
        mm: mm.unwrap_or(0),
    }
}
