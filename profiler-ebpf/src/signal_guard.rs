//! The peek signal guard (BPF LSM on `task_kill`, where the kernel accepts
//! BPF LSM programs): a peek signal aimed at a process that has no handler
//! for it would kill it, so the guard refuses it and passes it on to the
//! daemon, which peeks as usual.
//!
//! Owns no map; it reads the target task through the kernel's layout and
//! passes signals on through `signals`.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, bpf_probe_read_kernel},
    macros::lsm,
    programs::LsmContext,
};
use profiler_common::{TASK_COMM_LEN, peek_signal_result};

use crate::{
    KERNEL_LAYOUT, global,
    signals::{pass_on, peek_signal},
};

const EPERM: i32 = 1;

/// On the LSM hook `task_kill`: a peek signal another process aims at a
/// process whose disposition for it is the default (termination) is refused
/// (the sender gets EPERM) and passed on to the daemon, which peeks as
/// usual; every other signal, and the peek signal to a process that handles
/// or ignores it, is left alone.
#[lsm(hook = "task_kill")]
pub fn guard_peek_signal(ctx: LsmContext) -> i32 {
    // task_kill(struct task_struct *p, struct kernel_siginfo *info, int sig,
    // const struct cred *cred), then the verdict of the BPF LSM programs
    // before this one.
    let (task, signal, verdict) = (ctx.arg::<u64>(0), ctx.arg::<i32>(2), ctx.arg::<i32>(4));
    if verdict != 0 {
        return verdict;
    }
    let peek_signal = peek_signal();
    let action_size = global(&KERNEL_LAYOUT.k_sigaction_size);
    if peek_signal == 0 || signal != peek_signal as i32 || !(1..=64).contains(&signal) {
        return 0;
    }
    if action_size == 0 || task == 0 {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offsets come from the kernel's BTF.
    let sighand = unsafe {
        bpf_probe_read_kernel((task + u64::from(global(&KERNEL_LAYOUT.task_sighand))) as *const u64)
    };
    let Ok(sighand) = sighand else { return 0 };
    if sighand == 0 {
        return 0;
    }
    let handler_address = sighand
        + u64::from(global(&KERNEL_LAYOUT.sighand_action))
        + (signal as u64 - 1) * u64::from(action_size)
        + u64::from(global(&KERNEL_LAYOUT.handler));
    // SAFETY: as above.
    let Ok(handler) = (unsafe { bpf_probe_read_kernel(handler_address as *const u64) }) else {
        return 0;
    };
    // SIG_DFL is 0; SIG_IGN (1) and real handlers receive the signal.
    if handler != 0 {
        return 0;
    }
    // SAFETY: as above.
    let tgid = unsafe {
        bpf_probe_read_kernel((task + u64::from(global(&KERNEL_LAYOUT.task_tgid))) as *const i32)
    }
    .unwrap_or(0);
    // A process signalling itself is not asking for a peek (the daemon
    // ignores such signals): let the kernel act as usual.
    if tgid <= 0 || (bpf_get_current_pid_tgid() >> 32) as i32 == tgid {
        return 0;
    }
    pass_on(
        tgid as u32,
        signal as u32,
        1,
        peek_signal_result::INTERCEPTED,
        [0; TASK_COMM_LEN],
    );
    -EPERM
}
