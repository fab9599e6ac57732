//! Python frames read by the sampling programs: where a CPython
//! interpreter keeps its threads and frames in one process (set by the
//! daemon per process), and what a sample of it carries besides its
//! native stack.

/// Where one process's interpreter keeps its threads and frames: the
/// address of its runtime state's first-interpreter pointer, then field
/// offsets for its version. Written by the daemon into
/// [`crate::names::PYTHON_PROCESSES`] for each process whose interpreter it
/// found; read by the programs at each sample of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonLayout {
    /// Address of `_PyRuntime.interpreters.head` in the process.
    pub interpreters_head: u64,
    /// Offsets in an interpreter: its first thread state.
    pub threads_head: u64,
    /// Offsets in a thread state: the next one, its kernel thread id.
    pub thread_next: u64,
    pub native_thread_id: u64,
    /// The current frame: at `current_frame` in the thread state, or
    /// (`cframe` not [`PythonLayout::NONE`], before 3.13) at
    /// `current_frame` in the structure `cframe` points to.
    pub cframe: u64,
    pub current_frame: u64,
    /// Offsets in a frame: its code object, its caller's frame, its
    /// instruction pointer.
    pub frame_code: u64,
    pub frame_previous: u64,
    pub frame_instruction: u64,
    /// The 8 bytes at `frame_flags` hold its owner at bit `owner_shift` and
    /// (3.11) its `is_entry` byte at bit `entry_shift` (64: none).
    pub frame_flags: u64,
    pub owner_shift: u64,
    pub entry_shift: u64,
    /// The owner of a shim frame between two evaluation loops (3.12 on);
    /// [`PythonLayout::NONE`] when there is none.
    pub cstack_owner: u64,
    /// Offsets in a code object of its file name, name and qualified name
    /// (object pointers, in one 24-byte span from `code_filename`), and in a
    /// `str` of its hash: what tells a code object from another one later
    /// at the same address (see [`code_check`]).
    pub code_filename: u64,
    pub code_name: u64,
    pub code_qualname: u64,
    pub str_hash: u64,
    /// Whether the garbage collector runs: the offset in an interpreter of
    /// its `gc.collecting` (an int; [`PythonLayout::NONE`]: not known),
    /// and who holds the GIL (the collecting thread holds it): 3.11, the
    /// address of `_PyRuntime.ceval.gil.last_holder` (`gil_pointer` NONE);
    /// 3.12 on, the offset in an interpreter of its GIL's pointer
    /// (`ceval.gil`), and of `last_holder` in the GIL.
    pub gc_collecting: u64,
    pub gil_pointer: u64,
    pub gil_last_holder: u64,
    /// The process's pid namespace (the nsfs device, as the kernel numbers
    /// it, and inode), when it is not the daemon's: the interpreter knows
    /// its threads by their ids in it. 0 and 0: the daemon's.
    pub pid_namespace_device: u64,
    pub pid_namespace_inode: u64,
}

impl PythonLayout {
    /// A field the version does not have.
    pub const NONE: u64 = u64::MAX;
}

/// The programs read a frame's first bytes at once: its code, caller,
/// instruction and flags (8-byte aligned) must lie in them. And a code
/// object's file name and qualified name at once: the qualified name at
/// most two words after the file name.
pub const PYTHON_FRAME_BYTES: u64 = 72;

/// One Python frame of a sample, innermost first: its code object, its
/// instruction pointer, and a check of the code object (its file name's
/// and qualified name's addresses mixed: a code object freed and another
/// made at its address has another). A slot with `code` 0 ends an
/// activation of the evaluation loop (one call of
/// `_PyEval_EvalFrameDefault` runs the frames since the last such slot).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonFrameSlot {
    pub code: u64,
    pub instruction: u64,
    pub check: u64,
}

/// The check of a code object whose file name and qualified name are at
/// `filename` and `qualname`, and whose name's hash is `name_hash`: the
/// hash (of the name's characters; a code object's name is interned, so
/// always hashed) tells apart the code objects an `exec(compile(…))` loop
/// makes one after another at one address, whose names' strings take the
/// same addresses too.
pub const fn code_check(filename: u64, qualname: u64, name_hash: u64) -> u64 {
    filename ^ qualname.rotate_left(29) ^ name_hash.rotate_left(47)
}

/// Slots a sample of a Python process carries at most (a power of two).
pub const MAX_PYTHON_SLOTS: usize = 128;

/// Bytes the slots take at the end of a stack copy record that has them.
pub const PYTHON_SLOTS_BYTES: usize = MAX_PYTHON_SLOTS * core::mem::size_of::<PythonFrameSlot>();

/// Processes whose interpreters the programs know at once.
pub const PYTHON_PROCESSES_ENTRIES: u32 = 4096;

/// Threads whose thread states the programs remember (the least recently
/// used forgotten first).
pub const PYTHON_THREADS_ENTRIES: u32 = 16384;

/// Thread states looked at at most to find a thread's.
pub const MAX_PYTHON_THREADS_WALKED: u32 = 64;

/// What a stack copy's `python_status` says of its Python frames.
pub mod status {
    /// Not a process whose interpreter the programs know.
    pub const NONE: u32 = 0;
    /// Its frames were read (`python_slots` of them).
    pub const READ: u32 = 1;
    /// The thread has no thread state among the first
    /// [`super::MAX_PYTHON_THREADS_WALKED`] (not a Python thread, or the
    /// interpreter not started).
    pub const NO_THREAD_STATE: u32 = 2;
    /// A read of its memory failed part way: the slots are the innermost
    /// frames read.
    pub const UNREADABLE: u32 = 3;
    /// More frames than [`super::MAX_PYTHON_SLOTS`]: the innermost ones.
    pub const CUT: u32 = 4;
    /// Set beside the others: the thread held the GIL while the
    /// interpreter's garbage collector ran.
    pub const IN_GC: u32 = 1 << 16;
    /// The status without [`IN_GC`].
    pub const fn outcome(status: u32) -> u32 {
        status & !IN_GC
    }
}
