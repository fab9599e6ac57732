//! The service the daemon offers, whatever the protocol: profiles of
//! windows to come (`windows`: Profile and sessions) and past (Query,
//! Callers, `diff`), the live `top`, `peeks`, and the daemon's `status` and
//! targets, and allocation profiles (`allocs`), each authorized by
//! `access` and validated by `selection`, on
//! domain types. The transports (`crate::transport`: gRPC, HTTP) are thin
//! shims over it.
//!
//! This layer owns the open sessions (`sessions`), the running profiles'
//! cut tokens, the per-caller bounds (`limits`), stopping (`stopping`) and
//! the self-metrics (`metrics`). It reads the store, the peeker and the
//! pipeline's window cuts; it must not touch the kernel's maps itself (the
//! targets and families it changes own theirs).

pub mod access;
mod allocs;
pub mod answers;
mod diff;
pub mod error;
mod export;
pub mod limits;
pub mod metrics;
mod overview;
mod peeks;
mod rated;
pub mod report_memory;
pub mod rpc_counts;
pub mod selection;
pub mod sessions;
pub mod stack_indexes;
mod status;
pub mod stopping;
mod top;
mod windows;

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant},
};

use tokio::sync::Notify;

use self::{
    access::{AccessPolicy, CallerKey},
    limits::{ServiceLimits, StreamSlots},
    rpc_counts::RpcCounts,
    sessions::Sessions,
    stopping::{StopSwitch, Stopping},
};
pub use self::{
    allocs::{AllocsSpec, StartedAllocs},
    diff::{DiffDrawing, DiffResult, DiffSpec},
    error::ServiceError,
    export::{DeliveryStats, ExportCursor, PushBoard, PushTarget, TargetStatus},
    overview::{MAX_FUNCTIONS, ProcessSamples, RankedFunctions, unix_millis},
    status::{DaemonStatus, HttpSettings, PeekTrigger},
    top::{TopSpec, TopUpdate},
    windows::{CallersResult, PastWindow, ProfileSpec, StartedSession},
};
use crate::{
    kernel::{
        families::Families,
        offcpu::{OffCpuRecorder, RecordingGuard},
        targets::Targets,
    },
    memory::Part,
    peek::Peeker,
    pipeline::PipelineHandle,
    store::{Store, WindowHolds},
};

/// What the service reports about the daemon itself.
#[derive(Clone, Debug)]
pub struct DaemonInfo {
    pub cpus: Vec<u32>,
    pub frequency_hz: u32,
    /// Bytes of user stack each sample copies (0: frame pointers).
    pub stack_copy_bytes: u64,
    pub max_profile_duration: Duration,
    pub started: Instant,
    /// Why peeks by signal are off, when they are.
    pub peek_signal_off: Option<String>,
    /// The HTTP listener's settings (`None`: it is off).
    pub http: Option<HttpSettings>,
}

/// What the service is made of.
pub struct ServiceParts {
    pub pipeline: PipelineHandle,
    pub store: Arc<RwLock<Store>>,
    pub peeker: Peeker,
    pub families: Families,
    pub access: AccessPolicy,
    pub limits: ServiceLimits,
    pub targets: Targets,
    pub offcpu: OffCpuRecorder,
    /// Allocation profiles (`None`: not offered).
    pub allocations: Option<crate::allocs::AllocationProfiler>,
    pub info: DaemonInfo,
    /// Keep the indexes of the reports most asked for from the start (see
    /// [`stack_indexes::StackIndexes::warmed`]).
    pub warm_report_indexes: bool,
    /// The memory budget divided: the report indexes and the reports being
    /// made keep to their shares, and status shows every part's.
    pub budget: Option<crate::memory::MemoryBudget>,
}

/// Running profiles that can be cut short, by caller and token.
type CutTokens = Mutex<HashMap<(CallerKey, String), Arc<Notify>>>;

/// The service.
pub struct Service {
    pipeline: PipelineHandle,
    store: Arc<RwLock<Store>>,
    /// The tree reports' indexes of the store's stacks.
    stack_indexes: Arc<stack_indexes::StackIndexes>,
    /// Lets reports through as their share of the memory budget allows.
    report_gate: Arc<report_memory::ReportGate>,
    budget: Option<crate::memory::MemoryBudget>,
    /// Keeps the store's buckets as drained while a window is open.
    holds: WindowHolds,
    stop_switch: StopSwitch,
    stopping: Stopping,
    /// Requests answered, by method and code, for the metrics.
    rpc_counts: RpcCounts,
    /// What a configuration reload changes: the sampling frequency and the
    /// longest profile (ms).
    frequency_hz: AtomicU32,
    max_profile_duration_ms: AtomicU64,
    sessions: Mutex<Sessions>,
    cuts: CutTokens,
    peeker: Peeker,
    families: Families,
    access: AccessPolicy,
    limits: ServiceLimits,
    streams: StreamSlots,
    targets: Mutex<Targets>,
    /// Turns the kernel's off-CPU recording on for the windows that ask.
    offcpu: OffCpuRecorder,
    /// The off-CPU recordings of open sessions, by session id.
    session_recordings: Mutex<HashMap<String, RecordingGuard>>,
    /// The push targets running, for status.
    push: PushBoard,
    allocations: Option<crate::allocs::AllocationProfiler>,
    alloc_sessions: Arc<allocs::AllocSessions>,
    info: DaemonInfo,
}

impl Service {
    pub fn new(parts: ServiceParts) -> Self {
        let ServiceParts {
            pipeline,
            store,
            peeker,
            families,
            access,
            limits,
            targets,
            offcpu,
            allocations,
            info,
            warm_report_indexes,
            budget,
        } = parts;
        let share = |part| budget.as_ref().map_or(0, |budget| budget.share(part));
        let holds = crate::read_lock(&store).holds();
        let (stop_switch, stopping) = stopping::flag();
        Self {
            pipeline,
            store,
            stack_indexes: Arc::new(
                match warm_report_indexes {
                    true => stack_indexes::StackIndexes::warmed(),
                    false => stack_indexes::StackIndexes::default(),
                }
                .with_limit(share(Part::ReportIndexes)),
            ),
            report_gate: Arc::new(report_memory::ReportGate::new(share(Part::Reports))),
            budget,
            holds,
            stop_switch,
            stopping,
            rpc_counts: RpcCounts::default(),
            frequency_hz: AtomicU32::new(info.frequency_hz),
            max_profile_duration_ms: AtomicU64::new(info.max_profile_duration.as_millis() as u64),
            sessions: Mutex::new(Sessions::new(
                limits.max_sessions,
                limits.max_sessions_per_caller,
            )),
            cuts: Mutex::new(HashMap::new()),
            peeker,
            families,
            access,
            limits,
            streams: StreamSlots::default(),
            targets: Mutex::new(targets),
            offcpu,
            session_recordings: Mutex::new(HashMap::new()),
            push: PushBoard::default(),
            allocations,
            alloc_sessions: Arc::default(),
            info,
        }
    }

    /// Ends the requests that wait (Profile, Allocs, Top, WatchPeeks) with
    /// an error that says the daemon is stopping, and refuses new ones;
    /// takes off the probes of every allocation profile; returns the number
    /// of open sessions, which are discarded.
    pub fn stop(&self) -> usize {
        self.stop_switch.stop();
        self.end_allocation_profiles();
        self.sessions().len()
    }

    /// The flag [`Service::stop`] raises.
    pub fn stopping(&self) -> Stopping {
        self.stopping.clone()
    }

    /// The access rules (for the listeners, which learn who asks).
    pub fn access(&self) -> &AccessPolicy {
        &self.access
    }

    /// The sampling frequency now (a reload may change it).
    fn frequency_hz(&self) -> u32 {
        self.frequency_hz.load(Ordering::Relaxed)
    }

    fn max_profile_duration(&self) -> Duration {
        Duration::from_millis(self.max_profile_duration_ms.load(Ordering::Relaxed))
    }

    /// Applies a configuration reload's sampling frequency and longest
    /// profile to the requests that come from now on.
    pub fn set_live_settings(&self, frequency_hz: u32, max_profile_duration: Duration) {
        self.frequency_hz.store(frequency_hz, Ordering::Relaxed);
        self.max_profile_duration_ms
            .store(max_profile_duration.as_millis() as u64, Ordering::Relaxed);
    }

    /// Applies a configuration reload's `offcpu` setting.
    pub fn set_offcpu_probability(&self, probability: f64) {
        self.offcpu.set_sample_probability(probability);
    }

    /// The counts of the requests answered, which the listeners fill.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.rpc_counts.clone()
    }

    /// The self-metrics in the OpenMetrics text format.
    pub fn metrics(&self) -> String {
        self.metrics_as(metrics::Exposition::OpenMetrics)
    }

    /// The self-metrics in `format`.
    pub fn metrics_as(&self, format: metrics::Exposition) -> String {
        let pipeline = self.pipeline.stats();
        let text = metrics::render(metrics::Snapshot {
            uptime: self.info.started.elapsed(),
            frequency_hz: self.frequency_hz(),
            memory: self.memory(&pipeline),
            pipeline,
            store: self.store_stats(),
            report_index_bytes: self.stack_indexes.bytes(),
            peeks: self.peeker.stats(),
            peeks_running: self.peeker.running(),
            sessions_open: self.sessions().len(),
            allocations: self
                .allocations
                .as_ref()
                .map(crate::allocs::AllocationProfiler::stats),
            rpcs: self.rpc_counts.snapshot(),
            push: self.push.status(),
        });
        format.write(text)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        crate::lock(&self.sessions)
    }

    fn store_stats(&self) -> crate::store::StoreStats {
        crate::read_lock(&self.store).stats()
    }
}

#[cfg(test)]
pub(crate) mod tests;
