//! The loaded programs: the eBPF object loaded after checking that the
//! kernel can run it (`requirements`), with the kernel's layout found in
//! its BTF (`btf`), every program group attached (`groups`) and kept
//! attached, and the maps handed out to their readers (`maps`): the
//! sample source to the pipeline, the process announcements to the
//! process watcher, the peek signals and peeked threads to the peeker (for
//! which it also opens per-thread clocks, `handles`), the targets and
//! families to the service; the allocator uprobes attached per profile
//! (`allocation_probes`). `settings` sizes the maps, `errors` says why
//! something cannot run.
//!
//! This module owns the [`aya::Ebpf`] object (dropping the
//! [`LoadedPrograms`] detaches everything). It must not read samples
//! itself.

use std::collections::BTreeMap;

use aya::{
    Ebpf, EbpfLoader,
    maps::{Array, HashMap, MapData, PerCpuArray, RingBuf},
    programs::{
        PerfEvent,
        perf_event::{PerfEventConfig, PerfEventLink, PerfEventScope, SamplePolicy, SoftwareEvent},
    },
};
use profiler_common::{Control, STACK_COPY_PAGE, SampleKey, SampleValue, StackTrace, names};
use tracing::{debug, info, warn};

use super::{
    btf::FoundLayout, drain::Drainer, requirements, sources::SampleSource,
    stack_copies::StackCopies,
};

mod allocation_probes;
mod errors;
mod groups;
mod handles;
mod maps;
mod settings;

pub use self::{
    allocation_probes::{Attachment, KernelAllocationProbes, Profiled, RunningProfile},
    errors::{OptionalProgramError, SamplingError},
    groups::{ProgramGroup, SwitchProgram},
    handles::{KernelPeekClocks, KernelSwitchPrograms, KernelWaitingThreads},
    settings::{MapSizes, ProgramSettings, stack_copy_record_bytes},
};
use self::{
    groups::{AttachContext, Attached, GroupFailure},
    settings::OFFCPU_INTERVALS_BYTES,
};

/// The eBPF object built by build.rs.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/profiler"));

/// The kernel side of a peek: per-thread clocks, and the marks that make a
/// thread's first sample its "where it was".
pub trait PeekClocks: Send + Sync {
    /// Marks the threads about to be peeked.
    fn mark(&self, tids: &[u32]);
    /// Forgets them once the peek is over.
    fn forget(&self, tids: &[u32]);
    /// Samples `tid` (and the threads it starts) at `frequency_hz` of its
    /// own CPU time, until the returned value is dropped.
    fn sample(&self, tid: u32, frequency_hz: u32) -> Result<Box<dyn Send>, SamplingError>;
}

/// The maps the drainer reads.
pub struct DrainMaps {
    pub control: Array<MapData, Control>,
    /// Per CPU: sampling runs under way that may write into a generation.
    pub recording: PerCpuArray<MapData, u64>,
    pub counters: PerCpuArray<MapData, u64>,
    pub counts: [HashMap<MapData, SampleKey, SampleValue>; 2],
    pub stacks: [HashMap<MapData, u64, StackTrace>; 2],
}

/// The maps of the followed process families.
pub struct FamilyMaps {
    /// Followed processes, by pid (the value is the family's root).
    pub followed: HashMap<MapData, u32, u32>,
    /// Processes that joined a family, announced by the kernel.
    pub joins: RingBuf<MapData>,
}

/// The loaded and attached programs, every group of them.
pub struct LoadedPrograms {
    ebpf: Ebpf,
    cpus: Vec<u32>,
    frequency_hz: u32,
    /// The CPU clock's attachments, one per CPU, at `frequency_hz`.
    cpu_clocks: Vec<aya::programs::perf_event::PerfEventLinkId>,
    /// The optional groups that are off, and why.
    off: BTreeMap<ProgramGroup, OptionalProgramError>,
    /// The off-CPU switch program loaded.
    switch_program: SwitchProgram,
    /// Bytes of the stack-copy ring buffer, when the programs copy user
    /// stacks for unwinding in the daemon.
    stack_copies: Option<u32>,
    /// Pages of user stack each copy takes.
    stack_copy_pages: u32,
    /// Bytes of the allocation ring buffer, and of each of its records.
    alloc_stack_copies: (u32, u64),
}

impl LoadedPrograms {
    /// Checks the kernel's requirements, loads the programs and attaches
    /// every group: the CPU-clock sampler on every online CPU, the others
    /// once (or, for those attached on demand, only loaded).
    pub fn start(settings: &ProgramSettings) -> Result<Self, SamplingError> {
        requirements::check()?;
        // Without tracefs, tracepoints cannot be attached: sampling and
        // peeks by request still work, so the daemon starts without them.
        let tracefs = requirements::ensure_tracefs().err();

        let cpus = aya::util::online_cpus()
            .map_err(|(path, source)| SamplingError::OnlineCpus { path, source })?;
        let map_sizes = MapSizes::for_settings(settings, cpus.len());
        let mut loader = EbpfLoader::new();
        for name in names::STACKS {
            loader.map_max_entries(name, map_sizes.stacks);
        }
        for name in names::COUNTS {
            loader.map_max_entries(name, map_sizes.sample_keys);
        }
        loader.map_max_entries(names::KNOWN_PIDS, 1 << 15);
        // 6.5k forks or execs between two passes of the watcher.
        loader.map_max_entries(names::FORK_LINEAGES, 1 << 18);
        loader.map_max_entries(names::PEEK_THREADS, 1 << 14);
        loader.map_max_entries(names::TARGET_PIDS, crate::kernel::targets::MAX_PIDS);
        loader.map_max_entries(names::TARGET_CGROUPS, crate::kernel::targets::MAX_CGROUPS);
        loader.override_global(names::PEEK_SIGNAL_NUMBER, &settings.peek_signal, true);
        loader.override_global(names::STACK_COPY_PAGES, &settings.stack_copy_pages, true);
        loader.map_max_entries(names::STACK_COPIES, map_sizes.stack_copies);
        loader.map_max_entries(names::ALLOC_STACK_COPIES, map_sizes.alloc_stack_copies);
        loader.map_max_entries(names::OFFCPU_PIDS, super::offcpu::MAX_RECORDED_PIDS);
        loader.map_max_entries(names::OFFCPU_PENDING, settings.offcpu_max_pending.max(1));
        loader.map_max_entries(names::OFFCPU_INTERVALS, OFFCPU_INTERVALS_BYTES);
        // Set once, whatever was found: a part left 0 is one the programs
        // do without, and the groups that cannot are left off below.
        let found = FoundLayout::read();
        loader.override_global(names::KERNEL_LAYOUT, &found.layout, true);
        if let Err(err) = &found.credentials {
            warn!(
                "cannot find where the kernel keeps a task's credentials: {err}; every sample is \
                 treated as protected, so only root and the admin group see any (other users' \
                 requests return empty profiles)"
            );
        }
        let mut ebpf = loader.load(EBPF_OBJECT).map_err(groups::load_error)?;

        match aya_log::EbpfLogger::init(&mut ebpf) {
            Ok(logger) => spawn_log_forwarder(logger),
            Err(err) => warn!("eBPF log messages will not be shown: {err}"),
        }

        let context = AttachContext {
            cpus: &cpus,
            settings,
            tracefs: tracefs.as_ref(),
            signal_layout: found.signals.as_ref().err(),
            process_layout: found.process_error(),
        };
        let mut cpu_clocks = Vec::new();
        let mut switch_program = SwitchProgram::default();
        let mut off = BTreeMap::new();
        for group in ProgramGroup::ALL {
            match group.attach(&mut ebpf, &context) {
                Ok(Attached::CpuClocks(links)) => cpu_clocks = links,
                Ok(Attached::Switches(program)) => switch_program = program,
                Ok(Attached::Done) => {}
                Err(GroupFailure::Fatal(err)) => return Err(err),
                Err(GroupFailure::Off(reason)) => {
                    match group {
                        // The peeker says what this means, where it matters.
                        ProgramGroup::SignalGuard => debug!("{group:?} is off: {reason}"),
                        _ => warn!("{reason}: {}", group.without()),
                    }
                    off.insert(group, reason);
                }
            }
        }
        info!(
            cpus = cpus.len(),
            frequency_hz = settings.frequency_hz,
            stacks_per_generation = map_sizes.stacks,
            sample_keys_per_generation = map_sizes.sample_keys,
            stack_copy_bytes = settings.stack_copy_pages as usize * STACK_COPY_PAGE,
            stack_copy_buffer = map_sizes.stack_copies,
            alloc_stack_copy_buffer = map_sizes.alloc_stack_copies,
            "sampling every online CPU"
        );
        Ok(Self {
            ebpf,
            cpus,
            frequency_hz: settings.frequency_hz,
            cpu_clocks,
            off,
            switch_program,
            stack_copies: (settings.stack_copy_pages != 0).then_some(map_sizes.stack_copies),
            stack_copy_pages: settings.stack_copy_pages,
            // An allocation's record is counted at its largest: with a
            // Python process's frames.
            alloc_stack_copies: (
                map_sizes.alloc_stack_copies,
                stack_copy_record_bytes(settings.stack_copy_pages)
                    + profiler_common::python::PYTHON_SLOTS_BYTES as u64,
            ),
        })
    }

    /// Whether the guard that keeps the peek signal from killing processes
    /// without a handler is active; if not, why.
    pub fn signal_guard(&self) -> Result<(), OptionalProgramError> {
        self.off_reason(ProgramGroup::SignalGuard)
    }

    /// Why the kernel does not pass peek signals on, if it does not.
    pub fn signal_watch(&self) -> Result<(), OptionalProgramError> {
        self.off_reason(ProgramGroup::PeekSignals)
    }

    /// Why allocations cannot be profiled, if they cannot.
    pub fn allocation_probes(&self) -> Result<(), OptionalProgramError> {
        self.off_reason(ProgramGroup::Allocations)
    }

    /// How many records the allocation ring buffer holds.
    pub fn allocation_ring_records(&self) -> u64 {
        let (bytes, record) = self.alloc_stack_copies;
        u64::from(bytes) / record.max(1)
    }

    /// The off-CPU switch program loaded, and what recording lacks with it.
    pub fn switch_program(&self) -> &SwitchProgram {
        &self.switch_program
    }

    /// Whether a group runs; if not, why.
    fn off_reason(&self, group: ProgramGroup) -> Result<(), OptionalProgramError> {
        self.off.get(&group).cloned().map_or(Ok(()), Err)
    }

    /// Samples every CPU at `frequency_hz` from now on (configuration
    /// reload): the old attachments go, then the new ones come, so no tick
    /// is counted twice (the few microseconds between are not sampled).
    pub fn set_frequency(&mut self, frequency_hz: u32) -> Result<(), SamplingError> {
        if frequency_hz == self.frequency_hz {
            return Ok(());
        }
        let sampler: &mut PerfEvent = groups::program(&mut self.ebpf, names::PROGRAM_SAMPLE_CPU)?;
        for link in self.cpu_clocks.drain(..) {
            if let Err(err) = sampler.detach(link) {
                warn!("detaching a CPU clock failed: {err}");
            }
        }
        match groups::attach_cpu_clocks(sampler, &self.cpus, frequency_hz) {
            Ok(links) => {
                self.cpu_clocks = links;
                self.frequency_hz = frequency_hz;
                info!(frequency_hz, "sampling frequency changed");
                Ok(())
            }
            Err(err) => {
                // Back to the old frequency rather than not sampling at all.
                self.cpu_clocks =
                    groups::attach_cpu_clocks(sampler, &self.cpus, self.frequency_hz)?;
                Err(err)
            }
        }
    }

    /// Starts sampling one thread (on whichever CPU it runs) for a peek, at
    /// `frequency_hz` of its own CPU time; threads it starts are sampled
    /// too. Sampling stops when the returned link is dropped.
    fn sample_thread(
        &mut self,
        tid: u32,
        frequency_hz: u32,
    ) -> Result<PerfEventLink, SamplingError> {
        let sampler: &mut PerfEvent = groups::program(&mut self.ebpf, names::PROGRAM_SAMPLE_PEEK)?;
        let error = |source| SamplingError::SampleThread { tid, source };
        let link = sampler
            .attach(
                PerfEventConfig::Software(SoftwareEvent::CpuClock),
                PerfEventScope::OneProcess {
                    pid: tid,
                    cpu: None,
                },
                // The CPU clock counts nanoseconds: one sample per period of
                // the thread's own CPU time.
                SamplePolicy::Period(1_000_000_000 / u64::from(frequency_hz.max(1))),
                true,
            )
            .map_err(error)?;
        sampler.take_link(link).map_err(error)
    }

    /// Bytes of the kernel's ring buffers the daemon maps: each is mapped
    /// twice over (its wrap-around), and all of it counts in the daemon's
    /// resident memory once written.
    pub fn ring_buffer_bytes(&self) -> u64 {
        // The families' and lineages' rings, and the peek signals'.
        const SMALL_RINGS: u64 = 256 << 10;
        2 * (u64::from(self.stack_copies.unwrap_or(0))
            + u64::from(self.alloc_stack_copies.0)
            + u64::from(OFFCPU_INTERVALS_BYTES)
            + SMALL_RINGS)
            // The memory-map records' perf rings, mapped once.
            + crate::kernel::mapping_records::MappingRecords::bytes_for(self.cpus.len())
    }

    pub fn cpus(&self) -> &[u32] {
        &self.cpus
    }

    pub fn frequency_hz(&self) -> u32 {
        self.frequency_hz
    }
}

/// Forwards log records of the eBPF programs (rare: they only log states
/// that should not happen) to the daemon's log, from a thread of its own.
fn spawn_log_forwarder(mut logger: aya_log::EbpfLogger<&'static dyn log::Log>) {
    let forward = move || {
        use rustix::event::{PollFd, PollFlags, poll};
        loop {
            let mut fds = [PollFd::new(&logger, PollFlags::IN)];
            match poll(&mut fds, None) {
                Ok(_) | Err(rustix::io::Errno::INTR) => logger.flush(),
                Err(err) => {
                    warn!("stopped forwarding eBPF log messages: {err}");
                    return;
                }
            }
        }
    };
    if let Err(err) = std::thread::Builder::new()
        .name("profilerd-ebpf-log".to_owned())
        .spawn(forward)
    {
        warn!("eBPF log messages will not be shown: {err}");
    }
}

#[cfg(test)]
mod tests;
