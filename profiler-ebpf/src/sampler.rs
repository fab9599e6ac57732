//! The CPU-clock sampling programs (system-wide and per peeked thread), the
//! tracepoints that keep process announcements fresh, and the maps they
//! write.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose: a StackTrace by value \
              would not fit on the 512-byte BPF stack, and copies of the others only cost \
              stack space"
)]

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_get_current_uid_gid, bpf_probe_read_kernel,
        generated::{bpf_get_current_task, bpf_get_stack, bpf_probe_read_user},
    },
    macros::{map, perf_event, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{PerfEventContext, TracePointContext},
};
use aya_log_ebpf::error;
use profiler_common::{
    COUNTER_COUNT, Control, Counter, MAX_STACK_COPY_PAGES, MAX_STACK_DEPTH, STACK_COPY_PAGE,
    SampleKey, SampleKind, SampleValue, StackCopyHeader, StackTrace, cred_ids, sample_flags,
    targets,
};

use profiler_ebpf::{
    registers::{interrupted_user_mode, user_registers},
    stacks::{EEXIST, StoredStack, store_stack},
};

use crate::global;

const PAGE_BYTES: u64 = STACK_COPY_PAGE as u64;

/// Sizes below are placeholders: the daemon sizes every map at load time.
const DEFAULT_ENTRIES: u32 = 1024;

#[map]
static CONTROL: Array<Control> = Array::with_max_entries(1, 0);

/// Per CPU: runs of the sampling programs between reading [`CONTROL`]'s
/// generation and their last write into that generation's maps. The
/// daemon reads a generation once every CPU's count is 0 after its flip.
#[map]
static RECORDING: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Byte offsets of the kernel fields that say who may see a sample
/// (`task_struct.real_cred`, `cred.uid`, `task_struct.mm`,
/// `mm_struct.flags`), found by the daemon in the kernel's BTF; 0 when it
/// could not find them, which makes every sample protected.
#[unsafe(no_mangle)]
static TASK_REAL_CRED_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static CRED_IDS_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
pub(crate) static TASK_MM_OFFSET: u32 = 0;
#[unsafe(no_mangle)]
static MM_FLAGS_OFFSET: u32 = 0;
/// Byte offset of `mm_struct.start_stack` (0: unknown, copies untrimmed).
#[unsafe(no_mangle)]
pub(crate) static MM_START_STACK_OFFSET: u32 = 0;

/// Pages of user stack each sample copies into [`STACK_COPIES`] for the
/// daemon to unwind; 0: none (user stacks are walked by frame pointers).
#[unsafe(no_mangle)]
pub(crate) static STACK_COPY_PAGES: u32 = 0;

/// Samples of processes with user memory, each with its registers and a
/// copy of the top of its user stack, for the daemon to unwind with the
/// binaries' unwind information (CPU, peek and off-CPU samples; sampled
/// allocations have a ring of their own). Sized by the daemon at load time.
#[map]
pub(crate) static STACK_COPIES: RingBuf = RingBuf::with_byte_size(4096, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(COUNTER_COUNT, 0);

/// Per-CPU room to walk a stack into (too big for the 512-byte BPF stack).
#[map]
static SCRATCH: PerCpuArray<StackTrace> = PerCpuArray::with_max_entries(1, 0);

#[map]
static COUNTS_0: HashMap<SampleKey, SampleValue> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);
#[map]
static COUNTS_1: HashMap<SampleKey, SampleValue> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);
#[map]
static STACKS_0: HashMap<u64, StackTrace> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);
#[map]
static STACKS_1: HashMap<u64, StackTrace> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);

/// Processes already announced to the daemon.
#[map]
static KNOWN_PIDS: LruHashMap<u32, u8> = LruHashMap::with_max_entries(DEFAULT_ENTRIES, 0);

/// Pids of processes seen for the first time, so the daemon can record their
/// memory mappings while they are alive.
#[map]
static NEW_PROCESSES: RingBuf = RingBuf::with_byte_size(64 * 1024, 0);

/// Threads being peeked at, written by the daemon: 0 until the thread's
/// first peek sample, which is recorded as a [`SampleKind::PeekInstant`].
#[map]
static PEEK_THREADS: HashMap<u32, u32> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);

/// Which processes are sampled ([`targets`] bits; 0: all), set by the
/// daemon at run time.
#[map]
static TARGETS_MODE: Array<u32> = Array::with_max_entries(1, 0);
/// Target process ids, when [`targets::PIDS`] is set.
#[map]
static TARGET_PIDS: HashMap<u32, u8> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);
/// Target cgroup (v2) ids, when [`targets::CGROUPS`] is set; a cgroup
/// targets its descendants too.
#[map]
static TARGET_CGROUPS: HashMap<u64, u8> = HashMap::with_max_entries(DEFAULT_ENTRIES, 0);

#[perf_event]
pub fn sample_cpu(ctx: PerfEventContext) -> u32 {
    if !targeted() {
        count(Counter::OutsideTargets);
        return 0;
    }
    count(Counter::Samples);
    record_in_generation(&ctx, SampleKind::CpuClock);
    0
}

/// Whether the current task is one the daemon wants sampled: the first
/// check of every tick, and all that a task outside the targets costs.
#[inline(always)]
fn targeted() -> bool {
    let mode = TARGETS_MODE.get(0).copied().unwrap_or(0);
    if mode == 0 {
        return true;
    }
    if mode & targets::PIDS != 0 {
        let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
        if TARGET_PIDS.get_ptr(&pid).is_some() {
            return true;
        }
    }
    if mode & targets::CGROUPS != 0 {
        for level in 0..=targets::MAX_CGROUP_LEVEL {
            // SAFETY: a helper that only reads the current task's cgroup.
            let id = unsafe { bpf_get_current_ancestor_cgroup_id(level) };
            if id == 0 {
                break;
            }
            if TARGET_CGROUPS.get_ptr(&id).is_some() {
                return true;
            }
        }
    }
    false
}

/// Runs on the per-thread CPU clocks the daemon opens for a peek: only the
/// peeked threads' ticks reach it.
#[perf_event]
pub fn sample_peek(ctx: PerfEventContext) -> u32 {
    count(Counter::PeekSamples);
    let tid = bpf_get_current_pid_tgid() as u32;
    let mut kind = SampleKind::Peek;
    if let Some(first) = PEEK_THREADS.get_ptr_mut(&tid) {
        // SAFETY: a live entry; only this thread's ticks write it, and a
        // thread is not sampled on two CPUs at once.
        let seen = unsafe { &mut *first };
        if *seen == 0 {
            *seen = 1;
            kind = SampleKind::PeekInstant;
        }
    }
    // One call only: the verifier walks every inlined copy.
    record_in_generation(&ctx, kind);
    0
}

#[inline(always)]
fn record_in_generation(ctx: &PerfEventContext, kind: SampleKind) {
    // Counted before the generation is read, with a locked add (a full
    // barrier on x86): a daemon that flipped the generation and then sees
    // 0 knows every later run reads the new one. (Looked up at each end,
    // not kept across `record`: the verifier would walk it twice.)
    add_to_recording(1);
    let generation = CONTROL.get(0).map_or(0, |control| control.generation);
    // Each generation gets its own call so that every map helper call site
    // sees one constant map, as the verifier prefers.
    if generation == 0 {
        record(ctx, &COUNTS_0, &STACKS_0, kind);
    } else {
        record(ctx, &COUNTS_1, &STACKS_1, kind);
    }
    add_to_recording(u64::MAX);
}

/// Adds `delta` (wrapping: `u64::MAX` takes one away) to this CPU's
/// [`RECORDING`] count with an atomic add.
#[inline(always)]
fn add_to_recording(delta: u64) {
    if let Some(count) = RECORDING.get_ptr_mut(0) {
        // SAFETY: a live per-CPU map value, aligned; the add is atomic
        // (the BPF target's plain atomic add, its result unused) so that
        // it orders this run's reads and writes around it.
        unsafe {
            core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::SeqCst }>(
                count, delta,
            );
        }
    }
}

#[inline(always)]
fn record(
    ctx: &PerfEventContext,
    counts: &HashMap<SampleKey, SampleValue>,
    stacks: &HashMap<u64, StackTrace>,
    kind: SampleKind,
) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let pid = (pid_tgid >> 32) as u32;
    let tid = pid_tgid as u32;
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        count(Counter::LostNoScratch);
        error!(ctx, "per-CPU scratch buffer missing; sample dropped");
        return;
    };
    // SAFETY: this CPU's scratch entry, for this run only (the program
    // does not nest on one CPU).
    let scratch = unsafe { &mut *scratch };

    let (uid, gid, protected, user_memory, main_stack_top) = credentials();
    let mut flags = if protected {
        sample_flags::PROTECTED
    } else {
        0
    };
    let pages = global(&STACK_COPY_PAGES).min(MAX_STACK_COPY_PAGES);
    // Kernel threads and the idle tasks (pid 0) have no user memory.
    let copy_failed = if pages != 0 && user_memory {
        if copy_stack(
            &STACK_COPIES,
            ctx.as_ptr(),
            !interrupted_user_mode(ctx),
            (pid_tgid, kind as u32, flags, (uid, gid)),
            || {
                // SAFETY: the context of a perf_event program is a
                // bpf_perf_event_data.
                (unsafe { (*ctx.ctx).sample_period }, 0, 0)
            },
            || user_registers(ctx),
            (pages, main_stack_top),
        ) {
            count(Counter::StackCopies);
            announce_process(pid);
            return;
        }
        // The daemon is behind: count the sample, without its stacks.
        count(Counter::StackCopyRingFull);
        true
    } else {
        false
    };
    let (user_stack, kernel_stack) = if copy_failed {
        flags |= sample_flags::USER_STACK_LOST | sample_flags::KERNEL_STACK_LOST;
        (0, 0)
    } else {
        let user_stack = stack_key(
            store_stack(ctx, stacks, scratch, true),
            &mut flags,
            sample_flags::USER_STACK_TRUNCATED,
            sample_flags::USER_STACK_LOST,
        );
        // A tick that interrupted user mode has no kernel stack: skip the walk.
        let kernel_stack = if interrupted_user_mode(ctx) {
            0
        } else {
            stack_key(
                store_stack(ctx, stacks, scratch, false),
                &mut flags,
                sample_flags::KERNEL_STACK_TRUNCATED,
                sample_flags::KERNEL_STACK_LOST,
            )
        };
        (user_stack, kernel_stack)
    };

    let key = SampleKey {
        pid,
        tid,
        user_stack,
        kernel_stack,
        comm: bpf_get_current_comm().unwrap_or([0; 16]),
        kind: kind as u32,
        flags,
        uid,
        gid,
        // SAFETY: a helper that only reads the current task's cgroup.
        cgroup: unsafe { bpf_get_current_cgroup_id() },
    };
    // SAFETY: the context of a perf_event program is a bpf_perf_event_data.
    let period = unsafe { (*ctx.ctx).sample_period };
    if !add_to(counts, &key, period) {
        let fresh = SampleValue {
            count: 1,
            weight: period,
        };
        match counts.insert(&key, &fresh, BPF_NOEXIST.into()) {
            // A new key, so perhaps a new process: the only place it can be.
            Ok(()) if pid != 0 => announce_process(pid),
            Ok(()) => {}
            // Another CPU inserted the same key first (a migrated thread).
            Err(err) if err == -EEXIST => {
                if !add_to(counts, &key, period) {
                    count(Counter::LostCountsMapFull);
                }
            }
            Err(_) => count(Counter::LostCountsMapFull),
        }
    }
}

/// The current task's real user and group ids, and whether only root and
/// the admin group may see its samples: the kernel's own rule for who may
/// trace a task (`ptrace_may_access`) lets its owner do so only when its
/// real, effective and saved ids are all the same and it is dumpable.
/// Also says whether the task has user memory (false for kernel threads;
/// true when the kernel's layout is unknown) and where the frames of its
/// process's main thread end (`mm_struct.start_stack`; 0 if unknown).
#[inline(always)]
pub(crate) fn credentials() -> (u32, u32, bool, bool, u64) {
    let ids = bpf_get_current_uid_gid();
    let (uid, gid) = (ids as u32, (ids >> 32) as u32);
    let (cred_offset, ids_offset) = (global(&TASK_REAL_CRED_OFFSET), global(&CRED_IDS_OFFSET));
    let (mm_offset, flags_offset) = (global(&TASK_MM_OFFSET), global(&MM_FLAGS_OFFSET));
    if cred_offset == 0 || ids_offset == 0 || mm_offset == 0 || flags_offset == 0 {
        return (uid, gid, true, true, 0);
    }
    // SAFETY: a helper without arguments.
    let task = unsafe { bpf_get_current_task() };
    // SAFETY: bpf_probe_read_kernel reads kernel memory and fails (rather
    // than faulting) on a bad address; the offsets come from the kernel's BTF.
    let Ok(cred) =
        (unsafe { bpf_probe_read_kernel((task + u64::from(cred_offset)) as *const u64) })
    else {
        return (uid, gid, true, true, 0);
    };
    // SAFETY: as above.
    let Ok([uid, gid, suid, sgid, euid, egid]) =
        (unsafe { bpf_probe_read_kernel((cred + u64::from(ids_offset)) as *const [u32; 6]) })
    else {
        return (uid, gid, true, true, 0);
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
    let user_memory = !matches!(mm, Ok(0));
    let start_stack_offset = global(&MM_START_STACK_OFFSET);
    let main_stack_top = match mm {
        Ok(mm) if mm != 0 && start_stack_offset != 0 => {
            // SAFETY: as above.
            unsafe { bpf_probe_read_kernel((mm + u64::from(start_stack_offset)) as *const u64) }
                .unwrap_or(0)
        }
        _ => 0,
    };
    (uid, gid, mixed || !dumpable, user_memory, main_stack_top)
}

/// Writes one sample into `ring` (the stack-copy ring buffer, or the
/// allocation ring buffer): its key, weight (and for an off-CPU record,
/// when its task was switched out; for an allocation, its id and its
/// profile's serial), kernel stack (walked from `ctx` when `walk_kernel`),
/// user registers and `pages` pages of user stack from the one holding the
/// stack pointer, fewer when the main thread's frames (which end at
/// `main_stack_top`) take fewer. False when the ring buffer is full.
#[inline(always)]
pub(crate) fn copy_stack(
    ring: &RingBuf,
    ctx: *mut c_void,
    walk_kernel: bool,
    (pid_tgid, kind, flags, (uid, gid)): (u64, u32, u32, (u32, u32)),
    weights: impl FnOnce() -> (u64, u64, u64),
    registers: impl FnOnce() -> (u64, u64, u64),
    (pages, main_stack_top): (u32, u64),
) -> bool {
    const HEADER: usize = size_of::<StackCopyHeader>();
    // `pages` comes from a frozen global: the verifier knows this size.
    let size = HEADER + pages as usize * STACK_COPY_PAGE;
    let Some(mut entry) = ring.reserve_bytes(size, 0) else {
        return false;
    };
    let record = entry.as_mut_ptr();
    let header = record.cast::<StackCopyHeader>();
    let (ip, sp, bp) = registers();
    let (weight, switched_out_ns, tag) = weights();
    let base = sp & !(STACK_COPY_PAGE as u64 - 1);
    // SAFETY: the reservation holds a header and `pages` pages; the ring
    // buffer's records are 8-byte aligned.
    unsafe {
        (*header).key = SampleKey {
            pid: (pid_tgid >> 32) as u32,
            tid: pid_tgid as u32,
            user_stack: 0,
            kernel_stack: 0,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
            kind,
            flags,
            uid,
            gid,
            // SAFETY: a helper that only reads the current task's cgroup.
            cgroup: bpf_get_current_cgroup_id(),
        };
        (*header).weight = weight;
        (*header).switched_out_ns = switched_out_ns;
        // Volatile: LLVM would merge two zero stores side by side into a
        // call to memset, a loop the verifier walks on every path.
        core::ptr::write_volatile(&raw mut (*header).tag, tag);
        (*header).ip = ip;
        (*header).sp = sp;
        (*header).bp = bp;
        (*header).stack_base = base;
        (*header).kernel_len = 0;
    }
    if walk_kernel {
        // SAFETY: the header's kernel array holds MAX_STACK_DEPTH u64s.
        let walked = unsafe {
            bpf_get_stack(
                ctx,
                (&raw mut (*header).kernel).cast::<c_void>(),
                (MAX_STACK_DEPTH * size_of::<u64>()) as u32,
                0,
            )
        };
        if walked > 0 {
            // SAFETY: as above.
            unsafe { (*header).kernel_len = (walked as usize / size_of::<u64>()) as u32 };
        }
    }
    // The main thread's frames end below its arguments: nothing above
    // them helps unwinding (other threads' stacks are elsewhere, and copied
    // whole).
    let wanted = if sp < main_stack_top && main_stack_top - sp < u64::from(pages) * PAGE_BYTES {
        ((main_stack_top + 8 - base).div_ceil(PAGE_BYTES)) as u32
    } else {
        pages
    };
    let mut copied = 0_u32;
    for page in 0..MAX_STACK_COPY_PAGES {
        if page >= pages || page >= wanted || sp == 0 {
            break;
        }
        let offset = HEADER + page as usize * STACK_COPY_PAGE;
        // SAFETY: `offset + STACK_COPY_PAGE <= size` since `page < pages`;
        // bpf_probe_read_user fails (rather than faulting) on an address it
        // cannot read, which ends the copy.
        let failed = unsafe {
            bpf_probe_read_user(
                record.add(offset).cast::<c_void>(),
                STACK_COPY_PAGE as u32,
                (base + u64::from(page) * STACK_COPY_PAGE as u64) as *const c_void,
            )
        } != 0;
        if failed {
            break;
        }
        copied += STACK_COPY_PAGE as u32;
    }
    // SAFETY: as above.
    unsafe { (*header).stack_len = copied };
    entry.submit(aya_ebpf::bindings::BPF_RB_NO_WAKEUP.into());
    true
}

/// The key a sample refers to its stack by, noting in `flags` a truncated
/// stack or (counting the loss) a lost one.
#[inline(always)]
pub(crate) fn stack_key(
    stored: Result<StoredStack, Counter>,
    flags: &mut u32,
    truncated_flag: u32,
    lost_flag: u32,
) -> u64 {
    match stored {
        Ok(stored) => {
            if stored.truncated {
                *flags |= truncated_flag;
            }
            stored.key
        }
        Err(loss) => {
            count(loss);
            *flags |= lost_flag;
            0
        }
    }
}

/// Adds one sample to an existing counts entry; false if there is none.
#[inline(always)]
fn add_to(counts: &HashMap<SampleKey, SampleValue>, key: &SampleKey, period: u64) -> bool {
    let Some(value) = counts.get_ptr_mut(key) else {
        return false;
    };
    // SAFETY: `value` points into a live map entry. No other CPU updates it
    // at the same time: the key holds the thread id (and for the per-CPU idle
    // tasks, which share tid 0, the distinct comm "swapper/N"), and a thread
    // cannot be sampled on a second CPU before the tick on this one has
    // returned and let it be scheduled away. The BPF target has no
    // fetch-and-add in stable Rust, and this needs none.
    unsafe {
        (*value).count += 1;
        (*value).weight += period;
    }
    true
}

/// On `sched:sched_process_exec`: the process's memory map changes, so
/// announce it again on its next sample.
#[tracepoint]
pub fn forget_on_exec(_ctx: TracePointContext) -> u32 {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let _ = KNOWN_PIDS.remove(&pid);
    0
}

/// On `sched:sched_process_exit` of a thread-group leader: a later process
/// reusing the pid must be announced afresh, and does not join the family
/// the exiting one belonged to; and the daemon is told when a peek signal
/// is what the process dies of.
#[tracepoint]
pub fn forget_on_exit(_ctx: TracePointContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let pid = (pid_tgid >> 32) as u32;
    if pid == pid_tgid as u32 {
        let _ = KNOWN_PIDS.remove(&pid);
        let _ = crate::families::FOLLOWED.remove(&pid);
        crate::signals::on_exit(pid);
    }
    0
}

#[inline(always)]
pub(crate) fn announce_process(pid: u32) {
    if KNOWN_PIDS.get_ptr(&pid).is_some() {
        return;
    }
    // Only the CPU whose insert wins announces the process.
    if KNOWN_PIDS.insert(&pid, &0, BPF_NOEXIST.into()).is_err() {
        return;
    }
    if NEW_PROCESSES.output::<u32>(&pid, 0).is_err() {
        count(Counter::LostProcessNotification);
        // Forget it, so that a later sample tries again.
        let _ = KNOWN_PIDS.remove(&pid);
    }
}

#[inline(always)]
pub(crate) fn count(counter: Counter) {
    if let Some(slot) = COUNTERS.get_ptr_mut(counter as u32) {
        // SAFETY: per-CPU slot; this program does not nest on one CPU.
        unsafe { *slot += 1 };
    }
}
