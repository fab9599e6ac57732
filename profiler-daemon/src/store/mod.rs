//! The profile store: symbolized samples aggregated per thread and stack in
//! time-stamped buckets, kept for the retention period under a hard memory
//! ceiling, so that any window inside the retention can be reported.
//!
//! The store owns the buckets and the tables that intern threads, stacks and
//! locations (so a bucket entry is a few integers). It answers queries by
//! assembling a self-contained [`Profile`]; it must not format reports or
//! symbolize.

mod aggregate;
mod holds;
mod tables;

use std::{
    collections::VecDeque,
    mem::{size_of, size_of_val},
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use profiler_common::{COUNTER_COUNT, SampleKind};
use rustc_hash::FxHashMap as HashMap;
use tracing::{debug, info};

pub use self::holds::{WindowHold, WindowHolds};
use self::tables::{Interner, Renumbering, StackTable};
use crate::{
    kernel::drain::{CounterDeltas, losses},
    profile::{LossCause, Owner, Profile, Sample, Stacks, ThreadInfo},
    symbols::symbolizer::{LocationKey, SymbolizedBatch, SymbolizedLocation},
};

/// Rebuild the intern tables (dropping what no bucket refers to any more)
/// at most this often, unless memory is short.
const COMPACTION_INTERVAL: Duration = Duration::from_secs(60);

/// At the memory ceiling, the oldest buckets are merged into buckets of up
/// to this many times the resolution before any are dropped.
const MAX_COARSENING: u32 = 6;

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

/// Which samples a query covers; empty lists do not restrict, different
/// kinds must all match, values within one list are alternatives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    /// Exact process or thread names.
    pub comms: Vec<String>,
    /// A regular expression a process or thread name must match.
    pub comm_pattern: Option<CommPattern>,
    /// Real user ids.
    pub uids: Vec<u32>,
    /// Cgroup (v2) paths; each selects its descendants too.
    pub cgroups: Vec<String>,
}

/// A compiled regular expression over command names.
#[derive(Clone, Debug)]
pub struct CommPattern(pub regex::Regex);

impl PartialEq for CommPattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for CommPattern {}

impl Selector {
    pub fn matches(&self, thread: &ThreadInfo) -> bool {
        (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.tids.is_empty() || self.tids.contains(&thread.tid))
            && (self.comms.is_empty()
                || self
                    .comms
                    .iter()
                    .any(|comm| **comm == *thread.process_name || **comm == *thread.thread_name))
            && self.comm_pattern.as_ref().is_none_or(|pattern| {
                pattern.0.is_match(&thread.process_name) || pattern.0.is_match(&thread.thread_name)
            })
            && (self.uids.is_empty() || self.uids.contains(&thread.uid))
            && (self.cgroups.is_empty()
                || self
                    .cgroups
                    .iter()
                    .any(|cgroup| crate::kernel::cgroups::within(&thread.cgroup, cgroup)))
    }
}

/// Whose samples a query may return: the asker's rights, checked on every
/// sample by the credentials the kernel recorded with it (not by who owns
/// its process id now, which may be another process by then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleAccess {
    /// Every sample (root and the admin group).
    All,
    /// Only samples of tasks that ran as this user and group and that the
    /// kernel would have let them trace (not protected).
    Owner { uid: u32, gid: u32 },
}

impl SampleAccess {
    pub fn admits(self, owner: Owner) -> bool {
        match self {
            SampleAccess::All => true,
            SampleAccess::Owner { uid, gid } => {
                owner.uid == uid && owner.gid == gid && !owner.protected
            }
        }
    }
}

/// A request for the samples of a window.
#[derive(Clone, Debug)]
pub struct Query {
    pub start: SystemTime,
    pub end: SystemTime,
    pub selector: Selector,
    pub access: SampleAccess,
    pub kind: SampleKind,
    pub frequency_hz: u32,
}

impl StoreSettings {
    /// The store settings of a configuration.
    pub fn from_config(config: &crate::daemon::config::Config) -> Self {
        Self {
            retention: config.retention,
            resolution: config.resolution,
            memory_limit: config.memory_limit.as_u64(),
        }
    }
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

#[derive(Debug)]
struct Bucket {
    start: SystemTime,
    end: SystemTime,
    /// Nanoseconds of CPU one sample of this bucket stands for.
    period_ns: u64,
    cpu: Box<[CpuSamples]>,
    counters: CounterDeltas,
}

impl Bucket {
    fn bytes(&self) -> usize {
        size_of::<Self>() + size_of_val(&*self.cpu)
    }

    fn samples(&self) -> u64 {
        samples_in(&self.cpu)
    }

    fn span(&self) -> Duration {
        self.end.duration_since(self.start).unwrap_or_default()
    }

    fn middle(&self) -> SystemTime {
        self.start + self.span() / 2
    }

    /// One bucket for the time of `parts` (consecutive, oldest first), with
    /// their samples added up.
    fn merge(parts: impl IntoIterator<Item = Bucket>) -> Bucket {
        let mut parts = parts.into_iter();
        let mut merged = parts.next().expect("at least one bucket to merge");
        let mut cpu = std::mem::take(&mut merged.cpu).into_vec();
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
        }
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

fn samples_in(cpu: &[CpuSamples]) -> u64 {
    cpu.iter().map(|samples| u64::from(samples.count)).sum()
}

/// What a location owns beyond itself, roughly (its names are shared).
const LOCATION_HEAP_BYTES: usize = 64;
const FRAME_BYTES: usize = size_of::<crate::profile::Frame>();

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
    /// When the first bucket began: what came before was never sampled.
    first_sample: Option<SystemTime>,
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
            first_sample: None,
        }
    }

    /// Adds a batch as one bucket, merges the buckets of spans now complete,
    /// then enforces retention and the ceiling.
    pub fn insert(&mut self, batch: SymbolizedBatch) {
        let mut counts: HashMap<(u32, u32), u32> = HashMap::default();
        let (mut samples, mut weight) = (0_u64, 0_u64);
        for sample in batch.samples {
            match sample.kind {
                SampleKind::CpuClock => {
                    let thread = self.intern_thread(sample.thread);
                    let stack = self.intern_stack(&sample.stack);
                    let count = counts.entry((thread, stack)).or_default();
                    *count = count.saturating_add(u32::try_from(sample.count).unwrap_or(u32::MAX));
                    samples += sample.count;
                    weight += sample.weight;
                }
                // Peeks keep their own samples (see `peek`); none come here.
                SampleKind::Peek | SampleKind::PeekInstant => {}
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
            counters: batch.counters,
        };
        self.first_sample.get_or_insert(bucket.start);
        self.bucket_bytes += bucket.bytes();
        self.buckets.push_back(bucket);
        self.coarsen_complete_spans();
        self.expire(batch.end);
        self.enforce_ceiling();
    }

    /// Merges the buckets of each resolution span (aligned on the epoch; a
    /// bucket belongs to the span its middle falls in) once a later bucket
    /// shows the span complete, unless an open window still holds it.
    fn coarsen_complete_spans(&mut self) {
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
    fn merge_buckets(&mut self, first: usize, end: usize) {
        let parts: Vec<Bucket> = self.buckets.drain(first..end).collect();
        self.bucket_bytes -= parts.iter().map(Bucket::bytes).sum::<usize>();
        let merged = Bucket::merge(parts);
        self.bucket_bytes += merged.bytes();
        self.buckets.insert(first, merged);
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

    /// Drops buckets that ended before the retention window.
    fn expire(&mut self, now: SystemTime) {
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
        if now
            .duration_since(self.last_compaction)
            .is_ok_and(|since| since >= COMPACTION_INTERVAL)
        {
            self.compact(now);
        }
    }

    /// Keeps the store under the ceiling: first by compacting the tables,
    /// then by coarsening the oldest buckets, then by dropping them (counted,
    /// never silently).
    fn enforce_ceiling(&mut self) {
        if self.memory_bytes() <= self.settings.memory_limit {
            return;
        }
        self.compact(SystemTime::now());
        self.coarsen_for_memory();
        while self.memory_bytes() > self.settings.memory_limit && self.buckets.len() > 1 {
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
            if self.buckets.len().is_multiple_of(16) {
                self.compact(SystemTime::now());
            }
        }
    }

    /// Merges neighbouring buckets of the older half of the store, oldest
    /// first, into buckets of up to [`MAX_COARSENING`] times the resolution,
    /// until the store is under its ceiling. Held buckets are left alone.
    fn coarsen_for_memory(&mut self) {
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

    fn pop_oldest(&mut self) -> Bucket {
        let bucket = self
            .buckets
            .pop_front()
            .expect("callers check that a bucket exists");
        self.bucket_bytes -= bucket.bytes();
        bucket
    }

    /// Rebuilds the intern tables with only what buckets still refer to.
    fn compact(&mut self, now: SystemTime) {
        self.last_compaction = now;
        let old_threads = std::mem::take(&mut self.threads);
        let old_locations = std::mem::take(&mut self.locations);
        let old_stacks = std::mem::take(&mut self.stacks);
        let before = old_stacks.len();
        let mut thread_map: HashMap<u32, u32> = HashMap::default();
        let mut stack_map: HashMap<u32, u32> = HashMap::default();
        let mut buckets = std::mem::take(&mut self.buckets);
        for bucket in &mut buckets {
            for samples in bucket.cpu.iter_mut() {
                samples.thread = *thread_map
                    .entry(samples.thread)
                    .or_insert_with(|| self.intern_thread(old_threads.get(samples.thread).clone()));
                samples.stack = *stack_map.entry(samples.stack).or_insert_with(|| {
                    let ids: Vec<u32> = old_stacks
                        .get(samples.stack)
                        .iter()
                        .map(|&id| {
                            let location = old_locations.get(id);
                            self.locations
                                .intern(location.key.clone(), || location.clone())
                        })
                        .collect();
                    self.stacks.intern(&ids)
                });
            }
            // Renumbered: sorted again.
            sort_cpu_samples(&mut bucket.cpu);
        }
        self.buckets = buckets;
        debug!(
            stacks_before = before,
            stacks_after = self.stacks.len(),
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
        (self.threads.bytes(|_| 0)
            + self.locations.bytes(|location| {
                LOCATION_HEAP_BYTES + FRAME_BYTES * location.location.frames.len()
            })
            + self.stacks.bytes()) as u64
    }

    /// The oldest time samples are still held for.
    pub fn oldest(&self) -> Option<SystemTime> {
        self.buckets.front().map(|bucket| bucket.start)
    }

    /// Up to when samples are stored (the last drain's cut).
    pub fn newest(&self) -> Option<SystemTime> {
        self.buckets.back().map(|bucket| bucket.end)
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

    /// The samples of the buckets inside `query`'s window that match its
    /// selector, as a self-contained profile.
    pub fn profile(&self, query: &Query) -> Profile {
        let thread_matches: Vec<bool> = self
            .threads
            .values()
            .iter()
            .map(|thread| query.access.admits(thread.owner()) && query.selector.matches(thread))
            .collect();
        let mut counters = [0_u64; COUNTER_COUNT as usize];
        let mut covered: Option<(SystemTime, SystemTime)> = None;
        let buckets: Vec<&Bucket> = self.buckets_in(query.start, query.end).collect();
        for bucket in &buckets {
            covered = Some(covered.map_or((bucket.start, bucket.end), |(start, end)| {
                (start.min(bucket.start), end.max(bucket.end))
            }));
            for (total, delta) in counters.iter_mut().zip(bucket.counters) {
                *total += delta;
            }
        }

        // At most one sample per entry: reserved, never grown and copied.
        let capacity = match query.kind {
            SampleKind::CpuClock => buckets.iter().map(|bucket| bucket.cpu.len()).sum(),
            SampleKind::Peek | SampleKind::PeekInstant => 0,
        };
        // The report states the window its buckets really cover.
        let (start, end) = covered.unwrap_or((query.start, query.end));
        let mut profile = Profile {
            start,
            end,
            frequency_hz: query.frequency_hz,
            period_ns: 1_000_000_000 / u64::from(query.frequency_hz.max(1)),
            threads: Vec::new(),
            locations: Vec::new(),
            stacks: Stacks::default(),
            samples: Vec::with_capacity(capacity),
            lost: losses(&counters).filter(|&(_, count)| count > 0).collect(),
            warnings: Vec::new(),
        };
        // Samples refer to the store's stacks until the stacks they use are
        // copied, then in the store's order: reading its stacks front to
        // back costs a fraction of reading them in the samples' order.
        let mut threads = Renumbering::new(self.threads.values().len());
        let mut used = vec![false; self.stacks.len()];
        let mut add = |total: aggregate::Total| {
            let thread = threads.get_or_add(total.thread, || {
                profile.threads.push(self.threads.get(total.thread).clone());
                profile.threads.len() - 1
            });
            used[total.stack as usize] = true;
            profile.samples.push(Sample {
                thread,
                stack: total.stack,
                count: total.count,
                weight_ns: total.weight_ns,
            });
        };
        match query.kind {
            SampleKind::CpuClock => {
                aggregate::cpu_totals(&buckets, |thread| thread_matches[thread as usize], &mut add)
            }
            // Peeks keep their own samples (see `peek`); none are here.
            SampleKind::Peek | SampleKind::PeekInstant => {}
        }
        let mut stacks = Renumbering::new(self.stacks.len());
        let mut locations = Renumbering::new(self.locations.values().len());
        // Store ids are 32-bit.
        let used: Vec<u32> = (0..)
            .zip(&used)
            .filter_map(|(stack, &used)| used.then_some(stack))
            .collect();
        let frames = used.iter().map(|&stack| self.stacks.get(stack).len()).sum();
        profile.stacks = Stacks::with_capacity(used.len(), frames);
        for stack in used {
            stacks.get_or_add(stack, || {
                let ids = self.stacks.get(stack).iter().map(|&location| {
                    locations.get_or_add(location, || {
                        profile
                            .locations
                            .push(self.locations.get(location).location.clone());
                        profile.locations.len() - 1
                    })
                });
                profile.stacks.push(ids) as usize
            });
        }
        for sample in &mut profile.samples {
            sample.stack = stacks.get(sample.stack);
        }
        self.add_coverage_warnings(query, &mut profile);
        profile
    }

    /// The buckets whose middle falls inside the window: a window cut at
    /// bucket boundaries (as Profile and sessions cut them) gets exactly its
    /// buckets, any other window the nearest whole buckets.
    fn buckets_in(&self, start: SystemTime, end: SystemTime) -> impl Iterator<Item = &Bucket> {
        self.buckets.iter().filter(move |bucket| {
            let middle = bucket.middle();
            start <= middle && middle <= end
        })
    }

    /// Says plainly when part of the window is not in the store.
    fn add_coverage_warnings(&self, query: &Query, profile: &mut Profile) {
        if let Some(oldest) = self.oldest()
            && query.start < oldest
        {
            let missing = humantime::format_duration(round_to_millis(
                oldest.duration_since(query.start).unwrap_or_default(),
            ));
            let nothing_dropped = self.first_sample.is_some_and(|first| first >= oldest);
            profile.warnings.push(if nothing_dropped {
                format!(
                    "the first {missing} of the window are from before the daemon started \
                     sampling; the report covers the rest"
                )
            } else {
                format!(
                    "the first {missing} of the window are no longer held (retention {}, memory \
                     ceiling {}); the report covers the rest",
                    humantime::format_duration(self.settings.retention),
                    bytesize::ByteSize::b(self.settings.memory_limit)
                )
            });
        }
        let evicted: u64 = self
            .evictions
            .iter()
            .filter(|eviction| eviction.end > query.start && eviction.start < query.end)
            .map(|eviction| eviction.samples)
            .sum();
        if evicted > 0 {
            profile.lost.push((LossCause::MemoryCeiling, evicted));
        }
    }
}

/// Sorts a bucket's entries by (thread, stack), as queries read them.
fn sort_cpu_samples(cpu: &mut [CpuSamples]) {
    cpu.sort_unstable_by_key(|samples| (samples.thread, samples.stack));
}

fn round_to_millis(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::{
        profile::{Frame, Location, LocationKind},
        symbols::symbolizer::SymbolizedSample,
    };

    fn location(name: &str) -> Arc<SymbolizedLocation> {
        Arc::new(SymbolizedLocation {
            key: LocationKey::Kernel(name.bytes().map(u64::from).sum()),
            location: Location {
                kind: LocationKind::Kernel,
                module: Arc::from("[kernel]"),
                address: 0,
                frames: vec![Frame {
                    function: Arc::from(name),
                    file: None,
                    line: 0,
                    inlined: false,
                }],
            },
        })
    }

    fn thread(pid: u32, tid: u32, name: &str) -> ThreadInfo {
        ThreadInfo {
            pid,
            tid,
            thread_name: Arc::from(name),
            process_name: Arc::from(name),
            uid: 0,
            gid: 0,
            protected: false,
            cgroup: Arc::from("/"),
        }
    }

    fn at(secs: u64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(1_000_000 + secs)
    }

    fn batch(start: u64, samples: &[(u32, &[&str], u64)]) -> SymbolizedBatch {
        SymbolizedBatch {
            start: at(start),
            end: at(start + 1),
            samples: samples
                .iter()
                .map(|&(pid, stack, count)| SymbolizedSample {
                    thread: thread(pid, pid, &format!("p{pid}")),
                    kind: SampleKind::CpuClock,
                    stack: stack.iter().map(|name| location(name)).collect(),
                    count,
                    weight: count * 10,
                })
                .collect(),
            counters: [0; COUNTER_COUNT as usize],
        }
    }

    /// A store of 1 s buckets, as the batches below are.
    fn store(retention_secs: u64, memory_limit: u64) -> Store {
        Store::new(StoreSettings {
            retention: Duration::from_secs(retention_secs),
            resolution: Duration::from_secs(1),
            memory_limit,
        })
    }

    fn query(start: u64, end: u64, selector: Selector) -> Query {
        Query {
            start: at(start),
            end: at(end),
            selector,
            access: SampleAccess::All,
            kind: SampleKind::CpuClock,
            frequency_hz: 100,
        }
    }

    fn counts_by_leaf(profile: &Profile) -> Vec<(String, u64)> {
        let mut counts: Vec<_> = profile
            .samples
            .iter()
            .map(|sample| {
                let stack = profile.stacks.get(sample.stack).unwrap();
                let leaf = &profile.locations[*stack.last().unwrap() as usize];
                (leaf.frames[0].function.to_string(), sample.count)
            })
            .collect();
        counts.sort();
        counts
    }

    #[test]
    fn windows_select_whole_buckets_and_aggregate() {
        let mut store = store(600, 1 << 30);
        store.insert(batch(0, &[(1, &["main", "a"], 3)]));
        store.insert(batch(1, &[(1, &["main", "a"], 2), (1, &["main", "b"], 1)]));
        store.insert(batch(2, &[(1, &["main", "b"], 7)]));
        let all = store.profile(&query(0, 3, Selector::default()));
        assert_eq!(counts_by_leaf(&all), [("a".into(), 5), ("b".into(), 8)]);
        assert_eq!(all.samples.iter().map(|s| s.weight_ns).sum::<u64>(), 130);
        let middle = store.profile(&query(1, 2, Selector::default()));
        assert_eq!(counts_by_leaf(&middle), [("a".into(), 2), ("b".into(), 1)]);
        assert!(middle.warnings.is_empty());
    }

    #[test]
    fn selectors_filter_threads() {
        let mut store = store(600, 1 << 30);
        store.insert(batch(0, &[(1, &["x"], 1), (2, &["y"], 2), (3, &["z"], 4)]));
        let by_pid = Selector {
            pids: vec![2, 3],
            ..Selector::default()
        };
        assert_eq!(
            counts_by_leaf(&store.profile(&query(0, 1, by_pid))),
            [("y".into(), 2), ("z".into(), 4)]
        );
        let by_comm = Selector {
            comms: vec!["p3".into()],
            ..Selector::default()
        };
        assert_eq!(
            counts_by_leaf(&store.profile(&query(0, 1, by_comm))),
            [("z".into(), 4)]
        );
        let nothing = Selector {
            pids: vec![1],
            tids: vec![2],
            ..Selector::default()
        };
        assert!(store.profile(&query(0, 1, nothing)).samples.is_empty());
    }

    #[test]
    fn selectors_by_pattern_uid_and_cgroup() {
        let thread = ThreadInfo {
            uid: 33,
            gid: 33,
            protected: false,
            cgroup: Arc::from("/system.slice/nginx.service"),
            ..thread(7, 8, "nginx-worker")
        };
        let matches = |selector: Selector| selector.matches(&thread);
        let pattern = |text: &str| Some(CommPattern(regex::Regex::new(text).unwrap()));
        assert!(matches(Selector {
            comm_pattern: pattern("^nginx"),
            ..Selector::default()
        }));
        assert!(!matches(Selector {
            comm_pattern: pattern("^apache"),
            ..Selector::default()
        }));
        assert!(matches(Selector {
            uids: vec![0, 33],
            cgroups: vec!["/system.slice".into()],
            ..Selector::default()
        }));
        assert!(!matches(Selector {
            uids: vec![0],
            ..Selector::default()
        }));
        assert!(!matches(Selector {
            cgroups: vec!["/user.slice".into()],
            ..Selector::default()
        }));
    }

    #[test]
    fn retention_expires_old_buckets_and_says_so() {
        let mut store = store(10, 1 << 30);
        for second in 0..30 {
            store.insert(batch(second, &[(1, &["main"], 1)]));
        }
        assert_eq!(store.stats().buckets, 11);
        let profile = store.profile(&query(0, 30, Selector::default()));
        assert_eq!(profile.total_samples(), 11);
        assert_eq!(profile.warnings.len(), 1, "{:?}", profile.warnings);
        assert!(profile.warnings[0].contains("no longer held"));
        let before_start = store.profile(&Query {
            start: at(0) - Duration::from_secs(5),
            ..query(0, 30, Selector::default())
        });
        assert!(before_start.warnings[0].contains("no longer held"));
    }

    #[test]
    fn a_window_from_before_the_start_says_so() {
        let mut store = store(600, 1 << 30);
        store.insert(batch(10, &[(1, &["main"], 1)]));
        let profile = store.profile(&query(0, 11, Selector::default()));
        assert_eq!(profile.total_samples(), 1);
        assert!(
            profile.warnings[0].contains("before the daemon started sampling"),
            "{:?}",
            profile.warnings
        );
    }

    #[test]
    fn memory_ceiling_holds_and_counts_what_it_drops() {
        let mut store = store(3600, 64 * 1024);
        for second in 0..200 {
            let names: Vec<String> = (0..20).map(|i| format!("f{second}_{i}")).collect();
            let stack: Vec<&str> = names.iter().map(String::as_str).collect();
            store.insert(batch(second, &[(second as u32, &stack, 1)]));
            assert!(store.memory_bytes() <= 64 * 1024 || store.stats().buckets == 1);
        }
        let stats = store.stats();
        assert!(stats.buckets_evicted_for_memory > 0);
        assert!(stats.buckets < 200);
        let profile = store.profile(&query(0, 200, Selector::default()));
        assert!(
            profile
                .lost
                .iter()
                .any(|&(cause, count)| cause == LossCause::MemoryCeiling && count > 0)
        );
        // Compaction kept the tables in step with the buckets.
        assert!(stats.distinct_stacks <= stats.buckets + 16);
    }

    #[test]
    fn compaction_preserves_profiles() {
        let mut store = store(600, 1 << 30);
        store.insert(batch(0, &[(1, &["main", "a"], 3), (2, &["main", "b"], 1)]));
        store.insert(batch(1, &[(1, &["main", "b"], 2)]));
        let before = counts_by_leaf(&store.profile(&query(0, 2, Selector::default())));
        store.compact(at(2));
        let after = counts_by_leaf(&store.profile(&query(0, 2, Selector::default())));
        assert_eq!(before, after);
    }

    #[test]
    fn complete_spans_are_merged_at_the_resolution() {
        let mut store = Store::new(StoreSettings {
            retention: Duration::from_secs(3600),
            resolution: Duration::from_secs(10),
            memory_limit: 1 << 30,
        });
        let hold = store.holds().hold(at(5));
        for second in 0..25 {
            let leaf = if second < 10 { "a" } else { "b" };
            store.insert(batch(second, &[(1, &["main", leaf], 2), (2, &["main"], 1)]));
        }
        assert_eq!(store.stats().buckets, 25, "an open window holds them");
        drop(hold);
        store.insert(batch(25, &[(1, &["main", "b"], 2), (2, &["main"], 1)]));
        // Spans [0, 10) and [10, 20) are complete: one bucket each.
        let stats = store.stats();
        assert_eq!(stats.buckets, 2 + 6, "{stats:?}");
        assert_eq!(stats.coarsest_bucket, Duration::from_secs(10));
        assert_eq!(stats.buckets_coarsened_for_memory, 0);
        let all = store.profile(&query(0, 26, Selector::default()));
        assert_eq!(
            counts_by_leaf(&all),
            [("a".into(), 20), ("b".into(), 32), ("main".into(), 26)]
        );
        assert_eq!(all.samples.iter().map(|s| s.weight_ns).sum::<u64>(), 780);
        // Past windows are whole buckets now: the second span, not a part.
        let part = store.profile(&query(12, 14, Selector::default()));
        assert!(part.samples.is_empty(), "{:?}", counts_by_leaf(&part));
        let second_span = store.profile(&query(10, 20, Selector::default()));
        assert_eq!(
            counts_by_leaf(&second_span),
            [("b".into(), 20), ("main".into(), 10)]
        );
    }

    #[test]
    fn the_ceiling_coarsens_before_it_drops() {
        let threads: Vec<(u32, &[&str], u64)> = (0..200)
            .map(|pid| (pid, &["main", "work"][..], 1))
            .collect();
        let mut store = store(3600, 1 << 30);
        store.insert(batch(0, &threads));
        let first = store.memory_bytes();
        store.insert(batch(1, &threads));
        let one_bucket = store.memory_bytes() - first;
        // Room for 70 buckets of these, not 100: merging the older half (up
        // to 6 into one) keeps them all.
        store.settings.memory_limit = first + one_bucket * 70;
        for second in 2..100 {
            store.insert(batch(second, &threads));
            assert!(store.memory_bytes() <= store.settings.memory_limit);
        }
        let stats = store.stats();
        assert!(stats.buckets_coarsened_for_memory > 0, "{stats:?}");
        assert_eq!(stats.buckets_evicted_for_memory, 0, "{stats:?}");
        assert!(stats.coarsest_bucket > Duration::from_secs(1));
        assert!(stats.coarsest_bucket <= Duration::from_secs(u64::from(MAX_COARSENING)));
        let all = store.profile(&query(0, 100, Selector::default()));
        assert_eq!(all.total_samples(), 200 * 100);
        assert!(all.lost.is_empty(), "{:?}", all.lost);
    }
}
