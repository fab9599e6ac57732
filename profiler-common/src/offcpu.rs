//! Off-CPU time (`tp_btf/sched_switch`): the control the daemon writes, the
//! pending interval kept per task from its switch-out to its switch-in, the
//! interval handed to the daemon at the switch-in, and the threads the task
//! iterator reads.

/// Bits of [`Pending::flags`] and [`Interval::flags`].
pub mod flags {
    /// Recorded by chance (`Control::sample_threshold`), not because
    /// its process was selected: the daemon scales it back up.
    pub const SAMPLED: u32 = 1 << 0;
    /// Its stack copy was lost (the ring buffer was full).
    pub const STACK_LOST: u32 = 1 << 1;
    /// It went off CPU before recording began: only its wake-up and
    /// switch-in were seen (`switched_out_ns` is 0).
    pub const UNKNOWN_START: u32 = 1 << 2;
}

/// Slots of the filters that spare a switch or wake-up of a task nobody
/// records its hash lookups: an id's slot is `id % FILTER_SLOTS`. A zero
/// slot means no recorded process (in the pid slots)
/// or no pending wait (the pending slots and marks) has an id there.
pub const FILTER_SLOTS: u32 = 1 << 16;

/// The slot of a process or thread id in the filters.
pub const fn filter_slot(id: u32) -> u32 {
    id % FILTER_SLOTS
}

/// Bits of `prev_state` (`include/linux/sched.h`).
pub mod task_state {
    pub const INTERRUPTIBLE: u32 = 0x1;
    pub const UNINTERRUPTIBLE: u32 = 0x2;
    pub const ZOMBIE: u32 = 0x20;
    pub const DEAD_EXIT: u32 = 0x10;
    pub const DEAD: u32 = 0x80;
    /// With UNINTERRUPTIBLE: an idle kernel wait (`TASK_IDLE`), which
    /// does not count as load.
    pub const NOLOAD: u32 = 0x400;
    /// The states a task reports (`TASK_REPORT`).
    pub const REPORT: u32 = 0x7f;
}

/// The single entry of the off-CPU control map, written by the daemon.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Control {
    /// Non-zero: every process with user memory is recorded.
    pub all: u32,
    /// Non-zero: the processes in the off-CPU pids map are recorded.
    pub pids: u32,
    /// Any other task is recorded with probability
    /// `sample_threshold / 2^32` (0: never).
    pub sample_threshold: u32,
    /// Non-zero: kernel threads are recorded too (when `all` is set).
    pub kernel_threads: u32,
}

impl Control {
    /// Whether anything is recorded at all.
    pub const fn active(&self) -> bool {
        self.all != 0 || self.pids != 0 || self.sample_threshold != 0
    }
}

/// A task off CPU, from its switch-out until its switch-in; keyed by
/// thread id.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pending {
    pub pid: u32,
    pub tid: u32,
    /// The [`crate::SampleKind`] of the wait, as its raw value (0 when
    /// the start is unknown).
    pub kind: u32,
    /// [`flags`] bits.
    pub flags: u32,
    /// `bpf_ktime_get_ns` at the switch-out (0: unknown).
    pub switched_out_ns: u64,
    /// `bpf_ktime_get_ns` at the wake-up (0: not woken, or preempted).
    pub woken_ns: u64,
}

/// A thread of a process whose recording begins, as the waiting-threads
/// iterator reads it (whether it waits is read from procfs): the user
/// registers it saved when it entered the kernel and its kernel stack.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct WaitingThread {
    pub pid: u32,
    pub tid: u32,
    pub ip: u64,
    pub sp: u64,
    pub bp: u64,
    /// Number of valid entries in `kernel`.
    pub kernel_len: u32,
    pub _pad: u32,
    /// The kernel stack, leaf first.
    pub kernel: [u64; crate::MAX_STACK_DEPTH],
}

/// An off-CPU interval, ended at the task's switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Interval {
    pub pid: u32,
    pub tid: u32,
    pub kind: u32,
    pub flags: u32,
    pub switched_out_ns: u64,
    pub woken_ns: u64,
    pub switched_in_ns: u64,
}
