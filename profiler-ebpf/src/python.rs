//! Python frames: at a sample of a process whose CPython interpreter the
//! daemon found, the sampled thread's Python frames (code object and
//! instruction pointer of each, innermost first) are read from its
//! interpreter's memory and written after its stack copy, for the daemon
//! to name and to put in place of the evaluation loop's native frames.
//!
//! Owns the map of known interpreters (written by the daemon) and the
//! cache of thread states (its own); reads only the current task's user
//! memory, a bounded number of words.

use core::{ffi::c_void, mem::size_of};

use aya_ebpf::{
    bindings::bpf_pidns_info,
    helpers::{
        bpf_probe_read_user,
        generated::{bpf_get_ns_current_pid_tgid, bpf_loop},
    },
    macros::map,
    maps::{HashMap, LruHashMap, PerCpuArray},
};
use profiler_common::python::{
    MAX_PYTHON_SLOTS, MAX_PYTHON_THREADS_WALKED, PYTHON_FRAME_BYTES, PYTHON_PROCESSES_ENTRIES,
    PYTHON_THREADS_ENTRIES, PythonFrameSlot, PythonLayout, code_check, status,
};

/// Processes whose interpreters the daemon found: pid to layout.
#[map]
static PYTHON_PROCESSES: HashMap<u32, PythonLayout> =
    HashMap::with_max_entries(PYTHON_PROCESSES_ENTRIES, 0);

/// Thread id to the thread state last found for it.
#[map]
static PYTHON_THREADS: LruHashMap<u32, u64> =
    LruHashMap::with_max_entries(PYTHON_THREADS_ENTRIES, 0);

/// The layout of `pid`'s interpreter, when the daemon named one (a value
/// of the map, valid for the program's run).
#[inline(always)]
pub(crate) fn layout_of(pid: u32) -> Option<*const PythonLayout> {
    PYTHON_PROCESSES.get_ptr(pid)
}

/// Forgets a process (it exits or execs) and a thread (it exits).
#[inline(always)]
pub(crate) fn forget_thread(tid: u32) {
    let _ = PYTHON_THREADS.remove(tid);
}

#[inline(always)]
pub(crate) fn forget_process(pid: u32) {
    let _ = PYTHON_PROCESSES.remove(pid);
}

#[inline(always)]
fn read_word(address: u64) -> Option<u64> {
    // SAFETY: bpf_probe_read_user fails rather than faulting.
    unsafe { bpf_probe_read_user(address as *const u64) }.ok()
}

/// The thread state of thread `tid` (the kernel's id; the interpreter's
/// `native_thread_id` is its id in the process's own pid namespace, which
/// the layout names when it is another).
#[inline(always)]
fn thread_state(layout: &PythonLayout, tid: u32) -> Option<u64> {
    // Its id as the interpreter knows it (the cache is by the kernel's).
    let own_id = if layout.pid_namespace_inode == 0 {
        tid
    } else {
        let mut ids = bpf_pidns_info { pid: 0, tgid: 0 };
        // SAFETY: the helper writes `ids`, of the size given.
        let failed = unsafe {
            bpf_get_ns_current_pid_tgid(
                layout.pid_namespace_device,
                layout.pid_namespace_inode,
                &raw mut ids,
                size_of::<bpf_pidns_info>() as u32,
            )
        } != 0;
        if failed {
            return None;
        }
        ids.pid
    };
    // SAFETY: a value of the map, read at once.
    if let Some(known) = unsafe { PYTHON_THREADS.get(tid) }.copied()
        && read_word(known + layout.native_thread_id).is_some_and(|id| id as u32 == own_id)
    {
        return Some(known);
    }
    let interpreter = read_word(layout.interpreters_head)?;
    if interpreter == 0 {
        return None;
    }
    let mut thread = read_word(interpreter + layout.threads_head)?;
    for _ in 0..MAX_PYTHON_THREADS_WALKED {
        if thread == 0 {
            return None;
        }
        if read_word(thread + layout.native_thread_id)? as u32 == own_id {
            let _ = PYTHON_THREADS.insert(tid, thread, 0);
            return Some(thread);
        }
        thread = read_word(thread + layout.thread_next)?;
    }
    None
}

/// Where a walk of a thread's frames is. Kept in a map value, not on the
/// stack: the verifier checks `walk_step` under `bpf_loop` until the
/// states it sees repeat, which counts kept on the stack (known exactly,
/// one more each time) never do.
#[repr(C)]
#[derive(Clone, Copy)]
pub(crate) struct WalkState {
    frame: u64,
    /// The code object of the last frame named, and its check: a frame of
    /// the same one (recursion) takes it without reading it again (within
    /// one sample, one address is one code object).
    last_code: u64,
    last_check: u64,
    written: u32,
    /// Whether the last slot written ends an activation (no two in a row).
    ended: u32,
    outcome: u32,
    _pad: u32,
}

/// The walks under way on each CPU: one for the sampling programs (run in
/// NMIs, which do not nest), one for the off-CPU program, which a sample
/// may interrupt mid-walk (each its own, so that neither undoes the
/// other's).
#[map]
static PYTHON_WALKS: PerCpuArray<WalkState> = PerCpuArray::with_max_entries(2, 0);

/// Which of [`PYTHON_WALKS`] a program takes.
#[derive(Clone, Copy)]
pub(crate) enum WalkContext {
    Sample = 0,
    OffCpu = 1,
}

/// What [`walk_step`] takes.
#[repr(C)]
struct Walk {
    layout: *const PythonLayout,
    slots: *mut u8,
    state: *mut WalkState,
}

/// Writes thread `tid`'s Python frames into `slots` (room for
/// [`MAX_PYTHON_SLOTS`]): returns how many, and a [`status`].
#[inline(always)]
pub(crate) fn read_frames(
    layout: *const PythonLayout,
    tid: u32,
    slots: *mut u8,
    context: WalkContext,
) -> (u32, u32) {
    // SAFETY: a value of the map, valid for this program's run.
    let fields = unsafe { &*layout };
    let Some(thread) = thread_state(fields, tid) else {
        return (0, status::NO_THREAD_STATE);
    };
    let in_gc = if collecting_with_gil(fields, thread) {
        status::IN_GC
    } else {
        0
    };
    let frame = if fields.cframe == PythonLayout::NONE {
        read_word(thread + fields.current_frame)
    } else {
        match read_word(thread + fields.cframe) {
            Some(0) => Some(0),
            Some(cframe) => read_word(cframe + fields.current_frame),
            None => None,
        }
    };
    let Some(frame) = frame else {
        return (0, status::UNREADABLE);
    };
    let Some(state) = PYTHON_WALKS.get_ptr_mut(context as u32) else {
        return (0, status::UNREADABLE);
    };
    // SAFETY: this CPU's value of the map.
    unsafe {
        *state = WalkState {
            frame,
            last_code: 0,
            last_check: 0,
            written: 0,
            ended: 1,
            outcome: status::READ,
            _pad: 0,
        }
    };
    let mut walk = Walk {
        layout,
        slots,
        state,
    };
    // SAFETY: `walk_step` takes a `Walk`, which lives until bpf_loop
    // returns.
    unsafe {
        bpf_loop(
            MAX_PYTHON_SLOTS as u32,
            walk_step as *mut c_void,
            (&raw mut walk).cast::<c_void>(),
            0,
        )
    };
    // SAFETY: as above.
    let state = unsafe { &mut *state };
    if state.frame != 0 && state.outcome == status::READ {
        state.outcome = status::CUT;
    }
    (state.written, state.outcome | in_gc)
}

/// Whether the interpreter's garbage collector runs in `thread` (a
/// thread state): `gc.collecting` is set, and the thread holds the GIL
/// (only the GIL's holder collects). One read when it does not run.
#[inline(always)]
fn collecting_with_gil(layout: &PythonLayout, thread: u64) -> bool {
    if layout.gc_collecting == PythonLayout::NONE {
        return false;
    }
    let Some(interpreter) = read_word(layout.interpreters_head).filter(|&at| at != 0) else {
        return false;
    };
    // `collecting` is an int: the low half of the word.
    let collecting =
        read_word(interpreter + layout.gc_collecting).is_some_and(|word| word as u32 != 0);
    if !collecting {
        return false;
    }
    let holder = if layout.gil_pointer == PythonLayout::NONE {
        read_word(layout.gil_last_holder)
    } else {
        read_word(interpreter + layout.gil_pointer)
            .filter(|&gil| gil != 0)
            .and_then(|gil| read_word(gil + layout.gil_last_holder))
    };
    holder == Some(thread)
}

/// Bytes of a frame read at once: every field read is in them (3.11 to
/// 3.13; the daemon names no layout whose fields are not).
const FRAME_WORDS: usize = PYTHON_FRAME_BYTES as usize / 8;

/// The word at `offset` bytes into `words` (a frame's first bytes, or a
/// code object's names). Each word at a constant place: the verifier
/// refuses a read from the stack at a variable one.
#[inline(always)]
fn word_at<const N: usize>(words: &[u64; N], offset: u64) -> Option<u64> {
    let index = match offset {
        0 => 0,
        8 => 1,
        16 => 2,
        24 => 3,
        32 => 4,
        40 => 5,
        48 => 6,
        56 => 7,
        64 => 8,
        _ => return None,
    };
    match index {
        0 => words.first(),
        1 => words.get(1),
        2 => words.get(2),
        3 => words.get(3),
        4 => words.get(4),
        5 => words.get(5),
        6 => words.get(6),
        7 => words.get(7),
        _ => words.get(8),
    }
    .copied()
}

/// One frame of a walk: its slot written (or an activation's end, at a
/// shim frame or after an entry frame); 1 to stop.
#[inline(never)]
extern "C" fn walk_step(_index: u32, walk: *mut c_void) -> i64 {
    // SAFETY: bpf_loop passes the `Walk` read_frames gave it, whose
    // pointers are a map's values and the record's slots.
    let walk = unsafe { &*walk.cast::<Walk>() };
    // SAFETY: those pointers are a map's value (the layout) and this CPU's
    // walk state, alive for the whole walk, and nothing else holds them.
    let (layout, state) = unsafe { (&*walk.layout, &mut *walk.state) };
    let frame = state.frame;
    if frame == 0 {
        return 1;
    }
    // The frame's first bytes at once: one read, not one per field.
    // SAFETY: bpf_probe_read_user fails rather than faulting.
    let Ok(words) = (unsafe { bpf_probe_read_user(frame as *const [u64; FRAME_WORDS]) }) else {
        state.outcome = status::UNREADABLE;
        return 1;
    };
    let (Some(code), Some(previous), Some(instruction), Some(flags)) = (
        word_at(&words, layout.frame_code),
        word_at(&words, layout.frame_previous),
        word_at(&words, layout.frame_instruction),
        word_at(&words, layout.frame_flags),
    ) else {
        state.outcome = status::UNREADABLE;
        return 1;
    };
    let owner = (flags >> (layout.owner_shift & 63)) & 0xff;
    let shim = owner == layout.cstack_owner;
    let entry = layout.entry_shift < 64 && (flags >> (layout.entry_shift & 63)) & 0xff != 0;
    if shim {
        if state.ended == 0 && !put(walk.slots, &mut state.written, PythonFrameSlot::default()) {
            state.outcome = status::CUT;
            return 1;
        }
        state.ended = 1;
    } else {
        let check = if code != 0 && code == state.last_code {
            state.last_check
        } else {
            let check = code_check_of(layout, code);
            state.last_code = code;
            state.last_check = check;
            check
        };
        let slot = PythonFrameSlot {
            code,
            instruction,
            check,
        };
        if !put(walk.slots, &mut state.written, slot) {
            state.outcome = status::CUT;
            return 1;
        }
        state.ended = 0;
        if entry {
            if !put(walk.slots, &mut state.written, PythonFrameSlot::default()) {
                state.outcome = status::CUT;
                return 1;
            }
            state.ended = 1;
        }
    }
    state.frame = previous;
    0
}

/// The check of the code object at `code` (see `code_check`): two reads.
#[inline(always)]
fn code_check_of(layout: &PythonLayout, code: u64) -> u64 {
    // Its file name and qualified name (two words apart) in one read.
    // SAFETY: bpf_probe_read_user fails rather than faulting.
    let names = unsafe { bpf_probe_read_user((code + layout.code_filename) as *const [u64; 3]) }
        .unwrap_or_default();
    let qualname = layout.code_qualname.wrapping_sub(layout.code_filename);
    let name = layout.code_name.wrapping_sub(layout.code_filename);
    // The name's hash: one more read, the check's only part that is not
    // an address (see `code_check`).
    let name_hash = word_at(&names, name).map_or(0, |name| {
        let hash = name.wrapping_add(layout.str_hash) as *const u64;
        // SAFETY: bpf_probe_read_user fails rather than faulting.
        unsafe { bpf_probe_read_user(hash) }.unwrap_or(0)
    });
    code_check(names[0], word_at(&names, qualname).unwrap_or(0), name_hash)
}

/// Writes `slot` at index `*written` of `slots`; false when they are full.
#[inline(always)]
fn put(slots: *mut u8, written: &mut u32, slot: PythonFrameSlot) -> bool {
    // SAFETY: volatile reads of a local. Read twice: the second read's
    // mask stays in the program (LLVM would drop it as implied by the
    // first read's check), so that the verifier sees the bound.
    let count = unsafe { core::ptr::read_volatile(written) };
    if count as usize >= MAX_PYTHON_SLOTS {
        return false;
    }
    // SAFETY: as above.
    let index = unsafe { core::ptr::read_volatile(written) } as usize & (MAX_PYTHON_SLOTS - 1);
    let offset = index * size_of::<PythonFrameSlot>();
    // SAFETY: `slots` has room for MAX_PYTHON_SLOTS slots; the offset is
    // below that. Two volatile stores (LLVM would write a zero slot with
    // a call to memset, a loop the verifier walks).
    unsafe {
        let at = slots.add(offset).cast::<c_void>().cast::<u64>();
        core::ptr::write_volatile(at, slot.code);
        core::ptr::write_volatile(at.add(1), slot.instruction);
        core::ptr::write_volatile(at.add(2), slot.check);
    }
    *written = count + 1;
    true
}
