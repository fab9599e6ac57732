//! Stack copies: one record per sample in a ring buffer (the stack-copy
//! ring buffer of CPU, peek and off-CPU samples, or the allocation ring
//! buffer), with the sample's identity and weight, its kernel stack, its
//! user registers and its user stack from the stack pointer up, a page's
//! worth at a time, for the daemon to unwind with the binaries' unwind
//! information.
//!
//! Owns the stack-copy ring buffer and the number of pages a copy takes
//! (both set by the daemon); the allocation ring buffer is `allocs`'.

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm,
        generated::{bpf_get_stack, bpf_probe_read_user},
    },
    macros::map,
    maps::{LruHashMap, RingBuf},
};
use profiler_common::{
    DEEP_THREADS_ENTRIES, MAX_STACK_COPY_PAGES, MAX_STACK_DEPTH, STACK_COPY_PAGE, SampleKey,
    SampleKind, StackCopyHeader, deep_thread_pages,
    python::{PYTHON_SLOTS_BYTES, status as python_status},
};
use profiler_ebpf::registers::UserRegisters;

use crate::{global, ring_wake::wake_flags, task::CurrentTask};

const PAGE_BYTES: u64 = STACK_COPY_PAGE as u64;

/// The x86-64 ABI's red zone below the stack pointer.
const RED_ZONE: u64 = 128;

/// Pages of user stack each sample copies for the daemon to unwind; 0:
/// none (user stacks are walked by frame pointers). Set by the daemon.
#[unsafe(no_mangle)]
static STACK_COPY_PAGES: u32 = 0;

/// Samples of processes with user memory, each with its registers and a
/// copy of the top of its user stack, for the daemon to unwind with the
/// binaries' unwind information (CPU, peek and off-CPU samples; sampled
/// allocations have a ring of their own). Sized by the daemon at load time.
#[map]
pub(crate) static STACK_COPIES: RingBuf = RingBuf::with_byte_size(4096, 0);

/// Threads whose stacks the daemon found deeper than a copy, and the top
/// of each one's stack (the end of the mapping holding it): their copies
/// take [`deep_thread_pages`] and end there. Named by the daemon;
/// forgotten when the thread exits, or when the least recently named of
/// more than [`DEEP_THREADS_ENTRIES`].
#[map]
pub(crate) static DEEP_THREADS: LruHashMap<u32, u64> =
    LruHashMap::with_max_entries(DEEP_THREADS_ENTRIES, 0);

/// Forgets thread `tid` as a deep thread (it exits).
#[inline(always)]
pub(crate) fn forget_deep_thread(tid: u32) {
    let _ = DEEP_THREADS.remove(tid);
}

/// Pages of user stack a copy takes (0: the programs copy no stacks).
#[inline(always)]
pub(crate) fn copy_pages() -> u32 {
    global(&STACK_COPY_PAGES).min(MAX_STACK_COPY_PAGES)
}

/// One sample to copy into a ring buffer.
pub(crate) struct StackCopy {
    /// The program's context, which the kernel stack is walked from.
    pub(crate) ctx: *mut c_void,
    /// Whether to walk the kernel stack (not for a tick that interrupted
    /// user mode, nor at a uprobe).
    pub(crate) walk_kernel: bool,
    /// The task (`bpf_get_current_pid_tgid`), its ids and who may see it.
    pub(crate) pid_tgid: u64,
    pub(crate) task: CurrentTask,
    pub(crate) kind: SampleKind,
    /// [`profiler_common::sample_flags`] bits.
    pub(crate) flags: u32,
    /// As [`StackCopyHeader`]'s `weight`, `time_ns` and `tag`.
    pub(crate) weight: u64,
    pub(crate) time_ns: u64,
    pub(crate) tag: u64,
    /// The user registers unwinding starts from.
    pub(crate) registers: UserRegisters,
    /// Pages of user stack to copy at most (fewer when the main thread's
    /// frames, which end at the task's `main_stack_top`, take fewer).
    pub(crate) pages: u32,
    /// Whether a deep thread's copy may be larger (not in the allocation
    /// ring, whose records are all of one size).
    pub(crate) deep_allowed: bool,
    /// Whether a ring a quarter full wakes its reader (`ring_wake`); not
    /// the allocation ring's, whose profiles' shares assume the daemon
    /// reads it at its own pace.
    pub(crate) wakes_reader: bool,
    /// Whether to walk a Python process's frames (a constant of each
    /// program: not in `record_switch_without_python`).
    pub(crate) python_frames: bool,
}

/// Writes `copy` into `ring` (the stack-copy ring buffer, or the
/// allocation ring buffer): its key and weights, its kernel stack, its
/// user registers and its user stack's pages. False when the ring buffer
/// is full.
#[inline(always)]
pub(crate) fn copy_stack(ring: &RingBuf, copy: StackCopy) -> bool {
    const HEADER: usize = size_of::<StackCopyHeader>();
    let tid = copy.pid_tgid as u32;
    // A deep thread's copy is larger and ends at its stack's top; the main
    // thread's ends above its frames (and is made deep below, without a
    // look-up).
    let main_thread = (copy.pid_tgid >> 32) as u32 == tid;
    let deep = if copy.deep_allowed && !main_thread {
        DEEP_THREADS.get_ptr(tid)
    } else {
        None
    };
    let main_top = copy.task.main_stack_top;
    // A main thread's frames end at its arguments, known here: one deeper
    // than a copy takes a deep thread's at once, from its first sample (a
    // short-lived program deep from its start, as Python while it imports,
    // would lose its samples to a too short copy until the daemon named it
    // deep).
    let deep_main = main_thread
        && copy.deep_allowed
        && copy.registers.sp != 0
        && main_top > copy.registers.sp
        && main_top - copy.registers.sp >= u64::from(copy.pages) * PAGE_BYTES;
    let (pages, top) = match deep {
        // SAFETY: a value of the map, read at once.
        Some(top) if copy.pages != 0 => (deep_thread_pages(copy.pages), unsafe { *top }),
        _ if deep_main && copy.pages != 0 => (deep_thread_pages(copy.pages), main_top),
        _ => (copy.pages, main_top),
    };
    let top = if main_thread { main_top } else { top };
    // A process whose interpreter the daemon found: its Python frames go
    // after the stack's pages (the allocation ring's records are counted
    // at the size of one with them).
    let python = if copy.python_frames {
        crate::python::layout_of((copy.pid_tgid >> 32) as u32)
    } else {
        None
    };
    // `pages` comes from a frozen global (either way): the verifier knows
    // this size on each path.
    let stack_end = HEADER + pages as usize * STACK_COPY_PAGE;
    let size = if python.is_some() {
        stack_end + PYTHON_SLOTS_BYTES
    } else {
        stack_end
    };
    let Some(mut entry) = ring.reserve_bytes(size, 0) else {
        return false;
    };
    let record = entry.as_mut_ptr();
    let header = record.cast::<StackCopyHeader>();
    let UserRegisters { ip, sp, bp } = copy.registers;
    // The copy starts at the stack pointer's red zone (128 bytes below
    // it, where a leaf function may keep data and where glibc's vfork
    // keeps its return address while the child runs): nothing further
    // below is a frame.
    let base = sp.saturating_sub(RED_ZONE);
    // SAFETY: the reservation holds a header and `pages` pages; the ring
    // buffer's records are 8-byte aligned.
    unsafe {
        (*header).key = SampleKey {
            pid: (copy.pid_tgid >> 32) as u32,
            tid: copy.pid_tgid as u32,
            user_stack: 0,
            kernel_stack: 0,
            comm: bpf_get_current_comm().unwrap_or([0; 16]),
            kind: copy.kind as u32,
            flags: copy.flags,
            uid: copy.task.uid,
            gid: copy.task.gid,
            // SAFETY: a helper that only reads the current task's cgroup.
            cgroup: bpf_get_current_cgroup_id(),
        };
        (*header).weight = copy.weight;
        (*header).time_ns = copy.time_ns;
        // Volatile: LLVM would merge two zero stores side by side into a
        // call to memset, a loop the verifier walks on every path.
        core::ptr::write_volatile(&raw mut (*header).tag, copy.tag);
        (*header).ip = ip;
        (*header).sp = sp;
        (*header).bp = bp;
        (*header).stack_base = base;
        (*header).kernel_len = 0;
        (*header).python_slots = 0;
        (*header).python_status = python_status::NONE;
    }
    if copy.walk_kernel {
        // SAFETY: the header's kernel array holds MAX_STACK_DEPTH u64s.
        let walked = unsafe {
            bpf_get_stack(
                copy.ctx,
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
    // Before the stack's pages: what it finds is in the record, not in
    // registers, by the copy's loop (whose paths the verifier walks).
    if let Some(layout) = python {
        let context = if copy.kind.is_off_cpu() {
            crate::python::WalkContext::OffCpu
        } else {
            crate::python::WalkContext::Sample
        };
        // SAFETY: the reservation holds PYTHON_SLOTS_BYTES after the
        // stack's pages when `python` is some.
        let (slots, status) =
            crate::python::read_frames(layout, tid, unsafe { record.add(stack_end) }, context);
        // SAFETY: as above.
        unsafe {
            (*header).python_slots = slots;
            (*header).python_status = status;
        }
    }
    // The main thread's frames end below its arguments, a deep thread's
    // at its stack's top: nothing above them helps unwinding. The copy
    // ends just above them (the last read takes what is left up to
    // there); other threads' go on a page's worth at a time until a read
    // fails.
    let (wanted, last_read) = if sp < top && top - sp < u64::from(pages) * PAGE_BYTES {
        let bytes = top + 8 - base;
        let wanted = bytes.div_ceil(PAGE_BYTES);
        (wanted as u32, (bytes - (wanted - 1) * PAGE_BYTES) as u32)
    } else {
        (pages, STACK_COPY_PAGE as u32)
    };
    // A page's worth from the stack pointer on crosses into the next page
    // of memory: where that one cannot be read (above a thread's stack),
    // what is left of the readable one is copied instead.
    let to_page_end = (PAGE_BYTES - (base & (PAGE_BYTES - 1))) as u32;
    let mut copied = 0_u32;
    for page in 0..MAX_STACK_COPY_PAGES {
        if page >= pages || page >= wanted || sp == 0 {
            break;
        }
        let offset = HEADER + page as usize * STACK_COPY_PAGE;
        let from = base + u64::from(page) * PAGE_BYTES;
        let len = if page + 1 == wanted {
            last_read
        } else {
            STACK_COPY_PAGE as u32
        };
        // 1 to 4096 bytes, masked so that the verifier sees the bound.
        let len = ((len.wrapping_sub(1)) & (STACK_COPY_PAGE as u32 - 1)) + 1;
        // SAFETY: `offset + STACK_COPY_PAGE <= size` since `page < pages`,
        // and `len <= STACK_COPY_PAGE`; bpf_probe_read_user fails (rather
        // than faulting) on an address it cannot read.
        let failed = unsafe {
            bpf_probe_read_user(
                record.add(offset).cast::<c_void>(),
                len,
                from as *const c_void,
            )
        } != 0;
        if failed {
            let rest = ((to_page_end.wrapping_sub(1)) & (STACK_COPY_PAGE as u32 - 1)) + 1;
            // SAFETY: as above, and `rest <= STACK_COPY_PAGE`.
            let read = rest < len
                && unsafe {
                    bpf_probe_read_user(
                        record.add(offset).cast::<c_void>(),
                        rest,
                        from as *const c_void,
                    )
                } == 0;
            if read {
                copied += rest;
            }
            break;
        }
        copied += len;
        if len < STACK_COPY_PAGE as u32 {
            break;
        }
    }
    // SAFETY: as above.
    unsafe { (*header).stack_len = copied };
    let flags = if copy.wakes_reader {
        wake_flags(ring)
    } else {
        aya_ebpf::bindings::BPF_RB_NO_WAKEUP.into()
    };
    entry.submit(flags);
    true
}
