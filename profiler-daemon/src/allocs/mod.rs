//! Allocation profiling: what a process allocates, and what it still holds.
//! A profile attaches the allocator uprobes to the process for its
//! duration, collects the sampled allocations the pipeline leaves in its
//! inbox (unwound and symbolized as CPU samples are), and at its end asks
//! the kernel which of them are still live and what was dropped; `profile`
//! turns those into a [`Profile`] of bytes and objects, scaled back up from
//! the sampling.
//!
//! This module owns the running allocation profiles (`run`: a process is
//! profiled by one at a time, and a profile's probes come off when it ends
//! or is dropped, whatever it was waiting for) and what became of them; it
//! must not render reports or decide who may ask (the service does).

mod profile;
mod run;

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

pub use self::{profile::allocation_profile, run::AllocationRun};
use crate::{
    kernel::{
        allocs::{MAX_PROFILED_PROCESSES, ProbeError, ProbeSite, RESERVED_FOR_ADMINS, Sampling},
        programs::{KernelAllocationProbes, Profiled, RunningProfile},
    },
    lock,
    pipeline::{PipelineHandle, SampleInbox},
    profile::Profile,
    symbols::allocator_functions::{self, AllocatorError},
};

/// Why an allocation profile could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum AllocsError {
    #[error(transparent)]
    Allocator(#[from] AllocatorError),
    #[error(transparent)]
    Probes(#[from] ProbeError),
    #[error("the sample pipeline has stopped; the daemon is shutting down or failed (see its log)")]
    Stopped,
}

/// Takes allocation profiles.
#[derive(Clone)]
pub struct AllocationProfiler {
    inner: Arc<Inner>,
}

struct Inner {
    probes: Arc<KernelAllocationProbes>,
    inbox: Arc<SampleInbox>,
    pipeline: PipelineHandle,
    counts: Mutex<ProfileCounts>,
}

/// What became of the allocation profiles asked for since the daemon
/// started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProfileCounts {
    /// Refused: the process was being profiled already.
    pub refused_busy: u64,
    /// Refused: [`MAX_PROFILED_PROCESSES`] profiles were running.
    pub refused_full: u64,
    /// Refused: users' profiles filled all but those kept for root and the
    /// admin group.
    pub refused_reserved: u64,
    /// Ended because whoever asked went away (the request was dropped:
    /// its client disconnected or cancelled) while the probes were on.
    pub abandoned: u64,
    /// Ended early because the process exited.
    pub process_exited: u64,
}

/// Allocation profiling's figures, for the status and the metrics.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AllocationStats {
    /// The profiles whose probes are attached now.
    pub running: Vec<RunningProfile>,
    /// The most that may run at once, and those kept for root and the
    /// admin group.
    pub limit: u32,
    pub reserved: u32,
    /// Records the allocation ring buffer holds, and those each profile
    /// may hold unread now.
    pub ring_records: u64,
    pub ring_share: u64,
    pub counts: ProfileCounts,
}

impl AllocationProfiler {
    pub fn new(
        probes: Arc<KernelAllocationProbes>,
        inbox: Arc<SampleInbox>,
        pipeline: PipelineHandle,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                probes,
                inbox,
                pipeline,
                counts: Mutex::new(ProfileCounts::default()),
            }),
        }
    }

    /// Why allocations cannot be profiled here, when they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.inner.probes.unavailable()
    }

    /// The profiles whose probes are attached now, by process id.
    pub fn running(&self) -> Vec<RunningProfile> {
        self.inner.probes.running()
    }

    /// The figures of allocation profiling now.
    pub fn stats(&self) -> AllocationStats {
        let (ring_records, ring_share) = self.inner.probes.ring();
        AllocationStats {
            running: self.running(),
            limit: MAX_PROFILED_PROCESSES,
            reserved: RESERVED_FOR_ADMINS,
            ring_records,
            ring_share,
            counts: *lock(&self.inner.counts),
        }
    }

    /// Takes off the probes of every profile running (the daemon is
    /// stopping); returns how many ran.
    pub fn end_all(&self) -> usize {
        self.inner.probes.detach_all()
    }

    /// Starts profiling the allocations of `pid`; `privileged` when root or
    /// the admin group asks. The probes stay on until the run ends or is
    /// dropped.
    pub async fn start(
        &self,
        pid: u32,
        sampling: Sampling,
        privileged: bool,
    ) -> Result<AllocationRun, AllocsError> {
        let sites = sites_once_loaded(pid).await?;
        let mut files: Vec<&str> = sites.iter().map(|site| site.path.as_str()).collect();
        files.dedup();
        let warnings = if files.len() > 1 {
            vec![format!(
                "more than one allocator is mapped ({}); each is profiled",
                files.join(", ")
            )]
        } else {
            Vec::new()
        };
        self.open_inbox(pid).await?;
        AllocationRun::start(
            self.inner.clone(),
            pid,
            &sites,
            sampling,
            privileged,
            warnings,
        )
    }

    /// Opens the inbox of `pid`'s sampled allocations. A profile of it
    /// whose window has ended holds it until its probes are off and its
    /// last samples drained: that is waited for; one whose probes are on
    /// refuses.
    async fn open_inbox(&self, pid: u32) -> Result<(), AllocsError> {
        let inner = &self.inner;
        let deadline = tokio::time::Instant::now() + FINISHING_WAIT;
        loop {
            let profiled = inner.probes.profiled(pid);
            if profiled == Profiled::No && inner.inbox.open_new(pid) {
                return Ok(());
            }
            if profiled == Profiled::Yes || tokio::time::Instant::now() >= deadline {
                let err = ProbeError::Busy(pid);
                inner.count_refusal(&err);
                return Err(err.into());
            }
            tokio::time::sleep(FINISHING_POLL).await;
        }
    }

    /// Profiles the allocations of `pid` for `duration`, or until its
    /// process exits or `cut` resolves (with why, as the report will say
    /// it), whichever comes first; returns what was allocated and what of
    /// it is still held.
    pub async fn profile(
        &self,
        pid: u32,
        sampling: Sampling,
        privileged: bool,
        duration: Duration,
        cut: impl std::future::Future<Output = String>,
    ) -> Result<Profile, AllocsError> {
        let mut run = self.start(pid, sampling, privileged).await?;
        tokio::select! {
            () = run.until_exit(duration) => {}
            why = cut => run.end_window(why).await,
        }
        run.finish().await
    }
}

impl Inner {
    /// Counts a request refused by the probes.
    fn count_refusal(&self, err: &ProbeError) {
        let mut counts = lock(&self.counts);
        match err {
            ProbeError::Busy(_) => counts.refused_busy += 1,
            ProbeError::TooMany => counts.refused_full += 1,
            ProbeError::Reserved { .. } => counts.refused_reserved += 1,
            _ => {}
        }
    }
}

/// How long a new profile of a process waits for the previous one, its
/// window ended, to take its last samples (a drain and their
/// symbolization), and how often it looks.
const FINISHING_WAIT: Duration = Duration::from_secs(10);
const FINISHING_POLL: Duration = Duration::from_millis(20);

/// How long a process just started is given to map its libraries (the
/// dynamic loader maps them, and a preloaded allocator, after exec).
const LOADER_GRACE: Duration = Duration::from_millis(250);

/// The allocator functions of `pid`, once the loader is done: a process
/// younger than [`LOADER_GRACE`] is read when it is that old.
async fn sites_once_loaded(pid: u32) -> Result<Vec<ProbeSite>, AllocsError> {
    let age = process_age(pid);
    if age < LOADER_GRACE {
        tokio::time::sleep(LOADER_GRACE - age).await;
    }
    Ok(allocator_functions::find(pid)?)
}

/// Whether process `pid` is gone or a zombie (its parent has not reaped
/// it, but it runs no more).
fn has_exited(pid: u32) -> bool {
    procfs::process::Process::new(pid as i32)
        .and_then(|process| process.stat())
        .ok()
        .is_none_or(|stat| matches!(stat.state, 'Z' | 'X'))
}

/// How long ago process `pid` started (zero when unknown).
fn process_age(pid: u32) -> Duration {
    use procfs::Current as _;
    let stat = procfs::process::Process::new(pid as i32).and_then(|process| process.stat());
    let (Ok(stat), Ok(uptime)) = (stat, procfs::Uptime::current()) else {
        return Duration::ZERO;
    };
    let ticks = procfs::ticks_per_second() as f64;
    Duration::from_secs_f64((uptime.uptime - stat.starttime as f64 / ticks).max(0.0))
}
