//! The types both sides of profilerd share: what the eBPF programs write into
//! their maps and what the daemon reads back.
//!
//! Everything here is `#[repr(C)]`, has no padding (map keys are hashed byte
//! by byte, so padding would make equal keys differ) and no behaviour beyond
//! trivial accessors. This crate must not depend on anything kernel- or
//! daemon-specific: it is compiled for both `bpfel-unknown-none` and the host.
#![no_std]

/// Deepest stack the kernel hands out (`sysctl kernel.perf_event_max_stack`
/// defaults to 127); deeper stacks are truncated at the root end.
pub const MAX_STACK_DEPTH: usize = 127;

/// Deepest user stack the daemon unwinds from a stack copy; deeper ones end
/// with an `[unwind stopped: deeper than … frames]` frame. Larger than
/// [`MAX_STACK_DEPTH`]: the daemon's own walk is not the kernel's, and a
/// deep thread's 64 KiB copy holds several hundred frames (a start-up
/// Python imports past 127). It bounds one sample's work.
pub const MAX_USER_FRAMES: usize = 512;

/// Length of a task's command name, including the terminating NUL.
pub const TASK_COMM_LEN: usize = 16;

/// What a sample measures. Stored in [`SampleKey::kind`]; later sample
/// sources (off-CPU time, peeks) add variants, and the daemon keeps samples of
/// different kinds apart.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SampleKind {
    /// A tick of the software CPU clock: the task was on a CPU.
    CpuClock = 0,
    /// A tick of a peek's per-thread CPU clock: the peeked thread was on a CPU.
    Peek = 1,
    /// The first peek tick of a thread (counted as a `Peek` tick too): where
    /// it was when the peek began.
    PeekInstant = 2,
    /// Off CPU, asleep in an interruptible wait (`S`): a lock, a socket, a
    /// pipe, a timer. Weighs the nanoseconds waited.
    OffCpuSleeping = 3,
    /// Off CPU in an uninterruptible wait (`D`): mostly disk I/O, page
    /// faults, `vfork`. Weighs the nanoseconds waited.
    OffCpuBlocked = 4,
    /// Runnable but waiting for a CPU: preempted, or woken and not yet run.
    /// Weighs the nanoseconds waited.
    RunQueue = 5,
    /// A sampled allocation (allocation profiling): weighs its bytes; its
    /// stack copy's `time_ns` holds its id instead.
    Allocation = 6,
}

impl SampleKind {
    /// The kind for a raw value read from a map, if it is one we know.
    pub const fn from_raw(raw: u32) -> Option<Self> {
        match raw {
            0 => Some(Self::CpuClock),
            1 => Some(Self::Peek),
            2 => Some(Self::PeekInstant),
            3 => Some(Self::OffCpuSleeping),
            4 => Some(Self::OffCpuBlocked),
            5 => Some(Self::RunQueue),
            6 => Some(Self::Allocation),
            _ => None,
        }
    }

    /// Whether samples of this kind are time spent off CPU.
    pub const fn is_off_cpu(self) -> bool {
        matches!(
            self,
            Self::OffCpuSleeping | Self::OffCpuBlocked | Self::RunQueue
        )
    }

    /// Whether samples of this kind are a peek's ticks (of a peek, or of a
    /// profile at a rate of its own).
    pub const fn is_peek(self) -> bool {
        matches!(self, Self::Peek | Self::PeekInstant)
    }
}

/// Bits of [`SampleKey::flags`]: what happened to the sample's stacks.
pub mod sample_flags {
    /// The user stack could not be stored (see the loss counters for why);
    /// the sample is still counted, under a `[lost]` frame.
    pub const USER_STACK_LOST: u32 = 1 << 0;
    /// The kernel stack could not be stored.
    pub const KERNEL_STACK_LOST: u32 = 1 << 1;
    /// The user stack filled all [`crate::MAX_STACK_DEPTH`] slots and was
    /// probably cut short at its root end.
    pub const USER_STACK_TRUNCATED: u32 = 1 << 2;
    /// The kernel stack filled all slots.
    pub const KERNEL_STACK_TRUNCATED: u32 = 1 << 3;
    /// Only root and the admin group may see this sample, as the kernel
    /// lets only them trace its task (`ptrace_may_access`): the task's
    /// real, effective and saved user ids differ (a setuid program, or one
    /// that changed users), so do its group ids, or it is not dumpable; or
    /// the sampler could not read its credentials.
    pub const PROTECTED: u32 = 1 << 4;
    /// Both stacks were lost because the stack-copy ring buffer was full
    /// (the daemon was behind): the sample is counted under one
    /// `[lost: stack copy ring full]` frame.
    pub const STACK_COPY_RING_FULL: u32 = 1 << 5;
}

/// Bytes of user stack copied per page read: `bpf_probe_read_user` fails
/// whole, so the copy goes a page at a time and stops at the first page
/// that cannot be read.
pub const STACK_COPY_PAGE: usize = 4096;

/// Most pages of user stack one sample may copy (`stack_copy_pages`).
pub const MAX_STACK_COPY_PAGES: u32 = 16;

/// A thread whose stack was found deeper than its copy (a "deep thread",
/// named to the programs by the daemon) has copies this many times larger,
/// up to [`MAX_STACK_COPY_PAGES`], ending at the top of its stack.
pub const DEEP_THREAD_COPY_FACTOR: u32 = 4;

/// How many deep threads the programs know at once (the least recently
/// named is forgotten first).
pub const DEEP_THREADS_ENTRIES: u32 = 1024;

/// The pages a deep thread's copy takes, given the copies' `pages`.
pub const fn deep_thread_pages(pages: u32) -> u32 {
    let deep = pages.saturating_mul(DEEP_THREAD_COPY_FACTOR);
    if deep < MAX_STACK_COPY_PAGES {
        deep
    } else {
        MAX_STACK_COPY_PAGES
    }
}

/// Where a process forked without exec came from, as the fork tracepoint
/// writes it into the [`names::FORK_LINEAGES`] ring buffer: the new
/// process, the process that forked it, and where the program they share
/// was laid out (`mm_struct.start_code`, `end_code`, `start_stack`: a fork
/// keeps it, an exec moves it). The exec tracepoint writes one with
/// `parent` 0: that process's program is its own from then on. The daemon
/// gives a child its parent's mappings when the parent was recorded laid
/// out so.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForkLineage {
    pub child: u32,
    /// 0: `child` exec'd.
    pub parent: u32,
    pub start_code: u64,
    pub end_code: u64,
    pub start_stack: u64,
}

/// One sample whose user stack is unwound in the daemon, as the sampling
/// program writes it into the stack-copy ring buffer: this header, then
/// `stack_len` bytes of the user stack from `stack_base` up (the record
/// has room for the configured number of pages; bytes past `stack_len`
/// are garbage).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackCopyHeader {
    /// As in the counts map, with `user_stack` and `kernel_stack` 0: the
    /// kernel stack is in `kernel`, the user stack is unwound from the copy.
    pub key: SampleKey,
    /// The sample's weight (its period in nanoseconds; an allocation's
    /// size in bytes). An off-CPU
    /// record's weight is known when the task runs again: this is instead
    /// the sample threshold it was recorded by chance with (see
    /// [`offcpu::Control::sample_threshold`]), 0 when recorded in full.
    pub weight: u64,
    /// When (`bpf_ktime_get_ns`, monotonic): for an off-CPU record
    /// (`key.kind` an off-CPU kind), when the task was switched out; for a
    /// CPU or peek tick, when it was taken. An allocation's holds its id
    /// instead (as in the live map).
    pub time_ns: u64,
    /// For an allocation, the serial of the profile that sampled it
    /// ([`allocs::Target::serial`]); else 0.
    pub tag: u64,
    /// The user registers unwinding starts from: instruction pointer,
    /// stack pointer and frame pointer (x86-64: rip, rsp, rbp).
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// User address of the first copied byte: the start of the page that
    /// holds `sp`.
    pub stack_base: u64,
    /// Bytes of stack copied (a multiple of [`STACK_COPY_PAGE`]).
    pub stack_len: u32,
    /// Number of valid entries in `kernel`; 0 when the tick landed in
    /// user mode.
    pub kernel_len: u32,
    /// Of a process whose interpreter the programs know: how many
    /// [`python::PythonFrameSlot`]s the record's last
    /// [`python::PYTHON_SLOTS_BYTES`] hold (none when 0), and a
    /// [`python::status`].
    pub python_slots: u32,
    pub python_status: u32,
    /// The kernel stack, leaf first.
    pub kernel: [u64; MAX_STACK_DEPTH],
}

impl StackCopyHeader {
    /// The valid kernel frames, leaf first.
    pub fn kernel_frames(&self) -> &[u64] {
        &self.kernel[..(self.kernel_len as usize).min(MAX_STACK_DEPTH)]
    }
}

/// The identity of a group of samples, aggregated in the kernel: one counts
/// map entry per distinct key.
///
/// Stacks are referred to by the 64-bit hash under which they are stored in
/// the stacks map of the same generation; `0` means "no stack" (a kernel
/// thread has no user stack, a sample taken in user mode has no kernel stack).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SampleKey {
    /// Process id (the kernel's tgid), in the initial pid namespace.
    pub pid: u32,
    /// Thread id (the kernel's pid), in the initial pid namespace.
    pub tid: u32,
    /// Key of the user stack in the stacks map, or 0.
    pub user_stack: u64,
    /// Key of the kernel stack in the stacks map, or 0.
    pub kernel_stack: u64,
    /// The thread's command name, NUL-padded.
    pub comm: [u8; TASK_COMM_LEN],
    /// A [`SampleKind`] as its raw value.
    pub kind: u32,
    /// [`sample_flags`] bits.
    pub flags: u32,
    /// The task's real user id.
    pub uid: u32,
    /// The task's real group id.
    pub gid: u32,
    /// The task's cgroup (v2) id: the inode of its cgroup directory.
    pub cgroup: u64,
}

/// What the kernel accumulates per [`SampleKey`].
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SampleValue {
    /// Number of samples.
    pub count: u64,
    /// Sum of the samples' weights; for CPU-clock samples, the sampling
    /// period in nanoseconds, so this is the CPU time the samples stand for.
    pub weight: u64,
}

/// One stored stack: instruction pointers, leaf first.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct StackTrace {
    /// Number of valid entries in `ips`.
    pub len: u32,
    pub reserved: u32,
    pub ips: [u64; MAX_STACK_DEPTH],
}

impl StackTrace {
    /// The valid frames, leaf first.
    pub fn frames(&self) -> &[u64] {
        let len = if (self.len as usize) < MAX_STACK_DEPTH {
            self.len as usize
        } else {
            MAX_STACK_DEPTH
        };
        &self.ips[..len]
    }
}

/// The single entry of the control map, written by the daemon.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Which generation of maps (0 or 1) the programs write into. The daemon
    /// flips it, waits for in-flight programs to finish, and drains the other.
    pub generation: u32,
    pub reserved: u32,
}

/// Indexes of the per-CPU counters map: samples taken and every way one can
/// be lost or damaged. The daemon mirrors these in its status report.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// Every run of the sampling program.
    Samples = 0,
    /// Samples dropped because the counts map was full.
    LostCountsMapFull = 1,
    /// Stacks dropped because the stacks map was full.
    LostStackMapFull = 2,
    /// Stacks dropped because a different stack was already stored under the
    /// same 64-bit hash.
    LostStackCollision = 3,
    /// Stacks the kernel could not walk (an error from `bpf_get_stack`).
    LostStackWalkError = 4,
    /// The per-CPU scratch buffer was unavailable (cannot happen on a sane
    /// kernel; counted rather than assumed).
    LostNoScratch = 5,
    /// New-process notifications dropped because the ring buffer was full:
    /// such a process is only symbolized if it still runs at the next drain.
    LostProcessNotification = 6,
    /// Every run of the peek sampling program (not in `Samples`).
    PeekSamples = 7,
    /// Peek signals seen by the kernel.
    PeekSignals = 8,
    /// Peek signals not passed on because the ring buffer was full.
    LostPeekSignal = 9,
    /// Ticks of processes outside the targets (`SetTargets`), not sampled.
    OutsideTargets = 10,
    /// Samples whose user stack was copied for unwinding in the daemon.
    StackCopies = 11,
    /// Samples that found the stack-copy ring buffer full (the daemon fell
    /// behind): counted without their stacks, flagged as lost.
    StackCopyRingFull = 12,
    /// Context switches seen by the off-CPU program while it is attached.
    Switches = 13,
    /// Switches out of a recorded task: an off-CPU interval begins.
    OffCpuRecorded = 14,
    /// Off-CPU intervals not recorded: the pending map was full.
    OffCpuPendingFull = 15,
    /// Off-CPU intervals whose stack was lost: the stack-copy ring buffer
    /// was full.
    OffCpuStackCopyRingFull = 16,
    /// Off-CPU intervals lost at their end: the intervals ring buffer was
    /// full.
    OffCpuIntervalsFull = 17,
    /// Allocations sampled (allocation profiling), their stacks copied.
    AllocSampled = 18,
    /// Sampled allocations whose stack was lost: the allocation ring
    /// buffer was full (counted in their profile too).
    AllocStackCopyRingFull = 19,
    /// Allocator calls not followed: the map of calls under way was full.
    AllocCallsFull = 20,
    /// Forks and execs not passed on because the lineage ring buffer was
    /// full: such a child's mappings are read from procfs.
    LostForkRecord = 21,
    /// Off-CPU waits lost whole: their stack copy and then their interval
    /// (both ring buffers full), so the daemon never saw them (also in
    /// `OffCpuStackCopyRingFull` and `OffCpuIntervalsFull`).
    OffCpuLostWhole = 22,
    /// Sampled allocations dropped because the daemon had not yet read the
    /// earlier ones of their profile, which filled that profile's share of
    /// the allocation ring buffer (counted in their profile too).
    AllocShareFull = 23,
}

/// Number of [`Counter`] slots.
pub const COUNTER_COUNT: u32 = 24;

impl Counter {
    /// Every counter, in index order.
    pub const ALL: [Counter; COUNTER_COUNT as usize] = [
        Counter::Samples,
        Counter::LostCountsMapFull,
        Counter::LostStackMapFull,
        Counter::LostStackCollision,
        Counter::LostStackWalkError,
        Counter::LostNoScratch,
        Counter::LostProcessNotification,
        Counter::PeekSamples,
        Counter::PeekSignals,
        Counter::LostPeekSignal,
        Counter::OutsideTargets,
        Counter::StackCopies,
        Counter::StackCopyRingFull,
        Counter::Switches,
        Counter::OffCpuRecorded,
        Counter::OffCpuPendingFull,
        Counter::OffCpuStackCopyRingFull,
        Counter::OffCpuIntervalsFull,
        Counter::AllocSampled,
        Counter::AllocStackCopyRingFull,
        Counter::AllocCallsFull,
        Counter::LostForkRecord,
        Counter::OffCpuLostWhole,
        Counter::AllocShareFull,
    ];
}

pub mod allocs;
mod layout;
pub mod offcpu;
pub mod python;

pub use layout::KernelLayout;

/// The peek signal as the kernel saw it being sent, passed to the daemon
/// through the peek ring buffer.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekSignal {
    /// The task the signal was sent to (a process id for `kill`, a thread
    /// id for `tgkill`), in the initial pid namespace.
    pub target: u32,
    /// The signal number.
    pub signal: u32,
    /// Process and thread id of the sender.
    pub sender_pid: u32,
    pub sender_tid: u32,
    /// The kernel's verdict (`TRACE_SIGNAL_*`: 0 delivered, 1 ignored, 2
    /// already pending, ...).
    pub result: i32,
    /// Non-zero when the signal was sent to the whole thread group.
    pub group: u32,
    /// CLOCK_MONOTONIC (`bpf_ktime_get_ns`) when the signal was sent.
    pub time_ns: u64,
    /// The sender's command name, NUL-padded.
    pub sender_comm: [u8; TASK_COMM_LEN],
    /// The target's command name, NUL-padded.
    pub target_comm: [u8; TASK_COMM_LEN],
}

/// A process that joined a followed family: forked by a member of it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FamilyJoin {
    /// The process the family was started from.
    pub root: u32,
    /// The new member's process id.
    pub pid: u32,
}

/// Offsets of the fields of the `signal:signal_generate` tracepoint the
/// signal watcher reads (its `format` file; stable since Linux 3.7, and the
/// daemon checks them before attaching).
pub mod signal_generate {
    pub const SIG: usize = 8;
    /// The target's command name.
    pub const COMM: usize = 20;
    pub const PID: usize = 36;
    pub const GROUP: usize = 40;
    pub const RESULT: usize = 44;
    /// Every field read, by name.
    pub const FIELDS: [(&str, usize); 5] = [
        ("sig", SIG),
        ("comm", COMM),
        ("pid", PID),
        ("group", GROUP),
        ("result", RESULT),
    ];
}

/// Bits of the targets mode (the single entry of the targets-mode map):
/// which processes the sampler records. 0 records every process.
pub mod targets {
    /// Processes whose id is in the target pids map.
    pub const PIDS: u32 = 1 << 0;
    /// Processes in a cgroup (or below one) of the target cgroups map.
    pub const CGROUPS: u32 = 1 << 1;
    /// Deepest cgroup level whose ancestors are looked up.
    pub const MAX_CGROUP_LEVEL: i32 = 16;
}

/// The user and group ids of a `struct cred` as the sampler reads them:
/// six consecutive `u32`s from `uid` on (the layout since Linux 2.6.29;
/// the daemon checks it in the kernel's BTF before handing the sampler the
/// offset of `uid`).
pub mod cred_ids {
    pub const FIELDS: [&str; 6] = ["uid", "gid", "suid", "sgid", "euid", "egid"];
    /// `mm_struct.flags & DUMPABLE_MASK` is the task's dumpability;
    /// `SUID_DUMP_USER` is the only value that lets its owner trace it.
    pub const DUMPABLE_MASK: u64 = 3;
    pub const SUID_DUMP_USER: u64 = 1;
}

/// Values of [`PeekSignal::result`] beyond the kernel's `TRACE_SIGNAL_*`.
pub mod peek_signal_result {
    /// The guard refused the signal (the process has no handler for it)
    /// and passed it on for a peek; the process never received it.
    pub const INTERCEPTED: i32 = 100;
    /// Not a signal being sent: the process a peek signal was sent to
    /// exited, terminated by that signal (it had no handler for it).
    pub const KILLED: i32 = 101;
}

/// Declares names of maps, programs and globals in an eBPF object as
/// `pub const NAME: &str` items, and lists them all in `ALL`, so that the
/// daemon's tests can check that the object has every name it looks up.
macro_rules! object_names {
    ($($(#[$attr:meta])* pub const $name:ident: &str = $value:literal;)*) => {
        $($(#[$attr])* pub const $name: &str = $value;)*
        /// Every name above: each is a map, a program or a global of the
        /// object (the daemon's unit tests check that it is).
        pub const ALL: &[&str] = &[$($name),*];
    };
}

/// Names of the maps, programs and globals the daemon looks up in the eBPF
/// object, shared so neither side spells them twice.
pub mod names {
    object_names! {
        pub const PROGRAM_SAMPLE_CPU: &str = "sample_cpu";
        pub const PROGRAM_FORGET_ON_EXEC: &str = "forget_on_exec";
        pub const PROGRAM_FORGET_ON_EXIT: &str = "forget_on_exit";
        pub const PROGRAM_SAMPLE_PEEK: &str = "sample_peek";
        pub const PROGRAM_WATCH_SIGNALS: &str = "watch_signals";
        pub const PROGRAM_GUARD_PEEK_SIGNAL: &str = "guard_peek_signal";
        pub const PROGRAM_FOLLOW_FORKS: &str = "follow_forks";
        pub const PROGRAM_RECORD_SWITCH: &str = "record_switch";
        pub const PROGRAM_RECORD_SWITCH_WITHOUT_PYTHON: &str = "record_switch_without_python";
        pub const PROGRAM_RECORD_WAKEUP: &str = "record_wakeup";
        pub const OFFCPU_CONTROL: &str = "OFFCPU_CONTROL";
        pub const OFFCPU_PIDS: &str = "OFFCPU_PIDS";
        pub const OFFCPU_PENDING: &str = "OFFCPU_PENDING";
        pub const OFFCPU_PID_SLOTS: &str = "OFFCPU_PID_SLOTS";
        pub const OFFCPU_PENDING_SLOTS: &str = "OFFCPU_PENDING_SLOTS";
        pub const OFFCPU_PENDING_MARKS: &str = "OFFCPU_PENDING_MARKS";
        pub const OFFCPU_INTERVALS: &str = "OFFCPU_INTERVALS";
        pub const PROGRAM_READ_WAITING_THREADS: &str = "read_waiting_threads";
        pub const WAITING_PID: &str = "WAITING_PID";
        pub const PROGRAM_ALLOCATOR_ENTRY: &str = "allocator_entry";
        pub const PROGRAM_ALLOCATOR_RETURN: &str = "allocator_return";
        pub const ALLOC_TARGETS: &str = "ALLOC_TARGETS";
        pub const ALLOC_CALLS: &str = "ALLOC_CALLS";
        pub const ALLOC_LIVE: &str = "ALLOC_LIVE";
        pub const ALLOC_INTERVALS: &str = "ALLOC_INTERVALS";
        /// The ring buffer of sampled allocations' stack copies (apart from
        /// [`STACK_COPIES`], which sampled allocations never write).
        pub const ALLOC_STACK_COPIES: &str = "ALLOC_STACK_COPIES";
        pub const ALLOC_READ: &str = "ALLOC_READ";
        pub const ALLOC_COUNTS: &str = "ALLOC_COUNTS";
        pub const ALLOC_SHARE: &str = "ALLOC_SHARE";
        pub const FOLLOWED: &str = "FOLLOWED";
        pub const FAMILY_JOINS: &str = "FAMILY_JOINS";
        /// Global: the [`crate::KernelLayout`], set once at load time.
        pub const KERNEL_LAYOUT: &str = "KERNEL_LAYOUT";
        pub const PEEK_SIGNALLED: &str = "PEEK_SIGNALLED";
        pub const PROGRAM_RECORD_FORKS: &str = "record_forks";
        pub const PROGRAM_FORGET_FORKS_ON_EXEC: &str = "forget_forks_on_exec";
        pub const FORK_LINEAGES: &str = "FORK_LINEAGES";
        /// Global: the peek signal's number (0: peeks by signal are off).
        pub const PEEK_SIGNAL_NUMBER: &str = "PEEK_SIGNAL_NUMBER";
        /// Global: pages of user stack each sample copies (0: none; user
        /// stacks are then walked by frame pointers in the kernel).
        pub const STACK_COPY_PAGES: &str = "STACK_COPY_PAGES";
        pub const STACK_COPIES: &str = "STACK_COPIES";
        /// Threads whose stacks are deeper than a copy: thread id to the
        /// top of its stack (the end of the mapping holding it).
        pub const DEEP_THREADS: &str = "DEEP_THREADS";
        /// Processes running a CPython interpreter whose frames the
        /// programs read: pid to its [`crate::python::PythonLayout`].
        pub const PYTHON_PROCESSES: &str = "PYTHON_PROCESSES";
        /// Thread id to its interpreter thread state, as last found.
        pub const PYTHON_THREADS: &str = "PYTHON_THREADS";
        pub const PEEK_SIGNALS: &str = "PEEK_SIGNALS";
        pub const PEEK_THREADS: &str = "PEEK_THREADS";
        pub const TARGETS_MODE: &str = "TARGETS_MODE";
        pub const TARGET_PIDS: &str = "TARGET_PIDS";
        pub const TARGET_CGROUPS: &str = "TARGET_CGROUPS";
        pub const CONTROL: &str = "CONTROL";
        /// Per-CPU count of sampling runs writing into a generation.
        pub const RECORDING: &str = "RECORDING";
        pub const COUNTERS: &str = "COUNTERS";
        pub const SCRATCH: &str = "SCRATCH";
        pub const KNOWN_PIDS: &str = "KNOWN_PIDS";
        pub const NEW_PROCESSES: &str = "NEW_PROCESSES";
        pub const COUNTS_0: &str = "COUNTS_0";
        pub const COUNTS_1: &str = "COUNTS_1";
        pub const STACKS_0: &str = "STACKS_0";
        pub const STACKS_1: &str = "STACKS_1";
    }
    /// Counts maps, indexed by generation.
    pub const COUNTS: [&str; 2] = [COUNTS_0, COUNTS_1];
    /// Stacks maps, indexed by generation.
    pub const STACKS: [&str; 2] = [STACKS_0, STACKS_1];
}

#[cfg(feature = "unwind-tables-prototype")]
pub mod unwind_table;

#[cfg(feature = "user")]
mod pod {
    // SAFETY: all of these are #[repr(C)], Copy, made only of integers and
    // integer arrays, and have no padding, so every bit pattern is valid.
    unsafe impl aya::Pod for super::SampleKey {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::SampleValue {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::StackTrace {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::Control {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::PeekSignal {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::FamilyJoin {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::StackCopyHeader {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::ForkLineage {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::python::PythonLayout {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::offcpu::Control {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::offcpu::Pending {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::offcpu::Interval {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::offcpu::WaitingThread {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::allocs::Target {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::allocs::Call {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::allocs::Address {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::allocs::ReadCount {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::allocs::ProfileCounts {}
}

const _: () = assert!(Counter::ALL.len() == COUNTER_COUNT as usize);

// Layout checks: keys must have no padding.
const _: () = assert!(core::mem::size_of::<SampleKey>() == 64);
const _: () = assert!(core::mem::size_of::<SampleValue>() == 16);
const _: () = assert!(core::mem::size_of::<PeekSignal>() == 64);
const _: () = assert!(core::mem::size_of::<FamilyJoin>() == 8);
const _: () = assert!(core::mem::size_of::<ForkLineage>() == 32);
const _: () = assert!(core::mem::size_of::<StackCopyHeader>() == 64 + 72 + 8 * MAX_STACK_DEPTH);
const _: () = assert!(core::mem::size_of::<offcpu::Pending>() == 32);
const _: () = assert!(core::mem::size_of::<offcpu::Interval>() == 40);
const _: () = assert!(core::mem::size_of::<offcpu::Control>() == 16);
const _: () = assert!(core::mem::size_of::<offcpu::WaitingThread>() == 40 + 8 * MAX_STACK_DEPTH);
const _: () = assert!(core::mem::size_of::<StackTrace>() == 8 + 8 * MAX_STACK_DEPTH);
