//! Allocation profiles as the service offers them: one for a duration
//! (`Allocs`, which its asker may cut short by a token, as a Profile), and
//! open-ended sessions (`StartAllocs` / `StopAllocs`), of one process its
//! asker may see, validated and rendered as the CPU profiles are
//! (`--inuse`: the text formats count the bytes still held).
//!
//! An `Allocs` request owns its profile: when the request goes away (its
//! client disconnected or cancelled it), the profile is dropped and its
//! probes come off. A session is owned by a task of its own, which takes
//! its probes off when it is stopped, at the longest profile, when its
//! process exits and when the daemon stops; it waits to be stopped (with
//! what it sampled) for [`ABANDONED_AFTER`] at most.

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use tokio::sync::oneshot;
use tracing::{info, warn};

use super::{
    Service, ServiceError,
    access::{Asker, CallerKey, Window},
    answers::{self, Report},
    selection::{self, SelectorSpec},
    stopping::Stopping,
};
use crate::{
    allocs::{AllocationProfiler, AllocationRun, AllocsError},
    kernel::allocs::Sampling,
    lock,
    profile::{Profile, ProfileMode, ReportOptions, ThreadInfo},
    store::Selector,
};

/// How long an allocation session whose window ended (at the longest
/// profile, or when its process exited) waits to be stopped before it is
/// discarded.
const ABANDONED_AFTER: Duration = Duration::from_secs(600);

/// The most processes looked at to find the one a selector by name or
/// cgroup names.
const MAX_PROCESSES_SCANNED: usize = 1 << 16;

/// The most process ids an error lists when a selector names several.
const PIDS_LISTED: usize = 10;

/// An allocation profile asked for.
#[derive(Clone, Debug)]
pub struct AllocsSpec {
    pub pid: u32,
    pub duration: Duration,
    pub sampling: Sampling,
    pub options: ReportOptions,
    /// Text formats count the bytes still held at the end, not those
    /// allocated (pprof carries both).
    pub inuse: bool,
    /// A token of the asker's choosing that [`Service::cut_profile`] can
    /// end the profile early by.
    pub cut_token: Option<String>,
}

/// An open allocation session.
pub struct StartedAllocs {
    pub id: String,
    pub start: std::time::SystemTime,
}

/// Where a session's task sends its profile.
type ProfileReply = oneshot::Sender<Result<Profile, AllocsError>>;

/// An open allocation session: its owner, and how to ask its task for
/// the profile (dropping this ends the session, and its task takes the
/// probes off).
pub struct AllocSession {
    owner: CallerKey,
    stop: oneshot::Sender<ProfileReply>,
}

/// The open allocation sessions, by id.
pub type AllocSessions = Mutex<HashMap<String, AllocSession>>;

impl Service {
    /// Profiles the allocations of `spec.pid` for `spec.duration` (less if
    /// it exits or is cut: the summary says so). Dropped before it returns
    /// (its client went away), the profile's probes come off at once.
    pub async fn allocs(&self, asker: Asker, spec: AllocsSpec) -> Result<Report, ServiceError> {
        let profiler = self.allocation_profiler()?;
        self.check_allocs(asker, spec.pid, spec.sampling)?;
        let duration = selection::profile_duration(spec.duration, self.max_profile_duration())?;
        selection::check_report_options(&spec.options)?;
        let cut = match &spec.cut_token {
            None => None,
            Some(token) => Some(self.register_cut(asker.key, token)?),
        };
        let cut_short = AtomicBool::new(false);
        let stopping = self.stopping.clone();
        let ended = async {
            tokio::select! {
                () = stopping.wait() => "the daemon is stopping".to_owned(),
                () = async {
                    match &cut {
                        Some((notify, _)) => notify.notified().await,
                        None => std::future::pending().await,
                    }
                } => {
                    cut_short.store(true, Ordering::Relaxed);
                    "cut short (CutProfile)".to_owned()
                }
            }
        };
        let profile = profiler
            .profile(spec.pid, spec.sampling, asker.privileged(), duration, ended)
            .await?;
        drop(cut);
        if self.stopping.is_stopping() {
            return Err(ServiceError::Stopping);
        }
        let mut report = self
            .render_allocs(profile, spec.options, spec.inuse)
            .await?;
        report.summary.cut_short = cut_short.load(Ordering::Relaxed);
        Ok(report)
    }

    /// Opens a session profiling the allocations of `pid` until
    /// [`Service::stop_allocs`] (or the longest profile, or its process's
    /// exit, when the probes come off and the session waits to be
    /// stopped).
    pub async fn start_allocs(
        &self,
        asker: Asker,
        pid: u32,
        sampling: Sampling,
    ) -> Result<StartedAllocs, ServiceError> {
        let profiler = self.allocation_profiler()?;
        self.check_allocs(asker, pid, sampling)?;
        let run = profiler.start(pid, sampling, asker.privileged()).await?;
        let started = StartedAllocs {
            id: format!("allocs-{}", super::sessions::new_id()),
            start: run.started,
        };
        let (stop, stopped) = oneshot::channel();
        lock(&self.alloc_sessions).insert(
            started.id.clone(),
            AllocSession {
                owner: asker.key,
                stop,
            },
        );
        tokio::spawn(run_session(
            run,
            stopped,
            SessionEnds {
                longest: self.max_profile_duration(),
                stopping: self.stopping.clone(),
                sessions: self.alloc_sessions.clone(),
                id: started.id.clone(),
            },
        ));
        Ok(started)
    }

    /// Closes an allocation session and reports it.
    pub async fn stop_allocs(
        &self,
        asker: Asker,
        id: &str,
        options: ReportOptions,
        inuse: bool,
    ) -> Result<Report, ServiceError> {
        selection::check_id(id, "the session id")?;
        selection::check_report_options(&options)?;
        let session = {
            let mut sessions = lock(&self.alloc_sessions);
            match sessions.get(id) {
                None => {
                    return Err(ServiceError::NotFound(format!(
                        "no allocation session {id} is open (it was stopped, discarded {} after \
                         its window ended, or the daemon restarted)",
                        humantime::format_duration(ABANDONED_AFTER)
                    )));
                }
                Some(session) if session.owner != asker.key && !asker.privileged() => {
                    return Err(ServiceError::PermissionDenied(format!(
                        "allocation session {id} is another caller's"
                    )));
                }
                Some(_) => sessions.remove(id),
            }
        };
        let Some(session) = session else {
            return Err(ServiceError::Internal("the session vanished".to_owned()));
        };
        let (reply, profile) = oneshot::channel();
        if session.stop.send(reply).is_err() {
            return Err(ServiceError::Stopping);
        }
        let profile = profile.await.map_err(|_| ServiceError::Stopping)??;
        self.render_allocs(profile, options, inuse).await
    }

    /// Ends every allocation profile (the daemon is stopping): the
    /// sessions are discarded and every probe comes off now. Returns how
    /// many profiles ran.
    pub(super) fn end_allocation_profiles(&self) -> usize {
        let sessions = std::mem::take(&mut *lock(&self.alloc_sessions));
        let ended = self
            .allocations
            .as_ref()
            .map_or(0, AllocationProfiler::end_all);
        if ended > 0 || !sessions.is_empty() {
            info!(
                profiles = ended,
                sessions = sessions.len(),
                "allocation profiles ended (the daemon is stopping); their probes are off"
            );
        }
        ended
    }

    /// Why allocation profiles are not offered, if they are not (what
    /// [`Service::allocs`] would answer with).
    pub fn allocations_off(&self) -> Option<ServiceError> {
        self.allocation_profiler().err()
    }

    /// The one running process `spec` selects that `asker` may profile, for
    /// an allocation profile (which is of one process): `pid` alone, or the
    /// one process whose command name or cgroup matches.
    pub fn one_process(&self, asker: Asker, spec: SelectorSpec) -> Result<u32, ServiceError> {
        let by_id_only =
            spec.comms.is_empty() && spec.comm_regex.is_empty() && spec.cgroups.is_empty();
        if by_id_only && spec.pids.is_empty() {
            return Err(ServiceError::invalid(
                "an allocation profile is of one process: give its process id (pid=P), or a \
                 comm, comm_regex or cgroup that selects only it",
            ));
        }
        if spec.pids.len() > 1 {
            return Err(ServiceError::invalid(format!(
                "an allocation profile is of one process, and {} process ids are given; give one",
                spec.pids.len()
            )));
        }
        let selector = spec.past()?;
        if by_id_only {
            let pid = selector.pids[0];
            if !std::path::Path::new(&format!("/proc/{pid}")).exists() {
                return Err(ServiceError::NotFound(format!(
                    "no process with id {pid} is running; check the id (ps -e -o pid,comm)"
                )));
            }
            return Ok(pid);
        }
        let matched = running_matches(&selector);
        let allowed: Vec<u32> = matched
            .iter()
            .copied()
            .filter(|&pid| {
                self.access
                    .check_tasks(asker.caller, &[pid], Window::Live)
                    .is_ok()
            })
            .collect();
        match (&allowed[..], matched.len()) {
            ([pid], _) => Ok(*pid),
            ([], 0) => Err(ServiceError::NotFound(
                "no running process matches the selection; check the name with ps -e -o \
                 pid,comm (command names are at most 15 bytes), or give pid=P"
                    .to_owned(),
            )),
            ([], matched) => Err(ServiceError::PermissionDenied(format!(
                "{matched} running processes match the selection, and none is one you may \
                 profile (yours, and not setuid); select one of your own"
            ))),
            (several, _) => {
                let listed: Vec<String> = several
                    .iter()
                    .take(PIDS_LISTED)
                    .map(u32::to_string)
                    .collect();
                Err(ServiceError::invalid(format!(
                    "{} running processes match the selection (pids {}{}); an allocation \
                     profile is of one process: name it with pid=P",
                    several.len(),
                    listed.join(", "),
                    if several.len() > PIDS_LISTED {
                        ", …"
                    } else {
                        ""
                    }
                )))
            }
        }
    }

    fn allocation_profiler(&self) -> Result<&AllocationProfiler, ServiceError> {
        let profiler = self.allocations.as_ref().ok_or_else(|| {
            ServiceError::FailedPrecondition(
                "allocation profiling is off in this daemon (see its log at start)".to_owned(),
            )
        })?;
        if let Some(reason) = profiler.unavailable() {
            return Err(ServiceError::FailedPrecondition(format!(
                "allocation profiling is off in this daemon: {reason}"
            )));
        }
        Ok(profiler)
    }

    fn check_allocs(&self, asker: Asker, pid: u32, sampling: Sampling) -> Result<(), ServiceError> {
        if pid == 0 {
            return Err(ServiceError::invalid(
                "an allocation profile needs the process id of one process (not 0)",
            ));
        }
        match sampling {
            Sampling::Bytes(0) => {
                return Err(ServiceError::invalid(
                    "sample_bytes must be at least 1 (the mean bytes between two samples)",
                ));
            }
            Sampling::Rate(rate) if !(rate > 0.0 && rate <= 1.0) => {
                return Err(ServiceError::invalid(format!(
                    "sample_rate {rate} is not a probability above 0 and at most 1"
                )));
            }
            _ => {}
        }
        self.access
            .check_tasks(asker.caller, &[pid], Window::Live)?;
        Ok(())
    }

    /// Renders an allocation profile: text formats count what `inuse`
    /// asks for, pprof carries both.
    async fn render_allocs(
        &self,
        mut profile: Profile,
        options: ReportOptions,
        inuse: bool,
    ) -> Result<Report, ServiceError> {
        profile.mode = if inuse {
            ProfileMode::Held
        } else {
            ProfileMode::Allocated
        };
        let max_response_bytes = self.limits.max_response_bytes;
        self.report_gate
            .run(move || answers::render(&profile, &options, max_response_bytes))
            .await?
    }
}

/// The running processes `selector` matches by their main thread (its
/// command name, user and cgroup), in pid order; at most
/// [`MAX_PROCESSES_SCANNED`] are looked at.
fn running_matches(selector: &Selector) -> Vec<u32> {
    let Ok(processes) = procfs::process::all_processes() else {
        return Vec::new();
    };
    let mut matched: Vec<u32> = processes
        .take(MAX_PROCESSES_SCANNED)
        .filter_map(Result::ok)
        .filter_map(|process| {
            let pid = u32::try_from(process.pid).ok()?;
            let comm: std::sync::Arc<str> = process.stat().ok()?.comm.into();
            let cgroup = if selector.cgroups.is_empty() {
                "".into()
            } else {
                process
                    .cgroups()
                    .ok()?
                    .0
                    .into_iter()
                    .find(|cgroup| cgroup.hierarchy == 0)?
                    .pathname
                    .into()
            };
            let thread = ThreadInfo {
                pid,
                tid: pid,
                thread_name: comm.clone(),
                process_name: comm,
                uid: process.uid().ok()?,
                gid: 0,
                protected: false,
                cgroup,
            };
            selector.matches(&thread).then_some(pid)
        })
        .collect();
    matched.sort_unstable();
    matched
}

/// What ends a session's window besides its stop, and where it is listed.
struct SessionEnds {
    longest: Duration,
    stopping: Stopping,
    sessions: Arc<AllocSessions>,
    id: String,
}

/// What a session's task waited for.
enum SessionEvent {
    /// StopAllocs asks for the profile.
    Stopped(ProfileReply),
    /// The session is gone from the table (the daemon is stopping).
    Discarded,
    /// The daemon is stopping.
    Stopping,
    /// The longest profile passed, or the process exited.
    WindowEnded,
}

/// A session's task: owns its run until it is stopped (the profile goes
/// to the stop's reply), the daemon stops, or the session is discarded.
/// When the window ends first (the longest profile, or the process
/// exited), the probes come off and the samples are collected at once,
/// and the profile waits to be stopped.
async fn run_session(
    mut run: AllocationRun,
    mut stopped: oneshot::Receiver<ProfileReply>,
    ends: SessionEnds,
) {
    let event = tokio::select! {
        asked = &mut stopped => match asked {
            Ok(reply) => SessionEvent::Stopped(reply),
            Err(_) => SessionEvent::Discarded,
        },
        () = run.until_exit(ends.longest) => SessionEvent::WindowEnded,
        () = ends.stopping.wait() => SessionEvent::Stopping,
    };
    match event {
        SessionEvent::Stopped(reply) => {
            let _ = reply.send(run.finish().await);
            return;
        }
        // Dropping the run takes its probes off.
        SessionEvent::Discarded => return,
        SessionEvent::Stopping => {
            run.end_window("the daemon is stopping".to_owned()).await;
            return;
        }
        SessionEvent::WindowEnded => {}
    }
    if !run.window_ended() {
        run.end_window(format!(
            "it reached the longest profile ({}, max_profile_duration)",
            humantime::format_duration(ends.longest)
        ))
        .await;
    }
    let profile = run.finish().await;
    tokio::select! {
        asked = &mut stopped => {
            if let Ok(reply) = asked {
                let _ = reply.send(profile);
            }
        }
        () = tokio::time::sleep(ABANDONED_AFTER) => {
            if lock(&ends.sessions).remove(&ends.id).is_some() {
                warn!(
                    session = ends.id,
                    "an allocation session was never stopped; it is discarded"
                );
            }
        }
        () = ends.stopping.wait() => {}
    }
}
