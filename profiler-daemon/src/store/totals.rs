//! A window's CPU samples summed per stack, per command or per thread,
//! from its buckets or, when that reads fewer entries, from the sums of
//! every bucket held (see `held`): what reads that show no threads, or
//! only some, start from.
//!
//! Owns those sums' arithmetic; it must not decide which threads a report
//! reads (see `query`).

use super::{Bucket, Store, aggregate, query::Query};
use crate::profile::{Sample, ThreadState};

/// Which threads' samples a read sums per stack besides (see
/// [`crate::profile::Profile::unread_stacks`]).
pub(super) struct UnreadStacks {
    /// By store thread id: the threads not read per stack.
    pub(super) unpicked: Vec<bool>,
    /// Whether the query selected every thread (before any was left
    /// unread): the held sums then apply.
    pub(super) every_thread: bool,
}

impl Store {
    /// The CPU samples of the window of `buckets` summed per stack, as
    /// [`aggregate::cpu_totals_per_stack`] sums them, but from the sums of
    /// every bucket held less those outside the window, when that reads
    /// fewer entries: every thread selected, one sampling period
    /// throughout. Each total names the window's least thread with samples
    /// (reports summed per stack show no threads). With the threads seen.
    pub(super) fn cpu_totals_from_held(
        &self,
        query: &Query,
        buckets: &[&Bucket],
        thread_matches: &[bool],
    ) -> Option<(Vec<aggregate::Total>, Vec<bool>)> {
        if !thread_matches.iter().all(|&matches| matches) {
            return None;
        }
        let period_ns = self.held_applies(query, buckets)?;
        let sums = self
            .held
            .without(self.buckets_outside(query), thread_matches.len());
        let seen: Vec<bool> = sums.threads.iter().map(|&samples| samples > 0).collect();
        // Thread ids are 32-bit.
        let thread = seen.iter().position(|&seen| seen)? as u32;
        let totals = (0..)
            .zip(&sums.stacks)
            .filter(|&(_, &count)| count > 0)
            .map(|(stack, &count)| aggregate::Total {
                thread,
                stack,
                count,
                weight: count * period_ns,
                state: ThreadState::Cpu,
            })
            .collect();
        Some((totals, seen))
    }

    /// The CPU samples of the window of `buckets` of the threads
    /// `thread_matches` selects, summed per command name and stack (see
    /// [`SumBy::CommandAndStack`]), with the threads seen; `None` when they
    /// are of one process, to be read per thread.
    pub(super) fn cpu_totals_per_command(
        &self,
        buckets: &[&Bucket],
        thread_matches: &[bool],
    ) -> Option<(Vec<aggregate::Total>, Vec<bool>)> {
        let threads = self.threads.values();
        // Each thread's command, numbered (`aggregate::NOT_SELECTED` if the
        // thread is not selected).
        let mut commands: rustc_hash::FxHashMap<&str, u32> = Default::default();
        let command_of: Vec<u32> = (threads.iter().zip(thread_matches))
            .map(|(thread, &matches)| match matches {
                false => aggregate::NOT_SELECTED,
                true => {
                    let next = commands.len() as u32;
                    *commands.entry(&thread.process_name).or_insert(next)
                }
            })
            .collect();
        let mut seen = vec![false; thread_matches.len()];
        let mut totals = Vec::new();
        let stacks = self.stacks.len();
        aggregate::cpu_totals_per_owner(buckets, &command_of, stacks, &mut seen, |total| {
            totals.push(total);
        });
        // Of one process: read again per thread (a process's own window,
        // small beside a machine's).
        let mut pids = (threads.iter().zip(&seen))
            .filter(|&(_, &seen)| seen)
            .map(|(thread, _)| thread.pid);
        let first = pids.next();
        if pids.all(|pid| Some(pid) == first) {
            return None;
        }
        Some((totals, seen))
    }

    /// The CPU samples and time of each thread (by id, for at least
    /// `threads`) in the window of `buckets`: from the sums of every bucket
    /// held less those outside the window when that reads fewer entries,
    /// else summed from `buckets`.
    pub(super) fn cpu_thread_totals(
        &self,
        query: &Query,
        buckets: &[&Bucket],
        threads: usize,
    ) -> Vec<(u64, u64)> {
        if let Some(period_ns) = self.held_applies(query, buckets) {
            let counts = self
                .held
                .threads_without(self.buckets_outside(query), threads);
            return counts
                .into_iter()
                .map(|count| (count, count * period_ns))
                .collect();
        }
        let mut totals = vec![(0_u64, 0_u64); threads];
        for bucket in buckets {
            for samples in bucket.cpu.iter() {
                if let Some((count, weight)) = totals.get_mut(samples.thread as usize) {
                    *count += u64::from(samples.count);
                    *weight += u64::from(samples.count) * bucket.period_ns;
                }
            }
        }
        totals
    }

    /// Whether the held sums make the window of `buckets` for less than
    /// summing them: one sampling period throughout (returned), and fewer
    /// entries outside the window than inside.
    pub(super) fn held_applies(&self, query: &Query, buckets: &[&Bucket]) -> Option<u64> {
        let period_ns = buckets.first()?.period_ns;
        if self
            .buckets
            .iter()
            .any(|bucket| bucket.period_ns != period_ns)
        {
            return None;
        }
        let entries_outside: usize = self
            .buckets_outside(query)
            .map(|bucket| bucket.cpu.len())
            .sum();
        let entries_inside: usize = buckets.iter().map(|bucket| bucket.cpu.len()).sum();
        (entries_outside < entries_inside).then_some(period_ns)
    }

    /// The buckets held outside `query`'s window.
    pub(super) fn buckets_outside<'s>(
        &'s self,
        query: &'s Query,
    ) -> impl Iterator<Item = &'s Bucket> {
        let inside = |bucket: &&Bucket| bucket.middle_within(query.start, query.end);
        self.buckets.iter().filter(move |bucket| !inside(bucket))
    }

    /// The CPU samples of the `unpicked` threads of the window of
    /// `buckets`, summed per stack, in stack order (see
    /// [`crate::profile::Profile::unread_stacks`], each naming `thread`):
    /// from the sums of every bucket held less those outside the window
    /// and the `picked` samples read per thread, when every thread is
    /// selected and that reads fewer entries; else summed from `buckets`.
    pub(super) fn unread_stack_totals(
        &self,
        query: &Query,
        buckets: &[&Bucket],
        threads: &UnreadStacks,
        picked: &[Sample],
        thread: u32,
    ) -> Vec<Sample> {
        let sample = |stack: u32, count: u64, weight: u64| Sample {
            thread,
            stack,
            count,
            weight,
            state: ThreadState::Cpu,
        };
        if threads.every_thread
            && let Some(period_ns) = self.held_applies(query, buckets)
        {
            let mut sums = self
                .held
                .without(self.buckets_outside(query), threads.unpicked.len())
                .stacks;
            for read in picked.iter().filter(|read| read.state == ThreadState::Cpu) {
                if let Some(sum) = sums.get_mut(read.stack as usize) {
                    *sum = sum.saturating_sub(read.count);
                }
            }
            // Stack ids are 32-bit.
            return (0..)
                .zip(sums)
                .filter(|&(_, count)| count > 0)
                .map(|(stack, count)| sample(stack, count, count * period_ns))
                .collect();
        }
        let mut totals = Vec::new();
        let mut seen = vec![false; threads.unpicked.len()];
        aggregate::cpu_totals_per_stack(
            buckets,
            |thread| threads.unpicked[thread as usize],
            self.stacks.len(),
            &mut seen,
            |total| totals.push(sample(total.stack, total.count, total.weight)),
        );
        totals
    }
}
