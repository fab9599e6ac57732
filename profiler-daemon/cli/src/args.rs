//! The command line: every command, flag and value profilerctl takes, and
//! the parsers that refuse a bad value with a message in the CLI's terms.

use std::{
    ffi::OsString,
    path::PathBuf,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use clap::{Args, Parser, Subcommand, ValueEnum};
use profilerd_client::{DEFAULT_SOCKET, v1};

mod values;

use values::{
    count, count64, id, parse_bytes, parse_duration, parse_noisefloor, parse_rate, parse_time,
};

/// Control profilerd, the system-wide sampling profiler.
#[derive(Debug, Parser)]
#[command(name = "profilerctl", version, about, long_about = None)]
pub struct Cli {
    /// The daemon's socket
    #[arg(
        long,
        global = true,
        value_name = "PATH",
        env = "PROFILERD_SOCKET",
        default_value = DEFAULT_SOCKET
    )]
    pub socket: PathBuf,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what the daemon samples, what it lost and what it holds
    Status {
        /// Also show the counters that are zero
        #[arg(long, short)]
        verbose: bool,
        /// Print the daemon's status reply as JSON (its API's field names;
        /// every counter, zero or not), for scripts
        #[arg(long, conflicts_with = "verbose")]
        json: bool,
    },
    /// Print the daemon's self-metrics in the Prometheus text format
    Metrics,
    /// Profile for a duration, or until Ctrl-C, and print or write the
    /// report (Ctrl-C stops early and reports what was sampled)
    Profile {
        #[command(flatten)]
        selector: SelectorArgs,
        /// How long to profile, e.g. 10s, 500ms, 2m, or seconds (5); without
        /// it, until Ctrl-C (at most the daemon's max_profile_duration)
        #[arg(long, short, value_parser = parse_duration)]
        duration: Option<Duration>,
        /// Sample the processes chosen by -p at this rate (Hz) of each
        /// thread's CPU time, for this profile only (like perf record -F);
        /// the daemon samples the rest at its own rate
        #[arg(long = "frequency", short = 'F', value_name = "HZ", value_parser = clap::value_parser!(u32).range(1..=4999), requires = "pids")]
        frequency: Option<u32>,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Run a command and report its profile, its children included, when it
    /// exits (like perf record); exits with the command's status
    Record {
        #[command(flatten)]
        report: ReportArgs,
        /// The command and its arguments, after `--`
        #[arg(required = true, trailing_var_arg = true, value_name = "COMMAND")]
        command: Vec<OsString>,
    },
    /// Report a past window the daemon still holds
    Query {
        #[command(flatten)]
        selector: SelectorArgs,
        #[command(flatten)]
        window: WindowArgs,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Who called a function, with counts, over a past window (like Julia's
    /// Profile.callers)
    Callers {
        /// The function, e.g. malloc or app::handle (or its last part; a C
        /// library alias such as __GI___libc_malloc is malloc)
        function: String,
        #[command(flatten)]
        selector: SelectorArgs,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// A function's source with the samples of each line beside it, over a
    /// past window (like pprof's list and perf annotate); the source is read
    /// from the file its debug information names
    Annotate {
        /// The function, e.g. hot or app::handle (or its last part; a C
        /// library alias such as __GI___libc_malloc is malloc)
        function: String,
        #[command(flatten)]
        selector: SelectorArgs,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// Compare two past windows function by function: each function's
    /// share of its window's samples, base → target
    Diff(DiffArgs),
    /// Draw a flame graph (SVG) of the next --duration or of a past window
    /// (--since), like `profile --format flamegraph`
    Flamegraph(FlamegraphArgs),
    /// Show the functions with the most samples, live, every interval (like
    /// perf top); until interrupted, or for --count updates
    Top(TopArgs),
    /// Start an open-ended profiling session and print its id
    Start {
        #[command(flatten)]
        selector: SelectorArgs,
    },
    /// Stop a session and print or write its report
    Stop {
        /// The session id printed by `start` (or listed by `sessions`)
        id: String,
        /// Stop another user's session (root and the admin group)
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// List the open profiling sessions (all of them for root and the admin
    /// group, your own otherwise)
    Sessions,
    /// Profile what one process allocates and still holds (uprobes on its
    /// allocator, for the duration only) and print or write the report;
    /// Ctrl-C stops early and reports what was sampled
    Allocs(AllocsArgs),
    /// Peek at a process now, thread by thread, as a peek signal would, and
    /// print the report; no signal is sent
    Peek {
        /// The process (or one of its threads)
        #[arg(value_parser = id("a process id"), allow_negative_numbers = true)]
        pid: u32,
    },
    /// Show or choose which processes the kernel samples (root only to
    /// choose): named pids and cgroups, or --everything (the default)
    Targets {
        /// Sample this process (repeatable)
        #[arg(long = "pid", value_name = "PID", value_parser = id("a process id"), allow_negative_numbers = true)]
        pids: Vec<u32>,
        /// Sample the processes in this cgroup and below, as /proc/PID/cgroup shows it (repeatable)
        #[arg(long = "cgroup", value_name = "PATH")]
        cgroups: Vec<String>,
        /// Sample every process again
        #[arg(long, conflicts_with_all = ["pids", "cgroups"])]
        everything: bool,
    },
    /// List the kept peek reports, print one, or follow new ones
    Peeks {
        /// Print this report (an id from the list)
        #[arg(long, conflicts_with = "follow")]
        id: Option<String>,
        /// Print each new report as it is made, until interrupted
        #[arg(long, short)]
        follow: bool,
    },
    /// Print a completion script for a shell, e.g. `profilerctl completions
    /// bash > /etc/bash_completion.d/profilerctl`
    Completions {
        /// The shell the script is for
        shell: clap_complete::Shell,
    },
    /// Write profilerctl's man pages (profilerctl.1 and one per command)
    /// into a directory
    #[command(hide = true)]
    ManPages {
        /// The directory the pages are written into
        dir: PathBuf,
    },
}

/// The arguments of `diff`.
#[derive(Args, Debug)]
pub struct DiffArgs {
    /// The base window starts this long ago, e.g. 10m
    #[arg(long, value_parser = parse_duration)]
    pub base_since: Duration,
    /// The base window ends this long ago [default: when the target starts]
    #[arg(long, value_parser = parse_duration)]
    pub base_until: Option<Duration>,
    /// The target window starts this long ago, e.g. 5m
    #[arg(long, value_parser = parse_duration)]
    pub since: Duration,
    /// The target window ends this long ago [default: now]
    #[arg(long, value_parser = parse_duration)]
    pub until: Option<Duration>,
    /// Most rows shown
    #[arg(long, default_value_t = 50, value_parser = count("a number of rows"), allow_negative_numbers = true)]
    pub limit: u32,
    /// text: the table; pprof: the target minus the base as one profile
    /// (`go tool pprof -top FILE`); flamegraph: a differential flame
    /// graph (red: grew, blue: shrank)
    #[arg(long, short, value_enum, default_value_t = DiffFormatArg::Text)]
    pub format: DiffFormatArg,
    /// Scale the base to the target's samples first, so windows of
    /// different lengths or load compare
    #[arg(long)]
    pub normalize: bool,
    /// Only the rows of this function (repeatable): its name, its last
    /// qualified parts, or another of the C library's names of it (malloc
    /// finds __GI___libc_malloc)
    #[arg(long = "function", value_name = "FUNCTION")]
    pub functions: Vec<String>,
    /// Write the pprof or flame graph to this file instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub selector: SelectorArgs,
}

/// The arguments of `flamegraph`.
#[derive(Args, Debug)]
pub struct FlamegraphArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// Profile for this long from now, e.g. 10s
    #[arg(long, short, value_parser = parse_duration, conflicts_with_all = ["since", "until"])]
    pub duration: Option<Duration>,
    /// Or draw the past window that starts this long ago, e.g. 15m
    #[arg(long, value_parser = parse_duration)]
    pub since: Option<Duration>,
    /// ... and ends this long ago [default: now]
    #[arg(long, value_parser = parse_duration, requires = "since")]
    pub until: Option<Duration>,
    /// Show each run of kernel frames as one "[kernel]" frame
    #[arg(long)]
    pub no_kernel: bool,
    /// Where to write the SVG
    #[arg(long, short, value_name = "FILE", default_value = "flamegraph.svg")]
    pub output: PathBuf,
}

/// The arguments of `top`.
#[derive(Args, Debug)]
pub struct TopArgs {
    #[command(flatten)]
    pub selector: SelectorArgs,
    /// How often to update, e.g. 1s, 500ms (100ms-60s)
    #[arg(long, short, value_parser = parse_duration, default_value = "1s")]
    pub interval: Duration,
    /// Functions shown (1-1000)
    #[arg(long, short = 'n', default_value_t = 20, value_parser = count("a number of functions"), allow_negative_numbers = true)]
    pub limit: u32,
    /// Leave kernel frames out (time in the kernel counts for its caller)
    #[arg(long)]
    pub user_only: bool,
    /// Show each interval on its own, rather than accumulated with the
    /// earlier ones fading (by 7/8 an update, as perf top does)
    #[arg(long)]
    pub no_decay: bool,
    /// Stop after this many updates
    #[arg(long, value_parser = count64("a number of updates"), allow_negative_numbers = true)]
    pub count: Option<u64>,
}

#[derive(Debug, Args)]
pub struct SelectorArgs {
    /// Only this process (repeatable; 0 selects the idle tasks)
    #[arg(long = "pid", short = 'p', value_name = "PID", value_parser = id("a process id"), allow_negative_numbers = true)]
    pub pids: Vec<u32>,
    /// Only this thread (repeatable)
    #[arg(long = "tid", value_name = "TID", value_parser = id("a thread id"), allow_negative_numbers = true)]
    pub tids: Vec<u32>,
    /// Only processes or threads with this exact command name (repeatable)
    #[arg(long = "comm", value_name = "NAME")]
    pub comms: Vec<String>,
    /// Only processes or threads whose name matches this regular expression
    #[arg(long = "comm-regex", value_name = "REGEX")]
    pub comm_regex: Option<String>,
    /// Only threads of this user id (repeatable)
    #[arg(long = "uid", value_name = "UID", value_parser = id("a user id"), allow_negative_numbers = true)]
    pub uids: Vec<u32>,
    /// Only processes in this cgroup or below, as /proc/PID/cgroup shows it (repeatable)
    #[arg(long = "cgroup", value_name = "PATH")]
    pub cgroups: Vec<String>,
    /// What to measure: cpu (time on CPU), offcpu (time waiting: S, D, run
    /// queue) or wall (both); offcpu and wall record the selected processes'
    /// context switches while the window is open
    #[arg(long, value_enum, default_value_t = ModeArg::Cpu)]
    pub mode: ModeArg,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Cpu,
    Offcpu,
    Wall,
}

impl SelectorArgs {
    /// The mode, as the API spells it.
    pub fn mode(&self) -> i32 {
        (match self.mode {
            ModeArg::Cpu => v1::Mode::Cpu,
            ModeArg::Offcpu => v1::Mode::Offcpu,
            ModeArg::Wall => v1::Mode::Wall,
        }) as i32
    }

    pub fn to_proto(&self) -> v1::Selector {
        v1::Selector {
            pids: self.pids.clone(),
            tids: self.tids.clone(),
            comms: self.comms.clone(),
            comm_regex: self.comm_regex.clone().unwrap_or_default(),
            uids: self.uids.clone(),
            cgroups: self.cgroups.clone(),
        }
    }
}

#[derive(Debug, Args)]
pub struct WindowArgs {
    /// Start this long ago, e.g. 15m (or use --start)
    #[arg(long, value_parser = parse_duration, conflicts_with = "start", required_unless_present = "start")]
    pub since: Option<Duration>,
    /// End this long ago, e.g. 5m [default: now]
    #[arg(long, value_parser = parse_duration, conflicts_with = "end")]
    pub until: Option<Duration>,
    /// Start at this time, e.g. 2026-11-21T17:30:00Z
    #[arg(long, value_parser = parse_time)]
    pub start: Option<SystemTime>,
    /// End at this time [default: now]
    #[arg(long, value_parser = parse_time)]
    pub end: Option<SystemTime>,
}

impl WindowArgs {
    /// The window in nanoseconds since the epoch; an end of 0 means now.
    pub fn to_unix_nanos(&self) -> (i64, i64) {
        let now = SystemTime::now();
        let start = self
            .start
            .or_else(|| self.since.map(|since| ago(now, since)))
            .unwrap_or(now);
        let end = self.end.or_else(|| self.until.map(|until| ago(now, until)));
        (unix_nanos(start), end.map_or(0, unix_nanos))
    }
}

/// `duration` before `now`, or the epoch when that is before it.
pub fn ago(now: SystemTime, duration: Duration) -> SystemTime {
    now.checked_sub(duration).unwrap_or(UNIX_EPOCH)
}

/// A time as the API takes it: nanoseconds since the Unix epoch, the epoch
/// for any earlier time (the API takes none before it), saturating in 2262.
///
/// The daemon's own is `profilerd_report::profile::unix_nanos`, which this
/// crate does not compile (it depends on `profilerd-client` only, so as not
/// to build the reports' crates), hence this copy.
pub fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).map_or(0, |since| {
        i64::try_from(since.as_nanos()).unwrap_or(i64::MAX)
    })
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Report format
    #[arg(long, short, value_enum, default_value_t = FormatArg::Tree)]
    pub format: FormatArg,
    /// Write the report to this file instead of standard output
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Deepest call depth shown (tree) or kept (folded); 0 = no limit
    #[arg(long, default_value_t = 0, value_parser = count("a depth"), allow_negative_numbers = true)]
    pub maxdepth: u32,
    /// Hide lines with fewer samples
    #[arg(long, default_value_t = 0, value_parser = count64("a number of samples"), allow_negative_numbers = true)]
    pub mincount: u64,
    /// Tree and flat: print at most this many lines, leaving out those of
    /// fewest samples (the report says so); 0 = every line [default: 10000]
    #[arg(long, value_parser = count64("a number of lines"), allow_negative_numbers = true)]
    pub maxlines: Option<u64>,
    /// Tree and flat, grouped: print at most this many sections (processes
    /// or threads), those of most samples; the others are counted in one
    /// line; 0 = every section [default: 20]
    #[arg(long, value_parser = count64("a number of sections"), allow_negative_numbers = true)]
    pub maxsections: Option<u64>,
    /// Tree: hide frames with n <= noisefloor * sqrt(N) samples, N = caller's (try 2.0)
    #[arg(long, default_value_t = 0.0, value_parser = parse_noisefloor, allow_negative_numbers = true)]
    pub noisefloor: f64,
    /// Order of flat reports and of tree children
    #[arg(long, value_enum, default_value_t = SortedByArg::Filefuncline)]
    pub sortedby: SortedByArg,
    /// One section per thread or per process [default: per process when the
    /// report holds more than one, else none]; pprof: one sample per stack
    /// of a thread, of a process, or of the whole machine (none: the
    /// smallest) [default: per thread for one process, else per command]
    #[arg(long, value_enum)]
    pub groupby: Option<GroupByArg>,
    /// Show kernel frames (default)
    #[arg(long, overrides_with = "no_kernel")]
    pub kernel: bool,
    /// Show each run of kernel frames as one "[kernel]" frame
    #[arg(long, overrides_with = "kernel")]
    pub no_kernel: bool,
    /// Merge the addresses of one source line (default)
    #[arg(long, overrides_with = "no_combine")]
    pub combine: bool,
    /// Keep each instruction address apart
    #[arg(long, overrides_with = "combine")]
    pub no_combine: bool,
    /// Show a Python interpreter's own C frames (default)
    #[arg(long, overrides_with = "no_interpreter")]
    pub interpreter: bool,
    /// Python stacks as py-spy shows them: the Python functions, and what is
    /// not the interpreter's (C extensions, libc, the kernel) below them
    #[arg(long, overrides_with = "interpreter")]
    pub no_interpreter: bool,
    /// Folded, flame graphs, speedscope: a Python frame as `name (file:line)`,
    /// as py-spy writes it (default)
    #[arg(long, overrides_with = "no_python_lines")]
    pub python_lines: bool,
    /// Folded, flame graphs, speedscope: a Python frame as its function's name
    #[arg(long, overrides_with = "python_lines")]
    pub no_python_lines: bool,
    /// Flat: one row per function (its lines merged) with its module, like
    /// perf report, instead of one per source line
    #[arg(long)]
    pub functions: bool,
}

impl ReportArgs {
    pub fn to_proto(&self) -> v1::ReportOptions {
        v1::ReportOptions {
            format: self.format.to_proto() as i32,
            maxdepth: self.maxdepth,
            mincount: self.mincount,
            maxlines: self.maxlines,
            maxsections: self.maxsections,
            noisefloor: self.noisefloor,
            sortedby: match self.sortedby {
                SortedByArg::Filefuncline => v1::SortedBy::Filefuncline,
                SortedByArg::Count => v1::SortedBy::Count,
                SortedByArg::Overhead => v1::SortedBy::Overhead,
            } as i32,
            groupby: match self.groupby {
                None => v1::GroupBy::Unspecified,
                Some(GroupByArg::None) => v1::GroupBy::None,
                Some(GroupByArg::Thread) => v1::GroupBy::Thread,
                Some(GroupByArg::Process) => v1::GroupBy::Process,
            } as i32,
            kernel: Some(!self.no_kernel),
            combine: Some(!self.no_combine),
            interpreter: Some(!self.no_interpreter),
            python_lines: Some(!self.no_python_lines),
            functions: self.functions,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    Tree,
    Flat,
    Folded,
    Pprof,
    Flamegraph,
    Speedscope,
    /// The Python functions, for `python -m pstats FILE` and snakeviz.
    Pstats,
    /// The Firefox Profiler's format (profiler.firefox.com): each thread's
    /// samples at their own times. Profiles of chosen processes (-p) and
    /// peeks only.
    Gecko,
}

impl FormatArg {
    pub fn to_proto(self) -> v1::Format {
        match self {
            FormatArg::Tree => v1::Format::Tree,
            FormatArg::Flat => v1::Format::Flat,
            FormatArg::Folded => v1::Format::Folded,
            FormatArg::Pprof => v1::Format::Pprof,
            FormatArg::Flamegraph => v1::Format::Flamegraph,
            FormatArg::Speedscope => v1::Format::Speedscope,
            FormatArg::Pstats => v1::Format::Pstats,
            FormatArg::Gecko => v1::Format::Gecko,
        }
    }

    /// Whether the report is binary, not for a terminal.
    pub fn binary(self) -> bool {
        matches!(self, FormatArg::Pprof | FormatArg::Pstats)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum DiffFormatArg {
    Text,
    Pprof,
    Flamegraph,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum SortedByArg {
    Filefuncline,
    Count,
    Overhead,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum GroupByArg {
    None,
    Thread,
    Process,
}

/// `profilerctl allocs`.
#[derive(Debug, clap::Args)]
pub struct AllocsArgs {
    /// The process
    #[arg(long, short)]
    pub pid: u32,
    /// How long to profile, e.g. 10s, 500ms, 2m
    #[arg(long, short, value_parser = parse_duration)]
    pub duration: Duration,
    /// Sample one allocation per this many bytes allocated, on average
    /// (e.g. 512KiB, 64KiB, 4096) [default: 512KiB]
    #[arg(long, value_parser = parse_bytes, conflicts_with = "sample_rate")]
    pub sample_bytes: Option<u64>,
    /// Sample each allocation with this probability instead (above 0, at
    /// most 1; 1 counts every allocation)
    #[arg(long, value_parser = parse_rate)]
    pub sample_rate: Option<f64>,
    /// Text formats count the bytes still held at the end instead of those
    /// allocated (pprof carries both: -sample_index=inuse_space)
    #[arg(long)]
    pub inuse: bool,
    #[command(flatten)]
    pub report: ReportArgs,
}

#[cfg(test)]
mod tests;
