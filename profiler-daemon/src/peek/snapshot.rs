//! What procfs says about a process at the instant of a peek's trigger: its
//! identity, its threads, and where each thread that was not running waits.
//!
//! Owns the reading of `/proc`; it must not sample, symbolize or report.

use std::{fs, io};

use procfs::process::Process;

use crate::{
    profile::Owner,
    tasks::{self, TaskCredentials},
};

/// A process as its peek found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessSnapshot {
    pub pid: u32,
    /// `/proc/PID/comm`.
    pub command: String,
    /// The command line, arguments separated by spaces; empty for kernel
    /// threads and zombies.
    pub command_line: String,
    /// Who it runs as, and whether its owner may look at it.
    pub owner: Owner,
    /// The cgroup paths of `/proc/PID/cgroup`.
    pub cgroups: Vec<String>,
    /// Its cgroup v2 path (the `0::` line), empty when there is none.
    pub cgroup_v2: String,
    /// What the process does with the peek signal, when there is one.
    pub disposition: Disposition,
    pub threads: Vec<ThreadSnapshot>,
    /// Its threads' Python stacks, when it runs CPython (filled in after
    /// the rest: see `peek::python`).
    pub python: super::python::PythonAtTrigger,
}

/// A thread as its peek found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThreadSnapshot {
    pub tid: u32,
    /// `/proc/PID/task/TID/comm`.
    pub name: String,
    /// The scheduler state letter of `stat` (`R` running, `S` sleeping,
    /// `D` uninterruptible, ...).
    pub state: char,
    /// The kernel function it waits in (`wchan`), when not running.
    pub wait_channel: Option<String>,
    /// Its kernel stack (`/proc/PID/task/TID/stack`), innermost first,
    /// offsets removed, when not running and readable.
    pub kernel_stack: Vec<String>,
}

impl ThreadSnapshot {
    pub fn running(&self) -> bool {
        self.state == 'R'
    }

    /// The state letter with its meaning, e.g. `S (sleeping)`.
    pub fn state_text(&self) -> String {
        let meaning = match self.state {
            'R' => "running",
            'S' => "sleeping",
            'D' => "waiting uninterruptibly",
            'T' => "stopped",
            't' => "stopped by a tracer",
            'Z' => "zombie",
            'X' => "dead",
            'I' => "idle",
            'P' => "parked",
            'W' => "waking",
            _ => "unknown state",
        };
        format!("{} ({meaning})", self.state)
    }
}

/// What a process does when the peek signal arrives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Disposition {
    /// It has a handler.
    Handled,
    /// It ignores the signal.
    Ignored,
    /// The kernel's default action applies (for SIGUSR1: termination).
    Default,
    /// No signal is configured, or procfs did not say.
    Unknown,
}

#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    #[error("no process or thread {0} exists (it may have exited)")]
    NoSuchProcess(u32),
    #[error("cannot read /proc/{pid}: {source}")]
    Proc { pid: u32, source: procfs::ProcError },
}

/// The process a task id belongs to: itself for a process id, its thread
/// group leader for a thread id.
pub fn process_of(task: u32) -> Result<u32, SnapshotError> {
    let status = Process::new(task as i32)
        .and_then(|process| process.status())
        .map_err(|source| proc_error(task, source))?;
    Ok(status.tgid as u32)
}

/// Reads the process `pid` and its threads; `signal` (0: none) decides
/// [`ProcessSnapshot::disposition`].
pub fn take(pid: u32, signal: u32) -> Result<ProcessSnapshot, SnapshotError> {
    let process = Process::new(pid as i32).map_err(|source| proc_error(pid, source))?;
    let stat = process.stat().map_err(|source| proc_error(pid, source))?;
    let status = process.status().map_err(|source| proc_error(pid, source))?;
    let command_line = process
        .cmdline()
        .map(|arguments| arguments.join(" "))
        .unwrap_or_default();
    let disposition = disposition_in(&status, signal);
    let owner = TaskCredentials::read(pid)
        .ok_or(SnapshotError::NoSuchProcess(pid))?
        .owner();
    let cgroups = tasks::cgroups(pid);
    let mut threads = Vec::new();
    for task in process.tasks().map_err(|source| proc_error(pid, source))? {
        // A thread that exits while being listed is simply not there.
        let Ok(task) = task else { continue };
        let Ok(task_stat) = task.stat() else { continue };
        let tid = task.tid as u32;
        let state = task_stat.state;
        let (wait_channel, kernel_stack) = if state == 'R' {
            (None, Vec::new())
        } else {
            let task_dir = format!("/proc/{pid}/task/{tid}");
            (
                read_wait_channel(&task_dir),
                read_kernel_stack(&task_dir).unwrap_or_default(),
            )
        };
        threads.push(ThreadSnapshot {
            tid,
            name: task_stat.comm,
            state,
            wait_channel,
            kernel_stack,
        });
    }
    threads.sort_by_key(|thread| thread.tid);
    Ok(ProcessSnapshot {
        pid,
        command: stat.comm,
        command_line,
        owner,
        cgroups: cgroups.all,
        cgroup_v2: cgroups.v2,
        disposition,
        threads,
        python: Default::default(),
    })
}

/// What process `pid` does with `signal` now; `Unknown` when it is gone.
pub fn disposition(pid: u32, signal: u32) -> Disposition {
    match Process::new(pid as i32).and_then(|process| process.status()) {
        Ok(status) => disposition_in(&status, signal),
        Err(_) => Disposition::Unknown,
    }
}

fn disposition_in(status: &procfs::process::Status, signal: u32) -> Disposition {
    match signal {
        1..=64 => {
            let bit = 1_u64 << (signal - 1);
            if status.sigcgt & bit != 0 {
                Disposition::Handled
            } else if status.sigign & bit != 0 {
                Disposition::Ignored
            } else {
                Disposition::Default
            }
        }
        _ => Disposition::Unknown,
    }
}

pub(super) fn proc_error(pid: u32, source: procfs::ProcError) -> SnapshotError {
    match source {
        procfs::ProcError::NotFound(_) => SnapshotError::NoSuchProcess(pid),
        source => SnapshotError::Proc { pid, source },
    }
}

/// `wchan`: "0" when the thread is not waiting in the kernel.
fn read_wait_channel(task_dir: &str) -> Option<String> {
    let text = fs::read_to_string(format!("{task_dir}/wchan")).ok()?;
    let text = text.trim();
    (!text.is_empty() && text != "0").then(|| text.to_owned())
}

/// `stack` lines look like `[<0>] do_nanosleep+0x6f/0x140`.
fn read_kernel_stack(task_dir: &str) -> io::Result<Vec<String>> {
    Ok(parse_kernel_stack(&fs::read_to_string(format!(
        "{task_dir}/stack"
    ))?))
}

fn parse_kernel_stack(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|line| {
            let symbol = line.split_once("] ").map_or(line, |(_, symbol)| symbol);
            let function = symbol.split('+').next()?.trim();
            (!function.is_empty()).then(|| function.to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_stacks_lose_their_offsets() {
        let text = "[<0>] hrtimer_nanosleep+0x6f/0x140\n[<0>] do_syscall_64+0x71/0x280\n";
        assert_eq!(
            parse_kernel_stack(text),
            ["hrtimer_nanosleep", "do_syscall_64"]
        );
        assert!(parse_kernel_stack("").is_empty());
    }

    #[test]
    fn this_process_can_be_read() {
        let pid = std::process::id();
        let snapshot = take(pid, libc::SIGUSR1 as u32).unwrap();
        assert_eq!(snapshot.pid, pid);
        assert!(!snapshot.threads.is_empty());
        assert!(snapshot.threads.iter().any(|thread| thread.tid == pid));
        assert_eq!(process_of(pid).unwrap(), pid);
        assert!(matches!(
            take(u32::MAX / 2, 0),
            Err(SnapshotError::NoSuchProcess(_))
        ));
    }
}
