//! The gRPC API (v1), for dashboards and for profilerctl.
//!
//! A thin layer: each handler validates its request (see `convert`), asks
//! the collector for window cuts, reads the store, renders a report, and
//! maps every failure once, in [`ApiError`], to a status code with a message
//! that says what to fix. It owns the open sessions; it must not touch the
//! kernel or the symbolizer.

mod convert;
mod limits;
mod peeks;
mod top;

pub use limits::{ApiLimits, CallerKey};

use std::{
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use profiler_common::{Counter, SampleKind};
use tonic::{Request, Response, Status};

use crate::{
    access::{AccessError, AccessPolicy, Caller, Credentials, TrustedRemote},
    collector::{CollectorError, CollectorHandle},
    drain,
    metrics::RpcCounts,
    peek::Peeker,
    profile::ReportOptions,
    proto::v1::{self, profiler_server::Profiler},
    report,
    sessions::{Session, SessionError, Sessions},
    stopping::{StopSwitch, Stopping},
    store::{Query, Selector, Store, WindowHolds},
    targets::{Targets, TargetsError},
};

pub use crate::proto::v1::profiler_server::ProfilerServer;

/// Why a request failed; each maps to one gRPC status code.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidArgument(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    PermissionDenied(String),
    #[error("{0}")]
    ResourceExhausted(String),
    #[error(transparent)]
    Unavailable(#[from] CollectorError),
    /// The daemon is shutting down.
    #[error("{}", crate::stopping::MESSAGE)]
    Stopping,
    #[error("{0}")]
    Internal(String),
}

impl ApiError {
    fn invalid(message: impl Into<String>) -> Self {
        Self::InvalidArgument(message.into())
    }
}

impl From<AccessError> for ApiError {
    fn from(err: AccessError) -> Self {
        match err {
            AccessError::NoSuchProcess(_) => Self::NotFound(err.to_string()),
            _ => Self::PermissionDenied(err.to_string()),
        }
    }
}

impl From<SessionError> for ApiError {
    fn from(err: SessionError) -> Self {
        match err {
            SessionError::TooMany { .. } | SessionError::TooManyForCaller { .. } => {
                Self::ResourceExhausted(err.to_string())
            }
            SessionError::Unknown(_) => Self::NotFound(err.to_string()),
        }
    }
}

impl From<ApiError> for Status {
    fn from(err: ApiError) -> Self {
        let message = err.to_string();
        match err {
            ApiError::InvalidArgument(_) => Status::invalid_argument(message),
            ApiError::NotFound(_) => Status::not_found(message),
            ApiError::PermissionDenied(_) => Status::permission_denied(message),
            ApiError::ResourceExhausted(_) => Status::resource_exhausted(message),
            ApiError::Unavailable(_) | ApiError::Stopping => Status::unavailable(message),
            ApiError::Internal(_) => Status::internal(message),
        }
    }
}

/// Reads `query`'s profile from the store and hands it to `make`, off the
/// async threads.
async fn read_profile<T: Send + 'static>(
    store: Arc<RwLock<Store>>,
    query: Query,
    make: impl FnOnce(&crate::profile::Profile) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || {
        let profile = crate::read_lock(&store).profile(&query);
        make(&profile)
    })
    .await
    .map_err(|err| ApiError::Internal(format!("the report task failed: {err}")))?
}

/// Where a request came from.
enum Peer {
    TrustedRemote,
    Local(Option<Credentials>),
}

/// What the service reports about the daemon itself.
#[derive(Clone, Debug)]
pub struct DaemonInfo {
    pub cpus: Vec<u32>,
    pub frequency_hz: u32,
    pub max_profile_duration: Duration,
    pub started: Instant,
    /// Why peeks by signal are off, when they are.
    pub peek_signal_off: Option<String>,
}

/// The `Profiler` service.
pub struct ProfilerService {
    collector: CollectorHandle,
    store: Arc<RwLock<Store>>,
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
    peeker: Peeker,
    access: AccessPolicy,
    limits: ApiLimits,
    streams: limits::StreamSlots,
    targets: Mutex<Targets>,
    info: DaemonInfo,
}

impl ProfilerService {
    pub fn new(
        collector: CollectorHandle,
        store: Arc<RwLock<Store>>,
        peeker: Peeker,
        access: AccessPolicy,
        limits: ApiLimits,
        targets: Targets,
        info: DaemonInfo,
    ) -> Self {
        let holds = crate::read_lock(&store).holds();
        let (stop_switch, stopping) = crate::stopping::flag();
        Self {
            collector,
            store,
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
            peeker,
            access,
            limits,
            streams: limits::StreamSlots::default(),
            targets: Mutex::new(targets),
            info,
        }
    }

    /// Ends the requests that wait (Profile, Top, WatchPeeks) with a status
    /// that says the daemon is stopping, and refuses new ones; returns the
    /// number of open sessions, which are discarded.
    pub fn stop(&self) -> usize {
        self.stop_switch.stop();
        self.sessions().len()
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

    /// The counts of the requests answered, which the serving module's
    /// layer fills.
    pub fn rpc_counts(&self) -> RpcCounts {
        self.rpc_counts.clone()
    }

    /// The self-metrics in the Prometheus text format.
    pub fn metrics(&self) -> String {
        crate::metrics::render(crate::metrics::Snapshot {
            uptime: self.info.started.elapsed(),
            frequency_hz: self.frequency_hz(),
            pipeline: self.collector.stats(),
            store: self.store_stats(),
            peeks: self.peeker.stats(),
            peeks_running: self.peeker.running(),
            sessions_open: self.sessions().len(),
            rpcs: self.rpc_counts.snapshot(),
        })
    }

    /// The flag [`ProfilerService::stop`] raises.
    pub fn stopping(&self) -> Stopping {
        self.stopping.clone()
    }

    /// The caller's key for the per-caller bounds.
    fn caller_key<T>(request: &Request<T>) -> CallerKey {
        match Self::peer(request) {
            Peer::Local(Some(credentials)) => CallerKey::User(credentials.uid),
            Peer::Local(None) | Peer::TrustedRemote => CallerKey::Remote,
        }
    }

    /// Who sent `request`, by the socket's peer credentials.
    fn caller<T>(&self, request: &Request<T>) -> Result<Caller, ApiError> {
        match Self::peer(request) {
            Peer::TrustedRemote => Ok(Caller::Privileged),
            Peer::Local(credentials) => Ok(self.access.caller(credentials)?),
        }
    }

    /// Where `request` came from: a client over TCP that passed mutual TLS,
    /// or a local process with the socket's peer credentials.
    fn peer<T>(request: &Request<T>) -> Peer {
        if request.extensions().get::<TrustedRemote>().is_some() {
            return Peer::TrustedRemote;
        }
        Peer::Local(
            request
                .extensions()
                .get::<tonic::transport::server::UdsConnectInfo>()
                .and_then(|info| info.peer_cred)
                .map(|cred| Credentials {
                    uid: cred.uid(),
                    gid: cred.gid(),
                    pid: cred.pid().and_then(|pid| u32::try_from(pid).ok()),
                }),
        )
    }

    /// Checks that `caller` may see what `selector` selects.
    fn check_selector(
        &self,
        caller: Caller,
        selector: Option<&v1::Selector>,
    ) -> Result<(), ApiError> {
        let tasks: Vec<u32> = selector
            .map(|selector| {
                selector
                    .pids
                    .iter()
                    .chain(&selector.tids)
                    .copied()
                    .collect()
            })
            .unwrap_or_default();
        let uids = selector.map_or(&[][..], |selector| &selector.uids[..]);
        Ok(self.access.check_selection(caller, &tasks, uids)?)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        crate::lock(&self.sessions)
    }

    async fn do_profile(&self, request: v1::ProfileRequest) -> Result<v1::ProfileReply, ApiError> {
        let duration = Duration::from_millis(request.duration_ms);
        if duration.is_zero() {
            return Err(ApiError::invalid(
                "duration_ms must be at least 1 (it is how long to profile, in milliseconds)",
            ));
        }
        if duration > self.max_profile_duration() {
            return Err(ApiError::invalid(format!(
                "duration_ms {} is longer than the maximum {} ms ({}); profile for less, or \
                 raise max_profile_duration in the daemon's configuration",
                request.duration_ms,
                self.max_profile_duration().as_millis(),
                humantime::format_duration(self.max_profile_duration())
            )));
        }
        let options = ReportOptions::try_from(request.options)?;
        let selector = convert::selector(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;

        let started = Instant::now();
        let _hold = self.holds.hold(SystemTime::now());
        let start = self.collector.open_window().await?;
        tokio::select! {
            () = tokio::time::sleep_until((started + duration).into()) => {}
            () = self.stopping.wait() => return Err(ApiError::Stopping),
        }
        let end = self.collector.close_window().await?;
        self.report(start, end, selector, kind, options).await
    }

    async fn do_start(
        &self,
        owner: CallerKey,
        request: v1::StartProfileRequest,
    ) -> Result<v1::StartProfileReply, ApiError> {
        let selector = convert::selector(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;
        let hold = self.holds.hold(SystemTime::now());
        let start = self.collector.open_window().await?;
        let session_id = self.sessions().open(Session {
            owner,
            start,
            hold,
            selector,
            kind,
        })?;
        Ok(v1::StartProfileReply {
            session_id,
            start_unix_nanos: convert::unix_nanos(start),
        })
    }

    async fn do_stop(&self, request: v1::StopProfileRequest) -> Result<v1::ProfileReply, ApiError> {
        let options = ReportOptions::try_from(request.options)?;
        let session = self.sessions().close(&request.session_id)?;
        let end = self.collector.close_window().await?;
        self.report(session.start, end, session.selector, session.kind, options)
            .await
    }

    async fn do_query(&self, request: v1::QueryRequest) -> Result<v1::ProfileReply, ApiError> {
        let options = ReportOptions::try_from(request.options)?;
        let selector = convert::selector_of_past(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;
        let (start, end) = self
            .past_window(request.start_unix_nanos, request.end_unix_nanos)
            .await?;
        self.report(start, end, selector, kind, options).await
    }

    async fn do_callers(&self, request: v1::CallersRequest) -> Result<v1::CallersReply, ApiError> {
        if request.function.is_empty() {
            return Err(ApiError::invalid(
                "function must name a function, e.g. \"malloc\" or \"app::handle\"",
            ));
        }
        let selector = convert::selector_of_past(request.selector)?;
        let (start, end) = self
            .past_window(request.start_unix_nanos, request.end_unix_nanos)
            .await?;
        let function = request.function;
        self.with_profile(start, end, selector, SampleKind::CpuClock, move |profile| {
            let (callers, total) = report::callers(profile, &function);
            Ok(v1::CallersReply {
                text: report::callers_text(&function, &callers, total),
                total,
                callers: callers
                    .into_iter()
                    .map(|caller| v1::Caller {
                        function: caller.function.to_string(),
                        file: caller.file.map(|file| file.to_string()).unwrap_or_default(),
                        line: caller.line,
                        count: caller.count,
                    })
                    .collect(),
                summary: Some(convert::summary(profile)),
            })
        })
        .await
    }

    async fn do_diff(&self, request: v1::DiffRequest) -> Result<v1::DiffReply, ApiError> {
        let window = |window: Option<v1::Window>, name: &str| {
            window.ok_or_else(|| {
                ApiError::invalid(format!("{name} must give the window (start_unix_nanos)"))
            })
        };
        let (base, target) = (
            window(request.base, "base")?,
            window(request.target, "target")?,
        );
        let base_selector = convert::selector_of_past(request.selector)?;
        let target_selector = match request.target_selector {
            Some(selector) => convert::selector_of_past(Some(selector))?,
            None => base_selector.clone(),
        };
        let (base_start, base_end) = self
            .past_window(base.start_unix_nanos, base.end_unix_nanos)
            .await?;
        let (target_start, target_end) = self
            .past_window(target.start_unix_nanos, target.end_unix_nanos)
            .await?;
        let query = |start, end, selector| Query {
            start,
            end,
            selector,
            kind: SampleKind::CpuClock,
            frequency_hz: self.frequency_hz(),
        };
        let queries = [
            query(base_start, base_end, base_selector),
            query(target_start, target_end, target_selector),
        ];
        let limit = match request.limit {
            0 => 50,
            limit => limit as usize,
        };
        let drawing = match request.options {
            None => None,
            Some(options) => {
                let options = ReportOptions::try_from(Some(options))?;
                let format = match options.format {
                    crate::profile::Format::Pprof => report::DiffFormat::Pprof,
                    crate::profile::Format::Flamegraph => report::DiffFormat::Flamegraph,
                    other => {
                        return Err(ApiError::invalid(format!(
                            "a diff is drawn as pprof or flamegraph, not {other:?}; leave \
                             options unset for the table only"
                        )));
                    }
                };
                Some((format, options))
            }
        };
        let (normalize, max_response_bytes) = (request.normalize, self.limits.max_response_bytes);
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || {
            let [base, target] = queries.map(|query| crate::read_lock(&store).profile(&query));
            let report = match drawing {
                None => Vec::new(),
                Some((format, options)) => {
                    let report = report::render_diff(&base, &target, format, &options, normalize)
                        .map_err(|err| {
                        ApiError::Internal(format!("cannot draw the diff: {err}"))
                    })?;
                    limits::check_reply_size(report.len(), max_response_bytes)?;
                    report
                }
            };
            let changes = report::diff(&base, &target);
            Ok(v1::DiffReply {
                text: report::diff_text(&changes, limit),
                changes: changes
                    .into_iter()
                    .map(|change| v1::FunctionChange {
                        function: change.function.to_string(),
                        base_self_percent: change.base_self,
                        target_self_percent: change.target_self,
                        base_total_percent: change.base_total,
                        target_total_percent: change.target_total,
                    })
                    .collect(),
                base: Some(convert::summary(&base)),
                target: Some(convert::summary(&target)),
                report,
            })
        })
        .await
        .map_err(|err| ApiError::Internal(format!("the diff task failed: {err}")))?
    }

    /// A past window from its bounds in Unix nanoseconds (end 0: now, after
    /// a drain), checked against what the store holds.
    async fn past_window(
        &self,
        start_unix_nanos: i64,
        end_unix_nanos: i64,
    ) -> Result<(SystemTime, SystemTime), ApiError> {
        let now = SystemTime::now();
        let start = convert::time(start_unix_nanos, "start_unix_nanos")?;
        let end = match end_unix_nanos {
            0 => None,
            nanos => Some(convert::time(nanos, "end_unix_nanos")?),
        };
        if end.is_some_and(|end| end <= start) || start >= now {
            return Err(ApiError::invalid(format!(
                "the window must start before it ends and before now (start_unix_nanos \
                 {start_unix_nanos}, end_unix_nanos {end_unix_nanos}, now {})",
                convert::unix_nanos(now)
            )));
        }
        let end = match end {
            Some(end) if end < now => {
                // Samples up to `end` may still be in the kernel's maps.
                let newest = crate::read_lock(&self.store).newest();
                if newest.is_none_or(|newest| newest < end) {
                    self.collector.close_window().await?;
                }
                end
            }
            _ => self.collector.close_window().await?,
        };
        let oldest = crate::read_lock(&self.store).oldest();
        if oldest.is_none_or(|oldest| end <= oldest) {
            return Err(ApiError::NotFound(format!(
                "nothing is held for that window: the daemon holds samples from {} on (its \
                 retention is {})",
                oldest.map_or_else(
                    || "no time yet".to_owned(),
                    |t| convert::unix_nanos(t).to_string()
                ),
                humantime::format_duration(self.store_stats().retention)
            )));
        }
        Ok((start, end))
    }

    fn store_stats(&self) -> crate::store::StoreStats {
        crate::read_lock(&self.store).stats()
    }

    /// Reads a window from the store and renders it, off the async threads.
    async fn report(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        kind: SampleKind,
        options: ReportOptions,
    ) -> Result<v1::ProfileReply, ApiError> {
        let max_response_bytes = self.limits.max_response_bytes;
        self.with_profile(start, end, selector, kind, move |profile| {
            let report = report::render(profile, &options)
                .map_err(|err| ApiError::Internal(format!("cannot render the report: {err}")))?;
            limits::check_reply_size(report.len(), max_response_bytes)?;
            Ok(v1::ProfileReply {
                report,
                format: convert::format_to_proto(options.format) as i32,
                summary: Some(convert::summary(profile)),
            })
        })
        .await
    }

    /// Reads a window from the store and hands its profile to `make`, off
    /// the async threads.
    async fn with_profile<T: Send + 'static>(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        kind: SampleKind,
        make: impl FnOnce(&crate::profile::Profile) -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let query = Query {
            start,
            end,
            selector,
            kind,
            frequency_hz: self.frequency_hz(),
        };
        read_profile(self.store.clone(), query, make).await
    }

    fn status(&self) -> v1::StatusReply {
        let pipeline = self.collector.stats();
        let store = self.store_stats();
        v1::StatusReply {
            version: env!("CARGO_PKG_VERSION").to_owned(),
            uptime_ms: self.info.started.elapsed().as_millis() as u64,
            cpus: self.info.cpus.clone(),
            frequency_hz: self.frequency_hz(),
            samples_taken: pipeline.samples_taken(),
            samples_lost: convert::loss_counts(drain::losses(&pipeline.counters)),
            processes_seen: pipeline.processes.processes_seen,
            symbolizer: Some(v1::SymbolizerStatus {
                binaries: pipeline.symbolizer.binaries,
                user_addresses_cached: pipeline.symbolizer.user_addresses_cached,
                kernel_addresses_cached: pipeline.symbolizer.kernel_addresses_cached,
                processes_tracked: pipeline.processes.processes_tracked,
            }),
            store: Some(v1::StoreStatus {
                memory_bytes: store.memory_bytes,
                memory_limit_bytes: store.memory_limit_bytes,
                retention_ms: store.retention.as_millis() as u64,
                buckets: store.buckets,
                oldest_unix_nanos: store.oldest.map_or(0, convert::unix_nanos),
                distinct_stacks: store.distinct_stacks,
                buckets_evicted_for_memory: store.buckets_evicted_for_memory,
                resolution_ms: store.resolution.as_millis() as u64,
                coarsest_bucket_ms: store.coarsest_bucket.as_millis() as u64,
                buckets_coarsened_for_memory: store.buckets_coarsened_for_memory,
            }),
            max_profile_duration_ms: self.max_profile_duration().as_millis() as u64,
            open_sessions: self.sessions().len() as u32,
            drains: pipeline.drains,
            targets: Some(convert::targets(crate::lock(&self.targets).current())),
            samples_outside_targets: pipeline.counters[Counter::OutsideTargets as usize],
            peek: Some(peeks::status(
                &self.peeker,
                self.info.peek_signal_off.as_deref(),
                &pipeline,
            )),
            metrics: String::new(),
        }
    }
}

#[tonic::async_trait]
impl Profiler for ProfilerService {
    async fn profile(
        &self,
        request: Request<v1::ProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        Ok(Response::new(self.do_profile(request.into_inner()).await?))
    }

    async fn start_profile(
        &self,
        request: Request<v1::StartProfileRequest>,
    ) -> Result<Response<v1::StartProfileReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        let owner = Self::caller_key(&request);
        Ok(Response::new(
            self.do_start(owner, request.into_inner()).await?,
        ))
    }

    async fn stop_profile(
        &self,
        request: Request<v1::StopProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        Ok(Response::new(self.do_stop(request.into_inner()).await?))
    }

    async fn query(
        &self,
        request: Request<v1::QueryRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        Ok(Response::new(self.do_query(request.into_inner()).await?))
    }

    async fn get_status(
        &self,
        request: Request<v1::GetStatusRequest>,
    ) -> Result<Response<v1::StatusReply>, Status> {
        let mut status = self.status();
        if request.into_inner().metrics {
            status.metrics = self.metrics();
        }
        Ok(Response::new(status))
    }

    async fn callers(
        &self,
        request: Request<v1::CallersRequest>,
    ) -> Result<Response<v1::CallersReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        Ok(Response::new(self.do_callers(request.into_inner()).await?))
    }

    async fn diff(
        &self,
        request: Request<v1::DiffRequest>,
    ) -> Result<Response<v1::DiffReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        if let Some(target) = &request.get_ref().target_selector {
            self.check_selector(caller, Some(target))?;
        }
        Ok(Response::new(self.do_diff(request.into_inner()).await?))
    }

    async fn peek(
        &self,
        request: Request<v1::PeekRequest>,
    ) -> Result<Response<v1::PeekReport>, Status> {
        let caller = self.caller(&request)?;
        let pid = request.into_inner().pid;
        if pid == 0 {
            return Err(ApiError::invalid("pid must be a process id (not 0)").into());
        }
        self.access
            .check_tasks(caller, &[pid])
            .map_err(ApiError::from)?;
        let report = self.peeker.request(pid).await.map_err(ApiError::from)?;
        Ok(Response::new(peeks::report(&report)))
    }

    async fn list_peeks(
        &self,
        request: Request<v1::ListPeeksRequest>,
    ) -> Result<Response<v1::ListPeeksReply>, Status> {
        let caller = self.caller(&request)?;
        Ok(Response::new(v1::ListPeeksReply {
            peeks: self
                .peeker
                .list()
                .into_iter()
                .filter(|peek| peeks::may_see(caller, peek.uid))
                .map(peeks::summary)
                .collect(),
        }))
    }

    async fn get_peek(
        &self,
        request: Request<v1::GetPeekRequest>,
    ) -> Result<Response<v1::PeekReport>, Status> {
        let caller = self.caller(&request)?;
        let id = request.into_inner().id;
        match self.peeker.get(&id) {
            Some(Ok(report)) if peeks::may_see(caller, report.uid) => {
                Ok(Response::new(peeks::report(&report)))
            }
            Some(Ok(_)) => Err(peeks::not_found(&id).into()),
            Some(Err(err)) => Err(ApiError::Internal(err).into()),
            None => Err(peeks::not_found(&id).into()),
        }
    }

    async fn set_targets(
        &self,
        request: Request<v1::SetTargetsRequest>,
    ) -> Result<Response<v1::Targets>, Status> {
        if self.caller(&request)? != Caller::Privileged {
            return Err(ApiError::PermissionDenied(
                "permission denied: only root and the admin group may choose what the whole \
                 machine samples"
                    .to_owned(),
            )
            .into());
        }
        let set = convert::target_set(request.into_inner())?;
        let mut targets = crate::lock(&self.targets);
        targets.set(set).map_err(|err| match err {
            TargetsError::NoSuchCgroup { .. } | TargetsError::TooMany { .. } => {
                ApiError::invalid(err.to_string())
            }
            _ => ApiError::Internal(err.to_string()),
        })?;
        Ok(Response::new(convert::targets(targets.current())))
    }

    type WatchPeeksStream = tokio_stream::wrappers::ReceiverStream<Result<v1::PeekReport, Status>>;

    async fn watch_peeks(
        &self,
        request: Request<v1::WatchPeeksRequest>,
    ) -> Result<Response<Self::WatchPeeksStream>, Status> {
        let caller = self.caller(&request)?;
        let slot = self.streams.acquire(
            Self::caller_key(&request),
            self.limits.max_streams_per_caller,
        )?;
        let (reports, stream) = tokio::sync::mpsc::channel(4);
        tokio::spawn(peeks::forward(
            self.peeker.subscribe(),
            caller,
            reports,
            self.stopping.clone(),
            slot,
        ));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            stream,
        )))
    }

    type TopStream = tokio_stream::wrappers::ReceiverStream<Result<v1::TopUpdate, Status>>;

    async fn top(
        &self,
        request: Request<v1::TopRequest>,
    ) -> Result<Response<Self::TopStream>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref())?;
        let slot = self.streams.acquire(
            Self::caller_key(&request),
            self.limits.max_streams_per_caller,
        )?;
        let top_request = top::TopRequest::try_from(request.into_inner())?;
        let sources = top::TopSources {
            collector: self.collector.clone(),
            store: self.store.clone(),
            holds: self.holds.clone(),
            frequency_hz: self.frequency_hz(),
            stopping: self.stopping.clone(),
        };
        // One update may wait while the next is made.
        let (updates, stream) = tokio::sync::mpsc::channel(1);
        tokio::spawn(top::run(sources, top_request, updates, slot));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            stream,
        )))
    }
}
