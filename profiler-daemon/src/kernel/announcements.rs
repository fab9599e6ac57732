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

    /// Holds at most `bytes` (0: its own bound only); see
    /// [`LineageBook::within`]. The most bytes it holds then.
    pub fn within(&self, bytes: u64) -> u64 {
        let mut guard = crate::lock(&self.0);
        guard.1.within(bytes);
        guard.1.bound_bytes()
    }

    pub fn stats(&self) -> LineageStats {
        crate::lock(&self.0).1.stats()
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
    forked: OldestFirst,
    /// Lineages left by an exec.
    exec_left: OldestFirst,
}

/// What a [`LineageBook`] holds, its bounds, and what it let go of since
/// start (the oldest first).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LineageStats {
    pub forked: u64,
    pub forked_limit: u64,
    pub forked_evicted: u64,
    pub exec_left: u64,
    pub exec_left_limit: u64,
    pub exec_left_evicted: u64,
    /// Bytes held, roughly.
    pub bytes: u64,
}

impl LineageBook {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            forked: OldestFirst::new(capacity),
            exec_left: OldestFirst::new(EXECS_KEPT),
        }
    }

    /// Takes in one record: a fork (the child is now known forked) or an
    /// exec (`parent` 0: its program is its own).
    pub(crate) fn note(&mut self, record: ForkLineage) {
        if record.parent == 0 {
            if let Some(lineage) = self.forked.remove(record.child) {
                self.exec_left.insert(lineage);
            }
            return;
        }
        // A process id used again: what its previous process left is not
        // its own.
        self.exec_left.remove(record.child);
        self.forked.insert(record);
    }

    pub(crate) fn of(&self, pid: u32) -> Lineage {
        match self.forked.get(pid) {
            Some(&lineage) => Lineage::Forked(lineage),
            None => Lineage::OwnProgram,
        }
    }

    pub(crate) fn ancestry(&self, pid: u32) -> Vec<ForkLineage> {
        let Some(&first) = self.exec_left.get(pid).or_else(|| self.forked.get(pid)) else {
            return Vec::new();
        };
        let mut ancestry = vec![first];
        while ancestry.len() < ANCESTRY_DEPTH {
            let last = ancestry[ancestry.len() - 1];
            let parent = self
                .forked
                .get(last.parent)
                .or_else(|| self.exec_left.get(last.parent));
            match parent {
                Some(&up) if up.start_code == last.start_code && up.parent != last.child => {
                    ancestry.push(up);
                }
                _ => break,
            }
        }
        ancestry
    }

    /// Holds at most what `bytes` (0: no bound) allow of forked processes,
    /// within the capacity it was made with (the oldest let go of first).
    pub(crate) fn within(&mut self, bytes: u64) {
        let fixed = self.exec_left.capacity as u64 * OldestFirst::BYTES_PER_ENTRY;
        if bytes > 0 {
            let forked = (bytes.saturating_sub(fixed) / OldestFirst::BYTES_PER_ENTRY) as usize;
            self.forked.shrink_to(forked.max(FEWEST_LINEAGES));
        }
    }

    /// The most bytes it holds (both bounds full).
    pub(crate) fn bound_bytes(&self) -> u64 {
        (self.forked.capacity + self.exec_left.capacity) as u64 * OldestFirst::BYTES_PER_ENTRY
    }

    pub(crate) fn stats(&self) -> LineageStats {
        LineageStats {
            forked: self.forked.by_pid.len() as u64,
            forked_limit: self.forked.capacity as u64,
            forked_evicted: self.forked.evicted,
            exec_left: self.exec_left.by_pid.len() as u64,
            exec_left_limit: self.exec_left.capacity as u64,
            exec_left_evicted: self.exec_left.evicted,
            bytes: self.forked.bytes() + self.exec_left.bytes(),
        }
    }
}

/// The fewest forked processes a book holds, whatever its bytes.
const FEWEST_LINEAGES: usize = 1024;

/// Lineages by their process id, at most `capacity`: the one put in least
/// recently is let go of first (evicted).
#[derive(Debug)]
struct OldestFirst {
    by_pid: HashMap<u32, (ForkLineage, u64)>,
    /// (process, when it was put in), oldest first; a place whose time no
    /// longer matches its process's was superseded (put in again, or taken
    /// out), and is dropped once such places are as many as the live ones.
    order: VecDeque<(u32, u64)>,
    put: u64,
    capacity: usize,
    evicted: u64,
}

impl OldestFirst {
    /// Bytes an entry takes, roughly: its slot in the map (at the map's
    /// load factor) and two places in the order.
    const BYTES_PER_ENTRY: u64 =
        (std::mem::size_of::<(u32, (ForkLineage, u64))>() * 8 / 7 + 1 + 2 * 16) as u64;

    fn new(capacity: usize) -> Self {
        Self {
            by_pid: HashMap::default(),
            order: VecDeque::new(),
            put: 0,
            capacity: capacity.max(1),
            evicted: 0,
        }
    }

    fn get(&self, pid: u32) -> Option<&ForkLineage> {
        self.by_pid.get(&pid).map(|(lineage, _)| lineage)
    }

    /// Puts in the lineage of its `child`, the newest (replacing one of
    /// the same process).
    fn insert(&mut self, lineage: ForkLineage) {
        self.put += 1;
        self.by_pid.insert(lineage.child, (lineage, self.put));
        self.order.push_back((lineage.child, self.put));
        self.keep_within();
    }

    fn remove(&mut self, pid: u32) -> Option<ForkLineage> {
        self.by_pid.remove(&pid).map(|(lineage, _)| lineage)
    }

    fn shrink_to(&mut self, capacity: usize) {
        self.capacity = capacity.max(1).min(self.capacity);
        self.keep_within();
    }

    fn keep_within(&mut self) {
        while self.by_pid.len() > self.capacity
            && let Some((pid, put)) = self.order.pop_front()
        {
            if self.by_pid.get(&pid).is_some_and(|&(_, at)| at == put) {
                self.by_pid.remove(&pid);
                self.evicted += 1;
            }
        }
        if self.order.len() > 2 * self.capacity {
            let by_pid = &self.by_pid;
            self.order
                .retain(|(pid, put)| by_pid.get(pid).is_some_and(|(_, at)| at == put));
        }
    }

    fn bytes(&self) -> u64 {
        (self.by_pid.capacity() * (std::mem::size_of::<(u32, (ForkLineage, u64))>() + 1)
            + self.order.capacity() * 16) as u64
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
        // 10, 11 and 14 let go of for room (13 left by its exec, 12's
        // first place superseded: neither counted).
        assert_eq!(book.stats().forked_evicted, 3);
    }

    #[test]
    fn a_book_within_bytes_holds_fewer_forks() {
        let mut book = LineageBook::new(1 << 15);
        let whole = book.bound_bytes();
        book.within(whole / 4);
        let limit = book.stats().forked_limit as usize;
        assert!((FEWEST_LINEAGES..(1 << 15) / 4).contains(&limit), "{limit}");
        assert!(book.bound_bytes() <= whole / 4);
        for child in 0..(1 << 15) {
            book.note(fork(child + 10, 1));
        }
        assert_eq!(book.stats().forked, limit as u64);
        // More bytes never grow it past what it was made with.
        book.within(u64::MAX / 2);
        assert_eq!(book.stats().forked_limit as usize, limit);
    }

    #[test]
    fn forks_followed_by_execs_leave_no_trace() {
        let mut book = LineageBook::new(4);
        book.note(fork(2, 1));
        for child in 10..10_000 {
            book.note(fork(child, 2));
            book.note(exec(child));
        }
        assert!(
            book.forked.order.len() <= 8,
            "{} places kept",
            book.forked.order.len()
        );
        assert_eq!(book.forked.by_pid.len(), 1);
        assert!(matches!(book.of(2), Lineage::Forked(_)));
        // Only the last execs' lineages are kept.
        assert_eq!(book.exec_left.by_pid.len(), EXECS_KEPT);
        assert!(book.exec_left.order.len() <= 2 * EXECS_KEPT + 1);
        let stats = book.stats();
        assert_eq!(
            (stats.forked, stats.forked_evicted, stats.exec_left),
            (1, 0, EXECS_KEPT as u64)
        );
        assert_eq!(stats.exec_left_evicted, 9_990 - EXECS_KEPT as u64);
        assert!(stats.bytes > 0 && stats.bytes <= 2 * book.bound_bytes());
        assert_eq!(book.ancestry(9_999), [fork(9_999, 2)]);
        assert_eq!(book.ancestry(10), []);
        // Forked without exec: its own lineage, then its parent's.
        assert_eq!(book.ancestry(2), [fork(2, 1)]);
    }
}
