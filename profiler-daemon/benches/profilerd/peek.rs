//! Question 7: how long after `kill -USR1` a peek's report is available
//! (to a WatchPeeks subscriber), and how long a `Peek` request takes, for
//! the default 1-second peek; next to what a user would otherwise do with
//! perf: `perf record -F 1000 -g -p PID -- sleep 1` then `perf report`.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail, ensure};
use profilerd_client::{self as client, v1};
use rustix::process::{Pid, Signal, kill_process};

use crate::{
    Plan,
    measure::{Spread, millis},
    report::{Table, verdict},
    tools::{Profiler, Tool},
    workloads::Workloads,
};

/// The target for a 1.0 s peek.
const TARGET: Duration = Duration::from_millis(1200);

pub async fn run(plan: &Plan, workloads: &Workloads, out_dir: &Path) -> Result<Table> {
    let rounds = if plan.quick { 2 } else { 10 };
    println!("\n== peek latency: {rounds} signals and {rounds} requests");
    let dir = out_dir.join("runs/peek");
    let state = dir.join("state");
    let daemon = Profiler::start(
        Tool::Profilerd,
        49,
        &dir,
        &["--state-dir".to_owned(), state.display().to_string()],
    )
    .await?;
    let mut target = Command::new(&workloads.peek_threads)
        .stdout(Stdio::null())
        .spawn()
        .context("starting peek_threads")?;
    let pid = target.id();
    let result = measure_peeks(&daemon, pid, rounds).await;
    let _ = target.kill();
    let _ = target.wait();
    daemon.stop()?;
    let (signalled, requested) = result?;
    let perf = perf_peek(
        start_peek_threads(workloads)?,
        if plan.quick { 1 } else { 3 },
    )?;

    let mut table = Table::new(
        "7. Peek latency (1.0 s peek at 1000 Hz)",
        &["how", "time to the report, ms", "peek itself, ms", "target"],
    );
    let signal_spread = Spread::of(
        &signalled
            .iter()
            .map(|(total, _)| *total)
            .collect::<Vec<_>>(),
    );
    let met = signal_spread.max <= millis(TARGET);
    table.row(vec![
        "profilerd: kill -USR1 → report to a WatchPeeks subscriber".into(),
        signal_spread.show(1),
        Spread::of(&signalled.iter().map(|(_, peek)| *peek).collect::<Vec<_>>()).show(1),
        format!("≤ {} ms: {}", TARGET.as_millis(), verdict(met)),
    ]);
    table.row(vec![
        "profilerd: Peek request → reply".into(),
        Spread::of(
            &requested
                .iter()
                .map(|(total, _)| *total)
                .collect::<Vec<_>>(),
        )
        .show(1),
        Spread::of(&requested.iter().map(|(_, peek)| *peek).collect::<Vec<_>>()).show(1),
        "—".into(),
    ]);
    table.row(vec![
        "perf record -F 1000 -g -p PID -- sleep 1, then perf report --stdio --sort tid,sym".into(),
        Spread::of(&perf).show(1),
        "1000 (sleep 1)".into(),
        "—".into(),
    ]);
    table.note(format!(
        "peek_threads (two busy threads, one asleep, a main thread) with a SIGUSR1 handler; \
         profilerd at 49 Hz system-wide and its default peek (1.0 s at 1000 Hz); {rounds} \
         rounds each, 300 ms apart. \"Peek itself\" is the sampled time the report states; \
         the rest is the daemon noticing the signal, attaching per-thread clocks, draining, \
         symbolizing and writing the report."
    ));
    table.note(format!(
        "Target: the report at most {} ms after the signal (worst of the rounds): {}.",
        TARGET.as_millis(),
        verdict(met)
    ));
    Ok(table)
}

/// Times `rounds` signals (report seen by a subscriber) and `rounds` Peek
/// requests: (time to the report, sampled time), in ms.
async fn measure_peeks(
    daemon: &Profiler,
    pid: u32,
    rounds: usize,
) -> Result<(Vec<(f64, f64)>, Vec<(f64, f64)>)> {
    let mut client = client::connect(&daemon.socket).await?;
    let mut reports = client
        .watch_peeks(v1::WatchPeeksRequest {})
        .await?
        .into_inner();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let target = Pid::from_raw(pid as i32).context("a real pid")?;
    let mut signalled = Vec::new();
    for _ in 0..rounds {
        let sent = Instant::now();
        kill_process(target, Signal::USR1)?;
        let report = tokio::time::timeout(Duration::from_secs(10), reports.message())
            .await
            .context("no peek report within 10 s of the signal")??
            .context("the WatchPeeks stream ended")?;
        ensure!(
            report.pid == pid,
            "a report of another process: {}",
            report.pid
        );
        signalled.push((millis(sent.elapsed()), report.duration_ms as f64));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let mut requested = Vec::new();
    for _ in 0..rounds {
        let sent = Instant::now();
        let report = client.peek(v1::PeekRequest { pid }).await?.into_inner();
        requested.push((millis(sent.elapsed()), report.duration_ms as f64));
        // The subscriber sees this one too; keep its stream drained.
        let _ = reports.message().await;
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    Ok((signalled, requested))
}

/// A fresh peek_threads for perf (killed when perf_peek returns).
fn start_peek_threads(workloads: &Workloads) -> Result<std::process::Child> {
    Command::new(&workloads.peek_threads)
        .arg("60")
        .stdout(Stdio::null())
        .spawn()
        .context("starting peek_threads")
}

/// What the same question costs with perf: record the process for one
/// second, then report it per thread. Returns the times in ms.
fn perf_peek(mut target: std::process::Child, rounds: usize) -> Result<Vec<f64>> {
    let dir = tempfile::tempdir()?;
    let data = dir.path().join("perf.data");
    let pid = target.id().to_string();
    std::thread::sleep(Duration::from_millis(300));
    let mut times = Vec::new();
    for _ in 0..rounds {
        let started = Instant::now();
        let recorded = Command::new("perf")
            .args(["record", "-F", "1000", "-g", "-p", &pid, "-o"])
            .arg(&data)
            .args(["--", "sleep", "1"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running perf record")?;
        let reported = Command::new("perf")
            .args(["report", "--stdio", "--sort", "tid,sym", "-i"])
            .arg(&data)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .context("running perf report")?;
        if !recorded.success() || !reported.success() {
            let _ = target.kill();
            bail!("perf record or perf report failed on process {pid}");
        }
        times.push(millis(started.elapsed()));
    }
    let _ = target.kill();
    let _ = target.wait();
    Ok(times)
}
