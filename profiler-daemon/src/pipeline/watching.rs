//! The process watcher: records each process the kernel announces (at its
//! first sample, and again after an exec) while it is still alive, so that
//! it can be symbolized after it exits, and looks at it once more a moment
//! later in case its loader was still mapping libraries.
//!
//! When the daemon copies stacks, the watcher's pass runs on the drain
//! thread right after each unwinding pass: most announced processes were
//! just recorded there (by their first stack copy), and cost the watcher
//! nothing more, nor a thread's wake-ups; nor is a second look needed, as
//! the unwinder reads a live process's mappings again when a stack leaves
//! them. Without stack copies it has a thread of its own that sleeps until
//! an announcement, a second look due or a second's end (the kernel's
//! records of memory maps are read at least that often), and looks twice.
//!
//! This module owns the announcements and the second looks due; it must not
//! unwind or symbolize.

use std::{
    collections::VecDeque,
    sync::Mutex,
    time::{Duration, Instant},
};

use tracing::{debug, error};

use super::wakeups::{Ring, Wakeups};
use crate::{kernel::announcements::ProcessAnnouncements, lock, symbols::processes::ProcessTable};

/// A process is announced at its first sample, which can come while the
/// dynamic loader still maps its libraries: it is read once more this
/// much later, so that a process that exits before the next drain is still
/// symbolized whole.
const SECOND_LOOK: Duration = Duration::from_millis(250);

/// The watcher on its own thread reads the kernel's records of memory maps
/// at least this often, announcements or not (their rings would fill).
const LONGEST_SLEEP: Duration = Duration::from_secs(1);

/// Ends the watcher's own thread (see [`ProcessWatcher::run`]).
pub(super) struct StopWatching;

/// What a pass of the watcher found announced.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Announced {
    pub processes: usize,
    /// Those not forked from a process known (without exec since): their
    /// mappings are their own, read from procfs while they live.
    pub own_programs: usize,
}

/// Records the processes the kernel announces.
pub struct ProcessWatcher {
    announcements: ProcessAnnouncements,
    /// Whether processes read from procfs are read again a moment later.
    looks_twice: bool,
    /// Processes to read again, and when, soonest first.
    second_looks: VecDeque<(Instant, u32)>,
    announced: Vec<u32>,
}

impl ProcessWatcher {
    /// A watcher beside the unwinder, which reads mappings again as
    /// stacks need.
    pub fn beside_unwinder(announcements: ProcessAnnouncements) -> Self {
        Self {
            announcements,
            looks_twice: false,
            second_looks: VecDeque::new(),
            announced: Vec::new(),
        }
    }

    /// A watcher on its own (no stack copies): it looks twice.
    pub fn alone(announcements: ProcessAnnouncements) -> Self {
        Self {
            looks_twice: true,
            ..Self::beside_unwinder(announcements)
        }
    }

    /// The announcements' ring buffer, readable once an announcement
    /// wakes its reader: what the drain thread sleeps on besides its
    /// schedule.
    pub fn announcements(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.announcements)
    }

    /// Records the processes announced since the last pass, and reads again
    /// those due a second look. A process recorded at `recorded_since` or
    /// later (by the unwinding pass that just ran, from the same sample's
    /// stack copy) is not recorded again: one that took its parent's
    /// mappings needs nothing more, one read from procfs only its second
    /// look. Says how many processes were announced, and how many of those
    /// run a program of their own.
    pub fn pass(&mut self, processes: &Mutex<ProcessTable>, recorded_since: Instant) -> Announced {
        self.announcements.take(&mut self.announced);
        // First, so that a process gone before procfs is read is recorded
        // from them (and so that their rings do not fill).
        lock(processes).read_mapping_records();
        let mut announced = Announced {
            processes: self.announced.len(),
            own_programs: 0,
        };
        for pid in self.announced.drain(..) {
            let mut table = lock(processes);
            match table.recorded_since_adopted(pid, recorded_since) {
                Some(true) => continue,
                Some(false) => announced.own_programs += 1,
                None => {
                    // A child forked without exec has its parent's
                    // mappings, and no loader at work: nothing to look at
                    // again.
                    if table.adopt_forked(pid, self.announcements.lineage_of(pid)) {
                        continue;
                    }
                    announced.own_programs += 1;
                    let recorded = table.record(pid);
                    drop(table);
                    if let Err(err) = recorded {
                        debug!(
                            pid,
                            "a new process was gone before it could be recorded: {err}"
                        );
                        continue;
                    }
                }
            }
            if self.looks_twice {
                self.second_looks
                    .push_back((Instant::now() + SECOND_LOOK, pid));
            }
        }
        while let Some(&(due, pid)) = self.second_looks.front()
            && due <= Instant::now()
        {
            self.second_looks.pop_front();
            // Gone by now: its first record stays.
            let _ = lock(processes).record(pid);
        }
        announced
    }

    /// The watcher on a thread of its own (when no unwinding pass runs):
    /// sleeps on `wakes` until an announcement, a second look due or
    /// [`LONGEST_SLEEP`], and ends at a [`StopWatching`] (or when its
    /// sender is gone).
    pub(super) fn run(mut self, processes: &Mutex<ProcessTable>, mut wakes: Wakeups<StopWatching>) {
        // After a wake-up, announcements gather this long before the next:
        // a burst of new processes (a build, a server's workers) costs a
        // wake-up per batch, not per process, and a lone one is read at once.
        const GATHER: Duration = Duration::from_millis(50);
        if let Err(err) = wakes.watch(self.announcements(), Ring::Announcements) {
            error!("cannot wait for process announcements: {err}");
            return;
        }
        loop {
            let quiet_end = Instant::now() + LONGEST_SLEEP;
            let due = self.second_looks.front().map(|&(due, _)| due);
            let woken = wakes.wait_until(due.map_or(quiet_end, |due| due.min(quiet_end)));
            if woken.disconnected || !woken.messages.is_empty() {
                return;
            }
            if self.pass(processes, Instant::now()).processes > 0 {
                std::thread::sleep(GATHER);
            }
        }
    }
}
