//! What the daemon knows of each sampled process: its name and where its
//! binaries are mapped, recorded while it is alive so that its samples can
//! still be symbolized after it exits.
//!
//! This module owns the per-process records and an open handle on every
//! binary they map (so a binary stays readable after its process exits, its
//! file is deleted, or when it lives in another mount namespace). It turns
//! raw user addresses into (binary, file offset) pairs; it must not
//! symbolize.

use std::{
    collections::HashMap,
    fs::File,
    path::PathBuf,
    sync::Arc,
    time::{Duration, Instant},
};

use procfs::{
    FromRead,
    process::{MMPermissions, MMapPath, Process, Stat},
};
use profiler_common::{SampleKind, sample_flags};
use tracing::debug;

pub use super::mappings::{Binary, BinaryKey, UserAddress};
use super::{
    mappings::{
        Mapping, MappingTarget, code_mappings, data_name, device_number, display_path, lookup,
        mapping_of,
    },
    perf_map::PerfMap,
    unwind::{ProcessUnwinder, UnwindCache, UnwindStats, UnwindStop, UnwoundStack, UserRegisters},
};
use crate::{
    kernel::drain::{CounterDeltas, RawBatch},
    profile::ThreadInfo,
};

/// Records unused for this long are dropped; a process sampled again later
/// is simply recorded again.
const RECORD_IDLE_LIMIT: Duration = Duration::from_secs(60);

/// How many earlier memory maps of a process are kept: an exec is often
/// recorded twice (once while the new program is still being loaded), and
/// samples of the old program may be drained after both.
const EARLIER_MAPS_KEPT: usize = 3;

#[derive(Debug)]
struct ProcessRecord {
    name: Arc<str>,
    /// Every mapping (those without code only name addresses that fall in
    /// them), sorted by start address.
    mappings: Vec<Mapping>,
    /// The mappings of the records this one replaced (before an exec, say),
    /// newest first: samples taken before the change but drained after it
    /// fall there.
    earlier: Vec<Vec<Mapping>>,
    recorded_at: Instant,
    last_used: Instant,
    /// Built from `mappings` when its first stack copy is unwound.
    unwinder: Option<ProcessUnwinder>,
    /// Its perf map (JIT code names), if it writes one, and when it was
    /// last looked for or read.
    perf_map: Option<PerfMap>,
    perf_map_read: Option<Instant>,
    /// Its mappings are those of the process it was forked from, not read
    /// from procfs: an address outside them has them read at once.
    adopted: bool,
    /// Where its program was laid out when its mappings were read.
    image: Option<ImageLayout>,
}

/// Where a process's program is laid out (`startcode`, `endcode` and
/// `startstack` of `/proc/PID/stat`): a fork keeps it, an exec moves it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ImageLayout {
    start_code: u64,
    end_code: u64,
    start_stack: u64,
}

impl ImageLayout {
    fn of(stat: &Stat) -> Option<Self> {
        (stat.startcode != 0).then_some(Self {
            start_code: stat.startcode,
            end_code: stat.endcode,
            start_stack: stat.startstack,
        })
    }
}

/// `/proc/PID/stat`, in one open and read (`Process::new` would open the
/// process's directory first: twice the work for each of many children).
fn stat_of(pid: u32) -> procfs::ProcResult<Stat> {
    Stat::from_file(format!("/proc/{pid}/stat"))
}

impl ProcessRecord {
    /// The name the process's perf map gives the JIT code at `address`,
    /// reading the map again (at most every 200 ms) when it does not.
    fn jit_name(&mut self, pid: u32, address: u64) -> Option<Arc<str>> {
        if let Some(name) = self.perf_map.as_ref().and_then(|map| map.lookup(address)) {
            return Some(name);
        }
        if self
            .perf_map_read
            .is_some_and(|read| read.elapsed() < Duration::from_millis(200))
        {
            return None;
        }
        self.perf_map_read = Some(Instant::now());
        match &mut self.perf_map {
            Some(map) => map.refresh(),
            None => self.perf_map = PerfMap::of_process(pid),
        }
        self.perf_map.as_ref()?.lookup(address)
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
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessStats {
    pub processes_tracked: u64,
    pub processes_seen: u64,
    pub binaries: u64,
}

/// The records of every process sampled recently.
#[derive(Debug, Default)]
pub struct ProcessTable {
    processes: HashMap<u32, ProcessRecord>,
    binaries: HashMap<BinaryKey, Arc<Binary>>,
    processes_seen: u64,
    /// Processes sampled but never recorded (gone too soon), counted in
    /// `processes_seen` once each, and when they were last sampled.
    unrecorded: HashMap<u32, Instant>,
    last_collection: Option<Instant>,
    cgroups: crate::kernel::cgroups::CgroupPaths,
    unwind_cache: UnwindCache,
    unwind_stats: UnwindStats,
    /// Most bytes of unwind information held (0: no limit).
    unwind_info_limit: u64,
}

/// Binaries a stack passed through this recently keep their unwind
/// information whatever the limit: evicting them would only read them again.
const UNWIND_INFO_IN_USE: Duration = Duration::from_secs(2);

impl ProcessTable {
    pub fn new() -> Self {
        Self::default()
    }

    /// Holds at most `bytes` of unwind information (0: no limit), letting
    /// go of the binaries whose processes were sampled least recently.
    pub fn with_unwind_info_limit(bytes: u64) -> Self {
        Self {
            unwind_info_limit: bytes,
            ..Self::default()
        }
    }

    /// Brings the unwind information held back under the limit (to three
    /// quarters of it, so that it is not done at every pass): the binaries
    /// of the processes sampled least recently go first, and every process
    /// that maps one builds its unwinder again when next sampled.
    pub fn enforce_unwind_info_limit(&mut self) {
        let limit = self.unwind_info_limit;
        if limit == 0 {
            return;
        }
        let held: Vec<(BinaryKey, u64)> = self.unwind_info_held().collect();
        let mut total: u64 = held.iter().map(|(_, bytes)| bytes).sum();
        if total <= limit {
            return;
        }
        // When each binary was last needed: by the most recently sampled
        // process that maps it.
        let mut last_used: HashMap<BinaryKey, Instant> = HashMap::new();
        for record in self.processes.values() {
            for mapping in &record.mappings {
                if let MappingTarget::File(binary) = &mapping.target {
                    let used = last_used.entry(binary.key).or_insert(record.last_used);
                    *used = (*used).max(record.last_used);
                }
            }
        }
        let now = Instant::now();
        let mut candidates: Vec<(Option<Instant>, BinaryKey)> = held
            .iter()
            .map(|(key, _)| (last_used.get(key).copied(), *key))
            .filter(|(used, _)| used.is_none_or(|used| now - used > UNWIND_INFO_IN_USE))
            .collect();
        candidates.sort();
        let target = limit / 4 * 3;
        let mut evicted = std::collections::HashSet::new();
        for (_, key) in candidates {
            if total <= target {
                break;
            }
            if let Some(binary) = self.binaries.get(&key) {
                total -= binary.drop_unwind_sections();
                evicted.insert(key);
            }
        }
        if evicted.is_empty() {
            return;
        }
        self.unwind_stats.binaries_evicted += evicted.len() as u64;
        for record in self.processes.values_mut() {
            let maps_evicted = record.mappings.iter().any(|mapping| {
                matches!(&mapping.target, MappingTarget::File(binary) if evicted.contains(&binary.key))
            });
            if maps_evicted {
                record.unwinder = None;
            }
        }
        debug!(
            binaries = evicted.len(),
            held_bytes = total,
            limit,
            "let go of the unwind information of binaries not sampled lately"
        );
    }

    /// Records (or re-records) a live process's name and mappings. Fails
    /// when the process is gone; an existing record is then kept, as it is
    /// when the process has no mappings left (it is exiting).
    pub fn record(&mut self, pid: u32) -> procfs::ProcResult<()> {
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
        if mappings.is_empty()
            && let Some(record) = self.processes.get_mut(&pid)
            && !record.mappings.is_empty()
        {
            record.recorded_at = now;
            return Ok(());
        }
        let earlier = match self.processes.remove(&pid) {
            Some(previous) => {
                let mut earlier = previous.earlier;
                if !previous.mappings.is_empty() {
                    earlier.insert(0, previous.mappings);
                    earlier.truncate(EARLIER_MAPS_KEPT);
                }
                earlier
            }
            None => {
                if self.unrecorded.remove(&pid).is_none() {
                    self.processes_seen += 1;
                }
                Vec::new()
            }
        };
        self.processes.insert(
            pid,
            ProcessRecord {
                name: name.into(),
                mappings,
                earlier,
                recorded_at: now,
                last_used: now,
                unwinder: None,
                perf_map: None,
                perf_map_read: None,
                adopted: false,
                image,
            },
        );
        Ok(())
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
        // map_files opens exactly the mapped file, even if it was deleted or
        // lives in another mount namespace; fall back to the process's root.
        let candidates = [
            PathBuf::from(format!("/proc/{pid}/map_files/{start:x}-{end:x}")),
            PathBuf::from(format!("/proc/{pid}/root")).join(path.strip_prefix("/").unwrap_or(path)),
        ];
        let file = candidates.iter().find_map(|path| File::open(path).ok());
        let Some(file) = file else {
            debug!(pid, path = %path.display(), "cannot open a mapped binary");
            return None;
        };
        let binary = Arc::new(Binary::from_file(key, display_path(path).into(), file));
        self.binaries.insert(key, binary.clone());
        Some(binary)
    }

    /// Unwinds a user stack from its registers and a copy of its top
    /// (`stack`, the user memory from `stack_base` on) with the unwind
    /// information of the binaries the process maps. A process not yet
    /// recorded is recorded first; one whose code moved since it was
    /// recorded (a library loaded later) is recorded again.
    pub fn unwind(
        &mut self,
        pid: u32,
        registers: UserRegisters,
        stack_base: u64,
        stack: &[u8],
    ) -> UnwoundStack {
        let started = Instant::now();
        if !self.processes.contains_key(&pid)
            && !self.adopt_forked(pid)
            && self.record(pid).is_err()
        {
            self.count_unrecorded(pid);
        }
        let mut unwound = self.unwind_recorded(pid, registers, stack_base, stack);
        // A process recorded at its first sample may have been recorded
        // while the dynamic loader was still mapping its libraries: read
        // its mappings again (at most every 10 ms; at once when they were
        // its parent's).
        let stale = self.processes.get(&pid).is_some_and(|record| {
            record.adopted || record.recorded_at.elapsed() > Duration::from_millis(10)
        });
        if unwound.stop == Some(UnwindStop::Unmapped) && stale && self.record(pid).is_ok() {
            unwound = self.unwind_recorded(pid, registers, stack_base, stack);
        }
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
            };
        };
        record.last_used = Instant::now();
        let unwinder = record
            .unwinder
            .get_or_insert_with(|| ProcessUnwinder::new(code_mappings(&record.mappings)));
        let unwound = unwinder.unwind(&mut self.unwind_cache, registers, stack_base, stack);
        if unwound.stop != Some(UnwindStop::Unmapped) || unwound.frames.len() > 1 {
            return unwound;
        }
        // The sampled instruction is in none of the current mappings: a
        // sample taken before an exec, unwound after it. The mappings it
        // ran with are among the earlier ones (rare: built as needed).
        for earlier in &record.earlier {
            let mut unwinder = ProcessUnwinder::new(code_mappings(earlier));
            let again = unwinder.unwind(&mut self.unwind_cache, registers, stack_base, stack);
            if again.stop != Some(UnwindStop::Unmapped) || again.frames.len() > 1 {
                return again;
            }
        }
        unwound
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

    /// Unwind outcomes so far, and the unwind information held.
    pub fn unwind_stats(&self) -> UnwindStats {
        let mut stats = self.unwind_stats.clone();
        stats.limit = self.unwind_info_limit;
        for (_, bytes) in self.unwind_info_held() {
            stats.binaries += 1;
            stats.bytes += bytes;
        }
        stats
    }

    /// The binaries whose unwind information is held, and its bytes.
    fn unwind_info_held(&self) -> impl Iterator<Item = (BinaryKey, u64)> + '_ {
        self.binaries
            .iter()
            .filter_map(|(key, binary)| Some((*key, binary.unwind_sections_held()?.bytes())))
    }

    /// Names every sample's process and normalizes its user stack. A
    /// process without a record, or with addresses outside its recorded
    /// mappings, is recorded (again) if it is still alive, once per batch.
    pub fn normalize_batch(&mut self, batch: RawBatch) -> NormalizedBatch {
        let started = Instant::now();
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

    /// Gives a process that could not be recorded (it exited first, or is a
    /// zombie without a memory map) the mappings of a recorded process of
    /// the same name whose mappings hold every address of `stack`: a child
    /// forked without exec shares its parent's address space, while the
    /// mappings of an unrelated process (randomized) would not hold them.
    /// Returns whether it did.
    fn adopt_mappings(&mut self, pid: u32, name: &str, stack: &[u64]) -> bool {
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
        let Some((&donor_pid, donor)) = donor else {
            return false;
        };
        debug!(
            pid,
            donor_pid,
            "a process gone before it was recorded gets the mappings of one it was forked from"
        );
        let mappings = donor.mappings.clone();
        self.adopt(pid, name.into(), mappings, None);
        true
    }

    /// A process forked without exec maps, when it is first seen, what the
    /// process it was forked from mapped. When its parent is recorded with
    /// the program laid out where the child's is (an exec would have moved
    /// it: [`ImageLayout`], as both were when read), the parent's mappings
    /// are taken instead of reading `/proc/PID/maps`, which costs the
    /// kernel far more for each of many short-lived children: one read of
    /// the child's `/proc/PID/stat` does. An address outside them later (a
    /// library the child loaded itself) has the child's own read at once.
    /// Returns whether it did.
    pub fn adopt_forked(&mut self, pid: u32) -> bool {
        let Ok(child) = stat_of(pid) else {
            return false;
        };
        let Some(image) = ImageLayout::of(&child) else {
            return false;
        };
        let Some(donor) = u32::try_from(child.ppid)
            .ok()
            .and_then(|parent| self.processes.get(&parent))
        else {
            return false;
        };
        if donor.mappings.is_empty() || donor.image != Some(image) {
            return false;
        }
        let mappings = donor.mappings.clone();
        self.adopt(pid, child.comm.as_str().into(), mappings, Some(image));
        true
    }

    /// Records `pid` with mappings taken from another process.
    fn adopt(
        &mut self,
        pid: u32,
        name: Arc<str>,
        mappings: Vec<Mapping>,
        image: Option<ImageLayout>,
    ) {
        let now = Instant::now();
        if self.processes.remove(&pid).is_none() && self.unrecorded.remove(&pid).is_none() {
            self.processes_seen += 1;
        }
        self.processes.insert(
            pid,
            ProcessRecord {
                name,
                mappings,
                earlier: Vec::new(),
                recorded_at: now,
                last_used: now,
                unwinder: None,
                perf_map: None,
                perf_map_read: None,
                adopted: true,
                image,
            },
        );
    }

    /// Counts a process sampled without ever being recorded, once.
    fn count_unrecorded(&mut self, pid: u32) {
        if self.unrecorded.insert(pid, Instant::now()).is_none() {
            self.processes_seen += 1;
        }
    }

    /// Whether the process has a record made at or after `since`.
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
                stack
                    .iter()
                    .map(|&address| match lookup(&record.mappings, address) {
                        UserAddress::Unmapped { .. } => {
                            complete = false;
                            record
                                .earlier
                                .iter()
                                .map(|earlier| lookup(earlier, address))
                                .find(|found| !matches!(found, UserAddress::Unmapped { .. }))
                                .unwrap_or(UserAddress::Unmapped { address })
                        }
                        UserAddress::Special { name, offset } if name.starts_with("[anon") => {
                            match record.jit_name(pid, address) {
                                Some(function) => UserAddress::Jit { function, address },
                                None => UserAddress::Special { name, offset },
                            }
                        }
                        found => found,
                    })
                    .collect()
            }
            None => {
                complete = stack.is_empty();
                stack
                    .iter()
                    .map(|&address| UserAddress::Unmapped { address })
                    .collect()
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
    }

    pub fn stats(&self) -> ProcessStats {
        ProcessStats {
            processes_tracked: self.processes.len() as u64,
            processes_seen: self.processes_seen,
            binaries: self.binaries.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_this_process_and_normalizes_its_code() {
        let mut table = ProcessTable::new();
        let pid = std::process::id();
        table.record(pid).unwrap();
        let here = records_this_process_and_normalizes_its_code as *const () as u64;
        let (frames, complete) = table.normalize(pid, &[here, 0x10]);
        assert!(!complete, "0x10 is mapped by nothing");
        let stack_variable = 0_u64;
        let (data, _) = table.normalize(pid, &[&raw const stack_variable as u64]);
        assert!(
            // A test thread's stack is anonymous memory, the main thread's [stack].
            matches!(&data[0], UserAddress::Special { name, .. } if name.ends_with("] (not code)")),
            "{data:?}"
        );
        match &frames[0] {
            UserAddress::File { binary, offset } => {
                let exe = std::env::current_exe().unwrap();
                assert_eq!(&*binary.path, exe.to_str().unwrap());
                assert!(*offset > 0 && *offset < std::fs::metadata(&exe).unwrap().len());
                assert!(std::fs::metadata(binary.readable_path()).is_ok());
            }
            other => panic!("expected a file-backed address, got {other:?}"),
        }
        assert!(matches!(frames[1], UserAddress::Unmapped { address: 0x10 }));
        assert_eq!(table.stats().processes_seen, 1);
    }

    #[test]
    fn an_exiting_process_keeps_the_mappings_it_was_recorded_with() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let mut table = ProcessTable::new();
        // Wait until sleep has replaced the forked test binary.
        while !std::fs::read_link(format!("/proc/{pid}/exe"))
            .is_ok_and(|exe| exe.ends_with("sleep"))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        table.record(pid).unwrap();
        let code = table.processes[&pid].mappings[0].start;
        child.kill().unwrap();
        // Not reaped yet: a zombie, whose memory map is gone.
        while !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| stat.contains(") Z "))
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        table.record(pid).unwrap();
        let (frames, complete) = table.normalize(pid, &[code]);
        assert!(complete, "{frames:?}");
        child.wait().unwrap();
    }

    #[test]
    fn a_process_gone_unrecorded_adopts_the_mappings_of_its_forking_parent() {
        let mut table = ProcessTable::new();
        let pid = std::process::id();
        table.record(pid).unwrap();
        let name = table.processes[&pid].name.clone();
        let here = records_this_process_and_normalizes_its_code as *const () as u64;
        let gone = u32::MAX - 2;
        assert!(!table.adopt_mappings(gone, "another-name", &[here]));
        assert!(!table.adopt_mappings(gone, &name, &[here, 0x10]));
        assert!(table.adopt_mappings(gone, &name, &[here]));
        let (frames, complete) = table.normalize(gone, &[here]);
        assert!(complete, "{frames:?}");
        assert!(matches!(frames[0], UserAddress::File { .. }));
        assert_eq!(table.stats().processes_seen, 2);
        // A recorded process keeps its own mappings.
        assert!(!table.adopt_mappings(pid, &name, &[here]));
    }

    #[test]
    fn a_child_forked_without_exec_takes_its_parents_mappings_and_an_exec_does_not() {
        let mut table = ProcessTable::new();
        let pid = std::process::id();
        // SAFETY: the child only waits for its signal, then exits: nothing
        // of the (multithreaded) parent's state is touched in it. (It is
        // killed below even when an assertion fails first.)
        let child = unsafe { libc::fork() };
        if child == 0 {
            // SAFETY: async-signal-safe calls only, in the forked child.
            unsafe {
                libc::pause();
                libc::_exit(0);
            }
        }
        assert!(child > 0, "fork failed");
        struct Reap(i32);
        impl Drop for Reap {
            fn drop(&mut self) {
                // SAFETY: signalling and reaping the child forked above.
                unsafe {
                    libc::kill(self.0, libc::SIGKILL);
                    libc::waitpid(self.0, &mut 0, 0);
                }
            }
        }
        let _reap = Reap(child);
        let child = child as u32;
        let execed = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .expect("sleep starts");
        // Not yet: the parent is not recorded.
        assert!(!table.adopt_forked(child));
        table.record(pid).unwrap();
        assert!(table.adopt_forked(child));
        assert!(table.processes[&child].adopted);
        assert_eq!(
            table.processes[&child].mappings.len(),
            table.processes[&pid].mappings.len()
        );
        assert!(!table.adopt_forked(execed.id()));
        let mut execed = execed;
        let _ = execed.kill();
        let _ = execed.wait();
    }

    #[test]
    fn earlier_maps_survive_two_records() {
        let mut table = ProcessTable::new();
        let pid = std::process::id();
        table.record(pid).unwrap();
        let first = table.processes[&pid].mappings.clone();
        table.processes.get_mut(&pid).unwrap().mappings.clear();
        table.record(pid).unwrap();
        table.record(pid).unwrap();
        let record = &table.processes[&pid];
        assert_eq!(record.earlier.len(), 1, "an empty map is not kept");
        // Code is mapped as it was (data comes and goes with the test threads).
        let code = |mappings: &[Mapping]| mappings.iter().filter(|mapping| mapping.code).count();
        assert_eq!(code(&record.earlier[0]), code(&first));
        table.record(pid).unwrap();
        table.record(pid).unwrap();
        table.record(pid).unwrap();
        assert_eq!(table.processes[&pid].earlier.len(), EARLIER_MAPS_KEPT);
    }

    #[test]
    fn unknown_process_gives_unmapped_addresses() {
        let mut table = ProcessTable::new();
        let (frames, complete) = table.normalize(u32::MAX - 1, &[0x1000]);
        assert!(!complete);
        assert!(matches!(
            frames[0],
            UserAddress::Unmapped { address: 0x1000 }
        ));
        assert!(table.record(u32::MAX - 1).is_err());
    }

    #[test]
    fn device_numbers_match_stat() {
        use std::os::unix::fs::MetadataExt as _;
        let exe = std::env::current_exe().unwrap();
        let metadata = std::fs::metadata(&exe).unwrap();
        let dev = metadata.dev();
        let major = ((dev >> 32) & 0xfffff000) | ((dev >> 8) & 0xfff);
        let minor = ((dev >> 12) & 0xffffff00) | (dev & 0xff);
        assert_eq!(device_number((major as i32, minor as i32)), dev);
    }
}
