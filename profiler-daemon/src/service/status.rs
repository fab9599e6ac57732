//! What the daemon samples, what it lost and what it holds, for whoever
//! asks; the targets (which may name other users' processes) for root and
//! the admin group only, and changed by them only.

use std::time::Duration;

use profiler_common::Counter;

use super::{Service, ServiceError, access::Asker};
use crate::{
    kernel::targets::{TargetSet, TargetsError},
    memory::{MemoryUsage, Part, PartUsage},
    peek::{PeekStats, Protection},
    pipeline::PipelineStats,
    store::StoreStats,
};

/// The daemon's state, as a status report shows it.
#[derive(Clone, Debug)]
pub struct DaemonStatus {
    pub version: &'static str,
    pub uptime: Duration,
    /// CPUs the sampling program is attached to.
    pub cpus: Vec<u32>,
    pub frequency_hz: u32,
    /// Bytes of user stack each sample copies (0: frame pointers).
    pub stack_copy_bytes: u64,
    pub pipeline: PipelineStats,
    pub store: StoreStats,
    pub max_profile_duration: Duration,
    pub open_sessions: usize,
    /// `None` when the asker may not see them.
    pub targets: Option<TargetSet>,
    pub peek: PeekTrigger,
    pub offcpu: OffCpuTrigger,
    /// The push targets (root and the admin group only: their addresses).
    pub push: Vec<crate::service::TargetStatus>,
    /// Why allocations cannot be profiled, when they cannot, and the
    /// profiles running, their bounds and what became of them.
    pub allocations_unavailable: Option<String>,
    pub allocations: crate::allocs::AllocationStats,
    /// The memory budget, what each part holds against its share, and
    /// what the heap and the kernel count.
    pub memory: MemoryUsage,
    /// The HTTP listener's settings (`None`: `http_listen` is off).
    pub http: Option<HttpSettings>,
}

/// The HTTP listener's settings that status shows: where it listens, and
/// what the web view's source heatmap may read (see `crate::source_files`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpSettings {
    pub address: std::net::SocketAddr,
    pub tls: bool,
    /// `http_source_dirs` (empty: no source file is read).
    pub source_dirs: Vec<std::path::PathBuf>,
    /// The largest source file read, how many are read at once and how
    /// long one read may take.
    pub max_source_bytes: u64,
    pub max_source_reads: usize,
    pub source_read_timeout: std::time::Duration,
}

/// Whether off-CPU time can be recorded, and how much is.
#[derive(Clone, Debug)]
pub struct OffCpuTrigger {
    pub unavailable: Option<String>,
    /// What recording lacks on this kernel, if anything.
    pub limitation: Option<String>,
    pub recordings: usize,
    pub sample_probability: f64,
    /// Waits left pending when the last recording ended, their stack lost.
    pub dropped: u64,
}

/// How peeks are triggered, and what came of them.
#[derive(Clone, Debug)]
pub struct PeekTrigger {
    /// 0: peeks by signal are off.
    pub signal: u32,
    /// Why peeks by signal are off, when they are although a signal is
    /// configured.
    pub signal_off_reason: Option<String>,
    pub protection: Protection,
    pub stats: PeekStats,
    pub running: usize,
    /// Profiles at a rate of their own running now, by process sampled
    /// (`-F`, `--format gecko`): they share the peeks' slots.
    pub rated_running: usize,
    /// The slots peeks and those profiles share (`max_concurrent_peeks`);
    /// an unprivileged user's hold at most half.
    pub max_concurrent: usize,
    /// Peek signals the kernel could not pass on (its ring buffer full).
    pub dropped_in_kernel: u64,
}

impl Service {
    pub fn status(&self, asker: Asker) -> DaemonStatus {
        let pipeline = self.pipeline.stats();
        let dropped_in_kernel = pipeline.counters[Counter::LostPeekSignal as usize];
        let memory = self.memory(&pipeline);
        DaemonStatus {
            memory,
            http: self.info.http.clone(),
            version: env!("CARGO_PKG_VERSION"),
            uptime: self.info.started.elapsed(),
            cpus: self.info.cpus.clone(),
            stack_copy_bytes: self.info.stack_copy_bytes,
            frequency_hz: self.frequency_hz(),
            pipeline,
            store: self.store_stats(),
            max_profile_duration: self.max_profile_duration(),
            open_sessions: self.sessions().len(),
            offcpu: OffCpuTrigger {
                unavailable: self.offcpu.unavailable(),
                limitation: self.offcpu.limitation(),
                recordings: self.offcpu.recordings(),
                sample_probability: self.offcpu.sample_probability(),
                dropped: self.offcpu.dropped(),
            },
            push: if asker.privileged() {
                self.push.status()
            } else {
                Vec::new()
            },
            allocations_unavailable: match &self.allocations {
                None => Some("not offered by this daemon".to_owned()),
                Some(profiler) => profiler.unavailable().map(str::to_owned),
            },
            allocations: self
                .allocations
                .as_ref()
                .map(crate::allocs::AllocationProfiler::stats)
                .unwrap_or_default(),
            targets: asker
                .privileged()
                .then(|| crate::lock(&self.targets).current().clone()),
            peek: PeekTrigger {
                signal: self.peeker.settings().signal,
                signal_off_reason: self.info.peek_signal_off.clone(),
                protection: self.peeker.protection().clone(),
                stats: self.peeker.stats(),
                running: self.peeker.running(),
                rated_running: self.peeker.rated_running(),
                max_concurrent: self.peeker.settings().max_concurrent,
                dropped_in_kernel,
            },
        }
    }

    /// The memory budget and what each part holds against its share.
    pub fn memory(&self, pipeline: &PipelineStats) -> MemoryUsage {
        let share = |part| {
            self.budget
                .as_ref()
                .map_or(0, |budget: &crate::memory::MemoryBudget| budget.share(part))
        };
        let usage = |part, held, evicted, evicted_unit| PartUsage {
            part,
            held,
            share: share(part),
            evicted,
            evicted_unit,
        };
        let store = self.store_stats();
        let reports = self.report_gate.stats();
        let (peeks_held, peeks_evicted) = self.peeker.memory();
        let push = self.push.status();
        let symbolizer = &pipeline.symbolizer;
        let parts = vec![
            PartUsage {
                share: store.memory_limit_bytes,
                ..usage(
                    Part::Store,
                    store.memory_bytes,
                    store.buckets_evicted_for_memory,
                    "buckets",
                )
            },
            usage(
                Part::ReportIndexes,
                self.stack_indexes.bytes(),
                self.stack_indexes.evicted(),
                "indexes",
            ),
            usage(
                Part::Reports,
                reports.held,
                reports.waited,
                "reports waited",
            ),
            PartUsage {
                share: pipeline.unwinding.limit,
                ..usage(
                    Part::UnwindInfo,
                    pipeline.unwinding.bytes,
                    pipeline.unwinding.binaries_evicted,
                    "binaries",
                )
            },
            usage(
                Part::Symbolizer,
                symbolizer.parsed_bytes + symbolizer.cache_bytes,
                symbolizer.binaries_evicted + symbolizer.cache_clears,
                "binaries and caches",
            ),
            usage(
                Part::JitNames,
                pipeline.jit.bytes + pipeline.python_names.bytes,
                pipeline.jit.names_evicted + pipeline.python_names.evicted,
                "names and Python code objects",
            ),
            usage(
                Part::Processes,
                pipeline.processes.bytes + pipeline.lineages.map_or(0, |book| book.bytes),
                pipeline.processes.evicted
                    + pipeline.processes.earlier_maps_dropped
                    + pipeline
                        .processes
                        .journal
                        .map_or(0, |journal| journal.evicted)
                    + pipeline
                        .lineages
                        .map_or(0, |book| book.forked_evicted + book.exec_left_evicted),
                "records, earlier memory maps, recorded ones and fork lineages",
            ),
            usage(
                Part::Peeks,
                peeks_held,
                peeks_evicted,
                "reports and samples",
            ),
            usage(
                Part::Export,
                push.iter().map(|target| target.stats.queued_bytes).sum(),
                push.iter().map(|target| target.stats.dropped).sum(),
                "payloads",
            ),
        ];
        let budget = self.budget.as_ref();
        MemoryUsage {
            budget: budget.map_or(0, |budget| budget.total),
            program: budget.map_or(0, |budget| budget.program),
            kernel_buffers: budget.map_or(0, |budget| budget.kernel_buffers),
            parts,
            heap: crate::memory::counting::heap_bytes(),
            process: crate::memory::process::figures(),
        }
    }

    /// Chooses what the kernel samples (root and the admin group only).
    pub fn set_targets(&self, asker: Asker, set: TargetSet) -> Result<TargetSet, ServiceError> {
        if !asker.privileged() {
            return Err(ServiceError::PermissionDenied(
                "permission denied: only root and the admin group may choose what the whole \
                 machine samples"
                    .to_owned(),
            ));
        }
        let mut targets = crate::lock(&self.targets);
        targets.set(set).map_err(|err| match err {
            TargetsError::NoSuchCgroup { .. }
            | TargetsError::NoSuchProcess { .. }
            | TargetsError::TooMany { .. } => ServiceError::invalid(err.to_string()),
            _ => ServiceError::Internal(err.to_string()),
        })?;
        Ok(targets.current().clone())
    }
}
