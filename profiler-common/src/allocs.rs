//! Allocation profiling (uprobes on the allocator's entry points): the
//! sampling each profiled process asks for, the allocator call under way on
//! each thread, the sampled allocations still held, by address, what came
//! of each profile's samples, and how many of its records the daemon has
//! read.

/// What the daemon attaches the entry program to each allocator function
/// with (the uprobe's cookie): which function it is, and so where its size
/// and pointer arguments are.
#[repr(u64)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Function {
    /// `malloc(size)`, `valloc(size)`, `pvalloc(size)`.
    Malloc = 0,
    /// `calloc(count, size)`.
    Calloc = 1,
    /// `realloc(pointer, size)`: the old block is freed.
    Realloc = 2,
    /// `reallocarray(pointer, count, size)`.
    Reallocarray = 3,
    /// `aligned_alloc(alignment, size)`, `memalign(alignment, size)`.
    AlignedAlloc = 4,
    /// `posix_memalign(&pointer, alignment, size)`: the block's address is
    /// written through its first argument.
    PosixMemalign = 5,
    /// `free(pointer)`.
    Free = 6,
}

impl Function {
    /// Every function, with the symbols it stands for.
    pub const SYMBOLS: [(&'static str, Function); 10] = [
        ("malloc", Function::Malloc),
        ("calloc", Function::Calloc),
        ("realloc", Function::Realloc),
        ("reallocarray", Function::Reallocarray),
        ("posix_memalign", Function::PosixMemalign),
        ("aligned_alloc", Function::AlignedAlloc),
        ("memalign", Function::AlignedAlloc),
        ("valloc", Function::Malloc),
        ("pvalloc", Function::Malloc),
        ("free", Function::Free),
    ];

    /// The function of a cookie.
    pub const fn from_cookie(cookie: u64) -> Option<Self> {
        match cookie {
            0 => Some(Self::Malloc),
            1 => Some(Self::Calloc),
            2 => Some(Self::Realloc),
            3 => Some(Self::Reallocarray),
            4 => Some(Self::AlignedAlloc),
            5 => Some(Self::PosixMemalign),
            6 => Some(Self::Free),
            _ => None,
        }
    }

    /// Whether its return needs the return program (it allocates).
    pub const fn allocates(self) -> bool {
        !matches!(self, Self::Free)
    }
}

/// How a profiled process's allocations are sampled.
pub mod mode {
    /// By bytes: an allocation of `s` bytes is sampled with probability
    /// `1 - exp(-s / mean_bytes)` (a countdown of exponentially
    /// distributed byte intervals, as heap profilers do).
    pub const BYTES: u32 = 0;
    /// Each allocation with the same probability, `threshold / 2³²`.
    pub const RATE: u32 = 1;
}

/// Processes whose allocations can be profiled at once: each profile has
/// a slot below this ([`Target::slot`]), its entry of the read counts map.
pub const MAX_PROFILED_PROCESSES: u32 = 16;

/// A profiled process: how it is sampled and which profile it is (the
/// daemon's writes).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Target {
    /// A [`mode`].
    pub mode: u32,
    /// The profile's slot, below [`MAX_PROFILED_PROCESSES`]: its entry of
    /// the read counts and of the profile counts.
    pub slot: u32,
    /// [`mode::BYTES`]: the mean sampling interval in bytes (at least 1).
    pub mean_bytes: u64,
    /// [`mode::RATE`]: an allocation is sampled when a random `u32` is
    /// below this (`1 << 32`: every one).
    pub threshold: u64,
    /// The profile's number, never 0 nor used twice while the daemon runs:
    /// its records carry it ([`crate::StackCopyHeader::tag`]), and so does
    /// its read count ([`ReadCount::serial`]).
    pub serial: u64,
}

/// What came of a profile's samples, in its slot of the profile counts map
/// (zeroed by the daemon before the profile starts; the programs add to
/// it, atomically). Kept apart from the [`Target`], which the daemon
/// deletes first when the profile ends (sampling stops): what programs
/// under way still add lands here, read once the probes are off.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileCounts {
    /// Records of its sampled allocations written into the allocation ring
    /// buffer.
    pub written: u64,
    /// Sampled allocations dropped because its records the daemon had not
    /// read yet filled its share of the allocation ring buffer, and their
    /// bytes.
    pub share_full: u64,
    pub share_full_bytes: u64,
    /// Sampled allocations dropped because the allocation ring buffer was
    /// full, and their bytes.
    pub ring_full: u64,
    pub ring_full_bytes: u64,
    /// Sampled allocations whose address could not be kept (the live map
    /// was full): whether they are still held is unknown.
    pub untracked: u64,
    /// Allocator calls not followed (the map of calls under way was full):
    /// they could not be sampled.
    pub calls_not_followed: u64,
}

/// Field offsets of [`ProfileCounts`], for the programs' atomic adds.
pub const COUNT_WRITTEN: usize = 0;
pub const COUNT_SHARE_FULL: usize = 8;
pub const COUNT_SHARE_FULL_BYTES: usize = 16;
pub const COUNT_RING_FULL: usize = 24;
pub const COUNT_RING_FULL_BYTES: usize = 32;
pub const COUNT_UNTRACKED: usize = 40;
pub const COUNT_CALLS_NOT_FOLLOWED: usize = 48;

/// How many records of a profile the daemon has read from the allocation
/// ring buffer, in its slot of the read counts map (the daemon's writes).
/// A record the profile writes while `written - read` (of the same serial)
/// is its share already is dropped, so that no profile keeps another's
/// records out of the ring.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReadCount {
    /// The profile counted ([`Target::serial`]); another serial counts
    /// none of this slot's profile's records.
    pub serial: u64,
    pub read: u64,
}

/// An allocator call under way on a thread, from its entry to its return.
///
/// Calls are told apart by the stack pointer at their entry (where their
/// return address is): one made from inside another (glibc's
/// `realloc(NULL, n)` calls `malloc`) enters below it or, a tail call, at
/// the same place, and is counted with it; a return is this call's when
/// the stack pointer is just above that address; an entry left by a call
/// whose return was not seen lies below the stack of later calls, which
/// replace it.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Call {
    /// The bytes asked for.
    pub size: u64,
    /// [`Function::PosixMemalign`]: where the address will be written.
    pub out_pointer: u64,
    /// The stack pointer at the call's entry.
    pub entry_sp: u64,
    /// Whether this allocation is sampled.
    pub sampled: u32,
    pub reserved: u32,
}

/// The key of a sampled allocation still held.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Address {
    pub pid: u32,
    pub reserved: u32,
    pub address: u64,
}

/// Entries of the table of exponentially distributed intervals the byte
/// sampling draws from (with a random index).
pub const INTERVAL_TABLE_LEN: u32 = 4096;

/// Fixed-point shift of the countdown and the interval table: one mean
/// interval is `1 << INTERVAL_SHIFT`.
pub const INTERVAL_SHIFT: u32 = 24;

/// Largest size the countdown takes in one step (larger allocations are
/// sampled as if of this size, which is sampled for certain at any
/// interval below 2³⁸ bytes); shifted by [`INTERVAL_SHIFT`] it still fits
/// an `i64`.
pub const MAX_COUNTED_SIZE: u64 = 1 << 38;

const _: () = {
    assert!(core::mem::offset_of!(ProfileCounts, written) == COUNT_WRITTEN);
    assert!(core::mem::offset_of!(ProfileCounts, share_full) == COUNT_SHARE_FULL);
    assert!(core::mem::offset_of!(ProfileCounts, share_full_bytes) == COUNT_SHARE_FULL_BYTES);
    assert!(core::mem::offset_of!(ProfileCounts, ring_full) == COUNT_RING_FULL);
    assert!(core::mem::offset_of!(ProfileCounts, ring_full_bytes) == COUNT_RING_FULL_BYTES);
    assert!(core::mem::offset_of!(ProfileCounts, untracked) == COUNT_UNTRACKED);
    assert!(core::mem::offset_of!(ProfileCounts, calls_not_followed) == COUNT_CALLS_NOT_FOLLOWED);
    assert!(core::mem::size_of::<Target>() == 32);
    assert!(core::mem::size_of::<ProfileCounts>() == 56);
    assert!(core::mem::size_of::<ReadCount>() == 16);
};
