//! The pipeline that moves samples one way, from the kernel to the store:
//! the sample source (drained) → raw batch → normalized stacks (process
//! table) → symbolized stacks (symbolizer) → time-stamped buckets (store),
//! or, for the samples of peeks and sampled allocations, their inboxes.
//! The exporters read the store's windows (`service`), not the batches.
//!
//! This module owns the pipeline's threads: the drain thread (periodic and
//! on-demand drains and, between them, the unwinding passes over the stack
//! copies with the process watcher's), the symbolizer thread (blazesym
//! must stay on one thread) and, without stack copies, the process watcher
//! on a thread of its own. It must not answer queries.

use std::{
    sync::{Arc, Mutex, RwLock, mpsc},
    thread::JoinHandle,
    time::{Duration, SystemTime},
};

use crate::kernel::announcements::{ForkLineages, LineageStats, ProcessAnnouncements};
use crate::kernel::mapping_records::MappingRecords;
use profiler_common::{Counter, SampleKind};

mod blocked;
mod draining;
mod inbox;
mod unwinding;
mod waits;
mod wakeups;
mod watching;

pub use self::{
    draining::DrainIntervals,
    inbox::{Delivered, Inboxes, SampleInbox},
    waits::WaitStats,
};
use self::{
    draining::{DrainRequest, Outlets, Unwinding, Wake},
    wakeups::Ring,
    watching::{ProcessWatcher, StopWatching},
};

use crate::{
    kernel::programs::{LoadedPrograms, SamplingError},
    kernel::{
        allocation_copies::AllocationCopies,
        drain::CounterDeltas,
        offcpu::{OffCpuIntervals, OffCpuRecorder, Recorded, RecordedProcesses, RecordingGuard},
        python_targets::{PythonTargetStats, PythonTargets},
        sources::SampleSource,
        stack_copies::{DeepThreadStats, DeepThreads, StackCopies},
    },
    lock,
    store::Store,
    symbols::jit_names::{JitNames, JitStats, SETTLE_WAIT},
    symbols::processes::{NormalizedBatch, ProcessStats, ProcessTable},
    symbols::python::names::{NAMES_WAIT, PythonNameStats, PythonNames},
    symbols::symbolizer::{Symbolizer, SymbolizerStats},
    unwind::UnwindStats,
};

#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    #[error("cannot take the kernel's maps: {0}")]
    Maps(#[from] SamplingError),
    #[error("cannot start the {0} thread: {1}")]
    Thread(&'static str, std::io::Error),
    #[error(
        "cannot set up what wakes the drain thread (an eventfd and an epoll set): {0}; \
         raise the daemon's open-files limit (LimitNOFILE) if it is reached"
    )]
    Wakeups(std::io::Error),
    #[error("the sample pipeline has stopped; the daemon is shutting down or failed (see its log)")]
    Stopped,
}

/// Running totals of the pipeline, for the status report.
#[derive(Clone, Debug, Default)]
pub struct PipelineStats {
    /// Totals of the kernel counters since start, indexed by [`Counter`].
    pub counters: CounterDeltas,
    pub drains: u64,
    /// Time spent draining the kernel maps since start.
    pub drain_time: Duration,
    /// The longest time between two drains since start, and when the last
    /// drain ended.
    pub longest_drain_gap: Duration,
    pub last_drain: Option<std::time::Instant>,
    pub symbolizer: SymbolizerStats,
    pub processes: ProcessStats,
    /// Stack copies unwound, their outcomes and the unwind information held.
    pub unwinding: UnwindStats,
    /// Off-CPU waits charged and under way (`None`: not recorded).
    pub waits: Option<WaitStats>,
    /// The JIT code names held and the perf maps and jitdump files read.
    pub jit: JitStats,
    /// Threads named deep (`None`: no stack copies).
    pub deep_threads: Option<DeepThreadStats>,
    /// The book of fork lineages (`None`: forks are not recorded).
    pub lineages: Option<LineageStats>,
    /// Processes whose Python frames the programs read (`None`: no stack
    /// copies).
    pub python_targets: Option<PythonTargetStats>,
    /// The Python code objects read to name frames.
    pub python_names: PythonNameStats,
}

/// The most bytes each part of the pipeline holds (0: no bound), shares
/// of the daemon's memory budget.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineBounds {
    /// Unwind information (`.eh_frame`, `.debug_frame`) of the binaries.
    pub unwind_info: u64,
    /// Names of JIT-compiled code read from perf maps, and CPython's code
    /// objects read to name Python frames (half each).
    pub jit_names: u64,
    /// The symbolizer's parsed debug information and cache of names.
    pub symbolizer: u64,
    /// The process table's records (mappings, unwinders, binaries).
    pub processes: u64,
}

impl PipelineStats {
    pub fn samples_taken(&self) -> u64 {
        self.counters[Counter::Samples as usize]
    }
}

struct SymbolizeJob {
    batch: NormalizedBatch,
    waiting: Vec<tokio::sync::oneshot::Sender<SystemTime>>,
}

/// Cheap to clone; used by the API to cut windows and read statistics.
#[derive(Clone)]
pub struct PipelineHandle {
    requests: wakeups::WakeSender<Wake>,
    stats: Arc<Mutex<PipelineStats>>,
    stack_copies: Option<Arc<Mutex<unwinding::StackCopyUnwinder>>>,
    processes: Arc<Mutex<ProcessTable>>,
    jit_names: JitNames,
}

impl PipelineHandle {
    /// Starts recording `what` off CPU with `recorder`, and notes the
    /// threads of `already_waiting` (processes) that wait now, their stacks
    /// (`pages` pages each) read at once, so that their waits are charged
    /// from now on too. The recording lasts as long as the guard.
    pub fn record_waits(
        &self,
        recorder: &OffCpuRecorder,
        what: Recorded,
        already_waiting: &[u32],
        pages: u32,
    ) -> Result<RecordingGuard, String> {
        let guard = recorder.record(what)?;
        if let Some(copies) = &self.stack_copies {
            for &pid in already_waiting {
                let registers = recorder.waiting_threads(pid);
                lock(copies).note_waiting_threads(pid, &registers, pages, &self.processes);
            }
        }
        Ok(guard)
    }

    /// Opens a window: drains the kernel maps now and resolves to the instant
    /// of the cut. Samples taken after it land in later buckets.
    pub async fn open_window(&self) -> Result<SystemTime, PipelineError> {
        self.cut(false, false).await
    }

    /// Closes a window: drains the kernel maps now and resolves to the
    /// instant of the cut once every sample taken before it is in the store,
    /// so a window between two cuts holds exactly the samples taken in it.
    pub async fn close_window(&self) -> Result<SystemTime, PipelineError> {
        self.cut(true, false).await
    }

    /// Closes a window for a report of it, as [`Self::close_window`] does,
    /// and has the drains come at the watched interval for a while, so that
    /// the next report (a dashboard's) finds little to drain.
    pub async fn close_window_for_report(&self) -> Result<SystemTime, PipelineError> {
        self.cut(true, true).await
    }

    async fn cut(&self, stored: bool, watched: bool) -> Result<SystemTime, PipelineError> {
        let asked = std::time::Instant::now();
        let (done, finished) = tokio::sync::oneshot::channel();
        self.requests
            .send(Wake::Drain(DrainRequest {
                stored,
                watched,
                done,
            }))
            .map_err(|_| PipelineError::Stopped)?;
        let cut = finished.await.map_err(|_| PipelineError::Stopped)?;
        tracing::debug!(
            stored,
            ms = asked.elapsed().as_secs_f64() * 1e3,
            "drained on request"
        );
        Ok(cut)
    }

    pub fn stats(&self) -> PipelineStats {
        let mut stats = lock(&self.stats).clone();
        stats.jit = self.jit_names.stats();
        stats
    }
}

/// The running pipeline. Dropping it stops its threads.
pub struct Pipeline {
    handle: PipelineHandle,
    /// Wakes the drain thread to stop it.
    wake: wakeups::WakeSender<Wake>,
    jit_names: JitNames,
    /// Ends the process watcher's own thread, when it has one.
    watcher_stop: Option<wakeups::WakeSender<StopWatching>>,
    threads: Vec<JoinHandle<()>>,
}

impl Pipeline {
    /// Takes the loaded programs' source and process announcements and starts
    /// the pipeline threads; each batch goes to the store.
    pub fn start(
        programs: &mut LoadedPrograms,
        store: Arc<RwLock<Store>>,
        inboxes: Inboxes,
        drains: DrainIntervals,
        bounds: PipelineBounds,
        offcpu_intervals: Option<(OffCpuIntervals, RecordedProcesses)>,
    ) -> Result<Self, PipelineError> {
        let source = programs.take_source()?;
        let (announcements, lineages) = programs.take_process_announcements()?;
        let stack_copies = programs.take_stack_copies()?;
        let allocation_copies = programs.take_allocation_copies()?;
        let deep_threads = programs.take_deep_threads()?;
        let python_targets = programs.take_python_targets()?;
        // Without them, programs that exit before procfs is read show as
        // `[unmapped]`; the daemon runs on.
        let mapping_records = MappingRecords::open(programs.cpus())
            .inspect_err(|err| tracing::warn!("{err}"))
            .ok();
        let pipeline = Self::start_with(
            source,
            Some(announcements),
            stack_copies.map(|copies| StackCopyFeed {
                copies,
                allocation_copies,
                offcpu_intervals,
                lineages,
                deep_threads,
                python_targets,
            }),
            store,
            inboxes,
            drains,
            bounds,
        )?;
        if let Some(records) = mapping_records {
            lock(&pipeline.handle.processes).follow_mapping_records(records);
        }
        Ok(pipeline)
    }

    /// Starts the pipeline threads on `source`, with the kernel's process
    /// announcements when there are (without, processes are recorded when
    /// their samples are drained) and its stack copies when it copies
    /// stacks (with the off-CPU intervals, when they are recorded), each
    /// part within its bound.
    pub fn start_with(
        source: Box<dyn SampleSource>,
        announcements: Option<ProcessAnnouncements>,
        stack_copies: Option<StackCopyFeed>,
        store: Arc<RwLock<Store>>,
        inboxes: Inboxes,
        drains: DrainIntervals,
        bounds: PipelineBounds,
    ) -> Result<Self, PipelineError> {
        let stats = Arc::new(Mutex::new(PipelineStats::default()));
        // The book of fork lineages takes an eighth of the process table's
        // share at most, and the table the rest.
        let lineage_bytes = stack_copies
            .as_ref()
            .and_then(|feed| feed.lineages.as_ref())
            .map_or(0, |lineages| lineages.within(bounds.processes / 8));
        let table_bytes = match bounds.processes {
            0 => 0,
            share => share.saturating_sub(lineage_bytes).max(1),
        };
        let processes = Arc::new(Mutex::new(
            ProcessTable::with_unwind_info_limit(bounds.unwind_info).with_limit(table_bytes),
        ));
        let (requests, mut request_queue) = wakeups::wakeups().map_err(PipelineError::Wakeups)?;
        let wake = requests.clone();
        // Room for half a minute of drains at the default interval, so that a
        // slow first symbolization of a large binary does not hold up
        // draining (and make the kernel maps overflow).
        let (jobs, job_queue) = mpsc::sync_channel::<SymbolizeJob>(32);

        let spawn = |name: &'static str, body: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(format!("profilerd-{name}"))
                .spawn(body)
                .map_err(|err| PipelineError::Thread(name, err))
        };
        let mut threads = Vec::new();
        let (jit_names, jit_thread) =
            // The names of code a runtime made: perf maps' and CPython's
            // code objects', half of the share each.
            JitNames::start(bounds.jit_names / 2).map_err(|err| PipelineError::Thread("jit", err))?;
        threads.push(jit_thread);
        let mut watcher = announcements.map(if stack_copies.is_some() {
            ProcessWatcher::beside_unwinder
        } else {
            ProcessWatcher::alone
        });
        let mut watcher_stop = None;
        if stack_copies.is_none()
            && let Some(watcher) = watcher.take()
        {
            let (stop, wakes) = wakeups::wakeups().map_err(PipelineError::Wakeups)?;
            watcher_stop = Some(stop);
            threads.push(spawn("watch", {
                let processes = processes.clone();
                Box::new(move || watcher.run(&processes, wakes))
            })?);
        }
        let stack_copies = stack_copies.map(|feed| {
            Arc::new(Mutex::new(unwinding::StackCopyUnwinder::new(
                feed.copies,
                feed.allocation_copies,
                feed.offcpu_intervals,
                feed.lineages,
                feed.deep_threads,
                feed.python_targets,
            )))
        });
        let python_names = PythonNames::start(bounds.jit_names / 2)
            .map_err(|err| PipelineError::Thread("python-names", err))?;
        threads.push(spawn("symbolize", {
            let (stats, jit_names) = (stats.clone(), jit_names.clone());
            Box::new(move || {
                let symbolizer = Symbolizer::with_limit(bounds.symbolizer);
                let outlets = SymbolizerOutlets {
                    jit_names: &jit_names,
                    python_names: &python_names,
                    store: &store,
                    inboxes: &inboxes,
                    stats: &stats,
                };
                symbolize_into_store(job_queue, symbolizer, outlets)
            })
        })?);
        let handle = PipelineHandle {
            requests,
            stats: stats.clone(),
            stack_copies: stack_copies.clone(),
            processes: processes.clone(),
            jit_names: jit_names.clone(),
        };
        // Between drains, the drain thread sleeps until a ring it reads
        // wakes it (a new process announced, a ring a quarter full).
        if let Some(copies) = &stack_copies {
            for ring in lock(copies).rings() {
                (request_queue.watch(ring, Ring::Filling)).map_err(PipelineError::Wakeups)?;
            }
            if let Some(watcher) = &watcher {
                let ring = watcher.announcements();
                (request_queue.watch(ring, Ring::Announcements)).map_err(PipelineError::Wakeups)?;
            }
        }
        threads.push(spawn("drain", {
            let jit_names = jit_names.clone();
            Box::new(move || {
                let unwinding = stack_copies.as_deref().map(|copies| Unwinding {
                    copies,
                    watcher,
                    new_program_at: None,
                });
                let outlets = Outlets {
                    jobs: &jobs,
                    processes: &processes,
                    jit_names: &jit_names,
                    stats: &stats,
                };
                draining::drain_and_unwind(source, unwinding, drains, &request_queue, &outlets);
            })
        })?);

        Ok(Self {
            handle,
            wake,
            jit_names,
            watcher_stop,
            threads,
        })
    }

    pub fn handle(&self) -> PipelineHandle {
        self.handle.clone()
    }
}

impl Drop for Pipeline {
    fn drop(&mut self) {
        let _ = self.wake.send(Wake::Stop);
        if let Some(stop) = &self.watcher_stop {
            let _ = stop.send(StopWatching);
        }
        self.jit_names.stop();
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
    }
}

/// The stack copies the kernel writes (and sampled allocations', when
/// allocations can be profiled), with what unwinding them needs besides:
/// the off-CPU intervals (when they are recorded) and where new processes
/// come from (when the fork tracepoint says).
pub struct StackCopyFeed {
    pub copies: StackCopies,
    pub allocation_copies: Option<AllocationCopies>,
    pub offcpu_intervals: Option<(OffCpuIntervals, RecordedProcesses)>,
    pub lineages: Option<Arc<ForkLineages>>,
    /// The threads whose copies are larger, named as their stacks are
    /// found deeper than a copy.
    pub deep_threads: Option<DeepThreads>,
    /// The processes whose Python frames the programs read, named as their
    /// samples are met.
    pub python_targets: Option<PythonTargets>,
}

/// What the symbolizer thread names with and hands its batches to.
struct SymbolizerOutlets<'a> {
    jit_names: &'a JitNames,
    python_names: &'a PythonNames,
    store: &'a RwLock<Store>,
    inboxes: &'a Inboxes,
    stats: &'a Mutex<PipelineStats>,
}

/// The symbolizer thread: owns the (not `Send`) symbolizer; names JIT
/// code (waiting a little for the perf maps it was asked to read); hands
/// peek samples and sampled allocations to their inboxes, the rest to
/// the store.
fn symbolize_into_store(
    jobs: mpsc::Receiver<SymbolizeJob>,
    mut symbolizer: Symbolizer,
    outlets: SymbolizerOutlets<'_>,
) {
    let SymbolizerOutlets {
        jit_names,
        python_names,
        store,
        inboxes,
        stats,
    } = outlets;
    for mut job in jobs {
        let cut = job.batch.end;
        jit_names.settle(&job.batch, SETTLE_WAIT);
        jit_names.name_batch(&mut job.batch);
        python_names.name_batch(&mut job.batch, NAMES_WAIT);
        let mut batch = symbolizer.symbolize(job.batch);
        let (mut peek_samples, mut allocations) = (Vec::new(), Vec::new());
        let mut stored = Vec::with_capacity(batch.samples.len());
        for sample in std::mem::take(&mut batch.samples) {
            match sample.kind {
                SampleKind::Peek | SampleKind::PeekInstant => peek_samples.push(sample),
                SampleKind::Allocation => allocations.push(sample),
                _ => stored.push(sample),
            }
        }
        batch.samples = stored;
        inboxes.peeks.deliver(peek_samples);
        inboxes.allocations.deliver(allocations);
        // Peeks are wall-clock: the waits of a peeked process go to both.
        inboxes.peeks.copy_in(
            batch
                .samples
                .iter()
                .filter(|sample| sample.kind.is_off_cpu()),
        );
        crate::write_lock(store).insert(batch);
        compact_if_due(store);
        {
            let mut stats = lock(stats);
            stats.symbolizer = symbolizer.stats();
            stats.python_names = python_names.stats();
        }
        for waiting in job.waiting {
            let _ = waiting.send(cut);
        }
    }
}

/// Compacts the store's tables when due, rebuilding them under the read
/// lock (reports go on reading) and taking the write lock only to put them
/// in place: this thread is the store's only writer but for a
/// configuration reload, and a plan that a reload made stale is dropped.
/// At the memory ceiling the store asks for a compaction at once (its
/// insert only drops buckets) and may drop more once the compaction shows
/// what it freed: as [`Store::compact_when_due`], with the locks.
fn compact_if_due(store: &RwLock<Store>) {
    for _ in 0..crate::store::CEILING_ROUNDS {
        let now = std::time::SystemTime::now();
        if !crate::read_lock(store).compaction_due(now) {
            return;
        }
        let plan = crate::read_lock(store).plan_compaction();
        let mut store = crate::write_lock(store);
        if !store.apply_compaction(plan, now) {
            tracing::debug!("a compaction was planned on tables that changed meanwhile; dropped");
            return;
        }
        store.enforce_ceiling();
    }
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests;
