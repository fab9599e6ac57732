//! Question 8: what recording off-CPU time costs. Per context switch,
//! with `perf bench sched pipe` pinned to one CPU (two switches per
//! operation): no daemon, the switch program attached with nothing
//! recorded, another process recorded, and the benchmark itself recorded.
//! Then whether anything is lost at the switch rate an unpinned pipe
//! benchmark reaches, and what the default setting costs a whole machine
//! under `perf bench sched messaging`.

use std::{
    path::Path,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, bail};
use profilerd_client::{self as client, v1};

use crate::{
    Plan, ebpf,
    measure::{self, Spread},
    report::{Table, verdict},
    tools::{Profiler, Tool},
};

/// The targets, per context switch.
const NOT_SELECTED_TARGET_US: f64 = 0.3;
const SELECTED_TARGET_US: f64 = 3.0;
/// The daemon's CPU at 99 Hz (question 1's target).
const DAEMON_CPU_TARGET_PERCENT: f64 = 0.5;

pub async fn run(plan: &Plan, out_dir: &Path) -> Result<Vec<Table>> {
    let rounds = if plan.quick { 2 } else { 5 };
    let loops = if plan.quick { 50_000 } else { 200_000 };
    println!("\n== off-CPU cost: perf bench sched pipe, {rounds} rounds of {loops} operations");
    let dir = out_dir.join("runs/offcpu");
    let none = pipe_rounds(rounds, loops)?;
    let messaging_alone = messaging_rounds(rounds)?;
    let daemon = Profiler::start(
        Tool::Profilerd,
        99,
        &dir,
        &[
            "--state-dir".to_owned(),
            dir.join("state").display().to_string(),
        ],
    )
    .await?;
    daemon.settle().await?;
    // The daemon's own threads on the other CPU: the rows measure what the
    // programs add to each switch, not the daemon competing for CPU 0
    // (its CPU is measured in 8c and in question 1).
    let pinned = Command::new("taskset")
        .args(["-a", "-p", "2", &daemon.pid().to_string()])
        .stdout(Stdio::null())
        .status()
        .context("running taskset")?;
    if !pinned.success() {
        bail!("taskset could not move profilerd to CPU 1");
    }
    let attached = measured(|most| pipe_rounds(rounds.min(most), loops))?;
    // Another process recorded: the program looks each switch up.
    let mut sleeper = Command::new("sleep")
        .arg("3600")
        .spawn()
        .context("starting sleep")?;
    let other = session(&daemon, vec![sleeper.id()]).await?;
    let other_selected = measured(|most| pipe_rounds(rounds.min(most), loops))?;
    stop(&daemon, other).await?;
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    // Every process recorded, the benchmark with them.
    let everything = session(&daemon, Vec::new()).await?;
    let recorded = measured(|most| pipe_rounds(rounds.min(most), loops))?;
    stop(&daemon, everything).await?;

    let base = Spread::of(&none).median;
    let per_switch = |usecs: &[f64]| (Spread::of(usecs).median - base) / 2.0;
    let mut cost = Table::new(
        "8. Off-CPU recording: cost per context switch",
        &[
            "condition",
            "µs per operation",
            "added per switch, µs",
            "record_switch per run, ns",
            "record_wakeup per run, ns",
            "target",
        ],
    );
    cost.row(vec![
        "no daemon".into(),
        Spread::of(&none).show(2),
        "—".into(),
        "—".into(),
        "—".into(),
        "—".into(),
    ]);
    let not_selected = per_switch(&other_selected.0);
    for (name, (usecs, switch, wakeup), target) in [
        (
            "daemon running, nothing recorded (programs detached)",
            &attached,
            String::from("—"),
        ),
        (
            "another process recorded (this one not selected)",
            &other_selected,
            format!(
                "≤ {NOT_SELECTED_TARGET_US} µs: {}",
                verdict(not_selected <= NOT_SELECTED_TARGET_US)
            ),
        ),
        (
            "every process recorded (this one selected)",
            &recorded,
            format!(
                "≤ {SELECTED_TARGET_US} µs: {}",
                verdict(per_switch(&recorded.0) <= SELECTED_TARGET_US)
            ),
        ),
    ] {
        cost.row(vec![
            name.into(),
            Spread::of(usecs).show(2),
            format!("{:.2}", per_switch(usecs)),
            format!("{:.0}", switch.nanos_per_run()),
            format!("{:.0}", wakeup.nanos_per_run()),
            target,
        ]);
    }
    cost.note(format!(
        "`taskset -c 0 perf bench sched pipe -T -l {loops}`, {rounds} rounds each, median (min–max); \
         one operation is two context switches (and a wake-up), timed with the kernel's \
         run-time statistics off. \"Per run\" is the kernel's own measure of each program \
         (BPF_ENABLE_STATS, which itself adds some tens of ns per run) over one more round \
         with them on, on every switch of the machine. profilerd at 99 Hz, its \
         default settings (offcpu = 0), its threads moved to CPU 1 (`taskset -a -p 2`) so \
         that they do not compete with the benchmark; recordings are sessions of --mode wall."
    ));

    let losses = losses_under_load(&daemon, if plan.quick { 10 } else { 60 }).await?;
    // Question 8c is the daemon as it runs on a machine: on every CPU.
    let every_cpu = format!("0-{}", std::thread::available_parallelism()?.get() - 1);
    let unpinned = Command::new("taskset")
        .args(["-a", "-c", "-p", &every_cpu, &daemon.pid().to_string()])
        .stdout(Stdio::null())
        .status()
        .context("running taskset")?;
    if !unpinned.success() {
        bail!("taskset could not let profilerd run on every CPU again");
    }
    let messaging = messaging_slowdown(&daemon, &messaging_alone)?;
    daemon.stop()?;
    Ok(vec![cost, losses, messaging])
}

/// µs per operation of `rounds` pinned pipe benchmarks.
fn pipe_rounds(rounds: usize, loops: u64) -> Result<Vec<f64>> {
    (0..rounds)
        .map(|_| pipe_usecs_per_op(loops, true))
        .collect()
}

/// The rounds (with the kernel's run-time statistics off: they add their
/// own cost to every run), then one more round with them on, for what the
/// switch and wake-up programs cost per run.
fn measured(
    rounds: impl Fn(usize) -> Result<Vec<f64>>,
) -> Result<(Vec<f64>, ebpf::Cost, ebpf::Cost)> {
    let programs = || {
        (
            ebpf::programs_named("record_switch"),
            ebpf::programs_named("record_wakeup"),
        )
    };
    let grown = |before: ebpf::Cost, after: ebpf::Cost| ebpf::Cost {
        runs: after.runs.saturating_sub(before.runs),
        nanos: after.nanos.saturating_sub(before.nanos),
    };
    let usecs = rounds(usize::MAX)?;
    let stats = ebpf::enable_stats()?;
    let before = programs();
    rounds(1)?;
    let after = programs();
    drop(stats);
    Ok((usecs, grown(before.0, after.0), grown(before.1, after.1)))
}

fn pipe_usecs_per_op(loops: u64, pinned: bool) -> Result<f64> {
    let mut command = if pinned {
        let mut command = Command::new("taskset");
        command.args(["-c", "0", "perf"]);
        command
    } else {
        Command::new("perf")
    };
    let output = command
        .args(["bench", "sched", "pipe", "-T", "-l", &loops.to_string()])
        .stderr(Stdio::null())
        .output()
        .context("running perf bench sched pipe (Debian's linux-perf)")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find(|line| line.contains("usecs/op"))
        .and_then(|line| line.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no usecs/op in perf bench's output:\n{text}"))
}

/// Opens a wall-clock session over `pids` (every process when empty).
async fn session(daemon: &Profiler, pids: Vec<u32>) -> Result<String> {
    let mut client = client::connect(&daemon.socket).await?;
    Ok(client
        .start_profile(v1::StartProfileRequest {
            selector: Some(v1::Selector {
                pids,
                ..Default::default()
            }),
            mode: v1::Mode::Wall as i32,
            children: false,
        })
        .await?
        .into_inner()
        .session_id)
}

async fn stop(daemon: &Profiler, session_id: String) -> Result<v1::ProfileReply> {
    let mut client = client::connect(&daemon.socket).await?;
    Ok(client
        .stop_profile(v1::StopProfileRequest {
            session_id,
            options: Some(v1::ReportOptions {
                format: v1::Format::Folded as i32,
                ..Default::default()
            }),
            force: false,
        })
        .await?
        .into_inner())
}

/// Everything recorded while an unpinned pipe benchmark switches as fast
/// as it can for `seconds`: the switch rate reached and every loss.
async fn losses_under_load(daemon: &Profiler, seconds: u64) -> Result<Table> {
    println!("== off-CPU losses: every process recorded, {seconds} s of perf bench sched pipe");
    // The rate, to size the run.
    let usecs = pipe_usecs_per_op(20_000, false)?;
    let loops = (seconds as f64 * 1e6 / usecs) as u64;
    let before = daemon.status().await?.context("a status")?;
    let session_id = session(daemon, Vec::new()).await?;
    let started = Instant::now();
    let run = tokio::task::spawn_blocking(move || pipe_usecs_per_op(loops, false));
    let usecs = run.await??;
    let elapsed = started.elapsed().as_secs_f64();
    let report = stop(daemon, session_id).await?;
    // The waits recorded last have their stack copies read at the
    // unwinder's next pass (every 50 to 150 ms), and the kernel's counters (waits
    // recorded, lost) are read at each drain (every second): once recording
    // has ended, the status settles within a drain or two. Read before it
    // does, such a wait counts as recorded and not yet under way.
    let mut after = daemon.status().await?.context("a status")?;
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(1_200)).await;
        let again = daemon.status().await?.context("a status")?;
        let settled = again.offcpu == after.offcpu;
        after = again;
        if settled {
            break;
        }
    }
    let offcpu = |status: &v1::StatusReply| status.offcpu.clone().unwrap_or_default();
    let (start, end) = (offcpu(&before), offcpu(&after));
    let lost = |status: &v1::StatusReply| -> u64 {
        status
            .samples_lost
            .iter()
            .filter(|loss| loss.cause.starts_with("offcpu_"))
            .map(|loss| loss.count)
            .sum()
    };
    let lost_waits = lost(&after) - lost(&before);
    let switches = end.switches - start.switches;
    let recorded = end.recorded - start.recorded;
    let charged = end.charged - start.charged;
    // Every wait recorded (or found waiting) is charged, abandoned, under
    // way, or lost with its stack (seen ending, or dropped at the end).
    let delta = |field: fn(&v1::OffCpuStatus) -> u64| field(&end).saturating_sub(field(&start));
    let accounted = charged
        + delta(|status| status.abandoned)
        + end.under_way
        + delta(|status| status.stack_lost)
        + delta(|status| status.dropped)
        + delta(|status| status.lost_whole);
    let unaccounted = (recorded + delta(|status| status.already_waiting)).saturating_sub(accounted);
    let mut table = Table::new(
        "8b. Off-CPU recording under load: every loss counted",
        &[
            "switches per second",
            "waits recorded",
            "charged",
            "lost (counted)",
            "unaccounted",
            "report samples",
            "target",
        ],
    );
    let samples = report.summary.map_or(0, |summary| summary.samples);
    table.row(vec![
        format!("{:.0}", switches as f64 / elapsed),
        recorded.to_string(),
        charged.to_string(),
        lost_waits.to_string(),
        unaccounted.to_string(),
        samples.to_string(),
        format!(
            "no loss at 100k/s, or every loss counted: {}",
            verdict(unaccounted == 0)
        ),
    ]);
    table.note(format!(
        "`perf bench sched pipe -T -l {loops}` ({usecs:.1} µs per operation, {elapsed:.0} s) \
         with a --mode wall session over every process. Lost waits are counted by cause \
         (offcpu_pending_full, offcpu_stack_copy_buffer_full, offcpu_intervals_full); \
         \"unaccounted\" is what was recorded (or found waiting) but neither charged, \
         abandoned, still under way, lost with its stack, nor lost whole (stack and interval) \
         (it must be 0)."
    ));
    if switches == 0 {
        bail!("the off-CPU program saw no switch: is it attached?");
    }
    Ok(table)
}

/// `perf bench sched messaging` with the daemon at its default setting
/// (nothing recorded off CPU), against `alone` (no daemon), and the
/// daemon's CPU meanwhile.
fn messaging_slowdown(daemon: &Profiler, alone: &[f64]) -> Result<Table> {
    println!("== off-CPU default cost: perf bench sched messaging");
    // One round first, not measured: the daemon in its steady state, as in
    // question 1 (it has seen the program, and the sessions of question 8
    // have ended).
    messaging_seconds()?;
    // Per thread: report threads of the sessions before may end meanwhile.
    let cpu = measure::CpuClock::start(daemon.pid())?;
    let started = Instant::now();
    let with = messaging_rounds(alone.len())?;
    let daemon_cpu = cpu.seconds()? / started.elapsed().as_secs_f64();
    let (alone_median, with_median) = (Spread::of(alone).median, Spread::of(&with).median);
    let mut table = Table::new(
        "8c. Off-CPU at the default setting: perf bench sched messaging",
        &[
            "profilerd",
            "seconds",
            "slowdown",
            "daemon CPU, % of a core",
            "target",
        ],
    );
    table.row(vec![
        "none".into(),
        Spread::of(alone).show(3),
        "—".into(),
        "—".into(),
        "—".into(),
    ]);
    table.row(vec![
        "running (99 Hz, offcpu = 0)".into(),
        Spread::of(&with).show(3),
        format!("{:+.1}%", (with_median / alone_median - 1.0) * 100.0),
        format!("{:.2}", daemon_cpu * 100.0),
        format!(
            "daemon ≤ {DAEMON_CPU_TARGET_PERCENT}% of a core (question 1's): {}",
            verdict(daemon_cpu * 100.0 <= DAEMON_CPU_TARGET_PERCENT)
        ),
    ]);
    table.note(
        "`perf bench sched messaging -g 10 -l 500` (400 tasks passing messages over sockets), \
         median (min–max) of the rounds; on this 2-CPU VM the slowdown has measured -14% to \
         +19% across bench runs, so only a larger one means something. At the default \
         setting nothing is recorded and the off-CPU programs are not attached. Each round \
         starts 400 processes, which the daemon reads and symbolizes as they are sampled: \
         that, not off-CPU time, is most of its CPU here. The daemon's CPU is over the \
         measured rounds, after one round not measured (its steady state, as in question 1), \
         its threads on every CPU.",
    );
    Ok(table)
}

fn messaging_rounds(rounds: usize) -> Result<Vec<f64>> {
    (0..rounds).map(|_| messaging_seconds()).collect()
}

fn messaging_seconds() -> Result<f64> {
    let output = Command::new("perf")
        .args(["bench", "sched", "messaging", "-g", "10", "-l", "500"])
        .stderr(Stdio::null())
        .output()
        .context("running perf bench sched messaging")?;
    let text = String::from_utf8_lossy(&output.stdout);
    text.lines()
        .find(|line| line.contains("Total time"))
        .and_then(|line| line.split_whitespace().find_map(|word| word.parse().ok()))
        .with_context(|| format!("no total time in perf bench's output:\n{text}"))
}
