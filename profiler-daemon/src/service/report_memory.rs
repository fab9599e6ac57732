//! The memory the reports being made hold. Each report runs off the async
//! threads with what it allocates counted (`memory::counting`'s transient
//! work), at most [`AT_ONCE`] at a time, and starts only while those
//! running hold less than half the reports' share of the memory budget:
//! reports wait for memory rather than take it from the rest of the
//! daemon. What each report held at its peak is kept for the status
//! report and the metrics.
//!
//! Owns the gate and its figures; it must not read the store or render.

use std::{
    sync::Mutex,
    time::{Duration, Instant},
};

use tokio::sync::{Notify, Semaphore};

use super::error::ServiceError;
use crate::memory::counting::{TransientWork, transient_bytes};

/// Reports made at once, at most: the machines these run on have few
/// cores, and each report takes one.
pub const AT_ONCE: usize = 2;

/// How often a report waiting for memory looks again (besides being told
/// when one ends).
const RECHECK: Duration = Duration::from_millis(100);

/// What the gate let through, and what the reports held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportMemoryStats {
    /// Bytes the reports being made hold now, and their share.
    pub held: u64,
    pub share: u64,
    pub made: u64,
    /// Reports that waited for others to give memory back first.
    pub waited: u64,
    /// The most one report held, and reports that held more than the
    /// whole share.
    pub largest: u64,
    pub over_share: u64,
}

/// Lets reports through as memory allows.
pub struct ReportGate {
    slots: Semaphore,
    ended: Notify,
    share: u64,
    stats: Mutex<ReportMemoryStats>,
}

impl ReportGate {
    /// A gate for reports that together may hold `share` bytes (0: no
    /// bound but [`AT_ONCE`]).
    pub fn new(share: u64) -> Self {
        Self {
            slots: Semaphore::new(AT_ONCE),
            ended: Notify::new(),
            share,
            stats: Mutex::new(ReportMemoryStats::default()),
        }
    }

    pub fn stats(&self) -> ReportMemoryStats {
        let mut stats = *crate::lock(&self.stats);
        stats.held = transient_bytes();
        stats.share = self.share;
        stats
    }

    /// Runs `work` (a report: reading a window, rendering it) off the async
    /// threads once a slot and the memory allow.
    pub async fn run<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, ServiceError> {
        let _slot = self
            .slots
            .acquire()
            .await
            .map_err(|_| ServiceError::Stopping)?;
        let mut waited = false;
        while self.share > 0 && transient_bytes() > self.share / 2 {
            waited = true;
            let _ = tokio::time::timeout(RECHECK, self.ended.notified()).await;
        }
        let started = Instant::now();
        let (answer, peak) = tokio::task::spawn_blocking(move || {
            let work_memory = TransientWork::begin();
            let answer = work();
            (answer, work_memory.peak())
        })
        .await
        .map_err(|err| ServiceError::Internal(format!("the report task failed: {err}")))?;
        {
            let mut stats = crate::lock(&self.stats);
            stats.made += 1;
            stats.waited += u64::from(waited);
            stats.largest = stats.largest.max(peak);
            if self.share > 0 && peak > self.share {
                stats.over_share += 1;
                tracing::info!(
                    peak,
                    share = self.share,
                    ms = started.elapsed().as_millis() as u64,
                    "a report held more than the reports' share of memory_budget (ask for a \
                     shorter window or fewer groups, or raise memory_budget)"
                );
            }
        }
        self.ended.notify_waiters();
        Ok(answer)
    }
}
