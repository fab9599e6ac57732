//! Reading the stack-copy ring buffer: one record per sample of a process
//! with user memory, holding the sample's identity, its kernel stack, its
//! user registers and a copy of the top of its user stack (see
//! [`StackCopyHeader`]).
//!
//! This module owns the ring buffer and the decoding of its records; it
//! must not unwind (the symbols layer does, with the binaries' unwind
//! information) nor aggregate.

use std::mem::size_of;

use aya::maps::{MapData, RingBuf};
use profiler_common::StackCopyHeader;

/// One record, borrowed from the ring buffer while it is visited.
#[derive(Debug)]
pub struct StackCopy<'a> {
    pub header: StackCopyHeader,
    /// The copied user stack, from `header.stack_base` on.
    pub stack: &'a [u8],
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
            });
            visited += 1;
        }
        self.last_fill = bytes as f64 / self.capacity as f64;
        visited
    }
}
