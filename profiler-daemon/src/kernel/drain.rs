//! Draining the kernel's maps into raw samples without losing or counting
//! twice what the sampling program keeps writing.
//!
//! The program writes into one of two generations of maps, chosen by the
//! control map. A drain flips the generation, waits a grace period for
//! program runs that began before the flip to finish, then reads and empties
//! the generation that is now idle. This module owns those maps and the
//! running totals of the kernel's counters; it must not interpret addresses
//! (that is the process table's and the symbolizer's work).

use std::{
    collections::HashMap as StdHashMap,
    sync::Arc,
    time::{Duration, SystemTime},
};

use aya::maps::{HashMap, MapData, MapError};
use profiler_common::{COUNTER_COUNT, Control, Counter, SampleKey, SampleKind, sample_flags};
use tracing::warn;

use crate::{kernel::sampler::DrainMaps, profile::LossCause};

/// How long a drain waits after flipping generations. A run of the
/// sampling program takes microseconds and cannot be preempted, so a run that
/// read the old generation has finished long before this; only a vCPU stalled
/// by its hypervisor for longer could still write into the drained maps.
pub const GRACE_PERIOD: Duration = Duration::from_millis(10);

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
    /// Kernel stack, leaf first; empty when there was none.
    pub kernel: Arc<[u64]>,
    pub count: u64,
    pub weight: u64,
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
        | Counter::OutsideTargets => return None,
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
    thread_names: StdHashMap<[u8; 16], Arc<str>>,
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
            thread_names: StdHashMap::new(),
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
        std::thread::sleep(GRACE_PERIOD);

        let stacks = take_all(&mut self.maps.stacks[drained], &mut self.batches);
        let stacks: StdHashMap<u64, Arc<[u64]>> = stacks
            .into_iter()
            .map(|(key, stack)| (key, Arc::from(stack.frames())))
            .collect();
        let counts = take_all(&mut self.maps.counts[drained], &mut self.batches);

        let empty: Arc<[u64]> = Arc::from([]);
        let samples = counts
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
                    thread_name: self.thread_name(&key),
                    kind,
                    flags,
                    user,
                    kernel,
                    count: value.count,
                    weight: value.weight,
                })
            })
            .collect();

        let batch = RawBatch {
            start: self.last_flip,
            end: flipped_at,
            samples,
            counters: self.counter_deltas(),
        };
        self.last_flip = flipped_at;
        Ok(batch)
    }

    /// Interned so that the thousands of samples of one thread share a name.
    fn thread_name(&mut self, key: &SampleKey) -> Arc<str> {
        // Bounded: a machine that invents thread names forever must not grow
        // this without end.
        if self.thread_names.len() >= 1 << 16 {
            self.thread_names.clear();
        }
        self.thread_names
            .entry(key.comm)
            .or_insert_with(|| {
                let len = key.comm.iter().position(|&b| b == 0).unwrap_or(16);
                Arc::from(String::from_utf8_lossy(&key.comm[..len]).as_ref())
            })
            .clone()
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
