//! Summing a window's buckets per (thread, stack), in (thread, stack) order,
//! without hashing.
//!
//! Each bucket keeps its entries sorted by (thread, stack), so a thread's
//! entries in one bucket are one sorted run. Threads are visited in order
//! (a heap holds each bucket's next thread), and a thread's runs, a few for
//! most threads since most live a few seconds, are merged by a stable sort,
//! which merges the runs it is given rather than sorting anew. Every bucket
//! is read once, front to back.
//!
//! This module must not know about intern tables, selectors or profiles.

use std::{cmp::Reverse, collections::BinaryHeap};

use rustc_hash::FxHashMap as HashMap;

use super::Bucket;
use crate::profile::ThreadState;

/// Samples of one thread with one stack over a window.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Total {
    pub thread: u32,
    pub stack: u32,
    pub count: u64,
    pub weight: u64,
    pub state: ThreadState,
}

/// The time off CPU in `buckets` of the threads `selected` accepts, summed
/// per (thread, stack) and counted in sampling periods of `period_ns`
/// (rounded): each sum goes to `add`, in (thread, stack) order.
pub(super) fn wait_totals(
    buckets: &[&Bucket],
    selected: impl Fn(u32) -> bool,
    period_ns: u64,
    mut add: impl FnMut(Total),
) {
    let mut sums: HashMap<(u32, u32), (u64, ThreadState)> = HashMap::default();
    for bucket in buckets {
        for wait in bucket.waits.iter().filter(|wait| selected(wait.thread)) {
            let sum = sums
                .entry((wait.thread, wait.stack))
                .or_insert((0, wait.state));
            sum.0 = sum.0.saturating_add(wait.nanos);
        }
    }
    let mut sums: Vec<_> = sums.into_iter().collect();
    sums.sort_unstable_by_key(|&(key, _)| key);
    for ((thread, stack), (nanos, state)) in sums {
        add(Total {
            thread,
            stack,
            count: (nanos + period_ns / 2) / period_ns.max(1),
            weight: nanos,
            state,
        });
    }
}

/// The CPU samples of `buckets` of the threads `selected` accepts, summed
/// per (thread, stack): each sum goes to `add`, in (thread, stack) order.
pub(super) fn cpu_totals(
    buckets: &[&Bucket],
    selected: impl Fn(u32) -> bool,
    mut add: impl FnMut(Total),
) {
    // Where each bucket's entries of the next thread start.
    let mut cursors = vec![0; buckets.len()];
    // (next thread, bucket) of the buckets with entries left, least first.
    let mut next: BinaryHeap<Reverse<(u32, usize)>> = buckets
        .iter()
        .enumerate()
        .filter_map(|(index, bucket)| Some(Reverse((bucket.cpu.first()?.thread, index))))
        .collect();
    let mut runs: Vec<usize> = Vec::new();
    // A thread's entries as (stack, count, weight), run after run.
    let mut entries: Vec<(u32, u32, u64)> = Vec::new();
    while let Some(&Reverse((thread, _))) = next.peek() {
        runs.clear();
        while let Some(&Reverse((t, bucket))) = next.peek()
            && t == thread
        {
            next.pop();
            runs.push(bucket);
        }
        let wanted = selected(thread);
        entries.clear();
        // The heap gave them in bucket order.
        for &index in &runs {
            let bucket = buckets[index];
            let rest = &bucket.cpu[cursors[index]..];
            let run = &rest[..rest.partition_point(|samples| samples.thread == thread)];
            if wanted {
                entries.extend(run.iter().map(|samples| {
                    let weight = u64::from(samples.count) * bucket.period_ns;
                    (samples.stack, samples.count, weight)
                }));
            }
            cursors[index] += run.len();
            if let Some(samples) = bucket.cpu.get(cursors[index]) {
                next.push(Reverse((samples.thread, index)));
            }
        }
        if !wanted {
            continue;
        }
        if runs.len() > 1 {
            entries.sort_by_key(|&(stack, ..)| stack);
        }
        // Equal stacks are next to each other: sum them.
        let mut sum: Option<Total> = None;
        for &(stack, count, weight) in &entries {
            let count = u64::from(count);
            match &mut sum {
                Some(total) if total.stack == stack => {
                    total.count += count;
                    total.weight += weight;
                }
                _ => {
                    if let Some(total) = sum.take() {
                        add(total);
                    }
                    sum = Some(Total {
                        thread,
                        stack,
                        count,
                        weight,
                        state: ThreadState::Cpu,
                    });
                }
            }
        }
        if let Some(total) = sum {
            add(total);
        }
    }
}

/// The CPU samples of `buckets` of the threads `selected` accepts, summed
/// per stack over all threads: each sum goes to `add`, in stack order,
/// naming the least thread with samples of it. `threads_seen` (one per
/// thread) is set for every thread with samples; `stacks` bounds the
/// stack ids. One pass over each bucket, without merging or sorting.
pub(super) fn cpu_totals_per_stack(
    buckets: &[&Bucket],
    selected: impl Fn(u32) -> bool,
    stacks: usize,
    threads_seen: &mut [bool],
    mut add: impl FnMut(Total),
) {
    // (count, least thread) per stack; a zero count is no samples. Kept
    // small: the sums are read at random, one per entry. Weights are the
    // counts times the period, unless buckets differ in period (the
    // frequency changed): then they are summed beside.
    let mut sums: Vec<(u64, u32)> = vec![(0, u32::MAX); stacks];
    let period_ns = buckets.first().map_or(0, |bucket| bucket.period_ns);
    let mut weights = buckets
        .iter()
        .any(|bucket| bucket.period_ns != period_ns)
        .then(|| vec![0_u64; stacks]);
    for bucket in buckets {
        // A bucket's entries come thread by thread: ask once per thread.
        let mut current: Option<(u32, bool)> = None;
        for samples in bucket.cpu.iter() {
            let wanted = match current {
                Some((thread, wanted)) if thread == samples.thread => wanted,
                _ => {
                    let wanted = selected(samples.thread);
                    current = Some((samples.thread, wanted));
                    wanted
                }
            };
            if !wanted {
                continue;
            }
            threads_seen[samples.thread as usize] = true;
            let sum = &mut sums[samples.stack as usize];
            sum.0 += u64::from(samples.count);
            sum.1 = sum.1.min(samples.thread);
            if let Some(weights) = &mut weights {
                weights[samples.stack as usize] += u64::from(samples.count) * bucket.period_ns;
            }
        }
    }
    for (stack, (count, thread)) in (0..).zip(sums) {
        if count > 0 {
            let weight = match &weights {
                Some(weights) => weights[stack as usize],
                None => count * period_ns,
            };
            add(Total {
                thread,
                stack,
                count,
                weight,
                state: ThreadState::Cpu,
            });
        }
    }
}

/// The owner of a thread [`cpu_totals_per_owner`] does not read.
pub(super) const NOT_SELECTED: u32 = u32::MAX;

/// The CPU samples of `buckets` summed per owner and stack, `owner_of`
/// giving each thread's owner (a number; [`NOT_SELECTED`] for the threads
/// left out): each sum goes to `add`, naming the owner's least thread with
/// samples of it, in (thread, stack) order (stack order when there is one
/// owner). `threads_seen` and `stacks` as
/// [`cpu_totals_per_stack`] takes them. One pass over each bucket: each
/// stack's first owner is summed in a table by stack, the rare others
/// (a stack in the code of more than one owner) in a map: for owners whose
/// code differs (commands), not for owners running the same code
/// (processes of one program), whose entries would mostly go to the map.
pub(super) fn cpu_totals_per_owner(
    buckets: &[&Bucket],
    owner_of: &[u32],
    stacks: usize,
    threads_seen: &mut [bool],
    mut add: impl FnMut(Total),
) {
    let owner = |thread: u32| {
        owner_of
            .get(thread as usize)
            .copied()
            .unwrap_or(NOT_SELECTED)
    };
    let mut owners = owner_of.iter().filter(|&&owner| owner != NOT_SELECTED);
    let first_owner = owners.next();
    if owners.all(|owner| Some(owner) == first_owner) {
        // One owner: its sums are the sums per stack.
        let selected = |thread: u32| owner(thread) != NOT_SELECTED;
        return cpu_totals_per_stack(buckets, selected, stacks, threads_seen, add);
    }
    /// An owner's samples of a stack: (owner, least thread, count, weight).
    type Sum = (u32, u32, u64, u64);
    let empty: Sum = (NOT_SELECTED, u32::MAX, 0, 0);
    let mut firsts: Vec<Sum> = vec![empty; stacks];
    let mut others: HashMap<(u32, u32), Sum> = HashMap::default();
    for bucket in buckets {
        // A bucket's entries come thread by thread: ask once per thread.
        let mut current = (u32::MAX, NOT_SELECTED);
        for samples in bucket.cpu.iter() {
            if current.0 != samples.thread {
                current = (samples.thread, owner(samples.thread));
            }
            let owner = current.1;
            if owner == NOT_SELECTED {
                continue;
            }
            threads_seen[samples.thread as usize] = true;
            let first = &mut firsts[samples.stack as usize];
            let sum = match first.0 {
                NOT_SELECTED => {
                    first.0 = owner;
                    first
                }
                first_owner if first_owner == owner => first,
                _ => others
                    .entry((samples.stack, owner))
                    .or_insert((owner, u32::MAX, 0, 0)),
            };
            sum.1 = sum.1.min(samples.thread);
            sum.2 += u64::from(samples.count);
            sum.3 += u64::from(samples.count) * bucket.period_ns;
        }
    }
    let total = |stack: u32, (_, thread, count, weight): Sum| Total {
        thread,
        stack,
        count,
        weight,
        state: ThreadState::Cpu,
    };
    // Each stack's first owner's sum, in stack order, then placed by a
    // count per thread (keeping that order): in (thread, stack) order
    // without sorting them (a machine's window holds a few hundred
    // thousand). Selected threads are below `owner_of.len()`.
    let firsts: Vec<Total> = (0..)
        .zip(firsts)
        .filter(|&(_, (owner, ..))| owner != NOT_SELECTED)
        .map(|(stack, sum)| total(stack, sum))
        .collect();
    let mut starts = vec![0_usize; owner_of.len() + 1];
    for first in &firsts {
        starts[first.thread as usize + 1] += 1;
    }
    for thread in 1..starts.len() {
        starts[thread] += starts[thread - 1];
    }
    let mut by_thread = firsts.clone();
    for first in firsts {
        let place = &mut starts[first.thread as usize];
        by_thread[*place] = first;
        *place += 1;
    }
    // The other owners' sums sorted apart, then merged in: a thread is of
    // one owner, so no two sums have the same thread and stack.
    let mut others: Vec<Total> = (others.into_iter())
        .map(|((stack, _), sum)| total(stack, sum))
        .collect();
    others.sort_unstable_by_key(|total| (total.thread, total.stack));
    let key = |total: &Total| (total.thread, total.stack);
    let mut others = others.into_iter().peekable();
    for first in by_thread {
        while let Some(other) = others.next_if(|other| key(other) < key(&first)) {
            add(other);
        }
        add(first);
    }
    others.for_each(add);
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use profiler_common::COUNTER_COUNT;

    use super::super::CpuSamples;
    use super::*;

    fn bucket(period_ns: u64, entries: &[(u32, u32, u32)]) -> Bucket {
        let mut cpu: Vec<CpuSamples> = entries
            .iter()
            .map(|&(thread, stack, count)| CpuSamples {
                thread,
                stack,
                count,
            })
            .collect();
        cpu.sort_unstable_by_key(|samples| (samples.thread, samples.stack));
        Bucket {
            start: UNIX_EPOCH,
            end: UNIX_EPOCH + Duration::from_secs(1),
            period_ns,
            cpu: cpu.into_boxed_slice(),
            waits: Box::new([]),
            counters: [0; COUNTER_COUNT as usize],
        }
    }

    /// `count` buckets of up to `entries` random entries each, of
    /// `threads` threads and `stacks` stacks, periods of 1 to 3.
    fn random_buckets(
        seed: u64,
        count: usize,
        entries: usize,
        (threads, stacks): (u64, u64),
    ) -> Vec<Bucket> {
        let mut state = seed;
        let mut random = |n: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % n) as u32
        };
        (0..count)
            .map(|_| {
                let mut seen = std::collections::BTreeMap::new();
                for _ in 0..entries {
                    seen.insert((random(threads), random(stacks)), 1 + random(5));
                }
                let entries: Vec<(u32, u32, u32)> =
                    seen.into_iter().map(|((t, s), c)| (t, s, c)).collect();
                bucket(u64::from(1 + random(3)), &entries)
            })
            .collect()
    }

    fn totals(buckets: &[Bucket], selected: impl Fn(u32) -> bool) -> Vec<(u32, u32, u64, u64)> {
        let buckets: Vec<&Bucket> = buckets.iter().collect();
        let mut totals = Vec::new();
        cpu_totals(&buckets, selected, |total| {
            totals.push((total.thread, total.stack, total.count, total.weight));
        });
        totals
    }

    #[test]
    fn sums_per_thread_and_stack_in_order() {
        let buckets = [
            bucket(10, &[(2, 7, 1), (0, 3, 2), (2, 1, 4)]),
            bucket(10, &[]),
            bucket(20, &[(2, 7, 1), (1, 5, 1), (2, 0, 3)]),
            bucket(10, &[(0, 3, 5), (3, 9, 1)]),
        ];
        assert_eq!(
            totals(&buckets, |_| true),
            [
                (0, 3, 7, 70),
                (1, 5, 1, 20),
                (2, 0, 3, 60),
                (2, 1, 4, 40),
                (2, 7, 2, 30),
                (3, 9, 1, 10),
            ]
        );
        assert_eq!(
            totals(&buckets, |thread| thread % 2 == 1),
            [(1, 5, 1, 20), (3, 9, 1, 10)]
        );
        assert!(totals(&[], |_| true).is_empty());
    }

    #[test]
    fn per_stack_sums_are_the_per_thread_sums_added_up() {
        let buckets = [
            bucket(10, &[(2, 7, 1), (0, 3, 2), (2, 1, 4)]),
            bucket(20, &[(2, 7, 1), (1, 5, 1), (2, 0, 3), (1, 3, 1)]),
            bucket(10, &[(0, 3, 5), (3, 9, 1)]),
        ];
        let buckets: Vec<&Bucket> = buckets.iter().collect();
        let per_stack = |selected: &dyn Fn(u32) -> bool| {
            let mut seen = vec![false; 4];
            let mut totals = Vec::new();
            cpu_totals_per_stack(&buckets, selected, 10, &mut seen, |total| {
                totals.push((total.stack, total.thread, total.count, total.weight));
            });
            (totals, seen)
        };
        assert_eq!(
            per_stack(&|_| true),
            (
                vec![
                    (0, 2, 3, 60),
                    (1, 2, 4, 40),
                    (3, 0, 8, 90),
                    (5, 1, 1, 20),
                    (7, 2, 2, 30),
                    (9, 3, 1, 10),
                ],
                vec![true; 4]
            )
        );
        assert_eq!(
            per_stack(&|thread| thread == 1),
            (
                vec![(3, 1, 1, 20), (5, 1, 1, 20)],
                vec![false, true, false, false]
            )
        );
        // One period throughout: the weights are the counts times it.
        let uniform = [
            bucket(10, &[(2, 7, 1), (0, 3, 2)]),
            bucket(10, &[(1, 7, 4), (0, 3, 5)]),
        ];
        let uniform: Vec<&Bucket> = uniform.iter().collect();
        let mut totals = Vec::new();
        cpu_totals_per_stack(
            &uniform,
            |_| true,
            10,
            &mut [false; 4],
            |total| {
                totals.push((total.stack, total.thread, total.count, total.weight));
            },
        );
        assert_eq!(totals, vec![(3, 0, 7, 70), (7, 1, 5, 50)]);
    }

    #[test]
    fn sums_per_owner_are_the_per_thread_sums_added_up_by_owner() {
        let buckets = random_buckets(0x2545_f491_4f6c_dd1d, 40, 150, (24, 60));
        let buckets: Vec<&Bucket> = buckets.iter().collect();
        // Owners of one thread and of several, some threads left out; and
        // every thread of one owner.
        let spread: Vec<u32> = (0..24)
            .map(|thread| match thread % 7 {
                0 => NOT_SELECTED,
                1 | 2 => 100 + thread,
                other => other,
            })
            .collect();
        let one_owner: Vec<u32> = (0..24)
            .map(|thread| u32::from(thread % 5 == 0) * 7)
            .collect();
        for (owner_of, many_owners) in [(spread, true), (one_owner, false)] {
            // The reference: a map by (owner, stack) of the per-thread sums.
            let mut expected = std::collections::BTreeMap::<(u32, u32), Total>::new();
            cpu_totals(
                &buckets,
                |thread| owner_of[thread as usize] != NOT_SELECTED,
                |total| {
                    let owner = owner_of[total.thread as usize];
                    let sum = expected.entry((owner, total.stack)).or_insert(Total {
                        count: 0,
                        weight: 0,
                        ..total
                    });
                    sum.thread = sum.thread.min(total.thread);
                    sum.count += total.count;
                    sum.weight += total.weight;
                },
            );
            let mut expected: Vec<Total> = expected.into_values().collect();
            expected.sort_unstable_by_key(|total| (total.thread, total.stack));
            let seen_expected: Vec<bool> = (0..24)
                .map(|thread| {
                    owner_of[thread] != NOT_SELECTED
                        && buckets.iter().any(|bucket| {
                            bucket
                                .cpu
                                .iter()
                                .any(|samples| samples.thread as usize == thread)
                        })
                })
                .collect();
            let mut by_stack_table = Vec::new();
            let mut seen = vec![false; 24];
            cpu_totals_per_owner(&buckets, &owner_of, 60, &mut seen, |total| {
                by_stack_table.push(total);
            });
            // In (thread, stack) order as given, but for one owner's (in
            // stack order).
            if many_owners {
                assert_eq!(by_stack_table, expected);
            }
            by_stack_table.sort_unstable_by_key(|total| (total.thread, total.stack));
            assert_eq!(by_stack_table, expected);
            assert_eq!(seen, seen_expected);
        }
    }

    #[test]
    fn matches_a_map_on_many_buckets() {
        let buckets = random_buckets(0x9e37_79b9_7f4a_7c15, 50, 200, (30, 100));
        let mut expected = std::collections::BTreeMap::<(u32, u32), (u64, u64)>::new();
        for bucket in &buckets {
            for samples in bucket.cpu.iter() {
                let entry = expected.entry((samples.thread, samples.stack)).or_default();
                entry.0 += u64::from(samples.count);
                entry.1 += u64::from(samples.count) * bucket.period_ns;
            }
        }
        let expected: Vec<_> = expected
            .into_iter()
            .map(|((thread, stack), (count, weight))| (thread, stack, count, weight))
            .collect();
        assert_eq!(totals(&buckets, |_| true), expected);
    }
}
