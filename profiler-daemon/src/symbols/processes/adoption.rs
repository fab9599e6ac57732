//! Children that share what their parent maps: a process forked without
//! exec maps what its parent mapped when it is first seen, so it can take
//! its parent's record (mappings and unwinder, shared) instead of reading
//! its own `/proc/PID/maps`, which costs the kernel far more for each of
//! many short-lived children. The kernel's fork tracepoint says who forked
//! a process and where their program was laid out
//! ([`Lineage`]); `/proc/PID/stat` says so when it cannot.
//!
//! This module owns that decision and the adoption; it must not read a
//! process's mappings itself.

use std::sync::{Arc, Mutex};

use procfs::{FromRead, process::Stat};
use profiler_common::ForkLineage;
use tracing::debug;

use super::{ProcessRecord, ProcessTable};
use crate::{
    kernel::announcements::Lineage,
    symbols::mappings::{Mapping, code_mappings, mapping_of, same_code_layout},
    unwind::{ProcessUnwinder, UnwoundStack, UserRegisters},
};

/// How many new processes took their parent's mappings.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdoptionStats {
    /// Children forked without exec that took their parent's mappings.
    pub children: u64,
    /// Of those, the ones whose parent and layout the kernel's fork
    /// tracepoint gave (the others' were read from procfs).
    pub as_announced: u64,
    /// Stacks sampled between a process's fork and its exec, unwound after
    /// the exec with the mappings of the process that forked it.
    pub before_exec: u64,
}

/// Where a process's program is laid out (`start_code`, `end_code` and
/// `start_stack` of its memory descriptor, as `/proc/PID/stat` shows them):
/// a fork keeps it, an exec moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ImageLayout {
    start_code: u64,
    end_code: u64,
    start_stack: u64,
}

impl ImageLayout {
    pub(super) fn of(stat: &Stat) -> Option<Self> {
        (stat.startcode != 0).then_some(Self {
            start_code: stat.startcode,
            end_code: stat.endcode,
            start_stack: stat.startstack,
        })
    }

    /// Whether `mappings` map a program laid out so: one of their code
    /// mappings holds its executable's code (`start_code..end_code`, where
    /// the loader put its executable segment), which another program, or
    /// another run of the same one, would hardly have at the same place.
    fn holds_code_of(&self, mappings: &[Mapping]) -> bool {
        mappings.iter().any(|mapping| {
            mapping.code && mapping.start <= self.start_code && self.end_code <= mapping.end
        })
    }
}

/// A process, the process that forked it, and where their program is laid
/// out.
struct Parentage {
    parent: u32,
    image: ImageLayout,
}

impl Parentage {
    /// As the kernel's fork tracepoint recorded it; `None` when it says
    /// the process runs a program of its own.
    fn announced(lineage: &Lineage, pid: u32) -> Option<Option<Self>> {
        match lineage {
            Lineage::Unknown => None,
            Lineage::OwnProgram => Some(None),
            Lineage::Forked(forked) => Some(Some(Self {
                parent: forked.parent,
                image: ImageLayout {
                    start_code: forked.start_code,
                    end_code: forked.end_code,
                    start_stack: forked.start_stack,
                },
            }))
            .filter(|_| forked.start_code != 0 && forked.parent != pid),
        }
    }

    /// As `/proc/PID/stat` says (one open and read: `Process::new` would
    /// open the process's directory first, twice the work).
    fn read(pid: u32) -> Option<Self> {
        let stat = Stat::from_file(format!("/proc/{pid}/stat")).ok()?;
        Some(Self {
            parent: u32::try_from(stat.ppid).ok()?,
            image: ImageLayout::of(&stat)?,
        })
    }
}

impl ProcessTable {
    /// Gives a new process its parent's mappings when its parent is
    /// recorded with the program laid out where the child's is (an exec
    /// would have moved it: `ImageLayout`, as both were when read). An
    /// address outside them later (a library the child loaded itself) has
    /// the child's own read at once. Returns whether it did.
    ///
    /// A parent not recorded yet (one that forks and waits is seldom
    /// sampled), or recorded with another layout (before its exec), is
    /// recorded first when its own layout is the child's: its mappings are
    /// then read once for all its children.
    pub fn adopt_forked(&mut self, pid: u32, lineage: Lineage) -> bool {
        let (parentage, as_announced) = match Parentage::announced(&lineage, pid) {
            Some(Some(parentage)) => (parentage, true),
            Some(None) => return false,
            None => match Parentage::read(pid) {
                Some(parentage) => (parentage, false),
                None => return false,
            },
        };
        let Parentage { parent, image } = parentage;
        let Some(laid_out) = self.program_laid_out(parent, image) else {
            return false;
        };
        // Adopted already (its first sample's unwinding and its
        // announcement both ask).
        if self.processes.get(&pid).is_some_and(|record| {
            record.adopted_from.is_some() && Arc::ptr_eq(&record.mappings, &laid_out)
        }) {
            return true;
        }
        self.adopt_program(pid, parent, laid_out, image);
        self.adoption_stats.children += 1;
        if as_announced {
            self.adoption_stats.as_announced += 1;
        }
        true
    }

    /// The mappings of `parent` in which its program was laid out as
    /// `image`: those of its current program, or of one it ran before an
    /// exec since (its earlier maps: a shell script's interpreter forks
    /// subshells, then execs the command it was started for). A parent
    /// not recorded, or recorded laid out otherwise (before its own exec,
    /// say, with the mappings of the process that forked it), is read
    /// again when it is now laid out so; one whose programs hold none is
    /// given those the kernel's records of memory maps know.
    fn program_laid_out(&mut self, parent: u32, image: ImageLayout) -> Option<Arc<[Mapping]>> {
        // The current program by its whole layout when it was read from
        // procfs; by its code's place when the kernel's records gave it,
        // as the earlier ones.
        let find = |table: &Self| {
            let record = table.processes.get(&parent)?;
            match record.image {
                Some(recorded) if recorded == image && !record.mappings.is_empty() => {
                    return Some(record.mappings.clone());
                }
                None if image.holds_code_of(&record.mappings) => {
                    return Some(record.mappings.clone());
                }
                _ => {}
            }
            record
                .earlier
                .iter()
                .find(|mappings| image.holds_code_of(mappings))
                .cloned()
        };
        if let Some(found) = find(self) {
            return Some(found);
        }
        let recorded = self.processes.contains_key(&parent);
        if !recorded || Parentage::read(parent).is_some_and(|own| own.image == image) {
            let _ = self.record(parent);
        } else {
            self.add_earlier_from_journal(parent);
        }
        find(self)
    }

    /// Records `pid` with `mappings`, a program of `parent` (its current
    /// one: with its unwinder too).
    fn adopt_program(
        &mut self,
        pid: u32,
        parent: u32,
        mappings: Arc<[Mapping]>,
        image: ImageLayout,
    ) {
        let Some(donor) = self.processes.get(&parent) else {
            return;
        };
        if Arc::ptr_eq(&donor.mappings, &mappings) {
            self.adopt(pid, donor.name.clone(), parent, Some(image));
        } else {
            let mut record = ProcessRecord::new(donor.name.clone(), mappings, Some(image));
            record.adopted_from = Some(parent);
            self.insert(pid, record);
        }
    }

    /// Unwinds a stack of `pid` sampled before its exec (and unwound
    /// after it, when its own mappings are its new program's, or gone
    /// with it): between its fork and its exec it ran the program of the
    /// process that forked it, laid out as `ancestry[0]` recorded (a
    /// shell's child between `fork` and `execve`), or of the one that
    /// forked that one while it ran the same program (`ancestry[1]`, …: a
    /// subshell's child). With that program's mappings, when one of them
    /// is known; they become the earliest of the child's own (its record,
    /// when it had none), so that its addresses are named. None when none
    /// is.
    pub(super) fn unwind_before_exec(
        &mut self,
        pid: u32,
        ancestry: &[ForkLineage],
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> Option<UnwoundStack> {
        let (parent, image, laid_out) = ancestry.iter().find_map(|&forked| {
            let Some(Some(Parentage { parent, image })) =
                Parentage::announced(&Lineage::Forked(forked), forked.child)
            else {
                return None;
            };
            let laid_out = self.program_laid_out(parent, image)?;
            Some((parent, image, laid_out))
        })?;
        let unwound = match self.processes.get_mut(&pid) {
            None => {
                self.adopt_program(pid, parent, laid_out, image);
                self.unwind_recorded(pid, registers, stack_base, stack)
            }
            Some(record) => {
                let known = std::iter::once(&record.mappings)
                    .chain(&record.earlier)
                    .any(|known| {
                        Arc::ptr_eq(known, &laid_out) || same_code_layout(known, &laid_out)
                    });
                if !known && record.earlier.len() < super::EARLIER_MAPS_KEPT {
                    record.earlier.push(laid_out.clone());
                }
                let mut unwinder = ProcessUnwinder::new(code_mappings(&laid_out));
                unwinder.unwind(&mut self.unwind_cache, registers, stack_base, stack)
            }
        };
        self.adoption_stats.before_exec += 1;
        Some(unwound)
    }

    /// Gives a process that could not be recorded (it exited first, or is a
    /// zombie without a memory map) the mappings of a recorded process of
    /// the same name whose mappings hold every address of `stack`: a child
    /// forked without exec shares its parent's address space, while the
    /// mappings of an unrelated process (randomized) would not hold them.
    /// Returns whether it did.
    pub(super) fn adopt_mappings(&mut self, pid: u32, name: &str, stack: &[u64]) -> bool {
        if stack.is_empty()
            || self
                .processes
                .get(&pid)
                .is_some_and(|record| !record.mappings.is_empty())
        {
            return false;
        }
        let donor = self
            .processes
            .iter()
            .filter(|(other, record)| {
                **other != pid
                    && &*record.name == name
                    && stack.iter().all(|&address| {
                        mapping_of(&record.mappings, address).is_some_and(|m| m.code)
                    })
            })
            .max_by_key(|(_, record)| record.recorded_at);
        let Some((&donor, _)) = donor else {
            return false;
        };
        debug!(
            pid,
            donor,
            "a process gone before it was recorded gets the mappings of one it was forked from"
        );
        self.adopt(pid, name.into(), donor, None);
        true
    }

    /// Records `pid` with the mappings of `donor` (recorded), and the same
    /// unwinder: the unwind rules it has worked out for the one serve the
    /// other.
    pub(super) fn adopt(
        &mut self,
        pid: u32,
        name: Arc<str>,
        donor: u32,
        image: Option<ImageLayout>,
    ) {
        let Some(record) = self.processes.get_mut(&donor) else {
            return;
        };
        // The one that read them, when the donor took them too.
        let (read_by, donor) = (record.adopted_from.unwrap_or(donor), record);
        let mappings = donor.mappings.clone();
        let unwinder = donor
            .unwinder
            .get_or_insert_with(|| {
                Arc::new(Mutex::new(ProcessUnwinder::new(code_mappings(
                    &donor.mappings,
                ))))
            })
            .clone();
        let mut record = ProcessRecord::new(name, mappings, image);
        record.unwinder = Some(unwinder);
        record.adopted_from = Some(read_by);
        self.insert(pid, record);
    }

    /// A process that took the mappings of another, found missing an
    /// address and gone before its own could be read: when the one that
    /// read them (see [`ProcessRecord::adopted_from`]) still shares them
    /// and read them over [`super::READ_AGAIN_AFTER`] ago (at its exec,
    /// say, while its loader was still mapping libraries), they are read
    /// again and, its program still laid out as this one's, taken again.
    /// Returns whether they were.
    pub(super) fn read_donor_again(&mut self, pid: u32) -> bool {
        let Some(record) = self.processes.get(&pid) else {
            return false;
        };
        let (Some(donor), Some(image)) = (record.adopted_from, record.image) else {
            return false;
        };
        let name = record.name.clone();
        let shared_and_stale = self.processes.get(&donor).is_some_and(|donor| {
            Arc::ptr_eq(&donor.mappings, &record.mappings)
                && donor.recorded_at.elapsed() > super::READ_AGAIN_AFTER
        });
        if !shared_and_stale || self.record(donor).is_err() {
            return false;
        }
        let laid_out_alike = self
            .processes
            .get(&donor)
            .is_some_and(|donor| donor.image == Some(image));
        if laid_out_alike {
            self.adopt(pid, name, donor, Some(image));
        }
        laid_out_alike
    }
}
