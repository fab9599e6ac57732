//! The profile store: symbolized samples aggregated per thread and stack in
//! time-stamped buckets, kept for the retention period under a hard memory
//! ceiling, so that any window inside the retention can be reported.
//!
//! The store owns the buckets and the tables that intern threads, stacks and
//! locations (so a bucket entry is a few integers). It answers queries by
//! assembling a self-contained [`Profile`](crate::profile::Profile); it must not format reports or
//! symbolize.

mod aggregate;
mod held;
mod holds;
mod query;
mod retention;
mod selection;
mod tables;
mod totals;

use std::{
    collections::VecDeque,
    mem::{size_of, size_of_val},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profiler_common::SampleKind;
use rustc_hash::FxHashMap as HashMap;

use self::tables::{HeapBytes, Interner, StackTable};
pub use self::{
    holds::{WindowHold, WindowHolds},
    query::{Query, SumBy, ThreadPick},
    retention::{CEILING_ROUNDS, CompactionPlan, GONE, Renumbering},
    selection::{CommPattern, SampleAccess, Selector},
};
use crate::{
    kernel::drain::CounterDeltas,
    profile::{ThreadInfo, ThreadState},
    symbols::symbolizer::{LocationKey, SymbolizedBatch, SymbolizedLocation},
};

/// How the store keeps its history.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreSettings {
    /// How long samples are kept.
    pub retention: Duration,
    /// The span of a bucket once its time is past (drains are finer; the
    /// buckets of a complete span are merged into one).
    pub resolution: Duration,
    /// Hard ceiling on the bytes the store holds.
    pub memory_limit: u64,
}

/// What the store holds, for the status report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreStats {
    pub memory_bytes: u64,
    pub memory_limit_bytes: u64,
    pub retention: Duration,
    pub resolution: Duration,
    pub buckets: u64,
    /// How far back samples reach.
    pub oldest: Option<SystemTime>,
    /// The span of the longest bucket: the coarsest resolution history is
    /// held at (longer than `resolution` once the ceiling made it coarsen).
    pub coarsest_bucket: Duration,
    pub distinct_stacks: u64,
    pub buckets_evicted_for_memory: u64,
    pub buckets_coarsened_for_memory: u64,
}

/// CPU-clock samples of one thread with one stack in one bucket. Each
/// weighs one sampling period, so their weight is not stored. A bucket's
/// are sorted by (thread, stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CpuSamples {
    thread: u32,
    stack: u32,
    count: u32,
}

/// Time one thread waited off CPU with one stack (whose leaf says how it
/// waited) in one bucket. A bucket's are sorted by (thread, stack).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct WaitTime {
    thread: u32,
    stack: u32,
    nanos: u64,
    state: ThreadState,
}

/// A span of the held history and its samples in a mode (see
/// [`Store::timeline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HeldSpan {
    pub start: SystemTime,
    pub end: SystemTime,
    pub samples: u64,
}

#[derive(Debug)]
struct Bucket {
    start: SystemTime,
    end: SystemTime,
    /// Nanoseconds of CPU one sample of this bucket stands for.
    period_ns: u64,
    cpu: Box<[CpuSamples]>,
    waits: Box<[WaitTime]>,
    counters: CounterDeltas,
}

impl Bucket {
    fn bytes(&self) -> usize {
        size_of::<Self>() + size_of_val(&*self.cpu) + size_of_val(&*self.waits)
    }

    fn samples(&self) -> u64 {
        samples_in(&self.cpu)
    }

    /// Its (thread, stack) entries.
    fn entries(&self) -> usize {
        self.cpu.len() + self.waits.len()
    }

    fn span(&self) -> Duration {
        self.end.duration_since(self.start).unwrap_or_default()
    }

    fn middle(&self) -> SystemTime {
        self.start + self.span() / 2
    }

    /// Whether its middle falls within `start..=end`: the buckets of a window.
    fn middle_within(&self, start: SystemTime, end: SystemTime) -> bool {
        let middle = self.middle();
        start <= middle && middle <= end
    }

    /// One bucket for the time of `parts` (consecutive, oldest first), with
    /// their samples added up.
    fn merge(parts: impl IntoIterator<Item = Bucket>) -> Bucket {
        let mut parts = parts.into_iter();
        let mut merged = parts.next().expect("at least one bucket to merge");
        let mut cpu = std::mem::take(&mut merged.cpu).into_vec();
        let mut waits = std::mem::take(&mut merged.waits).into_vec();
        let mut samples = samples_in(&cpu);
        let mut weight = u128::from(merged.period_ns) * u128::from(samples);
        for part in parts {
            merged.end = part.end;
            let part_samples = part.samples();
            weight += u128::from(part.period_ns) * u128::from(part_samples);
            samples += part_samples;
            for (total, delta) in merged.counters.iter_mut().zip(part.counters) {
                *total += delta;
            }
            cpu.extend_from_slice(&part.cpu);
            waits.extend_from_slice(&part.waits);
        }
        merged.waits = merge_waits(waits);
        sort_cpu_samples(&mut cpu);
        cpu.dedup_by(|next, kept| {
            let same = (next.thread, next.stack) == (kept.thread, kept.stack);
            if same {
                kept.count = kept.count.saturating_add(next.count);
            }
            same
        });
        merged.cpu = cpu.into_boxed_slice();
        merged.period_ns = weight.checked_div(u128::from(samples)).unwrap_or(0) as u64;
        merged
    }
}

/// Sorted by (thread, stack), one entry per pair.
fn merge_waits(mut waits: Vec<WaitTime>) -> Box<[WaitTime]> {
    sort_waits(&mut waits);
    waits.dedup_by(|next, kept| {
        let same = (next.thread, next.stack) == (kept.thread, kept.stack);
        if same {
            kept.nanos = kept.nanos.saturating_add(next.nanos);
        }
        same
    });
    waits.into_boxed_slice()
}

fn sort_waits(waits: &mut [WaitTime]) {
    waits.sort_unstable_by_key(|wait| (wait.thread, wait.stack));
}

fn samples_in(cpu: &[CpuSamples]) -> u64 {
    cpu.iter().map(|samples| u64::from(samples.count)).sum()
}

/// What a location owns beyond itself, roughly (its names are shared).
const LOCATION_HEAP_BYTES: usize = 64;
const FRAME_BYTES: usize = size_of::<crate::profile::Frame>();

impl HeapBytes for ThreadInfo {
    /// Its names are shared with the process table and every sample.
    fn heap_bytes(&self) -> usize {
        0
    }
}

impl HeapBytes for Arc<SymbolizedLocation> {
    fn heap_bytes(&self) -> usize {
        LOCATION_HEAP_BYTES + FRAME_BYTES * self.location.frames.len()
    }
}

/// Buckets of aggregated samples and the tables they refer to.
#[derive(Debug)]
pub struct Store {
    settings: StoreSettings,
    /// Open windows: buckets from the oldest on are kept as drained.
    holds: WindowHolds,
    /// Buckets that end by this instant are merged at the resolution.
    coarsened_until: SystemTime,
    buckets: VecDeque<Bucket>,
    threads: Interner<ThreadInfo, ThreadInfo>,
    locations: Interner<LocationKey, Arc<SymbolizedLocation>>,
    stacks: StackTable,
    /// Bytes of the buckets (the tables are measured when asked).
    bucket_bytes: usize,
    buckets_evicted_for_memory: u64,
    buckets_coarsened_for_memory: u64,
    /// Windows of the buckets dropped for memory, and their samples, until
    /// they are older than the retention: reports of windows that overlap
    /// them say what they lost.
    evictions: VecDeque<Eviction>,
    last_compaction: SystemTime,
    /// Whether a bucket went since the last compaction: only then can a
    /// compaction free anything.
    dropped_since_compaction: bool,
    /// Whether the store is over its ceiling until the tables are
    /// compacted: a compaction is due at once, not at its interval.
    compaction_for_memory: bool,
    /// How many times the tables were compacted: stack and location ids
    /// are of one generation (ids only grow between compactions).
    generation: u64,
    /// How the last compactions changed the ids, oldest first, at most
    /// [`retention::RENUMBERINGS_KEPT`] (not counted in the store's memory:
    /// 4 bytes per stack and location each found).
    renumberings: VecDeque<Renumbering>,
    /// When the first bucket began: what came before was never sampled.
    first_sample: Option<SystemTime>,
    /// The CPU samples of the buckets held, per stack and per thread.
    held: held::HeldSums,
    /// Batches taken: a compaction planned before the last one is stale.
    inserts: u64,
}

#[derive(Clone, Copy, Debug)]
struct Eviction {
    start: SystemTime,
    end: SystemTime,
    samples: u64,
}

impl Store {
    pub fn new(settings: StoreSettings) -> Self {
        Self {
            settings,
            holds: WindowHolds::default(),
            coarsened_until: UNIX_EPOCH,
            buckets: VecDeque::new(),
            threads: Interner::default(),
            locations: Interner::default(),
            stacks: StackTable::default(),
            bucket_bytes: 0,
            buckets_evicted_for_memory: 0,
            buckets_coarsened_for_memory: 0,
            evictions: VecDeque::new(),
            last_compaction: SystemTime::now(),
            dropped_since_compaction: false,
            compaction_for_memory: false,
            generation: 0,
            renumberings: VecDeque::new(),
            first_sample: None,
            held: held::HeldSums::default(),
            inserts: 0,
        }
    }

    /// Adds a batch as one bucket, merges the buckets of spans now complete,
    /// then enforces retention and the ceiling.
    pub fn insert(&mut self, batch: SymbolizedBatch) {
        self.inserts += 1;
        let mut counts: HashMap<(u32, u32), u32> = HashMap::default();
        let mut waits = Vec::new();
        let (mut samples, mut weight) = (0_u64, 0_u64);
        for sample in batch.samples {
            match sample.kind {
                SampleKind::OffCpuSleeping | SampleKind::OffCpuBlocked | SampleKind::RunQueue => {
                    // The symbolizer put the wait's marker at the leaf.
                    waits.push(WaitTime {
                        thread: self.intern_thread(sample.thread),
                        stack: self.intern_stack(&sample.stack),
                        nanos: sample.weight,
                        state: ThreadState::of(sample.kind),
                    });
                }
                SampleKind::CpuClock => {
                    let thread = self.intern_thread(sample.thread);
                    let stack = self.intern_stack(&sample.stack);
                    let count = counts.entry((thread, stack)).or_default();
                    *count = count.saturating_add(u32::try_from(sample.count).unwrap_or(u32::MAX));
                    samples += sample.count;
                    weight += sample.weight;
                }
                // Peeks and allocation profiles keep their own samples
                // (see `peek`, `allocs`); none come here.
                SampleKind::Peek | SampleKind::PeekInstant | SampleKind::Allocation => {}
            }
        }
        let mut cpu: Box<[CpuSamples]> = counts
            .into_iter()
            .map(|((thread, stack), count)| CpuSamples {
                thread,
                stack,
                count,
            })
            .collect();
        sort_cpu_samples(&mut cpu);
        let bucket = Bucket {
            start: batch.start,
            end: batch.end,
            period_ns: weight.checked_div(samples).unwrap_or(0),
            cpu,
            waits: merge_waits(waits),
            counters: batch.counters,
        };
        self.first_sample.get_or_insert(bucket.start);
        self.bucket_bytes += bucket.bytes();
        self.held.add(&bucket);
        self.buckets.push_back(bucket);
        self.coarsen_complete_spans();
        self.expire(batch.end);
        self.enforce_ceiling();
    }

    fn intern_thread(&mut self, thread: ThreadInfo) -> u32 {
        self.threads.intern(thread.clone(), || thread)
    }

    fn intern_stack(&mut self, stack: &[Arc<SymbolizedLocation>]) -> u32 {
        let ids: Vec<u32> = stack
            .iter()
            .map(|location| {
                self.locations
                    .intern(location.key.clone(), || location.clone())
            })
            .collect();
        self.stacks.intern(&ids)
    }

    /// The holds of the windows still open, which keep the buckets they
    /// cover as drained.
    pub fn holds(&self) -> WindowHolds {
        self.holds.clone()
    }

    /// Bytes the store holds: its buckets and its tables at their capacity.
    pub fn memory_bytes(&self) -> u64 {
        self.bucket_part_bytes() + self.table_bytes()
    }

    fn bucket_part_bytes(&self) -> u64 {
        (self.bucket_bytes + self.buckets.capacity() * size_of::<Bucket>()) as u64
    }

    fn table_bytes(&self) -> u64 {
        (self.threads.bytes() + self.locations.bytes() + self.stacks.bytes() + self.held.bytes())
            as u64
    }

    /// The generation of the store's stack and location ids: the same ids
    /// mean the same stacks as long as it does not change, and stacks added
    /// meanwhile get the next ids.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// How stack and location ids changed from generation `from` to
    /// [`Store::generation`]: the renumbering of each compaction since, in
    /// order; `None` when one of them is no longer kept (or `from` is not
    /// an earlier generation). A store at its memory ceiling compacts more
    /// than once in a drain: what holds the ids of a generation follows
    /// each step rather than start anew.
    pub fn renumberings_from(&self, from: u64) -> Option<impl Iterator<Item = &Renumbering>> {
        let first = self
            .renumberings
            .iter()
            .position(|renumbering| renumbering.from == from)?;
        Some(self.renumberings.iter().skip(first))
    }

    /// Distinct stacks held: their ids are `0..stack_count()`.
    pub fn stack_count(&self) -> usize {
        self.stacks.len()
    }

    /// A stack's location ids, root first.
    pub fn stack_locations(&self, stack: u32) -> &[u32] {
        self.stacks.get(stack)
    }

    /// A location of [`Store::stack_locations`].
    pub fn location(&self, location: u32) -> &crate::profile::Location {
        &self.locations.get(location).location
    }

    /// The oldest time samples are still held for.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.buckets.front().map(|bucket| bucket.start)
    }

    /// Up to when samples are stored (the last drain's cut).
    pub fn newest(&self) -> Option<SystemTime> {
        self.buckets.back().map(|bucket| bucket.end)
    }

    /// The held history bucket by bucket, oldest first: each bucket's
    /// span and the samples in it of the threads `query` selects, in its
    /// mode (time off CPU as the sampling periods it makes, as reports
    /// count it, rounded per span). `query`'s window is not read.
    pub fn timeline(&self, query: &Query) -> Vec<HeldSpan> {
        let matches = self.thread_matches(query);
        let every_thread = matches.iter().all(|&matches| matches);
        let period_ns = 1_000_000_000 / u64::from(query.frequency_hz.max(1));
        let cpu = |bucket: &Bucket| -> u64 {
            if !query.mode.includes(ThreadState::Cpu) {
                0
            } else if every_thread {
                bucket.samples()
            } else {
                let selected = bucket.cpu.iter().filter(|cpu| matches[cpu.thread as usize]);
                selected.map(|cpu| u64::from(cpu.count)).sum()
            }
        };
        let waited = |bucket: &Bucket| -> u64 {
            let nanos: u64 = bucket
                .waits
                .iter()
                .filter(|wait| matches[wait.thread as usize] && query.mode.includes(wait.state))
                .map(|wait| wait.nanos)
                .sum();
            (nanos + period_ns / 2) / period_ns
        };
        self.buckets
            .iter()
            .map(|bucket| HeldSpan {
                start: bucket.start,
                end: bucket.end,
                samples: cpu(bucket) + waited(bucket),
            })
            .collect()
    }

    pub fn stats(&self) -> StoreStats {
        StoreStats {
            memory_bytes: self.memory_bytes(),
            memory_limit_bytes: self.settings.memory_limit,
            retention: self.settings.retention,
            resolution: self.settings.resolution,
            buckets: self.buckets.len() as u64,
            oldest: self.oldest(),
            coarsest_bucket: self
                .buckets
                .iter()
                .map(Bucket::span)
                .max()
                .unwrap_or_default(),
            distinct_stacks: self.stacks.len() as u64,
            buckets_evicted_for_memory: self.buckets_evicted_for_memory,
            buckets_coarsened_for_memory: self.buckets_coarsened_for_memory,
        }
    }
}

/// Sorts a bucket's entries by (thread, stack), as queries read them.
fn sort_cpu_samples(cpu: &mut [CpuSamples]) {
    cpu.sort_unstable_by_key(|samples| (samples.thread, samples.stack));
}

#[cfg(test)]
mod tests;
