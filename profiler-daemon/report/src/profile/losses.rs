//! What a profile says it lost: why an unwound stack stops short of its
//! thread's first function ([`UnwindStop`], shown as its root frame), and
//! why samples or stacks were lost ([`LossCause`], by the names the API and
//! the reports use).

use std::sync::Arc;

/// The markers a stack kept without its user stack starts with (its
/// root), and the cause each stands for: a profile counts its own samples
/// so kept ([`super::Profile::own_lost`]); its samples lost whole (the
/// kernel's counts-map or ring losses) are only known machine-wide.
pub const OWN_LOSS_MARKERS: [(&str, &str); 2] = [
    (RING_FULL_MARKER, "stack_copy_ring_full"),
    (LOST_MARKER, "user_stack_lost"),
];

/// The one frame of a sample counted without its stacks because the
/// stack-copy ring buffer was full (the daemon was behind).
pub const RING_FULL_MARKER: &str = "[lost: stack copy ring full]";

/// The frame standing for a user or kernel stack the kernel could not
/// keep (a full stack map, a hash collision).
pub const LOST_MARKER: &str = "[lost]";

/// The index into [`OWN_LOSS_MARKERS`] of the marker a stack whose root
/// is `root` starts with, if it does.
pub fn own_loss_of(root: &super::Location) -> Option<usize> {
    if root.kind != super::LocationKind::Marker {
        return None;
    }
    OWN_LOSS_MARKERS
        .iter()
        .position(|&(marker, _)| *root.module == *marker)
}

/// Why an unwound stack does not reach its thread's first function; shown
/// as a frame `[unwind stopped: …]` at the root end of the stack.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum UnwindStop {
    /// The next caller is in a binary without unwind information (its
    /// `.eh_frame` was stripped, say).
    NoUnwindInfo(Arc<str>),
    /// The stack is deeper than the bytes the sampler copied
    /// (`stack_copy`).
    StackCopyTooShort,
    /// The sampler could not copy any of the stack.
    NoStackCopy,
    /// Sampled inside `execve` once the program it replaces had lost its
    /// memory: the registers still point into the old program (where it
    /// called `execve`, the one user frame), its stack is gone.
    InExecve,
    /// A return address fell outside every mapping of the process.
    Unmapped,
    /// The process was gone before its mappings could be read.
    UnknownProcess,
    /// The unwind information led to an impossible frame (a stack address
    /// below the copy, a loop, a null return address).
    BadFrame,
    /// More than [`profiler_common::MAX_USER_FRAMES`] frames.
    TooDeep,
}

impl UnwindStop {
    /// What the stop frame says.
    pub fn reason(&self) -> String {
        match self {
            Self::NoUnwindInfo(binary) => format!("no unwind info in {binary}"),
            Self::StackCopyTooShort => "stack copy too short".to_owned(),
            Self::NoStackCopy => "no stack copy".to_owned(),
            Self::InExecve => "in execve, the old program's stack gone".to_owned(),
            Self::Unmapped => "return address outside every mapping".to_owned(),
            Self::UnknownProcess => "process gone before its mappings were read".to_owned(),
            Self::BadFrame => "bad frame".to_owned(),
            Self::TooDeep => format!("deeper than {} frames", profiler_common::MAX_USER_FRAMES),
        }
    }

    /// A short name for counters and metrics.
    pub fn counter_name(&self) -> &'static str {
        match self {
            Self::NoUnwindInfo(_) => "no_unwind_info",
            Self::StackCopyTooShort => "stack_copy_too_short",
            Self::NoStackCopy => "no_stack_copy",
            Self::InExecve => "in_execve",
            Self::Unmapped => "unmapped",
            Self::UnknownProcess => "unknown_process",
            Self::BadFrame => "bad_frame",
            Self::TooDeep => "too_deep",
        }
    }
}

/// Why samples or stacks were lost. Stable names are part of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossCause {
    CountsMapFull,
    StackMapFull,
    StackCollision,
    StackWalkError,
    NoScratch,
    ProcessNotification,
    /// Stacks lost because the stack-copy ring buffer was full.
    StackCopyBufferFull,
    /// Off-CPU intervals not recorded: the pending map was full.
    OffCpuPendingFull,
    /// Off-CPU intervals lost with their stack (the stack-copy ring buffer
    /// was full).
    OffCpuStackLost,
    /// Off-CPU intervals lost at their end (the intervals ring buffer was
    /// full).
    OffCpuIntervalsFull,
    /// Dropped by the daemon to stay under its memory ceiling.
    MemoryCeiling,
    /// Sampled allocations lost with their stack (the allocation ring
    /// buffer was full).
    AllocStackLost,
    /// Allocator calls not followed: the map of calls under way was full.
    AllocCallsFull,
    /// Sampled allocations dropped because their profile's records the
    /// daemon had not read yet filled its share of the allocation ring.
    AllocShareFull,
    /// Sampled allocations read but dropped because the daemon's room for
    /// the samples of allocation profiles under way (a share of
    /// `memory_budget`) was full.
    AllocInboxFull,
}

impl LossCause {
    pub const ALL: [LossCause; 15] = [
        LossCause::CountsMapFull,
        LossCause::StackMapFull,
        LossCause::StackCollision,
        LossCause::StackWalkError,
        LossCause::NoScratch,
        LossCause::ProcessNotification,
        LossCause::StackCopyBufferFull,
        LossCause::OffCpuPendingFull,
        LossCause::OffCpuStackLost,
        LossCause::OffCpuIntervalsFull,
        LossCause::MemoryCeiling,
        LossCause::AllocStackLost,
        LossCause::AllocCallsFull,
        LossCause::AllocShareFull,
        LossCause::AllocInboxFull,
    ];

    /// Whether it counts sampled allocations (said in the allocation
    /// profiles they belong to, never in windows of CPU samples).
    pub fn is_allocation(self) -> bool {
        matches!(
            self,
            LossCause::AllocStackLost
                | LossCause::AllocCallsFull
                | LossCause::AllocShareFull
                | LossCause::AllocInboxFull
        )
    }

    /// The identifier used in the API and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LossCause::CountsMapFull => "counts_map_full",
            LossCause::StackMapFull => "stack_map_full",
            LossCause::StackCollision => "stack_collision",
            LossCause::StackWalkError => "stack_walk_error",
            LossCause::NoScratch => "no_scratch_buffer",
            LossCause::ProcessNotification => "process_notification_dropped",
            LossCause::StackCopyBufferFull => "stack_copy_buffer_full",
            LossCause::OffCpuPendingFull => "offcpu_pending_full",
            LossCause::OffCpuStackLost => "offcpu_stack_copy_buffer_full",
            LossCause::OffCpuIntervalsFull => "offcpu_intervals_full",
            LossCause::MemoryCeiling => "memory_ceiling",
            LossCause::AllocStackLost => "alloc_stack_copy_buffer_full",
            LossCause::AllocCallsFull => "alloc_calls_full",
            LossCause::AllocShareFull => "alloc_share_full",
            LossCause::AllocInboxFull => "alloc_inbox_full",
        }
    }
}
