//! What the process table holds, within its bounds: the records' bytes
//! (the process table's share of the memory budget) and the binaries'
//! unwind information (`unwind_info_limit`), each let go of least recently
//! sampled first.
//!
//! Owns those bounds; it must not read processes.

use std::{
    collections::HashMap,
    sync::Arc,
    time::{Duration, Instant},
};

use tracing::debug;

use super::{BinaryKey, ProcessTable};
use crate::{
    symbols::mappings::{Mapping, MappingTarget},
    unwind::UnwindStats,
};

/// What a record, a binary, and each mapping (besides their names) cost.
const RECORD_BYTES: u64 = 320;
const BINARY_BYTES: u64 = 256;
const MAPPING_BYTES: u64 = std::mem::size_of::<Mapping>() as u64;
/// What an unwinder holds per mapping it covers (framehop's module).
const UNWINDER_MAPPING_BYTES: u64 = 160;

/// Binaries a stack passed through this recently keep their unwind
/// information whatever the limit: evicting them would only read them again.
const UNWIND_INFO_IN_USE: Duration = Duration::from_secs(2);

impl ProcessTable {
    /// Holds at most `bytes` of unwind information (0: no limit), letting
    /// go of the binaries whose processes were sampled least recently.
    pub fn with_unwind_info_limit(bytes: u64) -> Self {
        Self {
            unwind_info_limit: bytes,
            ..Self::default()
        }
    }

    /// Keeps the records within `bytes` (0: no limit), letting go of those
    /// of the processes sampled least recently (recorded again when next
    /// sampled); the journal of the kernel's records of memory maps takes
    /// a quarter of them at most.
    pub fn with_limit(mut self, bytes: u64) -> Self {
        self.limit = bytes;
        self.journal.within(bytes);
        self
    }

    /// Bytes the records hold, roughly: each record, its mappings (those
    /// shared with adopted children once), its unwinder, the binaries, and
    /// the journal of the kernel's records of memory maps.
    pub fn bytes(&self) -> u64 {
        let mut shared = std::collections::HashSet::new();
        let mut bytes = 0;
        for record in self.processes.values() {
            bytes += RECORD_BYTES + record.name.len() as u64;
            for mappings in std::iter::once(&record.mappings).chain(&record.earlier) {
                if shared.insert(Arc::as_ptr(mappings) as *const u8) {
                    bytes += mappings.len() as u64 * MAPPING_BYTES;
                }
            }
            if let Some(unwinder) = &record.unwinder
                && shared.insert(Arc::as_ptr(unwinder) as *const u8)
            {
                bytes += record.mappings.len() as u64 * UNWINDER_MAPPING_BYTES;
            }
        }
        let binaries: u64 = self
            .binaries
            .values()
            .map(|binary| BINARY_BYTES + binary.path.len() as u64)
            .sum();
        bytes + binaries + self.unrecorded.len() as u64 * 32 + self.journal.bytes()
    }

    /// Lets go of the earlier memory maps of every record but the newest,
    /// then of the records of the processes sampled least recently (none
    /// sampled in the last [`UNWIND_INFO_IN_USE`]) until the records are
    /// within three quarters of the limit.
    pub(super) fn enforce_limit(&mut self) {
        if self.limit == 0 {
            return;
        }
        let mut bytes = self.bytes();
        if bytes <= self.limit {
            return;
        }
        // Earlier memory maps first (a process that execs over and over
        // is never idle): each record keeps its newest one.
        for record in self.processes.values_mut() {
            if record.earlier.len() > 1 {
                self.earlier_maps_dropped += (record.earlier.len() - 1) as u64;
                record.earlier.truncate(1);
            }
        }
        bytes = self.bytes();
        if bytes <= self.limit {
            return;
        }
        let now = Instant::now();
        let mut idle: Vec<(Instant, u32)> = self
            .processes
            .iter()
            .filter(|(_, record)| now - record.last_used > UNWIND_INFO_IN_USE)
            .map(|(&pid, record)| (record.last_used, pid))
            .collect();
        idle.sort_unstable();
        let target = self.limit / 4 * 3;
        let mut evicted = 0;
        for chunk in idle.chunks(64) {
            for (_, pid) in chunk {
                self.processes.remove(pid);
                evicted += 1;
            }
            bytes = self.bytes();
            if bytes <= target {
                break;
            }
        }
        self.binaries
            .retain(|_, binary| Arc::strong_count(binary) > 1);
        self.evicted += evicted;
        debug!(
            evicted,
            bytes,
            limit = self.limit,
            "let go of the records of processes not sampled lately"
        );
    }

    /// Brings the unwind information held back under the limit (to three
    /// quarters of it, so that it is not done at every pass): the binaries
    /// of the processes sampled least recently go first, and every process
    /// that maps one builds its unwinder again when next sampled.
    pub fn enforce_unwind_info_limit(&mut self) {
        let limit = self.unwind_info_limit;
        if limit == 0 {
            return;
        }
        let held: Vec<(BinaryKey, u64)> = self.unwind_info_held().collect();
        let mut total: u64 = held.iter().map(|(_, bytes)| bytes).sum();
        if total <= limit {
            return;
        }
        // When each binary was last needed: by the most recently sampled
        // process that maps it.
        let mut last_used: HashMap<BinaryKey, Instant> = HashMap::new();
        for record in self.processes.values() {
            for mapping in record.mappings.iter() {
                if let MappingTarget::File(binary) = &mapping.target {
                    let used = last_used.entry(binary.key).or_insert(record.last_used);
                    *used = (*used).max(record.last_used);
                }
            }
        }
        let now = Instant::now();
        let mut candidates: Vec<(Option<Instant>, BinaryKey)> = held
            .iter()
            .map(|(key, _)| (last_used.get(key).copied(), *key))
            .filter(|(used, _)| used.is_none_or(|used| now - used > UNWIND_INFO_IN_USE))
            .collect();
        candidates.sort();
        let target = limit / 4 * 3;
        let mut evicted = std::collections::HashSet::new();
        for (_, key) in candidates {
            if total <= target {
                break;
            }
            if let Some(binary) = self.binaries.get(&key) {
                total -= binary.drop_unwind_sections();
                evicted.insert(key);
            }
        }
        if evicted.is_empty() {
            return;
        }
        self.unwind_stats.binaries_evicted += evicted.len() as u64;
        for record in self.processes.values_mut() {
            let maps_evicted = record.mappings.iter().any(|mapping| {
                matches!(&mapping.target, MappingTarget::File(binary) if evicted.contains(&binary.key))
            });
            if maps_evicted {
                record.unwinder = None;
            }
        }
        debug!(
            binaries = evicted.len(),
            held_bytes = total,
            limit,
            "let go of the unwind information of binaries not sampled lately"
        );
    }

    /// Unwind outcomes so far, and the unwind information held.
    pub fn unwind_stats(&self) -> UnwindStats {
        let mut stats = self.unwind_stats.clone();
        stats.limit = self.unwind_info_limit;
        let (caches, emptied) = self.unwind_cache.counts();
        (stats.rule_caches, stats.rule_caches_emptied) = (caches as u64, emptied);
        for (_, bytes) in self.unwind_info_held() {
            stats.binaries += 1;
            stats.bytes += bytes;
        }
        stats
    }

    /// The binaries whose unwind information is held, and its bytes.
    pub(super) fn unwind_info_held(&self) -> impl Iterator<Item = (BinaryKey, u64)> + '_ {
        self.binaries
            .iter()
            .filter_map(|(key, binary)| Some((*key, binary.unwind_sections_held()?.bytes())))
    }
}
