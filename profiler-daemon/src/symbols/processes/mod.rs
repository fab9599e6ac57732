//! What the daemon knows of each sampled process: its name and where its
//! binaries are mapped, recorded while it is alive so that its samples can
//! still be symbolized after it exits.
//!
//! This module owns the per-process records and an open handle on every
//! binary they map (so a binary stays readable after its process exits, its
//! file is deleted, or when it lives in another mount namespace). It turns
//! raw user addresses into (binary, file offset) pairs; it must not
//! symbolize.

mod adoption;
mod journal;
mod memory;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

pub use adoption::AdoptionStats;
use adoption::ImageLayout;
pub use journal::JournalStats;
use journal::{JournalMapping, MapJournal};
use procfs::process::{MMPermissions, MMapPath, Process};
use profiler_common::{ForkLineage, SampleKind, sample_flags};
use tracing::debug;

pub use super::mappings::{Binary, BinaryKey, PythonCode, UserAddress};
use super::{
    mappings::{
        Mapping, MappingTarget, code_mappings, data_name, device_number, display_path, lookup,
        mapping_of, same_code_layout,
    },
    process_files,
    python::{
        PythonInterpreters, PythonProcess, PythonStats, PythonVerdict,
        frames::{PythonFrameAddress, PythonMarker},
    },
};
use crate::{
    kernel::{
        drain::{CounterDeltas, RawBatch},
        mapping_records::{MappingRecord, MappingRecords},
    },
    profile::ThreadInfo,
    unwind::{ProcessUnwinder, UnwindCache, UnwindStats, UnwindStop, UnwoundStack, UserRegisters},
};

/// Records unused for this long are dropped; a process sampled again later
/// is simply recorded again.
const RECORD_IDLE_LIMIT: Duration = Duration::from_secs(60);

/// How many earlier memory maps of a process are kept, and how many
/// mappings they may hold in all: an exec is often recorded twice (once
/// while the new program is still being loaded), samples of the old
/// program may be drained after both, and a process that execs itself over
/// and over (a shell loop, a supervisor) runs many programs between a
/// sample and its symbolizing. Bounded by mappings (about 64 bytes each),
/// so that a process of many mappings keeps fewer maps.
const EARLIER_MAPS_KEPT: usize = 128;
const EARLIER_MAPPINGS_KEPT: usize = 4096;

/// How long after a program was first recorded a frame pointer that leads
/// out of its mappings has them read again (see [`ProcessTable::unwind`]).
const PROGRAM_LOADING: Duration = Duration::from_secs(1);

/// How soon a process's mappings may be read again when a sample finds
/// them out of date (a return address or a thread's stack in none).
const READ_AGAIN_AFTER: Duration = Duration::from_millis(10);

#[derive(Debug)]
struct ProcessRecord {
    name: Arc<str>,
    /// Every mapping (those without code only name addresses that fall in
    /// them), sorted by start address; shared with the children that
    /// adopted them.
    mappings: Arc<[Mapping]>,
    /// The mappings of the records this one replaced (before an exec, say),
    /// newest first: samples taken before the change but drained after it
    /// fall there.
    earlier: Vec<Arc<[Mapping]>>,
    recorded_at: Instant,
    /// When its current program (its layout, see `image`) was first
    /// recorded: for a moment after, its loader may still have been
    /// mapping libraries.
    program_recorded_at: Instant,
    last_used: Instant,
    /// Built from `mappings` when its first stack copy is unwound (or a
    /// child adopts them), and shared with the children that adopt them.
    unwinder: Option<Arc<Mutex<ProcessUnwinder>>>,
    /// The process whose mappings it took (forked from it, or from one of
    /// its children that took them too), not read from procfs: an address
    /// outside them has them read at once (or, this process gone, those of
    /// that one; see [`ProcessTable::read_donor_again`]).
    adopted_from: Option<u32>,
    /// Where its program was laid out when its mappings were read.
    image: Option<ImageLayout>,
    /// The CPython interpreter it runs, if any.
    python: PythonVerdict,
}

impl ProcessRecord {
    fn new(name: Arc<str>, mappings: Arc<[Mapping]>, image: Option<ImageLayout>) -> Self {
        let now = Instant::now();
        Self {
            name,
            mappings,
            earlier: Vec::new(),
            recorded_at: now,
            program_recorded_at: now,
            last_used: now,
            unwinder: None,
            adopted_from: None,
            image,
            python: PythonVerdict::None,
        }
    }
}

/// Samples of one thread with one stack, user addresses normalized.
#[derive(Clone, Debug)]
pub struct NormalizedSample {
    pub thread: ThreadInfo,
    pub kind: SampleKind,
    /// `profiler_common::sample_flags` bits.
    pub flags: u32,
    /// User stack, leaf first.
    pub user: Vec<UserAddress>,
    /// Why the user stack stops short, if it does.
    pub user_stop: Option<UnwindStop>,
    /// Kernel stack, leaf first.
    pub kernel: Arc<[u64]>,
    pub count: u64,
    pub weight: u64,
    /// An allocation sample's id; 0 for other samples.
    pub allocation_id: u64,
    /// When each of a peek's ticks was taken (monotonic nanoseconds, as
    /// `bpf_ktime_get_ns`); empty for other samples.
    pub times_ns: Vec<u64>,
}

impl NormalizedSample {
    /// One CPU sample of process `pid` with the user stack `user`, for
    /// tests.
    #[cfg(test)]
    pub fn of_test(pid: u32, user: Vec<UserAddress>) -> Self {
        Self {
            thread: ThreadInfo::of_test(pid),
            kind: SampleKind::CpuClock,
            flags: 0,
            user,
            user_stop: None,
            kernel: Arc::from([]),
            count: 1,
            weight: 0,
            allocation_id: 0,
            times_ns: Vec::new(),
        }
    }
}

/// A drained batch with its user addresses normalized.
#[derive(Clone, Debug)]
pub struct NormalizedBatch {
    pub start: std::time::SystemTime,
    pub end: std::time::SystemTime,
    pub samples: Vec<NormalizedSample>,
    pub counters: CounterDeltas,
}

/// Counts for the status report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProcessStats {
    pub processes_tracked: u64,
    pub processes_seen: u64,
    pub binaries: u64,
    pub adopted: AdoptionStats,
    /// Bytes the records hold (roughly), the most they may (0: no limit),
    /// and records let go of before their time to stay within it.
    pub bytes: u64,
    pub limit: u64,
    pub evicted: u64,
    /// Earlier memory maps (of programs a process ran before an exec) let
    /// go of to keep within [`EARLIER_MAPS_KEPT`] and
    /// [`EARLIER_MAPPINGS_KEPT`] per process.
    pub earlier_maps_dropped: u64,
    /// The memory maps the kernel's records made (of processes gone
    /// before procfs was read); `None` when they are not followed.
    pub journal: Option<JournalStats>,
    /// The CPython interpreters found in the processes recorded.
    pub python: PythonStats,
}

/// The records of every process sampled recently.
#[derive(Debug, Default)]
pub struct ProcessTable {
    processes: HashMap<u32, ProcessRecord>,
    binaries: HashMap<BinaryKey, Arc<Binary>>,
    processes_seen: u64,
    adoption_stats: AdoptionStats,
    /// Processes sampled but never recorded (gone too soon), counted in
    /// `processes_seen` once each, and when they were last sampled.
    unrecorded: HashMap<u32, Instant>,
    last_collection: Option<Instant>,
    cgroups: crate::kernel::cgroups::CgroupPaths,
    pythons: PythonInterpreters,
    unwind_cache: UnwindCache,
    unwind_stats: UnwindStats,
    /// Most bytes of unwind information held (0: no limit).
    unwind_info_limit: u64,
    /// Most bytes the records hold (0: no limit), and records let go of
    /// to stay within it.
    /// Earlier memory maps let go of (see [`ProcessStats`]).
    earlier_maps_dropped: u64,
    limit: u64,
    evicted: u64,
    /// The kernel's records of memory maps as they are made, when
    /// followed, and what they made of each process.
    mapping_records: Option<MappingRecords>,
    journal: MapJournal,
    records_read: Vec<MappingRecord>,
}

impl ProcessTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Follows the kernel's records of memory maps as they are made: a
    /// process gone before procfs could be read is recorded from them.
    pub fn follow_mapping_records(&mut self, records: MappingRecords) {
        self.mapping_records = Some(records);
    }

    /// Reads the kernel's records of memory maps written so far into the
    /// journal (at every pass, so that their rings do not fill).
    pub fn read_mapping_records(&mut self) {
        if let Some(records) = &mut self.mapping_records {
            records.read(&mut self.records_read);
            self.journal.note(self.records_read.drain(..));
        }
    }

    /// Records (or re-records) a process's name and mappings: read from
    /// procfs while it lives, else from the kernel's records of its memory
    /// maps (when followed). Fails when the process is gone and neither
    /// knows it; an existing record is then kept, as it is when the process
    /// has no mappings left (it is exiting).
    pub fn record(&mut self, pid: u32) -> procfs::ProcResult<()> {
        match self.record_from_procfs(pid) {
            Err(_) if self.record_from_journal(pid) => Ok(()),
            recorded => recorded,
        }
    }

    /// Records a live process from procfs (one without mappings left from
    /// the kernel's records when they know it).
    fn record_from_procfs(&mut self, pid: u32) -> procfs::ProcResult<()> {
        // The layout is read before the mappings: an exec in between leaves
        // an older layout beside newer mappings, which only stops children
        // from adopting them, never makes them adopt the wrong ones.
        let process = Process::new(pid as i32)?;
        let stat = process.stat()?;
        let image = ImageLayout::of(&stat);
        let name = stat.comm;
        let maps = process.maps()?;
        let mut mappings = Vec::new();
        for map in maps {
            let (start, end) = map.address;
            let code = map.perms.contains(MMPermissions::EXECUTE);
            let target = if code {
                match &map.pathname {
                    MMapPath::Path(path) => {
                        let key = BinaryKey {
                            device: device_number(map.dev),
                            inode: map.inode,
                        };
                        match self.binary(pid, key, path, start, end) {
                            Some(binary) => MappingTarget::File(binary),
                            None => MappingTarget::Special(display_path(path).into()),
                        }
                    }
                    MMapPath::Vdso => MappingTarget::Special("[vdso]".into()),
                    MMapPath::Vsyscall => MappingTarget::Special("[vsyscall]".into()),
                    MMapPath::Other(name) => MappingTarget::Special(format!("[{name}]").into()),
                    _ => MappingTarget::Special("[anon]".into()),
                }
            } else {
                // Not code: a frame here is a wrong return address (most
                // often from walking frame pointers through code without
                // them), named by where it points.
                MappingTarget::Special(format!("{} (not code)", data_name(&map.pathname)).into())
            };
            mappings.push(Mapping {
                start,
                end,
                file_offset: map.offset,
                target,
                code,
            });
        }
        mappings.sort_by_key(|mapping| mapping.start);
        let now = Instant::now();
        // A process that is exiting (or a zombie) has already lost its
        // memory map: keep what was recorded while it lived.
        if mappings.is_empty() {
            if let Some(record) = self.processes.get_mut(&pid)
                && !record.mappings.is_empty()
            {
                record.recorded_at = now;
                return Ok(());
            }
            if self.record_from_journal(pid) {
                return Ok(());
            }
        }
        self.insert(pid, ProcessRecord::new(name.into(), mappings.into(), image));
        self.add_earlier_from_journal(pid);
        Ok(())
    }

    /// Records a process from the kernel's records of its memory maps (its
    /// current program's, with those it ran before as earlier ones); false
    /// when they hold none.
    fn record_from_journal(&mut self, pid: u32) -> bool {
        self.read_mapping_records();
        let Some(entry) = self.journal.recall(pid) else {
            return false;
        };
        let name = entry.command.clone().unwrap_or_else(|| "[exited]".into());
        let programs = newest_first(entry);
        let mut programs = programs.into_iter();
        let Some(current) = programs.next() else {
            return false;
        };
        let current = self.mappings_recorded(pid, current);
        self.insert(pid, ProcessRecord::new(name, current, None));
        self.add_earlier_recorded(pid, programs.collect());
        true
    }

    /// After `pid` was read from procfs: the programs it ran before this
    /// one since it was last read, which only the kernel's records saw (a
    /// process that execs over and over), kept as earlier maps.
    fn add_earlier_from_journal(&mut self, pid: u32) {
        self.read_mapping_records();
        let Some(entry) = self.journal.held(pid) else {
            return;
        };
        // One program: the one procfs just gave. With more, the newest may
        // be it, or an exec since: those procfs gave are left out by their
        // layout.
        let programs = newest_first(entry);
        if programs.len() >= 2 {
            self.add_earlier_recorded(pid, programs);
        }
    }

    /// Adds `programs` (newest first) in front of the earlier maps of
    /// `pid`'s record, but those already known by their code's layout.
    fn add_earlier_recorded(&mut self, pid: u32, programs: Vec<Vec<JournalMapping>>) {
        let programs: Vec<_> = programs
            .into_iter()
            .map(|program| self.mappings_recorded(pid, program))
            .collect();
        let Some(record) = self.processes.get_mut(&pid) else {
            return;
        };
        let mut at = 0;
        for older in programs {
            let known = std::iter::once(&record.mappings)
                .chain(&record.earlier)
                .any(|known| same_code_layout(known, &older));
            if !known {
                record.earlier.insert(at, older);
                at += 1;
            }
        }
        let kept = record.earlier.len().min(EARLIER_MAPS_KEPT);
        self.earlier_maps_dropped += (record.earlier.len() - kept) as u64;
        record.earlier.truncate(kept);
    }

    /// The mappings the kernel recorded for one program of `pid`, each
    /// binary opened as procfs's would be (or, the process gone, by its
    /// path).
    fn mappings_recorded(&mut self, pid: u32, program: Vec<JournalMapping>) -> Arc<[Mapping]> {
        let mut mappings: Vec<Mapping> = program
            .into_iter()
            .map(|recorded| {
                let target = match &*recorded.path {
                    path if path.starts_with('/') => {
                        let key = BinaryKey {
                            device: recorded.device,
                            inode: recorded.inode,
                        };
                        let path = std::path::Path::new(path);
                        match self.binary(pid, key, path, recorded.start, recorded.end) {
                            Some(binary) => MappingTarget::File(binary),
                            None => MappingTarget::Special(display_path(path).into()),
                        }
                    }
                    "//anon" => MappingTarget::Special("[anon]".into()),
                    name => MappingTarget::Special(name.into()),
                };
                Mapping {
                    start: recorded.start,
                    end: recorded.end,
                    file_offset: recorded.file_offset,
                    target,
                    code: true,
                }
            })
            .collect();
        mappings.sort_by_key(|mapping| mapping.start);
        mappings.into()
    }

    /// Puts `record` in place of the process's previous one, whose
    /// mappings it keeps as earlier ones.
    fn insert(&mut self, pid: u32, mut record: ProcessRecord) {
        let previous = self.processes.remove(&pid);
        // A process is counted once per program it runs: when its
        // interpreter is first found (a record made while its loader was
        // still mapping libraries may have found none), or after an exec.
        record.python = self.pythons.of_process(&record.mappings);
        let counted = previous.as_ref().is_some_and(|previous| {
            let exec = previous.image.is_some()
                && record.image.is_some()
                && previous.image != record.image;
            previous.python != PythonVerdict::None && !exec
        });
        if !counted {
            self.pythons.count(&record.python);
        }
        match previous {
            Some(previous) => {
                record.earlier = previous.earlier;
                if previous.image.is_some() && previous.image == record.image {
                    record.program_recorded_at = previous.program_recorded_at;
                }
                // Read again with no new code: the earlier map would only
                // push out older ones.
                if !previous.mappings.is_empty()
                    && !same_code_layout(&previous.mappings, &record.mappings)
                {
                    record.earlier.insert(0, previous.mappings);
                    let mut mappings = 0;
                    let kept = record
                        .earlier
                        .iter()
                        .take(EARLIER_MAPS_KEPT)
                        .take_while(|earlier| {
                            mappings += earlier.len();
                            mappings <= EARLIER_MAPPINGS_KEPT
                        })
                        .count()
                        .max(1);
                    self.earlier_maps_dropped += (record.earlier.len() - kept) as u64;
                    record.earlier.truncate(kept);
                }
            }
            None => {
                if self.unrecorded.remove(&pid).is_none() {
                    self.processes_seen += 1;
                }
            }
        }
        self.processes.insert(pid, record);
    }

    /// The binary mapped at `start..end` of `pid`, opened once per identity.
    fn binary(
        &mut self,
        pid: u32,
        key: BinaryKey,
        path: &std::path::Path,
        start: u64,
        end: u64,
    ) -> Option<Arc<Binary>> {
        if let Some(binary) = self.binaries.get(&key) {
            return Some(binary.clone());
        }
        // Exactly the mapped file (its device and inode), opened safely:
        // the process's user chooses what lies at its paths.
        let identity = (key.device, key.inode);
        let opened = match process_files::open_mapped(pid, (start, end), path, identity) {
            // Gone: known from the kernel's records of its memory maps.
            Err(process_files::Refused::Missing) => process_files::open_left_behind(path, identity),
            opened => opened,
        };
        let file = match opened {
            Ok(file) => file,
            Err(refused) => {
                debug!(pid, path = %path.display(), "not reading a mapped binary: {refused}");
                return None;
            }
        };
        let binary = Arc::new(Binary::from_file(key, display_path(path).into(), file));
        self.binaries.insert(key, binary.clone());
        Some(binary)
    }

    /// Unwinds a user stack from its registers and a copy of its top
    /// (`stack`, the user memory from `stack_base` on) with the unwind
    /// information of the binaries the process maps. A process not yet
    /// recorded is recorded first; one whose code moved since it was
    /// recorded (a library loaded later) is recorded again. A stack none
    /// of its mappings hold may have been sampled before an exec that
    /// followed its fork: `ancestry` says who forked it then, and who
    /// forked that one while it ran the same program (see
    /// [`ProcessTable::unwind_before_exec`]).
    pub fn unwind(
        &mut self,
        pid: u32,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
        ancestry: impl FnOnce() -> Vec<ForkLineage>,
    ) -> UnwoundStack {
        let started = Instant::now();
        if !self.processes.contains_key(&pid)
            && !self.adopt_forked(pid, crate::kernel::announcements::Lineage::Unknown)
            && self.record(pid).is_err()
        {
            self.count_unrecorded(pid);
        }
        let mut unwound = self.unwind_recorded(pid, registers, stack_base, stack);
        // A process recorded at its first sample may have been recorded
        // while the dynamic loader was still mapping its libraries: read
        // its mappings again (at most every 10 ms; at once when they were
        // its parent's) when a return address is in none of them, or, in
        // its program's first second, when a frame pointer led out of them
        // (code without unwind information into a library not yet seen).
        let read_again = self.processes.get(&pid).is_some_and(|record| {
            let stale =
                record.adopted_from.is_some() || record.recorded_at.elapsed() > READ_AGAIN_AFTER;
            let loading = record.program_recorded_at.elapsed() < PROGRAM_LOADING;
            stale
                && (unwound.stop == Some(UnwindStop::Unmapped)
                    || (unwound.unmapped_return && loading))
        });
        if read_again && (self.record(pid).is_ok() || self.read_donor_again(pid)) {
            unwound = self.unwind_recorded(pid, registers, stack_base, stack);
        }
        let program_unknown = matches!(
            unwound.stop,
            Some(UnwindStop::Unmapped | UnwindStop::UnknownProcess)
        );
        if program_unknown {
            let ancestry = ancestry();
            if let Some(again) =
                self.unwind_before_exec(pid, &ancestry, registers, stack_base, stack)
            {
                unwound = again;
            }
        }
        self.unwind_stats.without_unwind_info += u64::from(unwound.without_unwind_info);
        match &unwound.stop {
            None => self.unwind_stats.complete += 1,
            Some(stop) => {
                *self
                    .unwind_stats
                    .stopped
                    .entry(stop.counter_name())
                    .or_default() += 1
            }
        }
        self.unwind_stats.stack_bytes += stack.len() as u64;
        self.unwind_stats.busy += started.elapsed();
        unwound
    }

    fn unwind_recorded(
        &mut self,
        pid: u32,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> UnwoundStack {
        let Some(record) = self.processes.get_mut(&pid) else {
            return UnwoundStack {
                frames: vec![registers.ip],
                stop: Some(UnwindStop::UnknownProcess),
                without_unwind_info: false,
                unmapped_return: false,
            };
        };
        record.last_used = Instant::now();
        let unwinder = record.unwinder.get_or_insert_with(|| {
            Arc::new(Mutex::new(ProcessUnwinder::new(code_mappings(
                &record.mappings,
            ))))
        });
        let unwound =
            crate::lock(unwinder).unwind(&mut self.unwind_cache, registers, stack_base, stack);
        if unwound.stop != Some(UnwindStop::Unmapped) || unwound.frames.len() > 1 {
            return unwound;
        }
        // The sampled instruction is in none of the current mappings: a
        // sample taken before an exec, unwound after it. The mappings it
        // ran with are among the earlier ones (rare: built as needed); one
        // recorded while its program was still being loaded may lack the
        // libraries of the stack's callers: a map holding the whole stack
        // is looked for.
        let mut best = unwound;
        for earlier in &record.earlier {
            if matches!(lookup(earlier, registers.ip), UserAddress::Unmapped { .. }) {
                continue;
            }
            let mut unwinder = ProcessUnwinder::new(code_mappings(earlier));
            let again = unwinder.unwind(&mut self.unwind_cache, registers, stack_base, stack);
            if again.stop != Some(UnwindStop::Unmapped) {
                return again;
            }
            if again.frames.len() > best.frames.len() {
                best = again;
            }
        }
        best
    }

    /// The end of the mapping of `pid` that holds `sp` (a thread's stack
    /// pointer): the top of that thread's stack. A stack in none of the
    /// recorded mappings (a thread started after the process was recorded)
    /// has them read again, at most every [`READ_AGAIN_AFTER`]. None when
    /// no writable data mapping holds it.
    pub fn stack_top(&mut self, pid: u32, sp: u64) -> Option<u64> {
        let top = |table: &Self| {
            let record = table.processes.get(&pid)?;
            mapping_of(&record.mappings, sp).map(|mapping| (!mapping.code).then_some(mapping.end))
        };
        match top(self) {
            Some(found) => found,
            None => {
                let stale = self
                    .processes
                    .get(&pid)
                    .is_some_and(|record| record.recorded_at.elapsed() > READ_AGAIN_AFTER);
                if stale && self.record(pid).is_ok() {
                    top(self).flatten()
                } else {
                    None
                }
            }
        }
    }

    /// The binaries a recorded process maps code from.
    pub fn binaries_of(&self, pid: u32) -> Vec<Arc<Binary>> {
        let Some(record) = self.processes.get(&pid) else {
            return Vec::new();
        };
        record
            .mappings
            .iter()
            .filter_map(|mapping| match &mapping.target {
                MappingTarget::File(binary) if mapping.code => Some(binary.clone()),
                _ => None,
            })
            .collect()
    }

    /// Names every sample's process and normalizes its user stack. A
    /// process without a record, or with addresses outside its recorded
    /// mappings, is recorded (again) if it is still alive, once per batch.
    pub fn normalize_batch(&mut self, batch: RawBatch) -> NormalizedBatch {
        let started = Instant::now();
        self.read_mapping_records();
        let mut unrecordable = std::collections::HashSet::new();
        let mut orphans = std::collections::HashSet::new();
        let mut try_record = |table: &mut Self, pid: u32| {
            if pid == 0 || unrecordable.contains(&pid) || table.recorded_since(pid, started) {
                return false;
            }
            let recorded = table.record(pid).is_ok();
            if !recorded {
                unrecordable.insert(pid);
            }
            recorded
        };
        let samples = batch
            .samples
            .into_iter()
            .map(|sample| {
                let pid = sample.pid;
                if !self.processes.contains_key(&pid) {
                    try_record(self, pid);
                }
                let (mut user, mut complete) = self.normalize(pid, &sample.user);
                if !complete && try_record(self, pid) {
                    (user, complete) = self.normalize(pid, &sample.user);
                }
                if !complete && pid == sample.tid && !orphans.contains(&pid) {
                    if self.adopt_mappings(pid, &sample.thread_name, &sample.user) {
                        user = self.normalize(pid, &sample.user).0;
                    } else {
                        orphans.insert(pid);
                    }
                }
                if pid != 0 && !self.processes.contains_key(&pid) {
                    self.count_unrecorded(pid);
                }
                // The kernel names a process after its main thread: for that
                // thread, the name at the sample is exact, even across an
                // exec drained late.
                let process_name = match self.processes.get(&pid) {
                    None if pid == 0 => Arc::from("swapper"),
                    _ if pid == sample.tid => sample.thread_name.clone(),
                    Some(record) => record.name.clone(),
                    None => Arc::from("[exited]"),
                };
                NormalizedSample {
                    thread: ThreadInfo {
                        pid,
                        tid: sample.tid,
                        thread_name: sample.thread_name,
                        process_name,
                        uid: sample.uid,
                        gid: sample.gid,
                        protected: sample.flags & sample_flags::PROTECTED != 0,
                        cgroup: self.cgroups.path(sample.cgroup),
                    },
                    kind: sample.kind,
                    flags: sample.flags,
                    user,
                    user_stop: sample.user_stop,
                    kernel: sample.kernel,
                    count: sample.count,
                    weight: sample.weight,
                    allocation_id: sample.allocation_id,
                    times_ns: sample.times_ns,
                }
            })
            .collect();
        self.collect_garbage();
        NormalizedBatch {
            start: batch.start,
            end: batch.end,
            samples,
            counters: batch.counters,
        }
    }

    /// Whether the process has a record.
    pub fn is_recorded(&self, pid: u32) -> bool {
        self.processes.contains_key(&pid)
    }

    /// Counts a process sampled without ever being recorded, once.
    fn count_unrecorded(&mut self, pid: u32) {
        if self.unrecorded.insert(pid, Instant::now()).is_none() {
            self.processes_seen += 1;
        }
    }

    /// Whether the process has a record made at or after `since`.
    /// How `pid` was recorded, when it was at `since` or later: `Some(true)`
    /// when it took the mappings of the process that forked it.
    pub fn recorded_since_adopted(&self, pid: u32, since: Instant) -> Option<bool> {
        self.processes
            .get(&pid)
            .filter(|record| record.recorded_at >= since)
            .map(|record| record.adopted_from.is_some())
    }

    fn recorded_since(&self, pid: u32, since: Instant) -> bool {
        self.processes
            .get(&pid)
            .is_some_and(|record| record.recorded_at >= since)
    }

    /// Normalizes a user stack (leaf first). Also says whether every address
    /// fell inside the recorded mappings; if not, the process may have mapped
    /// more since it was recorded, and the caller may record it again.
    fn normalize(&mut self, pid: u32, stack: &[u64]) -> (Vec<UserAddress>, bool) {
        let mut complete = true;
        let record = self.processes.get_mut(&pid);
        let frames = match record {
            Some(record) => {
                record.last_used = Instant::now();
                let python = match &record.python {
                    PythonVerdict::Runs(process) => Some(process),
                    _ => None,
                };
                let mut frames = Vec::with_capacity(stack.len());
                let mut at = 0;
                while let Some(&address) = stack.get(at) {
                    at += 1;
                    // Where its Python frames were cut short.
                    if python.is_some()
                        && let Some(cut) = PythonMarker::decode(address)
                    {
                        frames.push(UserAddress::PythonMarker(cut));
                        continue;
                    }
                    // A Python frame (two words) of a process running one.
                    if let Some(process) = python
                        && let Some(frame) = PythonFrameAddress::decode(&stack[at - 1..])
                    {
                        at += 1;
                        frames.push(UserAddress::Python(PythonCode {
                            pid,
                            process: process.clone(),
                            code: frame.code,
                            unit: frame.unit,
                            check: frame.check,
                            name: None,
                        }));
                        continue;
                    }
                    frames.push(match lookup(&record.mappings, address) {
                        UserAddress::Unmapped { .. } => {
                            let found = record
                                .earlier
                                .iter()
                                .map(|earlier| lookup(earlier, address))
                                .find(|found| !matches!(found, UserAddress::Unmapped { .. }))
                                .unwrap_or(UserAddress::Unmapped { address });
                            // Found in an earlier map (of a program run
                            // before an exec): reading the process again
                            // would not find it.
                            complete &= !matches!(found, UserAddress::Unmapped { .. });
                            found
                        }
                        found => found,
                    });
                }
                frames
            }
            None => {
                complete = stack.is_empty();
                stack.iter().map(|&address| lookup(&[], address)).collect()
            }
        };
        (frames, complete)
    }

    /// Drops records unused for a while and binaries nothing refers to any
    /// more (closing their files). Cheap enough to call after every drain.
    fn collect_garbage(&mut self) {
        let now = Instant::now();
        if self
            .last_collection
            .is_some_and(|last| now.duration_since(last) < Duration::from_secs(10))
        {
            return;
        }
        self.last_collection = Some(now);
        self.processes
            .retain(|_, record| now.duration_since(record.last_used) < RECORD_IDLE_LIMIT);
        self.unrecorded
            .retain(|_, sampled| now.duration_since(*sampled) < RECORD_IDLE_LIMIT);
        self.binaries
            .retain(|_, binary| Arc::strong_count(binary) > 1);
        self.enforce_limit();
    }

    pub fn stats(&self) -> ProcessStats {
        ProcessStats {
            processes_tracked: self.processes.len() as u64,
            processes_seen: self.processes_seen,
            binaries: self.binaries.len() as u64,
            adopted: self.adoption_stats,
            bytes: self.bytes(),
            limit: self.limit,
            evicted: self.evicted,
            earlier_maps_dropped: self.earlier_maps_dropped,
            journal: self.mapping_records.as_ref().map(|records| JournalStats {
                lost: records.lost(),
                ..self.journal.stats()
            }),
            python: self.pythons.stats(),
        }
    }

    /// The CPython interpreter process `pid` runs, when it is recorded and
    /// its interpreter's frames can be read.
    pub fn python_of(&self, pid: u32) -> Option<Arc<PythonProcess>> {
        match &self.processes.get(&pid)?.python {
            PythonVerdict::Runs(process) => Some(process.clone()),
            _ => None,
        }
    }
}

/// The programs of a journal entry that hold code, newest first.
fn newest_first(entry: &journal::JournalEntry) -> Vec<Vec<JournalMapping>> {
    entry
        .programs
        .iter()
        .rev()
        .filter(|program| !program.is_empty())
        .cloned()
        .collect()
}

#[cfg(test)]
mod tests;
