//! Question 1c: the two designs for whole user stacks side by side on the
//! same workload, in interleaved rounds at 99 Hz with both CPUs busy:
//! design 1 (profilerd as it ships: stack copies unwound in the daemon),
//! design 2 (the prototype `sample_unwind_tables`: rows compiled from
//! `.eh_frame` into BPF maps and walked in the kernel), with profilerd's
//! frame-pointer walk and bpftrace's as the reference the kernel cost is
//! held to. The workload is the tests' chain built `-O2
//! -fomit-frame-pointer`: a shallow stack (main → drive → hot_leaf) and a
//! deep one (a callback under libc's qsort).
//!
//! Built only with the `unwind-tables-prototype` feature, which `cargo
//! xtask bench` turns on.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result, ensure};
use profiler_common::unwind_table::cfa;
use profilerd::{kernel::unwind_tables::UnwindTablePrototype, unwind::table_rows};
use profilerd_client::v1;

use crate::{
    Plan, ebpf,
    measure::{Spread, mib},
    report::{Table, verdict},
    tools::{Profiler, Tool},
};

const HZ: u32 = 99;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Design {
    StackCopies,
    UnwindTables,
    FramePointers,
    Bpftrace,
}

impl Design {
    const ALL: [Design; 4] = [
        Design::StackCopies,
        Design::UnwindTables,
        Design::FramePointers,
        Design::Bpftrace,
    ];

    fn name(self) -> &'static str {
        match self {
            Design::StackCopies => "1: stack copies, unwound in the daemon",
            Design::UnwindTables => "2: unwind tables walked in the kernel",
            Design::FramePointers => "profilerd, frame pointers",
            Design::Bpftrace => "bpftrace, frame pointers",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Stack {
    Shallow,
    Deep,
}

impl Stack {
    fn name(self) -> &'static str {
        match self {
            Stack::Shallow => "chain (7 frames)",
            Stack::Deep => "qsort callback (~18 frames)",
        }
    }

    fn args(self) -> &'static [&'static str] {
        match self {
            Stack::Shallow => &["0"],
            Stack::Deep => &["0", "qsort"],
        }
    }
}

/// One measured run.
#[derive(Default)]
struct Run {
    ebpf_per_sample_us: f64,
    /// User-space CPU of the design, % of one core over the window.
    user_cpu_percent: f64,
    /// Share of the workload's stacks unwound whole (None: not known).
    whole_percent: Option<f64>,
    /// Unwind information held for the workload, bytes.
    held_bytes: Option<u64>,
    /// One-off work before sampling (compiling tables), ms.
    setup_ms: Option<f64>,
}

pub async fn run(plan: &Plan, out_dir: &Path) -> Result<Table> {
    let chain = build_chain(out_dir)?;
    let window = Duration::from_secs(if plan.quick { 3 } else { 6 });
    let rounds = if plan.quick { 1 } else { 5 };
    let mut runs: BTreeMap<(Stack, Design), Vec<Run>> = BTreeMap::new();
    for round in 0..rounds {
        for stack in [Stack::Shallow, Stack::Deep] {
            for design in Design::ALL {
                let run = measure_one(design, stack, &chain, window, out_dir).await?;
                println!(
                    "designs round {}/{rounds}: {:<40} {:<28} {:.2} µs per sample",
                    round + 1,
                    design.name(),
                    stack.name(),
                    run.ebpf_per_sample_us
                );
                runs.entry((stack, design)).or_default().push(run);
            }
        }
    }
    Ok(table(&runs))
}

fn build_chain(out_dir: &Path) -> Result<PathBuf> {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/chain.c");
    let binary = out_dir.join("chain-o2");
    let output = Command::new("gcc")
        .args(["-O2", "-g", "-fomit-frame-pointer", "-o"])
        .arg(&binary)
        .arg(&source)
        .output()
        .context("running gcc (the benchmark builds its workloads with it)")?;
    ensure!(
        output.status.success(),
        "gcc failed to build the chain workload:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    Ok(binary)
}

/// The workload on every CPU, killed when dropped.
struct Busy(Vec<Child>);

impl Busy {
    fn start(binary: &Path, stack: Stack) -> Result<Self> {
        let cpus = std::thread::available_parallelism().map_or(2, usize::from);
        let children = (0..cpus)
            .map(|_| {
                Command::new(binary)
                    .args(stack.args())
                    .stdout(Stdio::null())
                    .spawn()
                    .context("starting the chain workload")
            })
            .collect::<Result<_>>()?;
        Ok(Self(children))
    }

    fn pids(&self) -> Vec<u32> {
        self.0.iter().map(Child::id).collect()
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

async fn measure_one(
    design: Design,
    stack: Stack,
    chain: &Path,
    window: Duration,
    out_dir: &Path,
) -> Result<Run> {
    let busy = Busy::start(chain, stack)?;
    let existing = ebpf::perf_event_programs();
    match design {
        Design::UnwindTables => {
            let started = Instant::now();
            let mut prototype = UnwindTablePrototype::start(HZ, 1 << 20)?;
            for pid in busy.pids() {
                table_rows::add_process(&mut prototype, pid)?;
            }
            let setup = started.elapsed();
            // Let the first samples warm what they touch, as for the others.
            tokio::time::sleep(Duration::from_millis(500)).await;
            let counted_before = workload_samples(&mut prototype, &busy)?;
            let before = ebpf::perf_event_programs();
            tokio::time::sleep(window).await;
            let after = ebpf::perf_event_programs();
            let read_started = Instant::now();
            let samples = prototype.samples()?;
            let read = read_started.elapsed();
            let pids = busy.pids();
            let ours: Vec<_> = samples.iter().filter(|s| pids.contains(&s.pid)).collect();
            let total: u64 = ours.iter().map(|s| s.count).sum();
            let whole: u64 = ours
                .iter()
                .filter(|s| s.ended == cfa::END)
                .map(|s| s.count)
                .sum();
            let cost = ebpf::growth(&existing, &before, &after);
            // Every nanosecond the program spent, charged to the workload's
            // own samples (the others return after one lookup).
            let measured = total.saturating_sub(counted_before).max(1);
            Ok(Run {
                ebpf_per_sample_us: cost.nanos as f64 / measured as f64 / 1000.0,
                user_cpu_percent: 100.0 * read.as_secs_f64() / window.as_secs_f64(),
                whole_percent: Some(100.0 * whole as f64 / total.max(1) as f64),
                held_bytes: Some(prototype.size().bytes()),
                setup_ms: Some(setup.as_secs_f64() * 1000.0),
            })
        }
        Design::StackCopies | Design::FramePointers | Design::Bpftrace => {
            let tool = match design {
                Design::StackCopies => Tool::Profilerd,
                Design::FramePointers => Tool::ProfilerdFramePointers,
                _ => Tool::Bpftrace,
            };
            let dir = out_dir.join("runs").join(format!("design-{design:?}"));
            let profiler = Profiler::start(tool, HZ, &dir, &[]).await?;
            profiler.settle().await?;
            let status_before = profiler.status().await?;
            let cpu_before = profiler.cpu_seconds()?;
            let before = ebpf::perf_event_programs();
            tokio::time::sleep(window).await;
            let after = ebpf::perf_event_programs();
            let cpu_running = profiler.cpu_seconds()?;
            let unwinding = match (tool, &status_before) {
                (Tool::Profilerd, Some(before)) => {
                    // Two drains: everything sampled in the window is unwound.
                    profiler.settle().await?;
                    let after = profiler.status().await?;
                    before
                        .unwinding
                        .clone()
                        .zip(after.and_then(|s| s.unwinding))
                }
                _ => None,
            };
            let stopped = profiler.stop()?;
            let _ = std::fs::remove_dir_all(&dir);
            let cpu = match tool {
                Tool::Bpftrace => stopped.usage.cpu_seconds,
                _ => cpu_running,
            } - cpu_before;
            let cost = ebpf::growth(&existing, &before, &after);
            Ok(Run {
                ebpf_per_sample_us: cost.nanos_per_run() / 1000.0,
                user_cpu_percent: 100.0 * cpu.max(0.0) / window.as_secs_f64(),
                whole_percent: unwinding.as_ref().map(whole_share),
                held_bytes: unwinding.map(|(_, after)| after.bytes),
                setup_ms: None,
            })
        }
    }
}

/// A design's kernel cost per sample over bpftrace's, round by round.
fn ratio_to_bpftrace(
    runs: &BTreeMap<(Stack, Design), Vec<Run>>,
    stack: Stack,
    design: Design,
) -> Option<Spread> {
    let ours = runs.get(&(stack, design))?;
    let theirs = runs.get(&(stack, Design::Bpftrace))?;
    let ratios: Vec<f64> = ours
        .iter()
        .zip(theirs)
        .map(|(ours, theirs)| ours.ebpf_per_sample_us / theirs.ebpf_per_sample_us)
        .collect();
    (!ratios.is_empty()).then(|| Spread::of(&ratios))
}

fn workload_samples(prototype: &mut UnwindTablePrototype, busy: &Busy) -> Result<u64> {
    let pids = busy.pids();
    Ok(prototype
        .samples()?
        .iter()
        .filter(|s| pids.contains(&s.pid))
        .map(|s| s.count)
        .sum())
}

fn whole_share((before, after): &(v1::UnwindStatus, v1::UnwindStatus)) -> f64 {
    let (complete, unwound) = crate::unwind_info::unwound_between(before, after);
    100.0 * complete as f64 / unwound.max(1) as f64
}

fn table(runs: &BTreeMap<(Stack, Design), Vec<Run>>) -> Table {
    let mut table = Table::new(
        "1c. Two designs for whole user stacks, side by side (99 Hz, both CPUs busy)",
        &[
            "workload",
            "design",
            "eBPF per sample, µs",
            "vs bpftrace, same round",
            "user-space CPU, % of a core",
            "whole stacks, %",
            "unwind info held",
            "set-up per process, ms",
        ],
    );
    let spread = |stack, design, value: &dyn Fn(&Run) -> Option<f64>| -> Option<Spread> {
        let values: Vec<f64> = runs
            .get(&(stack, design))?
            .iter()
            .filter_map(value)
            .collect();
        (!values.is_empty()).then(|| Spread::of(&values))
    };
    let show = |spread: Option<Spread>, digits| spread.map_or("—".to_owned(), |s| s.show(digits));
    for stack in [Stack::Shallow, Stack::Deep] {
        for design in Design::ALL {
            let cost = spread(stack, design, &|r| Some(r.ebpf_per_sample_us));
            let ratio = ratio_to_bpftrace(runs, stack, design);
            table.row(vec![
                stack.name().to_owned(),
                design.name().to_owned(),
                show(cost, 2),
                ratio
                    .as_ref()
                    .map_or("—".to_owned(), |r| format!("{}×", r.show(2))),
                show(spread(stack, design, &|r| Some(r.user_cpu_percent)), 3),
                show(spread(stack, design, &|r| r.whole_percent), 2),
                spread(stack, design, &|r| r.held_bytes.map(|b| b as f64))
                    .map_or("—".to_owned(), |s| {
                        format!("{:.2} MiB", mib(s.median as u64))
                    }),
                show(spread(stack, design, &|r| r.setup_ms), 1),
            ]);
        }
        let ratio =
            |design| ratio_to_bpftrace(runs, stack, design).map_or(f64::NAN, |ratio| ratio.median);
        table.note(format!(
            "{}: kernel cost per sample against bpftrace's frame-pointer walk in the same \
             round (median of the rounds' ratios): design 1 {:.2}×, {}; design 2 {:.2}×, {}.",
            stack.name(),
            ratio(Design::StackCopies),
            verdict(ratio(Design::StackCopies) <= 1.0),
            ratio(Design::UnwindTables),
            verdict(ratio(Design::UnwindTables) <= 1.0),
        ));
    }
    table.note(
        "eBPF per sample: the kernel's run-time statistics of each design's perf_event programs \
         over the window, per run (design 2: per sample of the workload, which charges it the \
         early returns of other tasks' ticks too). profilerd's programs also read the sample's \
         credentials, command, cgroup and memory map state and announce new processes; the \
         prototype only walks and aggregates stacks. User-space CPU: the daemon's (design 1 \
         includes unwinding), bpftrace's including its exit, the prototype's map reads at the \
         end (its set-up, compiling `.eh_frame` into rows and writing them, is shown apart).",
    );
    table
}
