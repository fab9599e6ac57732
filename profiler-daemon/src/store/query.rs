//! Reading the store: the self-contained profile of a window, of the
//! samples a query selects (see `selection`).

use std::time::{Duration, SystemTime};

use profiler_common::COUNTER_COUNT;

use super::{
    Bucket, SampleAccess, Selector, Store, aggregate, tables::Renumbering, totals::UnreadStacks,
};
use crate::{
    kernel::drain::losses,
    profile::{
        LossCause, OWN_LOSS_MARKERS, Profile, ProfileMode, Sample, Stacks, ThreadInfo, ThreadState,
        UnreadThread, own_loss_of,
    },
};

/// Chooses which threads of a window to read per stack: given each thread
/// with CPU samples and their count, whether to read each (`None`: all).
pub type ThreadPick<'a> = &'a dyn Fn(&[(&ThreadInfo, u64)]) -> Option<Vec<bool>>;

/// A request for the samples of a window.
#[derive(Clone, Debug)]
pub struct Query {
    pub start: SystemTime,
    pub end: SystemTime,
    pub selector: Selector,
    pub access: SampleAccess,
    pub mode: ProfileMode,
    pub frequency_hz: u32,
}

/// What a window's samples are summed by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SumBy {
    /// One sample per thread and stack: what every report can be made of.
    ThreadAndStack,
    /// In CPU mode, one sample per stack, all threads together, naming the
    /// least thread with samples of it; the profile's threads are still
    /// every thread with samples. For reports that do not show threads:
    /// the same totals, processes and threads, read at a fraction of the
    /// cost (no merging of every thread's entries across buckets). Other
    /// modes are read per thread.
    Stack,
    /// In CPU mode, one sample per command name and stack, naming the
    /// command's least thread with samples of it, when the window's samples
    /// are of more than one process; per thread and stack when they are of
    /// one (pprof's default shows threads then). The profile's threads are
    /// still every thread with samples. Other modes are read per thread.
    CommandAndStack,
}

impl Store {
    /// The samples of the buckets inside `query`'s window that match its
    /// selector, as a self-contained profile.
    pub fn profile(&self, query: &Query) -> Profile {
        self.read(query, true, SumBy::ThreadAndStack)
    }

    /// What the kernel lost system-wide (samples or stacks, by cause) in
    /// the buckets that meet `start..end`: for a report of samples taken
    /// beside the store (a profile at a rate of its own).
    pub fn window_losses(&self, start: SystemTime, end: SystemTime) -> Vec<(LossCause, u64)> {
        let mut counters = [0_u64; COUNTER_COUNT as usize];
        for bucket in self.buckets_in(start, end) {
            for (total, delta) in counters.iter_mut().zip(bucket.counters) {
                *total += delta;
            }
        }
        losses(&counters)
            .filter(|&(cause, count)| count > 0 && !cause.is_allocation())
            .collect()
    }

    /// [`Store::profile`], its samples summed by `sum_by`.
    pub fn profile_summed(&self, query: &Query, sum_by: SumBy) -> Profile {
        self.read(query, true, sum_by)
    }

    /// [`Store::profile_summed`] without its stacks and locations: its
    /// samples refer to the store's stack ids (of this
    /// [`Store::generation`]), for reports made from an index of the store's
    /// stacks.
    pub fn profile_of_store_stacks(&self, query: &Query, sum_by: SumBy) -> Profile {
        self.read(query, false, sum_by)
    }

    /// [`Store::profile`] (with its stacks copied or, as
    /// [`Store::profile_of_store_stacks`], left as store ids), in CPU mode
    /// read per stack only for the threads `pick` chooses: it is given each
    /// thread with CPU samples in the window and their count, and returns
    /// whether to read each (`None`: all). The others' samples are only
    /// counted, in [`Profile::unread`], and with `sum_unread` summed per
    /// stack too, in [`Profile::unread_stacks`] (what a flame graph draws
    /// of the sections it leaves out). Other modes are read whole.
    pub fn profile_picking_threads(
        &self,
        query: &Query,
        copy_stacks: bool,
        pick: ThreadPick<'_>,
        sum_unread: bool,
    ) -> Profile {
        let mut thread_matches = self.thread_matches(query);
        let every_thread = thread_matches.iter().all(|&matches| matches);
        let buckets: Vec<&Bucket> = self.buckets_in(query.start, query.end).collect();
        let mut unread = Vec::new();
        if query.mode == ProfileMode::Cpu {
            let totals = self.cpu_thread_totals(query, &buckets, thread_matches.len());
            // Thread ids are 32-bit.
            let sampled: Vec<u32> = (0..)
                .zip(&totals)
                .zip(&thread_matches)
                .filter_map(|((thread, &(count, _)), &matches)| {
                    (matches && count > 0).then_some(thread)
                })
                .collect();
            let threads: Vec<(&ThreadInfo, u64)> = sampled
                .iter()
                .map(|&thread| (self.threads.get(thread), totals[thread as usize].0))
                .collect();
            if let Some(read) = pick(&threads) {
                for (&thread, read) in sampled.iter().zip(read) {
                    if !read {
                        thread_matches[thread as usize] = false;
                        let (count, weight) = totals[thread as usize];
                        unread.push((thread, count, weight));
                    }
                }
            }
        }
        let unread_stacks = (sum_unread && !unread.is_empty()).then(|| {
            let mut unpicked = vec![false; thread_matches.len()];
            for &(thread, ..) in &unread {
                unpicked[thread as usize] = true;
            }
            UnreadStacks {
                unpicked,
                every_thread,
            }
        });
        self.read_threads(
            query,
            copy_stacks,
            SumBy::ThreadAndStack,
            thread_matches,
            &unread,
            unread_stacks,
        )
    }

    /// Which of the store's threads `query` selects, by id.
    pub(super) fn thread_matches(&self, query: &Query) -> Vec<bool> {
        self.threads
            .values()
            .iter()
            .map(|thread| query.access.admits(thread.owner()) && query.selector.matches(thread))
            .collect()
    }

    /// A window's profile, its stacks copied or left as store ids.
    fn read(&self, query: &Query, copy_stacks: bool, sum_by: SumBy) -> Profile {
        self.read_threads(
            query,
            copy_stacks,
            sum_by,
            self.thread_matches(query),
            &[],
            None,
        )
    }

    /// [`Store::read`] of the threads `thread_matches` selects, with the
    /// `unread` ones' (id, count, weight) as [`Profile::unread`].
    fn read_threads(
        &self,
        query: &Query,
        copy_stacks: bool,
        sum_by: SumBy,
        thread_matches: Vec<bool>,
        unread: &[(u32, u64, u64)],
        unread_stacks: Option<UnreadStacks>,
    ) -> Profile {
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

        let selected = |thread: u32| thread_matches[thread as usize];
        // Summed over threads: the totals, and every thread with samples.
        let summed = match sum_by {
            _ if query.mode != ProfileMode::Cpu => None,
            SumBy::ThreadAndStack => None,
            SumBy::Stack => Some(
                self.cpu_totals_from_held(query, &buckets, &thread_matches)
                    .unwrap_or_else(|| {
                        let mut seen = vec![false; thread_matches.len()];
                        let mut totals = Vec::new();
                        let stacks = self.stacks.len();
                        aggregate::cpu_totals_per_stack(
                            &buckets,
                            selected,
                            stacks,
                            &mut seen,
                            |total| totals.push(total),
                        );
                        (totals, seen)
                    }),
            ),
            SumBy::CommandAndStack => self.cpu_totals_per_command(&buckets, &thread_matches),
        };
        // At most one sample per entry: reserved, never grown and copied.
        let capacity = summed.as_ref().map(|(totals, _)| totals.len());
        let capacity = capacity.unwrap_or_else(|| {
            buckets
                .iter()
                .map(|bucket| {
                    let cpu = if query.mode.includes(ThreadState::Cpu) {
                        bucket.cpu.len()
                    } else {
                        0
                    };
                    cpu + if query.mode.records_off_cpu() {
                        bucket.waits.len()
                    } else {
                        0
                    }
                })
                .sum()
        });
        let period_ns = 1_000_000_000 / u64::from(query.frequency_hz.max(1));
        // The report states the window its buckets really cover.
        let (start, end) = covered.unwrap_or((query.start, query.end));
        let mut profile = Profile {
            start,
            end,
            frequency_hz: query.frequency_hz,
            period_ns,
            mode: query.mode,
            threads: Vec::new(),
            locations: Vec::new(),
            stacks: Stacks::default(),
            samples: Vec::with_capacity(capacity),
            // Allocation profiles say their own drops.
            lost: losses(&counters)
                .filter(|&(cause, count)| count > 0 && !cause.is_allocation())
                .collect(),
            warnings: Vec::new(),
            unread: Vec::new(),
            unread_stacks: Vec::new(),
            own_lost: Vec::new(),
            timeline: Vec::new(),
        };
        // Samples refer to the store's stacks until the stacks they use are
        // copied, then in the store's order: reading its stacks front to
        // back costs a fraction of reading them in the samples' order.
        let mut threads = Renumbering::new(self.threads.values().len());
        if let Some((_, seen)) = &summed {
            // Every thread with samples, in the order a read per thread
            // lists them, though samples name only some.
            for (thread, _) in (0..).zip(seen).filter(|&(_, &seen)| seen) {
                threads.get_or_add(thread, || {
                    profile.threads.push(self.threads.get(thread).clone());
                    profile.threads.len() - 1
                });
            }
        }
        // Totals come thread by thread: the last thread's number is kept.
        let mut last_thread: Option<(u32, u32)> = None;
        let mut add = |total: aggregate::Total| {
            let thread = match last_thread {
                Some((id, thread)) if id == total.thread => thread,
                _ => {
                    let thread = threads.get_or_add(total.thread, || {
                        profile.threads.push(self.threads.get(total.thread).clone());
                        profile.threads.len() - 1
                    });
                    last_thread = Some((total.thread, thread));
                    thread
                }
            };
            profile.samples.push(Sample {
                thread,
                stack: total.stack,
                count: total.count,
                weight: total.weight,
                state: total.state,
            });
        };
        match summed {
            Some((totals, _)) => totals.into_iter().for_each(&mut add),
            None if query.mode.includes(ThreadState::Cpu) => {
                aggregate::cpu_totals(&buckets, selected, &mut add);
            }
            None => {}
        }
        if query.mode.records_off_cpu() {
            aggregate::wait_totals(&buckets, selected, period_ns, &mut add);
        }
        for &(thread, count, weight) in unread {
            let thread = threads.get_or_add(thread, || {
                profile.threads.push(self.threads.get(thread).clone());
                profile.threads.len() - 1
            });
            profile.unread.push(UnreadThread {
                thread,
                count,
                weight,
            });
        }
        if let (Some(unread_stacks), Some(first)) = (unread_stacks, profile.unread.first()) {
            profile.unread_stacks = self.unread_stack_totals(
                query,
                &buckets,
                &unread_stacks,
                &profile.samples,
                first.thread,
            );
        }
        profile.own_lost = self.own_losses(&profile.samples);
        if copy_stacks {
            self.copy_stacks(&mut profile);
        }
        self.add_coverage_warnings(query, &mut profile);
        profile
    }

    /// Of `samples` (of the store's stack ids), those kept without their
    /// user stacks, by cause: their stacks start with a loss marker.
    ///
    /// The markers are found among the locations (a few thousand) and the
    /// stacks' roots (read in order) before the samples (a million in a
    /// busy window) are read: a root looked up per sample, at random, took
    /// a fifth of a window's read. Without a marker, no sample is read.
    fn own_losses(&self, samples: &[Sample]) -> Vec<(&'static str, u64)> {
        /// Not a loss marker (causes are indexes into `OWN_LOSS_MARKERS`).
        const NONE: u8 = u8::MAX;
        let location_causes: Vec<u8> = (self.locations.values().iter())
            .map(|location| own_loss_of(&location.location).map_or(NONE, |cause| cause as u8))
            .collect();
        if location_causes.iter().all(|&cause| cause == NONE) {
            return Vec::new();
        }
        // Stack ids are 32-bit.
        let stack_causes: Vec<u8> = (0..self.stacks.len() as u32)
            .map(|stack| match self.stacks.get(stack).first() {
                Some(&root) => location_causes[root as usize],
                None => NONE,
            })
            .collect();
        let mut counts = [0_u64; OWN_LOSS_MARKERS.len()];
        for sample in samples {
            let cause = stack_causes[sample.stack as usize];
            if cause != NONE {
                let count = &mut counts[usize::from(cause)];
                *count = count.saturating_add(sample.count);
            }
        }
        OWN_LOSS_MARKERS
            .iter()
            .zip(counts)
            .filter(|&(_, count)| count > 0)
            .map(|(&(_, cause), count)| (cause, count))
            .collect()
    }

    /// Copies the stacks of `profile`'s samples (and their locations) into
    /// it, whose samples refer to store ids until then.
    fn copy_stacks(&self, profile: &mut Profile) {
        let mut used = vec![false; self.stacks.len()];
        for sample in profile.samples.iter().chain(&profile.unread_stacks) {
            used[sample.stack as usize] = true;
        }
        let mut stacks = Renumbering::new(self.stacks.len());
        let mut locations = Renumbering::new(self.locations.values().len());
        // Store ids are 32-bit.
        let used: Vec<u32> = (0..)
            .zip(used)
            .filter_map(|(stack, used)| used.then_some(stack))
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
        for sample in profile.samples.iter_mut().chain(&mut profile.unread_stacks) {
            sample.stack = stacks.get(sample.stack);
        }
    }

    /// The buckets whose middle falls inside the window: a window cut at
    /// bucket boundaries (as Profile and sessions cut them) gets exactly its
    /// buckets, any other window the nearest whole buckets.
    fn buckets_in(&self, start: SystemTime, end: SystemTime) -> impl Iterator<Item = &Bucket> {
        self.buckets
            .iter()
            .filter(move |bucket| bucket.middle_within(start, end))
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

fn round_to_millis(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}
