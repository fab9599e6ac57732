//! Questions 3, 4 and 5, on one long run: profilerd at 1000 Hz holding its
//! whole retention window of a storm of short-lived processes producing
//! distinct stacks — its peak memory, what it lost, and how fast it answers
//! report requests over that window. perf and bpftrace face the same storm
//! for comparison. Question 5 is asked again over the default hour of
//! retention (`scale-hour`, on its own: it takes over an hour).

use std::{
    path::Path,
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use profilerd_client::{self as client, v1};

use crate::{
    Plan,
    latency::{self, Measured},
    measure::{self, mib, millis},
    report::{Table, verdict},
    tools::{Profiler, Tool},
    workloads::Workloads,
};

const HZ: u32 = 1000;
const MEMORY_TARGET_MIB: f64 = 100.0;
const STACKS_WANTED: u64 = 50_000;
const PROCESSES_WANTED: u64 = 200;

pub async fn run(plan: &Plan, workloads: &Workloads, out_dir: &Path) -> Result<Vec<Table>> {
    let width = std::thread::available_parallelism().map_or(1, |n| n.get());
    let ours = run_profilerd(plan, workloads, out_dir, width).await?;
    let mut others = Vec::new();
    for tool in [Tool::Perf, Tool::Bpftrace] {
        others.push(run_other(tool, plan, workloads, out_dir, width).await?);
    }
    Ok(vec![
        memory_table(plan, &ours, &others),
        loss_table(&ours, &others),
        latency_table(
            "5. Report latency over the held window",
            plan,
            &ours,
            &others,
        ),
    ])
}

/// Question 5 over the daemon's default retention of an hour (a minute in
/// a quick run), profilerd alone.
pub async fn run_hour(plan: &Plan, workloads: &Workloads, out_dir: &Path) -> Result<Vec<Table>> {
    let width = std::thread::available_parallelism().map_or(1, |n| n.get());
    let plan = Plan {
        scale_window: if plan.quick {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(3600)
        },
        ..plan.clone()
    };
    let ours = run_profilerd(&plan, workloads, out_dir, width).await?;
    let mut table = latency_table(
        "5c. Report latency over an hour's window",
        &plan,
        &ours,
        &[],
    );
    table.note(format!(
        "The store held {:.1} of {:.1} MiB; {} buckets evicted for memory.",
        mib(ours.store_bytes),
        mib(ours.store_limit),
        ours.evicted
    ));
    Ok(vec![table])
}

/// What profilerd did with the storm.
struct Ours {
    held: Duration,
    processes: u64,
    distinct_stacks: u64,
    /// Peak RSS while holding the window, before any report request.
    peak_rss_holding: u64,
    /// Peak RSS once the report requests of table 5 were served too.
    peak_rss: u64,
    store_bytes: u64,
    store_limit: u64,
    evicted: u64,
    samples_taken: u64,
    lost: Vec<v1::LossCount>,
    cpu_per_minute: f64,
    /// Latencies of the requests of question 5.
    latencies: Vec<latency::Row>,
    top: latency::TopCost,
}

async fn run_profilerd(
    plan: &Plan,
    workloads: &Workloads,
    out_dir: &Path,
    width: usize,
) -> Result<Ours> {
    let retention = humantime::format_duration(plan.scale_window).to_string();
    println!(
        "\n== scale: profilerd at {HZ} Hz holding {retention} of a storm of short-lived \
         processes ({width} at a time, skewed paths from a pool of 10000)"
    );
    let dir = out_dir.join("runs").join("scale-profilerd");
    // The web view's requests come over plaintext loopback HTTP.
    let http = format!(
        "127.0.0.1:{}",
        std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port()
    );
    let profiler = Profiler::start(
        Tool::Profilerd,
        HZ,
        &dir,
        &[
            "--retention".to_owned(),
            retention,
            "--http-listen".to_owned(),
            http.clone(),
            "--http-plaintext-loopback".to_owned(),
            "true".to_owned(),
        ],
    )
    .await?;
    let mut daemon = client::connect(&profiler.socket).await?;
    let cpu = measure::CpuClock::start(profiler.pid())?;
    let started = Instant::now();
    let storm = workloads.start_stack_storm(86_400.0, width)?;
    while started.elapsed() < plan.scale_window {
        tokio::time::sleep(Duration::from_secs(10).min(plan.scale_window)).await;
        let status = daemon
            .get_status(v1::GetStatusRequest::default())
            .await?
            .into_inner();
        let store = status.store.unwrap_or_default();
        println!(
            "{:>5.0} s: {} distinct stacks, store {:.1} MiB, daemon RSS peak {:.1} MiB",
            started.elapsed().as_secs_f64(),
            store.distinct_stacks,
            mib(store.memory_bytes),
            mib(measure::peak_rss_bytes(profiler.pid())?)
        );
    }
    let held = started.elapsed();
    let peak_rss_holding = measure::peak_rss_bytes(profiler.pid())?;
    let cpu_per_minute = cpu.seconds()? / held.as_secs_f64() * 60.0;

    // Report requests over everything held, the storm still running.
    let latencies = latency::ask_all(&mut daemon, &http, plan).await?;

    let top = latency::top_cost(&profiler, &mut daemon, plan).await?;
    println!(
        "   top: daemon {:.2}% of a core with a stream, {:.2}% without ({} updates)",
        top.with * 100.0,
        top.without * 100.0,
        top.updates
    );

    let status = daemon
        .get_status(v1::GetStatusRequest::default())
        .await?
        .into_inner();
    let peak_rss = measure::peak_rss_bytes(profiler.pid())?;
    print_memory_parts(status.memory.as_ref());
    let processes = storm.stop()?;
    let stopped = profiler.stop()?;
    let let_go = stopped
        .output
        .lines()
        .filter(|line| line.contains("let go of"))
        .count();
    println!("   the daemon logged {let_go} lines letting go of something for memory");
    let _ = std::fs::remove_dir_all(&dir);
    let store = status.store.unwrap_or_default();
    Ok(Ours {
        held,
        processes,
        distinct_stacks: store.distinct_stacks,
        peak_rss_holding,
        peak_rss,
        store_bytes: store.memory_bytes,
        store_limit: store.memory_limit_bytes,
        evicted: store.buckets_evicted_for_memory,
        samples_taken: status.samples_taken,
        lost: status.samples_lost,
        cpu_per_minute,
        latencies,
        top,
    })
}

/// Prints each part of the daemon's memory against its share, after the
/// report requests: which part held what, and what it let go of.
fn print_memory_parts(memory: Option<&v1::MemoryStatus>) {
    let Some(memory) = memory else { return };
    for part in &memory.parts {
        println!(
            "   memory: {:<15} {:>7.1} of {:>6.1} MiB, let go of {} {}",
            part.name,
            mib(part.held_bytes),
            mib(part.share_bytes),
            part.evicted,
            part.evicted_unit
        );
    }
}

/// What perf or bpftrace did with the same storm.
struct Other {
    tool: Tool,
    seconds: f64,
    processes: u64,
    peak_rss: u64,
    cpu_per_minute: f64,
    /// perf: samples written and lost; bpftrace: keys printed.
    detail: String,
    lost: Option<u64>,
    /// How long their own report took (perf report; bpftrace prints at exit).
    report_ms: Option<f64>,
}

async fn run_other(
    tool: Tool,
    plan: &Plan,
    workloads: &Workloads,
    out_dir: &Path,
    width: usize,
) -> Result<Other> {
    println!(
        "\n== scale: {} at {HZ} Hz, {} s of the same storm",
        tool.name(),
        plan.compare_seconds
    );
    let dir = out_dir.join("runs").join(format!("scale-{tool:?}"));
    let profiler = Profiler::start(tool, HZ, &dir, &[]).await?;
    let cpu_before = profiler.cpu_seconds()?;
    let started = Instant::now();
    let storm = workloads.start_stack_storm(86_400.0, width)?;
    tokio::time::sleep(Duration::from_secs_f64(plan.compare_seconds)).await;
    let processes = storm.stop()?;
    let seconds = started.elapsed().as_secs_f64();
    let stopping = Instant::now();
    let stopped = profiler.stop()?;
    let stop_ms = millis(stopping.elapsed());
    let cpu_per_minute = (stopped.usage.cpu_seconds - cpu_before) / seconds * 60.0;
    let (detail, lost, report_ms) = match tool {
        Tool::Perf => {
            let samples = stopped
                .output
                .split("samples)")
                .next()
                .and_then(|head| head.rsplit('(').next())
                .and_then(|count| count.trim().parse::<u64>().ok());
            let report = Instant::now();
            let output = std::process::Command::new("perf")
                .args(["report", "--stdio", "-i"])
                .arg(dir.join("perf.data"))
                .output()
                .context("running perf report")?;
            let report_ms = output.status.success().then(|| millis(report.elapsed()));
            (
                format!(
                    "{} samples written",
                    samples.map_or("?".to_owned(), |n| n.to_string())
                ),
                Some(stopped.perf_lost()),
                report_ms,
            )
        }
        _ => (
            format!("{} distinct keys held and printed", stopped.bpftrace_keys()),
            None,
            Some(stop_ms),
        ),
    };
    let _ = std::fs::remove_dir_all(&dir);
    println!(
        "{}: {detail}, peak RSS {:.1} MiB",
        tool.name(),
        mib(stopped.usage.peak_rss_bytes)
    );
    Ok(Other {
        tool,
        seconds,
        processes,
        peak_rss: stopped.usage.peak_rss_bytes,
        cpu_per_minute,
        detail,
        lost,
        report_ms,
    })
}

fn memory_table(plan: &Plan, ours: &Ours, others: &[Other]) -> Table {
    let mut table = Table::new(
        "3. Memory at scale (storm of short-lived processes at 1000 Hz)",
        &[
            "profiler",
            "held",
            "processes",
            "what it holds",
            "peak RSS, MiB",
            "with reports, MiB",
            "CPU-s per minute",
        ],
    );
    table.row(vec![
        Tool::Profilerd.name().to_owned(),
        format!("{:.0} s", ours.held.as_secs_f64()),
        ours.processes.to_string(),
        format!(
            "{} distinct stacks; store {:.1} of {:.1} MiB, {} buckets evicted for memory",
            ours.distinct_stacks,
            mib(ours.store_bytes),
            mib(ours.store_limit),
            ours.evicted
        ),
        format!("{:.1}", mib(ours.peak_rss_holding)),
        format!("{:.1}", mib(ours.peak_rss)),
        format!("{:.3}", ours.cpu_per_minute),
    ]);
    for other in others {
        table.row(vec![
            other.tool.name().to_owned(),
            format!("{:.0} s", other.seconds),
            other.processes.to_string(),
            other.detail.clone(),
            format!("{:.1}", mib(other.peak_rss)),
            "—".to_owned(),
            format!("{:.3}", other.cpu_per_minute),
        ]);
    }
    table.note(format!(
        "stack_storm keeps one process per CPU busy, each living 1–5 s and walking random \
         depth-8 paths through 32 functions, drawn from a pool of 10,000 with the first paths \
         far more often than the last (bounded and skewed, as a real service's stacks are; \
         the instructions a sample lands on make several distinct stacks per path). profilerd runs with retention {} and the default \
         memory ceiling; its peak RSS (VmHWM) is taken once it holds the whole window, and again \
         after the report requests of table 5, which add the size of the largest report (the \
         tree of every stack, in the table) a few times over while it is built and sent. perf \
         and bpftrace face the same storm for {:.0} s; their peak RSS includes writing out at \
         exit.",
        humantime::format_duration(plan.scale_window),
        plan.compare_seconds
    ));
    let enough = ours.distinct_stacks >= STACKS_WANTED && ours.processes >= PROCESSES_WANTED;
    let met =
        mib(ours.peak_rss_holding) <= MEMORY_TARGET_MIB && ours.store_bytes <= ours.store_limit;
    table.note(format!(
        "Target: at most {MEMORY_TARGET_MIB} MiB while holding at least {STACKS_WANTED} distinct \
         stacks across {PROCESSES_WANTED} processes, and the ceiling holds: {} ({:.1} MiB holding; \
         {:.1} MiB after serving the reports){}.",
        verdict(met),
        mib(ours.peak_rss_holding),
        mib(ours.peak_rss),
        if enough {
            String::new()
        } else {
            format!(
                " — but this run held only {} stacks from {} processes, short of the size the \
                 target is set for (run the full benchmark)",
                ours.distinct_stacks, ours.processes
            )
        }
    ));
    table
}

fn loss_table(ours: &Ours, others: &[Other]) -> Table {
    let mut table = Table::new(
        "4. Losses at 1000 Hz on every CPU",
        &["profiler", "samples", "lost", "by cause"],
    );
    let lost: u64 = ours.lost.iter().map(|loss| loss.count).sum();
    let causes: Vec<String> = ours
        .lost
        .iter()
        .filter(|loss| loss.count > 0)
        .map(|loss| format!("{}={}", loss.cause, loss.count))
        .collect();
    table.row(vec![
        Tool::Profilerd.name().to_owned(),
        ours.samples_taken.to_string(),
        lost.to_string(),
        if causes.is_empty() {
            "none".to_owned()
        } else {
            causes.join(", ")
        },
    ]);
    for other in others {
        table.row(vec![
            other.tool.name().to_owned(),
            other.detail.clone(),
            other
                .lost
                .map_or("not reported".to_owned(), |lost| lost.to_string()),
            match other.tool {
                Tool::Bpftrace => "a full map drops new keys silently".to_owned(),
                _ => "as perf printed it".to_owned(),
            },
        ]);
    }
    table.note(format!(
        "Over the whole scale run ({:.0} s at {HZ} Hz, {} distinct stacks). Target: zero: {}.",
        ours.held.as_secs_f64(),
        ours.distinct_stacks,
        verdict(lost == 0)
    ));
    table
}

fn latency_table(title: &str, plan: &Plan, ours: &Ours, others: &[Other]) -> Table {
    let others: Vec<(String, f64)> = others
        .iter()
        .filter_map(|other| {
            let name = match other.tool {
                Tool::Perf => format!("perf report --stdio ({:.0} s of data)", other.seconds),
                _ => format!(
                    "bpftrace printing its map at exit ({:.0} s of data)",
                    other.seconds
                ),
            };
            Some((name, other.report_ms?))
        })
        .collect();
    let measured = Measured {
        held: ours.held,
        distinct_stacks: ours.distinct_stacks,
        rows: &ours.latencies,
        top: &ours.top,
        peak_rss_holding: ours.peak_rss_holding,
        peak_rss: ours.peak_rss,
    };
    latency::table(title, plan, &measured, &others)
}
