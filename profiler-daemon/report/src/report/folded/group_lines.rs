//! A report's lines one group at a time. The samples of each group are
//! found as runs (consecutive samples of one group: a window read from the
//! store comes thread by thread), and a group's lines are gathered from
//! its runs, sorted by stack rank and merged in a buffer the size of the
//! group: a window of a million lines is never sorted all at once, nor
//! scattered over one array as large as its lines.
//!
//! Owns the runs and the gathering; it must not decide what a group or a
//! rank is (the parent module's `Groups` and the stacks' ranks), nor the
//! lines' text.

use super::super::frames::StackSample;
use super::super::radix;

/// A line: (group rank, stack rank) and its samples.
pub(super) type Line = ((u32, u32), u64);

/// Groups of fewer lines are sorted by comparing them: the radix sort's
/// counters would cost more than the lines.
const SMALL_GROUP: usize = 1024;

/// Where each group's samples are.
pub(super) struct GroupRuns {
    /// (first, end) samples of each run, by group, each group's in sample
    /// order.
    runs: Vec<(usize, usize)>,
    /// Per group, its first run; one past the last group, the end.
    firsts: Vec<usize>,
}

impl GroupRuns {
    /// The runs of `samples` in `groups` groups, `group_of` giving each
    /// sample's (below `groups`).
    pub fn new(
        samples: &[StackSample],
        groups: usize,
        group_of: impl Fn(&StackSample) -> u32,
    ) -> Self {
        // (group, first, end) in sample order.
        let mut found: Vec<(u32, usize, usize)> = Vec::new();
        for (at, sample) in samples.iter().enumerate() {
            let group = group_of(sample);
            match found.last_mut() {
                Some((last, _, end)) if *last == group => *end = at + 1,
                _ => found.push((group, at, at + 1)),
            }
        }
        // Placed by a count per group, keeping their order.
        let mut firsts = vec![0_usize; groups + 1];
        for &(group, ..) in &found {
            firsts[group as usize + 1] += 1;
        }
        for group in 1..firsts.len() {
            firsts[group] += firsts[group - 1];
        }
        let mut next = firsts.clone();
        let mut runs = vec![(0, 0); found.len()];
        for (group, first, end) in found {
            let place = &mut next[group as usize];
            runs[*place] = (first, end);
            *place += 1;
        }
        Self { runs, firsts }
    }

    /// The samples of `group` (one per (thread, stack) pair or more).
    pub fn samples_in(&self, group: u32) -> usize {
        let group = group as usize;
        let runs = &self.runs[self.firsts[group]..self.firsts[group + 1]];
        runs.iter().map(|&(first, end)| end - first).sum()
    }

    /// Appends the lines of `group` to `lines`: its samples' stacks by
    /// rank (`stack_ranks`, each below `2^rank_bits`), in rank order,
    /// those of equal rank merged. `scratch` is the sort's.
    pub fn add_lines(
        &self,
        group: u32,
        samples: &[StackSample],
        stack_ranks: &[u32],
        rank_bits: u32,
        lines: &mut Vec<Line>,
        scratch: &mut Vec<Line>,
    ) {
        let from = lines.len();
        let group_runs = &self.runs[self.firsts[group as usize]..self.firsts[group as usize + 1]];
        for &(first, end) in group_runs {
            lines.extend(
                samples[first..end]
                    .iter()
                    .map(|sample| ((group, stack_ranks[sample.stack as usize]), sample.count)),
            );
        }
        sort_and_merge(lines, from, rank_bits, scratch);
    }
}

/// The lines of `samples` in one group (0): their stacks by rank
/// (`stack_ranks`, each below `2^rank_bits`), in rank order, those of
/// equal rank merged.
pub(super) fn lines_of<'s>(
    samples: impl Iterator<Item = &'s StackSample>,
    stack_ranks: &[u32],
    rank_bits: u32,
) -> Vec<Line> {
    let mut lines: Vec<Line> = samples
        .map(|sample| ((0, stack_ranks[sample.stack as usize]), sample.count))
        .collect();
    sort_and_merge(&mut lines, 0, rank_bits, &mut Vec::new());
    lines
}

/// Sorts the lines from `from` on by stack rank (each below
/// `2^rank_bits`) and merges the equal ones; `scratch` is the sort's.
fn sort_and_merge(lines: &mut Vec<Line>, from: usize, rank_bits: u32, scratch: &mut Vec<Line>) {
    let added = &mut lines[from..];
    let rank = |&((_, rank), _): &Line| rank;
    // Equal lines are merged below: their order does not matter.
    match added.len() {
        ..SMALL_GROUP => added.sort_unstable_by_key(rank),
        _ => radix::sort_by_key(added, scratch, rank_bits, |line| u64::from(rank(line))),
    }
    merge_equal(lines, from);
}

/// Merges the equal lines from `from` on (sorted), adding up their samples.
fn merge_equal(lines: &mut Vec<Line>, from: usize) {
    let mut kept = from;
    for at in from..lines.len() {
        let (line, count) = lines[at];
        match kept > from && lines[kept - 1].0 == line {
            true => lines[kept - 1].1 = lines[kept - 1].1.saturating_add(count),
            false => {
                lines[kept] = (line, count);
                kept += 1;
            }
        }
    }
    lines.truncate(kept);
}

#[cfg(test)]
mod tests {
    use super::super::super::test_support::Random;
    use super::*;
    use crate::profile::ThreadState;

    fn sample(thread: u32, stack: u32, count: u64) -> StackSample {
        StackSample {
            thread,
            stack,
            count,
            weight: count,
            state: ThreadState::Cpu,
        }
    }

    #[test]
    fn each_group_s_lines_are_its_samples_by_rank_merged() {
        let mut random = Random::new(11);
        let mut lines = Vec::new();
        let mut scratch = Vec::new();
        for round in 0..40 {
            let (threads, stacks) = (1 + random.below(12), 1 + random.below(3000));
            let groups = 1 + random.below(threads);
            let thread_groups: Vec<u32> =
                (0..threads).map(|_| random.below(groups) as u32).collect();
            let stack_ranks: Vec<u32> = (0..stacks).map(|_| random.below(stacks) as u32).collect();
            // Thread by thread as a store's, or in any order.
            let mut samples: Vec<StackSample> = (0..random.below(6000))
                .map(|_| {
                    let count = 1 + random.below(3) as u64;
                    sample(
                        random.below(threads) as u32,
                        random.below(stacks) as u32,
                        count,
                    )
                })
                .collect();
            if round % 2 == 0 {
                samples.sort_by_key(|sample| sample.thread);
            }
            let group_of = |sample: &StackSample| thread_groups[sample.thread as usize];
            let runs = GroupRuns::new(&samples, groups, group_of);
            let mut expected = std::collections::BTreeMap::<(u32, u32), u64>::new();
            for sample in &samples {
                let line = (group_of(sample), stack_ranks[sample.stack as usize]);
                *expected.entry(line).or_default() += sample.count;
            }
            let bits = radix::bits_below(stacks as u64);
            lines.clear();
            for group in 0..groups as u32 {
                runs.add_lines(
                    group,
                    &samples,
                    &stack_ranks,
                    bits,
                    &mut lines,
                    &mut scratch,
                );
            }
            let expected: Vec<Line> = expected.into_iter().collect();
            assert_eq!(lines, expected, "round {round}");
        }
    }
}
