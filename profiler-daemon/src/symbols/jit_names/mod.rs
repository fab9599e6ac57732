//! Names of JIT-compiled code, from each process's jitdump file (the
//! `jit-PID.dump` it maps) or else its perf map (`/tmp/perf-PID.map` in
//! its own mount namespace). Both are read alike, a perf map's lines as a
//! jitdump's records; "lines" below means either.
//!
//! Such a file is one its process's user writes, so it may be anything:
//! 64 MiB of lines, a FIFO, a link to a root-only file, a sparse gigabyte.
//! It is therefore read on a thread of its own (the reader), never on the
//! drain thread or a thread that answers requests, opened only as
//! [`process_files::open_written_by`] allows, at most [`MAX_FILE_BYTES`] of
//! it, a piece at a time, the processes taking turns and all of them
//! together at most [`SCAN_BYTES_PER_SECOND`]. Only the functions samples
//! fell in are held (not the whole map), within a limit in bytes; a slow
//! or hostile file delays its own process's names, nothing else.
//!
//! The drain thread says which addresses of anonymous code it saw
//! ([`JitNames::want`]) as it normalizes them; the symbolizer thread waits
//! a little for those of quick files ([`JitNames::settle`]) before it names
//! them ([`JitNames::name_batch`]). A new address is first looked for in
//! the lines written since the last read (where new code goes), then, at
//! most every few seconds per process, in the whole file.
//!
//! Owns the names found and the files they are read from; it must not read
//! anything else of a process.

mod jitdump;
mod perf_map;
mod process;
mod steps;

use std::{
    collections::{BTreeMap, HashMap, VecDeque},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    thread::JoinHandle,
    time::{Duration, Instant},
};

use tracing::debug;

use self::{
    process::{ProcessNames, TAIL_INTERVAL},
    steps::{Outcome, perform},
};
use super::processes::{NormalizedBatch, UserAddress};
use crate::lock;
#[cfg(doc)]
use crate::symbols::process_files;

/// The most of a file of JIT names read: lines past it are not.
pub const MAX_FILE_BYTES: u64 = 64 << 20;

/// Bytes of JIT names files read per second by all processes together, at most.
pub const SCAN_BYTES_PER_SECOND: u64 = 32 << 20;

/// The longest the symbolizer waits for names, per batch.
pub const SETTLE_WAIT: Duration = Duration::from_millis(100);

/// A reader step this long means the reader is stuck in a file (a
/// filesystem that does not answer): the symbolizer stops waiting for it.
const STUCK_AFTER: Duration = Duration::from_secs(1);

/// A process whose names are not asked for this long is forgotten (its
/// file closed).
const IDLE_LIMIT: Duration = Duration::from_secs(60);

/// Most processes whose JIT names files are followed at once.
const MAX_PROCESSES: usize = 4096;

/// What the JIT names hold and did, for the status report and metrics.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct JitStats {
    /// Processes whose anonymous code was sampled lately.
    pub processes: u64,
    pub names: u64,
    pub bytes: u64,
    pub limit: u64,
    /// Names let go of to stay within the limit (read again if needed).
    pub names_evicted: u64,
    pub bytes_read: u64,
    /// Files not read, by reason.
    pub refused: BTreeMap<&'static str, u64>,
    /// Lines skipped as too long.
    pub lines_too_long: u64,
    /// Files longer than [`MAX_FILE_BYTES`] (the rest is not read).
    pub files_cut: u64,
}

/// The JIT names of every process, shared by the drain thread, the reader
/// and the symbolizer thread. Cheap to clone.
#[derive(Clone)]
pub struct JitNames {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the reader: work was queued, or the daemon stops.
    work: Condvar,
    /// Wakes those waiting for names: the reader made progress.
    progress: Condvar,
}

#[derive(Default)]
struct State {
    processes: HashMap<u32, ProcessNames>,
    /// Processes with work, in turn.
    queue: VecDeque<u32>,
    bytes: u64,
    limit: u64,
    stats: JitStats,
    /// When the reader's current step began, while it runs one.
    step_started: Option<Instant>,
    stopping: bool,
}

impl JitNames {
    /// Starts the reader thread, holding at most `limit` bytes of names
    /// (0: no limit).
    pub fn start(limit: u64) -> std::io::Result<(Self, JoinHandle<()>)> {
        let names = Self {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    limit,
                    ..State::default()
                }),
                work: Condvar::new(),
                progress: Condvar::new(),
            }),
        };
        let reader = names.clone();
        let thread = std::thread::Builder::new()
            .name("profilerd-jit".to_owned())
            .spawn(move || reader.read_files())?;
        Ok((names, thread))
    }

    /// Ends the reader thread (after its current step).
    pub fn stop(&self) {
        self.state().stopping = true;
        self.shared.work.notify_all();
        self.shared.progress.notify_all();
    }

    /// Sets the most bytes of names held (0: no limit).
    pub fn set_limit(&self, limit: u64) {
        let mut state = self.state();
        state.limit = limit;
        state.enforce_limit();
    }

    pub fn stats(&self) -> JitStats {
        let state = self.state();
        let mut stats = state.stats.clone();
        stats.processes = state.processes.len() as u64;
        stats.names = state
            .processes
            .values()
            .map(|process| process.names_held() as u64)
            .sum();
        stats.bytes = state.bytes;
        stats.limit = state.limit;
        stats
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock(&self.shared.state)
    }

    /// Asks for the names of the anonymous code of `batch`: the addresses
    /// not named yet are queued for the reader. Never waits on a file.
    pub fn want(&self, batch: &NormalizedBatch) {
        let now = Instant::now();
        let mut state = self.state();
        let mut queued = false;
        for sample in &batch.samples {
            for address in &sample.user {
                if let UserAddress::Anonymous { address, .. } = address {
                    queued |= state.want(sample.thread.pid, *address, now);
                }
            }
        }
        if queued {
            self.shared.work.notify_one();
        }
    }

    /// Waits (at most `wait`) until the names of the anonymous code of
    /// `batch` are known, except those of processes whose files are long,
    /// refused or read again only later, or when the reader is stuck.
    pub fn settle(&self, batch: &NormalizedBatch, wait: Duration) {
        let mut pids: Vec<u32> = batch
            .samples
            .iter()
            .filter(|sample| {
                sample
                    .user
                    .iter()
                    .any(|address| matches!(address, UserAddress::Anonymous { .. }))
            })
            .map(|sample| sample.thread.pid)
            .collect();
        if pids.is_empty() {
            return;
        }
        pids.sort_unstable();
        pids.dedup();
        let deadline = Instant::now() + wait;
        let mut state = self.state();
        loop {
            let now = Instant::now();
            let stuck = state
                .step_started
                .is_some_and(|started| now.duration_since(started) >= STUCK_AFTER);
            let settled = pids.iter().all(|pid| {
                state
                    .processes
                    .get(pid)
                    .is_none_or(|process| process.settled(now))
            });
            if settled || stuck || state.stopping || now >= deadline {
                return;
            }
            state = self
                .shared
                .progress
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }

    /// Names the anonymous code of `batch` that their files name.
    pub fn name_batch(&self, batch: &mut NormalizedBatch) {
        let now = Instant::now();
        let mut state = self.state();
        for sample in &mut batch.samples {
            let pid = sample.thread.pid;
            for address in &mut sample.user {
                let UserAddress::Anonymous { address: at, .. } = *address else {
                    continue;
                };
                let name = state
                    .processes
                    .get_mut(&pid)
                    .and_then(|process| process.lookup(at, now));
                if let Some(function) = name {
                    *address = UserAddress::Jit {
                        function,
                        address: at,
                    };
                }
            }
        }
    }

    /// The reader thread: takes the processes with work in turn, a step
    /// each, within the bytes per second allowed.
    fn read_files(&self) {
        let started = Instant::now();
        let mut bytes_read = 0u64;
        let mut buffer = Vec::new();
        loop {
            let Some((pid, step)) = self.next_step() else {
                return;
            };
            let outcome = perform(pid, step, &mut buffer);
            let read = outcome.bytes_read();
            {
                let mut state = self.state();
                state.step_started = None;
                state.apply(pid, outcome, Instant::now());
                state.enforce_limit();
            }
            self.shared.progress.notify_all();
            // Within the rate: sleep off what was read ahead of it, with a
            // quarter of a second's worth as a burst; idle time does not
            // save up into a larger one.
            let rate = SCAN_BYTES_PER_SECOND as f64;
            let allowed = started.elapsed().as_secs_f64() * rate;
            bytes_read = bytes_read.max((allowed - rate / 4.0).max(0.0) as u64) + read;
            let ahead = bytes_read as f64 - allowed - rate / 4.0;
            if ahead > 0.0 {
                let state = self.state();
                if !state.stopping {
                    let pause = Duration::from_secs_f64(ahead / rate);
                    drop(self.shared.work.wait_timeout(state, pause));
                }
            }
        }
    }

    /// Waits for the next step; `None` when the daemon stops.
    fn next_step(&self) -> Option<(u32, steps::Step)> {
        let mut state = self.state();
        loop {
            if state.stopping {
                return None;
            }
            let now = Instant::now();
            state.forget_idle(now);
            if let Some(next) = state.next_step(now) {
                state.step_started = Some(now);
                return Some(next);
            }
            // Nothing to do now: tails and scans held back by their
            // intervals fall due by themselves, and processes idle too
            // long are let go of. With no process at all, nothing falls
            // due: the thread sleeps until asked (a wake-up costs an idle
            // daemon more than anything it would do).
            let work = &self.shared.work;
            state = if state.processes.is_empty() {
                work.wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
            } else {
                work.wait_timeout(state, TAIL_INTERVAL)
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .0
            };
        }
    }
}

impl State {
    /// Asks for the name of `address` of `pid`; says whether the reader
    /// has new work.
    fn want(&mut self, pid: u32, address: u64, now: Instant) -> bool {
        if !self.processes.contains_key(&pid) && self.processes.len() >= MAX_PROCESSES {
            self.forget_least_used();
        }
        let process = self
            .processes
            .entry(pid)
            .or_insert_with(|| ProcessNames::new(now));
        let before = process.bytes();
        process.want(address, now);
        self.bytes = self.bytes.saturating_sub(before) + process.bytes();
        self.queue_if_busy(pid, now)
    }

    fn queue_if_busy(&mut self, pid: u32, now: Instant) -> bool {
        let Some(process) = self.processes.get_mut(&pid) else {
            return false;
        };
        if process.queued || !process.has_work(now) {
            return false;
        }
        process.queued = true;
        self.queue.push_back(pid);
        true
    }

    /// The next step, the processes taking turns.
    fn next_step(&mut self, now: Instant) -> Option<(u32, steps::Step)> {
        // Work held back by its interval may be due now.
        let due: Vec<u32> = self
            .processes
            .iter()
            .filter(|(_, process)| !process.queued && process.has_work(now))
            .map(|(&pid, _)| pid)
            .collect();
        for pid in due {
            self.queue_if_busy(pid, now);
        }
        while let Some(pid) = self.queue.pop_front() {
            let Some(process) = self.processes.get_mut(&pid) else {
                continue;
            };
            process.queued = false;
            if let Some(step) = process.next_step(now) {
                return Some((pid, step));
            }
        }
        None
    }

    /// Takes in what a step of `pid` came to.
    fn apply(&mut self, pid: u32, outcome: Outcome, now: Instant) {
        let Some(process) = self.processes.get_mut(&pid) else {
            return;
        };
        match outcome {
            Outcome::Opened(opened) => {
                if let Err(refused) = &opened {
                    let reason = process::refused_reason(refused);
                    *self.stats.refused.entry(reason).or_default() += 1;
                    if !matches!(refused, crate::symbols::process_files::Refused::Missing) {
                        debug!(pid, "not reading the process's JIT names: {refused}");
                    }
                }
                if let Ok((_, size)) = &opened
                    && *size > MAX_FILE_BYTES
                {
                    self.stats.files_cut += 1;
                }
                process.opened(opened, now);
            }
            Outcome::Tail(Ok(read)) => {
                self.stats.bytes_read += read.consumed;
                self.stats.lines_too_long += read.too_long;
                process.tail_read(read, now);
            }
            Outcome::Scanned(Ok(read)) => {
                self.stats.bytes_read += read.consumed;
                self.stats.lines_too_long += read.too_long;
                process.scanned(read, now);
            }
            Outcome::Tail(Err(err)) | Outcome::Scanned(Err(err)) => {
                debug!(pid, "reading the process's JIT names failed: {err}");
                let reason = match err.kind() {
                    std::io::ErrorKind::InvalidData => "malformed",
                    _ => "unreadable",
                };
                *self.stats.refused.entry(reason).or_default() += 1;
                process.refuse();
            }
        }
        self.queue_if_busy(pid, now);
    }

    /// Lets go of the least recently used names until what is held is
    /// within three quarters of the limit; if addresses alone go past it,
    /// the least recently used processes are forgotten whole.
    fn enforce_limit(&mut self) {
        self.bytes = self.processes.values().map(ProcessNames::bytes).sum();
        if self.limit == 0 || self.bytes <= self.limit {
            return;
        }
        let target = self.limit / 4 * 3;
        let mut uses: Vec<(Instant, u32, u64)> = self
            .processes
            .iter()
            .flat_map(|(&pid, process)| {
                process
                    .name_uses()
                    .map(move |(used, start)| (used, pid, start))
            })
            .collect();
        uses.sort_unstable();
        for (_, pid, start) in uses {
            if self.bytes <= target {
                break;
            }
            if let Some(process) = self.processes.get_mut(&pid) {
                self.bytes -= process.evict(start);
                self.stats.names_evicted += 1;
            }
        }
        let mut processes: Vec<(Instant, u32)> = self
            .processes
            .iter()
            .map(|(&pid, process)| (process.used, pid))
            .collect();
        processes.sort_unstable();
        for (_, pid) in processes {
            if self.bytes <= target {
                break;
            }
            if let Some(process) = self.processes.remove(&pid) {
                self.bytes -= process.bytes();
                self.stats.names_evicted += process.names_held() as u64;
            }
        }
    }

    fn forget_idle(&mut self, now: Instant) {
        let before = self.processes.len();
        self.processes
            .retain(|_, process| now.duration_since(process.used) < IDLE_LIMIT);
        if self.processes.len() != before {
            self.bytes = self.processes.values().map(ProcessNames::bytes).sum();
        }
    }

    fn forget_least_used(&mut self) {
        let least = self
            .processes
            .iter()
            .min_by_key(|(_, process)| process.used)
            .map(|(&pid, _)| pid);
        if let Some(process) = least.and_then(|pid| self.processes.remove(&pid)) {
            self.bytes = self.bytes.saturating_sub(process.bytes());
        }
    }
}

#[cfg(test)]
mod tests;
