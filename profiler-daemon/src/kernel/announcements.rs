//! New processes, as the kernel announces them: the sampling programs put
//! a process's id in a ring buffer at its first sample (and again after
//! an exec), and the fork tracepoint passes on where each process forked
//! without exec comes from (its parent and the layout of the program they
//! share), so that the process table can give a child its parent's
//! mappings without reading procfs.
//!
//! Owns the two ring buffers and the book of lineages; it must not read
//! procfs or decide what a lineage means for a process's mappings.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex},
};

use aya::maps::{MapData, RingBuf};
use profiler_common::ForkLineage;
use rustc_hash::FxHashMap as HashMap;

/// What the kernel knows of where a new process comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lineage {
    /// Nothing: the fork tracepoint is off (procfs can tell).
    Unknown,
    /// Not forked without exec since the daemon started (it exec'd, or was
    /// forked before, or its record was pushed out): its own mappings.
    OwnProgram,
    /// Forked by a process, without exec since, with the program laid out
    /// as [`ForkLineage`] says.
    Forked(ForkLineage),
}

/// The fork tracepoint's records of where processes come from, read from
/// its ring buffer into a book of the processes forked without exec since.
/// Shared by the process watcher and the unwinder (either may meet a new
/// process first).
pub struct ForkLineages(Mutex<(RingBuf<MapData>, LineageBook)>);

impl ForkLineages {
    pub fn new(ring: RingBuf<MapData>) -> Self {
        Self(Mutex::new((ring, LineageBook::new(LINEAGES_KEPT))))
    }

    /// Where process `pid` comes from, every fork and exec written so far
    /// read first (so that an exec is never missed behind its fork).
    pub fn of(&self, pid: u32) -> Lineage {
        let mut guard = crate::lock(&self.0);
        let (ring, book) = &mut *guard;
        read_into(ring, book);
        book.of(pid)
    }

    /// The fork lineage `pid` had before its last exec, when it exec'd
    /// lately (one of the last [`EXECS_KEPT`]) after a fork recorded: a
    /// sample it took before the exec, unwound after it, ran its parent's
    /// program; or, forked without exec since, the lineage it has. Then
    /// its parent's own lineage, and so on, while each ran
    /// that same program (a subshell's child: the subshell never mapped
    /// the program it runs, the shell that forked it did), at most
    /// [`ANCESTRY_DEPTH`]. Every fork and exec written so far is read first.
    pub fn ancestry(&self, pid: u32) -> Vec<ForkLineage> {
        let mut guard = crate::lock(&self.0);
        let (ring, book) = &mut *guard;
        read_into(ring, book);
        book.ancestry(pid)
    }

    /// Reads every fork and exec written so far (at every pass of the
    /// watcher, so that the ring does not fill while no new process is
    /// sampled).
    pub fn catch_up(&self) {
        let mut guard = crate::lock(&self.0);
        let (ring, book) = &mut *guard;
        read_into(ring, book);
    }
}

fn read_into(ring: &mut RingBuf<MapData>, book: &mut LineageBook) {
    while let Some(item) = ring.next() {
        if let Some(record) = super::plain_record(&item) {
            book.note(record);
        }
    }
}

/// Processes forked without exec kept in the book; the oldest go first
/// (their children's mappings are then read from procfs).
const LINEAGES_KEPT: usize = 1 << 15;

/// The most forks followed back from a process to the one that mapped its
/// program.
const ANCESTRY_DEPTH: usize = 8;

/// Processes that exec'd after a fork recorded whose lineage is kept (the
/// latest execs): their samples from before the exec are unwound at the
/// pass after it, well within this many execs on any machine.
const EXECS_KEPT: usize = 4096;

/// The processes forked without exec, by process id, from the fork and exec
/// records in the order the kernel wrote them; at most `capacity`, the
/// least recently forked let go of first. Also the lineages of the last
/// [`EXECS_KEPT`] forked processes that exec'd.
#[derive(Debug)]
pub(crate) struct LineageBook {
    forked: HashMap<u32, (ForkLineage, u64)>,
    /// (process, when it was noted), oldest first; an entry whose time no
    /// longer matches its process's was superseded.
    order: VecDeque<(u32, u64)>,
    noted: u64,
    capacity: usize,
    /// Lineages left by an exec, with when they were noted; the oldest
    /// first in `execs` (a place whose time no longer matches was
    /// superseded by a later fork and exec of the same process id).
    exec_left: HashMap<u32, (ForkLineage, u64)>,
    execs: VecDeque<(u32, u64)>,
}

impl LineageBook {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            forked: HashMap::default(),
            order: VecDeque::new(),
            noted: 0,
            capacity: capacity.max(1),
            exec_left: HashMap::default(),
            execs: VecDeque::new(),
        }
    }

    /// Takes in one record: a fork (the child is now known forked) or an
    /// exec (`parent` 0: its program is its own).
    pub(crate) fn note(&mut self, record: ForkLineage) {
        self.noted += 1;
        if record.parent == 0 {
            if let Some((lineage, _)) = self.forked.remove(&record.child) {
                self.keep_exec_left(lineage);
            }
            return;
        }
        // A process id used again: what its previous process left is not
        // its own.
        self.exec_left.remove(&record.child);
        self.forked.insert(record.child, (record, self.noted));
        self.order.push_back((record.child, self.noted));
        while self.forked.len() > self.capacity
            && let Some((pid, noted)) = self.order.pop_front()
        {
            if self.forked.get(&pid).is_some_and(|&(_, at)| at == noted) {
                self.forked.remove(&pid);
            }
        }
        // Places superseded by a later fork of a reused id, or left by an
        // exec, are dropped once they are as many as the live ones.
        if self.order.len() > 2 * self.capacity {
            let forked = &self.forked;
            self.order
                .retain(|(pid, noted)| forked.get(pid).is_some_and(|(_, at)| at == noted));
        }
    }

    pub(crate) fn of(&self, pid: u32) -> Lineage {
        match self.forked.get(&pid) {
            Some(&(lineage, _)) => Lineage::Forked(lineage),
            None => Lineage::OwnProgram,
        }
    }

    pub(crate) fn ancestry(&self, pid: u32) -> Vec<ForkLineage> {
        let Some(&(first, _)) = self.exec_left.get(&pid).or_else(|| self.forked.get(&pid)) else {
            return Vec::new();
        };
        let mut ancestry = vec![first];
        while ancestry.len() < ANCESTRY_DEPTH {
            let last = ancestry[ancestry.len() - 1];
            let parent = self
                .forked
                .get(&last.parent)
                .or_else(|| self.exec_left.get(&last.parent));
            match parent {
                Some(&(up, _)) if up.start_code == last.start_code && up.parent != last.child => {
                    ancestry.push(up);
                }
                _ => break,
            }
        }
        ancestry
    }

    fn keep_exec_left(&mut self, lineage: ForkLineage) {
        let pid = lineage.child;
        self.exec_left.insert(pid, (lineage, self.noted));
        self.execs.push_back((pid, self.noted));
        while self.exec_left.len() > EXECS_KEPT
            && let Some((pid, noted)) = self.execs.pop_front()
        {
            if self.exec_left.get(&pid).is_some_and(|&(_, at)| at == noted) {
                self.exec_left.remove(&pid);
            }
        }
        if self.execs.len() > 2 * EXECS_KEPT {
            let left = &self.exec_left;
            self.execs
                .retain(|(pid, noted)| left.get(pid).is_some_and(|(_, at)| at == noted));
        }
    }
}

/// The kernel's announcements of new processes.
pub struct ProcessAnnouncements {
    ring: RingBuf<MapData>,
    /// The fork tracepoint's records, when it is attached.
    lineages: Option<Arc<ForkLineages>>,
}

impl std::os::fd::AsFd for ProcessAnnouncements {
    /// The announcements' ring buffer's file: readable once an
    /// announcement wakes its reader (the first after each read).
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.ring)
    }
}

impl ProcessAnnouncements {
    pub fn new(ring: RingBuf<MapData>, lineages: Option<Arc<ForkLineages>>) -> Self {
        Self { ring, lineages }
    }

    /// Appends the processes announced since the last call to `into` (and
    /// reads the forks and execs written meanwhile).
    pub fn take(&mut self, into: &mut Vec<u32>) {
        if let Some(lineages) = &self.lineages {
            lineages.catch_up();
        }
        while let Some(item) = self.ring.next() {
            if let Ok(bytes) = <[u8; 4]>::try_from(&item[..4.min(item.len())]) {
                into.push(u32::from_ne_bytes(bytes));
            }
        }
    }

    /// Where process `pid` comes from, as the fork tracepoint recorded it.
    pub fn lineage_of(&self, pid: u32) -> Lineage {
        self.lineages
            .as_ref()
            .map_or(Lineage::Unknown, |lineages| lineages.of(pid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fork(child: u32, parent: u32) -> ForkLineage {
        ForkLineage {
            child,
            parent,
            start_code: u64::from(parent) << 12,
            ..ForkLineage::default()
        }
    }

    fn exec(pid: u32) -> ForkLineage {
        ForkLineage {
            child: pid,
            ..ForkLineage::default()
        }
    }

    #[test]
    fn a_fork_is_known_until_the_child_execs() {
        let mut book = LineageBook::new(8);
        assert_eq!(book.of(10), Lineage::OwnProgram);
        book.note(fork(10, 1));
        assert_eq!(book.of(10), Lineage::Forked(fork(10, 1)));
        book.note(exec(10));
        assert_eq!(book.of(10), Lineage::OwnProgram);
        // What it ran before the exec is still known.
        assert_eq!(book.ancestry(10), [fork(10, 1)]);
        book.note(exec(10));
        assert_eq!(book.ancestry(10), [fork(10, 1)]);
        // An exec of a process never seen forked changes nothing.
        book.note(exec(11));
        assert_eq!(book.of(11), Lineage::OwnProgram);
        assert_eq!(book.ancestry(11), []);
        // A process id used again starts afresh.
        book.note(fork(10, 2));
        assert_eq!(book.ancestry(10), [fork(10, 2)]);
        book.note(exec(10));
        assert_eq!(book.ancestry(10), [fork(10, 2)]);
    }

    #[test]
    fn a_subshell_s_child_goes_back_to_the_shell_that_mapped_the_program() {
        let mut book = LineageBook::new(8);
        // Shell 1 forks subshell 2, which forks 3, which execs: 3 ran
        // shell 1's program (2 never mapped it). 1's own fork is another
        // program's (a different layout).
        let subshell = |child: u32, parent: u32| ForkLineage {
            start_code: 1 << 12,
            ..fork(child, parent)
        };
        book.note(fork(1, 99));
        book.note(subshell(2, 1));
        book.note(subshell(3, 2));
        book.note(exec(3));
        assert_eq!(book.ancestry(3), [subshell(3, 2), subshell(2, 1)]);
    }

    #[test]
    fn a_reused_process_id_takes_its_latest_fork() {
        let mut book = LineageBook::new(8);
        book.note(fork(10, 1));
        book.note(fork(10, 2));
        assert_eq!(book.of(10), Lineage::Forked(fork(10, 2)));
    }

    #[test]
    fn the_least_recently_forked_go_first_when_full() {
        let mut book = LineageBook::new(3);
        for child in 10..15 {
            book.note(fork(child, 1));
        }
        let known: Vec<u32> = (10..15)
            .filter(|&pid| matches!(book.of(pid), Lineage::Forked(_)))
            .collect();
        assert_eq!(known, [12, 13, 14]);
        // A process forked again is the most recent, whatever its first
        // fork's place, and exec'd ones leave no stale place behind.
        book.note(fork(12, 2));
        book.note(exec(13));
        book.note(fork(20, 1));
        book.note(fork(21, 1));
        let known: Vec<u32> = [12, 13, 14, 20, 21]
            .into_iter()
            .filter(|&pid| matches!(book.of(pid), Lineage::Forked(_)))
            .collect();
        assert_eq!(known, [12, 20, 21]);
    }

    #[test]
    fn forks_followed_by_execs_leave_no_trace() {
        let mut book = LineageBook::new(4);
        book.note(fork(2, 1));
        for child in 10..10_000 {
            book.note(fork(child, 2));
            book.note(exec(child));
        }
        assert!(book.order.len() <= 8, "{} places kept", book.order.len());
        assert_eq!(book.forked.len(), 1);
        assert!(matches!(book.of(2), Lineage::Forked(_)));
        // Only the last execs' lineages are kept.
        assert_eq!(book.exec_left.len(), EXECS_KEPT);
        assert!(book.execs.len() <= 2 * EXECS_KEPT + 1);
        assert_eq!(book.ancestry(9_999), [fork(9_999, 2)]);
        assert_eq!(book.ancestry(10), []);
        // Forked without exec: its own lineage, then its parent's.
        assert_eq!(book.ancestry(2), [fork(2, 1)]);
    }
}
