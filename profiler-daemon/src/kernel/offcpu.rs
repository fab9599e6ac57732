//! The kernel side of off-CPU time: which processes the switch program
//! records (turned on by the requests that ask for off-CPU or wall-clock
//! time, for their duration only, and by the `offcpu` sampling setting),
//! and the intervals it hands back.
//!
//! Owns the off-CPU control, pids and pending maps, their filters and the
//! intervals ring buffer; it must not unwind, charge or store (the
//! pipeline does).

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
};

use aya::maps::{Array, HashMap, MapData, RingBuf};
use profiler_common::offcpu::{
    Control, FILTER_SLOTS, Interval, Pending, WaitingThread, filter_slot, flags,
};
use tracing::warn;

use crate::lock;

/// Capacity of the map of recorded processes (the loaded programs size it so).
pub const MAX_RECORDED_PIDS: u32 = 1 << 12;

/// What a recording asks the kernel for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// Every process (with user memory).
    Everything,
    /// These processes.
    Pids(Vec<u32>),
}

/// Where recordings go: the kernel's maps (or, in tests, memory).
pub trait RecordingMaps: Send {
    fn set_control(&mut self, control: Control);
    fn set_pids(&mut self, pids: &[u32]);
    /// Empties the pending map and its filter (only while the programs
    /// are detached); returns how many waits it held whose stack copy was
    /// lost (the pipeline never saw them begin).
    fn clear_pending(&mut self) -> u64;
}

/// The pending counts of the tid slots, one value in the kernel.
pub type PendingSlots = [u64; FILTER_SLOTS as usize];

/// The kernel's control and pids maps, and the filters over them.
pub struct BpfRecordingMaps {
    pub control: Array<MapData, Control>,
    pub pids: HashMap<MapData, u32, u32>,
    /// Per pid slot, how many recorded processes fall in it.
    pub pid_slots: Array<MapData, u32>,
    /// A handle of its own on the pending map (the pipeline has another).
    pub pending: HashMap<MapData, u32, Pending>,
    pub pending_slots: Array<MapData, PendingSlots>,
    /// What the pids map holds now.
    pub held: Vec<u32>,
}

/// How many of `pids` fall in each slot they touch.
fn slot_counts(pids: &[u32]) -> BTreeMap<u32, u32> {
    let mut counts = BTreeMap::new();
    for &pid in pids {
        *counts.entry(filter_slot(pid)).or_insert(0) += 1;
    }
    counts
}

impl RecordingMaps for BpfRecordingMaps {
    fn set_control(&mut self, control: Control) {
        if let Err(err) = self.control.set(0, control, 0) {
            warn!("cannot update the off-CPU control map: {err}");
        }
    }

    fn set_pids(&mut self, pids: &[u32]) {
        let (before, after) = (slot_counts(&self.held), slot_counts(pids));
        // A slot counts its pids before they are in the map, and after
        // they left it.
        for (&slot, &count) in &after {
            if before.get(&slot).is_none_or(|&held| held < count) {
                let _ = self.pid_slots.set(slot, count, 0);
            }
        }
        for gone in self.held.iter().filter(|pid| !pids.contains(pid)) {
            let _ = self.pids.remove(gone);
        }
        for &pid in pids {
            if let Err(err) = self.pids.insert(pid, 1, 0) {
                warn!(pid, "cannot record the process off CPU: {err}");
            }
        }
        for (&slot, &held) in &before {
            let count = after.get(&slot).copied().unwrap_or(0);
            if count < held {
                let _ = self.pid_slots.set(slot, count, 0);
            }
        }
        self.held = pids.to_vec();
    }

    fn clear_pending(&mut self) -> u64 {
        let tids: Vec<u32> = self.pending.keys().filter_map(Result::ok).collect();
        let mut stack_lost = 0;
        for tid in tids {
            if self
                .pending
                .get(&tid, 0)
                .is_ok_and(|pending| pending.flags & flags::STACK_LOST != 0)
            {
                stack_lost += 1;
            }
            let _ = self.pending.remove(&tid);
        }
        let zeros: Box<PendingSlots> = vec![0; FILTER_SLOTS as usize]
            .into_boxed_slice()
            .try_into()
            .expect("the length is FILTER_SLOTS");
        if let Err(err) = self.pending_slots.set(0, zeros, 0) {
            warn!("cannot reset the off-CPU pending filter: {err}");
        }
        stack_lost
    }
}

/// Attaches and detaches the switch and wake-up programs: they run only
/// while something is recorded, so that at rest a context switch costs
/// nothing.
pub trait SwitchPrograms: Send + Sync {
    fn set_attached(&self, attached: bool) -> Result<(), String>;
}

/// Reads the saved user registers and kernel stacks of a process's
/// threads (the kernel's task iterator, or in tests nothing).
pub trait WaitingThreadSource: Send + Sync {
    fn read(&self, pid: u32) -> Result<Vec<WaitingThread>, String>;
}

/// The recordings under way, shared by the service's requests; the kernel
/// records their union.
#[derive(Clone)]
pub struct OffCpuRecorder {
    inner: Arc<Mutex<RecorderState>>,
}

struct RecorderState {
    /// `None` when the switch program is not running, and why.
    maps: Result<Box<dyn RecordingMaps>, String>,
    recordings: BTreeMap<u64, Recorded>,
    next_id: u64,
    threads: Option<Arc<dyn WaitingThreadSource>>,
    /// `None` until set: the programs are then taken to be attached.
    programs: Option<Arc<dyn SwitchPrograms>>,
    recorded: RecordedProcesses,
    /// The `offcpu` setting: the probability that any other wait is
    /// recorded (0: none).
    sample_probability: f64,
    /// Waits the kernel still held when the last recording ended whose
    /// stack copy had been lost.
    dropped: u64,
    /// What recording lacks on this kernel, if anything.
    limitation: Option<String>,
}

impl OffCpuRecorder {
    /// `maps` is the reason off-CPU recording is unavailable when it is.
    pub fn new(maps: Result<Box<dyn RecordingMaps>, String>, sample_probability: f64) -> Self {
        let recorder = Self {
            inner: Arc::new(Mutex::new(RecorderState {
                maps,
                recordings: BTreeMap::new(),
                next_id: 0,
                threads: None,
                programs: None,
                recorded: RecordedProcesses::default(),
                sample_probability,
                dropped: 0,
                limitation: None,
            })),
        };
        lock(&recorder.inner).apply_or_warn();
        recorder
    }

    /// Where the switch programs are attached and detached from; they are
    /// attached now if something is recorded.
    pub fn set_switch_programs(&self, programs: Arc<dyn SwitchPrograms>) {
        let mut state = lock(&self.inner);
        state.programs = Some(programs);
        state.apply_or_warn();
    }

    /// Which processes are recorded, as it changes.
    pub fn recorded(&self) -> RecordedProcesses {
        lock(&self.inner).recorded.clone()
    }

    /// Where the registers of threads already waiting are read from.
    pub fn set_thread_source(&self, source: Arc<dyn WaitingThreadSource>) {
        lock(&self.inner).threads = Some(source);
    }

    /// The saved registers and kernel stacks of `pid`'s threads (none when
    /// they cannot be read: procfs then says what it can).
    pub fn waiting_threads(&self, pid: u32) -> Vec<WaitingThread> {
        let source = lock(&self.inner).threads.clone();
        match source.map(|source| source.read(pid)) {
            Some(Ok(threads)) => threads,
            Some(Err(err)) => {
                warn!(
                    pid,
                    "cannot read the registers of the process's threads: {err}"
                );
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Why off-CPU time cannot be recorded, if it cannot.
    pub fn unavailable(&self) -> Option<String> {
        lock(&self.inner).maps.as_ref().err().cloned()
    }

    /// What recording lacks on this kernel, if anything.
    pub fn limitation(&self) -> Option<String> {
        lock(&self.inner).limitation.clone()
    }

    /// Says what recording lacks on this kernel (the switch program
    /// loaded is not the whole one).
    pub fn set_limitation(&self, limitation: Option<String>) {
        lock(&self.inner).limitation = limitation;
    }

    /// Records `what` until the returned guard is dropped.
    pub fn record(&self, what: Recorded) -> Result<RecordingGuard, String> {
        let mut state = lock(&self.inner);
        if let Err(reason) = &state.maps {
            return Err(reason.clone());
        }
        let id = state.next_id;
        state.next_id += 1;
        state.recordings.insert(id, what);
        if let Err(reason) = state.apply() {
            state.recordings.remove(&id);
            state.apply_or_warn();
            return Err(reason);
        }
        Ok(RecordingGuard {
            recorder: self.clone(),
            id,
        })
    }

    /// The `offcpu` setting changed (configuration reload).
    pub fn set_sample_probability(&self, probability: f64) {
        let mut state = lock(&self.inner);
        state.sample_probability = probability;
        state.apply_or_warn();
    }

    /// The `offcpu` setting.
    pub fn sample_probability(&self) -> f64 {
        lock(&self.inner).sample_probability
    }

    /// How many recordings are under way.
    pub fn recordings(&self) -> usize {
        lock(&self.inner).recordings.len()
    }

    /// Waits whose stack copy was lost that the kernel still held when the
    /// last recording ended (so neither charged nor seen unmatched; their
    /// loss is counted as the stack copy's).
    pub fn dropped(&self) -> u64 {
        lock(&self.inner).dropped
    }
}

impl RecorderState {
    fn apply_or_warn(&mut self) {
        if let Err(err) = self.apply() {
            warn!("{err}");
        }
    }

    /// Puts the recordings into the kernel: the programs attached while
    /// anything is recorded, the control and pids maps.
    fn apply(&mut self) -> Result<(), String> {
        let everything = self
            .recordings
            .values()
            .any(|recorded| *recorded == Recorded::Everything);
        let mut pids: Vec<u32> = self
            .recordings
            .values()
            .filter_map(|recorded| match recorded {
                Recorded::Pids(pids) => Some(pids.iter().copied()),
                Recorded::Everything => None,
            })
            .flatten()
            .collect();
        pids.sort_unstable();
        pids.dedup();
        pids.truncate(MAX_RECORDED_PIDS as usize);
        let control = Control {
            all: u32::from(everything),
            pids: u32::from(!pids.is_empty()),
            sample_threshold: sample_threshold(self.sample_probability),
            kernel_threads: 0,
        };
        let active = control.active();
        let mut released = false;
        if let Ok(maps) = &mut self.maps {
            if active && let Some(programs) = &self.programs {
                programs
                    .set_attached(true)
                    .map_err(|err| format!("cannot attach the off-CPU programs: {err}"))?;
            }
            // Pids first, so that the control never points at a stale set.
            maps.set_pids(&pids);
            maps.set_control(control);
            if !active {
                if let Some(programs) = &self.programs {
                    programs
                        .set_attached(false)
                        .map_err(|err| format!("cannot detach the off-CPU programs: {err}"))?;
                }
                // Nothing will end these waits now; the next recording
                // starts afresh.
                self.dropped += maps.clear_pending();
                released = true;
            }
        }
        let now_ns = monotonic_now_ns();
        let mut recorded = crate::write_lock(&self.recorded);
        recorded.change_to(everything || control.sample_threshold != 0, pids, now_ns);
        if released {
            recorded.released_ns = now_ns;
        }
        Ok(())
    }
}

/// Which processes are recorded now, for the pipeline: the waits of a
/// process no longer recorded stop being credited, at the end of its
/// recording.
#[derive(Clone, Debug, Default)]
pub struct RecordedNow {
    everything: bool,
    /// Sorted.
    pids: Vec<u32>,
    /// When the recording of every process last ended (monotonic ns).
    everything_ended_ns: Option<u64>,
    /// When the recording of these processes last ended, for
    /// [`ENDINGS_KEPT_NS`] (the pipeline ends their waits at its next
    /// drain).
    pids_ended_ns: BTreeMap<u32, u64>,
    /// When the kernel last let go of every pending wait (monotonic ns; 0:
    /// never): the waits the pipeline began before then will not end.
    released_ns: u64,
}

/// How long the end of a process's recording is remembered.
const ENDINGS_KEPT_NS: u64 = 60_000_000_000;

impl RecordedNow {
    pub fn includes(&self, pid: u32) -> bool {
        self.everything || self.pids.binary_search(&pid).is_ok()
    }

    /// When the recording of `pid`, not recorded now, ended (monotonic ns),
    /// if that is remembered.
    pub fn ended_ns(&self, pid: u32) -> Option<u64> {
        let own = self.pids_ended_ns.get(&pid).copied();
        own.max(self.everything_ended_ns)
    }

    /// Records `pids` (sorted), or every process, from `now_ns` on.
    fn change_to(&mut self, everything: bool, pids: Vec<u32>, now_ns: u64) {
        if self.everything && !everything {
            self.everything_ended_ns = Some(now_ns);
        }
        self.pids_ended_ns
            .retain(|_, &mut at| now_ns.saturating_sub(at) < ENDINGS_KEPT_NS);
        if !everything {
            let ended = self
                .pids
                .iter()
                .filter(|pid| pids.binary_search(pid).is_err());
            // The latest end of each.
            self.pids_ended_ns.extend(ended.map(|&pid| (pid, now_ns)));
        }
        self.everything = everything;
        self.pids = pids;
    }

    /// When the kernel last let go of every pending wait (monotonic ns; 0:
    /// never).
    pub fn released_ns(&self) -> u64 {
        self.released_ns
    }

    pub fn is_nothing(&self) -> bool {
        !self.everything && self.pids.is_empty()
    }
}

/// A shared view of [`RecordedNow`].
pub type RecordedProcesses = Arc<std::sync::RwLock<RecordedNow>>;

/// CLOCK_MONOTONIC now, the kernel's `bpf_ktime_get_ns` clock.
pub fn monotonic_now_ns() -> u64 {
    let now = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    now.tv_sec as u64 * 1_000_000_000 + now.tv_nsec as u64
}

/// The kernel's threshold for a probability: a wait is recorded when a
/// random u32 falls below it.
pub fn sample_threshold(probability: f64) -> u32 {
    (probability.clamp(0.0, 1.0) * f64::from(u32::MAX)).round() as u32
}

/// The factor that scales a sampled wait back up.
pub fn sample_scale(threshold: u32) -> f64 {
    if threshold == 0 {
        1.0
    } else {
        f64::from(u32::MAX) / f64::from(threshold)
    }
}

/// Keeps a recording on; dropping it ends it.
pub struct RecordingGuard {
    recorder: OffCpuRecorder,
    id: u64,
}

impl Drop for RecordingGuard {
    fn drop(&mut self) {
        let mut state = lock(&self.recorder.inner);
        state.recordings.remove(&self.id);
        state.apply_or_warn();
    }
}

/// The intervals the switch program hands back, and its pending map (to
/// tell an interval whose end was lost from one still under way).
pub struct OffCpuIntervals {
    ring: RingBuf<MapData>,
    pending: HashMap<MapData, u32, Pending>,
    /// Per tid slot, whether the daemon put a wait in the pending map.
    marks: Array<MapData, u32>,
    /// The slots marked since the marks were last cleared.
    marked: std::collections::BTreeSet<u32>,
    /// Records too short to be an interval (cannot happen with a matching
    /// build; counted rather than assumed).
    pub malformed: u64,
}

impl std::os::fd::AsFd for OffCpuIntervals {
    /// The ring buffer's file: readable once its writers wake its reader.
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        std::os::fd::AsFd::as_fd(&self.ring)
    }
}

impl OffCpuIntervals {
    pub fn new(
        ring: RingBuf<MapData>,
        pending: HashMap<MapData, u32, Pending>,
        marks: Array<MapData, u32>,
    ) -> Self {
        Self {
            ring,
            pending,
            marks,
            marked: Default::default(),
            malformed: 0,
        }
    }

    /// Clears the marks of the waits the daemon put in the pending map
    /// (when nothing is recorded: they would only cost lookups).
    pub fn clear_marks(&mut self) {
        for slot in std::mem::take(&mut self.marked) {
            let _ = self.marks.set(slot, 0, 0);
        }
    }

    /// Every interval ended so far, oldest first.
    pub fn read(&mut self) -> Vec<Interval> {
        let mut intervals = Vec::new();
        while let Some(item) = self.ring.next() {
            match super::plain_record::<Interval>(&item) {
                Some(interval) => intervals.push(interval),
                None => self.malformed += 1,
            }
        }
        intervals
    }

    /// Forgets the thread's wait under way (its process is no longer
    /// recorded, and its switch-in will not be seen).
    pub fn forget(&mut self, tid: u32) {
        let _ = self.pending.remove(&tid);
    }

    /// The thread's wait under way, as the kernel holds it, if one is.
    pub fn pending(&self, tid: u32) -> Option<Pending> {
        self.pending.get(&tid, 0).ok()
    }

    /// Tells the kernel that the thread (of process `pid`) waits since
    /// before recording began, so that its wake-up and switch-in end the
    /// wait (unless the kernel already holds a wait of it).
    pub fn expect_unknown_start(&mut self, pid: u32, tid: u32) {
        let pending = Pending {
            pid,
            tid,
            kind: 0,
            flags: profiler_common::offcpu::flags::UNKNOWN_START,
            switched_out_ns: 0,
            woken_ns: 0,
        };
        const BPF_NOEXIST: u64 = 1;
        // EEXIST: the kernel recorded a wait of it meanwhile, which stays;
        // anything else (a full map) leaves the wait uncharged.
        // Marked first: the switch-in that ends it looks it up only then.
        let slot = filter_slot(tid);
        if !self.marked.contains(&slot) {
            if let Err(err) = self.marks.set(slot, 1, 0) {
                tracing::debug!(tid, "cannot mark a thread already waiting: {err}");
                return;
            }
            self.marked.insert(slot);
        }
        if let Err(err) = self.pending.insert(tid, pending, BPF_NOEXIST) {
            tracing::debug!(tid, "cannot note a thread already waiting: {err}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Memory {
        control: Arc<Mutex<(Control, Vec<u32>)>>,
    }

    impl RecordingMaps for Memory {
        fn set_control(&mut self, control: Control) {
            lock(&self.control).0 = control;
        }
        fn set_pids(&mut self, pids: &[u32]) {
            lock(&self.control).1 = pids.to_vec();
        }
        fn clear_pending(&mut self) -> u64 {
            0
        }
    }

    #[test]
    fn pid_slots_count_the_pids_that_fall_in_them() {
        let counts = slot_counts(&[3, 3 + FILTER_SLOTS, 9]);
        assert_eq!(counts, BTreeMap::from([(3, 2), (9, 1)]));
    }

    #[test]
    fn the_kernel_records_the_union_of_the_recordings_under_way() {
        let memory = Memory::default();
        let seen = memory.control.clone();
        let recorder = OffCpuRecorder::new(Ok(Box::new(memory)), 0.0);
        assert!(!lock(&seen).0.active());
        let first = recorder.record(Recorded::Pids(vec![7, 3])).unwrap();
        let second = recorder.record(Recorded::Pids(vec![3, 9])).unwrap();
        assert_eq!(lock(&seen).1, [3, 7, 9]);
        assert_eq!(lock(&seen).0.pids, 1);
        let recorded = recorder.recorded();
        assert!(crate::read_lock(&recorded).includes(7));
        assert!(!crate::read_lock(&recorded).includes(5));
        drop(first);
        assert_eq!(lock(&seen).1, [3, 9]);
        let everything = recorder.record(Recorded::Everything).unwrap();
        assert_eq!(lock(&seen).0.all, 1);
        drop((second, everything));
        assert!(!lock(&seen).0.active(), "{:?}", lock(&seen).0);
        assert!(!crate::read_lock(&recorded).includes(3));
        recorder.set_sample_probability(0.5);
        assert!(lock(&seen).0.active());
        assert!((sample_scale(lock(&seen).0.sample_threshold) - 2.0).abs() < 1e-6);
    }

    #[test]
    fn the_end_of_each_processs_recording_is_remembered() {
        let mut recorded = RecordedNow::default();
        recorded.change_to(false, vec![3, 7], 100);
        assert_eq!(recorded.ended_ns(3), None);
        recorded.change_to(false, vec![7], 200);
        assert_eq!(recorded.ended_ns(3), Some(200));
        recorded.change_to(true, vec![7], 300);
        recorded.change_to(false, vec![], 400);
        // 3 was recorded again with every process, 7 by its own recording
        // and every process: both until 400.
        assert_eq!(recorded.ended_ns(3), Some(400));
        assert_eq!(recorded.ended_ns(7), Some(400));
        assert_eq!(recorded.ended_ns(5), Some(400), "every process was");
        // Forgotten after a minute.
        let mut only_pids = RecordedNow::default();
        only_pids.change_to(false, vec![3], 0);
        only_pids.change_to(false, vec![], 10);
        only_pids.change_to(false, vec![], 10 + ENDINGS_KEPT_NS);
        assert_eq!(only_pids.ended_ns(3), None);
    }

    #[test]
    fn without_the_program_recordings_are_refused_with_the_reason() {
        let recorder = OffCpuRecorder::new(Err("no BTF".into()), 0.0);
        assert_eq!(
            recorder.record(Recorded::Everything).err().as_deref(),
            Some("no BTF")
        );
    }
}
