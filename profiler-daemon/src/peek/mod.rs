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
mod peek_report;
mod python;
mod rated;
mod running;
mod settings;
mod signals;
mod snapshot;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use rustc_hash::FxHashMap as HashMap;
use tokio::sync::{broadcast, oneshot};

use self::{archive::Archive, running::Trigger, settings::bounds};
pub use self::{
    archive::{ArchiveError, PeekSummary},
    peek_report::{PeekReport, ThreadReport, TriggerSource},
    rated::{MAX_RATE_HZ, RatedSamples},
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
        "{limit} peeks or profiles at a rate of their own (-F, --format gecko) of user {uid}'s \
         processes are already running (half of max_concurrent_peeks); try again in a moment"
    )]
    TooManyOfUser { uid: u32, limit: usize },
    #[error(
        "{limit} peeks of user {uid}'s processes were started in the last minute \
         (peeks_per_user_per_minute); try again in a minute"
    )]
    TooOften { uid: u32, limit: u32 },
    #[error(
        "process {pid} is being peeked at or profiled at a rate of its own already; try again \
         when that ends (a second or so for a peek)"
    )]
    Busy { pid: u32 },
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
    /// Processes sampled at a rate of their own for a profile (`rated`),
    /// with the user the profile counts against (none for a privileged
    /// asker): their inbox slots are that profile's; no peek of them
    /// starts.
    rated: Mutex<HashMap<u32, Option<u32>>>,
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
                rated: Mutex::default(),
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
