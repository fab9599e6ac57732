//! The benchmark's workloads: small C programs built here with gcc (-O1,
//! frame pointers, debug information), run as child processes.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};

use crate::measure::{self, Exited};

/// Distinct call paths of the storm: with the instructions of the leaf a
/// sample can land on, several times as many distinct stacks, the
/// 50,000-stack scale the memory and latency questions are asked at.
pub const STORM_PATHS: u32 = 10_000;

/// The built workloads.
pub struct Workloads {
    /// Fixed CPU-bound work through many distinct stacks.
    pub cpu_paths: PathBuf,
    /// Short-lived processes walking 10,000 distinct paths, some far more
    /// often than others.
    pub stack_storm: PathBuf,
    /// Three named threads, two busy and one asleep (the peek tests' own).
    pub peek_threads: PathBuf,
    /// Pairs of malloc and free in one thread, from two sites.
    pub malloc_pairs: PathBuf,
    /// A process of many threads (the tests' own).
    pub many_threads: PathBuf,
    /// JIT-like code named in a perf map (the tests' own).
    pub jit_spin: PathBuf,
    /// A program with a few MiB of debug information (the tests' own).
    pub debug_churn: PathBuf,
}

impl Workloads {
    pub fn build(out_dir: &Path) -> Result<Self> {
        let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
        let build = |name: &str| -> Result<PathBuf> {
            let binary = out_dir.join(name);
            let source = ["benches/workloads", "tests/workloads"]
                .iter()
                .map(|dir| crate_dir.join(dir).join(format!("{name}.c")))
                .find(|source| source.exists())
                .with_context(|| format!("the source of workload {name} is missing"))?;
            let output = Command::new("gcc")
                .args([
                    "-O1",
                    "-g",
                    "-fno-omit-frame-pointer",
                    "-pthread",
                    "-Wall",
                    "-o",
                ])
                .arg(&binary)
                .arg(source)
                .output()
                .context("running gcc (the benchmark builds its workloads with it)")?;
            ensure!(
                output.status.success(),
                "gcc failed to build {name}:\n{}",
                String::from_utf8_lossy(&output.stderr)
            );
            Ok(binary)
        };
        Ok(Self {
            cpu_paths: build("cpu_paths")?,
            stack_storm: build("stack_storm")?,
            peek_threads: build("peek_threads")?,
            malloc_pairs: build("malloc_pairs")?,
            many_threads: build("many_threads")?,
            jit_spin: build("jit_spin")?,
            debug_churn: build("debug_churn")?,
        })
    }

    /// Runs `processes` copies of cpu_paths doing `walks` walks each (with
    /// different seeds) and returns the wall time until the last one ends.
    pub fn run_cpu_paths(&self, processes: usize, walks: u64) -> Result<Duration> {
        let started = Instant::now();
        let children: Vec<Child> = (0..processes)
            .map(|index| {
                Command::new(&self.cpu_paths)
                    .arg(walks.to_string())
                    .arg((index as u64 * 7_919 + 1).to_string())
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting cpu_paths")
            })
            .collect::<Result<_>>()?;
        for child in &children {
            let exited: Exited = measure::wait_with_usage(child)?;
            if !exited.success {
                bail!("cpu_paths failed");
            }
        }
        Ok(started.elapsed())
    }

    /// The number of walks that keeps one process busy for about `target`.
    pub fn calibrate_cpu_paths(&self, target: Duration) -> Result<u64> {
        let probe = 200_000;
        let took = self.run_cpu_paths(1, probe)?;
        Ok(((probe as f64) * target.as_secs_f64() / took.as_secs_f64()).max(1000.0) as u64)
    }

    /// Starts the storm of short-lived processes for at most `seconds`,
    /// `width` of them at a time; stop it with [`StackStorm::stop`].
    pub fn start_stack_storm(&self, seconds: f64, width: usize) -> Result<StackStorm> {
        let child = Command::new(&self.stack_storm)
            .arg(seconds.to_string())
            .arg(width.to_string())
            .arg(STORM_PATHS.to_string())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting stack_storm")?;
        Ok(StackStorm { child })
    }
}

/// A running stack storm.
pub struct StackStorm {
    child: Child,
}

impl StackStorm {
    /// Stops the storm (its last children finish their short lives) and
    /// returns how many processes it started.
    pub fn stop(mut self) -> Result<u64> {
        measure::signal(&self.child, rustix::process::Signal::TERM)?;
        let mut output = String::new();
        if let Some(mut stdout) = self.child.stdout.take() {
            std::io::Read::read_to_string(&mut stdout, &mut output)?;
        }
        measure::wait_with_usage(&self.child)?;
        output
            .split_whitespace()
            .nth(1)
            .and_then(|count| count.parse().ok())
            .with_context(|| format!("stack_storm printed {output:?}"))
    }
}
