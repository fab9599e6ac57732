//! Keeping the store within its settings as it fills: merging past buckets
//! at the resolution, expiring those older than the retention, and at the
//! memory ceiling compacting the tables, coarsening the oldest buckets and
//! then dropping them (counted, and said in the reports of their windows).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, info};

use super::{Bucket, Eviction, Store, StoreSettings};

/// The new id of what a compaction dropped, in a [`Renumbering`].
pub const GONE: u32 = u32::MAX;

/// How a compaction changed the store's ids: from generation `from` to
/// the next, each old stack id's new one (or [`GONE`]), in the same order,
/// and each old location id's.
#[derive(Debug)]
pub struct Renumbering {
    pub from: u64,
    pub stacks: Vec<u32>,
    pub locations: Vec<u32>,
}

impl Renumbering {
    /// The generation the ids are of after it: a compaction starts the next.
    pub fn to(&self) -> u64 {
        self.from + 1
    }
}

/// Renumberings kept ([`super::Store::renumberings_from`]): a store at its
/// memory ceiling compacts twice in a drain (before and after dropping its
/// oldest buckets), and a stack index a few drains behind can still follow.
pub(super) const RENUMBERINGS_KEPT: usize = 4;

/// Rebuild the intern tables (dropping what no bucket refers to any more)
/// at most this often, unless memory is short.
const COMPACTION_INTERVAL: Duration = Duration::from_secs(60);

/// Dropping buckets at the memory ceiling frees this fraction (1/n) of it
/// beyond what is over, so that the next drains do not come back at once.
const CEILING_MARGIN: u64 = 10;

/// At the memory ceiling, the oldest buckets are merged into buckets of up
/// to this many times the resolution before any are dropped.
pub(super) const MAX_COARSENING: u32 = 6;

impl Store {
    /// Merges the buckets of each resolution span (aligned on the epoch; a
    /// bucket belongs to the span its middle falls in) once a later bucket
    /// shows the span complete, unless an open window still holds it.
    pub(super) fn coarsen_complete_spans(&mut self) {
        let resolution = self.settings.resolution.as_nanos().max(1);
        let span_of = |bucket: &Bucket| {
            bucket
                .middle()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
                / resolution
        };
        let held_from = self.holds.oldest();
        let mut first = self
            .buckets
            .partition_point(|bucket| bucket.end <= self.coarsened_until);
        while first < self.buckets.len() {
            let span = span_of(&self.buckets[first]);
            let Some(next) =
                (first..self.buckets.len()).find(|&index| span_of(&self.buckets[index]) != span)
            else {
                // The span is still being filled.
                return;
            };
            if held_from.is_some_and(|held| self.buckets[next - 1].end > held) {
                return;
            }
            if next - first > 1 {
                self.merge_buckets(first, next);
            }
            self.coarsened_until = self.buckets[first].end;
            first += 1;
        }
    }

    /// Replaces the buckets `first..end` by one.
    pub(super) fn merge_buckets(&mut self, first: usize, end: usize) {
        let parts: Vec<Bucket> = self.buckets.drain(first..end).collect();
        self.bucket_bytes -= parts.iter().map(Bucket::bytes).sum::<usize>();
        let merged = Bucket::merge(parts);
        self.bucket_bytes += merged.bytes();
        self.buckets.insert(first, merged);
    }

    /// Drops buckets that ended before the retention window.
    pub(super) fn expire(&mut self, now: SystemTime) {
        let Some(horizon) = now.checked_sub(self.settings.retention) else {
            return;
        };
        while self
            .buckets
            .front()
            .is_some_and(|bucket| bucket.end < horizon)
        {
            self.pop_oldest();
        }
        while self
            .evictions
            .front()
            .is_some_and(|eviction| eviction.end < horizon)
        {
            self.evictions.pop_front();
        }
        if self.dropped_since_compaction
            && now
                .duration_since(self.last_compaction)
                .is_ok_and(|since| since >= COMPACTION_INTERVAL)
        {
            self.compact(now);
        }
    }

    /// Keeps the store under the ceiling: first by compacting the tables,
    /// then by coarsening the oldest buckets, then by dropping them (counted,
    /// never silently) down to a margin under the ceiling ([`CEILING_MARGIN`]).
    ///
    /// A dropped bucket's stacks leave the tables only at the next
    /// compaction, and the tables are most of a store of many distinct
    /// stacks: so the oldest buckets are dropped until their share of the
    /// store would free enough, then the tables compacted, and again while
    /// that was not enough. Counting on the buckets' own bytes alone would
    /// drop most of the history to free what a few buckets hold.
    pub(super) fn enforce_ceiling(&mut self) {
        let limit = self.settings.memory_limit;
        if self.memory_bytes() <= limit {
            return;
        }
        // Only dropped buckets free table entries: at the ceiling a store
        // coarsens at every drain (several a second), and compacting each
        // time re-interned every stack, the store locked, to free nothing.
        if self.dropped_since_compaction {
            self.compact(SystemTime::now());
        }
        self.coarsen_for_memory();
        if self.memory_bytes() <= limit {
            return;
        }
        let target = limit - limit / CEILING_MARGIN;
        while self.memory_bytes() > target && self.buckets.len() > 1 {
            let over = self.memory_bytes() - target;
            // A bucket's share of the tables, by its entries: at most what
            // compacting frees of them once it is gone (buckets share stacks).
            let tables = self.table_bytes() as u128;
            let entries: usize = self.buckets.iter().map(Bucket::entries).sum();
            let mut freed = 0_u64;
            while freed < over && self.buckets.len() > 1 {
                let oldest = &self.buckets[0];
                let share = tables * oldest.entries() as u128 / entries.max(1) as u128;
                freed += oldest.bytes() as u64 + share as u64;
                self.evict_oldest();
            }
            self.compact(SystemTime::now());
        }
    }

    /// Drops the oldest bucket for memory, counted and remembered for the
    /// reports of its window.
    fn evict_oldest(&mut self) {
        let bucket = self.pop_oldest();
        self.buckets_evicted_for_memory += 1;
        self.evictions.push_back(Eviction {
            start: bucket.start,
            end: bucket.end,
            samples: bucket.samples(),
        });
        if self.buckets_evicted_for_memory.is_power_of_two() {
            info!(
                evicted = self.buckets_evicted_for_memory,
                limit = self.settings.memory_limit,
                "the profile store is at its memory ceiling; dropping the oldest samples \
                 before their retention ends (raise memory_limit to keep them)"
            );
        }
    }

    /// Merges neighbouring buckets of the older half of the store, oldest
    /// first, into buckets of up to [`MAX_COARSENING`] times the resolution,
    /// until the store is under its ceiling. Held buckets are left alone.
    pub(super) fn coarsen_for_memory(&mut self) {
        let longest = self.settings.resolution * MAX_COARSENING;
        let held_from = self.holds.oldest();
        // The tables do not shrink by merging buckets: measured once.
        let tables = self.table_bytes();
        let over = |store: &Self| store.bucket_part_bytes() + tables > store.settings.memory_limit;
        let mut first = 0;
        while over(self) && first + 1 < self.buckets.len() / 2 {
            let (older, newer) = (&self.buckets[first], &self.buckets[first + 1]);
            let span = newer.end.duration_since(older.start).unwrap_or_default();
            if span > longest || held_from.is_some_and(|held| newer.end > held) {
                first += 1;
                continue;
            }
            self.merge_buckets(first, first + 2);
            self.buckets_coarsened_for_memory += 1;
            self.coarsened_until = self.coarsened_until.max(self.buckets[first].end);
            if self.buckets_coarsened_for_memory.is_power_of_two() {
                info!(
                    coarsened = self.buckets_coarsened_for_memory,
                    limit = self.settings.memory_limit,
                    "the profile store is at its memory ceiling; merging its oldest buckets \
                     into coarser ones (raise memory_limit to keep the resolution)"
                );
            }
        }
    }

    pub(super) fn pop_oldest(&mut self) -> Bucket {
        let bucket = self
            .buckets
            .pop_front()
            .expect("callers check that a bucket exists");
        self.bucket_bytes -= bucket.bytes();
        self.held.remove(&bucket);
        self.dropped_since_compaction = true;
        bucket
    }

    /// Rebuilds the intern tables with only what buckets still refer to.
    /// The stacks kept keep their order (new ids are given in the order of
    /// the old ones), and how ids changed is kept for the next
    /// [`RENUMBERINGS_KEPT`] compactions ([`Store::renumberings_from`]): what
    /// an index of the stacks needs to follow them rather than start anew.
    pub(super) fn compact(&mut self, now: SystemTime) {
        let started = std::time::Instant::now();
        self.last_compaction = now;
        self.dropped_since_compaction = false;
        let old_threads = std::mem::take(&mut self.threads);
        let old_locations = std::mem::take(&mut self.locations);
        let old_stacks = std::mem::take(&mut self.stacks);
        let before = old_stacks.len();
        let mut used = vec![false; before];
        let mut used_threads = vec![false; old_threads.values().len()];
        for bucket in &self.buckets {
            let cpu = bucket
                .cpu
                .iter()
                .map(|samples| (samples.thread, samples.stack));
            let waits = bucket.waits.iter().map(|wait| (wait.thread, wait.stack));
            for (thread, stack) in cpu.chain(waits) {
                used[stack as usize] = true;
                used_threads[thread as usize] = true;
            }
        }
        let mut stacks = vec![GONE; before];
        let mut locations = vec![GONE; old_locations.values().len()];
        for (old, new) in (0..).zip(&mut stacks) {
            if !used[old as usize] {
                continue;
            }
            let ids: Vec<u32> = old_stacks
                .get(old)
                .iter()
                .map(|&id| {
                    let slot = &mut locations[id as usize];
                    if *slot == GONE {
                        let location = old_locations.get(id);
                        *slot = self
                            .locations
                            .intern(location.key.clone(), || location.clone());
                    }
                    *slot
                })
                .collect();
            // Old stacks are distinct: each gets the next id.
            *new = self.stacks.intern(&ids);
        }
        // Old threads are distinct too: new ids in the order of the old
        // ones, so that renumbered entries keep their (thread, stack) order.
        let threads: Vec<u32> = (0..)
            .zip(&used_threads)
            .map(|(old, &used)| match used {
                true => self.intern_thread(old_threads.get(old).clone()),
                false => GONE,
            })
            .collect();
        let mut buckets = std::mem::take(&mut self.buckets);
        for bucket in &mut buckets {
            for samples in bucket.cpu.iter_mut() {
                samples.thread = threads[samples.thread as usize];
                samples.stack = stacks[samples.stack as usize];
            }
            for wait in bucket.waits.iter_mut() {
                wait.thread = threads[wait.thread as usize];
                wait.stack = stacks[wait.stack as usize];
            }
            debug_assert!(
                bucket
                    .cpu
                    .is_sorted_by_key(|samples| (samples.thread, samples.stack))
                    && bucket
                        .waits
                        .is_sorted_by_key(|wait| (wait.thread, wait.stack)),
                "renumbered in order, entries stay sorted"
            );
        }
        self.held = super::held::HeldSums::of(&buckets);
        self.buckets = buckets;
        if self.renumberings.len() == RENUMBERINGS_KEPT {
            self.renumberings.pop_front();
        }
        self.renumberings.push_back(Renumbering {
            from: self.generation,
            stacks,
            locations,
        });
        self.generation += 1;
        debug!(
            stacks_before = before,
            stacks_after = self.stacks.len(),
            ms = started.elapsed().as_secs_f64() * 1e3,
            "compacted the profile store"
        );
    }

    /// Changes retention, resolution and ceiling (configuration reload):
    /// what the new ones no longer allow goes at once; buckets already
    /// merged stay as they are.
    pub fn set_settings(&mut self, settings: StoreSettings, now: SystemTime) {
        self.settings = settings;
        self.expire(now);
        self.enforce_ceiling();
    }
}
