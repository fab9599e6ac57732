//! The peek signal watcher: the tracepoint that passes every peek signal
//! on to the daemon, and tells it when a process a peek signal was
//! delivered to dies of it (from the exit tracepoint, `lifecycle`). The
//! guard that keeps a peek signal from killing a process without a handler
//! (`signal_guard`) passes on what it intercepts through here too.
//!
//! Owns the peek signal's number, the ring buffer of peek signals and the
//! processes they were delivered to.

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{map, tracepoint},
    maps::{LruHashMap, RingBuf},
    programs::TracePointContext,
};
use profiler_common::{Counter, PeekSignal, TASK_COMM_LEN, peek_signal_result, signal_generate};

use crate::{KERNEL_LAYOUT, counters::count, global};

/// The peek signal's number, set by the daemon at load time; 0 turns
/// peeks by signal off.
#[unsafe(no_mangle)]
static PEEK_SIGNAL_NUMBER: u32 = 0;

/// The peek signal's number (0: peeks by signal are off).
#[inline(always)]
pub(crate) fn peek_signal() -> u32 {
    global(&PEEK_SIGNAL_NUMBER)
}

/// Peek signals on their way to the daemon.
#[map]
static PEEK_SIGNALS: RingBuf = RingBuf::with_byte_size(16 * 1024, 0);

/// Processes a peek signal was delivered to, and the signal: if one exits
/// by it, the daemon is told (it had no handler for it).
#[map]
static PEEK_SIGNALLED: LruHashMap<u32, u32> = LruHashMap::with_max_entries(1024, 0);

/// On `signal:signal_generate`: passes every peek signal on to the daemon,
/// whoever sent it to whom and whatever the kernel did with it.
#[tracepoint]
pub fn watch_signals(ctx: TracePointContext) -> u32 {
    let peek_signal = peek_signal();
    // SAFETY: the offsets are those of the tracepoint's format.
    let signal = unsafe { ctx.read_at::<i32>(signal_generate::SIG) }.unwrap_or(0);
    if peek_signal == 0 || signal != peek_signal as i32 {
        return 0;
    }
    // SAFETY: as above.
    let (target, group, result, target_comm) = unsafe {
        (
            ctx.read_at::<i32>(signal_generate::PID).unwrap_or(0),
            ctx.read_at::<i32>(signal_generate::GROUP).unwrap_or(0),
            ctx.read_at::<i32>(signal_generate::RESULT).unwrap_or(0),
            ctx.read_at::<[u8; TASK_COMM_LEN]>(signal_generate::COMM)
                .unwrap_or([0; TASK_COMM_LEN]),
        )
    };
    let target = target as u32;
    pass_on(target, signal as u32, group as u32, result, target_comm);
    let _ = PEEK_SIGNALLED.insert(target, signal as u32, 0);
    0
}

/// Called when the thread-group leader `pid` exits: if a peek signal was
/// delivered to it and is what it dies of, tells the daemon.
#[inline(always)]
pub(crate) fn on_exit(pid: u32) {
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(&signal) = (unsafe { PEEK_SIGNALLED.get(pid) }) else {
        return;
    };
    let _ = PEEK_SIGNALLED.remove(pid);
    let (signal_offset, code_offset) = (
        global(&KERNEL_LAYOUT.task_signal),
        global(&KERNEL_LAYOUT.group_exit_code),
    );
    if signal_offset == 0 || code_offset == 0 {
        return;
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offsets come from the kernel's BTF.
    let Ok(signal_struct) =
        (unsafe { bpf_probe_read_kernel((task + u64::from(signal_offset)) as *const u64) })
    else {
        return;
    };
    // SAFETY: as above.
    let Ok(code) =
        (unsafe { bpf_probe_read_kernel((signal_struct + u64::from(code_offset)) as *const i32) })
    else {
        return;
    };
    // The low 7 bits of an exit code are the signal that ended the process.
    if code & 0x7f == signal as i32 {
        let comm = bpf_get_current_comm().unwrap_or([0; TASK_COMM_LEN]);
        pass_on(pid, signal, 1, peek_signal_result::KILLED, comm);
    }
}

/// Passes a peek signal on to the daemon, or counts it lost.
#[inline(always)]
pub(crate) fn pass_on(
    target: u32,
    signal: u32,
    group: u32,
    result: i32,
    target_comm: [u8; TASK_COMM_LEN],
) {
    count(Counter::PeekSignals);
    let pid_tgid = bpf_get_current_pid_tgid();
    let event = PeekSignal {
        target,
        signal,
        sender_pid: (pid_tgid >> 32) as u32,
        sender_tid: pid_tgid as u32,
        result,
        group,
        // SAFETY: a helper without arguments.
        time_ns: unsafe { bpf_ktime_get_ns() },
        sender_comm: bpf_get_current_comm().unwrap_or([0; TASK_COMM_LEN]),
        target_comm,
    };
    if PEEK_SIGNALS.output::<PeekSignal>(&event, 0).is_err() {
        count(Counter::LostPeekSignal);
    }
}
