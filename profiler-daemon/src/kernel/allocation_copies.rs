//! Reading the allocation ring buffer: the records of sampled allocations
//! (as stack copies, see [`super::stack_copies`]), each tagged with the
//! profile that sampled it, and telling the allocation programs how many
//! of each profile's records have been read, so that a profile whose
//! unread records fill its share of the ring drops its next samples
//! rather than take another profile's room.
//!
//! Owns the ring buffer and the map of read counts; it must not unwind
//! nor decide the shares (the allocation probes write them).

use aya::maps::{Array, MapData};
use profiler_common::allocs::{MAX_PROFILED_PROCESSES, ReadCount};
use tracing::warn;

use super::stack_copies::{StackCopies, StackCopy};

/// The allocation ring buffer and the read counts the programs check.
pub struct AllocationCopies {
    copies: StackCopies,
    read: Array<MapData, ReadCount>,
    counts: ReadCounts,
}

impl AllocationCopies {
    pub fn new(copies: StackCopies, read: Array<MapData, ReadCount>) -> Self {
        Self {
            copies,
            read,
            counts: ReadCounts::default(),
        }
    }

    /// The share of the ring buffer (0 to 1) the last read emptied.
    pub fn last_fill(&self) -> f64 {
        self.copies.last_fill()
    }

    /// Visits every record written so far, oldest first, and frees it;
    /// then tells the programs how many of each profile's records are read.
    /// Returns how many were visited.
    pub fn read(&mut self, mut visit: impl FnMut(StackCopy<'_>)) -> usize {
        let counts = &mut self.counts;
        let visited = self.copies.read(|copy| {
            counts.note(copy.header.tag);
            visit(copy);
        });
        for (slot, count) in self.counts.take_changed() {
            if let Err(err) = self.read.set(slot, count, 0) {
                // The profile then drops its samples as if unread: counted.
                warn!("cannot tell the allocation programs which records were read: {err}");
            }
        }
        visited
    }
}

/// The slot of the profile of serial `serial` (the daemon hands serials out
/// so that they follow the slot: see the allocation probes).
pub fn slot_of(serial: u64) -> u32 {
    (serial % u64::from(MAX_PROFILED_PROCESSES)) as u32
}

/// Per slot, the records read of its latest profile.
#[derive(Debug, Default)]
struct ReadCounts {
    slots: [ReadCount; MAX_PROFILED_PROCESSES as usize],
    changed: u32,
}

impl ReadCounts {
    /// Counts one record of the profile `serial` (0: not a profile's).
    fn note(&mut self, serial: u64) {
        if serial == 0 {
            return;
        }
        let slot = slot_of(serial);
        let count = &mut self.slots[slot as usize];
        // A slot's profiles write in turn: a later serial starts afresh, an
        // earlier one (its records read late) no longer counts.
        if serial > count.serial {
            *count = ReadCount { serial, read: 0 };
        }
        if serial == count.serial {
            count.read += 1;
            self.changed |= 1 << slot;
        }
    }

    /// The counts changed since the last call, by slot.
    fn take_changed(&mut self) -> impl Iterator<Item = (u32, ReadCount)> + '_ {
        let changed = std::mem::take(&mut self.changed);
        (0..MAX_PROFILED_PROCESSES)
            .filter(move |slot| changed & (1 << slot) != 0)
            .map(|slot| (slot, self.slots[slot as usize]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_profile_counts_its_own_records_in_its_slot() {
        let mut counts = ReadCounts::default();
        let (first, other) = (17, 18);
        assert_eq!((slot_of(first), slot_of(other)), (1, 2));
        for serial in [first, first, other, 0] {
            counts.note(serial);
        }
        let changed: Vec<_> = counts.take_changed().collect();
        assert_eq!(
            changed,
            [
                (
                    1,
                    ReadCount {
                        serial: 17,
                        read: 2
                    }
                ),
                (
                    2,
                    ReadCount {
                        serial: 18,
                        read: 1
                    }
                )
            ]
        );
        assert_eq!(counts.take_changed().count(), 0, "nothing new");
        // The next profile in slot 1 starts from none read; a record of the
        // one before, read late, does not count for it.
        let next = first + u64::from(MAX_PROFILED_PROCESSES);
        counts.note(next);
        counts.note(first);
        let changed: Vec<_> = counts.take_changed().collect();
        assert_eq!(
            changed,
            [(
                1,
                ReadCount {
                    serial: next,
                    read: 1
                }
            )]
        );
    }
}
