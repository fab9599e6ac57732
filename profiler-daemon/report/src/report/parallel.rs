//! Working out a report's sections on more than one core: a report by
//! process of a busy machine has hundreds of sections, each summed on its
//! own, and a person waits for all of them.
//!
//! Owns how the work is split over threads; it must not know what a
//! section's work is. The results come back in the items' order, so a
//! report's bytes do not depend on how many threads made it.

use std::{num::NonZeroUsize, thread};

/// Threads a report's work is split over, at most: enough for a report to
/// come back sooner, few enough that a profiler left on never takes a big
/// machine's cores for one.
const MOST_WORKERS: usize = 4;

/// Work (in `weight` units, e.g. samples) below which a thread is not worth
/// starting.
const LEAST_WORK_PER_WORKER: usize = 20_000;

/// `each` of every item, in the items' order, worked out on up to
/// [`MOST_WORKERS`] threads, each given a share of about equal `weight`
/// and its own scratch from `scratch`; with the scratches as the threads
/// left them (e.g. what each summed up). It falls back to this thread
/// alone when the work is small or no thread can be started.
pub(super) fn map_in_order<T, S, R>(
    items: &[T],
    weight: impl Fn(&T) -> usize,
    scratch: impl Fn() -> S + Sync,
    each: impl Fn(&mut S, &T) -> R + Sync,
) -> (Vec<R>, Vec<S>)
where
    T: Sync,
    R: Send,
    S: Send,
{
    let total: usize = items.iter().map(&weight).sum();
    let workers = most_workers().min(total / LEAST_WORK_PER_WORKER).max(1);
    let sequentially = |share: &[T]| {
        let mut scratch = scratch();
        let results: Vec<R> = share.iter().map(|item| each(&mut scratch, item)).collect();
        (results, scratch)
    };
    if workers == 1 {
        let (results, scratch) = sequentially(items);
        return (results, vec![scratch]);
    }
    let shares = split(items, &weight, total, workers);
    thread::scope(|scope| {
        // This thread takes the first share; the others go to new threads.
        let (first, rest) = shares.split_first().expect("at least one share");
        let started: Vec<_> = rest
            .iter()
            .map(|share| {
                let share = *share;
                let work = &sequentially;
                let spawned = thread::Builder::new()
                    .name("report-worker".to_owned())
                    .spawn_scoped(scope, move || work(share));
                (share, spawned.ok())
            })
            .collect();
        let (mut results, scratch) = sequentially(first);
        let mut scratches = vec![scratch];
        for (share, worker) in started {
            let (done, scratch) = match worker.map(|worker| worker.join()) {
                Some(Ok(done)) => done,
                // A panic in a worker is a panic of the report.
                Some(Err(panic)) => std::panic::resume_unwind(panic),
                None => sequentially(share),
            };
            results.extend(done);
            scratches.push(scratch);
        }
        (results, scratches)
    })
}

/// Threads a report's work may be split over here: the cores this process
/// may run on, at most [`MOST_WORKERS`].
pub(super) fn most_workers() -> usize {
    let available = thread::available_parallelism().map_or(1, NonZeroUsize::get);
    available.min(MOST_WORKERS)
}

/// `items`, of `total` weight, cut into at most `shares` runs of about
/// equal `weight`, in order.
fn split<T>(items: &[T], weight: impl Fn(&T) -> usize, total: usize, shares: usize) -> Vec<&[T]> {
    let per_share = total.div_ceil(shares).max(1);
    let mut runs = Vec::with_capacity(shares);
    let (mut start, mut sum) = (0, 0);
    for (at, item) in items.iter().enumerate() {
        sum += weight(item);
        if sum >= per_share && runs.len() + 1 < shares {
            runs.push(&items[start..=at]);
            (start, sum) = (at + 1, 0);
        }
    }
    if start < items.len() || runs.is_empty() {
        runs.push(&items[start..]);
    }
    runs
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shares_are_runs_in_order_of_about_equal_weight() {
        let items = [5, 1, 1, 1, 1, 1, 5, 5];
        let shares = split(&items, |&w| w, 20, 2);
        assert_eq!(shares, [&items[..6], &items[6..]]);
        assert_eq!(split(&items, |&w| w, 20, 1), [&items[..]]);
        // Never more shares than items, and every item once.
        let few = [1, 1];
        let shares = split(&few, |&w| w, 2, 4);
        assert_eq!(shares, [&few[..1], &few[1..]]);
    }

    #[test]
    fn results_come_in_the_items_order_whatever_the_threads() {
        let items: Vec<usize> = (0..1000).collect();
        let (doubled, seen) = map_in_order(
            &items,
            |_| LEAST_WORK_PER_WORKER,
            || 0_usize,
            |seen, &item| {
                *seen += 1;
                item * 2
            },
        );
        assert_eq!(
            doubled,
            items.iter().map(|item| item * 2).collect::<Vec<_>>()
        );
        assert_eq!(seen.iter().sum::<usize>(), items.len(), "{seen:?}");
    }
}
