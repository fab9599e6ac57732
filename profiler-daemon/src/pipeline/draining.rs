//! The drain thread: it drains the kernel's maps every drain interval and
//! at once when asked (a window's cut), and, when the kernel copies stacks,
//! runs the unwinding passes (with the process watcher's) between drains on
//! the same thread, so that the daemon wakes up once for both: a wake-up
//! costs a virtual machine tens of microseconds, the largest share of a
//! lightly loaded daemon's CPU.
//!
//! The drain never waits for the symbolizer: when its queue is full (a
//! large binary being parsed, say) the batches wait on the drain thread,
//! merged into one, and go on as soon as there is room.
//!
//! This module owns the drain and pass schedule, the requests waiting for
//! a drain and the batches waiting for the symbolizer; it must not
//! symbolize or store (the symbolizer thread does).

use std::{
    sync::{Mutex, mpsc},
    time::{Duration, Instant, SystemTime},
};

use super::SymbolizeJob as Job;

use tracing::{debug, error, warn};

use super::{
    PipelineStats, SymbolizeJob,
    unwinding::{NEW_PROGRAMS_LATELY, NEW_PROGRAMS_PASS_INTERVAL, StackCopyUnwinder},
    wakeups::{Ring, Wakeups},
    watching::{Announced, ProcessWatcher},
};
use crate::{
    kernel::{drain, offcpu::monotonic_now_ns, sources::SampleSource},
    lock,
    symbols::{jit_names::JitNames, processes::ProcessTable},
};

/// A request for an immediate drain, answered with the instant it cut at:
/// right after the cut when `stored` is false, otherwise once everything
/// sampled before that instant is in the store.
pub(super) struct DrainRequest {
    pub stored: bool,
    /// From a report of a window up to now: the drains come at the watched
    /// interval for a while (see [`DrainIntervals`]). Not from profiles,
    /// sessions, peeks or `top`, whose drains during their own window would
    /// take CPU from what they measure.
    pub watched: bool,
    pub done: tokio::sync::oneshot::Sender<SystemTime>,
}

/// What wakes the drain thread besides its schedule.
pub(super) enum Wake {
    Drain(DrainRequest),
    /// The pipeline is dropped: the thread ends.
    Stop,
}

/// With unwinding passes, a drain due this soon after a pass is done with
/// it (the drain runs a pass of its own), one wake-up instead of two.
const DRAIN_EARLY: Duration = Duration::from_millis(50);

/// How often the drain thread drains the kernel's maps.
#[derive(Clone, Copy, Debug)]
pub struct DrainIntervals {
    /// The drain interval.
    pub every: Duration,
    /// The interval while reports of windows up to now are asked for (when
    /// shorter), for `WATCHED_FOR` after one: so that the next finds at
    /// most this much backlog to unwind and symbolize. Under the scale
    /// run's storm, a second's backlog made a report wait 15-60 ms for its
    /// drain.
    pub watched: Duration,
}

/// How long after the last report of a window up to now the drains keep
/// coming at the watched interval: a dashboard asking every few seconds
/// keeps them so; an unwatched daemon drains every drain interval (drains
/// every 250 ms instead of every second cost an idle daemon ~0.1% of a core
/// more).
const WATCHED_FOR: Duration = Duration::from_secs(60);

/// When drains fall due: every drain interval, and every watched interval
/// (when shorter) for [`WATCHED_FOR`] after a report's request.
struct DrainSchedule {
    intervals: DrainIntervals,
    next: Instant,
    watched_until: Option<Instant>,
}

impl DrainSchedule {
    fn new(intervals: DrainIntervals, now: Instant) -> Self {
        Self {
            intervals,
            next: now + intervals.every,
            watched_until: None,
        }
    }

    /// The time between drains as of `now`.
    fn every(&self, now: Instant) -> Duration {
        let DrainIntervals { every, watched } = self.intervals;
        match self.watched_until {
            Some(until) if now < until => every.min(watched),
            _ => every,
        }
    }

    /// A report's drain was asked for (and is done) at `now`.
    fn watched(&mut self, now: Instant) {
        self.watched_until = Some(now + WATCHED_FOR);
        self.next = self.next.min(now + self.every(now));
    }

    /// The drain due at `next` ran at `now`.
    fn drained(&mut self, now: Instant) {
        self.next += self.every(now);
        if self.next < now {
            self.next = now + self.every(now);
        }
    }
}

/// The stack copies and the process watcher whose passes run between
/// drains.
pub(super) struct Unwinding<'a> {
    pub copies: &'a Mutex<StackCopyUnwinder>,
    pub watcher: Option<ProcessWatcher>,
    /// When a pass last found a new program announced.
    pub new_program_at: Option<Instant>,
}

impl Unwinding<'_> {
    /// Unwinds the copies written so far and records the processes
    /// announced meanwhile; says when the next pass is due.
    fn pass(&mut self, processes: &Mutex<ProcessTable>) -> Instant {
        let started = Instant::now();
        let found = lock(self.copies).unwind_all(processes);
        let unwound = started.elapsed();
        let announced = self
            .watcher
            .as_mut()
            .map_or(Announced::default(), |watcher| {
                watcher.pass(processes, started)
            });
        tracing::trace!(
            unwound_ms = unwound.as_secs_f64() * 1e3,
            watched_ms = (started.elapsed() - unwound).as_secs_f64() * 1e3,
            ?announced,
            "an unwinding pass"
        );
        if announced.own_programs > 0 {
            self.new_program_at = Some(started);
        }
        let new_programs = self
            .new_program_at
            .is_some_and(|at| at.elapsed() < NEW_PROGRAMS_LATELY);
        Instant::now() + found.next_in(new_programs)
    }
}

/// Where the drain thread's samples go and what it reports to.
pub(super) struct Outlets<'a> {
    pub jobs: &'a mpsc::SyncSender<SymbolizeJob>,
    pub processes: &'a Mutex<ProcessTable>,
    /// Told the anonymous code of each batch, to read its names ahead of
    /// the symbolizer.
    pub jit_names: &'a JitNames,
    pub stats: &'a Mutex<PipelineStats>,
}

/// The drain thread's loop: drains every interval of `intervals` (the
/// watched one while reports are asked for, see [`DrainSchedule`]) and when
/// woken with a request, runs the unwinding passes as they fall due, until
/// told to stop.
pub(super) fn drain_and_unwind(
    mut source: Box<dyn SampleSource>,
    mut unwinding: Option<Unwinding<'_>>,
    intervals: DrainIntervals,
    wakes: &Wakeups<Wake>,
    outlets: &Outlets<'_>,
) {
    let mut drains = DrainSchedule::new(intervals, Instant::now());
    let mut backlog = Backlog::default();
    // The first pass at once: sampling has started, and copies wait.
    let mut next_pass = unwinding.as_ref().map(|_| Instant::now());
    let mut last_pass = Instant::now();
    let early = if unwinding.is_some() {
        DRAIN_EARLY
    } else {
        Duration::ZERO
    };
    loop {
        if !backlog.hand_on(outlets.jobs) {
            error!("the symbolizer thread has stopped; no more samples are stored");
            return;
        }
        // Batches waiting for the symbolizer are looked at again soon.
        let backlog_due = (!backlog.is_empty()).then(|| Instant::now() + BACKLOG_RETRY);
        let wake_at = [next_pass, backlog_due]
            .into_iter()
            .flatten()
            .fold(drains.next, Instant::min);
        let woken = wakes.wait_until(wake_at);
        let mut waiting = Vec::new();
        for wake in woken.messages {
            match wake {
                Wake::Drain(request) => waiting.push(request),
                Wake::Stop => return,
            }
        }
        if woken.disconnected && waiting.is_empty() {
            return;
        }
        // A ring a quarter full is read at once; a new process waits for
        // the passes' shortest interval since the last (a storm of new
        // processes wakes the thread once a pass, not once a process).
        if let Some(pass) = &mut next_pass {
            for ring in woken.rings {
                let soonest = match ring {
                    Ring::Filling => Instant::now(),
                    Ring::Announcements => last_pass + NEW_PROGRAMS_PASS_INTERVAL,
                };
                *pass = (*pass).min(soonest);
            }
        }
        let now = Instant::now();
        let drain_due = now + early >= drains.next;
        if drain_due || !waiting.is_empty() {
            if drain_due {
                drains.drained(now);
            }
            if waiting.iter().any(|request| request.watched) {
                drains.watched(now);
            }
            let copies = unwinding.as_ref().map(|unwinding| unwinding.copies);
            if let Some(job) = drain_once(source.as_mut(), copies, waiting, outlets) {
                backlog.push(job);
            }
            // The drain unwound every copy; the watcher's pass follows.
            if let Some(unwinding) = &mut unwinding {
                next_pass = Some(unwinding.pass(outlets.processes));
                last_pass = now;
            }
        } else if let (Some(unwinding), Some(pass)) = (&mut unwinding, &mut next_pass)
            && now >= *pass
        {
            *pass = unwinding.pass(outlets.processes);
            last_pass = now;
        }
    }
}

/// How soon batches waiting for the symbolizer are offered again.
const BACKLOG_RETRY: Duration = Duration::from_millis(50);

/// Batches the symbolizer had no room for, in order, merged where that
/// moves no window's edge: a batch that answered a request (a window's
/// cut, a report's drain) ends its bucket where the request was told, so
/// nothing later merges into it; the samples of the drains between two
/// requests go into one bucket.
#[derive(Default)]
struct Backlog {
    waiting: std::collections::VecDeque<Job>,
    /// When the symbolizer fell behind, for the log.
    since: Option<Instant>,
    merged: u64,
}

impl Backlog {
    fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Adds a drain's batch, merged into the last one waiting unless that
    /// one answered a request. (Merged into one that did not, a batch's
    /// request is told the merged batch's end, its own: the merged samples
    /// all came after the request before.)
    fn push(&mut self, job: Job) {
        match self.waiting.back_mut() {
            Some(last) if last.waiting.is_empty() => {
                let batch = &mut last.batch;
                batch.end = job.batch.end;
                batch.samples.extend(job.batch.samples);
                for (total, delta) in batch.counters.iter_mut().zip(job.batch.counters) {
                    *total += delta;
                }
                last.waiting.extend(job.waiting);
                self.merged += 1;
            }
            _ => self.waiting.push_back(job),
        }
    }

    /// Offers what waits to the symbolizer, oldest first, without waiting
    /// for it; false when the symbolizer has stopped.
    fn hand_on(&mut self, jobs: &mpsc::SyncSender<Job>) -> bool {
        while let Some(job) = self.waiting.pop_front() {
            match jobs.try_send(job) {
                Ok(()) => {}
                Err(mpsc::TrySendError::Full(job)) => {
                    if self.since.is_none() {
                        self.since = Some(Instant::now());
                        warn!(
                            "the symbolizer is behind (a large binary being parsed?); drained \
                             batches wait for it, merged between windows' cuts, and draining \
                             goes on"
                        );
                    }
                    self.waiting.push_front(job);
                    return true;
                }
                Err(mpsc::TrySendError::Disconnected(_)) => return false,
            }
        }
        if let Some(since) = self.since.take() {
            warn!(
                behind_ms = since.elapsed().as_millis() as u64,
                batches_merged = self.merged,
                "the symbolizer caught up; the drains it was behind on are stored merged"
            );
            self.merged = 0;
        }
        true
    }
}

/// One drain: the kernel's maps read out, the stack copies unwound, the
/// batch normalized, to be handed to the symbolizer with the requests
/// waiting for it (none when the drain failed).
fn drain_once(
    source: &mut dyn SampleSource,
    stack_copies: Option<&Mutex<StackCopyUnwinder>>,
    waiting: Vec<DrainRequest>,
    outlets: &Outlets<'_>,
) -> Option<Job> {
    let Outlets {
        jobs: _,
        processes,
        jit_names,
        stats,
    } = *outlets;
    let drain_started = Instant::now();
    // The cut in the kernel's clock, for the waits under way.
    let cut_ns = monotonic_now_ns();
    let mut raw = match source.drain() {
        Ok(raw) => raw,
        Err(err) => {
            // Those waiting for this drain get an error (their channel
            // closes); the next drain tries again.
            error!(source = source.name(), "draining the samples failed: {err}");
            return None;
        }
    };
    // Every copy written before the flip is in the ring buffer by now.
    let mut wait_stats = None;
    let mut deep_thread_stats = None;
    let mut lineage_stats = None;
    let mut python_target_stats = None;
    if let Some(copies) = stack_copies {
        let mut copies = lock(copies);
        copies.unwind_all(processes);
        raw.samples.extend(copies.take(cut_ns));
        wait_stats = copies.wait_stats();
        deep_thread_stats = copies.deep_thread_stats();
        lineage_stats = copies.lineage_stats();
        python_target_stats = copies.python_target_stats();
    }
    debug!(counters = ?raw.counters, waits = ?wait_stats, "drained");
    let lost: u64 = drain::losses(&raw.counters).map(|(_, count)| count).sum();
    if lost > 0 {
        warn!(
            lost,
            counters = ?raw.counters,
            "the kernel lost samples or stacks since the previous drain"
        );
    }
    {
        let mut stats = lock(stats);
        for (total, delta) in stats.counters.iter_mut().zip(raw.counters) {
            *total += delta;
        }
        stats.drains += 1;
        stats.drain_time += drain_started.elapsed();
        let now = Instant::now();
        if let Some(last) = stats.last_drain.replace(now) {
            stats.longest_drain_gap = stats.longest_drain_gap.max(now - last);
        }
        stats.waits = wait_stats;
        stats.deep_threads = deep_thread_stats;
        stats.lineages = lineage_stats;
        stats.python_targets = python_target_stats;
    }
    let (store_waiting, cut_waiting): (Vec<_>, Vec<_>) =
        waiting.into_iter().partition(|request| request.stored);
    for request in cut_waiting {
        let _ = request.done.send(raw.end);
    }
    let (batch, process_stats, unwind_stats) = {
        let mut table = lock(processes);
        (
            table.normalize_batch(raw),
            table.stats(),
            table.unwind_stats(),
        )
    };
    jit_names.want(&batch);
    {
        let mut stats = lock(stats);
        stats.processes = process_stats;
        stats.unwinding = unwind_stats;
    }
    let waiting = store_waiting
        .into_iter()
        .map(|request| request.done)
        .collect();
    Some(Job { batch, waiting })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A drain's batch of `samples` over seconds `start..end`, answering
    /// `requests` requests.
    fn job(start: u64, end: u64, samples: usize, requests: usize) -> Job {
        use crate::symbols::processes::NormalizedBatch;
        let at = |secs| std::time::UNIX_EPOCH + Duration::from_secs(secs);
        Job {
            batch: NormalizedBatch {
                start: at(start),
                end: at(end),
                samples: vec![
                    crate::symbols::processes::NormalizedSample::of_test(1, Vec::new());
                    samples
                ],
                counters: Default::default(),
            },
            waiting: (0..requests)
                .map(|_| tokio::sync::oneshot::channel().0)
                .collect(),
        }
    }

    fn seconds(job: &Job) -> (u64, u64) {
        let secs = |time: std::time::SystemTime| {
            time.duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
        };
        (secs(job.batch.start), secs(job.batch.end))
    }

    #[test]
    fn batches_wait_merged_while_the_symbolizer_is_behind() {
        let (jobs, queue) = mpsc::sync_channel(1);
        let mut backlog = Backlog::default();
        // The symbolizer's queue is full: the drain goes on.
        jobs.try_send(job(0, 1, 1, 0)).unwrap();
        backlog.push(job(1, 2, 2, 1));
        assert!(backlog.hand_on(&jobs));
        backlog.push(job(2, 3, 3, 0));
        backlog.push(job(3, 4, 1, 2));
        assert!(backlog.hand_on(&jobs));
        assert!(!backlog.is_empty());
        // Room again: the waiting batches go on in order, the first alone
        // (it answered a request: its window's edge is its end), the next
        // two merged (their requests told the merged end, their own).
        queue.recv().unwrap();
        assert!(backlog.hand_on(&jobs));
        let first = queue.recv().unwrap();
        assert_eq!(seconds(&first), (1, 2));
        assert_eq!((first.batch.samples.len(), first.waiting.len()), (2, 1));
        assert!(backlog.hand_on(&jobs));
        assert!(backlog.is_empty());
        let merged = queue.recv().unwrap();
        assert_eq!(seconds(&merged), (2, 4));
        assert_eq!((merged.batch.samples.len(), merged.waiting.len()), (4, 2));
        drop(queue);
        backlog.push(job(4, 5, 1, 0));
        assert!(!backlog.hand_on(&jobs), "the symbolizer stopped");
    }

    #[test]
    fn drains_come_faster_while_reports_are_asked_for() {
        let start = Instant::now();
        let second = Duration::from_secs(1);
        let watched = Duration::from_millis(250);
        let intervals = |every| DrainIntervals { every, watched };
        let mut drains = DrainSchedule::new(intervals(second), start);
        assert_eq!(drains.next, start + second);
        drains.drained(start + second);
        assert_eq!(drains.next, start + 2 * second);
        // A request brings the next drain within the watched interval, and
        // the drains after it come that often.
        let asked = start + second + Duration::from_millis(100);
        drains.watched(asked);
        assert_eq!(drains.next, asked + watched);
        drains.drained(drains.next);
        assert_eq!(drains.next, asked + 2 * watched);
        // Unasked for WATCHED_FOR, they go back to the drain interval.
        let late = asked + WATCHED_FOR + second;
        drains.drained(late);
        assert_eq!(drains.next, late + second);
        // A drain interval shorter than the watched one is kept.
        let mut fast = DrainSchedule::new(intervals(Duration::from_millis(100)), start);
        fast.watched(start);
        assert_eq!(fast.next, start + Duration::from_millis(100));
    }
}
