//! Allocation profiles as the service offers them: one for a duration
//! (`Allocs`) and open-ended sessions (`StartAllocs` / `StopAllocs`), of
//! one process its asker may see, validated and rendered as the CPU
//! profiles are (`--inuse`: the text formats count the bytes still held).

use std::{collections::HashMap, sync::Mutex, time::Duration};

use super::{
    Service, ServiceError,
    access::{Asker, CallerKey, Window},
    reports::{self, Report},
    selection,
};
use crate::{
    allocs::{AllocationProfiler, AllocationRun},
    kernel::allocs::Sampling,
    lock,
    profile::{Profile, ProfileMode, ReportOptions},
};

/// How long an allocation session that reached the longest profile waits
/// to be stopped before it is discarded.
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
}

/// An open allocation session.
pub struct StartedAllocs {
    pub id: String,
    pub start: std::time::SystemTime,
}

/// The open allocation sessions, by id, with their owners.
pub type AllocSessions = Mutex<HashMap<String, (CallerKey, AllocationRun)>>;

impl Service {
    /// Profiles the allocations of `spec.pid` for `spec.duration` (less if
    /// it exits: the summary says so).
    pub async fn allocs(&self, asker: Asker, spec: AllocsSpec) -> Result<Report, ServiceError> {
        let profiler = self.allocation_profiler()?;
        self.check_allocs(asker, spec.pid, spec.sampling)?;
        let duration = selection::profile_duration(spec.duration, self.max_profile_duration())?;
        selection::check_report_options(&spec.options)?;
        let stopping = self.stopping.clone();
        let profile = profiler
            .profile(spec.pid, spec.sampling, duration, async move {
                stopping.wait().await
            })
            .await?;
        if self.stopping.is_stopping() {
            return Err(ServiceError::Stopping);
        }
        self.render_allocs(profile, spec.options, spec.inuse).await
    }

    /// Opens a session profiling the allocations of `pid` until
    /// [`Service::stop_allocs`] (or the longest profile, when the probes
    /// come off and the session waits to be stopped).
    pub async fn start_allocs(
        &self,
        asker: Asker,
        pid: u32,
        sampling: Sampling,
    ) -> Result<StartedAllocs, ServiceError> {
        let profiler = self.allocation_profiler()?;
        self.check_allocs(asker, pid, sampling)?;
        let run = profiler.start(pid, sampling).await?;
        let started = StartedAllocs {
            id: format!("allocs-{}", super::sessions::new_id()),
            start: run.started,
        };
        lock(&self.alloc_sessions).insert(started.id.clone(), (asker.key, run));
        // The longest profile ends the sampling, not the session.
        let (id, longest) = (started.id.clone(), self.max_profile_duration());
        let sessions = self.alloc_sessions.clone();
        tokio::spawn(async move {
            tokio::time::sleep(longest).await;
            if let Some((_, run)) = lock(&sessions).get_mut(&id) {
                run.end_window(format!(
                    "it reached the longest profile ({}, max_profile_duration)",
                    humantime::format_duration(longest)
                ));
            }
            // A session nobody stops is let go of in the end, with what it
            // sampled.
            tokio::time::sleep(ABANDONED_AFTER).await;
            if lock(&sessions).remove(&id).is_some() {
                tracing::warn!(
                    session = id,
                    "an allocation session was never stopped; it is discarded"
                );
            }
        });
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
        let run = {
            let mut sessions = lock(&self.alloc_sessions);
            match sessions.get(id) {
                None => {
                    return Err(ServiceError::NotFound(format!(
                        "no allocation session {id} is open (it was stopped, or the daemon \
                         restarted)"
                    )));
                }
                Some((owner, _)) if *owner != asker.key && !asker.privileged() => {
                    return Err(ServiceError::PermissionDenied(format!(
                        "allocation session {id} is another caller's"
                    )));
                }
                Some(_) => sessions.remove(id).map(|(_, run)| run),
            }
        };
        let Some(run) = run else {
            return Err(ServiceError::Internal("the session vanished".to_owned()));
        };
        let profile = run.finish().await?;
        self.render_allocs(profile, options, inuse).await
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
            .run(move || reports::render(&profile, &options, max_response_bytes))
            .await?
    }
}
