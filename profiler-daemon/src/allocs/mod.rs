//! Allocation profiling: what a process allocates, and what it still holds.
//! A profile attaches the allocator uprobes to the process for its
//! duration, collects the sampled allocations the pipeline leaves in its
//! inbox (unwound and symbolized as CPU samples are), and at its end asks
//! the kernel which of them are still live; `profile` turns those into a
//! [`Profile`] of bytes and objects, scaled back up from the sampling.
//!
//! This module owns the running allocation profiles (a process is
//! profiled by one at a time); it must not render reports or decide who
//! may ask (the service does).

mod profile;

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

pub use self::profile::allocation_profile;
use crate::{
    kernel::{
        allocs::{KernelAllocations, ProbeError, Sampling},
        sampler::KernelAllocationProbes,
    },
    lock,
    pipeline::{PipelineHandle, SampleInbox},
    profile::Profile,
    symbols::allocators::{AllocatorError, allocator_sites},
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

/// How often a running profile checks that its process still runs.
const EXIT_POLL: Duration = Duration::from_millis(100);

/// Takes allocation profiles.
#[derive(Clone)]
pub struct AllocationProfiler {
    inner: Arc<Inner>,
}

struct Inner {
    probes: Arc<KernelAllocationProbes>,
    inbox: Arc<SampleInbox>,
    pipeline: PipelineHandle,
    /// When each process being profiled began to be, and how it is sampled.
    running: Mutex<HashMap<u32, (SystemTime, Sampling)>>,
}

/// A profile under way: the probes of its process are attached until it
/// is finished, or dropped (a request that went away).
pub struct AllocationRun {
    inner: Arc<Inner>,
    pub pid: u32,
    pub sampling: Sampling,
    pub started: SystemTime,
    clock: Instant,
    /// How the profile's process was found, for the report.
    pub warnings: Vec<String>,
    /// When the probes came off early (the process exited, the profile was
    /// cut short or reached the longest profile), why, and what the kernel
    /// held then.
    stopped: Option<(Duration, String, KernelAllocations)>,
    finished: bool,
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
                running: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Why allocations cannot be profiled here, when they cannot.
    pub fn unavailable(&self) -> Option<&str> {
        self.inner.probes.unavailable()
    }

    /// The processes being profiled now, with when each began.
    pub fn running(&self) -> Vec<(u32, SystemTime, Sampling)> {
        let mut running: Vec<_> = lock(&self.inner.running)
            .iter()
            .map(|(&pid, &(started, sampling))| (pid, started, sampling))
            .collect();
        running.sort_by_key(|&(pid, ..)| pid);
        running
    }

    /// Starts profiling the allocations of `pid`.
    pub async fn start(&self, pid: u32, sampling: Sampling) -> Result<AllocationRun, AllocsError> {
        let inner = &self.inner;
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
        let started = SystemTime::now();
        {
            let mut running = lock(&inner.running);
            if running.contains_key(&pid) {
                return Err(ProbeError::Busy(pid).into());
            }
            running.insert(pid, (started, sampling));
        }
        inner.inbox.open(pid);
        if let Err(err) = inner.probes.attach(pid, &sites, sampling) {
            inner.inbox.close(pid);
            lock(&inner.running).remove(&pid);
            return Err(err.into());
        }
        Ok(AllocationRun {
            inner: inner.clone(),
            pid,
            sampling,
            started,
            clock: Instant::now(),
            warnings,
            stopped: None,
            finished: false,
        })
    }

    /// Profiles the allocations of `pid` for `duration`, or until its
    /// process exits or `cut` resolves, whichever comes first; returns what
    /// was allocated and what of it is still held.
    pub async fn profile(
        &self,
        pid: u32,
        sampling: Sampling,
        duration: Duration,
        cut: impl std::future::Future<Output = ()>,
    ) -> Result<Profile, AllocsError> {
        let mut run = self.start(pid, sampling).await?;
        let cut_short = tokio::select! {
            () = run.until_exit(duration) => false,
            () = cut => true,
        };
        if cut_short {
            run.end_window("cut short".to_owned());
        }
        run.finish().await
    }
}

/// How long a process just started is given to map its libraries (the
/// dynamic loader maps them, and a preloaded allocator, after exec).
const LOADER_GRACE: Duration = Duration::from_millis(250);

/// The allocator functions of `pid`, once the loader is done: a process
/// younger than [`LOADER_GRACE`] is read when it is that old.
async fn sites_once_loaded(
    pid: u32,
) -> Result<Vec<crate::symbols::allocators::AllocatorSite>, AllocsError> {
    let age = process_age(pid);
    if age < LOADER_GRACE {
        tokio::time::sleep(LOADER_GRACE - age).await;
    }
    Ok(allocator_sites(pid)?)
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

impl AllocationRun {
    /// Waits for `duration` to pass since the run began, or for its
    /// process to exit (its probes then come off at once).
    pub async fn until_exit(&mut self, duration: Duration) {
        loop {
            let left = duration.saturating_sub(self.clock.elapsed());
            if left.is_zero() {
                return;
            }
            tokio::time::sleep(left.min(EXIT_POLL)).await;
            if has_exited(self.pid) {
                self.end_window("the process exited".to_owned());
                return;
            }
        }
    }

    /// Ends the profile's window now, `why` as the report will say: the
    /// probes come off, what they sampled is kept for
    /// [`AllocationRun::finish`].
    pub fn end_window(&mut self, why: String) {
        if self.stopped.is_none() {
            let held = self.inner.probes.detach(self.pid);
            self.stopped = Some((self.clock.elapsed(), why, held));
        }
    }

    /// How long the run has lasted.
    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Ends the run: takes the probes off, waits until every allocation
    /// they sampled is symbolized, and makes the profile.
    pub async fn finish(mut self) -> Result<Profile, AllocsError> {
        self.finished = true;
        let inner = self.inner.clone();
        let (elapsed, early, held) = match self.stopped.take() {
            Some((elapsed, why, held)) => (elapsed, Some(why), held),
            None => (self.clock.elapsed(), None, inner.probes.detach(self.pid)),
        };
        let cut = inner.pipeline.close_window().await;
        let samples = inner.inbox.close(self.pid);
        lock(&inner.running).remove(&self.pid);
        cut.map_err(|_| AllocsError::Stopped)?;
        let mut warnings = std::mem::take(&mut self.warnings);
        if let Some(why) = early {
            warnings.push(format!(
                "the profile ended after {:.1} s: {why}",
                elapsed.as_secs_f64()
            ));
        }
        Ok(allocation_profile(
            &samples,
            &held,
            self.sampling,
            (self.started, self.started + elapsed),
            warnings,
        ))
    }
}

impl Drop for AllocationRun {
    fn drop(&mut self) {
        if !self.finished {
            self.inner.probes.detach(self.pid);
            self.inner.inbox.close(self.pid);
            lock(&self.inner.running).remove(&self.pid);
        }
    }
}
