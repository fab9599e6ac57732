//! The profilers under comparison — profilerd, `perf record` and bpftrace —
//! started, made ready and stopped the same way, each at a given frequency.

use std::{
    fs,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use profilerd_client::{self as client, v1};
use serde::Serialize;

use crate::measure::{self, Exited};

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Tool {
    Profilerd,
    /// profilerd walking frame pointers in the kernel (`stack_copy = 0`):
    /// in-kernel aggregation, the cost the stack copies are compared with.
    ProfilerdFramePointers,
    Perf,
    Bpftrace,
}

impl Tool {
    pub fn name(self) -> &'static str {
        match self {
            Tool::Profilerd => "profilerd",
            Tool::ProfilerdFramePointers => "profilerd, frame pointers",
            Tool::Perf => "perf record",
            Tool::Bpftrace => "bpftrace",
        }
    }
}

/// A running profiler.
pub struct Profiler {
    pub tool: Tool,
    child: Child,
    started: Instant,
    dir: PathBuf,
    /// profilerd's socket.
    pub socket: PathBuf,
}

/// What a profiler used and said over its whole life.
pub struct Stopped {
    pub usage: Exited,
    /// Its standard output and error.
    pub output: String,
}

impl Profiler {
    /// Starts `tool` sampling every CPU at `hz` and waits until it samples.
    /// `daemon_args` are extra flags for profilerd.
    pub async fn start(tool: Tool, hz: u32, dir: &Path, daemon_args: &[String]) -> Result<Self> {
        fs::create_dir_all(dir)?;
        let log = |name: &str| -> Result<fs::File> { Ok(fs::File::create(dir.join(name))?) };
        let socket = dir.join("profilerd.sock");
        let mut command = match tool {
            Tool::Profilerd | Tool::ProfilerdFramePointers => {
                let mut command = Command::new(env!("CARGO_BIN_EXE_profilerd"));
                command
                    .arg("--socket")
                    .arg(&socket)
                    .arg("--frequency-hz")
                    .arg(hz.to_string())
                    .args(daemon_args);
                if tool == Tool::ProfilerdFramePointers {
                    command.args(["--stack-copy", "0"]);
                }
                command
            }
            Tool::Perf => {
                let mut command = Command::new("perf");
                command
                    .args(["record", "-F", &hz.to_string(), "-a", "-g", "-o"])
                    .arg(dir.join("perf.data"));
                command
            }
            Tool::Bpftrace => {
                let mut command = Command::new("bpftrace");
                command.args([
                    "-e",
                    &format!("profile:hz:{hz} {{ @[ustack, kstack, comm] = count(); }}"),
                ]);
                command
            }
        };
        let child = command
            .stdin(Stdio::null())
            .stdout(log("stdout")?)
            .stderr(log("stderr")?)
            .spawn()
            .with_context(|| format!("starting {}", tool.name()))?;
        let mut profiler = Self {
            tool,
            child,
            started: Instant::now(),
            dir: dir.to_owned(),
            socket,
        };
        profiler.wait_until_ready().await?;
        Ok(profiler)
    }

    async fn wait_until_ready(&mut self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!(
                    "{} exited at start ({status}):\n{}",
                    self.tool.name(),
                    self.output()
                );
            }
            let ready = match self.tool {
                Tool::Profilerd | Tool::ProfilerdFramePointers => {
                    match client::connect(&self.socket).await {
                        Ok(mut daemon) => daemon
                            .get_status(v1::GetStatusRequest::default())
                            .await
                            .is_ok(),
                        Err(_) => false,
                    }
                }
                // perf says nothing when it starts; give it time to open its
                // events and list the running processes.
                Tool::Perf => self.started.elapsed() >= Duration::from_millis(1500),
                Tool::Bpftrace => self.output().contains("Attaching"),
            };
            if ready {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("{} did not become ready within 30 s", self.tool.name());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until the profiler has caught up with what ran so far: two
    /// more drains for profilerd (the first symbolizes what it had not seen
    /// yet); half a second for the others.
    pub async fn settle(&self) -> Result<()> {
        match self.tool {
            Tool::Profilerd | Tool::ProfilerdFramePointers => {
                let mut daemon = client::connect(&self.socket).await?;
                let drains = |status: v1::StatusReply| status.drains;
                let start = drains(
                    daemon
                        .get_status(v1::GetStatusRequest::default())
                        .await?
                        .into_inner(),
                );
                let deadline = Instant::now() + Duration::from_secs(30);
                while drains(
                    daemon
                        .get_status(v1::GetStatusRequest::default())
                        .await?
                        .into_inner(),
                ) < start + 2
                {
                    if Instant::now() > deadline {
                        bail!("profilerd did not drain twice within 30 s");
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Ok(())
            }
            Tool::Perf | Tool::Bpftrace => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                Ok(())
            }
        }
    }

    /// profilerd's status (None for the other profilers).
    pub async fn status(&self) -> Result<Option<v1::StatusReply>> {
        if !matches!(self.tool, Tool::Profilerd | Tool::ProfilerdFramePointers) {
            return Ok(None);
        }
        let mut daemon = client::connect(&self.socket).await?;
        Ok(Some(
            daemon
                .get_status(v1::GetStatusRequest::default())
                .await?
                .into_inner(),
        ))
    }

    /// CPU seconds used so far.
    pub fn cpu_seconds(&self) -> Result<f64> {
        measure::cpu_seconds(self.pid())
    }

    /// Stops the profiler the way a user would (SIGTERM for the daemon,
    /// SIGINT for perf and bpftrace, which then write out what they hold)
    /// and waits for it.
    pub fn stop(self) -> Result<Stopped> {
        let signal = match self.tool {
            Tool::Profilerd | Tool::ProfilerdFramePointers => rustix::process::Signal::TERM,
            Tool::Perf | Tool::Bpftrace => rustix::process::Signal::INT,
        };
        measure::signal(&self.child, signal)?;
        let usage = measure::wait_with_usage(&self.child)?;
        Ok(Stopped {
            usage,
            output: self.output(),
        })
    }

    fn output(&self) -> String {
        ["stdout", "stderr"]
            .iter()
            .map(|name| fs::read_to_string(self.dir.join(name)).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Stopped {
    /// perf's own count of lost samples or chunks, from what it printed.
    pub fn perf_lost(&self) -> u64 {
        self.output
            .lines()
            .filter(|line| line.to_lowercase().contains("lost"))
            .flat_map(|line| line.split_whitespace())
            .filter_map(|word| word.parse::<u64>().ok())
            .sum()
    }

    /// Entries bpftrace printed from its map: the distinct (user stack,
    /// kernel stack, command) keys it held.
    pub fn bpftrace_keys(&self) -> u64 {
        self.output.matches("\n@[").count() as u64 + u64::from(self.output.starts_with("@["))
    }
}
