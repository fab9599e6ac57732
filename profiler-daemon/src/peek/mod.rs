//! Peeks: a short, high-rate, thread-by-thread profile of one process,
//! triggered by the peek signal (`kill -USR1 PID`) or by the API, in the
//! spirit of Julia's SIGUSR1 peek.
//!
//! This module owns the peeks: which may run (allowlist, one per process,
//! a global limit), the per-thread sampling they switch on and off, the
//! reports they make, where those go (log, files, subscribers) and the
//! peek counters. Samples reach a peek through the normal pipeline (the
//! pipeline leaves them in the [`SampleInbox`]); this module must not drain the
//! kernel maps nor touch the profile store.

mod archive;
mod report;
mod settings;
mod signals;
mod snapshot;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use profiler_common::{PeekSignal, peek_signal_result};
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::{broadcast, oneshot};
use tracing::{debug, info, warn};

use self::{
    archive::Archive,
    report::PeekRun,
    settings::bounds,
    signals::comm_text,
    snapshot::{Disposition, ProcessSnapshot},
};
pub use self::{
    archive::{ArchiveError, PeekSummary},
    report::{PeekReport, ThreadReport, TriggerSource},
    settings::{Allowlist, PeekSettings},
    signals::{Protection, follow_signals, protection, signal_name, warn_about_protection},
    snapshot::SnapshotError,
};
use crate::{
    kernel::{
        offcpu::{OffCpuRecorder, Recorded, RecordingGuard},
        programs::PeekClocks,
    },
    lock,
    pipeline::{PipelineHandle, SampleInbox},
};

#[derive(Debug, Clone, thiserror::Error)]
pub enum PeekError {
    #[error(transparent)]
    NoProcess(Arc<SnapshotError>),
    #[error(
        "process {pid} ({command}) is not in the peek allowlist (peek_allow_commands, \
         peek_allow_uids, peek_allow_cgroups)"
    )]
    NotAllowed { pid: u32, command: String },
    #[error("{limit} peeks are already running (max_concurrent_peeks); try again in a moment")]
    TooMany { limit: usize },
    #[error(
        "{limit} peeks of user {uid}'s processes are already running (half of \
         max_concurrent_peeks); try again in a moment"
    )]
    TooManyOfUser { uid: u32, limit: usize },
    #[error(
        "{limit} peeks of user {uid}'s processes were started in the last minute \
         (peeks_per_user_per_minute); try again in a minute"
    )]
    TooOften { uid: u32, limit: u32 },
    #[error("cannot sample process {pid}: {message}")]
    Sampling { pid: u32, message: String },
    #[error("cannot make the peek report: {0}")]
    Report(String),
    #[error("the daemon is shutting down")]
    Stopped,
}

/// Peek counters since start, for the status report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeekStats {
    /// Peek signals the daemon received from the kernel.
    pub signals: u64,
    /// `Peek` requests of the API.
    pub requests: u64,
    pub completed: u64,
    pub failed: u64,
    /// Triggers folded into a peek of the same process already running.
    pub folded: u64,
    /// Triggers dropped: too many peeks running.
    pub dropped_limit: u64,
    /// Triggers dropped: too many peeks of one user's processes started in
    /// a minute, or running.
    pub dropped_user_limit: u64,
    /// Peek reports logged in one line rather than in full (a user's
    /// beyond the first few in a minute).
    pub logged_briefly: u64,
    /// Signals refused: the process is not in the allowlist.
    pub refused: u64,
    /// Signals whose process was gone before the peek began.
    pub gone: u64,
    /// Processes the peek signal terminated (they had no handler for it).
    pub killed: u64,
    /// Signals a process sent to itself (programs use SIGUSR1 internally,
    /// e.g. the jobserver of cargo and make): not a request for a peek.
    pub self_sent: u64,
    /// Peek samples that arrived when no peek of their process was open.
    pub stray_samples: u64,
    /// Reports that could not be written under the state directory (kept
    /// in memory only).
    pub not_written: u64,
}

type Waiter = oneshot::Sender<Result<Arc<PeekReport>, PeekError>>;

/// A peek under way: whose process it is, the triggers folded into it and
/// who waits for it.
#[derive(Default)]
struct Running {
    /// The process's owner, when it could be read.
    uid: Option<u32>,
    folded: u32,
    waiters: Vec<Waiter>,
}

/// How long a peek signal's target without a handler is given to die of
/// it before it counts as merely gone.
const DEATH_NOTICE_WAIT: Duration = Duration::from_secs(2);

/// Reports of one user logged in full per minute; the others in one line.
const FULL_LOGS_PER_USER_PER_MINUTE: u32 = 3;

/// Events per user in the current minute (a fixed window).
#[derive(Debug, Default)]
struct PerUserMinute {
    began: Option<Instant>,
    counts: HashMap<u32, u32>,
}

impl PerUserMinute {
    /// Counts one event of `uid`, unless it already had `limit` this minute.
    fn take(&mut self, uid: u32, limit: u32, now: Instant) -> bool {
        if self
            .began
            .is_none_or(|began| now.duration_since(began) >= Duration::from_secs(60))
        {
            self.began = Some(now);
            self.counts.clear();
        }
        let count = self.counts.entry(uid).or_default();
        if *count >= limit {
            return false;
        }
        *count += 1;
        true
    }
}

/// The per-user bounds' counts.
#[derive(Debug, Default)]
struct PerUser {
    started: PerUserMinute,
    logged: PerUserMinute,
}

/// Runs peeks. Cheap to clone.
#[derive(Clone)]
pub struct Peeker {
    inner: Arc<Inner>,
}

struct Inner {
    /// Replaced whole by a configuration reload (the signal and directory
    /// stay as they were at start).
    settings: std::sync::RwLock<PeekSettings>,
    signal_name: String,
    clocks: Arc<dyn PeekClocks>,
    inbox: Arc<SampleInbox>,
    pipeline: PipelineHandle,
    running: Mutex<HashMap<u32, Running>>,
    /// Processes a peek signal is about to end (no handler), until the
    /// kernel says it did.
    doomed: Mutex<HashMap<u32, Instant>>,
    per_user: Mutex<PerUser>,
    archive: Mutex<Archive>,
    published: broadcast::Sender<Arc<PeekReport>>,
    stats: Mutex<PeekStats>,
    protection: Protection,
    sequence: std::sync::atomic::AtomicU32,
    /// Records the peeked process's waits off CPU, with the pages of user
    /// stack a sample copies (set once the kernel side is up).
    offcpu: Mutex<Option<(OffCpuRecorder, u32)>>,
}

impl Peeker {
    pub fn new(
        settings: PeekSettings,
        clocks: Arc<dyn PeekClocks>,
        inbox: Arc<SampleInbox>,
        pipeline: PipelineHandle,
        protection: Protection,
    ) -> Self {
        let archive = Archive::open(&settings.directory, bounds(&settings));
        let (published, _) = broadcast::channel(64);
        Self {
            inner: Arc::new(Inner {
                signal_name: signal_name(settings.signal),
                settings: std::sync::RwLock::new(settings),
                clocks,
                inbox,
                pipeline,
                running: Mutex::new(HashMap::default()),
                doomed: Mutex::new(HashMap::default()),
                per_user: Mutex::new(PerUser::default()),
                archive: Mutex::new(archive),
                published,
                stats: Mutex::new(PeekStats::default()),
                protection,
                sequence: std::sync::atomic::AtomicU32::new(0),
                offcpu: Mutex::new(None),
            }),
        }
    }

    /// Makes peeks wall-clock: each records where its process's threads
    /// wait off CPU, as well as their CPU time.
    pub fn record_waits_with(&self, recorder: OffCpuRecorder, stack_copy_pages: u32) {
        *lock(&self.inner.offcpu) = Some((recorder, stack_copy_pages));
    }

    /// Starts recording `pid`'s waits for a peek, its threads already
    /// waiting included; `None` (and a warning) when it cannot.
    fn record_waits(&self, pid: u32, warnings: &mut Vec<String>) -> Option<RecordingGuard> {
        let (recorder, pages) = lock(&self.inner.offcpu).clone()?;
        let recording =
            self.inner
                .pipeline
                .record_waits(&recorder, Recorded::Pids(vec![pid]), &[pid], pages);
        match recording {
            Ok(guard) => Some(guard),
            Err(reason) => {
                warnings.push(format!(
                    "only CPU time was sampled: off-CPU time cannot be recorded here ({reason})"
                ));
                None
            }
        }
    }

    pub fn protection(&self) -> &Protection {
        &self.inner.protection
    }

    pub fn settings(&self) -> PeekSettings {
        crate::read_lock(&self.inner.settings).clone()
    }

    /// Applies new settings (configuration reload) to the peeks that start
    /// from now on; the signal and the directory stay as they were at start
    /// (they need a restart).
    pub fn set_settings(&self, new: PeekSettings) {
        let mut settings = crate::write_lock(&self.inner.settings);
        lock(&self.inner.archive).set_bounds(bounds(&new));
        *settings = PeekSettings {
            signal: settings.signal,
            directory: settings.directory.clone(),
            ..new
        };
    }

    pub fn stats(&self) -> PeekStats {
        let mut stats = *lock(&self.inner.stats);
        stats.stray_samples = self.inner.inbox.stray_samples();
        stats
    }

    /// Bytes the peeks hold in memory (the reports of this run, the
    /// samples of peeks under way), and what was let go of or dropped to
    /// stay within their share since start (reports, and samples).
    pub fn memory(&self) -> (u64, u64) {
        let (reports, unloaded) = lock(&self.inner.archive).memory();
        let (samples, dropped) = self.inner.inbox.usage();
        (reports + samples, unloaded + dropped)
    }

    /// Peeks running now.
    pub fn running(&self) -> usize {
        lock(&self.inner.running).len()
    }

    /// Every kept report, oldest first.
    pub fn list(&self) -> Vec<PeekSummary> {
        lock(&self.inner.archive).list()
    }

    pub fn get(&self, id: &str) -> Option<Result<Arc<PeekReport>, ArchiveError>> {
        lock(&self.inner.archive).get(id)
    }

    /// Every report finished from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PeekReport>> {
        self.inner.published.subscribe()
    }

    /// Peeks at the process of `task` (a process or thread id) for the API,
    /// or joins the peek already running for it; resolves to its report. A
    /// `privileged` caller (root, the admin group) is not bound per user.
    pub async fn request(&self, task: u32, privileged: bool) -> Result<Arc<PeekReport>, PeekError> {
        lock(&self.inner.stats).requests += 1;
        let pid = snapshot::process_of(task).map_err(|err| PeekError::NoProcess(Arc::new(err)))?;
        let (waiter, report) = oneshot::channel();
        let trigger = Trigger {
            source: TriggerSource::Request,
            triggered: SystemTime::now(),
            bound_per_user: !privileged,
        };
        self.start(pid, trigger, Some(waiter));
        report.await.map_err(|_| PeekError::Stopped)?
    }

    /// Handles a peek signal the kernel passed on.
    pub fn on_signal(&self, signal: &PeekSignal) {
        if signal.result == peek_signal_result::KILLED {
            self.on_killed(signal);
            return;
        }
        lock(&self.inner.stats).signals += 1;
        let intercepted = signal.result == peek_signal_result::INTERCEPTED;
        let pid = match snapshot::process_of(signal.target) {
            Ok(pid) => pid,
            Err(err) => {
                self.await_death(signal.target, err.to_string());
                return;
            }
        };
        if pid == signal.sender_pid {
            lock(&self.inner.stats).self_sent += 1;
            return;
        }
        if !intercepted && snapshot::disposition(pid, signal.signal) == Disposition::Default {
            // The kernel's default action ends the process: there will be
            // nothing to peek at.
            self.await_death(pid, "it has no handler for the peek signal".to_owned());
            return;
        }
        let source = TriggerSource::Signal {
            signal: signal.signal,
            sender_pid: signal.sender_pid,
            sender_command: comm_text(&signal.sender_comm),
            intercepted,
        };
        let trigger = Trigger {
            source,
            triggered: SystemTime::now(),
            bound_per_user: true,
        };
        self.start(pid, trigger, None);
    }

    /// Waits a moment for the kernel to say that `pid` died of the peek
    /// signal (see [`Peeker::on_killed`]), which counts it; counts it as
    /// gone otherwise. Either way the trigger is counted once.
    fn await_death(&self, pid: u32, why: String) {
        lock(&self.inner.doomed).insert(pid, Instant::now());
        let peeker = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(DEATH_NOTICE_WAIT).await;
            if lock(&peeker.inner.doomed).remove(&pid).is_some() {
                lock(&peeker.inner.stats).gone += 1;
                debug!(pid, "peek signal not followed: {why}");
            }
        });
    }

    /// The kernel saw a process die of the peek signal it was sent.
    fn on_killed(&self, event: &PeekSignal) {
        let pid = event.target;
        lock(&self.inner.doomed).remove(&pid);
        lock(&self.inner.stats).killed += 1;
        let command = comm_text(&event.target_comm);
        let signal = &self.inner.signal_name;
        warn!(
            pid,
            command = %command,
            "process {pid} ({command}) was terminated by {signal}: it has no handler for it, \
             and the kernel's default action ends the process; use `profilerctl peek {pid}` \
             (which sends no signal) for such processes, or set peek_signal to a signal they \
             handle"
        );
    }

    /// Starts a peek of `pid` unless one runs (then folds into it) or too
    /// many run, in all or of its owner's processes, or its owner's were
    /// started too often (then drops the trigger).
    fn start(&self, pid: u32, trigger: Trigger, waiter: Option<Waiter>) {
        let inner = &self.inner;
        let uid = crate::service::access::TaskCredentials::read(pid).map(|task| task.uids[0]);
        {
            let mut running = lock(&inner.running);
            if let Some(peek) = running.get_mut(&pid) {
                peek.folded += 1;
                peek.waiters.extend(waiter);
                lock(&inner.stats).folded += 1;
                return;
            }
            let settings = self.settings();
            let refusal = self.refusal(&running, uid, &trigger, &settings);
            if let Some(refusal) = refusal {
                let mut stats = lock(&inner.stats);
                match refusal {
                    PeekError::TooMany { .. } => stats.dropped_limit += 1,
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
        if running.len() >= limit {
            return Some(PeekError::TooMany { limit });
        }
        let (Some(uid), true) = (uid, trigger.bound_per_user) else {
            return None;
        };
        let user_limit = (limit / 2).max(1);
        let of_user = running
            .values()
            .filter(|peek| peek.uid == Some(uid))
            .count();
        if of_user >= user_limit {
            return Some(PeekError::TooManyOfUser {
                uid,
                limit: user_limit,
            });
        }
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
        let snapshot = tokio::task::spawn_blocking(move || snapshot::take(pid, signal))
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
        let inner = &self.inner;
        let tids: Vec<u32> = snapshot.threads.iter().map(|thread| thread.tid).collect();
        inner.clocks.mark(&tids);
        let mut links = Vec::with_capacity(tids.len());
        let mut failed = Vec::new();
        let frequency_hz = self.settings().frequency_hz;
        for &tid in &tids {
            match inner.clocks.sample(tid, frequency_hz) {
                Ok(link) => links.push(link),
                Err(err) => failed.push((tid, err.to_string())),
            }
        }
        if links.is_empty() {
            let message = failed
                .first()
                .map_or_else(|| "it has no threads".to_owned(), |(_, err)| err.clone());
            return Err(PeekError::Sampling {
                pid: snapshot.pid,
                message,
            });
        }
        for (tid, err) in failed {
            warnings.push(format!("thread {tid} was not sampled: {err}"));
        }
        Ok(links)
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

    /// An id that sorts by trigger time: `20261121T201512.123Z-1234-1`.
    fn next_id(&self, triggered: SystemTime, pid: u32) -> String {
        let sequence = self
            .inner
            .sequence
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let time: String = humantime::format_rfc3339_millis(triggered)
            .to_string()
            .chars()
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        format!("{time}-{pid}-{sequence}")
    }
}

/// What started a peek, and whether its owner's bounds apply.
struct Trigger {
    source: TriggerSource,
    triggered: SystemTime,
    /// False for requests of root and the admin group.
    bound_per_user: bool,
}

/// The trigger time and process of an id made by [`Peeker::next_id`].
fn parse_id(id: &str) -> Option<(SystemTime, u32)> {
    let mut parts = id.split('-');
    let time = parts.next()?;
    let pid = parts.next()?.parse().ok()?;
    // 20261121T201512.123Z -> 2026-11-21T20:15:12.123Z
    if time.len() < 16 || !time.is_ascii() {
        return None;
    }
    let rfc3339 = format!(
        "{}-{}-{}T{}:{}:{}",
        &time[0..4],
        &time[4..6],
        &time[6..8],
        &time[9..11],
        &time[11..13],
        &time[13..]
    );
    Some((humantime::parse_rfc3339(&rfc3339).ok()?, pid))
}

#[cfg(test)]
mod tests;
