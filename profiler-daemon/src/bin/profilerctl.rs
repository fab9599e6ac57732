//! profilerctl: the command-line client of profilerd.
//!
//! Parses the command line, talks to the daemon over its socket and prints
//! or writes what comes back. Errors are one readable line and a non-zero
//! exit status.

use std::{
    io::{IsTerminal as _, Write as _},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant, SystemTime, UNIX_EPOCH},
};

use anyhow::{Context as _, Result, bail};
use clap::{Args, Parser, Subcommand, ValueEnum};
use profilerd::{
    client::{self, DEFAULT_SOCKET},
    proto::v1,
};

/// Control profilerd, the system-wide sampling profiler.
#[derive(Debug, Parser)]
#[command(version, about, long_about = None)]
struct Cli {
    /// The daemon's socket
    #[arg(long, global = true, value_name = "PATH", default_value = DEFAULT_SOCKET)]
    socket: PathBuf,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Show what the daemon samples, what it lost and what it holds
    Status,
    /// Print the daemon's self-metrics in the Prometheus text format
    Metrics,
    /// Profile for a duration and print or write the report
    Profile {
        #[command(flatten)]
        selector: SelectorArgs,
        /// How long to profile, e.g. 10s, 500ms, 2m
        #[arg(long, short, value_parser = parse_duration)]
        duration: Duration,
        #[command(flatten)]
        report: ReportArgs,
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
        /// The function, e.g. malloc or app::handle (or its last part)
        function: String,
        #[command(flatten)]
        selector: SelectorArgs,
        #[command(flatten)]
        window: WindowArgs,
    },
    /// Compare two past windows function by function: each function's
    /// share of its window's samples, base → target
    Diff {
        /// The base window starts this long ago, e.g. 10m
        #[arg(long, value_parser = parse_duration)]
        base_since: Duration,
        /// The base window ends this long ago [default: when the target starts]
        #[arg(long, value_parser = parse_duration)]
        base_until: Option<Duration>,
        /// The target window starts this long ago, e.g. 5m
        #[arg(long, value_parser = parse_duration)]
        since: Duration,
        /// The target window ends this long ago [default: now]
        #[arg(long, value_parser = parse_duration)]
        until: Option<Duration>,
        /// Most rows shown [default: 50]
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// text: the table; pprof: the target minus the base as one profile
        /// (`go tool pprof -top FILE`); flamegraph: a differential flame
        /// graph (red: grew, blue: shrank)
        #[arg(long, short, value_enum, default_value_t = DiffFormatArg::Text)]
        format: DiffFormatArg,
        /// Scale the base to the target's samples first, so windows of
        /// different lengths or load compare
        #[arg(long)]
        normalize: bool,
        /// Write the pprof or flame graph to this file instead of standard output
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
        #[command(flatten)]
        selector: SelectorArgs,
    },
    /// Draw a flame graph (SVG) of the next --duration or of a past window
    /// (--since), like `profile --format flamegraph`
    Flamegraph {
        #[command(flatten)]
        selector: SelectorArgs,
        /// Profile for this long from now, e.g. 10s
        #[arg(long, short, value_parser = parse_duration, conflicts_with_all = ["since", "until"])]
        duration: Option<Duration>,
        /// Or draw the past window that starts this long ago, e.g. 15m
        #[arg(long, value_parser = parse_duration)]
        since: Option<Duration>,
        /// ... and ends this long ago [default: now]
        #[arg(long, value_parser = parse_duration, requires = "since")]
        until: Option<Duration>,
        /// Show each run of kernel frames as one "[kernel]" frame
        #[arg(long)]
        no_kernel: bool,
        /// Where to write the SVG
        #[arg(long, short, value_name = "FILE", default_value = "flamegraph.svg")]
        output: PathBuf,
    },
    /// Show the functions with the most samples, live, every interval (like
    /// perf top); until interrupted, or for --count updates
    Top {
        #[command(flatten)]
        selector: SelectorArgs,
        /// How often to update, e.g. 1s, 500ms (100ms-60s)
        #[arg(long, short, value_parser = parse_duration, default_value = "1s")]
        interval: Duration,
        /// Functions shown
        #[arg(long, short = 'n', default_value_t = 20)]
        limit: u32,
        /// Leave kernel frames out (time in the kernel counts for its caller)
        #[arg(long)]
        user_only: bool,
        /// Stop after this many updates
        #[arg(long)]
        count: Option<u64>,
    },
    /// Start an open-ended profiling session and print its id
    Start {
        #[command(flatten)]
        selector: SelectorArgs,
    },
    /// Stop a session and print or write its report
    Stop {
        /// The session id printed by `start`
        id: String,
        #[command(flatten)]
        report: ReportArgs,
    },
    /// Peek at a process now, thread by thread, as the peek signal does
    /// (without sending any signal), and print the report
    Peek {
        /// The process (or one of its threads)
        pid: u32,
    },
    /// Show or choose which processes the kernel samples (root only to
    /// choose): named pids and cgroups, or --everything (the default)
    Targets {
        /// Sample this process (repeatable)
        #[arg(long = "pid", value_name = "PID")]
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
}

#[derive(Debug, Args)]
struct SelectorArgs {
    /// Only this process (repeatable; 0 selects the idle tasks)
    #[arg(long = "pid", value_name = "PID")]
    pids: Vec<u32>,
    /// Only this thread (repeatable)
    #[arg(long = "tid", value_name = "TID")]
    tids: Vec<u32>,
    /// Only processes or threads with this exact command name (repeatable)
    #[arg(long = "comm", value_name = "NAME")]
    comms: Vec<String>,
    /// Only processes or threads whose name matches this regular expression
    #[arg(long = "comm-regex", value_name = "REGEX")]
    comm_regex: Option<String>,
    /// Only threads of this user id (repeatable)
    #[arg(long = "uid", value_name = "UID")]
    uids: Vec<u32>,
    /// Only processes in this cgroup or below, as /proc/PID/cgroup shows it (repeatable)
    #[arg(long = "cgroup", value_name = "PATH")]
    cgroups: Vec<String>,
}

#[derive(Debug, Args)]
struct WindowArgs {
    /// Start this long ago, e.g. 15m (or use --start)
    #[arg(long, value_parser = parse_duration, conflicts_with = "start", required_unless_present = "start")]
    since: Option<Duration>,
    /// End this long ago, e.g. 5m [default: now]
    #[arg(long, value_parser = parse_duration, conflicts_with = "end")]
    until: Option<Duration>,
    /// Start at this time, e.g. 2026-11-21T17:30:00Z
    #[arg(long, value_parser = parse_time)]
    start: Option<SystemTime>,
    /// End at this time [default: now]
    #[arg(long, value_parser = parse_time)]
    end: Option<SystemTime>,
}

impl WindowArgs {
    /// The window in nanoseconds since the epoch; an end of 0 means now.
    fn to_unix_nanos(&self) -> (i64, i64) {
        let now = SystemTime::now();
        let start = self
            .start
            .or_else(|| self.since.map(|since| now - since))
            .unwrap_or(now);
        let end = self.end.or_else(|| self.until.map(|until| now - until));
        (unix_nanos(start), end.map_or(0, unix_nanos))
    }
}

fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_nanos() as i64)
}

fn parse_time(text: &str) -> Result<SystemTime, String> {
    humantime::parse_rfc3339_weak(text)
        .map_err(|err| format!("{err} (example: 2026-11-21T17:30:00Z, in UTC)"))
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// Report format
    #[arg(long, short, value_enum, default_value_t = FormatArg::Tree)]
    format: FormatArg,
    /// Write the report to this file instead of standard output
    #[arg(long, short, value_name = "FILE")]
    output: Option<PathBuf>,
    /// Deepest call depth shown (tree) or kept (folded); 0 = no limit
    #[arg(long, default_value_t = 0)]
    maxdepth: u32,
    /// Hide lines with fewer samples
    #[arg(long, default_value_t = 0)]
    mincount: u64,
    /// Tree: hide frames with n <= noisefloor * sqrt(N) samples, N = caller's (try 2.0)
    #[arg(long, default_value_t = 0.0)]
    noisefloor: f64,
    /// Order of flat reports and of tree children
    #[arg(long, value_enum, default_value_t = SortedByArg::Filefuncline)]
    sortedby: SortedByArg,
    /// One section per thread or per process
    #[arg(long, value_enum, default_value_t = GroupByArg::None)]
    groupby: GroupByArg,
    /// Show kernel frames (default)
    #[arg(long, overrides_with = "no_kernel")]
    kernel: bool,
    /// Show each run of kernel frames as one "[kernel]" frame
    #[arg(long, overrides_with = "kernel")]
    no_kernel: bool,
    /// Merge the addresses of one source line (default)
    #[arg(long, overrides_with = "no_combine")]
    combine: bool,
    /// Keep each instruction address apart
    #[arg(long, overrides_with = "combine")]
    no_combine: bool,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum FormatArg {
    Tree,
    Flat,
    Folded,
    Pprof,
    Flamegraph,
    Speedscope,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DiffFormatArg {
    Text,
    Pprof,
    Flamegraph,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum SortedByArg {
    Filefuncline,
    Count,
    Overhead,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum GroupByArg {
    None,
    Thread,
    Process,
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text).map_err(|err| format!("{err} (examples: 10s, 500ms, 2m)"))
}

impl SelectorArgs {
    fn to_proto(&self) -> v1::Selector {
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

impl ReportArgs {
    fn to_proto(&self) -> v1::ReportOptions {
        v1::ReportOptions {
            format: match self.format {
                FormatArg::Tree => v1::Format::Tree,
                FormatArg::Flat => v1::Format::Flat,
                FormatArg::Folded => v1::Format::Folded,
                FormatArg::Pprof => v1::Format::Pprof,
                FormatArg::Flamegraph => v1::Format::Flamegraph,
                FormatArg::Speedscope => v1::Format::Speedscope,
            } as i32,
            maxdepth: self.maxdepth,
            mincount: self.mincount,
            noisefloor: self.noisefloor,
            sortedby: match self.sortedby {
                SortedByArg::Filefuncline => v1::SortedBy::Filefuncline,
                SortedByArg::Count => v1::SortedBy::Count,
                SortedByArg::Overhead => v1::SortedBy::Overhead,
            } as i32,
            groupby: match self.groupby {
                GroupByArg::None => v1::GroupBy::None,
                GroupByArg::Thread => v1::GroupBy::Thread,
                GroupByArg::Process => v1::GroupBy::Process,
            } as i32,
            kernel: Some(!self.no_kernel),
            combine: Some(!self.no_combine),
        }
    }

    /// Refuses to print a binary report to a terminal before any waiting.
    fn check_output(&self) -> Result<()> {
        if matches!(self.format, FormatArg::Pprof)
            && self.output.is_none()
            && std::io::stdout().is_terminal()
        {
            bail!(
                "pprof reports are binary (gzipped protobuf): pass --output FILE or redirect standard output"
            );
        }
        Ok(())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(err) => {
            eprintln!("profilerctl: error: cannot start: {err}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("profilerctl: error: {}", one_line(&err));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line; gRPC statuses by their message.
fn one_line(err: &anyhow::Error) -> String {
    if let Some(status) = err.downcast_ref::<tonic::Status>() {
        return format!("{} ({:?})", status.message(), status.code());
    }
    format!("{err:#}")
}

async fn run(cli: Cli) -> Result<()> {
    let mut daemon = client::connect(&cli.socket).await?;
    match cli.command {
        Command::Status => {
            let status = daemon
                .get_status(v1::GetStatusRequest::default())
                .await?
                .into_inner();
            print!("{}", format_status(&status));
        }
        Command::Metrics => {
            let status = daemon
                .get_status(v1::GetStatusRequest { metrics: true })
                .await?
                .into_inner();
            print_text(&status.metrics)?;
        }
        Command::Profile {
            selector,
            duration,
            report,
        } => {
            report.check_output()?;
            let request = v1::ProfileRequest {
                duration_ms: duration.as_millis() as u64,
                selector: Some(selector.to_proto()),
                options: Some(report.to_proto()),
                mode: v1::Mode::Cpu as i32,
            };
            let progress = Progress::start(duration);
            let reply = daemon.profile(request).await;
            progress.finish();
            deliver(reply?.into_inner(), &report)?;
        }
        Command::Query {
            selector,
            window,
            report,
        } => {
            report.check_output()?;
            let (start_unix_nanos, end_unix_nanos) = window.to_unix_nanos();
            let reply = daemon
                .query(v1::QueryRequest {
                    start_unix_nanos,
                    end_unix_nanos,
                    selector: Some(selector.to_proto()),
                    options: Some(report.to_proto()),
                    mode: v1::Mode::Cpu as i32,
                })
                .await?
                .into_inner();
            deliver(reply, &report)?;
        }
        Command::Callers {
            function,
            selector,
            window,
        } => {
            let (start_unix_nanos, end_unix_nanos) = window.to_unix_nanos();
            let reply = daemon
                .callers(v1::CallersRequest {
                    function,
                    start_unix_nanos,
                    end_unix_nanos,
                    selector: Some(selector.to_proto()),
                })
                .await?
                .into_inner();
            print_text(&reply.text)?;
        }
        Command::Diff {
            base_since,
            base_until,
            since,
            until,
            limit,
            format,
            normalize,
            output,
            selector,
        } => {
            if format == DiffFormatArg::Pprof && output.is_none() && std::io::stdout().is_terminal()
            {
                bail!(
                    "a pprof diff is binary (gzipped protobuf): pass --output FILE or redirect \
                     standard output"
                );
            }
            let options = match format {
                DiffFormatArg::Text => None,
                DiffFormatArg::Pprof => Some(v1::Format::Pprof),
                DiffFormatArg::Flamegraph => Some(v1::Format::Flamegraph),
            }
            .map(|format| v1::ReportOptions {
                format: format as i32,
                ..Default::default()
            });
            let now = SystemTime::now();
            let ago = |duration: Duration| unix_nanos(now - duration);
            let reply = daemon
                .diff(v1::DiffRequest {
                    base: Some(v1::Window {
                        start_unix_nanos: ago(base_since),
                        end_unix_nanos: ago(base_until.unwrap_or(since)),
                    }),
                    target: Some(v1::Window {
                        start_unix_nanos: ago(since),
                        end_unix_nanos: until.map_or(0, ago),
                    }),
                    selector: Some(selector.to_proto()),
                    target_selector: None,
                    limit,
                    options,
                    normalize,
                })
                .await?
                .into_inner();
            if format == DiffFormatArg::Text {
                print_text(&reply.text)?;
            } else {
                write_output(&reply.report, output.as_deref())?;
                if let Some(path) = &output {
                    eprintln!("diff written to {}", path.display());
                }
            }
        }
        Command::Flamegraph {
            selector,
            duration,
            since,
            until,
            no_kernel,
            output,
        } => {
            let options = Some(v1::ReportOptions {
                format: v1::Format::Flamegraph as i32,
                kernel: Some(!no_kernel),
                ..Default::default()
            });
            let reply = match (duration, since) {
                (Some(duration), _) => {
                    let progress = Progress::start(duration);
                    let reply = daemon
                        .profile(v1::ProfileRequest {
                            duration_ms: duration.as_millis() as u64,
                            selector: Some(selector.to_proto()),
                            options,
                            mode: v1::Mode::Cpu as i32,
                        })
                        .await;
                    progress.finish();
                    reply?.into_inner()
                }
                (None, Some(since)) => {
                    let now = SystemTime::now();
                    daemon
                        .query(v1::QueryRequest {
                            start_unix_nanos: unix_nanos(now - since),
                            end_unix_nanos: until.map_or(0, |until| unix_nanos(now - until)),
                            selector: Some(selector.to_proto()),
                            options,
                            mode: v1::Mode::Cpu as i32,
                        })
                        .await?
                        .into_inner()
                }
                (None, None) => bail!(
                    "say which window to draw: --duration 10s profiles the next 10 seconds, \
                     --since 15m draws the last 15 minutes"
                ),
            };
            write_output(&reply.report, Some(&output))?;
            if let Some(summary) = reply.summary {
                eprintln!("{}", format_summary(&summary, Some(&output)));
            }
        }
        Command::Top {
            selector,
            interval,
            limit,
            user_only,
            count,
        } => {
            let mut updates = daemon
                .top(v1::TopRequest {
                    selector: Some(selector.to_proto()),
                    interval_ms: interval.as_millis() as u64,
                    limit,
                    user_only,
                })
                .await?
                .into_inner();
            let live = std::io::stdout().is_terminal();
            let mut shown = 0;
            while count.is_none_or(|count| shown < count) {
                let Some(update) = updates.message().await? else {
                    bail!("the daemon ended the top stream (it is shutting down?)");
                };
                let text = format_top(&update);
                print_text(&if live {
                    // Home the cursor and clear the screen: one frame per update.
                    format!("\x1b[H\x1b[2J{text}")
                } else {
                    format!("{text}\n")
                })?;
                shown += 1;
            }
        }
        Command::Start { selector } => {
            let reply = daemon
                .start_profile(v1::StartProfileRequest {
                    selector: Some(selector.to_proto()),
                    mode: v1::Mode::Cpu as i32,
                })
                .await?
                .into_inner();
            println!("{}", reply.session_id);
        }
        Command::Stop { id, report } => {
            report.check_output()?;
            let reply = daemon
                .stop_profile(v1::StopProfileRequest {
                    session_id: id,
                    options: Some(report.to_proto()),
                })
                .await?
                .into_inner();
            deliver(reply, &report)?;
        }
        Command::Peek { pid } => {
            let settings = daemon
                .get_status(v1::GetStatusRequest::default())
                .await?
                .into_inner()
                .peek
                .unwrap_or_default();
            eprintln!("peeking at process {pid} ({})", settings.signal_name);
            let report = daemon.peek(v1::PeekRequest { pid }).await?.into_inner();
            print_text(&report.text)?;
            eprintln!(
                "peek report {} kept; `profilerctl peeks --id {}` prints it again",
                report.id, report.id
            );
        }
        Command::Targets {
            pids,
            cgroups,
            everything,
        } => {
            let targets = if everything || !pids.is_empty() || !cgroups.is_empty() {
                daemon
                    .set_targets(v1::SetTargetsRequest {
                        everything,
                        pids,
                        cgroups,
                    })
                    .await?
                    .into_inner()
            } else {
                daemon
                    .get_status(v1::GetStatusRequest::default())
                    .await?
                    .into_inner()
                    .targets
                    .unwrap_or_default()
            };
            println!("{}", format_targets(&targets));
        }
        Command::Peeks {
            id: Some(id),
            follow: _,
        } => {
            let report = daemon
                .get_peek(v1::GetPeekRequest { id })
                .await?
                .into_inner();
            print_text(&report.text)?;
        }
        Command::Peeks {
            id: None,
            follow: false,
        } => {
            let peeks = daemon
                .list_peeks(v1::ListPeeksRequest {})
                .await?
                .into_inner()
                .peeks;
            if peeks.is_empty() {
                eprintln!(
                    "no peek reports are kept; `kill -USR1 PID` or `profilerctl peek PID` makes one"
                );
            }
            for peek in peeks {
                println!("{}  {}", peek.id, peek.title);
            }
        }
        Command::Peeks {
            id: None,
            follow: true,
        } => {
            let mut reports = daemon
                .watch_peeks(v1::WatchPeeksRequest {})
                .await?
                .into_inner();
            eprintln!("waiting for peeks (Ctrl-C to stop)");
            while let Some(report) = reports.message().await? {
                print_text(&report.text)?;
                println!();
            }
        }
    }
    Ok(())
}

fn print_text(text: &str) -> Result<()> {
    let mut stdout = std::io::stdout().lock();
    stdout
        .write_all(text.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the report to standard output")
}

/// Writes `bytes` to the file, or to standard output.
fn write_output(bytes: &[u8], output: Option<&std::path::Path>) -> Result<()> {
    match output {
        Some(path) => std::fs::write(path, bytes)
            .with_context(|| format!("cannot write the report to {}", path.display())),
        None => {
            let mut stdout = std::io::stdout().lock();
            stdout
                .write_all(bytes)
                .and_then(|()| stdout.flush())
                .context("cannot write the report to standard output")
        }
    }
}

/// One update of `profilerctl top`: a summary line, then the functions.
fn format_top(update: &v1::TopUpdate) -> String {
    let summary = update.summary.clone().unwrap_or_default();
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    // Samples over ticks of one CPU: how many CPUs the selection kept busy.
    let cpus = if seconds > 0.0 && summary.frequency_hz > 0 {
        summary.samples as f64 / (seconds * f64::from(summary.frequency_hz))
    } else {
        0.0
    };
    let mut text = format!(
        "profilerd top: {} in {seconds:.1}s ({cpus:.2} CPUs busy), {}, {}\n\n",
        plural(summary.samples, "sample"),
        plural(u64::from(summary.processes), "process"),
        plural(u64::from(summary.threads), "thread"),
    );
    for loss in &summary.lost {
        text.push_str(&format!("lost: {} {}\n", loss.count, loss.cause));
    }
    text.push_str(" self%  total%    self   total  function  (module)\n");
    for function in &update.functions {
        text.push_str(&format!(
            "{:>6.1} {:>6.1} {:>7} {:>7}  {}  ({})\n",
            function.self_percent,
            function.total_percent,
            function.self_samples,
            function.total_samples,
            function.function,
            function.module
        ));
    }
    if update.functions.is_empty() {
        text.push_str("  (no samples of the selection in this interval)\n");
    }
    text
}

/// Writes the report where asked and a one-line summary to standard error.
fn deliver(reply: v1::ProfileReply, report: &ReportArgs) -> Result<()> {
    write_output(&reply.report, report.output.as_deref())?;
    if let Some(summary) = reply.summary {
        eprintln!("{}", format_summary(&summary, report.output.as_deref()));
    }
    Ok(())
}

fn format_summary(summary: &v1::ProfileSummary, output: Option<&std::path::Path>) -> String {
    let seconds = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let lost: Vec<String> = summary
        .lost
        .iter()
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    let mut text = format!(
        "window of {seconds:.1}s at {} Hz: {} ({:.2} CPU-seconds), {}, {}; lost: {}",
        summary.frequency_hz,
        plural(summary.samples, "sample"),
        summary.cpu_nanos as f64 / 1e9,
        plural(u64::from(summary.processes), "process"),
        plural(u64::from(summary.threads), "thread"),
        if lost.is_empty() {
            "none".to_owned()
        } else {
            lost.join(", ")
        }
    );
    if let Some(path) = output {
        text.push_str(&format!("; report written to {}", path.display()));
    }
    for warning in &summary.warnings {
        text.push_str(&format!("\nwarning: {warning}"));
    }
    text
}

/// `1 process`, `2 processes`, `0 samples`.
fn plural(count: u64, noun: &str) -> String {
    match (count, noun.ends_with('s')) {
        (1, _) => format!("1 {noun}"),
        (_, true) => format!("{count} {noun}es"),
        (_, false) => format!("{count} {noun}s"),
    }
}

fn format_status(status: &v1::StatusReply) -> String {
    let lost: Vec<String> = status
        .samples_lost
        .iter()
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    let symbolizer = status.symbolizer.unwrap_or_default();
    let store = status.store.unwrap_or_default();
    let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
    let seconds = |ms: u64| humantime::format_duration(Duration::from_secs(ms / 1000));
    let history = if store.oldest_unix_nanos > 0 {
        let age = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|now| now.as_nanos() as i64 - store.oldest_unix_nanos)
            .unwrap_or(0)
            .max(0);
        let coarsest = if store.coarsest_bucket_ms > store.resolution_ms + 1000 {
            format!(
                " (the oldest coarsened up to {})",
                seconds(store.coarsest_bucket_ms)
            )
        } else {
            String::new()
        };
        format!(
            "the last {} at {} resolution{coarsest}",
            seconds(age as u64 / 1_000_000),
            seconds(store.resolution_ms)
        )
    } else {
        "none yet".to_owned()
    };
    format!(
        "profilerd {version}, up {uptime}\n\
         sampling:   {cpus} CPUs at {hz} Hz; {taken} samples taken, {drains} drains\n\
         targets:    {targets} ({outside} ticks outside them)\n\
         lost:       {lost}\n\
         processes:  {seen} seen, {tracked} tracked\n\
         symbolizer: {binaries} binaries, {user} user and {kernel} kernel addresses cached\n\
         history:    {history}; retention {retention}\n\
         store:      {used:.1} MiB of {limit:.1} MiB, {buckets} buckets, {stacks} stacks; for memory {coarsened} buckets merged, {evicted} evicted\n\
         sessions:   {sessions} open; longest profile {max}\n\
         peeks:      {peeks}\n",
        version = status.version,
        uptime = humantime::format_duration(Duration::from_secs(status.uptime_ms / 1000)),
        cpus = status.cpus.len(),
        hz = status.frequency_hz,
        taken = status.samples_taken,
        drains = status.drains,
        targets = format_targets(&status.targets.clone().unwrap_or(v1::Targets {
            everything: true,
            ..Default::default()
        })),
        outside = status.samples_outside_targets,
        lost = lost.join(", "),
        seen = status.processes_seen,
        tracked = symbolizer.processes_tracked,
        binaries = symbolizer.binaries,
        user = symbolizer.user_addresses_cached,
        kernel = symbolizer.kernel_addresses_cached,
        used = mib(store.memory_bytes),
        limit = mib(store.memory_limit_bytes),
        buckets = store.buckets,
        stacks = store.distinct_stacks,
        retention = humantime::format_duration(Duration::from_millis(store.retention_ms)),
        evicted = store.buckets_evicted_for_memory,
        coarsened = store.buckets_coarsened_for_memory,
        sessions = status.open_sessions,
        max = humantime::format_duration(Duration::from_millis(status.max_profile_duration_ms)),
        peeks = format_peek_status(&status.peek.clone().unwrap_or_default()),
    )
}

fn format_targets(targets: &v1::Targets) -> String {
    if targets.everything {
        return "every process".to_owned();
    }
    let mut parts: Vec<String> = targets
        .pids
        .iter()
        .map(|pid| format!("pid {pid}"))
        .collect();
    parts.extend(
        targets
            .cgroups
            .iter()
            .map(|cgroup| format!("cgroup {cgroup}")),
    );
    parts.join(", ")
}

fn format_peek_status(peek: &v1::PeekStatus) -> String {
    let trigger = if peek.signal == 0 || !peek.signal_off_reason.is_empty() {
        format!(
            "by signal off ({}); `profilerctl peek PID` works",
            if peek.signal_off_reason.is_empty() {
                "peek_signal = off"
            } else {
                &peek.signal_off_reason
            }
        )
    } else {
        format!("on {}", peek.signal_name)
    };
    let protection = if peek.protection_active {
        "processes without a handler are protected".to_owned()
    } else {
        format!(
            "processes without a handler are NOT protected ({})",
            peek.protection_reason
        )
    };
    format!(
        "{trigger}; {protection}\n            \
         {completed} done, {failed} failed, {running} running; triggers: {signals} signals, \
         {requests} requests, {folded} folded, {refused} refused by the allowlist, {gone} for \
         exited processes, {self_sent} sent by a process to itself (ignored), {dropped} dropped (max_concurrent_peeks), {kernel} dropped in the kernel; {not_written} reports not written to disk (kept in memory)",
        completed = peek.completed,
        failed = peek.failed,
        running = peek.running,
        signals = peek.signals,
        requests = peek.requests,
        folded = peek.folded,
        refused = peek.refused,
        gone = peek.gone,
        self_sent = peek.self_sent,
        dropped = peek.dropped_limit,
        kernel = peek.dropped_in_kernel,
        not_written = peek.not_written,
    )
}

/// A progress bar on standard error while the daemon profiles (hidden when
/// standard error is not a terminal).
struct Progress {
    bar: indicatif::ProgressBar,
    ticker: tokio::task::JoinHandle<()>,
}

impl Progress {
    fn start(duration: Duration) -> Self {
        let bar = indicatif::ProgressBar::new(duration.as_millis() as u64);
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "profiling {bar:30} {elapsed}/{msg} (Ctrl-C to abandon)",
            )
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        bar.set_message(humantime::format_duration(duration).to_string());
        let ticker = tokio::spawn({
            let bar = bar.clone();
            let started = Instant::now();
            async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let elapsed = started.elapsed().min(duration);
                    bar.set_position(elapsed.as_millis() as u64);
                    if elapsed >= duration {
                        bar.set_message("done; building the report".to_owned());
                    }
                }
            }
        });
        Self { bar, ticker }
    }

    fn finish(self) {
        self.ticker.abort();
        self.bar.finish_and_clear();
    }
}
