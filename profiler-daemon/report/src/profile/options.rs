//! The options that shape a report ([`ReportOptions`]: Julia's
//! `Profile.print` knobs, the format and its bounds) and their defaults.

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
    /// `"[kernel]"` frame.
    pub kernel: bool,
    /// Merge the different addresses of one source line.
    pub combine: bool,
    /// Show a Python interpreter's own C frames; when false, a stack that
    /// holds Python frames shows those and what is not the interpreter's
    /// (see [`Profile::without_interpreter_frames`](crate::profile::Profile::without_interpreter_frames)).
    pub interpreter: bool,
    /// Folded stacks, flame graphs and speedscope: a Python frame reads
    /// `name (file:line)`, the line it was at, as py-spy writes it; when
    /// false, the function's name alone (the other formats have file and
    /// line apart).
    pub python_lines: bool,
    /// Tree and flat: the most lines a report prints (0: no limit). When
    /// more would pass the other filters, the lines of fewest samples are
    /// left out, and the report says so.
    pub maxlines: u64,
    /// Tree and flat, grouped: the most sections (processes or threads) a
    /// report prints, those of most samples (0: no limit). The others are
    /// counted in a line of their own, and the report says so.
    pub maxsections: u64,
    /// Flat: one row per function (its lines and addresses merged), with
    /// its module, over the whole profile.
    pub functions: bool,
}

/// The lines a tree or flat report prints unless asked otherwise: more
/// than a person reads, and a few megabytes at most.
pub const DEFAULT_MAXLINES: u64 = 10_000;

/// The sections a grouped tree or flat report prints unless asked
/// otherwise: the busiest processes of a machine, as a screen of `top` shows them.
/// An hour of a busy machine holds thousands of short-lived processes;
/// printing them all costs reading every one's stacks.
pub const DEFAULT_MAXSECTIONS: u64 = 20;

impl Default for ReportOptions {
    fn default() -> Self {
        Self {
            format: Format::Tree,
            maxdepth: None,
            mincount: 0,
            noisefloor: 0.0,
            sortedby: SortedBy::FileFuncLine,
            groupby: GroupBy::Auto,
            kernel: true,
            combine: true,
            interpreter: true,
            python_lines: true,
            maxlines: DEFAULT_MAXLINES,
            maxsections: DEFAULT_MAXSECTIONS,
            functions: false,
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
    /// The profile's Python functions as Python's `pstats` reads them.
    Pstats,
    /// The Firefox Profiler's processed format: each thread's samples at
    /// their own times (a profile with a [`Profile::timeline`] only).
    ///
    /// [`Profile::timeline`]: crate::profile::Profile::timeline
    Gecko,
    /// The folded lines a flame graph draws (the web view's): the samples
    /// through a frame too narrow to draw (under inferno's `min_width`,
    /// 0.01% of the samples) are its caller's. Not offered by the gRPC API
    /// nor the CLI, whose folded report is whole.
    DrawnFolded,
}

impl Format {
    pub const ALL: [Format; 8] = [
        Format::Tree,
        Format::Flat,
        Format::Folded,
        Format::Pprof,
        Format::Flamegraph,
        Format::Speedscope,
        Format::Pstats,
        Format::Gecko,
    ];

    /// The format's name, as the CLI and the API spell it.
    pub fn name(self) -> &'static str {
        match self {
            Format::Tree => "tree",
            Format::Flat => "flat",
            Format::Folded => "folded",
            Format::Pprof => "pprof",
            Format::Flamegraph => "flamegraph",
            Format::Speedscope => "speedscope",
            Format::Pstats => "pstats",
            Format::Gecko => "gecko",
            Format::DrawnFolded => "drawn folded",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SortedBy {
    FileFuncLine,
    Count,
    Overhead,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupBy {
    /// Tree and flat: one section per process when the profile holds more
    /// than one (so every stack is seen under its process), else none.
    /// Other formats: none.
    Auto,
    None,
    Thread,
    Process,
}
