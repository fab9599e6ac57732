//! The gRPC API (v1), for dashboards and for profilerctl.
//!
//! A thin layer: each handler authorizes its caller (see `access`),
//! validates its request (see `convert`), asks the collector for window
//! cuts, reads the store with the caller's sample access, renders a report,
//! and maps every failure once, in [`ApiError`], to a status code with a
//! message that says what to fix. It owns the open sessions and the running
//! profiles' cut tokens; it must not touch the kernel or the symbolizer.

pub mod codec;
mod convert;
mod diff;
mod limits;
mod peeks;
mod status;
mod top;

pub use limits::{ApiLimits, CallerKey};

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex, RwLock,
        atomic::{AtomicU32, AtomicU64, Ordering},
    },
    time::{Duration, Instant, SystemTime},
};

use profiler_common::SampleKind;
use tokio::sync::Notify;
use tonic::{Request, Response, Status};

use crate::{
    kernel::families::{Families, FamilyError},
    kernel::targets::{Targets, TargetsError},
    peek::Peeker,
    pipeline::{CollectorError, CollectorHandle},
    profile::{Profile, ReportOptions},
    proto::v1::{self, profiler_server::Profiler},
    quote, report,
    service::access::{AccessError, AccessPolicy, Caller, Credentials, TrustedRemote, Window},
    service::metrics::RpcCounts,
    service::sessions::{Requester, Session, SessionError, Sessions},
    service::stopping::{StopSwitch, Stopping},
    store::{Query, SampleAccess, Selector, Store, WindowHolds},
};

pub use crate::proto::v1::profiler_server::ProfilerServer;

/// Longest session id, peek id or cut token a request may send.
const MAX_ID_BYTES: usize = 128;

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
    #[error("{0}")]
    FailedPrecondition(String),
    #[error(transparent)]
    Unavailable(#[from] CollectorError),
    /// The daemon is shutting down.
    #[error("{}", crate::service::stopping::MESSAGE)]
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
            SessionError::TooMany { .. }
            | SessionError::Reserved { .. }
            | SessionError::TooManyForCaller { .. } => Self::ResourceExhausted(err.to_string()),
            SessionError::Unknown(_) => Self::NotFound(err.to_string()),
            SessionError::NotYours(_) => Self::PermissionDenied(err.to_string()),
        }
    }
}

impl From<FamilyError> for ApiError {
    fn from(err: FamilyError) -> Self {
        match err {
            FamilyError::Unavailable(_) => Self::FailedPrecondition(err.to_string()),
            FamilyError::AlreadyFollowed(_) => Self::InvalidArgument(err.to_string()),
            FamilyError::Map { .. } => Self::Internal(err.to_string()),
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
            ApiError::FailedPrecondition(_) => Status::failed_precondition(message),
            ApiError::Unavailable(_) | ApiError::Stopping => Status::unavailable(message),
            ApiError::Internal(_) => Status::internal(message),
        }
    }
}

/// What a report may show its asker: whose samples, and whether kernel
/// addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Sight {
    access: SampleAccess,
    kernel_addresses: bool,
}

impl Sight {
    fn of(caller: Caller) -> Self {
        Self {
            access: caller.sample_access(),
            kernel_addresses: caller.reads_kernel_addresses(),
        }
    }
}

/// Reads `query`'s profile from the store as `sight` allows, and hands it
/// to `make`, off the async threads.
async fn read_profile<T: Send + 'static>(
    store: Arc<RwLock<Store>>,
    query: Query,
    kernel_addresses: bool,
    make: impl FnOnce(&Profile) -> Result<T, ApiError> + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(move || {
        let mut profile = crate::read_lock(&store).profile(&query);
        if !kernel_addresses {
            profile.hide_kernel_addresses();
        }
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
    /// Running Profile requests that CutProfile can end, by caller and token.
    cuts: Mutex<HashMap<(CallerKey, String), Arc<Notify>>>,
    peeker: Peeker,
    families: Families,
    access: AccessPolicy,
    limits: ApiLimits,
    streams: limits::StreamSlots,
    targets: Mutex<Targets>,
    info: DaemonInfo,
}

/// Removes a running profile's cut token when the profile ends.
struct CutToken<'a> {
    cuts: &'a Mutex<HashMap<(CallerKey, String), Arc<Notify>>>,
    key: (CallerKey, String),
}

impl Drop for CutToken<'_> {
    fn drop(&mut self) {
        crate::lock(self.cuts).remove(&self.key);
    }
}

/// What the service is made of.
pub struct ServiceParts {
    pub collector: CollectorHandle,
    pub store: Arc<RwLock<Store>>,
    pub peeker: Peeker,
    pub families: Families,
    pub access: AccessPolicy,
    pub limits: ApiLimits,
    pub targets: Targets,
    pub info: DaemonInfo,
}

impl ProfilerService {
    pub fn new(parts: ServiceParts) -> Self {
        let ServiceParts {
            collector,
            store,
            peeker,
            families,
            access,
            limits,
            targets,
            info,
        } = parts;
        let holds = crate::read_lock(&store).holds();
        let (stop_switch, stopping) = crate::service::stopping::flag();
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
            cuts: Mutex::new(HashMap::new()),
            peeker,
            families,
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
        crate::service::metrics::render(crate::service::metrics::Snapshot {
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
            Peer::TrustedRemote => Ok(Caller::Root),
            Peer::Local(credentials) => Ok(self.access.caller(credentials)?),
        }
    }

    /// The caller and its key, as sessions and cut tokens know it.
    fn requester<T>(&self, request: &Request<T>) -> Result<(Caller, Requester), ApiError> {
        let caller = self.caller(request)?;
        let requester = Requester {
            key: Self::caller_key(request),
            privileged: caller.sees_everything(),
        };
        Ok((caller, requester))
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

    /// Checks that `caller` may see what `selector` selects in a window.
    fn check_selector(
        &self,
        caller: Caller,
        selector: Option<&v1::Selector>,
        window: Window,
    ) -> Result<(), ApiError> {
        let selector = selector.cloned().unwrap_or_default();
        convert::check_selector_bounds(&selector)?;
        let tasks: Vec<u32> = selector
            .pids
            .iter()
            .chain(&selector.tids)
            .copied()
            .collect();
        Ok(self
            .access
            .check_selection(caller, &tasks, &selector.uids, window)?)
    }

    fn sessions(&self) -> std::sync::MutexGuard<'_, Sessions> {
        crate::lock(&self.sessions)
    }

    async fn do_profile(
        &self,
        caller: Caller,
        key: CallerKey,
        request: v1::ProfileRequest,
    ) -> Result<v1::ProfileReply, ApiError> {
        let duration = convert::profile_duration(request.duration_ms, self.max_profile_duration())?;
        let options = ReportOptions::try_from(request.options)?;
        let selector = convert::selector(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;
        let cut = match request.cut_token.as_str() {
            "" => None,
            token => Some(self.register_cut(key, token)?),
        };

        let started = Instant::now();
        let _hold = self.holds.hold(SystemTime::now());
        let start = self.collector.open_window().await?;
        let cut_short = tokio::select! {
            () = tokio::time::sleep_until((started + duration).into()) => false,
            () = async {
                match &cut {
                    Some((notify, _)) => notify.notified().await,
                    None => std::future::pending().await,
                }
            } => true,
            () = self.stopping.wait() => return Err(ApiError::Stopping),
        };
        drop(cut);
        let end = self.collector.close_window().await?;
        let mut reply = self
            .report(start, end, selector, kind, options, Sight::of(caller))
            .await?;
        if let Some(summary) = &mut reply.summary {
            summary.cut_short = cut_short;
        }
        Ok(reply)
    }

    /// Registers a running profile's cut token.
    fn register_cut(
        &self,
        key: CallerKey,
        token: &str,
    ) -> Result<(Arc<Notify>, CutToken<'_>), ApiError> {
        convert::check_id(token, "the cut token")?;
        let mut cuts = crate::lock(&self.cuts);
        let entry = (key, token.to_owned());
        if cuts.contains_key(&entry) {
            return Err(ApiError::invalid(format!(
                "a running profile of this caller already has the cut token {}; choose a \
                 unique one",
                quote(token)
            )));
        }
        let notify = Arc::new(Notify::new());
        cuts.insert(entry.clone(), notify.clone());
        Ok((
            notify,
            CutToken {
                cuts: &self.cuts,
                key: entry,
            },
        ))
    }

    async fn do_start(
        &self,
        caller: Caller,
        requester: Requester,
        request: v1::StartProfileRequest,
    ) -> Result<v1::StartProfileReply, ApiError> {
        let selector = convert::selector(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;
        let family = match request.children {
            false => None,
            true => Some(Arc::new(
                self.families.follow(convert::family_root(&selector)?)?,
            )),
        };
        let hold = self.holds.hold(SystemTime::now());
        let start = self.collector.open_window().await?;
        let session = Session {
            owner: requester.key,
            access: caller.sample_access(),
            privileged: requester.privileged,
            start,
            hold,
            selector,
            kind,
            family,
        };
        let session_id = self.sessions().open(session, requester)?;
        Ok(v1::StartProfileReply {
            session_id,
            start_unix_nanos: convert::unix_nanos(start),
        })
    }

    async fn do_stop(
        &self,
        caller: Caller,
        requester: Requester,
        request: v1::StopProfileRequest,
    ) -> Result<v1::ProfileReply, ApiError> {
        convert::check_id(&request.session_id, "the session id")?;
        let options = ReportOptions::try_from(request.options)?;
        let mut session = self
            .sessions()
            .close(&request.session_id, requester, request.force)?;
        let end = self.collector.close_window().await?;
        if let Some(family) = session.family.take() {
            session.selector.pids = family.pids();
        }
        // The report holds what the session's owner may see, shown as its
        // stopper may see it.
        let sight = Sight {
            access: session.access,
            kernel_addresses: caller.reads_kernel_addresses(),
        };
        self.report(
            session.start,
            end,
            session.selector,
            session.kind,
            options,
            sight,
        )
        .await
    }

    async fn do_query(
        &self,
        caller: Caller,
        request: v1::QueryRequest,
    ) -> Result<v1::ProfileReply, ApiError> {
        let options = ReportOptions::try_from(request.options)?;
        let selector = convert::selector_of_past(request.selector)?;
        let kind = convert::sample_kind(request.mode)?;
        let (start, end) = self
            .past_window(request.start_unix_nanos, request.end_unix_nanos)
            .await?;
        self.report(start, end, selector, kind, options, Sight::of(caller))
            .await
    }

    async fn do_callers(
        &self,
        caller: Caller,
        request: v1::CallersRequest,
    ) -> Result<v1::CallersReply, ApiError> {
        let function = convert::function_name(request.function)?;
        let selector = convert::selector_of_past(request.selector)?;
        let (start, end) = self
            .past_window(request.start_unix_nanos, request.end_unix_nanos)
            .await?;
        let query = self.query(
            start,
            end,
            selector,
            SampleKind::CpuClock,
            Sight::of(caller),
        );
        let sight = Sight::of(caller);
        read_profile(
            self.store.clone(),
            query,
            sight.kernel_addresses,
            move |profile| {
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
            },
        )
        .await
    }

    /// A past window from its bounds in Unix nanoseconds (end 0: now, after
    /// a drain), checked against what the store holds.
    async fn past_window(
        &self,
        start_unix_nanos: i64,
        end_unix_nanos: i64,
    ) -> Result<(SystemTime, SystemTime), ApiError> {
        let now = SystemTime::now();
        let start = convert::time(start_unix_nanos, "the window's start (start_unix_nanos)")?;
        let end = match end_unix_nanos {
            0 => None,
            nanos => Some(convert::time(nanos, "the window's end (end_unix_nanos)")?),
        };
        if end.is_some_and(|end| end <= start) || start >= now {
            return Err(ApiError::invalid(format!(
                "the window must start before it ends and before now (start {}, end {}, now {})",
                convert::date(start),
                end.map_or_else(|| "now".to_owned(), convert::date),
                convert::date(now)
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
                "nothing is held for that window (it ends {}): the daemon holds samples from {} \
                 on (its retention is {})",
                convert::date(end),
                oldest.map_or_else(|| "no time yet".to_owned(), convert::date),
                humantime::format_duration(self.store_stats().retention)
            )));
        }
        Ok((start, end))
    }

    fn store_stats(&self) -> crate::store::StoreStats {
        crate::read_lock(&self.store).stats()
    }

    fn query(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        kind: SampleKind,
        sight: Sight,
    ) -> Query {
        Query {
            start,
            end,
            selector,
            access: sight.access,
            kind,
            frequency_hz: self.frequency_hz(),
        }
    }

    /// Reads a window from the store and renders it, off the async threads.
    async fn report(
        &self,
        start: SystemTime,
        end: SystemTime,
        selector: Selector,
        kind: SampleKind,
        options: ReportOptions,
        sight: Sight,
    ) -> Result<v1::ProfileReply, ApiError> {
        let max_response_bytes = self.limits.max_response_bytes;
        let query = self.query(start, end, selector, kind, sight);
        read_profile(
            self.store.clone(),
            query,
            sight.kernel_addresses,
            move |profile| {
                let report = report::render(profile, &options).map_err(|err| {
                    ApiError::Internal(format!("cannot render the report: {err}"))
                })?;
                limits::check_reply_size(report.len(), max_response_bytes)?;
                Ok(v1::ProfileReply {
                    report,
                    format: convert::format_to_proto(options.format) as i32,
                    summary: Some(convert::summary(profile)),
                })
            },
        )
        .await
    }
}

#[tonic::async_trait]
impl Profiler for ProfilerService {
    async fn profile(
        &self,
        request: Request<v1::ProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let (caller, requester) = self.requester(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Live)?;
        Ok(Response::new(
            self.do_profile(caller, requester.key, request.into_inner())
                .await?,
        ))
    }

    async fn cut_profile(
        &self,
        request: Request<v1::CutProfileRequest>,
    ) -> Result<Response<v1::CutProfileReply>, Status> {
        let (_, requester) = self.requester(&request)?;
        let token = request.into_inner().cut_token;
        convert::check_id(&token, "the cut token")?;
        let notify = crate::lock(&self.cuts)
            .get(&(requester.key, token))
            .cloned();
        if let Some(notify) = &notify {
            notify.notify_one();
        }
        Ok(Response::new(v1::CutProfileReply {
            cut: notify.is_some(),
        }))
    }

    async fn start_profile(
        &self,
        request: Request<v1::StartProfileRequest>,
    ) -> Result<Response<v1::StartProfileReply>, Status> {
        let (caller, requester) = self.requester(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Live)?;
        Ok(Response::new(
            self.do_start(caller, requester, request.into_inner())
                .await?,
        ))
    }

    async fn stop_profile(
        &self,
        request: Request<v1::StopProfileRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let (caller, requester) = self.requester(&request)?;
        Ok(Response::new(
            self.do_stop(caller, requester, request.into_inner())
                .await?,
        ))
    }

    async fn list_sessions(
        &self,
        request: Request<v1::ListSessionsRequest>,
    ) -> Result<Response<v1::ListSessionsReply>, Status> {
        let (_, requester) = self.requester(&request)?;
        let sessions = self.sessions().list(requester);
        Ok(Response::new(v1::ListSessionsReply {
            sessions: sessions
                .into_iter()
                .map(|(id, session)| convert::session_info(id, &session))
                .collect(),
        }))
    }

    async fn query(
        &self,
        request: Request<v1::QueryRequest>,
    ) -> Result<Response<v1::ProfileReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Past)?;
        Ok(Response::new(
            self.do_query(caller, request.into_inner()).await?,
        ))
    }

    async fn get_status(
        &self,
        request: Request<v1::GetStatusRequest>,
    ) -> Result<Response<v1::StatusReply>, Status> {
        let caller = self.caller(&request)?;
        let mut status = self.status(caller);
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
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Past)?;
        Ok(Response::new(
            self.do_callers(caller, request.into_inner()).await?,
        ))
    }

    async fn diff(
        &self,
        request: Request<v1::DiffRequest>,
    ) -> Result<Response<v1::DiffReply>, Status> {
        let caller = self.caller(&request)?;
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Past)?;
        if let Some(target) = &request.get_ref().target_selector {
            self.check_selector(caller, Some(target), Window::Past)?;
        }
        Ok(Response::new(
            self.do_diff(caller, request.into_inner()).await?,
        ))
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
            .check_tasks(caller, &[pid], Window::Live)
            .map_err(ApiError::from)?;
        let report = self
            .peeker
            .request(pid, caller.sees_everything())
            .await
            .map_err(ApiError::from)?;
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
                .filter(|peek| peeks::may_see(caller, peek.owner))
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
        convert::check_id(&id, "the peek report id")?;
        match self.peeker.get(&id) {
            Some(Ok(report)) if peeks::may_see(caller, report.owner) => {
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
        if !self.caller(&request)?.sees_everything() {
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
            TargetsError::NoSuchCgroup { .. }
            | TargetsError::NoSuchProcess { .. }
            | TargetsError::TooMany { .. } => ApiError::invalid(err.to_string()),
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
        self.check_selector(caller, request.get_ref().selector.as_ref(), Window::Live)?;
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
            sight: Sight::of(caller),
        };
        // One update may wait while the next is made.
        let (updates, stream) = tokio::sync::mpsc::channel(1);
        tokio::spawn(top::run(sources, top_request, updates, slot));
        Ok(Response::new(tokio_stream::wrappers::ReceiverStream::new(
            stream,
        )))
    }
}
