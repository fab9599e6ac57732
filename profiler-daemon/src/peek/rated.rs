//! Sampling chosen processes at a rate of their own for one profile
//! (`profilerctl profile -p PID -F HZ`): the per-thread CPU clocks a peek
//! opens, on every thread of each process (the threads they start follow),
//! for the profile's window, while the daemon samples every CPU at its own
//! rate as before. The samples reach the peeks' inbox as a peek's do.
//!
//! Owns the switching on and off of those clocks and the inbox's slots of
//! those processes; it must not aggregate or report the samples, nor
//! decide who may ask (the service does).

use std::{future::Future, sync::Arc, time::SystemTime};

use procfs::process::Process;

use super::{PeekError, Peeker, snapshot};
use crate::{lock, profile::ThreadInfo, symbols::symbolizer::SymbolizedSample, tasks};

/// The fastest rate a profile may ask: perf's own default ceiling
/// (`perf_event_max_sample_rate` starts near it) and ~2 × a peek's rate.
pub const MAX_RATE_HZ: u32 = 4999;

/// The most threads one such profile samples (each its own perf event, an
/// open file of the daemon's); beyond them a warning says how many not.
const MAX_THREADS: usize = 4096;

/// What the clocks of one profile at its own rate gave.
#[derive(Debug)]
pub struct RatedSamples {
    pub samples: Vec<SymbolizedSample>,
    /// Every thread sampled, as it was when its clock started (those that
    /// never ran have no sample).
    pub threads: Vec<ThreadInfo>,
    /// Samples that did not fit the peeks' share of the memory budget.
    pub dropped: u64,
    /// Said in the report: threads not sampled, and why.
    pub warnings: Vec<String>,
    pub start: SystemTime,
    pub end: SystemTime,
    /// `start` on the clock the samples' times are on (monotonic, the
    /// kernel's `bpf_ktime_get_ns`).
    pub start_ns: u64,
    /// CPU time the processes' threads ran in the window, by the
    /// scheduler's count (`/proc/PID/task/TID/schedstat`), when read.
    pub ran_ns: Option<u64>,
}

/// The inbox slots (and the place among the peeks) a profile holds, given
/// back however the profile ends (its asker may go away mid-window).
struct Held<'a> {
    peeker: &'a Peeker,
    pids: Vec<u32>,
}

impl Held<'_> {
    fn take(&mut self) -> (Vec<SymbolizedSample>, u64) {
        let (mut samples, mut dropped) = (Vec::new(), 0);
        for pid in std::mem::take(&mut self.pids) {
            let delivered = self.peeker.inner.inbox.take(pid);
            samples.extend(delivered.samples);
            dropped += delivered.dropped;
            lock(&self.peeker.inner.rated).remove(&pid);
        }
        (samples, dropped)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.take();
    }
}

impl Peeker {
    /// Samples every thread of `pids` at `frequency_hz` of its own CPU time
    /// until `window` resolves, and hands over their samples. Refused when
    /// a peek (or another such profile) of one of them is under way, when
    /// as many run as peeks may (`max_concurrent_peeks`), or, for an
    /// unprivileged asker (`bound_uid`), when half of those are its user's.
    pub async fn sample_at_rate(
        &self,
        pids: &[u32],
        frequency_hz: u32,
        bound_uid: Option<u32>,
        window: impl Future<Output = ()>,
    ) -> Result<RatedSamples, PeekError> {
        let inner = &self.inner;
        let mut held = Held {
            peeker: self,
            pids: Vec::new(),
        };
        {
            let running = lock(&inner.running);
            let mut rated = lock(&inner.rated);
            let limit = self.settings().max_concurrent;
            if running.len() + rated.len() + pids.len() > limit {
                return Err(PeekError::TooMany { limit });
            }
            if let Some(uid) = bound_uid {
                let user_limit = super::running::per_user_limit(limit);
                if super::running::of_user(&running, &rated, uid) + pids.len() > user_limit {
                    return Err(PeekError::TooManyOfUser {
                        uid,
                        limit: user_limit,
                    });
                }
            }
            for &pid in pids {
                if running.contains_key(&pid) || rated.contains_key(&pid) {
                    return Err(PeekError::Busy { pid });
                }
            }
            for &pid in pids {
                rated.insert(pid, bound_uid);
                inner.inbox.open(pid);
                held.pids.push(pid);
            }
        }
        let mut threads = tokio::task::spawn_blocking({
            let pids = pids.to_vec();
            move || threads_of(&pids)
        })
        .await
        .map_err(|_| PeekError::Stopped)??;
        let mut warnings = Vec::new();
        let first = pids.first().copied().unwrap_or_default();
        if threads.len() > MAX_THREADS {
            warnings.push(format!(
                "only {MAX_THREADS} of the {} threads were sampled at {frequency_hz} Hz (the most \
                 one profile samples at its own rate); select fewer processes",
                threads.len()
            ));
            threads.truncate(MAX_THREADS);
        }
        let tids: Vec<u32> = threads.iter().map(|thread| thread.tid).collect();
        let (links, failed) = self.start_clocks(first, &tids, frequency_hz)?;
        if let Some((tid, err)) = failed.first() {
            warnings.push(format!(
                "{} threads were not sampled (thread {tid}: {err})",
                failed.len()
            ));
        }
        let start = SystemTime::now();
        let start_ns = crate::kernel::offcpu::monotonic_now_ns();
        let ran_before = tokio::task::spawn_blocking({
            let pids = pids.to_vec();
            move || run_times(&pids)
        });
        window.await;
        let ran_after = tokio::task::spawn_blocking({
            let pids = pids.to_vec();
            move || run_times(&pids)
        })
        .await
        .unwrap_or_default();
        drop(links);
        let ran_ns = ran_before.await.ok().map(|before| {
            ran_after
                .iter()
                .map(|(tid, after)| after.saturating_sub(before.get(tid).copied().unwrap_or(0)))
                .sum()
        });
        // Ticks already taken are read before the slots close.
        let end = inner
            .pipeline
            .close_window()
            .await
            .map_err(|_| PeekError::Stopped)?;
        let (samples, dropped) = held.take();
        Ok(RatedSamples {
            samples,
            threads,
            dropped,
            warnings,
            start,
            end,
            start_ns,
            ran_ns,
        })
    }

    /// Processes being sampled at a rate of their own now.
    pub fn rated_running(&self) -> usize {
        lock(&self.inner.rated).len()
    }
}

/// Every thread of `pids` as it is now (its names, who its process runs
/// as), the process gone being an error.
fn threads_of(pids: &[u32]) -> Result<Vec<ThreadInfo>, PeekError> {
    let gone = |pid, source| PeekError::NoProcess(Arc::new(snapshot::proc_error(pid, source)));
    let mut threads = Vec::new();
    for &pid in pids {
        let process = Process::new(pid as i32).map_err(|source| gone(pid, source))?;
        let process_name: Arc<str> = process
            .stat()
            .map_err(|source| gone(pid, source))?
            .comm
            .into();
        let owner = tasks::TaskCredentials::read(pid)
            .map(|credentials| credentials.owner())
            .ok_or_else(|| {
                PeekError::NoProcess(Arc::new(snapshot::SnapshotError::NoSuchProcess(pid)))
            })?;
        let cgroup: Arc<str> = tasks::cgroups(pid).v2.into();
        let tasks = process.tasks().map_err(|source| gone(pid, source))?;
        // A thread that exits while being listed is simply not there.
        for task in tasks.flatten() {
            let tid = task.tid as u32;
            let thread_name = match task.stat() {
                Ok(stat) => stat.comm.into(),
                Err(_) => continue,
            };
            threads.push(ThreadInfo {
                pid,
                tid,
                thread_name,
                process_name: process_name.clone(),
                uid: owner.uid,
                gid: owner.gid,
                protected: owner.protected,
                cgroup: cgroup.clone(),
            });
        }
    }
    Ok(threads)
}

/// How long each thread of `pids` has run on a CPU, in nanoseconds (the
/// first field of its `schedstat`), by thread id.
fn run_times(pids: &[u32]) -> rustc_hash::FxHashMap<u32, u64> {
    let mut times = rustc_hash::FxHashMap::default();
    for &pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten().take(MAX_THREADS) {
            let Some(tid) = task.file_name().to_str().and_then(|tid| tid.parse().ok()) else {
                continue;
            };
            let ran = std::fs::read_to_string(task.path().join("schedstat"))
                .ok()
                .and_then(|text| text.split_whitespace().next()?.parse().ok());
            if let Some(ran) = ran {
                times.insert(tid, ran);
            }
        }
    }
    times
}
