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
    selection,
    stopping::Stopping,
};
use crate::{
    allocs::{AllocationProfiler, AllocationRun, AllocsError},
    kernel::allocs::Sampling,
    lock,
    profile::{Profile, ProfileMode, ReportOptions},
};

/// How long an allocation session whose window ended (at the longest
/// profile, or when its process exited) waits to be stopped before it is
/// discarded.
const ABANDONED_AFTER: Duration = Duration::from_secs(600);

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
