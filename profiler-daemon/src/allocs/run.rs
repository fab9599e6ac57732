//! One allocation profile under way: its probes and its inbox are held by
//! a [`Hold`] that gives both back when it is dropped, so that a profile
//! whose request goes away (its client killed, its stream cancelled, the
//! future dropped at any await) leaves nothing attached; ending the
//! window takes the probes off at once, finishing collects the samples.
//!
//! Owns the run's hold and what its window found; it must not decide who
//! may profile what (the service does).

use std::{
    sync::Arc,
    time::{Duration, Instant, SystemTime},
};

use tracing::info;

use super::{AllocsError, Inner, allocation_profile, has_exited};
use crate::{
    kernel::{
        allocs::{KernelAllocations, ProbeSite, Sampling},
        programs::Attachment,
    },
    lock,
    pipeline::Delivered,
    profile::Profile,
};

/// How often a running profile checks that its process still runs.
const EXIT_POLL: Duration = Duration::from_millis(100);

/// A profile under way: the probes of its process are attached until its
/// window ends (or it is dropped: a request that went away).
pub struct AllocationRun {
    hold: Hold,
    pub pid: u32,
    pub sampling: Sampling,
    pub started: SystemTime,
    clock: Instant,
    /// How the profile's process was found, for the report.
    pub warnings: Vec<String>,
    /// When the window ended early (the process exited, the profile was
    /// cut short or reached the longest profile), and why.
    ended_early: Option<(Duration, String)>,
    /// What the kernel held when the probes came off (`None` while they
    /// are on).
    held: Option<KernelAllocations>,
}

/// A run's probes and inbox, given back when dropped.
struct Hold {
    inner: Arc<Inner>,
    pid: u32,
    attachment: Option<Attachment>,
    inbox_open: bool,
}

impl Hold {
    /// Takes the probes off (once), on the blocking pool (the kernel takes
    /// a tenth of a second or so); what the kernel held then, or nothing
    /// when the daemon took them off first (it is stopping). Dropped
    /// meanwhile, the probes come off all the same.
    async fn detach(&mut self) -> Option<KernelAllocations> {
        let attachment = self.attachment.take()?;
        let probes = self.inner.probes.clone();
        tokio::task::spawn_blocking(move || probes.detach(&attachment))
            .await
            .ok()
            .flatten()
    }

    /// Stops collecting the process's samples (once) and hands them over,
    /// with how many did not fit.
    fn close_inbox(&mut self) -> Delivered {
        if !std::mem::take(&mut self.inbox_open) {
            return Delivered::default();
        }
        self.inner.inbox.take(self.pid)
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if let Some(attachment) = self.attachment.take() {
            let inner = self.inner.clone();
            let detach = move || {
                if inner.probes.detach(&attachment).is_some() {
                    lock(&inner.counts).abandoned += 1;
                    info!(
                        pid = attachment.pid,
                        "an allocation profile's request went away (its client disconnected \
                         or cancelled); its probes are off"
                    );
                }
            };
            // The probes are counted as running until they are off.
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(detach)),
                Err(_) => detach(),
            }
        }
        self.close_inbox();
    }
}

impl AllocationRun {
    /// Attaches the process's probes, its inbox opened by the caller
    /// (closed again when the probes cannot be attached).
    pub(super) fn start(
        inner: Arc<Inner>,
        pid: u32,
        sites: &[ProbeSite],
        sampling: Sampling,
        privileged: bool,
        warnings: Vec<String>,
    ) -> Result<Self, AllocsError> {
        let mut hold = Hold {
            inner: inner.clone(),
            pid,
            attachment: None,
            inbox_open: true,
        };
        let attachment = inner
            .probes
            .attach(pid, sites, sampling, privileged)
            .inspect_err(|err| inner.count_refusal(err))?;
        hold.attachment = Some(attachment);
        Ok(Self {
            hold,
            pid,
            sampling,
            started: SystemTime::now(),
            clock: Instant::now(),
            warnings,
            ended_early: None,
            held: None,
        })
    }

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
                lock(&self.hold.inner.counts).process_exited += 1;
                self.end_window("the process exited".to_owned()).await;
                return;
            }
        }
    }

    /// Whether the run's window has ended (its probes are off).
    pub fn window_ended(&self) -> bool {
        self.held.is_some()
    }

    /// Ends the profile's window now, `why` as the report will say: the
    /// probes come off, what the kernel held is kept for
    /// [`AllocationRun::finish`].
    pub async fn end_window(&mut self, why: String) {
        if self.held.is_none() {
            self.ended_early = Some((self.clock.elapsed(), why));
            self.take_probes_off().await;
        }
    }

    async fn take_probes_off(&mut self) {
        let held = self.hold.detach().await;
        self.held = Some(held.unwrap_or_else(|| {
            self.warnings
                .push("the daemon took the probes off (it is stopping)".to_owned());
            KernelAllocations::default()
        }));
    }

    /// How long the run has lasted.
    pub fn elapsed(&self) -> Duration {
        self.clock.elapsed()
    }

    /// Ends the run: takes the probes off (if its window has not ended),
    /// waits until every allocation they sampled is symbolized, and makes
    /// the profile. Dropped meanwhile, it gives its inbox back all the same.
    pub async fn finish(mut self) -> Result<Profile, AllocsError> {
        let elapsed = match &self.ended_early {
            Some((elapsed, _)) => *elapsed,
            None => self.clock.elapsed(),
        };
        if self.held.is_none() {
            self.take_probes_off().await;
        }
        let cut = self.hold.inner.pipeline.close_window().await;
        let delivered = self.hold.close_inbox();
        cut.map_err(|_| AllocsError::Stopped)?;
        let mut warnings = std::mem::take(&mut self.warnings);
        if let Some((elapsed, why)) = &self.ended_early {
            warnings.push(format!(
                "the profile ended after {:.1} s: {why}",
                elapsed.as_secs_f64()
            ));
        }
        let held = self.held.take().unwrap_or_default();
        Ok(allocation_profile(
            &delivered,
            &held,
            self.sampling,
            (self.started, self.started + elapsed),
            warnings,
        ))
    }
}
