//! Peeks: a short, high-rate, thread-by-thread profile of one process,
//! triggered by the peek signal (`kill -USR1 PID`) or by the API, in the
//! spirit of Julia's SIGUSR1 peek.
//!
//! This module owns the peeks: which may run (allowlist, one per process,
//! a global limit), the per-thread sampling they switch on and off, the
//! reports they make, where those go (log, files, subscribers) and the
//! peek counters. Samples reach a peek through the normal pipeline (the
//! collector leaves them in the [`Inbox`]); this module must not drain the
//! kernel maps nor touch the profile store.

mod archive;
mod inbox;
mod report;
mod snapshot;

use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant, SystemTime},
};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use profiler_common::PeekSignal;
use rustc_hash::FxHashMap as HashMap;
use tokio::sync::{broadcast, oneshot};
use tracing::{debug, info, warn};

use self::{archive::Archive, report::PeekRun, snapshot::ProcessSnapshot};
pub use self::{
    archive::PeekSummary,
    inbox::Inbox,
    report::{PeekReport, ThreadReport, TriggerSource},
    snapshot::SnapshotError,
};
use crate::{collector::CollectorHandle, lock, sampling::Sampler};

/// How peeks run, from the configuration.
#[derive(Clone, Debug)]
pub struct PeekSettings {
    /// 0: peeks by signal are off.
    pub signal: u32,
    pub duration: Duration,
    pub frequency_hz: u32,
    pub allow: Allowlist,
    pub max_concurrent: usize,
    pub directory: std::path::PathBuf,
    pub max_reports: usize,
    pub max_bytes: u64,
}

impl PeekSettings {
    /// The peek settings of a configuration.
    pub fn from_config(config: &crate::config::Config) -> Self {
        Self {
            signal: config.peek_signal_number(),
            duration: config.peek_duration,
            frequency_hz: config.peek_frequency_hz,
            allow: Allowlist {
                commands: config.peek_allow_commands.clone(),
                uids: config.peek_allow_uids.clone(),
                cgroups: config.peek_allow_cgroups.clone(),
            },
            max_concurrent: config.max_concurrent_peeks as usize,
            directory: config.state_dir.join("peeks"),
            max_reports: config.peeks_kept as usize,
            max_bytes: config.peeks_max_bytes.as_u64(),
        }
    }
}

/// Which processes a signal may peek at; an empty list does not restrict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    pub commands: Vec<String>,
    pub uids: Vec<u32>,
    /// A cgroup allows itself and its descendants.
    pub cgroups: Vec<String>,
}

impl Allowlist {
    fn allows(&self, process: &ProcessSnapshot) -> bool {
        (self.commands.is_empty() || self.commands.contains(&process.command))
            && (self.uids.is_empty() || self.uids.contains(&process.uid))
            && (self.cgroups.is_empty()
                || process.cgroups.iter().any(|cgroup| {
                    self.cgroups
                        .iter()
                        .any(|allowed| crate::cgroups::within(cgroup, allowed))
                }))
    }
}

/// Whether a peek signal aimed at a process without a handler is kept from
/// killing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Protection {
    pub active: bool,
    /// Why, in plain words.
    pub reason: String,
}

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
    /// Signals refused: the process is not in the allowlist.
    pub refused: u64,
    /// Signals whose process was gone before the peek began.
    pub gone: u64,
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

/// A peek under way: the triggers folded into it and who waits for it.
#[derive(Default)]
struct Running {
    folded: u32,
    waiters: Vec<Waiter>,
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
    sampler: Arc<Mutex<Sampler>>,
    threads: Mutex<BpfHashMap<MapData, u32, u32>>,
    inbox: Arc<Inbox>,
    collector: CollectorHandle,
    running: Mutex<HashMap<u32, Running>>,
    archive: Mutex<Archive>,
    published: broadcast::Sender<Arc<PeekReport>>,
    stats: Mutex<PeekStats>,
    protection: Protection,
    sequence: std::sync::atomic::AtomicU32,
}

impl Peeker {
    pub fn new(
        settings: PeekSettings,
        sampler: Arc<Mutex<Sampler>>,
        threads: BpfHashMap<MapData, u32, u32>,
        inbox: Arc<Inbox>,
        collector: CollectorHandle,
        protection: Protection,
    ) -> Self {
        let archive = Archive::open(
            &settings.directory,
            settings.max_reports,
            settings.max_bytes,
        );
        let (published, _) = broadcast::channel(64);
        Self {
            inner: Arc::new(Inner {
                signal_name: signal_name(settings.signal),
                settings: std::sync::RwLock::new(settings),
                sampler,
                threads: Mutex::new(threads),
                inbox,
                collector,
                running: Mutex::new(HashMap::default()),
                archive: Mutex::new(archive),
                published,
                stats: Mutex::new(PeekStats::default()),
                protection,
                sequence: std::sync::atomic::AtomicU32::new(0),
            }),
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
        lock(&self.inner.archive).set_bounds(new.max_reports, new.max_bytes);
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

    /// Peeks running now.
    pub fn running(&self) -> usize {
        lock(&self.inner.running).len()
    }

    /// Every kept report, oldest first.
    pub fn list(&self) -> Vec<PeekSummary> {
        lock(&self.inner.archive).list()
    }

    pub fn get(&self, id: &str) -> Option<Result<Arc<PeekReport>, String>> {
        lock(&self.inner.archive).get(id)
    }

    /// Every report finished from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Arc<PeekReport>> {
        self.inner.published.subscribe()
    }

    /// Peeks at the process of `task` (a process or thread id) for the API,
    /// or joins the peek already running for it; resolves to its report.
    pub async fn request(&self, task: u32) -> Result<Arc<PeekReport>, PeekError> {
        lock(&self.inner.stats).requests += 1;
        let pid = snapshot::process_of(task).map_err(|err| PeekError::NoProcess(Arc::new(err)))?;
        let (waiter, report) = oneshot::channel();
        self.start(pid, TriggerSource::Request, SystemTime::now(), Some(waiter));
        report.await.map_err(|_| PeekError::Stopped)?
    }

    /// Handles a peek signal the kernel passed on.
    pub fn on_signal(&self, signal: &PeekSignal) {
        lock(&self.inner.stats).signals += 1;
        let pid = match snapshot::process_of(signal.target) {
            Ok(pid) => pid,
            Err(err) => {
                lock(&self.inner.stats).gone += 1;
                debug!(
                    target_task = signal.target,
                    "peek signal not followed: {err}"
                );
                return;
            }
        };
        if pid == signal.sender_pid {
            lock(&self.inner.stats).self_sent += 1;
            return;
        }
        let source = TriggerSource::Signal {
            signal: signal.signal,
            sender_pid: signal.sender_pid,
            sender_command: comm_text(&signal.sender_comm),
            intercepted: signal.result == profiler_common::peek_signal_result::INTERCEPTED,
        };
        self.start(pid, source, SystemTime::now(), None);
    }

    /// Starts a peek of `pid` unless one runs (then folds into it) or too
    /// many run (then drops the trigger).
    fn start(
        &self,
        pid: u32,
        source: TriggerSource,
        triggered: SystemTime,
        waiter: Option<Waiter>,
    ) {
        let inner = &self.inner;
        {
            let mut running = lock(&inner.running);
            if let Some(peek) = running.get_mut(&pid) {
                peek.folded += 1;
                peek.waiters.extend(waiter);
                lock(&inner.stats).folded += 1;
                return;
            }
            let limit = self.settings().max_concurrent;
            if running.len() >= limit {
                lock(&inner.stats).dropped_limit += 1;
                debug!(pid, "peek trigger dropped: too many peeks running");
                if let Some(waiter) = waiter {
                    let _ = waiter.send(Err(PeekError::TooMany { limit }));
                }
                return;
            }
            running.insert(
                pid,
                Running {
                    folded: 0,
                    waiters: waiter.into_iter().collect(),
                },
            );
        }
        let peeker = self.clone();
        tokio::spawn(async move {
            let result = peeker.run(pid, source, triggered).await;
            peeker.finish(pid, result);
        });
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
        // Everything sampled before now is in the inbox once this returns.
        let cut = inner.collector.close_window().await;
        let samples = inner.inbox.close(pid);
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
    ) -> Result<Vec<aya::programs::perf_event::PerfEventLink>, PeekError> {
        let inner = &self.inner;
        {
            let mut threads = lock(&inner.threads);
            for thread in &snapshot.threads {
                if threads.insert(thread.tid, 0, 0).is_err() {
                    // Only the "where it was" of a running thread is lost.
                    debug!(tid = thread.tid, "peeked-thread map full");
                }
            }
        }
        let mut links = Vec::with_capacity(snapshot.threads.len());
        let mut failed = Vec::new();
        let frequency_hz = self.settings().frequency_hz;
        let mut sampler = lock(&inner.sampler);
        for thread in &snapshot.threads {
            match sampler.sample_thread(thread.tid, frequency_hz) {
                Ok(link) => links.push(link),
                Err(err) => failed.push((thread.tid, err.to_string())),
            }
        }
        drop(sampler);
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
        let mut threads = lock(&self.inner.threads);
        for thread in &snapshot.threads {
            let _ = threads.remove(&thread.tid);
        }
    }

    /// Ends a peek: keeps and publishes its report and answers its waiters.
    fn finish(&self, pid: u32, result: Result<PeekReport, PeekError>) {
        let inner = &self.inner;
        let running = lock(&inner.running).remove(&pid).unwrap_or_default();
        let result = result.map(Arc::new);
        match &result {
            Ok(report) => {
                lock(&inner.stats).completed += 1;
                info!(
                    pid,
                    peek_id = %report.id,
                    command = %report.command,
                    threads = report.threads.len(),
                    folded_triggers = running.folded,
                    "peek report\n{}",
                    report.text
                );
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
                warn!(pid, "peek failed: {err}");
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

/// Reads peek signals from the kernel until the daemon stops, and starts
/// their peeks.
pub async fn follow_signals(peeker: Peeker, signals: RingBuf<MapData>) {
    let interest = tokio::io::Interest::READABLE;
    // SAFETY: the ring buffer owns its file descriptor and keeps it open,
    // unchanged, until it is dropped, which only the AsyncFd can do.
    let registered = unsafe { tokio::io::unix::AsyncFd::register_with_interest(signals, interest) };
    let mut signals = match registered {
        Ok(signals) => signals,
        Err(err) => {
            warn!("cannot wait for peek signals: {err}; peeks by signal are off");
            return;
        }
    };
    loop {
        let mut ready = match signals.readable_mut().await {
            Ok(ready) => ready,
            Err(err) => {
                warn!("cannot wait for peek signals: {err}; peeks by signal are off");
                return;
            }
        };
        let ring = ready.get_inner_mut();
        while let Some(item) = ring.next() {
            if item.len() >= size_of::<PeekSignal>() {
                // SAFETY: the kernel wrote a PeekSignal (repr(C), integers
                // only) into this slot; read_unaligned copes with alignment.
                let signal = unsafe { item.as_ptr().cast::<PeekSignal>().read_unaligned() };
                peeker.on_signal(&signal);
            }
        }
        ready.clear_ready();
    }
}

/// Whether processes without a handler are protected from the peek
/// signal, and why or why not, for the start-up log and the status.
pub fn protection(signal_guard: Result<(), String>) -> Protection {
    match signal_guard {
        Ok(()) => Protection {
            active: true,
            reason: "a BPF LSM program on task_kill refuses the peek signal to a process \
                     without a handler (the sender gets EPERM) and peeks at it instead"
                .to_owned(),
        },
        Err(reason) => Protection {
            active: false,
            reason,
        },
    }
}

/// Logs at start-up what a peek signal does to a process without a handler.
pub fn warn_about_protection(peeker: &Peeker) {
    let protection = peeker.protection();
    let signal = &peeker.inner.signal_name;
    if peeker.settings().signal == 0 {
        info!("peeks by signal are off; `profilerctl peek PID` still works");
    } else if protection.active {
        info!(
            "a {signal} sent to a process without a handler for it is intercepted: the process is peeked, not killed"
        );
    } else {
        warn!(
            "{signal} sent to a process without a handler for it will terminate that process \
             (the kernel's default action), because: {}. Use `profilerctl peek PID` for such \
             processes, or choose another peek_signal in the configuration",
            protection.reason
        );
    }
}

/// The signal's conventional name, e.g. `SIGUSR1`.
pub fn signal_name(signal: u32) -> String {
    if signal == 0 {
        return "no signal".to_owned();
    }
    // SAFETY: strsignal returns a pointer to a static or thread-local
    // string, or NULL; it is copied at once.
    let description = unsafe {
        let text = libc::strsignal(signal as i32);
        (!text.is_null()).then(|| {
            std::ffi::CStr::from_ptr(text)
                .to_string_lossy()
                .into_owned()
        })
    };
    match signal as i32 {
        libc::SIGUSR1 => "SIGUSR1".to_owned(),
        libc::SIGUSR2 => "SIGUSR2".to_owned(),
        _ => format!(
            "signal {signal}{}",
            description
                .map(|text| format!(" ({text})"))
                .unwrap_or_default()
        ),
    }
}

fn comm_text(comm: &[u8]) -> String {
    let end = comm
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::peek::snapshot::Disposition;

    fn process(command: &str, uid: u32, cgroups: &[&str]) -> ProcessSnapshot {
        ProcessSnapshot {
            pid: 1,
            command: command.to_owned(),
            command_line: String::new(),
            uid,
            cgroups: cgroups.iter().map(|c| (*c).to_owned()).collect(),
            cgroup_v2: String::new(),
            disposition: Disposition::Unknown,
            threads: Vec::new(),
        }
    }

    #[test]
    fn an_empty_allowlist_allows_everything() {
        assert!(Allowlist::default().allows(&process("a", 5, &["/x"])));
    }

    #[test]
    fn every_set_list_must_match() {
        let allow = Allowlist {
            commands: vec!["nginx".into()],
            uids: vec![33],
            cgroups: vec!["/system.slice".into()],
        };
        assert!(allow.allows(&process("nginx", 33, &["/system.slice/nginx.service"])));
        assert!(allow.allows(&process("nginx", 33, &["/system.slice"])));
        assert!(!allow.allows(&process("nginx", 33, &["/system.slicer"])));
        assert!(!allow.allows(&process("nginx", 0, &["/system.slice"])));
        assert!(!allow.allows(&process("bash", 33, &["/system.slice"])));
        let root = Allowlist {
            cgroups: vec!["/".into()],
            ..Allowlist::default()
        };
        assert!(root.allows(&process("x", 1, &["/user.slice"])));
    }

    #[test]
    fn ids_sort_by_time_and_parse_back() {
        let time = humantime::parse_rfc3339("2026-11-21T20:15:12.123Z").unwrap();
        let id = "20261121T201512.123Z-1234-7";
        assert_eq!(parse_id(id), Some((time, 1234)));
        assert_eq!(parse_id("nonsense"), None);
        assert!("20261121T201512.123Z-9-0" < "20261121T201513.001Z-1-1");
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(libc::SIGUSR1 as u32), "SIGUSR1");
        assert!(signal_name(34).starts_with("signal 34"));
        assert_eq!(comm_text(b"bash\0\0\0"), "bash");
    }
}
