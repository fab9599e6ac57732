//! The daemon's own process as the kernel counts it: resident memory by
//! kind (heap and other anonymous memory, mapped files, the kernel's ring
//! buffers), its peak, CPU time, threads and open files, for the status
//! report and the standard `process_*` metrics.
//!
//! Owns reading them from procfs; it must not act on them.

use procfs::process::Process;

/// The process's figures at one moment (zeros for what could not be read).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcessFigures {
    pub resident_bytes: u64,
    /// Anonymous memory resident (the heap, stacks, and the kernel's ring
    /// buffers mapped), files mapped resident (the program, and binaries
    /// being parsed), and shared memory.
    pub resident_anonymous_bytes: u64,
    pub resident_file_bytes: u64,
    pub resident_shared_bytes: u64,
    /// The most resident since start.
    pub resident_peak_bytes: u64,
    pub virtual_bytes: u64,
    pub cpu_seconds: f64,
    /// Seconds since the Unix epoch at which the process started.
    pub start_time_seconds: f64,
    pub threads: u64,
    pub open_fds: u64,
    pub max_fds: u64,
}

/// Reads the daemon's figures now.
pub fn figures() -> ProcessFigures {
    let Ok(process) = Process::myself() else {
        return ProcessFigures::default();
    };
    let mut figures = ProcessFigures::default();
    if let Ok(status) = process.status() {
        let kib = |value: Option<u64>| value.unwrap_or(0) * 1024;
        figures.resident_bytes = kib(status.vmrss);
        figures.resident_anonymous_bytes = kib(status.rssanon);
        figures.resident_file_bytes = kib(status.rssfile);
        figures.resident_shared_bytes = kib(status.rssshmem);
        figures.resident_peak_bytes = kib(status.vmhwm);
        figures.virtual_bytes = kib(status.vmsize);
        figures.threads = status.threads;
    }
    if let Ok(stat) = process.stat() {
        let ticks = procfs::ticks_per_second() as f64;
        figures.cpu_seconds = (stat.utime + stat.stime) as f64 / ticks;
        if let Ok(boot) = procfs::boot_time_secs() {
            figures.start_time_seconds = boot as f64 + stat.starttime as f64 / ticks;
        }
    }
    figures.open_fds = process.fd_count().unwrap_or(0) as u64;
    if let Ok(limits) = process.limits() {
        figures.max_fds = match limits.max_open_files.soft_limit {
            procfs::process::LimitValue::Value(value) => value,
            procfs::process::LimitValue::Unlimited => u64::MAX,
        };
    }
    figures
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_tests_own_figures_are_read() {
        let figures = super::figures();
        assert!(figures.resident_bytes > 0);
        assert!(figures.resident_peak_bytes >= figures.resident_bytes);
        assert!(figures.threads >= 1);
        assert!(figures.open_fds >= 3 && figures.max_fds >= figures.open_fds);
        assert!(figures.start_time_seconds > 1e9);
    }
}
