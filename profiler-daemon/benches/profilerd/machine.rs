//! What the benchmark ran on, for the record.

use std::{fs, process::Command};

use serde::Serialize;

#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub date: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub memory_gib: f64,
    pub commit: String,
    pub perf: String,
    pub bpftrace: String,
}

impl Machine {
    pub fn describe() -> Self {
        let first_line = |program: &str, args: &[&str]| {
            Command::new(program)
                .args(args)
                .output()
                .ok()
                .map(|output| {
                    String::from_utf8_lossy(&output.stdout)
                        .lines()
                        .next()
                        .unwrap_or("")
                        .trim()
                        .to_owned()
                })
                .filter(|line| !line.is_empty())
                .unwrap_or_else(|| "unknown".to_owned())
        };
        let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let meminfo = fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let memory_kib: f64 = meminfo
            .lines()
            .find_map(|line| line.strip_prefix("MemTotal:"))
            .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or(0.0);
        Self {
            date: first_line("date", &["-u", "+%Y-%m-%d %H:%M UTC"]),
            kernel: first_line("uname", &["-r"]),
            cpu: cpuinfo
                .lines()
                .find_map(|line| line.strip_prefix("model name"))
                .map(|value| value.trim_start_matches([' ', '\t', ':']).to_owned())
                .unwrap_or_else(|| "unknown".to_owned()),
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_gib: memory_kib / (1024.0 * 1024.0),
            commit: first_line("git", &["rev-parse", "--short", "HEAD"]),
            perf: first_line("perf", &["--version"]),
            bpftrace: first_line("bpftrace", &["--version"]),
        }
    }

    pub fn summary(&self) -> String {
        format!(
            "Machine: {} CPUs ({}), {:.0} GiB, Linux {}; profilerd at {}; {}; {}.",
            self.cpus,
            self.cpu,
            self.memory_gib,
            self.kernel,
            self.commit,
            self.perf,
            self.bpftrace
        )
    }
}
