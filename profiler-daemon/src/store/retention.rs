//! Keeping the store within its settings as it fills: merging past buckets
//! at the resolution, expiring those older than the retention, and at the
//! memory ceiling compacting the tables, coarsening the oldest buckets and
//! then dropping them (counted, and said in the reports of their windows).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{debug, info};

use super::{
    Bucket, Eviction, Store, StoreSettings,
    tables::{Interner, StackTable},
};
use crate::{
    profile::ThreadInfo,
    symbols::symbolizer::{LocationKey, SymbolizedLocation},
};

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

/// A compaction planned under the store's read lock, to be applied under
/// its write lock ([`Store::plan_compaction`]): the new tables, and each
/// old id's new one (or [`GONE`]).
#[derive(Debug)]
pub struct CompactionPlan {
    /// The store's (generation, batches taken) it was planned at.
    of: (u64, u64),
    threads: (Interner<ThreadInfo, ThreadInfo>, Vec<u32>),
    locations: (
        Interner<LocationKey, std::sync::Arc<SymbolizedLocation>>,
        Vec<u32>,
    ),
    stacks: (StackTable, Vec<u32>),
    planned_in: std::time::Duration,
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

/// Compactions in a row at the memory ceiling, each followed by dropping
/// more buckets if it freed less than counted on, before the next insert.
pub const CEILING_ROUNDS: usize = 4;

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
    }

    /// Whether the tables are due to be compacted: buckets went since the
    /// last compaction, at least [`COMPACTION_INTERVAL`] ago, or at once
    /// when the store is over its ceiling until they are. The caller plans
    /// it under a read lock and applies it under the write lock
    /// ([`Store::plan_compaction`], [`Store::apply_compaction`]), so that
    /// reports read on while the tables are rebuilt, then calls
    /// [`Store::enforce_ceiling`] again (see [`Store::compact_when_due`]).
    pub fn compaction_due(&self, now: SystemTime) -> bool {
        self.dropped_since_compaction
            && (self.compaction_for_memory
                || now
                    .duration_since(self.last_compaction)
                    .is_ok_and(|since| since >= COMPACTION_INTERVAL))
    }

    /// Compacts the tables at once while due, the ceiling enforced again
    /// after each compaction, at most [`CEILING_ROUNDS`] times: what the
    /// daemon's pipeline does after each insert with the store's locks
    /// (planning under the read lock), for a store no other thread reads
    /// (a reload, tests, benchmarks).
    pub fn compact_when_due(&mut self, now: SystemTime) {
        for _ in 0..CEILING_ROUNDS {
            if !self.compaction_due(now) {
                return;
            }
            self.compact(now);
            self.enforce_ceiling();
        }
    }

    /// Keeps the store under the ceiling: first by coarsening the oldest
    /// buckets, then by dropping them (counted, never silently) down to a
    /// margin under the ceiling ([`CEILING_MARGIN`]), and by asking for a
    /// compaction of the tables ([`Store::compaction_due`]).
    ///
    /// It never compacts itself: it runs under the store's write lock at
    /// every insert, and a compaction of a busy window's tables (tens of
    /// milliseconds) would keep every report waiting. A dropped bucket's
    /// stacks leave the tables only at the next compaction, and the tables
    /// are most of a store of many distinct stacks: so the oldest buckets
    /// are dropped until their share of the tables (by their entries) and
    /// their own bytes would bring the store under the margin, and the
    /// compaction asked for frees the tables' part. While buckets dropped
    /// before (for memory or by age) still wait for theirs, nothing more is
    /// dropped: the compaction may free enough, and the caller enforces the
    /// ceiling again after it. Counting on the buckets' own bytes alone
    /// would drop most of the history to free what a few buckets hold.
    pub fn enforce_ceiling(&mut self) {
        let limit = self.settings.memory_limit;
        if self.memory_bytes() <= limit {
            return;
        }
        self.coarsen_for_memory();
        if self.memory_bytes() <= limit {
            return;
        }
        if self.dropped_since_compaction {
            self.compaction_for_memory = true;
            return;
        }
        let target = limit - limit / CEILING_MARGIN;
        // A bucket's share of the tables, by its entries: at most what
        // compacting frees of them once it is gone (buckets share stacks).
        let tables = u128::from(self.table_bytes());
        let entries: usize = self.buckets.iter().map(Bucket::entries).sum();
        let mut tables_freed = 0_u64;
        while self.memory_bytes().saturating_sub(tables_freed) > target && self.buckets.len() > 1 {
            let oldest = &self.buckets[0];
            let share = tables * oldest.entries() as u128 / entries.max(1) as u128;
            tables_freed += share as u64;
            self.evict_oldest();
        }
        self.compaction_for_memory = self.dropped_since_compaction;
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

    /// Rebuilds the intern tables with only what buckets still refer to,
    /// at once ([`Store::plan_compaction`] then [`Store::apply_compaction`]).
    pub(super) fn compact(&mut self, now: SystemTime) {
        let plan = self.plan_compaction();
        let applied = self.apply_compaction(plan, now);
        debug_assert!(applied, "nothing changed the store in between");
    }

    /// The intern tables with only what buckets still refer to, and how
    /// ids change: the expensive part of a compaction, which only reads the
    /// store. The stacks kept keep their order (new ids are given in the
    /// order of the old ones), as do the threads.
    pub fn plan_compaction(&self) -> CompactionPlan {
        let started = std::time::Instant::now();
        let before = self.stacks.len();
        let mut used = vec![false; before];
        let mut used_threads = vec![false; self.threads.values().len()];
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
        let (mut new_locations, mut new_stacks) = (Interner::default(), StackTable::default());
        let mut stacks = vec![GONE; before];
        let mut locations = vec![GONE; self.locations.values().len()];
        for (old, new) in (0..).zip(&mut stacks) {
            if !used[old as usize] {
                continue;
            }
            let ids: Vec<u32> = self
                .stacks
                .get(old)
                .iter()
                .map(|&id| {
                    let slot = &mut locations[id as usize];
                    if *slot == GONE {
                        let location = self.locations.get(id);
                        *slot = new_locations.intern(location.key.clone(), || location.clone());
                    }
                    *slot
                })
                .collect();
            // Old stacks are distinct: each gets the next id.
            *new = new_stacks.intern(&ids);
        }
        // Old threads are distinct too: new ids in the order of the old
        // ones, so that renumbered entries keep their (thread, stack) order.
        let mut new_threads = Interner::default();
        let threads: Vec<u32> = (0..)
            .zip(&used_threads)
            .map(|(old, &used)| match used {
                true => {
                    let thread = self.threads.get(old);
                    new_threads.intern(thread.clone(), || thread.clone())
                }
                false => GONE,
            })
            .collect();
        CompactionPlan {
            of: (self.generation, self.inserts),
            threads: (new_threads, threads),
            locations: (new_locations, locations),
            stacks: (new_stacks, stacks),
            planned_in: started.elapsed(),
        }
    }

    /// Puts a compaction's tables in place and renumbers the buckets'
    /// entries, unless the store took a batch or compacted since it was
    /// planned (then nothing is done and `false` returned: its tables would
    /// miss what came). Keeps how ids changed for the next
    /// [`RENUMBERINGS_KEPT`] compactions ([`Store::renumberings_from`]): what
    /// an index of the stacks needs to follow them rather than start anew.
    pub fn apply_compaction(&mut self, plan: CompactionPlan, now: SystemTime) -> bool {
        if plan.of != (self.generation, self.inserts) {
            return false;
        }
        let started = std::time::Instant::now();
        let CompactionPlan {
            threads: (new_threads, threads),
            locations: (new_locations, locations),
            stacks: (new_stacks, stacks),
            planned_in,
            ..
        } = plan;
        let before = self.stacks.len();
        self.last_compaction = now;
        self.dropped_since_compaction = false;
        self.compaction_for_memory = false;
        self.threads = new_threads;
        self.locations = new_locations;
        self.stacks = new_stacks;
        for bucket in &mut self.buckets {
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
        self.held = super::held::HeldSums::of(&self.buckets);
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
            planned_ms = planned_in.as_secs_f64() * 1e3,
            applied_ms = started.elapsed().as_secs_f64() * 1e3,
            "compacted the profile store"
        );
        true
    }

    /// Changes retention, resolution and ceiling (configuration reload):
    /// what the new ones no longer allow goes at once; buckets already
    /// merged stay as they are.
    pub fn set_settings(&mut self, settings: StoreSettings, now: SystemTime) {
        self.settings = settings;
        self.expire(now);
        self.enforce_ceiling();
        self.compact_when_due(now);
    }
}
