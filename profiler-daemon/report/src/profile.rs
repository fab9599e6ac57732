//! The aggregated profile: the self-contained value every report is made
//! from, and the options that shape a report.
//!
//! A [`Profile`] owns copies of everything it refers to (threads, stacks,
//! locations, names), so reports are pure functions of it and never touch
//! the store, the symbolizer or the kernel.
//!
//! The options live in `options`, what a profile says it lost (losses by
//! cause, why a stack stopped short) in `losses`, and the numbering of a
//! profile assembled outside the store in `assembly`; all re-exported here.

use std::{sync::Arc, time::SystemTime};

/// Samples of a window, aggregated per thread and stack.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The window the samples were taken in.
    pub start: SystemTime,
    pub end: SystemTime,
    /// Sampling frequency per CPU.
    pub frequency_hz: u32,
    /// Nanoseconds of CPU time one sample stands for; in an allocation
    /// profile sampled by bytes, the mean sampling interval in bytes (0
    /// when sampled by probability).
    pub period_ns: u64,
    /// What the samples measure.
    pub mode: ProfileMode,
    pub threads: Vec<ThreadInfo>,
    pub locations: Vec<Location>,
    pub stacks: Stacks,
    /// One entry per distinct (thread, stack); never two with the same pair.
    pub samples: Vec<Sample>,
    /// Samples or stacks lost system-wide during the window, by cause.
    pub lost: Vec<(LossCause, u64)>,
    /// The profile's own samples kept without their user stacks, by cause
    /// ([`OWN_LOSS_MARKERS`]' names), those with counts only.
    pub own_lost: Vec<(&'static str, u64)>,
    /// What makes this profile less than complete, in plain words.
    pub warnings: Vec<String>,
    /// Threads whose CPU samples were summed but not read per stack (a
    /// tree or flat report within `maxsections` need not read the
    /// sections it leaves out); in `threads`, never in `samples`.
    pub unread: Vec<UnreadThread>,
    /// The CPU samples of the `unread` threads summed per stack, when the
    /// report draws those threads' sections as one (a flame graph's lines
    /// within `maxsections`); empty otherwise. Each names the first unread
    /// thread; never in `samples`, and counted in `unread` already.
    pub unread_stacks: Vec<Sample>,
    /// Each sample at its own time, in time order, for the requests that
    /// keep times (a peek's ticks, a profile of chosen processes sampled
    /// the way peeks sample); empty otherwise. The same samples as
    /// `samples`, which sum them.
    pub timeline: Vec<TimedSample>,
}

/// One sample at its own time (see [`Profile::timeline`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TimedSample {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    pub state: ThreadState,
    /// Nanoseconds after [`Profile::start`].
    pub offset_ns: u64,
}

/// The CPU samples of a thread of a [`Profile`] not read per stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnreadThread {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    pub count: u64,
    /// CPU time in nanoseconds.
    pub weight: u64,
}

impl Profile {
    /// A profile of the window `start..end` with nothing in it yet.
    pub fn empty(
        start: SystemTime,
        end: SystemTime,
        frequency_hz: u32,
        period_ns: u64,
        mode: ProfileMode,
    ) -> Self {
        Self {
            start,
            end,
            frequency_hz,
            period_ns,
            mode,
            threads: Vec::new(),
            locations: Vec::new(),
            stacks: Stacks::default(),
            samples: Vec::new(),
            lost: Vec::new(),
            warnings: Vec::new(),
            unread: Vec::new(),
            unread_stacks: Vec::new(),
            own_lost: Vec::new(),
            timeline: Vec::new(),
        }
    }

    /// Length of the window in seconds.
    pub fn duration_secs(&self) -> f64 {
        self.end
            .duration_since(self.start)
            .unwrap_or_default()
            .as_secs_f64()
    }

    /// Clock ticks one CPU saw during the window: the "Total snapshots" a
    /// thread that ran all the time would have.
    pub fn ticks_per_cpu(&self) -> u64 {
        (self.duration_secs() * f64::from(self.frequency_hz)).round() as u64
    }

    /// Total samples in the profile, those of unread threads too.
    pub fn total_samples(&self) -> u64 {
        let unread = self.unread.iter().map(|thread| thread.count);
        self.samples
            .iter()
            .map(|sample| sample.count)
            .chain(unread)
            .sum()
    }

    /// Takes the kernel addresses out, for an asker the kernel would not
    /// show them to: kernel locations keep their functions but their
    /// address becomes 0 (which reports read as "hidden"), and those then
    /// alike are merged. Names never hold kernel addresses (see the
    /// symbolizer), so nothing else tells them.
    pub fn hide_kernel_addresses(&mut self) {
        let mut merged: std::collections::HashMap<Location, u32> = Default::default();
        let mut renumbered = Vec::with_capacity(self.locations.len());
        let mut locations = Vec::with_capacity(self.locations.len());
        for mut location in std::mem::take(&mut self.locations) {
            if location.kind == LocationKind::Kernel {
                location.address = 0;
            }
            let index = *merged.entry(location.clone()).or_insert_with(|| {
                locations.push(location);
                locations.len() as u32 - 1
            });
            renumbered.push(index);
        }
        self.locations = locations;
        let mut stacks = Stacks::with_capacity(self.stacks.len(), 0);
        for stack in self.stacks.iter() {
            stacks.push(stack.iter().map(|&location| renumbered[location as usize]));
        }
        self.stacks = stacks;
    }
}

/// Nanoseconds from the Unix epoch to `time`, as the APIs and formats that
/// carry a time write it: negative before the epoch, saturating at `i64`'s
/// bounds (the years 1677 and 2262) rather than wrapping.
pub fn unix_nanos(time: SystemTime) -> i64 {
    let saturating = |nanos: u128| i64::try_from(nanos).unwrap_or(i64::MAX);
    match time.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(after) => saturating(after.as_nanos()),
        Err(before) => -saturating(before.duration().as_nanos()),
    }
}

/// A thread as it was named when sampled.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ThreadInfo {
    pub pid: u32,
    pub tid: u32,
    /// The thread's command name (`/proc/<pid>/task/<tid>/comm`).
    pub thread_name: Arc<str>,
    /// The process's command name (`/proc/<pid>/comm`).
    pub process_name: Arc<str>,
    /// The thread's real user and group ids when sampled.
    pub uid: u32,
    pub gid: u32,
    /// Only root and the admin group may see its samples: when sampled,
    /// its real, effective and saved ids differed (a setuid program) or it
    /// was not dumpable, so the kernel would not let its owner trace it.
    pub protected: bool,
    /// Its cgroup (v2) path when sampled, as `/proc/<pid>/cgroup` shows it;
    /// empty when not known.
    pub cgroup: Arc<str>,
}

impl ThreadInfo {
    /// The main thread of process `pid`, root's, for tests (the daemon's
    /// too, through the `test-support` feature).
    #[cfg(any(test, feature = "test-support"))]
    pub fn of_test(pid: u32) -> Self {
        Self {
            pid,
            tid: pid,
            thread_name: Arc::from("t"),
            process_name: Arc::from("p"),
            uid: 0,
            gid: 0,
            protected: false,
            cgroup: Arc::from("/"),
        }
    }

    /// Who the thread ran as when sampled.
    pub fn owner(&self) -> Owner {
        Owner {
            uid: self.uid,
            gid: self.gid,
            protected: self.protected,
        }
    }
}

/// Who a task ran as, as far as seeing it goes: its real user and group
/// ids, and whether the kernel would refuse its owner to trace it (see
/// [`ThreadInfo::protected`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
    pub protected: bool,
}

/// The call stacks of a profile, each root first: user frames, then (for
/// samples taken in the kernel) kernel frames; a stack is indexes into
/// [`Profile::locations`], outermost caller first.
///
/// Stored end to end in one vector: a profile can hold hundreds of
/// thousands of stacks, and an allocation each would cost more to make and
/// free than the rest of a query.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stacks {
    /// Every stack's locations, one stack after another.
    locations: Vec<u32>,
    /// Where each stack ends in `locations`.
    ends: Vec<usize>,
}

impl Stacks {
    /// Locations of all stacks together.
    pub fn location_count(&self) -> usize {
        self.locations.len()
    }

    /// Room for `stacks` stacks of `locations` locations in all.
    pub fn with_capacity(stacks: usize, locations: usize) -> Self {
        Self {
            locations: Vec::with_capacity(locations),
            ends: Vec::with_capacity(stacks),
        }
    }

    /// Adds a stack, root first, and returns its index.
    pub fn push(&mut self, locations: impl IntoIterator<Item = u32>) -> u32 {
        self.locations.extend(locations);
        self.ends.push(self.locations.len());
        self.ends.len() as u32 - 1
    }

    /// The stack at `index`, root first.
    pub fn get(&self, index: u32) -> Option<&[u32]> {
        let index = index as usize;
        let end = *self.ends.get(index)?;
        let start = index.checked_sub(1).map_or(0, |before| self.ends[before]);
        Some(&self.locations[start..end])
    }

    /// Number of stacks.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// The stacks in index order.
    pub fn iter(&self) -> impl Iterator<Item = &[u32]> {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts
            .zip(&self.ends)
            .map(|(start, &end)| &self.locations[start..end])
    }
}

/// Samples of one thread with one stack.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// Index into [`Profile::threads`].
    pub thread: u32,
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    /// What the reports count. Samples; for time off CPU, the sampling
    /// periods its nanoseconds make, so that every report counts in one
    /// unit; in an allocation profile, bytes (estimated).
    pub count: u64,
    /// What the samples stand for: time in nanoseconds (CPU time, or time
    /// waited off CPU); in an allocation profile, objects (estimated).
    pub weight: u64,
    /// What the thread was doing.
    pub state: ThreadState,
}

/// What a thread was doing in a sample: running, or waiting off CPU and
/// how; or, in an allocation profile, what its bytes are: allocated in
/// the window, or still held at its end.
#[repr(u8)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ThreadState {
    /// On a CPU.
    #[default]
    Cpu,
    /// Off CPU in an interruptible wait (`S`).
    Sleeping,
    /// Off CPU in an uninterruptible wait (`D`).
    Blocked,
    /// Runnable, waiting for a CPU.
    RunQueue,
    /// Allocated (allocation profiles).
    Allocated,
    /// Allocated and still held at the end of the window.
    Held,
}

impl ThreadState {
    /// Every state, in the order of their numbers.
    pub const ALL: [ThreadState; 6] = [
        ThreadState::Cpu,
        ThreadState::Sleeping,
        ThreadState::Blocked,
        ThreadState::RunQueue,
        ThreadState::Allocated,
        ThreadState::Held,
    ];

    /// The states of time.
    pub const TIMES: [ThreadState; 4] = [
        ThreadState::Cpu,
        ThreadState::Sleeping,
        ThreadState::Blocked,
        ThreadState::RunQueue,
    ];

    /// The state a sample of `kind` stands for (peeks are CPU samples).
    pub fn of(kind: profiler_common::SampleKind) -> Self {
        use profiler_common::SampleKind;
        match kind {
            SampleKind::CpuClock | SampleKind::Peek | SampleKind::PeekInstant => Self::Cpu,
            SampleKind::OffCpuSleeping => Self::Sleeping,
            SampleKind::OffCpuBlocked => Self::Blocked,
            SampleKind::RunQueue => Self::RunQueue,
            SampleKind::Allocation => Self::Allocated,
        }
    }

    /// Whether it is a state of time (not of memory).
    pub fn is_time(self) -> bool {
        !matches!(self, Self::Allocated | Self::Held)
    }

    /// The pseudo-frame a wait in this state shows under its stack.
    pub fn leaf_marker(self) -> Option<&'static str> {
        match self {
            Self::Cpu | Self::Allocated | Self::Held => None,
            Self::Sleeping => Some("[off-cpu: S]"),
            Self::Blocked => Some("[off-cpu: D]"),
            Self::RunQueue => Some("[runqueue]"),
        }
    }

    /// Short name, as in labels and tables.
    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::Sleeping => "S",
            Self::Blocked => "D",
            Self::RunQueue => "runqueue",
            Self::Allocated => "allocated",
            Self::Held => "held",
        }
    }
}

/// What a profile measures: time on CPU (sampled), time off CPU
/// (recorded at every switch of the selected threads), or both: wall-clock
/// time; or memory: the bytes allocated, or those still held.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProfileMode {
    #[default]
    Cpu,
    OffCpu,
    Wall,
    /// An allocation profile, reported by bytes allocated.
    Allocated,
    /// An allocation profile, reported by bytes still held.
    Held,
}

impl ProfileMode {
    /// Whether samples in `state` belong in a profile of this mode.
    pub fn includes(self, state: ThreadState) -> bool {
        match self {
            Self::Cpu => state == ThreadState::Cpu,
            Self::OffCpu => !matches!(
                state,
                ThreadState::Cpu | ThreadState::Allocated | ThreadState::Held
            ),
            Self::Wall => state.is_time(),
            Self::Allocated => state == ThreadState::Allocated,
            Self::Held => state == ThreadState::Held,
        }
    }

    /// Whether the kernel must record switches for it.
    pub fn records_off_cpu(self) -> bool {
        matches!(self, Self::OffCpu | Self::Wall)
    }

    /// Whether it measures memory (an allocation profile): its samples
    /// count bytes and weigh objects.
    pub fn is_memory(self) -> bool {
        matches!(self, Self::Allocated | Self::Held)
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Cpu => "cpu",
            Self::OffCpu => "offcpu",
            Self::Wall => "wall",
            Self::Allocated => "alloc_space",
            Self::Held => "inuse_space",
        }
    }
}

/// Where a location's code lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocationKind {
    /// Code of a process's binary or library.
    User,
    /// Kernel code.
    Kernel,
    /// Not code: a marker such as `"[lost]"`, `"[truncated]"` or `"[kernel]"`.
    Marker,
    /// A Python function at a line, read from its interpreter: one frame
    /// (its qualified name, file and the line it runs).
    Python,
}

/// One instruction address, symbolized.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    pub kind: LocationKind,
    /// The binary's path as the process mapped it, `"[kernel]"` for kernel
    /// code, the marker's own name, or a Python function's source file
    /// (`"[python]"` when its code object could not be read).
    pub module: Arc<str>,
    /// For user code the offset into the binary's file; for kernel code the
    /// address (0 when hidden from the asker); 0 for markers; for a Python
    /// function the line its definition starts at (0 when unknown).
    pub address: u64,
    /// The functions at this address, outermost first: more than one when
    /// functions were inlined into each other. Never empty: an address
    /// without symbols gets one frame named `module+0xoffset`. Shared:
    /// every report of a window copies the locations its stacks use.
    pub frames: Arc<[Frame]>,
}

/// A function at a source line.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Frame {
    /// Demangled function name.
    pub function: Arc<str>,
    /// Source file, when debug information gave one.
    pub file: Option<Arc<str>>,
    /// Source line, 0 when unknown.
    pub line: u32,
    /// True when this function was inlined into the frame before it.
    pub inlined: bool,
}

mod assembly;
mod interpreter;
mod losses;
mod options;

pub use assembly::{KeyedLocation, ProfileAssembly};
pub use interpreter::is_python_interpreter;
pub use losses::{
    LOST_MARKER, LossCause, OWN_LOSS_MARKERS, RING_FULL_MARKER, UnwindStop, own_loss_of,
};
pub use options::{
    DEFAULT_MAXLINES, DEFAULT_MAXSECTIONS, Format, GroupBy, ReportOptions, SortedBy,
};

#[cfg(test)]
mod tests;
