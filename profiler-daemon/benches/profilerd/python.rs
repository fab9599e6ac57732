//! Question 11: what Python's own frames cost. Two busy processes at 99 Hz
//! on both CPUs, native (dash spinning) or Debian's python3.11 spinning at
//! the bottom of 3 or 33 Python frames (30 of recursion): the kernel's cost
//! per sample (its run-time statistics of profilerd's perf_event programs)
//! and the daemon's own CPU, which unwinds, merges and names every sample.

use std::{
    path::Path,
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result};

use crate::{
    Plan, ebpf,
    measure::Spread,
    report::{Table, verdict},
    tools::{Profiler, Tool},
};

/// The targets: at most 1 µs more per sample at 30 Python frames
/// than a native sample, the daemon within 0.3% of a core.
const ADDED_NANOS_TARGET: f64 = 1000.0;
const DAEMON_CPU_TARGET: f64 = 0.3;

const FREQUENCY_HZ: u32 = 99;

/// Spins at the bottom of `sys.argv[1]` recursive calls of `down`.
const DEEP_SPIN: &str = "import sys
def spin():
    s = 0
    while True:
        for i in range(1000):
            s += i
def down(n):
    if n == 0:
        spin()
    return down(n - 1)
down(int(sys.argv[1]))
";

/// The workloads compared, each two processes.
#[derive(Clone, Copy)]
enum Workload {
    Native,
    /// Python frames: `<module>`, `down` × (depth + 1), `spin`.
    Python {
        depth: u32,
    },
}

impl Workload {
    fn name(self) -> String {
        match self {
            Self::Native => "native (2 × dash spinning)".to_owned(),
            Self::Python { depth } => format!(
                "2 × python3.11, {} Python frames{}",
                depth + 3,
                if depth > 1 { " (recursion)" } else { "" }
            ),
        }
    }

    fn start(self, script: &Path) -> Result<Child> {
        let mut command = match self {
            Self::Native => {
                let mut command = Command::new("/bin/sh");
                command.args(["-c", "while :; do :; done"]);
                command
            }
            Self::Python { depth } => {
                let mut command = Command::new("/usr/bin/python3.11");
                command.arg(script).arg(depth.to_string());
                command
            }
        };
        command
            .stdout(Stdio::null())
            .spawn()
            .context("starting a spinning workload (Debian's python3.11 for the Python ones)")
    }
}

/// One run's figures: ns per program run, and the daemon's CPU in % of a
/// core.
struct Run {
    nanos_per_sample: f64,
    daemon_cpu_percent: f64,
}

pub async fn run(plan: &Plan, out_dir: &Path) -> Result<Table> {
    let (rounds, seconds) = if plan.quick { (1, 5) } else { (3, 20) };
    let workloads = [
        Workload::Native,
        Workload::Python { depth: 0 },
        Workload::Python { depth: 30 },
    ];
    println!(
        "\n== python frames: {rounds} rounds of {} workloads, {seconds} s each",
        workloads.len()
    );
    let dir = out_dir.join("runs/python");
    std::fs::create_dir_all(&dir)?;
    let script = dir.join("deep_spin.py");
    std::fs::write(&script, DEEP_SPIN)?;
    let mut runs: Vec<Vec<Run>> = workloads.iter().map(|_| Vec::new()).collect();
    for _ in 0..rounds {
        for (index, workload) in workloads.iter().enumerate() {
            runs[index].push(measure(*workload, &script, &dir, seconds).await?);
        }
    }

    let mut table = Table::new(
        "11. Python frames: the kernel's cost per sample and the daemon's CPU (99 Hz, two busy processes)",
        &[
            "workload",
            "eBPF per sample, µs",
            "added over native, µs",
            "daemon CPU, % of a core",
        ],
    );
    let spread = |runs: &[Run], figure: fn(&Run) -> f64| {
        Spread::of(&runs.iter().map(figure).collect::<Vec<_>>())
    };
    let native = spread(&runs[0], |run| run.nanos_per_sample).median;
    let mut deep_added = f64::NAN;
    let mut worst_cpu: f64 = 0.0;
    for (workload, runs) in workloads.iter().zip(&runs) {
        let cost = spread(runs, |run| run.nanos_per_sample / 1000.0);
        let cpu = spread(runs, |run| run.daemon_cpu_percent);
        let added = cost.median * 1000.0 - native;
        if let Workload::Python { depth } = workload {
            worst_cpu = worst_cpu.max(cpu.max);
            if *depth >= 30 {
                deep_added = added;
            }
        }
        table.row(vec![
            workload.name(),
            cost.show(2),
            match workload {
                Workload::Native => "—".to_owned(),
                Workload::Python { .. } => format!("{:+.2}", added / 1000.0),
            },
            cpu.show(2),
        ]);
    }
    table.note(format!(
        "A run: profilerd (release) at {FREQUENCY_HZ} Hz, two processes of the workload \
         started, 3 s to settle (a Python process's frames are read from about its first \
         second), then {seconds} s measured: the kernel's run-time statistics of profilerd's \
         perf_event programs (time over runs), and the daemon's user + system CPU \
         (`/proc/PID/stat`). Median (min–max) of {rounds} rounds, workloads interleaved in \
         each. Python: Debian's python3.11 (a stripped binary with libpython linked in)."
    ));
    table.note(format!(
        "Target (issue 43): at most +{:.0} µs per sample at 30 Python frames over a native \
         sample: {} ({:+.2} µs); the daemon within {DAEMON_CPU_TARGET}% of a core with two \
         busy Python processes: {} (at most {worst_cpu:.2}%).",
        ADDED_NANOS_TARGET / 1000.0,
        verdict(deep_added <= ADDED_NANOS_TARGET),
        deep_added / 1000.0,
        verdict(worst_cpu <= DAEMON_CPU_TARGET),
    ));
    Ok(table)
}

/// Runs `workload` beside a fresh daemon for `seconds` and measures it.
async fn measure(workload: Workload, script: &Path, dir: &Path, seconds: u64) -> Result<Run> {
    let state = dir.join("state");
    let _ = std::fs::remove_dir_all(&state);
    let existing = ebpf::perf_event_programs();
    let daemon = Profiler::start(
        Tool::Profilerd,
        FREQUENCY_HZ,
        dir,
        &["--state-dir".to_owned(), state.display().to_string()],
    )
    .await?;
    let mut children = Vec::new();
    let measured = async {
        for _ in 0..2 {
            children.push(workload.start(script)?);
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        let (programs, cpu) = (ebpf::perf_event_programs(), daemon.cpu_seconds()?);
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        let cost = ebpf::growth(&existing, &programs, &ebpf::perf_event_programs());
        let used = daemon.cpu_seconds()? - cpu;
        anyhow::Ok(Run {
            nanos_per_sample: cost.nanos_per_run(),
            daemon_cpu_percent: 100.0 * used / seconds as f64,
        })
    }
    .await;
    for mut child in children {
        let _ = child.kill();
        let _ = child.wait();
    }
    daemon.stop()?;
    let run = measured?;
    println!(
        "{}: {:.2} µs per sample, daemon {:.2}% of a core",
        workload.name(),
        run.nanos_per_sample / 1000.0,
        run.daemon_cpu_percent
    );
    Ok(run)
}
