//! The peek signal: the tracepoint that passes every peek signal on to the
//! daemon, and the LSM guard that keeps a peek signal from killing a process
//! that has no handler for it (where the kernel accepts BPF LSM programs).

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task, bpf_ktime_get_ns,
        bpf_probe_read_kernel,
    },
    macros::{lsm, map, tracepoint},
    maps::{LruHashMap, RingBuf},
    programs::{LsmContext, TracePointContext},
};
use profiler_common::{Counter, PeekSignal, TASK_COMM_LEN, peek_signal_result, signal_generate};

use crate::{global, sampler::count};

/// The peek signal's number, set by the daemon at load time; 0 turns
/// peeks by signal off.
#[unsafe(no_mangle)]
static PEEK_SIGNAL_NUMBER: u32 = 0;

/// Byte offsets of the kernel fields the guard reads, found by the daemon
/// in the kernel's BTF (aya programs have no CO-RE relocations); all 0
/// when it could not find them, which keeps the guard off.
#[unsafe(no_mangle)]
pub(crate) static TASK_TGID_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static TASK_SIGHAND_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static SIGHAND_ACTION_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static K_SIGACTION_SIZE: u32 = 0;
#[unsafe(no_mangle)]
static HANDLER_OFFSET: u32 = 0;

/// Where the exit tracepoint finds the code a process exits with
/// (`task_struct.signal`, `signal_struct.group_exit_code`); 0 when not found.
#[unsafe(no_mangle)]
static TASK_SIGNAL_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static GROUP_EXIT_CODE_OFFSET: u32 = 0;

/// Peek signals on their way to the daemon.
#[map]
static PEEK_SIGNALS: RingBuf = RingBuf::with_byte_size(16 * 1024, 0);

/// Processes a peek signal was delivered to, and the signal: if one exits
/// by it, the daemon is told (it had no handler for it).
#[map]
static PEEK_SIGNALLED: LruHashMap<u32, u32> = LruHashMap::with_max_entries(1024, 0);

const EPERM: i32 = 1;

/// On `signal:signal_generate`: passes every peek signal on to the daemon,
/// whoever sent it to whom and whatever the kernel did with it.
#[tracepoint]
pub fn watch_signals(ctx: TracePointContext) -> u32 {
    let peek_signal = global(&PEEK_SIGNAL_NUMBER);
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
    let (signal_offset, code_offset) =
        (global(&TASK_SIGNAL_OFFSET), global(&GROUP_EXIT_CODE_OFFSET));
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
    let peek_signal = global(&PEEK_SIGNAL_NUMBER);
    let action_size = global(&K_SIGACTION_SIZE);
    if peek_signal == 0 || signal != peek_signal as i32 || !(1..=64).contains(&signal) {
        return 0;
    }
    if action_size == 0 || task == 0 {
        return 0;
    }
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offsets come from the kernel's BTF.
    let sighand = unsafe {
        bpf_probe_read_kernel((task + u64::from(global(&TASK_SIGHAND_OFFSET))) as *const u64)
    };
    let Ok(sighand) = sighand else { return 0 };
    if sighand == 0 {
        return 0;
    }
    let handler_address = sighand
        + u64::from(global(&SIGHAND_ACTION_OFFSET))
        + (signal as u64 - 1) * u64::from(action_size)
        + u64::from(global(&HANDLER_OFFSET));
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
        bpf_probe_read_kernel((task + u64::from(global(&TASK_TGID_OFFSET))) as *const i32)
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

#[inline(always)]
fn pass_on(target: u32, signal: u32, group: u32, result: i32, target_comm: [u8; TASK_COMM_LEN]) {
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
