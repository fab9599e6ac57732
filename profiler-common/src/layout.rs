//! Where the kernel keeps the fields the eBPF programs read: aya's
//! programs have no CO-RE relocations, so the daemon finds the byte
//! offsets in the kernel's BTF and hands them over once, at load time, as
//! one global ([`crate::names::KERNEL_LAYOUT`]).

/// Byte offsets (and one size) of the kernel fields the programs read,
/// as the running kernel lays them out. A field the daemon could not find
/// is 0, and every program that reads it does without (as each field
/// says); the daemon leaves off the program groups that cannot.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelLayout {
    /// `task_struct.tgid` (the process id): the signal guard, the fork
    /// follower and lineages, the task iterator of off-CPU recording.
    pub task_tgid: u32,
    /// `task_struct.pid` (the thread id): off-CPU recording (0: off).
    pub task_pid: u32,
    /// `task_struct.sighand` (a pointer), for the signal guard (0: off).
    pub task_sighand: u32,
    /// `sighand_struct.action` (an array of `k_sigaction`).
    pub sighand_action: u32,
    /// `sizeof(struct k_sigaction)`.
    pub k_sigaction_size: u32,
    /// `k_sigaction.sa.sa_handler`.
    pub handler: u32,
    /// `task_struct.signal` (a pointer), where the exit tracepoint finds
    /// what a process died of (0: a peek signal's kill is not reported).
    pub task_signal: u32,
    /// `signal_struct.group_exit_code`.
    pub group_exit_code: u32,
    /// `task_struct.real_cred` (a pointer): the task's objective
    /// credentials, those `ptrace_may_access` checks. With the next three:
    /// who may see a sample (any 0: every sample is protected).
    pub task_real_cred: u32,
    /// `cred.uid`, the first of the six ids of [`crate::cred_ids::FIELDS`].
    pub cred_ids: u32,
    /// `task_struct.mm` (a pointer).
    pub task_mm: u32,
    /// `mm_struct.flags` (its first word holds the dumpability bits).
    pub mm_flags: u32,
    /// `mm_struct.start_stack`: where the main thread's frames end (0:
    /// main threads' stack copies are not trimmed).
    pub mm_start_stack: u32,
    /// `mm_struct.start_code` and `end_code`: where a process's program
    /// lies, which the fork tracepoint records (0: nothing is recorded).
    pub mm_start_code: u32,
    pub mm_end_code: u32,
}

impl KernelLayout {
    /// Nothing found: what the programs hold until the daemon sets it.
    pub const UNKNOWN: Self = Self {
        task_tgid: 0,
        task_pid: 0,
        task_sighand: 0,
        sighand_action: 0,
        k_sigaction_size: 0,
        handler: 0,
        task_signal: 0,
        group_exit_code: 0,
        task_real_cred: 0,
        cred_ids: 0,
        task_mm: 0,
        mm_flags: 0,
        mm_start_stack: 0,
        mm_start_code: 0,
        mm_end_code: 0,
    };
}

// Fifteen u32s: no padding.
const _: () = assert!(core::mem::size_of::<KernelLayout>() == 15 * 4);

#[cfg(feature = "user")]
// SAFETY: #[repr(C)], Copy, made only of u32s, no padding: every bit
// pattern is valid.
unsafe impl aya::Pod for KernelLayout {}
