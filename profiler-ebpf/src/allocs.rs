//! Allocation profiling: `allocator_entry` runs at the entry of each
//! allocator function the daemon attached it to (the uprobe's cookie says
//! which, see [`Function`]), `allocator_return` at the return of those that
//! allocate. Both are attached for the profiled processes only, and do
//! nothing for a process not in the targets map.
//!
//! The entry decides whether the allocation is sampled (by bytes or by
//! probability, as its process asks) and keeps the call per thread; the
//! return takes the sampled allocation's address, keeps it in the live map
//! (so that its `free` takes it out) and copies the caller's stack into the
//! allocation ring buffer, to be unwound as CPU samples are. Sampled
//! allocations never write into the stack-copy ring buffer of CPU samples,
//! so no allocation profile can take their room; within the allocation
//! ring, a profile whose records the daemon has not read yet fill its
//! share (written by the daemon: the ring's records over the profiles
//! running) drops its next samples, counted, so that no profile takes
//! another's room either. `free` and `realloc` take their pointer out of
//! the live map. What the daemon reads at the end of a profile: the
//! samples, which of them are still live, and what was dropped, by cause.

#![expect(
    clippy::needless_borrows_for_generic_args,
    reason = "map keys and values are passed by reference on purpose: copies only cost BPF \
              stack space"
)]

use core::ffi::c_void;

use aya_ebpf::{
    EbpfContext as _,
    bindings::BPF_ANY,
    helpers::generated::bpf_get_attach_cookie,
    helpers::{
        bpf_get_current_pid_tgid, bpf_get_prandom_u32, bpf_get_smp_processor_id, bpf_ktime_get_ns,
        bpf_probe_read_user,
    },
    macros::{map, uprobe, uretprobe},
    maps::{Array, HashMap, PerCpuArray, RingBuf},
    programs::{ProbeContext, RetProbeContext},
};
use profiler_common::{
    Counter, SampleKind,
    allocs::{
        Address, COUNT_CALLS_NOT_FOLLOWED, COUNT_RING_FULL, COUNT_RING_FULL_BYTES,
        COUNT_SHARE_FULL, COUNT_SHARE_FULL_BYTES, COUNT_UNTRACKED, COUNT_WRITTEN, Call, Function,
        INTERVAL_SHIFT, INTERVAL_TABLE_LEN, MAX_COUNTED_SIZE, MAX_PROFILED_PROCESSES,
        ProfileCounts, ReadCount, Target, mode,
    },
};
use profiler_ebpf::registers::registers_at;

use crate::{
    announcements::announce_process,
    counters::count,
    stack_copy::{StackCopy, copy_pages, copy_stack},
    task::current_task,
};

/// The profiled processes, by process id. Sized by the daemon.
#[map]
static ALLOC_TARGETS: HashMap<u32, Target> = HashMap::with_max_entries(64, 0);

/// The allocator call under way on each thread of a profiled process, by
/// `pid_tgid`. A full map is counted (the call is then not sampled).
#[map]
static ALLOC_CALLS: HashMap<u64, Call> = HashMap::with_max_entries(16384, 0);

/// The sampled allocations still held, by process and address; the value
/// is the allocation's id (that of its sample). Sized by the daemon.
#[map]
static ALLOC_LIVE: HashMap<Address, u64> = HashMap::with_max_entries(65536, 0);

/// Exponentially distributed intervals of mean `1 << INTERVAL_SHIFT`,
/// written by the daemon: each entry the mean of its quantile slice.
#[map]
static ALLOC_INTERVALS: Array<u32> = Array::with_max_entries(INTERVAL_TABLE_LEN, 0);

/// Sampled allocations, each with its registers and a copy of the top of
/// its user stack (as [`crate::stack_copy::STACK_COPIES`] holds CPU samples),
/// for the daemon to unwind. Sized by the daemon at load time.
#[map]
static ALLOC_STACK_COPIES: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Per profile slot, what came of its profile's samples (zeroed by the
/// daemon as the profile starts; the programs add to it).
#[map]
static ALLOC_COUNTS: Array<ProfileCounts> = Array::with_max_entries(MAX_PROFILED_PROCESSES, 0);

/// Per profile slot, how many of its profile's records the daemon has read
/// (the daemon's writes).
#[map]
static ALLOC_READ: Array<ReadCount> = Array::with_max_entries(MAX_PROFILED_PROCESSES, 0);

/// The records of the allocation ring buffer each profile may hold unread
/// (the daemon's write: the ring's records over the profiles running).
#[map]
static ALLOC_SHARE: Array<u64> = Array::with_max_entries(1, 0);

/// Per CPU, the mean intervals (fixed point) left until the next sampled
/// byte; 0 before the first draw. Memoryless, so processes and threads
/// share it without changing anyone's chances.
#[map]
static ALLOC_COUNTDOWN: PerCpuArray<i64> = PerCpuArray::with_max_entries(1, 0);

#[uprobe]
pub fn allocator_entry(ctx: ProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    let pid = (pid_tgid >> 32) as u32;
    // SAFETY: the helper reads the cookie of the probe this program runs for.
    let cookie = unsafe { bpf_get_attach_cookie(ctx.as_ptr()) };
    let Some(function) = Function::from_cookie(cookie) else {
        return 0;
    };
    let arg = |n: usize| ctx.arg::<u64>(n).unwrap_or(0);
    // The block given back, the bytes asked for, and where a
    // posix_memalign writes the address.
    let (freed, size, out_pointer) = match function {
        Function::Free => (arg(0), 0, 0),
        Function::Malloc => (0, arg(0), 0),
        Function::Calloc => (0, product(arg(0), arg(1)), 0),
        Function::Realloc => (arg(0), arg(1), 0),
        Function::Reallocarray => (arg(0), product(arg(1), arg(2)), 0),
        Function::AlignedAlloc => (0, arg(1), 0),
        Function::PosixMemalign => (0, arg(2), arg(0)),
    };
    // Frees are seen as long as the probe is attached (sampling stops
    // first when a profile ends).
    forget(pid, freed);
    if function == Function::Free {
        return 0;
    }
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(target) = (unsafe { ALLOC_TARGETS.get(&pid) }).copied() else {
        return 0;
    };
    let entry_sp = registers_at(ctx.as_ptr() as u64).sp;
    // SAFETY: the value is copied at once, while the entry is live.
    if let Some(outer) = unsafe { ALLOC_CALLS.get(&pid_tgid) }
        && outer.entry_sp >= entry_sp
    {
        // Called from inside an allocator call under way (at or below its
        // entry): counted with it.
        return 0;
    }
    let call = Call {
        size,
        out_pointer,
        entry_sp,
        sampled: u32::from(sampled(&target, size)),
        reserved: 0,
    };
    if ALLOC_CALLS
        .insert(&pid_tgid, &call, BPF_ANY.into())
        .is_err()
    {
        count(Counter::AllocCallsFull);
        if let Some(counts) = ALLOC_COUNTS.get_ptr_mut(target.slot) {
            add(counts.cast(), COUNT_CALLS_NOT_FOLLOWED, 1);
        }
    }
    0
}

#[uretprobe]
pub fn allocator_return(ctx: RetProbeContext) -> u32 {
    let pid_tgid = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(call) = (unsafe { ALLOC_CALLS.get(&pid_tgid) }).copied() else {
        return 0;
    };
    // Past the return, the stack pointer is just above the return address
    // the call entered with; any other return is a nested call's.
    let return_sp = registers_at(ctx.as_ptr() as u64).sp;
    if return_sp != call.entry_sp + 8 {
        return 0;
    }
    let _ = ALLOC_CALLS.remove(&pid_tgid);
    if call.sampled == 0 {
        return 0;
    }
    let returned: u64 = ctx.ret();
    let address = if call.out_pointer != 0 {
        if returned as u32 != 0 {
            return 0;
        }
        // SAFETY: bpf_probe_read_user fails rather than faulting.
        unsafe { bpf_probe_read_user(call.out_pointer as *const u64) }.unwrap_or(0)
    } else {
        returned
    };
    if address == 0 {
        // The allocation failed: nothing was allocated.
        return 0;
    }
    record(&ctx, pid_tgid, call.size, address);
    0
}

/// Keeps a sampled allocation's address and copies its caller's stack,
/// unless its profile's share of the allocation ring is full.
#[inline(always)]
fn record(ctx: &RetProbeContext, pid_tgid: u64, size: u64, address: u64) {
    let pid = (pid_tgid >> 32) as u32;
    // SAFETY: the value is copied at once, while the entry is live.
    let Some(target) = (unsafe { ALLOC_TARGETS.get(&pid) }).copied() else {
        return;
    };
    let Some(counts_ptr) = ALLOC_COUNTS.get_ptr_mut(target.slot) else {
        return;
    };
    let counts = counts_ptr.cast::<u8>();
    // SAFETY: a live array entry, read once (other CPUs add to it
    // meanwhile: a record more or less, never a wrong share for long).
    let written = unsafe { core::ptr::read_volatile(&raw const (*counts_ptr).written) };
    let read = ALLOC_READ
        .get(target.slot)
        .filter(|read| read.serial == target.serial)
        .map_or(0, |read| read.read);
    let share = ALLOC_SHARE.get(0).copied().unwrap_or(0);
    if written.saturating_sub(read) >= share {
        // The daemon has not read this profile's earlier records yet.
        count(Counter::AllocShareFull);
        add(counts, COUNT_SHARE_FULL, 1);
        add(counts, COUNT_SHARE_FULL_BYTES, size);
        return;
    }
    let id = next_id();
    let key = Address {
        pid,
        reserved: 0,
        address,
    };
    let kept = ALLOC_LIVE.insert(&key, &id, BPF_ANY.into()).is_ok();
    if !kept {
        add(counts, COUNT_UNTRACKED, 1);
    }
    let task = current_task();
    let copy = StackCopy {
        ctx: ctx.as_ptr().cast::<c_void>(),
        // In user code: no kernel stack.
        walk_kernel: false,
        pid_tgid,
        task,
        kind: SampleKind::Allocation,
        flags: task.sample_flags(),
        // Its size, its id (as in the live map), its profile's serial.
        weight: size,
        time_ns: id,
        tag: target.serial,
        registers: registers_at(ctx.as_ptr() as u64),
        pages: copy_pages(),
        // Its ring's records are counted per profile at one size.
        deep_allowed: false,
        wakes_reader: false,
        python_frames: true,
    };
    let copied = copy_stack(&ALLOC_STACK_COPIES, copy);
    if copied {
        add(counts, COUNT_WRITTEN, 1);
        count(Counter::AllocSampled);
        announce_process(pid, task.mm);
    } else {
        count(Counter::AllocStackCopyRingFull);
        add(counts, COUNT_RING_FULL, 1);
        add(counts, COUNT_RING_FULL_BYTES, size);
        if kept {
            let _ = ALLOC_LIVE.remove(&key);
        }
    }
}

/// A pointer given back (`free`, or `realloc`'s old block): a sampled
/// allocation at that address is no longer held.
#[inline(always)]
fn forget(pid: u32, address: u64) {
    if address != 0 {
        let _ = ALLOC_LIVE.remove(&Address {
            pid,
            reserved: 0,
            address,
        });
    }
}

/// Whether an allocation of `size` bytes is sampled, as `target` asks.
#[inline(always)]
fn sampled(target: &Target, size: u64) -> bool {
    if target.mode == mode::RATE {
        return u64::from(random()) < target.threshold;
    }
    let Some(countdown) = ALLOC_COUNTDOWN.get_ptr_mut(0) else {
        return false;
    };
    let mean = target.mean_bytes.max(1);
    let step = ((size.min(MAX_COUNTED_SIZE) << INTERVAL_SHIFT) / mean) as i64;
    // SAFETY: this CPU's slot. A program preempted on it by another
    // thread's may lose an update: a slightly different interval, never a
    // wrong estimate (the daemon scales by the chance, not the count).
    unsafe {
        if *countdown == 0 {
            *countdown = draw_interval();
        }
        *countdown -= step;
        if *countdown > 0 {
            return false;
        }
        *countdown = draw_interval();
    }
    true
}

/// An exponentially distributed interval, in fixed point (at least 1).
#[inline(always)]
fn draw_interval() -> i64 {
    let index = random() % INTERVAL_TABLE_LEN;
    ALLOC_INTERVALS
        .get(index)
        .map_or(1_i64 << INTERVAL_SHIFT, |interval| i64::from(*interval))
        .max(1)
}

/// A new allocation id, unique while the machine runs: the time in
/// nanoseconds with the CPU (no two runs on one CPU read the same
/// nanosecond). Never 0.
#[inline(always)]
fn next_id() -> u64 {
    // SAFETY: helpers without arguments.
    let (now, cpu) = unsafe { (bpf_ktime_get_ns(), bpf_get_smp_processor_id()) };
    (now << 12 | u64::from(cpu) & 0xfff).max(1)
}

/// `count * size`, the bytes of an array (saturated far beyond any real
/// allocation, without the 128-bit multiply BPF lacks).
#[inline(always)]
fn product(count: u64, size: u64) -> u64 {
    count.min(u64::from(u32::MAX)) * size.min(u64::from(u32::MAX))
}

/// Adds `delta` atomically to the `u64` at `offset` bytes into `value` (a
/// map value).
#[inline(always)]
fn add(value: *mut u8, offset: usize, delta: u64) {
    // SAFETY: `value` is a live map value with an aligned u64 at `offset`
    // (the offsets are those of the shared types' fields); the add is
    // atomic, as other CPUs add to the same value (its result unused: the
    // BPF target's plain atomic add).
    unsafe {
        core::intrinsics::atomic_xadd::<u64, u64, { core::intrinsics::AtomicOrdering::Relaxed }>(
            value.add(offset).cast::<u64>(),
            delta,
        );
    }
}

#[inline(always)]
fn random() -> u32 {
    // SAFETY: a helper without arguments.
    unsafe { bpf_get_prandom_u32() }
}
