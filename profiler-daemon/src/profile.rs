//! The aggregated profile: the self-contained value every report is made
//! from, and the options that shape a report.
//!
//! A [`Profile`] owns copies of everything it refers to (threads, stacks,
//! locations, names), so reports are pure functions of it and never touch
//! the store, the symbolizer or the kernel.

use std::{sync::Arc, time::SystemTime};

/// Samples of a window, aggregated per thread and stack.
#[derive(Clone, Debug)]
pub struct Profile {
    /// The window the samples were taken in.
    pub start: SystemTime,
    pub end: SystemTime,
    /// Sampling frequency per CPU.
    pub frequency_hz: u32,
    /// Nanoseconds of CPU time one sample stands for.
    pub period_ns: u64,
    pub threads: Vec<ThreadInfo>,
    pub locations: Vec<Location>,
    pub stacks: Stacks,
    /// One entry per distinct (thread, stack); never two with the same pair.
    pub samples: Vec<Sample>,
    /// Samples or stacks lost system-wide during the window, by cause.
    pub lost: Vec<(LossCause, u64)>,
    /// What makes this profile less than complete, in plain words.
    pub warnings: Vec<String>,
}

impl Profile {
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

    /// Total samples in the profile.
    pub fn total_samples(&self) -> u64 {
        self.samples.iter().map(|sample| sample.count).sum()
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
    /// The thread's real user id when sampled.
    pub uid: u32,
    /// Its cgroup (v2) path when sampled, as `/proc/<pid>/cgroup` shows it;
    /// empty when not known.
    pub cgroup: Arc<str>,
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
    pub count: u64,
    /// CPU time the samples stand for, in nanoseconds.
    pub weight_ns: u64,
}

/// Where a location's code lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LocationKind {
    /// Code of a process's binary or library.
    User,
    /// Kernel code.
    Kernel,
    /// Not code: a marker such as "[lost]", "[truncated]" or "[kernel]".
    Marker,
}

/// One instruction address, symbolized.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Location {
    pub kind: LocationKind,
    /// The binary's path as the process mapped it, "[kernel]" for kernel
    /// code, or the marker's own name.
    pub module: Arc<str>,
    /// For user code the offset into the binary's file; for kernel code the
    /// address; 0 for markers.
    pub address: u64,
    /// The functions at this address, outermost first: more than one when
    /// functions were inlined into each other. Never empty: an address
    /// without symbols gets one frame named `module+0xoffset`.
    pub frames: Vec<Frame>,
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

/// Why samples or stacks were lost. Stable names are part of the API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LossCause {
    CountsMapFull,
    StackMapFull,
    StackCollision,
    StackWalkError,
    NoScratch,
    ProcessNotification,
    /// Dropped by the daemon to stay under its memory ceiling.
    MemoryCeiling,
}

impl LossCause {
    pub const ALL: [LossCause; 7] = [
        LossCause::CountsMapFull,
        LossCause::StackMapFull,
        LossCause::StackCollision,
        LossCause::StackWalkError,
        LossCause::NoScratch,
        LossCause::ProcessNotification,
        LossCause::MemoryCeiling,
    ];

    /// The identifier used in the API and in reports.
    pub fn name(self) -> &'static str {
        match self {
            LossCause::CountsMapFull => "counts_map_full",
            LossCause::StackMapFull => "stack_map_full",
            LossCause::StackCollision => "stack_collision",
            LossCause::StackWalkError => "stack_walk_error",
            LossCause::NoScratch => "no_scratch_buffer",
            LossCause::ProcessNotification => "process_notification_dropped",
            LossCause::MemoryCeiling => "memory_ceiling",
        }
    }
}

/// The layout of a report: the knobs of Julia's `Profile.print`.
#[derive(Clone, Debug, PartialEq)]
pub struct ReportOptions {
    pub format: Format,
    /// Deepest call depth shown (tree) or kept (folded); `None`: no limit.
    pub maxdepth: Option<u32>,
    /// Hide lines with fewer samples than this.
    pub mincount: u64,
    /// Tree only: hide a frame with `n` samples when `n <= noisefloor * √N`,
    /// `N` being its caller's samples.
    pub noisefloor: f64,
    pub sortedby: SortedBy,
    pub groupby: GroupBy,
    /// Show kernel frames; when false each run of kernel frames becomes one
    /// "[kernel]" frame.
    pub kernel: bool,
    /// Merge the different addresses of one source line.
    pub combine: bool,
}

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            format: Format::Tree,
            maxdepth: None,
            mincount: 0,
            noisefloor: 0.0,
            sortedby: SortedBy::FileFuncLine,
            groupby: GroupBy::None,
            kernel: true,
            combine: true,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Tree,
    Flat,
    Folded,
    Pprof,
    Flamegraph,
    Speedscope,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortedBy {
    FileFuncLine,
    Count,
    Overhead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    None,
    Thread,
    Process,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stacks_keep_their_locations_and_order() {
        let mut stacks = Stacks::with_capacity(3, 4);
        assert!(stacks.is_empty());
        assert_eq!(stacks.push([3, 1, 4]), 0);
        assert_eq!(stacks.push([]), 1);
        assert_eq!(stacks.push(vec![1]), 2);
        assert_eq!(stacks.len(), 3);
        assert_eq!(stacks.get(0), Some(&[3, 1, 4][..]));
        assert_eq!(stacks.get(1), Some(&[][..]));
        assert_eq!(stacks.get(2), Some(&[1][..]));
        assert_eq!(stacks.get(3), None);
        let all: Vec<&[u32]> = stacks.iter().collect();
        assert_eq!(all, [&[3, 1, 4][..], &[], &[1]]);
    }
}
