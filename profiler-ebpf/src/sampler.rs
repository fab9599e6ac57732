//! The CPU-clock sampler (the sample source): `sample_cpu`, on every tick
//! of the software CPU clock on every CPU, records the current task (if
//! the daemon's targets include it) into the stack-copy ring buffer when
//! it has user memory and stacks are copied, and otherwise aggregates it
//! in the kernel, into the generation of maps the daemon selected. The
//! peek sampler (`peek`) records its samples the same way.
//!
//! Owns the aggregated maps (control, recording counts, counts and stacks
//! of both generations, the scratch room), and the targets maps.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose: a StackTrace by value \
              would not fit on the 512-byte BPF stack, and copies of the others only cost \
              stack space"
)]

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_NOEXIST,
    helpers::{
        bpf_get_current_ancestor_cgroup_id, bpf_get_current_cgroup_id, bpf_get_current_comm,
        bpf_get_current_pid_tgid, bpf_ktime_get_ns,
    },
    macros::{map, perf_event},
    maps::{Array, HashMap, PerCpuArray},
    programs::PerfEventContext,
};
use aya_log_ebpf::error;
use profiler_common::{
    Control, Counter, SampleKey, SampleKind, SampleValue, StackTrace, sample_flags, targets,
};
use profiler_ebpf::{
    registers::{interrupted_user_mode, user_registers},
    stacks::{EEXIST, StoredStack, store_stack},
};

use crate::{
    announcements::announce_process,
    counters::count,
    stack_copy::{STACK_COPIES, StackCopy, copy_pages, copy_stack},
    task::current_task,
};

/// Sizes below are placeholders: the daemon sizes every map at load time.
const DEFAULT_ENTRIES: u32 = 1024;

#[map]
static CONTROL: Array<Control> = Array::with_max_entries(1, 0);

/// Per CPU: runs of the sampling programs between reading [`CONTROL`]'s
/// generation and their last write into that generation's maps. The
/// daemon reads a generation once every CPU's count is 0 after its flip.
#[map]
static RECORDING: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

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

/// Records one sample of `kind` into the generation of maps the daemon
/// selected (or its stacks into the stack-copy ring buffer).
#[inline(always)]
pub(crate) fn record_in_generation(ctx: &PerfEventContext, kind: SampleKind) {
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
    // SAFETY: the context of a perf_event program is a bpf_perf_event_data.
    let period = unsafe { (*ctx.ctx).sample_period };

    let task = current_task();
    let mut flags = task.sample_flags();
    let pages = copy_pages();
    // Kernel threads and the idle tasks (pid 0) have no user memory.
    let copy_failed = if pages != 0 && task.user_memory {
        let copy = StackCopy {
            ctx: ctx.as_ptr(),
            walk_kernel: !interrupted_user_mode(ctx),
            pid_tgid,
            task,
            kind,
            flags,
            weight: period,
            // When the tick was taken: a timeline (the Firefox Profiler's
            // format) places each peek sample at its own time.
            // SAFETY: a helper that only reads the clock.
            time_ns: unsafe { bpf_ktime_get_ns() },
            tag: 0,
            registers: user_registers(ctx),
            pages,
            deep_allowed: true,
            wakes_reader: true,
            python_frames: true,
        };
        if copy_stack(&STACK_COPIES, copy) {
            count(Counter::StackCopies);
            announce_process(pid, task.mm);
            return;
        }
        // The daemon is behind: count the sample, without its stacks.
        count(Counter::StackCopyRingFull);
        true
    } else {
        false
    };
    let (user_stack, kernel_stack) = if copy_failed {
        flags |= sample_flags::USER_STACK_LOST
            | sample_flags::KERNEL_STACK_LOST
            | sample_flags::STACK_COPY_RING_FULL;
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
        uid: task.uid,
        gid: task.gid,
        // SAFETY: a helper that only reads the current task's cgroup.
        cgroup: unsafe { bpf_get_current_cgroup_id() },
    };
    if !add_to(counts, &key, period) {
        let fresh = SampleValue {
            count: 1,
            weight: period,
        };
        match counts.insert(&key, &fresh, BPF_NOEXIST.into()) {
            // A new key, so perhaps a new process: the only place it can be.
            Ok(()) if pid != 0 => announce_process(pid, task.mm),
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

/// The key a sample refers to its stack by, noting in `flags` a truncated
/// stack or (counting the loss) a lost one.
#[inline(always)]
fn stack_key(
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
