//! The process lifecycle tracepoints: a process that execs or exits is
//! forgotten by the announcements (and an exiting one by the families and
//! the peek signal watcher), so that its next program or a later process
//! with its pid is announced afresh.
//!
//! Owns no map: it only takes entries out of others' (a deep thread's
//! and a Python process's or thread's too, when it exits).

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::tracepoint, programs::TracePointContext,
};

use crate::announcements::forget_process;

/// On `sched:sched_process_exec`: the process's memory map changes, so
/// announce it again on its next sample.
#[tracepoint]
pub fn forget_on_exec(_ctx: TracePointContext) -> u32 {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    forget_process(pid);
    // Its next program may run no interpreter, or another.
    crate::python::forget_process(pid);
    0
}

/// On `sched:sched_process_exit`: an exiting thread is no deep thread any
/// more. Of a thread-group leader: a later process
/// reusing the pid must be announced afresh, and does not join the family
/// the exiting one belonged to; and the daemon is told when a peek signal
/// is what the process dies of.
#[tracepoint]
pub fn forget_on_exit(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let pid = (pid_tgid >> 32) as u32;
    // Any thread: a later thread with its id has a stack of its own.
    crate::stack_copy::forget_deep_thread(pid_tgid as u32);
    crate::python::forget_thread(pid_tgid as u32);
    if pid == pid_tgid as u32 {
        forget_process(pid);
        crate::python::forget_process(pid);
        crate::families::leave(pid);
        crate::signals::on_exit(pid);
    }
    0
}
