//! Running one peek: admitting its trigger (one peek per process, the
//! global and per-user bounds and rates), switching on its threads'
//! sampling for its duration, and finishing it into a report that is
//! logged, kept and published, and answers whoever waits.
//!
//! Owns a peek's course; it must not decide what a report says (see
//! `peek_report`) nor how long reports are kept (see `archive`).

use std::{
    sync::Arc,
    time::{Instant, SystemTime},
};

use rustc_hash::FxHashMap as HashMap;
use tracing::{debug, info, warn};

use super::{
    FULL_LOGS_PER_USER_PER_MINUTE, PeekError, PeekReport, PeekSettings, Peeker, Running,
    TriggerSource, Waiter,
    peek_report::PeekRun,
    snapshot::{self, ProcessSnapshot},
};
use crate::lock;

/// The clocks started for a peek (sampling until dropped), and the
/// threads whose clock could not be started, with why.
pub(super) type Clocks = (Vec<Box<dyn Send>>, Vec<(u32, String)>);

/// What started a peek, and whether its owner's bounds apply.
pub(super) struct Trigger {
    pub source: TriggerSource,
    pub triggered: SystemTime,
    /// False for requests of root and the admin group.
    pub bound_per_user: bool,
}

impl Peeker {
    /// Starts a peek of `pid` unless one runs (then folds into it) or too
    /// many run, in all or of its owner's processes, or its owner's were
    /// started too often (then drops the trigger).
    pub(super) fn start(&self, pid: u32, trigger: Trigger, waiter: Option<Waiter>) {
        let inner = &self.inner;
        let uid = crate::tasks::TaskCredentials::read(pid).map(|task| task.uids[0]);
        {
            let mut running = lock(&inner.running);
            if let Some(peek) = running.get_mut(&pid) {
                peek.folded += 1;
                peek.waiters.extend(waiter);
                lock(&inner.stats).folded += 1;
                return;
            }
            let settings = self.settings();
            // A profile at a rate of its own holds the process's samples.
            // (Its lock is let go of before `refusal` takes it again.)
            let busy = lock(&inner.rated).contains_key(&pid);
            let refusal = match busy {
                true => Some(PeekError::Busy { pid }),
                false => self.refusal(&running, uid, &trigger, &settings),
            };
            if let Some(refusal) = refusal {
                let mut stats = lock(&inner.stats);
                match refusal {
                    PeekError::TooMany { .. } | PeekError::Busy { .. } => stats.dropped_limit += 1,
                    _ => stats.dropped_user_limit += 1,
                }
                debug!(pid, "peek trigger dropped: {refusal}");
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Err(refusal));
                }
                return;
            }
            running.insert(
                pid,
                Running {
                    uid,
                    folded: 0,
                    waiters: waiter.into_iter().collect(),
                },
            );
        }
        let peeker = self.clone();
        tokio::spawn(async move {
            let result = peeker.run(pid, trigger.source, trigger.triggered).await;
            peeker.finish(pid, result);
        });
    }

    /// Why a new peek of a process of `uid` may not start now, if it may
    /// not; counts it against its owner's rate when it may.
    fn refusal(
        &self,
        running: &HashMap<u32, Running>,
        uid: Option<u32>,
        trigger: &Trigger,
        settings: &PeekSettings,
    ) -> Option<PeekError> {
        let limit = settings.max_concurrent;
        let rated = lock(&self.inner.rated);
        if running.len() + rated.len() >= limit {
            return Some(PeekError::TooMany { limit });
        }
        let (Some(uid), true) = (uid, trigger.bound_per_user) else {
            return None;
        };
        let user_limit = per_user_limit(limit);
        if of_user(running, &rated, uid) >= user_limit {
            return Some(PeekError::TooManyOfUser {
                uid,
                limit: user_limit,
            });
        }
        drop(rated);
        let per_minute = settings.per_user_per_minute;
        if !lock(&self.inner.per_user)
            .started
            .take(uid, per_minute, Instant::now())
        {
            return Some(PeekError::TooOften {
                uid,
                limit: per_minute,
            });
        }
        None
    }

    /// One peek, from the snapshot to the report.
    async fn run(
        &self,
        pid: u32,
        source: TriggerSource,
        triggered: SystemTime,
    ) -> Result<PeekReport, PeekError> {
        let inner = &self.inner;
        let settings = self.settings();
        let signal = settings.signal;
        let snapshot = tokio::task::spawn_blocking(move || {
            snapshot::take(pid, signal).map(|mut snapshot| {
                snapshot.python = super::python::at_trigger(pid);
                snapshot
            })
        })
        .await
        .map_err(|_| PeekError::Stopped)?
        .map_err(|err| {
            lock(&inner.stats).gone += 1;
            PeekError::NoProcess(Arc::new(err))
        })?;
        if matches!(source, TriggerSource::Signal { .. }) && !settings.allow.allows(&snapshot) {
            lock(&inner.stats).refused += 1;
            return Err(PeekError::NotAllowed {
                pid,
                command: snapshot.command,
            });
        }

        inner.inbox.open(pid);
        let mut warnings = Vec::new();
        if let super::python::PythonAtTrigger::NotRead(reason) = &snapshot.python {
            warnings.push(format!("its Python stacks were not read: {reason}"));
        }
        let recording = self.record_waits(pid, &mut warnings);
        let sampled = self.sample(&snapshot, &mut warnings);
        let started = SystemTime::now();
        let clock = Instant::now();
        let outcome = match sampled {
            Ok(links) => {
                tokio::time::sleep(settings.duration).await;
                drop(links);
                Ok(())
            }
            Err(err) => Err(err),
        };
        let duration = clock.elapsed();
        // Waits under way are credited up to the cut.
        let cut = inner.pipeline.close_window().await;
        drop(recording);
        let delivered = inner.inbox.take(pid);
        if delivered.dropped > 0 {
            warnings.push(format!(
                "{} samples were dropped: the peeks' share of memory_budget was full (other \
                 peeks ran at once; raise memory_budget)",
                delivered.dropped
            ));
        }
        let samples = delivered.samples;
        self.forget_threads(&snapshot);
        outcome?;
        cut.map_err(|_| PeekError::Stopped)?;

        let folded = lock(&inner.running).get(&pid).map_or(0, |peek| peek.folded);
        let run = PeekRun {
            id: self.next_id(triggered, pid),
            snapshot: &snapshot,
            source,
            signal_name: &inner.signal_name,
            triggered,
            started,
            duration,
            frequency_hz: settings.frequency_hz,
            folded_triggers: folded,
            samples,
            warnings,
        };
        run.report()
            .map_err(|err| PeekError::Report(err.to_string()))
    }

    /// Switches on sampling of every thread of the snapshot; sampling stops
    /// when the returned links are dropped.
    fn sample(
        &self,
        snapshot: &ProcessSnapshot,
        warnings: &mut Vec<String>,
    ) -> Result<Vec<Box<dyn Send>>, PeekError> {
        let tids: Vec<u32> = snapshot.threads.iter().map(|thread| thread.tid).collect();
        self.inner.clocks.mark(&tids);
        let (links, failed) =
            self.start_clocks(snapshot.pid, &tids, self.settings().frequency_hz)?;
        for (tid, err) in failed {
            warnings.push(format!("thread {tid} was not sampled: {err}"));
        }
        Ok(links)
    }

    /// Starts sampling each of `tids` (of process `pid`) at `frequency_hz`
    /// of its CPU time, until the links returned are dropped; says which
    /// threads could not be sampled, and fails when none could.
    pub(super) fn start_clocks(
        &self,
        pid: u32,
        tids: &[u32],
        frequency_hz: u32,
    ) -> Result<Clocks, PeekError> {
        let mut links = Vec::with_capacity(tids.len());
        let mut failed = Vec::new();
        for &tid in tids {
            match self.inner.clocks.sample(tid, frequency_hz) {
                Ok(link) => links.push(link),
                Err(err) => failed.push((tid, err.to_string())),
            }
        }
        if links.is_empty() {
            let message = failed
                .first()
                .map_or_else(|| "it has no threads".to_owned(), |(_, err)| err.clone());
            return Err(PeekError::Sampling { pid, message });
        }
        Ok((links, failed))
    }

    fn forget_threads(&self, snapshot: &ProcessSnapshot) {
        let tids: Vec<u32> = snapshot.threads.iter().map(|thread| thread.tid).collect();
        self.inner.clocks.forget(&tids);
    }

    /// Ends a peek: keeps and publishes its report and answers its waiters.
    fn finish(&self, pid: u32, result: Result<PeekReport, PeekError>) {
        let inner = &self.inner;
        let running = lock(&inner.running).remove(&pid).unwrap_or_default();
        let result = result.map(Arc::new);
        // A user's first few reports a minute go to the log in full; the
        // rest in a line each (their full text is kept in peeks/).
        let in_full = running.uid.is_none_or(|uid| {
            lock(&inner.per_user)
                .logged
                .take(uid, FULL_LOGS_PER_USER_PER_MINUTE, Instant::now())
        });
        match &result {
            Ok(report) => {
                lock(&inner.stats).completed += 1;
                if in_full {
                    info!(
                        pid,
                        peek_id = %report.id,
                        command = %report.command,
                        threads = report.threads.len(),
                        folded_triggers = running.folded,
                        "peek report\n{}",
                        report.text
                    );
                } else {
                    lock(&inner.stats).logged_briefly += 1;
                    info!(
                        pid,
                        peek_id = %report.id,
                        command = %report.command,
                        "peek report kept, not logged in full (its user's first \
                         {FULL_LOGS_PER_USER_PER_MINUTE} this minute were); `profilerctl peeks \
                         --id {}` prints it",
                        report.id
                    );
                }
                if !lock(&inner.archive).keep(report.clone()) {
                    lock(&inner.stats).not_written += 1;
                }
                let _ = inner.published.send(report.clone());
            }
            Err(PeekError::NotAllowed { .. }) => {
                debug!(
                    pid,
                    "peek signal refused: the process is not in the allowlist"
                );
            }
            Err(err) => {
                lock(&inner.stats).failed += 1;
                if in_full {
                    warn!(pid, "peek failed: {err}");
                } else {
                    debug!(pid, "peek failed: {err}");
                }
            }
        }
        for waiter in running.waiters {
            let _ = waiter.send(result.clone());
        }
    }
}

/// The most peeks and profiles at a rate of their own of one user's
/// processes at once: half of `max_concurrent` (at least one), so that one
/// user cannot take every slot.
pub(super) fn per_user_limit(max_concurrent: usize) -> usize {
    (max_concurrent / 2).max(1)
}

/// The peeks and profiles at a rate of their own under way of `uid`'s
/// processes (a peek counts against its process's owner, such a profile
/// against its unprivileged asker).
pub(super) fn of_user(
    running: &HashMap<u32, Running>,
    rated: &HashMap<u32, Option<u32>>,
    uid: u32,
) -> usize {
    let peeks = running.values().filter(|peek| peek.uid == Some(uid));
    let profiles = rated.values().filter(|&&asker| asker == Some(uid));
    peeks.count() + profiles.count()
}
