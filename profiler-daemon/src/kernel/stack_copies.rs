//! Reading the stack-copy ring buffer: one record per sample of a process
//! with user memory, holding the sample's identity, its kernel stack, its
//! user registers and a copy of the top of its user stack (see
//! [`StackCopyHeader`]).
//!
//! This module owns the ring buffer and the decoding of its records, and
//! the map of threads whose copies are larger; it must not unwind (the symbols layer does, with the binaries' unwind
//! information) nor aggregate.

use std::{collections::HashSet, mem::size_of};

use aya::maps::{HashMap, MapData, RingBuf};
use profiler_common::{
    DEEP_THREADS_ENTRIES, STACK_COPY_PAGE, StackCopyHeader, deep_thread_pages,
    python::{MAX_PYTHON_SLOTS, PYTHON_SLOTS_BYTES, PythonFrameSlot},
};

/// One record, borrowed from the ring buffer while it is visited.
#[derive(Debug)]
pub struct StackCopy<'a> {
    pub header: StackCopyHeader,
    /// The copied user stack, from `header.stack_base` on.
    pub stack: &'a [u8],
    /// The thread's Python frames (innermost first), when the programs
    /// read them (see `header.python_status`).
    pub python: Vec<PythonFrameSlot>,
}

/// The ring buffer the sampling programs copy stacks into.
pub struct StackCopies {
    ring: RingBuf<MapData>,
    /// The ring buffer's size in bytes.
    capacity: u64,
    /// The share of the ring the last read emptied.
    last_fill: f64,
    /// Records too short to hold a header (cannot happen with a matching
    /// build; counted rather than assumed).
    pub malformed: u64,
}

impl std::os::fd::AsFd for StackCopies {
    /// The ring buffer's file: readable once its writers wake its reader.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.ring)
    }
}

impl StackCopies {
    pub fn new(ring: RingBuf<MapData>, capacity: u64) -> Self {
        Self {
            ring,
            capacity: capacity.max(1),
            last_fill: 0.0,
            malformed: 0,
        }
    }

    /// The share of the ring buffer (0 to 1) the last read emptied: how
    /// close the sampling programs came to filling it between two reads.
    pub fn last_fill(&self) -> f64 {
        self.last_fill
    }

    /// Visits every record written so far, oldest first, and frees it.
    /// Returns how many were visited.
    pub fn read(&mut self, mut visit: impl FnMut(StackCopy<'_>)) -> usize {
        const HEADER: usize = size_of::<StackCopyHeader>();
        // Each record also has the ring's 8-byte header.
        const RECORD_HEADER: usize = 8;
        let mut visited = 0;
        let mut bytes = 0;
        while let Some(item) = self.ring.next() {
            bytes += item.len() + RECORD_HEADER;
            let Some(header) = super::plain_record::<StackCopyHeader>(&item) else {
                self.malformed += 1;
                continue;
            };
            let stack_end = HEADER
                .saturating_add(header.stack_len as usize)
                .min(item.len());
            visit(StackCopy {
                header,
                stack: &item[HEADER..stack_end],
                python: python_slots(&header, &item),
            });
            visited += 1;
        }
        self.last_fill = bytes as f64 / self.capacity as f64;
        visited
    }
}

/// The Python frame slots a record ends with (none when it says it has
/// none, or is too short to).
fn python_slots(header: &StackCopyHeader, record: &[u8]) -> Vec<PythonFrameSlot> {
    let count = (header.python_slots as usize).min(MAX_PYTHON_SLOTS);
    if count == 0 || record.len() < size_of::<StackCopyHeader>() + PYTHON_SLOTS_BYTES {
        return Vec::new();
    }
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().unwrap_or_default());
    record[record.len() - PYTHON_SLOTS_BYTES..]
        .chunks_exact(size_of::<PythonFrameSlot>())
        .take(count)
        .map(|slot| PythonFrameSlot {
            code: word(&slot[..8]),
            instruction: word(&slot[8..16]),
            check: word(&slot[16..]),
        })
        .collect()
}

/// The threads the daemon names deep to the sampling programs: those whose
/// stacks were found deeper than a copy get copies
/// [`profiler_common::DEEP_THREAD_COPY_FACTOR`] times larger, ending at the
/// top of their stack (see [`profiler_common::deep_thread_pages`]).
pub struct DeepThreads {
    /// An LRU hash map (aya's `HashMap` reads both kinds).
    map: HashMap<MapData, u32, u64>,
    /// Threads named (and not since forgotten by the daemon's own count):
    /// each is named once, until the map may have let go of it.
    named: HashSet<u32>,
    stats: DeepThreadStats,
}

/// What [`DeepThreads`] did since the daemon started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DeepThreadStats {
    /// Threads named deep, and how many the programs know at most (the
    /// least recently named is forgotten first, an exiting one at once).
    pub named: u64,
    pub limit: u64,
    /// Bytes a deep thread's copy takes at most.
    pub copy_bytes: u64,
    /// Names the kernel refused (the map's update failed).
    pub failed: u64,
}

impl DeepThreads {
    /// `pages`: what a copy takes (`stack_copy`).
    pub fn new(map: HashMap<MapData, u32, u64>, pages: u32) -> Self {
        Self {
            map,
            named: HashSet::new(),
            stats: DeepThreadStats {
                limit: u64::from(DEEP_THREADS_ENTRIES),
                copy_bytes: u64::from(deep_thread_pages(pages)) * STACK_COPY_PAGE as u64,
                ..DeepThreadStats::default()
            },
        }
    }

    /// Names thread `tid`, whose stack ends at `stack_top`, deep (once).
    pub fn name(&mut self, tid: u32, stack_top: u64) {
        if self.named.len() >= 2 * DEEP_THREADS_ENTRIES as usize {
            // The map forgot the oldest long ago: name anew as needed.
            self.named.clear();
        }
        if !self.named.insert(tid) {
            return;
        }
        // The programs read up to 8 bytes past `top` (a return address at
        // the frame's top): the mapping's last word.
        match self.map.insert(tid, stack_top.saturating_sub(8), 0) {
            Ok(()) => self.stats.named += 1,
            Err(err) => {
                self.stats.failed += 1;
                tracing::debug!(tid, %err, "the kernel refused a deep thread");
            }
        }
    }

    pub fn stats(&self) -> DeepThreadStats {
        self.stats
    }
}
