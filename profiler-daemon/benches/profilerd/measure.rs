//! Reading what a process costs (CPU time, resident memory) from /proc and
//! from wait4, and the statistics the tables show (median, min, max,
//! percentiles).

use std::{collections::HashMap, fs, process::Child, time::Duration};

use anyhow::{Context as _, Result, bail};
use serde::Serialize;

/// CPU seconds (user + system) the live threads of a process have used so
/// far, to the nanosecond (from each thread's schedstat); see [`CpuClock`]
/// when threads come and go.
pub fn cpu_seconds(pid: u32) -> Result<f64> {
    Ok(thread_nanos(pid)?.values().sum::<u64>() as f64 / 1e9)
}

/// The CPU time of a process from a moment on, thread by thread: a thread
/// that ends meanwhile (a tokio blocking thread after idling 10 s) takes
/// away only what it used since that moment, not all it ever used, as it
/// would from two readings of [`cpu_seconds`].
pub struct CpuClock {
    pid: u32,
    started: HashMap<u32, u64>,
}

impl CpuClock {
    pub fn start(pid: u32) -> Result<Self> {
        Ok(Self {
            pid,
            started: thread_nanos(pid)?,
        })
    }

    /// CPU seconds used since the start by the threads alive now.
    pub fn seconds(&self) -> Result<f64> {
        let nanos: u64 = thread_nanos(self.pid)?
            .into_iter()
            .map(|(tid, nanos)| nanos.saturating_sub(self.started.get(&tid).copied().unwrap_or(0)))
            .sum();
        Ok(nanos as f64 / 1e9)
    }
}

/// The run time of each live thread of a process, in nanoseconds.
fn thread_nanos(pid: u32) -> Result<HashMap<u32, u64>> {
    let mut threads = HashMap::new();
    for task in fs::read_dir(format!("/proc/{pid}/task"))
        .with_context(|| format!("listing the threads of {pid}"))?
    {
        let task = task?;
        let Some(tid) = task.file_name().to_str().and_then(|tid| tid.parse().ok()) else {
            continue;
        };
        let schedstat = match fs::read_to_string(task.path().join("schedstat")) {
            Ok(schedstat) => schedstat,
            // It ended since the listing.
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => continue,
            Err(err) => {
                return Err(err).with_context(|| format!("reading a schedstat of {pid}"));
            }
        };
        let nanos = schedstat
            .split_whitespace()
            .next()
            .and_then(|field| field.parse::<u64>().ok())
            .context("an unreadable schedstat")?;
        threads.insert(tid, nanos);
    }
    Ok(threads)
}

/// Peak resident memory of a running process (VmHWM), in bytes.
pub fn peak_rss_bytes(pid: u32) -> Result<u64> {
    status_kib(pid, "VmHWM:").map(|kib| kib * 1024)
}

fn status_kib(pid: u32, field: &str) -> Result<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status"))
        .with_context(|| format!("reading /proc/{pid}/status"))?;
    status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in /proc/{pid}/status"))
}

/// What a child used over its whole life, from wait4's rusage.
#[derive(Clone, Copy, Debug)]
pub struct Exited {
    pub cpu_seconds: f64,
    pub peak_rss_bytes: u64,
    pub success: bool,
}

/// Waits for a child to exit and reaps it, with its resource usage. The
/// `Child` must not be waited for again.
pub fn wait_with_usage(child: &Child) -> Result<Exited> {
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: rusage is plain data that wait4 fills in; all-zero is a valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: wait4 on our own child, with pointers to live locals.
    let reaped = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
    if reaped != pid {
        bail!("wait4({pid}) failed: {}", std::io::Error::last_os_error());
    }
    let seconds = |time: libc::timeval| time.tv_sec as f64 + time.tv_usec as f64 / 1e6;
    Ok(Exited {
        cpu_seconds: seconds(usage.ru_utime) + seconds(usage.ru_stime),
        peak_rss_bytes: usage.ru_maxrss as u64 * 1024,
        success: libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
    })
}

/// Sends a signal to a child (it is still ours to reap).
pub fn signal(child: &Child, signal: rustix::process::Signal) -> Result<()> {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).context("pid 0")?;
    rustix::process::kill_process(pid, signal).context("signalling a child")
}

/// Median, minimum and maximum of repeated measurements.
#[derive(Clone, Copy, Debug, Serialize)]
pub struct Spread {
    pub median: f64,
    pub min: f64,
    pub max: f64,
    pub runs: usize,
}

impl Spread {
    pub fn of(values: &[f64]) -> Self {
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        Self {
            median: percentile(&sorted, 50.0),
            min: sorted.first().copied().unwrap_or(f64::NAN),
            max: sorted.last().copied().unwrap_or(f64::NAN),
            runs: sorted.len(),
        }
    }

    /// `median (min–max)` with `digits` decimals.
    pub fn show(&self, digits: usize) -> String {
        format!(
            "{:.digits$} ({:.digits$}–{:.digits$})",
            self.median, self.min, self.max
        )
    }
}

/// The `p`th percentile of sorted values, by linear interpolation.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    match sorted {
        [] => f64::NAN,
        [only] => *only,
        _ => {
            let rank = p / 100.0 * (sorted.len() - 1) as f64;
            let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
            sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
        }
    }
}

pub fn millis(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

pub fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}
