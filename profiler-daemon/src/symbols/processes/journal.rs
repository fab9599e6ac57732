//! The memory maps of processes as the kernel's records made them
//! ([`crate::kernel::mapping_records`]), for the processes gone before
//! `/proc/PID/maps` could be read: a program that lives a millisecond.
//! Each process's code mappings since its last exec (and those of the few
//! programs it ran before), its command as the exec named it.
//!
//! Owns the journal and its bound (mappings in all, the processes written
//! to least recently let go of first); it must not open files or read
//! procfs (the process table does, from what it recalls here).

use std::{collections::VecDeque, sync::Arc};

use rustc_hash::FxHashMap as HashMap;

use crate::kernel::mapping_records::MappingRecord;

/// Most code mappings held in all (about 100 bytes each with their
/// paths): a few thousand short-lived programs of a storm; fewer when a
/// quarter of the process table's share of memory holds fewer.
pub(super) const JOURNAL_MAPPINGS: usize = 1 << 15;
const FEWEST_MAPPINGS: usize = 1 << 10;
/// What a mapping costs with its path, for the limit.
const MAPPING_BYTES: u64 = 112;
/// Programs kept per process: the current one and those it ran before
/// (samples taken before an exec are unwound after it, perhaps several
/// execs later).
const PROGRAMS_KEPT: usize = 16;

/// A code mapping as the kernel recorded it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct JournalMapping {
    pub start: u64,
    pub end: u64,
    pub file_offset: u64,
    pub device: u64,
    pub inode: u64,
    pub path: Arc<str>,
}

/// What the journal holds of one process.
#[derive(Debug, Default)]
pub(super) struct JournalEntry {
    /// Its command, from its last exec the daemon saw.
    pub command: Option<Arc<str>>,
    /// Its programs' code mappings, the current one last.
    pub programs: VecDeque<Vec<JournalMapping>>,
    /// When it was last written to (the journal's own count).
    written: u64,
}

/// Counts for the status report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct JournalStats {
    /// Processes and code mappings held, and the most mappings held.
    pub processes: u64,
    pub mappings: u64,
    pub limit: u64,
    /// Processes let go of to stay within the limit.
    pub evicted: u64,
    /// Processes recorded from the journal (gone before procfs was read).
    pub recalled: u64,
    /// Records the kernel dropped (its rings full).
    pub lost: u64,
    /// Bytes held, roughly.
    pub bytes: u64,
}

/// The memory maps the kernel's records made, by process.
#[derive(Debug)]
pub(super) struct MapJournal {
    processes: HashMap<u32, JournalEntry>,
    /// Most code mappings held.
    limit: usize,
    /// Processes in the order they were written to (a process written to
    /// again is queued again; its older places are skipped).
    order: VecDeque<(u64, u32)>,
    writes: u64,
    mappings: usize,
    path_bytes: usize,
    evicted: u64,
    recalled: u64,
}

impl Default for MapJournal {
    fn default() -> Self {
        Self {
            processes: HashMap::default(),
            limit: JOURNAL_MAPPINGS,
            order: VecDeque::new(),
            writes: 0,
            mappings: 0,
            path_bytes: 0,
            evicted: 0,
            recalled: 0,
        }
    }
}

impl MapJournal {
    /// Holds at most a quarter of `table_bytes` (the process table's
    /// limit; 0: none), within [`JOURNAL_MAPPINGS`].
    pub fn within(&mut self, table_bytes: u64) {
        if table_bytes > 0 {
            self.limit = ((table_bytes / 4 / MAPPING_BYTES) as usize)
                .clamp(FEWEST_MAPPINGS, JOURNAL_MAPPINGS);
        }
        self.enforce_limit();
    }

    /// Writes `records` (in the kernel's order) into the journal.
    pub fn note(&mut self, records: impl IntoIterator<Item = MappingRecord>) {
        for record in records {
            match record {
                MappingRecord::Exec { pid, command, .. } => {
                    let entry = self.written(pid);
                    entry.command = Some(command);
                    entry.programs.push_back(Vec::new());
                    if entry.programs.len() > PROGRAMS_KEPT
                        && let Some(dropped) = entry.programs.pop_front()
                    {
                        self.forget(&dropped);
                    }
                }
                MappingRecord::Mapped {
                    pid,
                    start,
                    end,
                    file_offset,
                    device,
                    inode,
                    path,
                    ..
                } => {
                    let entry = self.written(pid);
                    if entry.programs.is_empty() {
                        entry.programs.push_back(Vec::new());
                    }
                    let program = entry.programs.back_mut().expect("one program at least");
                    // A mapping made over others (MAP_FIXED, a library
                    // loaded where one was unloaded) replaces them.
                    let mut replaced = Vec::new();
                    program.retain(|mapping| {
                        let overlaps = mapping.start < end && start < mapping.end;
                        if overlaps {
                            replaced.push(mapping.clone());
                        }
                        !overlaps
                    });
                    let added = JournalMapping {
                        start,
                        end,
                        file_offset,
                        device,
                        inode,
                        path,
                    };
                    let path_bytes = added.path.len();
                    program.push(added);
                    self.mappings += 1;
                    self.path_bytes += path_bytes;
                    self.forget(&replaced);
                }
            }
        }
        self.enforce_limit();
    }

    /// What the journal holds of `pid`, counted as recalled.
    pub fn recall(&mut self, pid: u32) -> Option<&JournalEntry> {
        let entry = self
            .processes
            .get(&pid)
            .filter(|entry| entry.programs.iter().any(|program| !program.is_empty()))?;
        self.recalled += 1;
        Some(entry)
    }

    /// What the journal holds of `pid`, not counted.
    pub fn held(&self, pid: u32) -> Option<&JournalEntry> {
        self.processes.get(&pid)
    }

    pub fn stats(&self) -> JournalStats {
        JournalStats {
            processes: self.processes.len() as u64,
            mappings: self.mappings as u64,
            limit: self.limit as u64,
            evicted: self.evicted,
            recalled: self.recalled,
            lost: 0,
            bytes: self.bytes(),
        }
    }

    /// Bytes held, roughly: each mapping and path, each process, the
    /// order kept.
    pub fn bytes(&self) -> u64 {
        (self.mappings * std::mem::size_of::<JournalMapping>()
            + self.path_bytes
            + self.processes.len() * 96
            + self.order.len() * 16) as u64
    }

    /// The entry of `pid`, marked written to now.
    fn written(&mut self, pid: u32) -> &mut JournalEntry {
        self.writes += 1;
        self.order.push_back((self.writes, pid));
        let entry = self.processes.entry(pid).or_default();
        entry.written = self.writes;
        entry
    }

    fn forget(&mut self, mappings: &[JournalMapping]) {
        self.mappings -= mappings.len();
        self.path_bytes -= mappings
            .iter()
            .map(|mapping| mapping.path.len())
            .sum::<usize>();
    }

    /// Lets go of the processes written to least recently until the
    /// mappings (and the processes, whose execs alone make entries) are
    /// within the limit; keeps the order's
    /// stale places within a few times the processes.
    fn enforce_limit(&mut self) {
        while (self.mappings > self.limit || self.processes.len() > self.limit)
            && let Some((written, pid)) = self.order.pop_front()
        {
            if self
                .processes
                .get(&pid)
                .is_some_and(|entry| entry.written == written)
                && let Some(entry) = self.processes.remove(&pid)
            {
                for program in &entry.programs {
                    self.forget(program);
                }
                self.evicted += 1;
            }
        }
        if self.order.len() > 4 * self.processes.len() + 1024 {
            let processes = &self.processes;
            self.order.retain(|&(written, pid)| {
                processes
                    .get(&pid)
                    .is_some_and(|entry| entry.written == written)
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapped(pid: u32, start: u64, path: &str) -> MappingRecord {
        MappingRecord::Mapped {
            pid,
            time_ns: 0,
            start,
            end: start + 0x1000,
            file_offset: 0,
            device: 1,
            inode: start,
            path: path.into(),
        }
    }

    fn exec(pid: u32, command: &str) -> MappingRecord {
        MappingRecord::Exec {
            pid,
            time_ns: 0,
            command: command.into(),
        }
    }

    #[test]
    fn an_exec_starts_a_program_and_keeps_the_one_before() {
        let mut journal = MapJournal::default();
        journal.note([
            exec(7, "sh"),
            mapped(7, 0x1000, "/bin/sh"),
            exec(7, "true"),
            mapped(7, 0x5000, "/bin/true"),
            mapped(7, 0x9000, "/lib/libc.so.6"),
        ]);
        let entry = journal.recall(7).expect("held");
        assert_eq!(entry.command.as_deref(), Some("true"));
        let programs: Vec<Vec<&str>> = entry
            .programs
            .iter()
            .map(|program| program.iter().map(|mapping| &*mapping.path).collect())
            .collect();
        assert_eq!(
            programs,
            [vec!["/bin/sh"], vec!["/bin/true", "/lib/libc.so.6"]]
        );
        assert_eq!(journal.stats().recalled, 1);
        assert!(journal.recall(8).is_none());
    }

    #[test]
    fn a_mapping_made_over_another_replaces_it() {
        let mut journal = MapJournal::default();
        journal.note([
            mapped(7, 0x1000, "/lib/old.so"),
            mapped(7, 0x1800, "/lib/new.so"),
        ]);
        let entry = journal.recall(7).expect("held");
        assert_eq!(entry.programs.len(), 1);
        assert_eq!(&*entry.programs[0][0].path, "/lib/new.so");
        assert_eq!(journal.stats().mappings, 1);
    }

    #[test]
    fn the_processes_written_to_least_recently_go_first() {
        let mut journal = MapJournal::default();
        let per_process = 64;
        let processes = (JOURNAL_MAPPINGS / per_process + 10) as u32;
        for pid in 1..=processes {
            journal.note([exec(pid, "storm")]);
            journal.note(
                (0..per_process as u64).map(|at| mapped(pid, (at + 1) * 0x10000, "/bin/storm")),
            );
            // The first process is written to again all along.
            journal.note([mapped(1, 0x1000, "/lib/late.so")]);
        }
        let stats = journal.stats();
        assert!(stats.mappings <= JOURNAL_MAPPINGS as u64, "{stats:?}");
        assert!(stats.evicted >= 10, "{stats:?}");
        assert!(journal.recall(1).is_some(), "written to lately");
        assert!(journal.recall(2).is_none(), "written to least recently");
        assert!(journal.recall(processes).is_some());
        assert!(journal.order.len() <= 4 * journal.processes.len() + 1024 + 1);
    }

    #[test]
    fn it_takes_a_quarter_of_the_process_table_s_share() {
        let mut journal = MapJournal::default();
        journal.within(8 << 20);
        let limit = journal.stats().limit;
        assert!(limit * MAPPING_BYTES <= 2 << 20 && limit >= FEWEST_MAPPINGS as u64);
        journal.within(1 << 30);
        assert_eq!(journal.stats().limit, JOURNAL_MAPPINGS as u64);
    }
}
