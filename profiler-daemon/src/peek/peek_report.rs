//! A peek's report: the samples a peek collected and the process snapshot
//! taken at its trigger, made into one self-contained report per peek, in
//! the spirit of Julia's `Profile.peek_report`: a header, where each thread
//! was at the trigger, then per thread `Total snapshots` and `Utilization`
//! and its tree.
//!
//! Owns the report's layout and the aggregation of a peek's samples; the
//! tree itself is the `report` module's. It must not sample or store.

use std::{
    fmt::Write as _,
    time::{Duration, SystemTime},
};

use profiler_common::SampleKind;
use rustc_hash::FxHashMap as HashMap;

use super::{
    python::PythonAtTrigger,
    snapshot::{Disposition, ProcessSnapshot},
};
use crate::{
    profile::{
        GroupBy, Location, Owner, Profile, ProfileAssembly, ReportOptions, ThreadInfo, ThreadState,
    },
    report::{self, ReportError, ThreadSection},
    symbols::symbolizer::SymbolizedSample,
};

/// What started a peek.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TriggerSource {
    /// The peek signal, sent by a process.
    Signal {
        signal: u32,
        sender_pid: u32,
        sender_command: String,
        /// The guard kept the signal from the process (it has no handler).
        intercepted: bool,
    },
    /// A `Peek` request of the API.
    Request,
    /// Not known: a report of an earlier run, read back from its file.
    Unknown,
}

/// A finished peek.
#[derive(Clone, Debug, PartialEq)]
pub struct PeekReport {
    /// Unique, and in the order peeks were triggered.
    pub id: String,
    pub pid: u32,
    /// Who the process ran as (protected when any of its samples was);
    /// `None` for reports of earlier runs that did not say.
    pub owner: Option<Owner>,
    pub command: String,
    pub command_line: String,
    pub source: TriggerSource,
    pub triggered: SystemTime,
    /// How long the threads were sampled.
    pub duration: Duration,
    pub frequency_hz: u32,
    /// Further triggers for the same process while this peek ran.
    pub folded_triggers: u32,
    pub threads: Vec<ThreadReport>,
    pub warnings: Vec<String>,
    /// The whole report as text.
    pub text: String,
}

impl PeekReport {
    /// A report of an earlier run, of which only the text was kept.
    pub fn from_text(summary: &super::archive::PeekSummary, text: String) -> Self {
        Self {
            id: summary.id.clone(),
            pid: summary.pid,
            owner: summary.owner,
            command: String::new(),
            command_line: String::new(),
            source: TriggerSource::Unknown,
            triggered: summary.triggered,
            duration: Duration::ZERO,
            frequency_hz: 0,
            folded_triggers: 0,
            threads: Vec::new(),
            warnings: Vec::new(),
            text,
        }
    }
}

/// One thread of a peek.
#[derive(Clone, Debug, PartialEq)]
pub struct ThreadReport {
    pub tid: u32,
    pub name: String,
    /// Its scheduler state at the trigger, e.g. `S (sleeping)`; empty for
    /// a thread started during the peek.
    pub state: String,
    /// Where it was at the trigger, innermost frame first: its first sample
    /// when it was running, else its kernel stack from procfs.
    pub at_trigger: Vec<String>,
    /// The kernel function it waited in, when it was not running.
    pub wait_channel: Option<String>,
    /// Its Python frames at the trigger, innermost first (`qualname
    /// (file:line)`), when the process runs CPython.
    pub python_at_trigger: Vec<String>,
    /// Samples taken of it.
    pub snapshots: u64,
    /// Its share of one CPU during the peek, in percent.
    pub utilization_percent: f64,
    /// Seconds it waited off CPU during the peek: asleep (`S`), blocked
    /// (`D`), runnable in the run queue.
    pub waited_seconds: [f64; 3],
}

/// Everything a report is made from.
pub struct PeekRun<'a> {
    pub id: String,
    pub snapshot: &'a ProcessSnapshot,
    pub source: TriggerSource,
    pub signal_name: &'a str,
    pub triggered: SystemTime,
    pub started: SystemTime,
    pub duration: Duration,
    pub frequency_hz: u32,
    pub folded_triggers: u32,
    pub samples: Vec<SymbolizedSample>,
    pub warnings: Vec<String>,
}

impl PeekRun<'_> {
    pub fn report(self) -> Result<PeekReport, ReportError> {
        let (profile, instants) = aggregate(&self);
        let ticks = self.duration.as_secs_f64() * f64::from(self.frequency_hz);
        let mut snapshots = vec![0_u64; profile.threads.len()];
        let mut waited = vec![[0.0; 3]; profile.threads.len()];
        for sample in &profile.samples {
            let seconds = sample.weight as f64 / 1e9;
            match sample.state {
                ThreadState::Cpu => snapshots[sample.thread as usize] += sample.count,
                ThreadState::Sleeping => waited[sample.thread as usize][0] += seconds,
                ThreadState::Blocked => waited[sample.thread as usize][1] += seconds,
                ThreadState::RunQueue => waited[sample.thread as usize][2] += seconds,
                // A peek has no allocations.
                ThreadState::Allocated | ThreadState::Held => {}
            }
        }
        let threads: Vec<ThreadReport> = profile
            .threads
            .iter()
            .zip(&snapshots)
            .zip(&waited)
            .map(|((thread, &snapshots), &waited_seconds)| {
                let snapshot = self
                    .snapshot
                    .threads
                    .iter()
                    .find(|known| known.tid == thread.tid);
                let at_trigger = match snapshot {
                    Some(known) if !known.running() => known.kernel_stack.clone(),
                    _ => instants.get(&thread.tid).cloned().unwrap_or_default(),
                };
                ThreadReport {
                    tid: thread.tid,
                    name: thread.thread_name.to_string(),
                    state: snapshot.map(|known| known.state_text()).unwrap_or_default(),
                    at_trigger,
                    wait_channel: snapshot.and_then(|known| known.wait_channel.clone()),
                    python_at_trigger: match &self.snapshot.python {
                        PythonAtTrigger::Stacks(stacks) => {
                            stacks.get(&thread.tid).cloned().unwrap_or_default()
                        }
                        _ => Vec::new(),
                    },
                    snapshots,
                    utilization_percent: if ticks > 0.0 {
                        (snapshots as f64 / ticks * 100.0).min(100.0)
                    } else {
                        0.0
                    },
                    waited_seconds,
                }
            })
            .collect();
        // A thread that changed users, or became protected, during the peek
        // makes the whole report protected.
        let mut owner = self.snapshot.owner;
        owner.protected |= self.samples.iter().any(|sample| {
            let thread = sample.thread.owner();
            thread.protected || (thread.uid, thread.gid) != (owner.uid, owner.gid)
        });
        let text = self.text(&profile, &threads, owner)?;
        Ok(PeekReport {
            id: self.id,
            pid: self.snapshot.pid,
            owner: Some(owner),
            command: self.snapshot.command.clone(),
            command_line: self.snapshot.command_line.clone(),
            source: self.source,
            triggered: self.triggered,
            duration: self.duration,
            frequency_hz: self.frequency_hz,
            folded_triggers: self.folded_triggers,
            threads,
            warnings: self.warnings,
            text,
        })
    }

    fn text(
        &self,
        profile: &Profile,
        threads: &[ThreadReport],
        owner: Owner,
    ) -> Result<String, ReportError> {
        let snapshot = self.snapshot;
        let rule = "=".repeat(78);
        let mut out = String::new();
        writeln!(out, "{rule}")?;
        write!(
            out,
            "Peek at process {} ({})",
            snapshot.pid, snapshot.command
        )?;
        if !snapshot.command_line.is_empty() {
            write!(out, ": {}", snapshot.command_line)?;
        }
        writeln!(out)?;
        writeln!(out, "{}", owner_line(owner))?;
        let when = humantime::format_rfc3339_millis(self.triggered);
        match &self.source {
            TriggerSource::Signal {
                sender_pid,
                sender_command,
                intercepted,
                ..
            } => {
                write!(
                    out,
                    "Triggered at {when} by {} from process {sender_pid} ({sender_command})",
                    self.signal_name
                )?;
                match snapshot.disposition {
                    _ if *intercepted => write!(
                        out,
                        "; the process has no handler, so profilerd intercepted the signal: it \
                         was not delivered, and the sender's kill() failed with EPERM"
                    )?,
                    Disposition::Handled => write!(out, "; the process handles it")?,
                    Disposition::Ignored => write!(out, "; the process ignores it")?,
                    Disposition::Default => write!(
                        out,
                        "; the process has no handler, so the kernel's default action applies"
                    )?,
                    Disposition::Unknown => {}
                }
                writeln!(out)?;
            }
            TriggerSource::Request | TriggerSource::Unknown => {
                writeln!(out, "Triggered at {when} by a Peek request")?;
            }
        }
        write!(
            out,
            "Sampled each thread's CPU time at {} Hz and recorded its waits off CPU for \
             {:.2} s; {} threads",
            self.frequency_hz,
            self.duration.as_secs_f64(),
            threads.len()
        )?;
        if self.folded_triggers > 0 {
            write!(
                out,
                "; {} more triggers folded into this peek",
                self.folded_triggers
            )?;
        }
        writeln!(out)?;
        for warning in &self.warnings {
            writeln!(out, "# warning: {}", warning.replace(['\n', '\r'], " "))?;
        }
        writeln!(out, "{rule}")?;
        writeln!(out)?;
        writeln!(out, "Where each thread was at the trigger:")?;
        for thread in threads {
            write!(out, "Thread {} ({})", thread.tid, thread.name)?;
            if thread.state.is_empty() {
                write!(out, ": started during the peek")?;
            } else {
                write!(out, ": {}", thread.state)?;
            }
            if let Some(channel) = &thread.wait_channel {
                write!(out, " in {channel}")?;
            }
            if thread.state.starts_with('R') && !thread.at_trigger.is_empty() {
                write!(out, ", its first sample")?;
            }
            writeln!(out)?;
            for frame in &thread.at_trigger {
                writeln!(out, "    {frame}")?;
            }
            if !thread.python_at_trigger.is_empty() {
                writeln!(out, "  in Python:")?;
                for frame in &thread.python_at_trigger {
                    writeln!(out, "    {frame}")?;
                }
            }
        }
        writeln!(out)?;
        let sections: Vec<ThreadSection> = threads
            .iter()
            .enumerate()
            .map(|(index, thread)| ThreadSection {
                thread: index as u32,
                title: format!(
                    "Thread {} ({}) Total snapshots: {}. Utilization: {:.0}%{}",
                    thread.tid,
                    thread.name,
                    thread.snapshots,
                    thread.utilization_percent,
                    waited_text(thread.waited_seconds)
                ),
            })
            .collect();
        let options = ReportOptions {
            groupby: GroupBy::Thread,
            ..ReportOptions::default()
        };
        out.push_str(&report::render_thread_trees(profile, &options, &sections)?);
        Ok(out)
    }
}

/// How a thread's peek was spent off CPU, for its section's title.
fn waited_text([sleeping, blocked, run_queue]: [f64; 3]) -> String {
    if sleeping + blocked + run_queue == 0.0 {
        return String::new();
    }
    format!(
        ". Off CPU: {sleeping:.2} s asleep (S), {blocked:.2} s blocked (D), {run_queue:.2} s \
         in the run queue"
    )
}

const OWNER_PREFIX: &str = "Runs as user ";
const PROTECTED_NOTE: &str =
    "; protected (setuid, setgid or not dumpable): root and the admin group only";
/// What a root process's report says instead: procfs cannot tell whether
/// one is dumpable, and only root and the admin group see root's anyway.
const ROOT_NOTE: &str = " (root's process: root and the admin group only)";

/// The header line that says who the process runs as, which
/// [`parse_owner_line`] reads back from a kept report.
pub(super) fn owner_line(owner: Owner) -> String {
    format!(
        "{OWNER_PREFIX}{}, group {}{}",
        owner.uid,
        owner.gid,
        match owner {
            Owner { uid: 0, .. } => ROOT_NOTE,
            Owner {
                protected: true, ..
            } => PROTECTED_NOTE,
            _ => "",
        }
    )
}

/// The owner a report's text states, if it does.
pub fn parse_owner_line(text: &str) -> Option<Owner> {
    let line = text
        .lines()
        .take(4)
        .find_map(|line| line.strip_prefix(OWNER_PREFIX))?;
    let (ids, protected) = match line
        .strip_suffix(PROTECTED_NOTE)
        .or_else(|| line.strip_suffix(ROOT_NOTE))
    {
        Some(ids) => (ids, true),
        None => (line, false),
    };
    let (uid, gid) = ids.split_once(", group ")?;
    Some(Owner {
        uid: uid.parse().ok()?,
        gid: gid.parse().ok()?,
        protected,
    })
}

/// The peek's samples as a profile whose threads are those of the snapshot
/// (by thread id) and then any started during the peek; and each thread's
/// first sample as text, innermost frame first.
fn aggregate(run: &PeekRun<'_>) -> (Profile, HashMap<u32, Vec<String>>) {
    let period_ns = 1_000_000_000 / u64::from(run.frequency_hz.max(1));
    let mut assembly = ProfileAssembly::new(Profile::empty(
        run.started,
        run.started + run.duration,
        run.frequency_hz,
        period_ns,
        crate::profile::ProfileMode::Wall,
    ));
    for thread in &run.snapshot.threads {
        assembly.thread(&ThreadInfo {
            pid: run.snapshot.pid,
            tid: thread.tid,
            thread_name: thread.name.as_str().into(),
            process_name: run.snapshot.command.as_str().into(),
            uid: run.snapshot.owner.uid,
            gid: run.snapshot.owner.gid,
            protected: run.snapshot.owner.protected,
            cgroup: run.snapshot.cgroup_v2.as_str().into(),
        });
    }
    let mut new_threads: Vec<&ThreadInfo> = run
        .samples
        .iter()
        .map(|sample| &sample.thread)
        .filter(|thread| !assembly.has_thread(thread.tid))
        .collect();
    new_threads.sort_by_key(|thread| thread.tid);
    for thread in new_threads {
        assembly.thread(thread);
    }

    let mut instants = HashMap::default();
    for sample in &run.samples {
        match sample.kind {
            SampleKind::CpuClock | SampleKind::Allocation => continue,
            // Waits off CPU: their time, in sampling periods below.
            SampleKind::OffCpuSleeping | SampleKind::OffCpuBlocked | SampleKind::RunQueue => {}
            // The first sample of a thread is also one of its samples.
            SampleKind::PeekInstant => {
                instants.insert(
                    sample.thread.tid,
                    sample
                        .stack
                        .iter()
                        .rev()
                        .flat_map(|location| frame_lines(&location.location))
                        .collect(),
                );
            }
            SampleKind::Peek => {}
        }
        let thread = assembly.thread(&sample.thread);
        let stack = assembly.stack(&sample.stack);
        let count = if sample.kind.is_off_cpu() {
            0
        } else {
            sample.count
        };
        assembly.add(
            thread,
            stack,
            ThreadState::of(sample.kind),
            count,
            sample.weight,
        );
    }
    let profile = assembly.finish(|count, weight, state| {
        if state == ThreadState::Cpu {
            (count, weight)
        } else {
            ((weight + period_ns / 2) / period_ns.max(1), weight)
        }
    });
    (profile, instants)
}

/// A location's frames as stack-trace lines, innermost first.
fn frame_lines(location: &Location) -> Vec<String> {
    location
        .frames
        .iter()
        .rev()
        .map(|frame| match (&frame.file, frame.line) {
            (Some(file), line) if line > 0 => format!("{} at {file}:{line}", frame.function),
            (Some(file), _) => format!("{} at {file}", frame.function),
            (None, _) => format!("{} in {}", frame.function, location.module),
        })
        .collect()
}
