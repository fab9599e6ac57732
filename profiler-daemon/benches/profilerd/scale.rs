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
    measure::{self, Spread, mib, millis, percentile},
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
    /// Latencies in ms and report sizes, per format.
    latencies: Vec<(&'static str, Vec<f64>, usize)>,
    top: TopCost,
}

/// The daemon's CPU (a share of one core) with a Top stream open and
/// without, the storm running.
struct TopCost {
    span: Duration,
    without: f64,
    with: f64,
    updates: u64,
}

/// The pause before each request of the rows asked as a dashboard asks.
const DASHBOARD_PAUSE: Duration = Duration::from_secs(3);

/// The rows that ask for every section (`maxsections 0`).
const EVERY_SECTION_TREE: &str = "tree per process, every section";
const EVERY_SECTION_FLAT: &str = "flat per process, every section";

fn every_section(row: &str) -> bool {
    row == EVERY_SECTION_TREE || row == EVERY_SECTION_FLAT
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
    let profiler = Profiler::start(
        Tool::Profilerd,
        HZ,
        &dir,
        &["--retention".to_owned(), retention],
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
    let mut latencies = Vec::new();
    // One tree of the whole machine, as in earlier runs, then the default
    // of tree and flat (a section per process), back to back; then two
    // formats asked as a dashboard asks, every few seconds.
    let back_to_back = (plan.query_requests, Duration::ZERO);
    let dashboard = ((plan.query_requests / 2).max(3), DASHBOARD_PAUSE);
    for (name, format, groupby, (requests, pause)) in [
        ("tree", v1::Format::Tree, v1::GroupBy::None, back_to_back),
        ("flat", v1::Format::Flat, v1::GroupBy::None, back_to_back),
        (
            "folded",
            v1::Format::Folded,
            v1::GroupBy::None,
            back_to_back,
        ),
        ("pprof", v1::Format::Pprof, v1::GroupBy::None, back_to_back),
        // pprof's default: a sample per thread and stack, as the pprof rows
        // of runs before groupby applied to pprof.
        (
            "pprof per thread",
            v1::Format::Pprof,
            v1::GroupBy::Thread,
            back_to_back,
        ),
        (
            "flamegraph",
            v1::Format::Flamegraph,
            v1::GroupBy::None,
            back_to_back,
        ),
        (
            "speedscope",
            v1::Format::Speedscope,
            v1::GroupBy::None,
            back_to_back,
        ),
        (
            "tree per process",
            v1::Format::Tree,
            v1::GroupBy::Unspecified,
            back_to_back,
        ),
        (
            "flat per process",
            v1::Format::Flat,
            v1::GroupBy::Unspecified,
            back_to_back,
        ),
        // The rows per process of runs before `maxsections` (2026-11-27).
        (
            EVERY_SECTION_TREE,
            v1::Format::Tree,
            v1::GroupBy::Unspecified,
            back_to_back,
        ),
        (
            EVERY_SECTION_FLAT,
            v1::Format::Flat,
            v1::GroupBy::Unspecified,
            back_to_back,
        ),
        (
            "tree, every 3 s",
            v1::Format::Tree,
            v1::GroupBy::None,
            dashboard,
        ),
        (
            "flamegraph, every 3 s",
            v1::Format::Flamegraph,
            v1::GroupBy::None,
            dashboard,
        ),
    ] {
        let mut times = Vec::new();
        let mut size = 0;
        for _ in 0..requests {
            tokio::time::sleep(pause).await;
            let status = daemon
                .get_status(v1::GetStatusRequest::default())
                .await?
                .into_inner();
            let oldest = status.store.unwrap_or_default().oldest_unix_nanos;
            let asked = Instant::now();
            let reply = daemon
                .query(v1::QueryRequest {
                    start_unix_nanos: oldest,
                    end_unix_nanos: 0,
                    selector: None,
                    options: Some(v1::ReportOptions {
                        format: format as i32,
                        groupby: groupby as i32,
                        maxsections: every_section(name).then_some(0),
                        ..Default::default()
                    }),
                    mode: v1::Mode::Cpu as i32,
                })
                .await
                .with_context(|| format!("querying the held window as {name}"))?;
            times.push(millis(asked.elapsed()));
            size = reply.into_inner().report.len();
        }
        println!(
            "{name:>6}: p50 {:.1} ms over {} requests, {} KiB",
            percentile(&sorted(&times), 50.0),
            times.len(),
            size / 1024
        );
        latencies.push((name, times, size));
    }

    let top = top_cost(&profiler, &mut daemon, plan).await?;
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
    let processes = storm.stop()?;
    profiler.stop()?;
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

/// The daemon's CPU while a Top stream at 1 s over the whole machine is
/// open, against the same span without one just before and after (their
/// mean): the storm runs throughout.
async fn top_cost(
    profiler: &Profiler,
    daemon: &mut v1::profiler_client::ProfilerClient<tonic::transport::Channel>,
    plan: &Plan,
) -> Result<TopCost> {
    let span = if plan.quick {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(30)
    };
    // The stream's windows are read on threads that may end meanwhile.
    let share = |clock: measure::CpuClock, started: Instant| -> Result<f64> {
        Ok(clock.seconds()? / started.elapsed().as_secs_f64())
    };
    let clock = || measure::CpuClock::start(profiler.pid());
    let (cpu, started) = (clock()?, Instant::now());
    tokio::time::sleep(span).await;
    let before = share(cpu, started)?;

    let (cpu, started) = (clock()?, Instant::now());
    let mut stream = daemon
        .top(v1::TopRequest {
            interval_ms: 1000,
            ..Default::default()
        })
        .await
        .context("opening a Top stream")?
        .into_inner();
    let mut updates = 0;
    while started.elapsed() < span {
        stream
            .message()
            .await
            .context("reading the Top stream")?
            .context("the Top stream ended early")?;
        updates += 1;
    }
    drop(stream);
    let with = share(cpu, started)?;

    let (cpu, started) = (clock()?, Instant::now());
    tokio::time::sleep(span).await;
    let after = share(cpu, started)?;
    Ok(TopCost {
        span,
        without: (before + after) / 2.0,
        with,
        updates,
    })
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
    let mut table = Table::new(
        title,
        &[
            "request",
            "p50, ms",
            "p99, ms",
            "min–max, ms",
            "report size",
        ],
    );
    let mut worst_p99: f64 = 0.0;
    for (name, times, size) in &ours.latencies {
        let sorted = sorted(times);
        let p99 = percentile(&sorted, 99.0);
        if !every_section(name) {
            worst_p99 = worst_p99.max(p99);
        }
        let spread = Spread::of(times);
        table.row(vec![
            format!("profilerd Query, {name}"),
            format!("{:.1}", spread.median),
            format!("{p99:.1}"),
            format!("{:.1}–{:.1}", spread.min, spread.max),
            format!("{} KiB", size / 1024),
        ]);
    }
    for other in others {
        if let Some(report_ms) = other.report_ms {
            table.row(vec![
                match other.tool {
                    Tool::Perf => format!("perf report --stdio ({:.0} s of data)", other.seconds),
                    _ => format!(
                        "bpftrace printing its map at exit ({:.0} s of data)",
                        other.seconds
                    ),
                },
                format!("{report_ms:.1}"),
                "—".to_owned(),
                "one run".to_owned(),
                String::new(),
            ]);
        }
    }
    table.note(format!(
        "{} requests per format over the whole window profilerd held ({:.0} s, {} distinct \
         stacks, every process), the storm still running; each request also drains the kernel \
         maps first. Every format draws one tree of the whole machine (`groupby none`; pprof: \
         one sample per stack, unlabelled) but pprof per thread (its default: a sample per \
         thread and stack, labelled; the pprof row of runs before 2026-11-26 11:00 UTC) and \
         the rows per process, tree and flat by default (a section per process, within the \
         default `maxlines` of 10000 lines and, since 2026-11-27, `maxsections` of 20 \
         sections; the rows \"every section\" ask for all of them, as those rows did before, \
         and are shown for comparison, not held to the target). Requests follow each other \
         at once, but those \
         of the rows \"every 3 s\", half as many, asked as a dashboard asks: each after a \
         pause of {} s, so each drains what came meanwhile and meets an index a refresh \
         behind. Target: p99 under 100 ms for every format: {}.",
        plan.query_requests,
        ours.held.as_secs_f64(),
        ours.distinct_stacks,
        DASHBOARD_PAUSE.as_secs(),
        verdict(worst_p99 < 100.0)
    ));
    if plan.query_requests < 100 {
        table.note(format!(
            "With {} requests per format, p99 is close to the slowest request.",
            plan.query_requests
        ));
    }
    let growth = ours.peak_rss as f64 / ours.peak_rss_holding.max(1) as f64;
    table.note(format!(
        "The daemon's peak RSS: {:.1} MiB holding the window, {:.1} MiB once these reports were \
         served ({growth:.2}×). Target: at most 2×: {}.",
        mib(ours.peak_rss_holding),
        mib(ours.peak_rss),
        verdict(growth <= 2.0)
    ));
    let top = &ours.top;
    let cost = (top.with - top.without) * 100.0;
    table.note(format!(
        "Top at a 1 s interval over the whole machine, the storm running: the daemon used \
         {:.2}% of a core over {:.0} s with the stream open ({} updates), {:.2}% over the same \
         span without it (the mean of just before and just after), so the stream cost {cost:.2}% \
         of a core. Target: at most 1%: {}.",
        top.with * 100.0,
        top.span.as_secs_f64(),
        top.updates,
        top.without * 100.0,
        verdict(cost <= 1.0)
    ));
    table
}

fn sorted(values: &[f64]) -> Vec<f64> {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    sorted
}
