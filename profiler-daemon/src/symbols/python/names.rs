//! Names of the Python frames samples carry: each code object (by process
//! and address) is read from its process's memory on a thread of its own
//! (a reader), never on the drain thread or the symbolizer's: a hostile
//! process can make a read of its memory wait (memory behind a
//! `userfaultfd`). The symbolizer asks for the code objects of a batch and
//! waits for them at most [`NAMES_WAIT`]; those not read by then are shown
//! by address, and named in later batches once read. A reader stuck in a
//! read for [`STUCK_AFTER`] is left to it and another takes over, up to
//! [`MAX_READERS`]; past them, no wait, and frames are shown by address.
//!
//! Owns the code objects read (at most [`MAX_NAMED`], and at most the
//! bytes its share of the memory budget allows; all let go of, and
//! counted, past either) and the reader; it must not read anything of a
//! process but its code objects.

use std::{
    collections::{HashMap, VecDeque},
    sync::{Arc, Condvar, Mutex, MutexGuard},
    time::{Duration, Instant},
};

use super::{
    PythonProcess,
    code_objects::{CodeLayout, CodeObject, ProcMem, read_code},
};
use crate::symbols::processes::{NormalizedBatch, UserAddress};

/// The longest the symbolizer waits for names, per batch.
pub const NAMES_WAIT: Duration = Duration::from_millis(100);

/// Code objects held at most (a few hundred bytes each with their names
/// and tables of lines).
pub const MAX_NAMED: usize = 1 << 15;

/// Readers at most (all but one stuck in a read).
pub const MAX_READERS: usize = 4;

/// A read this long means the reader is stuck in a process's memory: the
/// symbolizer stops waiting for it, and starts another.
const STUCK_AFTER: Duration = Duration::from_secs(1);

/// A code object of a process: its pid, address and check (a code object
/// freed and another made at its address has another check).
type CodeKey = (u32, u64, u64);

/// What became of a code object.
#[derive(Clone, Debug)]
enum Named {
    Asked,
    Read(Arc<CodeObject>),
    /// Not a code object (freed since, or another object there now, a
    /// code object of another check among them), or its memory could not
    /// be read.
    Failed,
}

/// Counts for the status report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonNameStats {
    /// Code objects held, and the most held.
    pub held: u64,
    pub limit: u64,
    /// Bytes they hold, roughly, and the most (0: no bound but their
    /// number).
    pub bytes: u64,
    pub bytes_limit: u64,
    /// Code objects read, and reads that failed (unreadable, not a code
    /// object, or another code object than the one sampled there now).
    pub read: u64,
    pub failed: u64,
    /// Held code objects let go of at the limit.
    pub evicted: u64,
    /// Frames shown by address: not read in time.
    pub unnamed: u64,
    /// Readers stuck in a read for over a second (at most
    /// [`MAX_READERS`] in all).
    pub readers_stuck: u64,
}

struct State {
    named: HashMap<CodeKey, Named>,
    wanted: VecDeque<(CodeKey, Arc<PythonProcess>)>,
    /// Readers started, and when the read under way of each one reading
    /// began.
    readers: usize,
    reading: HashMap<usize, (Instant, u32)>,
    stopping: bool,
    stats: PythonNameStats,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

/// The names of Python frames, read on a thread of their own.
pub struct PythonNames {
    shared: Arc<Shared>,
}

fn lock(shared: &Shared) -> MutexGuard<'_, State> {
    crate::lock(&shared.state)
}

impl PythonNames {
    /// Starts the reader, holding at most `bytes_limit` bytes of code
    /// objects (0: only [`MAX_NAMED`] of them).
    pub fn start(bytes_limit: u64) -> std::io::Result<Self> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                named: HashMap::new(),
                wanted: VecDeque::new(),
                readers: 0,
                reading: HashMap::new(),
                stopping: false,
                stats: PythonNameStats {
                    limit: MAX_NAMED as u64,
                    bytes_limit,
                    ..PythonNameStats::default()
                },
            }),
            changed: Condvar::new(),
        });
        let names = Self { shared };
        names.start_reader()?;
        Ok(names)
    }

    /// Starts one more reader.
    fn start_reader(&self) -> std::io::Result<()> {
        let id = {
            let mut state = lock(&self.shared);
            state.readers += 1;
            state.readers
        };
        let started = std::thread::Builder::new()
            .name(format!("python-names-{id}"))
            .spawn({
                let shared = self.shared.clone();
                move || read_wanted(&shared, id)
            });
        if started.is_err() {
            lock(&self.shared).readers -= 1;
        }
        started.map(drop)
    }

    pub fn stats(&self) -> PythonNameStats {
        let state = lock(&self.shared);
        PythonNameStats {
            held: state.named.len() as u64,
            readers_stuck: stuck(&state) as u64,
            ..state.stats
        }
    }

    /// Names the Python frames of `batch`: asks for the code objects not
    /// read yet, waits for them at most `wait`, and names those read.
    pub fn name_batch(&self, batch: &mut NormalizedBatch, wait: Duration) {
        let frames = || {
            batch
                .samples
                .iter()
                .flat_map(|sample| &sample.user)
                .filter_map(|address| match address {
                    UserAddress::Python(frame) if frame.name.is_none() => Some(frame),
                    _ => None,
                })
        };
        let mut asked = Vec::new();
        {
            let mut state = lock(&self.shared);
            let over_bytes =
                state.stats.bytes_limit != 0 && state.stats.bytes >= state.stats.bytes_limit;
            if state.named.len() >= MAX_NAMED || over_bytes {
                state.stats.evicted += state.named.len() as u64;
                state.named.clear();
                state.stats.bytes = 0;
            }
            for frame in frames() {
                let key = (frame.pid, frame.code, frame.check);
                if let std::collections::hash_map::Entry::Vacant(entry) = state.named.entry(key) {
                    entry.insert(Named::Asked);
                    state.wanted.push_back((key, frame.process.clone()));
                    asked.push(key);
                }
            }
        }
        if !asked.is_empty() {
            self.shared.changed.notify_all();
            let (readers, stuck) = {
                let state = lock(&self.shared);
                (state.readers, stuck(&state))
            };
            if stuck == readers && readers < MAX_READERS {
                tracing::warn!(
                    stuck,
                    "a read of a Python process's memory has not returned for over a second; \
                     another reader takes over"
                );
                if let Err(err) = self.start_reader() {
                    tracing::warn!("cannot start another reader of Python code objects: {err}");
                }
            }
            self.wait_for(&asked, wait);
        }
        let mut state = lock(&self.shared);
        for sample in &mut batch.samples {
            for address in &mut sample.user {
                if let UserAddress::Python(frame) = address
                    && frame.name.is_none()
                {
                    match state.named.get(&(frame.pid, frame.code, frame.check)) {
                        Some(Named::Read(code)) => frame.name = Some(code.clone()),
                        _ => state.stats.unnamed += 1,
                    }
                }
            }
        }
    }

    /// Waits until every one of `asked` is read (or failed), at most
    /// `wait`, and not while every reader is stuck.
    fn wait_for(&self, asked: &[CodeKey], wait: Duration) {
        let deadline = Instant::now() + wait;
        let mut state = lock(&self.shared);
        loop {
            let pending = asked
                .iter()
                .any(|key| matches!(state.named.get(key), Some(Named::Asked)));
            let all_stuck = stuck(&state) == state.readers;
            let now = Instant::now();
            if !pending || all_stuck || now >= deadline {
                return;
            }
            state = self
                .shared
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

impl Drop for PythonNames {
    fn drop(&mut self) {
        // The readers end at their next look (one stuck in a process's
        // memory is left behind, not waited for).
        lock(&self.shared).stopping = true;
        self.shared.changed.notify_all();
    }
}

/// How many readers are stuck in a read.
fn stuck(state: &State) -> usize {
    state
        .reading
        .values()
        .filter(|(since, _)| since.elapsed() > STUCK_AFTER)
        .count()
}

/// Whether a reader is stuck in a read of `pid`'s memory.
fn stuck_in(state: &State, pid: u32) -> bool {
    state
        .reading
        .values()
        .any(|(since, stuck)| *stuck == pid && since.elapsed() > STUCK_AFTER)
}

/// A reader (`id`): reads the code objects asked for, one at a time.
fn read_wanted(shared: &Shared, id: usize) {
    // The memory of the last process read, kept open while its code
    // objects are read one after another.
    let mut open: Option<(u32, ProcMem)> = None;
    loop {
        let ((pid, code, check), process) = {
            let mut state = lock(shared);
            loop {
                if state.stopping {
                    return;
                }
                if let Some(wanted) = state.wanted.pop_front() {
                    let ((pid, _, _), _) = wanted;
                    // Not a process another reader is stuck in.
                    if stuck_in(&state, pid) {
                        state.stats.failed += 1;
                        if let Some(entry) = state.named.get_mut(&wanted.0) {
                            *entry = Named::Failed;
                        }
                        continue;
                    }
                    state.reading.insert(id, (Instant::now(), pid));
                    break wanted;
                }
                state = shared
                    .changed
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
            }
        };
        if open.as_ref().is_none_or(|(open_pid, _)| *open_pid != pid) {
            open = ProcMem::open(pid).ok().map(|memory| (pid, memory));
        }
        let read = open.as_ref().and_then(|(_, memory)| {
            let layout = CodeLayout::of(process.interpreter.version)?;
            read_code(memory, code, &layout, &process.types).ok()
        });
        let mut state = lock(shared);
        state.reading.remove(&id);
        // Another code object at its address since (its name's, file's or
        // qualified name's string another): not the one sampled.
        let read = read.filter(|read| super::frames::carried_check(read.check) == check);
        let named = match read {
            Some(read) => {
                state.stats.read += 1;
                state.stats.bytes += read.bytes();
                Named::Read(Arc::new(read))
            }
            None => {
                state.stats.failed += 1;
                Named::Failed
            }
        };
        // Asked for still (not let go of at the limit meanwhile).
        match state.named.get_mut(&(pid, code, check)) {
            Some(entry) => *entry = named,
            None => {
                if let Named::Read(read) = named {
                    state.stats.bytes = state.stats.bytes.saturating_sub(read.bytes());
                }
            }
        }
        drop(state);
        shared.changed.notify_all();
    }
}
