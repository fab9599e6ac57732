//! Charging time off CPU: a thread's stack at its switch-out (a stack
//! copy of an off-CPU kind, unwound like any other) waits here until the
//! kernel hands back the interval that ends at its switch-in; the
//! interval is then charged to that stack, split into the wait itself
//! (`S` or `D`, up to its wake-up) and the run queue (from its wake-up to
//! its switch-in). A wait longer than a drain is credited to every drain
//! it spans as it goes, so a thread blocked for an hour shows in every
//! window of that hour, each second counted once.
//!
//! This module owns the waits under way; it must not unwind, symbolize or
//! store.

use profiler_common::{SampleKind, offcpu::Interval};
use rustc_hash::FxHashMap as HashMap;

use crate::kernel::offcpu::{OffCpuIntervals, RecordedProcesses};

/// A wait under way: the thread's stack when it left the CPU.
#[derive(Debug)]
struct Wait<I> {
    identity: I,
    /// When it began (its switch-out, or when recording began for a
    /// thread found waiting).
    began_ns: u64,
    /// Up to when its time was charged already.
    credited_ns: u64,
    /// What its time is multiplied by: 1 when recorded in full, the
    /// inverse of the chance it was recorded with otherwise.
    scale: f64,
    /// Credit passes that found the kernel no longer waiting on it, its
    /// interval not read yet.
    unconfirmed: u8,
}

/// Credit passes a wait the kernel ended may go without its interval
/// before it is counted as lost.
const UNCONFIRMED_PASSES: u8 = 3;

/// What waits were seen and what became of them, for the status report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitStats {
    /// Intervals charged to their stack.
    pub charged: u64,
    /// Intervals whose switch-out was not seen (it came before recording
    /// began).
    pub unmatched: u64,
    /// Intervals whose stack copy was lost (also counted, as the copy's
    /// loss, by the kernel).
    pub stack_lost: u64,
    /// Threads found waiting when recording began, charged from then.
    pub already_waiting: u64,
    /// Waits dropped because the kernel no longer had them pending (their
    /// interval was lost).
    pub abandoned: u64,
    /// Waits under way now.
    pub under_way: u64,
}

/// The waits under way and the kernel's intervals. `I` is what identifies
/// a sample (thread, stacks, kind); `with_kind` gives it another kind.
pub struct Waits<I> {
    intervals: OffCpuIntervals,
    /// The processes recorded now: the waits of the others end.
    recorded: RecordedProcesses,
    /// By thread and switch-out: a thread's next wait can be read before
    /// the interval that ends its previous one.
    under_way: HashMap<(u32, u64), Wait<I>>,
    /// When the kernel last let go of its pending waits as of the last
    /// look: every wait under way began after it.
    released_ns: u64,
    stats: WaitStats,
}

/// A kind's identity, for charging part of a wait to the run queue.
pub trait WaitIdentity: Clone {
    fn pid(&self) -> u32;
    fn tid(&self) -> u32;
    fn with_kind(&self, kind: SampleKind) -> Self;
}

impl<I: WaitIdentity> Waits<I> {
    pub fn new(intervals: OffCpuIntervals, recorded: RecordedProcesses) -> Self {
        Self {
            intervals,
            recorded,
            under_way: HashMap::default(),
            released_ns: 0,
            stats: WaitStats::default(),
        }
    }

    /// The intervals' ring buffer (see [`StackCopyUnwinder::rings`]).
    ///
    /// [`StackCopyUnwinder::rings`]: super::unwinding::StackCopyUnwinder::rings
    pub fn intervals_ring(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.intervals)
    }

    /// The intervals ended so far; read them before the stack copies, so
    /// that every interval's switch-out copy has been read when it is
    /// applied.
    pub fn read_intervals(&mut self) -> Vec<Interval> {
        self.intervals.read()
    }

    /// A thread left the CPU with this stack at `switched_out_ns`.
    pub fn begin(&mut self, identity: I, switched_out_ns: u64, scale: f64) {
        if switched_out_ns < self.drop_stale() {
            // Read after the recording it was part of ended, the kernel's
            // pending wait gone with it: nothing will end it, and it began
            // after that recording's last cut, in no window. Counted as
            // the waits of a recording that ended are.
            self.stats.charged += 1;
            return;
        }
        let tid = identity.tid();
        self.under_way.insert(
            (tid, switched_out_ns),
            Wait {
                identity,
                began_ns: switched_out_ns,
                credited_ns: switched_out_ns,
                scale,
                unconfirmed: 0,
            },
        );
    }

    /// A thread found waiting (in procfs) when recording began at `now_ns`:
    /// the kernel ends its wait with an interval of unknown start.
    pub fn begin_already_waiting(&mut self, identity: I, now_ns: u64) {
        self.drop_stale();
        let tid = identity.tid();
        if self.under_way.keys().any(|&(waiting, _)| waiting == tid) {
            return;
        }
        self.intervals.expect_unknown_start(identity.pid(), tid);
        self.stats.already_waiting += 1;
        self.under_way.insert(
            (tid, 0),
            Wait {
                identity,
                began_ns: now_ns,
                credited_ns: now_ns,
                scale: 1.0,
                unconfirmed: 0,
            },
        );
    }

    /// Charges the intervals to their waits' stacks.
    pub fn end(&mut self, intervals: Vec<Interval>, mut charge: impl FnMut(I, u64)) {
        for interval in intervals {
            // A wait that began before recording is under way at start 0.
            let wait = self
                .under_way
                .remove(&(interval.tid, interval.switched_out_ns));
            let Some(wait) = wait else {
                if interval.flags & profiler_common::offcpu::flags::STACK_LOST != 0 {
                    self.stats.stack_lost += 1;
                } else {
                    self.stats.unmatched += 1;
                }
                continue;
            };
            self.stats.charged += 1;
            split(
                &wait,
                interval.woken_ns,
                interval.switched_in_ns,
                &mut charge,
            );
        }
    }

    /// Credits the waits still under way up to `now_ns` (the drain's cut),
    /// dropping those the kernel no longer has pending (their interval was
    /// lost) and ending those of processes no longer recorded (credited up
    /// to the end of their recording, when that came before).
    pub fn credit_until(&mut self, now_ns: u64, mut charge: impl FnMut(I, u64)) {
        self.drop_stale();
        let recorded = crate::read_lock(&self.recorded).clone();
        if recorded.is_nothing() {
            self.intervals.clear_marks();
        }
        let intervals = &mut self.intervals;
        let (mut abandoned, mut ended) = (0, 0);
        self.under_way.retain(|&(tid, switched_out_ns), wait| {
            if !recorded.includes(wait.identity.pid()) {
                ended += 1;
                let until = recorded
                    .ended_ns(wait.identity.pid())
                    .map_or(now_ns, |ended_ns| ended_ns.min(now_ns));
                if until > wait.credited_ns {
                    charge(
                        wait.identity.clone(),
                        scaled(until - wait.credited_ns, wait.scale),
                    );
                }
                if intervals
                    .pending(tid)
                    .is_some_and(|pending| pending.switched_out_ns == switched_out_ns)
                {
                    intervals.forget(tid);
                }
                return false;
            }
            let pending = intervals.pending(tid);
            if pending.is_some_and(|pending| pending.switched_out_ns == switched_out_ns) {
                // Under way; once woken, the rest is charged with its
                // interval, split at the wake-up.
                if pending.is_some_and(|pending| pending.woken_ns != 0) {
                    return true;
                }
            } else {
                // Ended: its interval comes with the next read, or was lost.
                wait.unconfirmed += 1;
                if wait.unconfirmed >= UNCONFIRMED_PASSES {
                    abandoned += 1;
                    return false;
                }
                return true;
            }
            if now_ns > wait.credited_ns {
                charge(
                    wait.identity.clone(),
                    scaled(now_ns - wait.credited_ns, wait.scale),
                );
                wait.credited_ns = now_ns;
            }
            true
        });
        self.stats.abandoned += abandoned;
        // Charged up to the end of their recording.
        self.stats.charged += ended;
    }

    pub fn stats(&self) -> WaitStats {
        WaitStats {
            under_way: self.under_way.len() as u64,
            ..self.stats
        }
    }

    /// Ends the waits begun before the kernel last let go of its pending
    /// waits (recording stopped and the switch programs came off): no
    /// interval will end them, and the time they were credited up to the
    /// last cut is all theirs. A recording that starts again at once (two
    /// wall profiles back to back) must find no wait of a thread it finds
    /// waiting, or the thread is never charged. Returns when the kernel
    /// last let go (monotonic ns; 0: never).
    ///
    /// Called for every wait begun: it looks at the waits under way only
    /// when the kernel let go again since (a look over all of them per
    /// wait made a pass quadratic in the waits under way, and a drain
    /// thread of a machine with thousands of waiting threads fell behind
    /// for good).
    fn drop_stale(&mut self) -> u64 {
        let released_ns = crate::read_lock(&self.recorded).released_ns();
        if released_ns == self.released_ns {
            return released_ns;
        }
        self.released_ns = released_ns;
        let before = self.under_way.len();
        self.under_way
            .retain(|_, wait| wait.began_ns >= released_ns);
        // Charged up to the last cut of their recording; what came after
        // it belongs to no window.
        self.stats.charged += (before - self.under_way.len()) as u64;
        released_ns
    }
}

/// Charges what is left of a wait: its own kind up to the wake-up, the run
/// queue from the wake-up (if it was woken: a preempted thread waits in
/// the run queue from the start) to the switch-in.
fn split<I: WaitIdentity>(
    wait: &Wait<I>,
    woken_ns: u64,
    switched_in_ns: u64,
    charge: &mut impl FnMut(I, u64),
) {
    let from = wait.credited_ns;
    let woken = if woken_ns == 0 {
        switched_in_ns
    } else {
        woken_ns.clamp(from, switched_in_ns.max(from))
    };
    if woken > from {
        charge(wait.identity.clone(), scaled(woken - from, wait.scale));
    }
    if switched_in_ns > woken {
        charge(
            wait.identity.with_kind(SampleKind::RunQueue),
            scaled(switched_in_ns - woken, wait.scale),
        );
    }
}

fn scaled(nanos: u64, scale: f64) -> u64 {
    if scale == 1.0 {
        nanos
    } else {
        (nanos as f64 * scale).round() as u64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Clone, Debug, PartialEq)]
    struct Id(u32, SampleKind);

    impl WaitIdentity for Id {
        fn pid(&self) -> u32 {
            self.0
        }
        fn tid(&self) -> u32 {
            self.0
        }
        fn with_kind(&self, kind: SampleKind) -> Self {
            Id(self.0, kind)
        }
    }

    fn wait(credited_ns: u64) -> Wait<Id> {
        Wait {
            identity: Id(1, SampleKind::OffCpuSleeping),
            began_ns: credited_ns,
            credited_ns,
            scale: 1.0,
            unconfirmed: 0,
        }
    }

    fn charges(wait: &Wait<Id>, woken: u64, switched_in: u64) -> Vec<(SampleKind, u64)> {
        let mut charged = Vec::new();
        split(wait, woken, switched_in, &mut |id: Id, ns| {
            charged.push((id.1, ns))
        });
        charged
    }

    #[test]
    fn a_wait_is_split_at_its_wake_up() {
        assert_eq!(
            charges(&wait(100), 700, 1000),
            [
                (SampleKind::OffCpuSleeping, 600),
                (SampleKind::RunQueue, 300)
            ]
        );
        // Never woken as far as we know: all of it is the wait's own.
        assert_eq!(
            charges(&wait(100), 0, 1000),
            [(SampleKind::OffCpuSleeping, 900)]
        );
    }

    #[test]
    fn what_was_credited_is_not_charged_again() {
        // Credited up to 800 as it went, woken at 700: only the run queue
        // after the last credit is left.
        assert_eq!(
            charges(&wait(800), 700, 1000),
            [(SampleKind::RunQueue, 200)]
        );
        assert_eq!(
            charges(&wait(400), 700, 1000),
            [
                (SampleKind::OffCpuSleeping, 300),
                (SampleKind::RunQueue, 300)
            ]
        );
        assert!(charges(&wait(1000), 700, 1000).is_empty());
    }

    #[test]
    fn a_preempted_thread_waits_in_the_run_queue_from_the_start() {
        let preempted = Wait {
            identity: Id(1, SampleKind::RunQueue),
            ..wait(100)
        };
        assert_eq!(charges(&preempted, 0, 400), [(SampleKind::RunQueue, 300)]);
    }
}
