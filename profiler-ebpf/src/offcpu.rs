//! Off-CPU time: where threads wait. On `sched_switch` the task leaving the
//! CPU is still current, so its stacks are copied there (into the same
//! stack-copy ring buffer as CPU samples, unwound the same way) and the
//! start of its wait is kept in a pending map keyed by thread id; its
//! wake-up (`sched_wakeup`) is noted there, and at its next switch-in the
//! interval goes to the daemon, which charges it to that stack.
//!
//! Only the tasks the daemon asked for are recorded (the control map and
//! the off-CPU pids map). The programs are attached only while something
//! is recorded; a switch or wake-up of a task nobody records then costs a
//! few array lookups: per-slot filters tell, before any hash lookup,
//! whether the task's process may be recorded and whether it may have a
//! wait pending.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose: copies only cost BPF \
              stack space"
)]

use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_ANY,
    helpers::generated::{bpf_get_task_stack, bpf_seq_write, bpf_task_pt_regs},
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_ktime_get_ns, bpf_probe_read_kernel,
    },
    macros::{btf_tracepoint, map},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::BtfTracePointContext,
};
use profiler_common::{
    Counter, SampleKind,
    offcpu::{
        Control, FILTER_SLOTS, Interval, Pending, WaitingThread, filter_slot, flags, task_state,
    },
};
use profiler_ebpf::registers::{UserRegisters, registers_at, saved_user_registers};

use crate::{
    KERNEL_LAYOUT,
    announcements::announce_process,
    counters::count,
    global,
    ring_wake::wake_flags,
    stack_copy::{STACK_COPIES, StackCopy, copy_pages, copy_stack},
    task::current_task,
};

/// Byte offset of `task_struct.pid` (the thread id), from the kernel's BTF;
/// 0 when unknown, and the daemon then leaves recording off.
#[inline(always)]
fn task_pid_offset() -> u32 {
    global(&KERNEL_LAYOUT.task_pid)
}

#[map]
static OFFCPU_CONTROL: Array<Control> = Array::with_max_entries(1, 0);

/// Processes recorded in full, by process id (the value is the daemon's).
#[map]
static OFFCPU_PIDS: HashMap<u32, u32> = HashMap::with_max_entries(1024, 0);

/// Tasks off CPU, by thread id. A plain hash, not an LRU: the oldest
/// entries are the long sleepers, the ones that matter most. Sized by the
/// daemon; a full map is counted.
#[map]
static OFFCPU_PENDING: HashMap<u32, Pending> = HashMap::with_max_entries(1024, 0);

/// Per pid slot, the recorded processes in it (the daemon's): a zero slot
/// spares the pids map's lookup.
#[map]
static OFFCPU_PID_SLOTS: Array<u32> = Array::with_max_entries(FILTER_SLOTS, 0);

/// Per tid slot, the waits this program holds pending in it (added to and
/// taken from atomically: tasks of one slot switch on several CPUs at
/// once). A task's own wait keeps its slot above zero, so a zero slot
/// means the task has none and spares the pending map's lookup. One value,
/// so that the daemon zeroes it in one write (with the pending map, while
/// the programs are detached).
#[map]
static OFFCPU_PENDING_SLOTS: Array<[u64; FILTER_SLOTS as usize]> = Array::with_max_entries(1, 0);

/// Per tid slot, non-zero when the daemon put a wait in the pending map
/// (a thread already waiting when recording began): the daemon's own
/// writes, kept apart from the program's atomic counts.
#[map]
static OFFCPU_PENDING_MARKS: Array<u32> = Array::with_max_entries(FILTER_SLOTS, 0);

/// Whether the pending map may hold a wait of thread `tid`.
#[inline(always)]
fn may_be_pending(tid: u32) -> bool {
    let slot = filter_slot(tid);
    OFFCPU_PENDING_SLOTS
        .get(0)
        .is_some_and(|counts| counts[slot as usize] != 0)
        || OFFCPU_PENDING_MARKS
            .get(slot)
            .is_some_and(|mark| *mark != 0)
}

/// Adds `delta` (wrapping: `u64::MAX` takes one) to the pending count of
/// `tid`'s slot.
#[inline(always)]
fn count_pending(tid: u32, delta: u64) {
    if let Some(counts) = OFFCPU_PENDING_SLOTS.get_ptr_mut(0) {
        // SAFETY: a live, aligned u64 of the map's value (the slot is below
        // its length); the add is atomic (the BPF target has the
        // instruction but no atomic types), as other CPUs count the same
        // slot.
        unsafe {
            let count = (&raw mut (*counts)[filter_slot(tid) as usize]);
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
                count, delta,
            )
        };
    }
}

/// Intervals ended by a switch-in, for the daemon. Sized by the daemon.
#[map]
static OFFCPU_INTERVALS: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// `sched_switch(preempt, prev, next, prev_state)`, with `prev` current.
#[btf_tracepoint(function = "sched_switch")]
pub fn record_switch(ctx: BtfTracePointContext) -> i32 {
    on_switch::<true>(ctx)
}

/// [`record_switch`] without Python frames, for the kernels whose
/// verifier cannot check it whole (Linux 6.1 gives up at its million
/// instructions): loaded instead of it there, and said so in `status`.
#[btf_tracepoint(function = "sched_switch")]
pub fn record_switch_without_python(ctx: BtfTracePointContext) -> i32 {
    on_switch::<false>(ctx)
}

/// A switch: `prev` (current) leaves the CPU, `next` takes it; Python
/// frames walked when `PYTHON_FRAMES`.
#[inline(always)]
fn on_switch<const PYTHON_FRAMES: bool>(ctx: BtfTracePointContext) -> i32 {
    count(Counter::Switches);
    let Some(control) = OFFCPU_CONTROL.get(0) else {
        return 0;
    };
    if !control.active() {
        return 0;
    }
    let preempt: u64 = ctx.arg(0);
    let next: u64 = ctx.arg(2);
    let prev_state: u64 = ctx.arg(3);
    switch_out(
        &ctx,
        control,
        preempt & 0xff != 0,
        prev_state as u32,
        PYTHON_FRAMES,
    );
    switch_in(next);
    0
}

/// `sched_wakeup(p)`: the task becomes runnable; from now on a recorded
/// task waits for a CPU. (A thread already waiting when recording began
/// has a pending entry the daemon put there.)
#[btf_tracepoint(function = "sched_wakeup")]
pub fn record_wakeup(ctx: BtfTracePointContext) -> i32 {
    let Some(control) = OFFCPU_CONTROL.get(0) else {
        return 0;
    };
    if !control.active() {
        return 0;
    }
    let task: u64 = ctx.arg(0);
    let Some(tid) = btf_task_id(task) else {
        return 0;
    };
    if !may_be_pending(tid) {
        return 0;
    }
    if let Some(pending) = OFFCPU_PENDING.get_ptr_mut(&tid) {
        // SAFETY: a live entry; the task's own switches and wake-ups are
        // serialised by the scheduler.
        let pending = unsafe { &mut *pending };
        if pending.woken_ns == 0 {
            pending.woken_ns = now_ns();
        }
    }
    0
}

/// A task's id at `offset` in its `task_struct` (its thread id at `pid`,
/// its process id at `tgid`); `None` for the idle tasks or when unknown.
#[inline(always)]
fn task_id(task: u64, offset: u32) -> Option<u32> {
    if task == 0 || offset == 0 {
        return None;
    }
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offset comes from the kernel's BTF.
    let id = unsafe { bpf_probe_read_kernel((task + u64::from(offset)) as *const i32) }.ok()?;
    (id > 0).then_some(id as u32)
}

/// A task's thread id read straight from its `task_struct`, which a
/// `tp_btf` argument lets the program do (the verifier checks the field at
/// the offset, a constant of the frozen globals): cheaper than a
/// `bpf_probe_read_kernel` on every switch and wake-up. `None` for the idle
/// tasks or when the offset is unknown.
#[inline(always)]
fn btf_task_id(task: u64) -> Option<u32> {
    let offset = task_pid_offset();
    if task == 0 || offset == 0 {
        return None;
    }
    // SAFETY: `task` is a `struct task_struct *` argument of the
    // tracepoint, trusted by the verifier, and `offset` is that of its
    // `pid` field (from the kernel's BTF); the verifier checks the access.
    let id = unsafe { core::ptr::read_volatile((task + u64::from(offset)) as *const i32) };
    (id > 0).then_some(id as u32)
}

/// The current task leaves the CPU: if it is recorded, its wait begins.
#[inline(always)]
fn switch_out(
    ctx: &BtfTracePointContext,
    control: &Control,
    preempt: bool,
    state: u32,
    python_frames: bool,
) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // The idle tasks, and tasks that will never run again.
    if tid == 0
        || state & (task_state::DEAD | task_state::ZOMBIE | task_state::DEAD_EXIT) != 0
        || task_pid_offset() == 0
    {
        return;
    }
    let kind = if preempt || state & task_state::REPORT == 0 {
        SampleKind::RunQueue
    } else if state & task_state::UNINTERRUPTIBLE != 0 {
        // An idle kernel wait is not a wait anyone is waiting on.
        if state & task_state::NOLOAD != 0 {
            return;
        }
        SampleKind::OffCpuBlocked
    } else {
        // Interruptible, and the rare stopped or traced task.
        SampleKind::OffCpuSleeping
    };
    let selected = control.pids != 0
        && OFFCPU_PID_SLOTS
            .get(filter_slot(pid))
            .is_some_and(|count| *count != 0)
        && OFFCPU_PIDS.get_ptr(&pid).is_some();
    let mut interval_flags = 0;
    // The chance it was recorded with, for the daemon to scale it back up
    // (0: recorded in full).
    let mut threshold = 0;
    if !selected && control.all == 0 {
        if control.sample_threshold == 0 || random() >= control.sample_threshold {
            return;
        }
        interval_flags |= flags::SAMPLED;
        threshold = control.sample_threshold;
    }
    let task = current_task();
    // Kernel threads only when asked for by pid, or with kernel_threads.
    if !task.user_memory && !selected && control.kernel_threads == 0 {
        return;
    }
    let now = now_ns();
    let pending = Pending {
        pid,
        tid,
        kind: kind as u32,
        flags: interval_flags,
        switched_out_ns: now,
        woken_ns: 0,
    };
    // Any entry left is stale (a wait whose switch-in was not seen):
    // replaced, and its slot's count stays as it was. The count is of this
    // program's entries: one the daemon put there (unknown start) is not
    // in it. A stale wait whose stack was lost is handed over without its
    // end, for the daemon to count its loss (one with its stack is under
    // way there, and abandoned when its thread's next wait shows).
    // SAFETY: the value is copied at once, while the entry is live.
    let stale = unsafe { OFFCPU_PENDING.get(&tid) }.copied();
    let fresh = stale.is_none_or(|stale| stale.flags & flags::UNKNOWN_START != 0);
    if let Some(stale) = stale
        && stale.flags & flags::STACK_LOST != 0
    {
        hand_over(&stale, 0);
    }
    if OFFCPU_PENDING
        .insert(&tid, &pending, BPF_ANY.into())
        .is_err()
    {
        count(Counter::OffCpuPendingFull);
        return;
    }
    if fresh {
        count_pending(tid, 1);
    }
    count(Counter::OffCpuRecorded);
    // A kernel thread's copy has its kernel stack only.
    let (pages, registers) = if task.user_memory {
        (copy_pages(), saved_user_registers())
    } else {
        (0, UserRegisters::UNKNOWN)
    };
    let copy = StackCopy {
        ctx: ctx.as_ptr().cast::<c_void>(),
        walk_kernel: true,
        pid_tgid,
        task,
        kind,
        flags: task.sample_flags(),
        // The chance it was recorded with; its wait is weighed when it
        // ends.
        weight: u64::from(threshold),
        time_ns: now,
        tag: 0,
        registers,
        pages,
        deep_allowed: true,
        wakes_reader: true,
        python_frames,
    };
    let copied = copy_stack(&STACK_COPIES, copy);
    if copied {
        announce_process(pid, task.mm);
    } else {
        count(Counter::OffCpuStackCopyRingFull);
        if let Some(entry) = OFFCPU_PENDING.get_ptr_mut(&tid) {
            // SAFETY: the entry inserted above; only this task's own
            // switch-in and wake-up touch it, and neither can run before
            // this switch-out ends.
            unsafe { (*entry).flags |= flags::STACK_LOST };
        }
    }
}

/// `next` takes the CPU: the interval it was off CPU ends.
#[inline(always)]
fn switch_in(next: u64) {
    let Some(tid) = btf_task_id(next) else {
        return;
    };
    if !may_be_pending(tid) {
        return;
    }
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(pending) = (unsafe { OFFCPU_PENDING.get(&tid) }).copied() else {
        return;
    };
    if OFFCPU_PENDING.remove(&tid).is_ok() && pending.flags & flags::UNKNOWN_START == 0 {
        count_pending(tid, u64::MAX);
    }
    hand_over(&pending, now_ns());
}

/// Hands a wait's interval, ended at `switched_in_ns` (0: its end was not
/// seen), to the daemon.
#[inline(always)]
fn hand_over(pending: &Pending, switched_in_ns: u64) {
    let interval = Interval {
        pid: pending.pid,
        tid: pending.tid,
        kind: pending.kind,
        flags: pending.flags,
        switched_out_ns: pending.switched_out_ns,
        woken_ns: pending.woken_ns,
        switched_in_ns,
    };
    // Woken once a quarter of the ring waits (the daemon reads it at its
    // passes, every 50 ms while waits are recorded).
    if OFFCPU_INTERVALS
        .output::<Interval>(&interval, wake_flags(&OFFCPU_INTERVALS))
        .is_err()
    {
        count(Counter::OffCpuIntervalsFull);
        // Without its stack copy either, the daemon never hears of it.
        if pending.flags & flags::STACK_LOST != 0 {
            count(Counter::OffCpuLostWhole);
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds.
#[inline(always)]
fn now_ns() -> u64 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_ktime_get_ns() }
}

#[inline(always)]
fn random() -> u32 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_get_prandom_u32() }
}

/// The process whose threads the waiting-threads iterator reads, written
/// by the daemon before each read (0: none).
#[map]
static WAITING_PID: Array<u32> = Array::with_max_entries(1, 0);

/// Room for one waiting thread (too big for the BPF stack).
#[map]
static WAITING_SCRATCH: PerCpuArray<WaitingThread> = PerCpuArray::with_max_entries(1, 0);

/// A task iterator (`iter/task`): for each thread of the process in
/// [`WAITING_PID`], writes a [`WaitingThread`] (its saved user registers
/// and kernel stack) to the reader, for the daemon to charge the waits of
/// threads that were already off CPU when recording began.
#[unsafe(link_section = "iter/task")]
#[unsafe(no_mangle)]
pub fn read_waiting_threads(ctx: *mut c_void) -> i32 {
    // SAFETY: the context of a task iterator is `struct bpf_iter__task
    // { struct bpf_iter_meta *meta; struct task_struct *task; }`, whose
    // fields the verifier lets the program read; `meta->seq` is the first
    // field of `struct bpf_iter_meta`.
    let (seq, task) = unsafe {
        let ctx = ctx.cast::<u64>();
        let meta = *ctx as *const u64;
        let task = *ctx.add(1);
        (if meta.is_null() { 0 } else { *meta }, task)
    };
    if task == 0 || seq == 0 {
        return 0;
    }
    let wanted = WAITING_PID.get(0).copied().unwrap_or(0);
    let Some(pid) = task_id(task, global(&KERNEL_LAYOUT.task_tgid)) else {
        return 0;
    };
    if wanted == 0 || pid != wanted {
        return 0;
    }
    let Some(tid) = task_id(task, task_pid_offset()) else {
        return 0;
    };
    let Some(thread) = WAITING_SCRATCH.get_ptr_mut(0) else {
        return 0;
    };
    // SAFETY: this CPU's scratch entry, for this run only; the task
    // pointer comes from the iterator's context, as the helpers require.
    unsafe {
        (*thread).pid = pid;
        (*thread).tid = tid;
        let regs = bpf_task_pt_regs(task as *mut _) as u64;
        let UserRegisters { ip, sp, bp } = registers_at(regs);
        ((*thread).ip, (*thread).sp, (*thread).bp) = (ip, sp, bp);
        let walked = bpf_get_task_stack(
            task as *mut _,
            (&raw mut (*thread).kernel).cast::<c_void>(),
            (profiler_common::MAX_STACK_DEPTH * core::mem::size_of::<u64>()) as u32,
            0,
        );
        (*thread).kernel_len = if walked > 0 {
            (walked as usize / core::mem::size_of::<u64>()) as u32
        } else {
            0
        };
        bpf_seq_write(
            seq as *mut _,
            thread.cast::<c_void>(),
            core::mem::size_of::<WaitingThread>() as u32,
        );
    }
    0
}
