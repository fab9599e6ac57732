//! Draining the kernel's maps into raw samples without losing or counting
//! twice what the sampling program keeps writing.
//!
//! The program writes into one of two generations of maps, chosen by the
//! control map. A drain flips the generation, waits for program runs that
//! began before the flip to finish (each CPU counts its runs under way),
//! then reads and empties the generation that is now idle. This module
//! owns those maps and the running totals of the kernel's counters; it must
//! not interpret addresses (that is the process table's and the
//! symbolizer's work).

use std::{
    collections::HashMap as StdHashMap,
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use aya::maps::{HashMap, MapData, MapError};
use profiler_common::{
    COUNTER_COUNT, Control, Counter, SampleKey, SampleKind, SampleValue, StackTrace, sample_flags,
};
use tracing::warn;

use crate::{
    kernel::programs::DrainMaps,
    profile::{LossCause, UnwindStop},
};

/// The longest a drain waits after flipping generations for runs under
/// way to finish. A run of the sampling program takes microseconds and
/// cannot be preempted, so one that read the old generation has finished
/// long before this; only a vCPU stalled by its hypervisor for longer could
/// still write into the drained maps.
pub const GRACE_PERIOD: Duration = Duration::from_millis(10);

/// How often a drain looks again at the runs under way.
const RECORDING_POLL: Duration = Duration::from_micros(50);

/// Samples of one thread with one pair of stacks, as the kernel counted them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawSample {
    pub pid: u32,
    pub tid: u32,
    /// Real user and group ids and cgroup (v2) id of the thread.
    pub uid: u32,
    pub gid: u32,
    pub cgroup: u64,
    /// The thread's command name, as the kernel had it.
    pub thread_name: Arc<str>,
    pub kind: SampleKind,
    /// [`sample_flags`] bits.
    pub flags: u32,
    /// User stack, leaf first; empty when there was none.
    pub user: Arc<[u64]>,
    /// Why the user stack, unwound in the daemon, stops short, if it does.
    pub user_stop: Option<UnwindStop>,
    /// Kernel stack, leaf first; empty when there was none.
    pub kernel: Arc<[u64]>,
    pub count: u64,
    pub weight: u64,
    /// An allocation sample's id (its entry in the kernel's live map); 0
    /// for other samples.
    pub allocation_id: u64,
    /// When each of a peek's ticks was taken (monotonic nanoseconds, as
    /// `bpf_ktime_get_ns`); empty for other samples.
    pub times_ns: Vec<u64>,
}

/// The kernel counters' increments over one drain, indexed by [`Counter`].
pub type CounterDeltas = [u64; COUNTER_COUNT as usize];

/// What a kernel counter counts the loss of; `None` for the samples counter.
pub fn loss_cause(counter: Counter) -> Option<LossCause> {
    Some(match counter {
        Counter::Samples
        | Counter::PeekSamples
        | Counter::PeekSignals
        | Counter::LostPeekSignal
        | Counter::OutsideTargets
        | Counter::StackCopies
        | Counter::Switches
        | Counter::OffCpuRecorded
        | Counter::AllocSampled
        | Counter::LostForkRecord
        | Counter::OffCpuLostWhole => return None,
        Counter::AllocStackCopyRingFull => LossCause::AllocStackLost,
        Counter::AllocCallsFull => LossCause::AllocCallsFull,
        Counter::AllocShareFull => LossCause::AllocShareFull,
        Counter::OffCpuPendingFull => LossCause::OffCpuPendingFull,
        Counter::OffCpuStackCopyRingFull => LossCause::OffCpuStackLost,
        Counter::OffCpuIntervalsFull => LossCause::OffCpuIntervalsFull,
        Counter::StackCopyRingFull => LossCause::StackCopyBufferFull,
        Counter::LostCountsMapFull => LossCause::CountsMapFull,
        Counter::LostStackMapFull => LossCause::StackMapFull,
        Counter::LostStackCollision => LossCause::StackCollision,
        Counter::LostStackWalkError => LossCause::StackWalkError,
        Counter::LostNoScratch => LossCause::NoScratch,
        Counter::LostProcessNotification => LossCause::ProcessNotification,
    })
}

/// Every loss counter's value, by cause (zeros included).
pub fn losses(counters: &CounterDeltas) -> impl Iterator<Item = (LossCause, u64)> + '_ {
    Counter::ALL
        .into_iter()
        .filter_map(|counter| Some((loss_cause(counter)?, counters[counter as usize])))
}

/// Everything one drain read: the samples taken between two flips.
#[derive(Clone, Debug)]
pub struct RawBatch {
    /// The previous flip: samples were taken after it…
    pub start: SystemTime,
    /// …and before this one.
    pub end: SystemTime,
    pub samples: Vec<RawSample>,
    pub counters: CounterDeltas,
}

/// Owns the draining maps and the generation the program writes into.
pub struct Drainer {
    maps: DrainMaps,
    /// The generation the program currently writes into.
    generation: u32,
    last_flip: SystemTime,
    counter_totals: CounterDeltas,
    thread_names: ThreadNames,
    /// Whether the kernel takes batch map operations (until it refuses).
    batches: bool,
}

impl Drainer {
    pub fn new(mut maps: DrainMaps) -> Result<Self, MapError> {
        maps.control.set(0, Control::default(), 0)?;
        Ok(Self {
            maps,
            generation: 0,
            last_flip: SystemTime::now(),
            counter_totals: [0; COUNTER_COUNT as usize],
            thread_names: ThreadNames::default(),
            batches: true,
        })
    }

    /// Flips the generation and reads out the one just left. Errors reading
    /// single entries are logged and skipped; the batch holds what was read.
    pub fn drain(&mut self) -> Result<RawBatch, MapError> {
        let drained = self.generation as usize;
        let next = 1 - self.generation;
        self.maps.control.set(
            0,
            Control {
                generation: next,
                reserved: 0,
            },
            0,
        )?;
        let flipped_at = SystemTime::now();
        self.generation = next;
        self.wait_for_runs_under_way();

        let stacks = take_all(&mut self.maps.stacks[drained], &mut self.batches);
        let counts = take_all(&mut self.maps.counts[drained], &mut self.batches);
        let samples = raw_samples(counts, stacks, &mut self.thread_names);

        let batch = RawBatch {
            start: self.last_flip,
            end: flipped_at,
            samples,
            counters: self.counter_deltas(),
        };
        self.last_flip = flipped_at;
        Ok(batch)
    }

    /// Waits until no sampling run that may have read the old generation
    /// is still writing, at most [`GRACE_PERIOD`].
    ///
    /// Each run adds 1 to its CPU's count with a locked add before it reads
    /// the generation, and takes it away after its last write. On x86 a
    /// locked add is a full barrier, so once this thread's flip is ordered
    /// before its reads (the fence), a CPU whose count reads 0 has no run
    /// left that read the old generation. Elsewhere the BPF target's atomic
    /// add orders nothing, and the whole grace period is waited.
    fn wait_for_runs_under_way(&self) {
        if !cfg!(target_arch = "x86_64") {
            std::thread::sleep(GRACE_PERIOD);
            return;
        }
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        let deadline = Instant::now() + GRACE_PERIOD;
        loop {
            match self.maps.recording.get(&0, 0) {
                Ok(per_cpu) if per_cpu.iter().all(|&runs| runs == 0) => return,
                Ok(_) => {}
                Err(err) => {
                    warn!(
                        "cannot read the sampling runs under way, waiting the grace period: {err}"
                    );
                    std::thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    return;
                }
            }
            if Instant::now() >= deadline {
                return;
            }
            std::thread::sleep(RECORDING_POLL);
        }
    }

    /// The counters' growth since the previous drain, summed over CPUs.
    fn counter_deltas(&mut self) -> CounterDeltas {
        let mut deltas = [0; COUNTER_COUNT as usize];
        for counter in Counter::ALL {
            let index = counter as usize;
            match self.maps.counters.get(&(counter as u32), 0) {
                Ok(per_cpu) => {
                    let total: u64 = per_cpu.iter().sum();
                    deltas[index] = total.saturating_sub(self.counter_totals[index]);
                    self.counter_totals[index] = total;
                }
                Err(err) => warn!(?counter, "cannot read a kernel counter: {err}"),
            }
        }
        deltas
    }
}

/// The samples of a drained generation: each counts entry with its stacks
/// (a stack the stacks map lost is flagged as lost), its kind known, its
/// thread's name interned.
fn raw_samples(
    counts: Vec<(SampleKey, SampleValue)>,
    stacks: Vec<(u64, StackTrace)>,
    thread_names: &mut ThreadNames,
) -> Vec<RawSample> {
    let stacks: StdHashMap<u64, Arc<[u64]>> = stacks
        .into_iter()
        .map(|(key, stack)| (key, Arc::from(stack.frames())))
        .collect();
    let empty: Arc<[u64]> = Arc::from([]);
    counts
        .into_iter()
        .filter_map(|(key, value)| {
            let kind = SampleKind::from_raw(key.kind)?;
            let mut flags = key.flags;
            let mut stack = |id: u64, lost_flag: u32| match id {
                0 => empty.clone(),
                id => stacks.get(&id).cloned().unwrap_or_else(|| {
                    flags |= lost_flag;
                    empty.clone()
                }),
            };
            let user = stack(key.user_stack, sample_flags::USER_STACK_LOST);
            let kernel = stack(key.kernel_stack, sample_flags::KERNEL_STACK_LOST);
            Some(RawSample {
                pid: key.pid,
                tid: key.tid,
                uid: key.uid,
                gid: key.gid,
                cgroup: key.cgroup,
                thread_name: thread_names.get(&key.comm),
                kind,
                flags,
                user,
                user_stop: None,
                kernel,
                count: value.count,
                weight: value.weight,
                allocation_id: 0,
                times_ns: Vec::new(),
            })
        })
        .collect()
}

/// Thread names, interned so that the thousands of samples of one thread
/// share one.
#[derive(Debug, Default)]
pub(crate) struct ThreadNames(StdHashMap<[u8; 16], Arc<str>>);

impl ThreadNames {
    pub(crate) fn get(&mut self, comm: &[u8; 16]) -> Arc<str> {
        // Bounded: a machine that invents thread names forever must not grow
        // this without end.
        if self.0.len() >= 1 << 16 {
            self.0.clear();
        }
        self.0
            .entry(*comm)
            .or_insert_with(|| Arc::from(crate::tasks::command_name(comm)))
            .clone()
    }
}

/// The kernel's internal "not supported" (ENOTSUPP, 524), which BPF
/// commands return to user space as is.
const KERNEL_ENOTSUPP: i32 = 524;

/// Reads every entry of an idle map and deletes it: in a few batch system
/// calls, or entry by entry where the kernel has no batch operations.
fn take_all<K: aya::Pod + Eq + std::hash::Hash, V: aya::Pod>(
    map: &mut HashMap<MapData, K, V>,
    batches: &mut bool,
) -> Vec<(K, V)> {
    let mut entries = Vec::new();
    if *batches {
        match crate::kernel::batch::take_all(map, &mut entries) {
            Ok(()) => return entries,
            Err(err)
                if entries.is_empty()
                    && matches!(
                        err.raw_os_error(),
                        Some(libc::EINVAL | libc::EOPNOTSUPP | KERNEL_ENOTSUPP)
                    ) =>
            {
                warn!("the kernel has no batch map operations ({err}); draining entry by entry");
                *batches = false;
            }
            Err(err) => warn!(
                "draining a kernel map in batches failed ({err}); reading the rest entry by entry"
            ),
        }
    }
    let mut errors = 0_u32;
    let start = entries.len();
    for entry in map.iter() {
        match entry {
            Ok(entry) => entries.push(entry),
            Err(_) => errors += 1,
        }
    }
    for (key, _) in &entries[start..] {
        if map.remove(key).is_err() {
            errors += 1;
        }
    }
    if errors > 0 {
        warn!(
            errors,
            "some kernel map entries could not be read or removed"
        );
    }
    entries
}

#[cfg(test)]
mod tests {
    use profiler_common::MAX_STACK_DEPTH;

    use super::*;

    fn key(kind: u32, user_stack: u64, kernel_stack: u64) -> SampleKey {
        let mut comm = [0; 16];
        comm[..4].copy_from_slice(b"spin");
        SampleKey {
            pid: 10,
            tid: 11,
            user_stack,
            kernel_stack,
            comm,
            kind,
            flags: 0,
            uid: 1000,
            gid: 1001,
            cgroup: 7,
        }
    }

    fn stack(frames: &[u64]) -> StackTrace {
        let mut stack = StackTrace {
            len: frames.len() as u32,
            reserved: 0,
            ips: [0; MAX_STACK_DEPTH],
        };
        stack.ips[..frames.len()].copy_from_slice(frames);
        stack
    }

    #[test]
    fn entries_become_samples_with_their_stacks() {
        let value = SampleValue {
            count: 3,
            weight: 30,
        };
        let counts = vec![
            (key(SampleKind::CpuClock as u32, 1, 2), value),
            // A stack the stacks map lost, and no kernel stack.
            (key(SampleKind::Peek as u32, 9, 0), value),
            // A kind this daemon does not know: skipped.
            (key(77, 1, 0), value),
        ];
        let stacks = vec![(1, stack(&[0x10, 0x20])), (2, stack(&[0xffff_0000]))];
        let mut names = ThreadNames::default();
        let samples = raw_samples(counts, stacks, &mut names);
        assert_eq!(samples.len(), 2);
        let cpu = &samples[0];
        assert_eq!(
            (cpu.pid, cpu.tid, cpu.uid, cpu.gid, cpu.cgroup),
            (10, 11, 1000, 1001, 7)
        );
        assert_eq!(&*cpu.thread_name, "spin");
        assert_eq!(&*cpu.user, [0x10, 0x20]);
        assert_eq!(&*cpu.kernel, [0xffff_0000]);
        assert_eq!((cpu.count, cpu.weight, cpu.flags), (3, 30, 0));
        let peek = &samples[1];
        assert_eq!(peek.kind, SampleKind::Peek);
        assert!(peek.user.is_empty() && peek.kernel.is_empty());
        assert_eq!(peek.flags, sample_flags::USER_STACK_LOST);
        assert!(
            Arc::ptr_eq(&cpu.thread_name, &peek.thread_name),
            "names are shared"
        );
    }

    #[test]
    fn every_loss_counter_has_a_cause() {
        let mut counters = [0; COUNTER_COUNT as usize];
        counters[Counter::LostStackMapFull as usize] = 4;
        counters[Counter::Samples as usize] = 100;
        let lost: Vec<_> = losses(&counters).collect();
        assert_eq!(
            lost.len(),
            LossCause::ALL.len() - 2,
            "all but the memory ceiling and the daemon's room for allocation samples"
        );
        assert!(lost.contains(&(LossCause::StackMapFull, 4)));
        assert_eq!(loss_cause(Counter::Samples), None);
    }
}
