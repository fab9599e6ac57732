//! Question 10, the soak: profilerd at its defaults left on beside what a
//! busy production machine does — a churn of freshly built binaries with
//! debug information (a new build id each), `python3 -c` and `sh -c`
//! rounds, compiles, a fork storm of short-lived processes, a process of
//! 2000 threads, an unprivileged user's processes with 64 MiB perf maps —
//! while dashboards ask every 10 s; then again at a budget of 128 MiB.
//! Measured: the resident memory (its peak against the budget), what each
//! part of the budget holds and let go of over time, the dashboards' report
//! latency, how regularly the daemon drains, whole stacks and losses.

use std::{
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::{Duration, Instant},
};

use anyhow::{Context as _, Result};
use profilerd_client::{self as client, v1};

use crate::{
    Plan,
    measure::{self, mib, millis, percentile},
    report::{Table, verdict},
    tools::{Profiler, Tool},
    workloads::Workloads,
};

/// The daemon's default sampling frequency: the soak runs at the defaults.
const HZ: u32 = 49;
/// The default budget, and the smaller one asked after.
const BUDGET_MIB: u64 = 256;
const SMALL_BUDGET_MIB: u64 = 128;
/// What the small budget may be exceeded by: the program's own memory,
/// which the budget counts as an estimate.
const SMALL_OVERHEAD_MIB: u64 = 32;
const GAP_TARGET: Duration = Duration::from_secs(2);
const DASHBOARD_EVERY: Duration = Duration::from_secs(10);
const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The budget's parts, in the order status lists them.
const PARTS: [&str; 9] = [
    "store",
    "report_indexes",
    "reports",
    "unwind_info",
    "symbolizer",
    "jit_names",
    "processes",
    "peeks",
    "export",
];

/// One look at the daemon during the soak.
struct Look {
    at: Duration,
    memory: v1::MemoryStatus,
}

/// What one soak found.
struct Soak {
    budget_mib: u64,
    length: Duration,
    looks: Vec<Look>,
    peak_rss: u64,
    report_ms: Vec<f64>,
    drains: u64,
    longest_gap: Duration,
    whole_share: f64,
    lost: Vec<(String, u64)>,
    last: v1::StatusReply,
}

pub async fn run(plan: &Plan, workloads: &Workloads, out_dir: &Path) -> Result<Vec<Table>> {
    let length = if plan.quick {
        Duration::from_secs(90)
    } else {
        Duration::from_secs(1800)
    };
    let churn = ChurnProgram::of(&workloads.debug_churn)?;
    let default = soak(BUDGET_MIB, length, workloads, &churn, out_dir).await?;
    let small = soak(SMALL_BUDGET_MIB, length / 3, workloads, &churn, out_dir).await?;
    Ok(vec![parts_table(&default), targets_table(&default, &small)])
}

async fn soak(
    budget_mib: u64,
    length: Duration,
    workloads: &Workloads,
    churn: &ChurnProgram,
    out_dir: &Path,
) -> Result<Soak> {
    println!(
        "\n== soak: profilerd at its defaults, memory_budget {budget_mib} MiB, for {} beside a \
         machine's churn, dashboards every 10 s",
        humantime::format_duration(length)
    );
    let dir = out_dir.join("runs").join(format!("soak-{budget_mib}"));
    let profiler = Profiler::start(
        Tool::Profilerd,
        HZ,
        &dir,
        &[
            "--memory-budget".to_owned(),
            format!("{budget_mib}MiB"),
            "--state-dir".to_owned(),
            dir.join("state").display().to_string(),
        ],
    )
    .await?;
    let mut daemon = client::connect(&profiler.socket).await?;
    let first = daemon
        .get_status(v1::GetStatusRequest::default())
        .await?
        .into_inner();
    let running = Arc::new(AtomicBool::new(true));
    let machine = Machine::start(workloads, churn, &dir, running.clone())?;

    let started = Instant::now();
    let mut looks = Vec::new();
    let mut report_ms = Vec::new();
    let mut next_dashboard = Instant::now();
    while started.elapsed() < length {
        let status = daemon
            .get_status(v1::GetStatusRequest::default())
            .await?
            .into_inner();
        let memory = status.memory.clone().unwrap_or_default();
        println!(
            "{:>5.0} s: RSS {:.1} MiB (most {:.1}), heap {:.1}; {}",
            started.elapsed().as_secs_f64(),
            mib(memory.resident_bytes),
            mib(memory.resident_peak_bytes),
            mib(memory.heap_bytes),
            memory
                .parts
                .iter()
                .map(|part| format!("{} {:.1}", part.name, mib(part.held_bytes)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        looks.push(Look {
            at: started.elapsed(),
            memory,
        });
        if Instant::now() >= next_dashboard {
            next_dashboard += DASHBOARD_EVERY;
            report_ms.extend(dashboard_round(&mut daemon).await?);
        }
        tokio::time::sleep(SAMPLE_EVERY).await;
    }
    running.store(false, Ordering::Relaxed);
    machine.stop();
    let last = daemon
        .get_status(v1::GetStatusRequest::default())
        .await?
        .into_inner();
    let peak_rss = measure::peak_rss_bytes(profiler.pid())?;
    profiler.stop()?;

    let unwound = |status: &v1::StatusReply| {
        let unwinding = status.unwinding.clone().unwrap_or_default();
        let stopped: u64 = unwinding.stopped.iter().map(|stop| stop.count).sum();
        (unwinding.complete, stopped)
    };
    let (complete, stopped) = unwound(&last);
    let (complete_before, stopped_before) = unwound(&first);
    let (complete, stopped) = (complete - complete_before, stopped - stopped_before);
    let lost = last
        .samples_lost
        .iter()
        .map(|loss| {
            let before = first
                .samples_lost
                .iter()
                .find(|earlier| earlier.cause == loss.cause)
                .map_or(0, |earlier| earlier.count);
            (loss.cause.clone(), loss.count - before)
        })
        .filter(|(_, count)| *count > 0)
        .collect();
    Ok(Soak {
        budget_mib,
        length: started.elapsed(),
        looks,
        peak_rss,
        report_ms,
        drains: last.drains - first.drains,
        longest_gap: Duration::from_millis(last.longest_drain_gap_ms),
        whole_share: complete as f64 / (complete + stopped).max(1) as f64,
        lost,
        last,
    })
}

/// What a dashboard asks every 10 s: the flame graph and the tree of the
/// last five minutes, a pprof of the last minute per thread; each latency
/// in ms.
async fn dashboard_round(
    daemon: &mut client::v1::profiler_client::ProfilerClient<tonic::transport::Channel>,
) -> Result<Vec<f64>> {
    let mut latencies = Vec::new();
    for (format, groupby, seconds) in [
        (v1::Format::Flamegraph, v1::GroupBy::None, 300),
        (v1::Format::Tree, v1::GroupBy::Unspecified, 300),
        (v1::Format::Pprof, v1::GroupBy::Thread, 60),
    ] {
        let now = i64::try_from(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos(),
        )?;
        let asked = Instant::now();
        daemon
            .query(v1::QueryRequest {
                start_unix_nanos: now - seconds * 1_000_000_000,
                end_unix_nanos: 0,
                selector: None,
                options: Some(v1::ReportOptions {
                    format: format as i32,
                    groupby: groupby as i32,
                    ..Default::default()
                }),
                mode: v1::Mode::Cpu as i32,
            })
            .await
            .with_context(|| format!("a dashboard's {format:?}"))?;
        latencies.push(millis(asked.elapsed()));
    }
    Ok(latencies)
}

/// A program with a few MiB of DWARF (the tests' `debug_churn`), copied
/// with a new build id for each run of the churn.
struct ChurnProgram {
    binary: PathBuf,
    /// Where its build id lies in the file.
    build_id: std::ops::Range<usize>,
}

impl ChurnProgram {
    fn of(binary: &Path) -> Result<Self> {
        let data = std::fs::read(binary)?;
        let build_id = build_id_range(&data).context("the churn program has no build id")?;
        Ok(Self {
            binary: binary.to_owned(),
            build_id,
        })
    }

    /// A copy at `path` with a build id of its own.
    fn copy(&self, path: &Path, serial: u64) -> Result<()> {
        let mut data = std::fs::read(&self.binary)?;
        let id = &mut data[self.build_id.clone()];
        for (byte, value) in id.iter_mut().zip(serial.to_le_bytes().iter().cycle()) {
            *byte ^= value;
        }
        std::fs::write(path, &data)?;
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
        Ok(())
    }
}

/// The bytes of the GNU build id note's descriptor in an ELF file.
fn build_id_range(data: &[u8]) -> Option<std::ops::Range<usize>> {
    use object::{Object as _, ObjectSection as _};
    let elf = object::File::parse(data).ok()?;
    let section = elf.section_by_name(".note.gnu.build-id")?;
    let (offset, size) = section.file_range()?;
    let (offset, size) = (offset as usize, size as usize);
    // namesz, descsz, type, "GNU\0", then the id.
    (size > 16).then(|| offset + 16..offset + size)
}

/// The machine's work during the soak: children and the threads that start
/// them, until stopped.
struct Machine {
    children: Vec<Child>,
    threads: Vec<std::thread::JoinHandle<()>>,
    running: Arc<AtomicBool>,
    perf_maps: Vec<PathBuf>,
}

impl Machine {
    fn start(
        workloads: &Workloads,
        churn: &ChurnProgram,
        dir: &Path,
        running: Arc<AtomicBool>,
    ) -> Result<Self> {
        let mut children = Vec::new();
        // A fork storm of short-lived processes through distinct stacks.
        children.push(
            Command::new(&workloads.stack_storm)
                .args(["86400", "1", &crate::workloads::STORM_PATHS.to_string()])
                .stdout(Stdio::null())
                .spawn()
                .context("starting stack_storm")?,
        );
        // 2000 threads, one of them busy.
        children.push(
            Command::new(&workloads.many_threads)
                .args(["2000", "1"])
                .stdout(Stdio::null())
                .spawn()
                .context("starting many_threads")?,
        );
        // An unprivileged user's JIT processes with 64 MiB perf maps.
        let mut perf_maps = Vec::new();
        for _ in 0..4 {
            let child = Command::new("setpriv")
                .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(&workloads.jit_spin)
                .args(["32", "32"])
                .stdout(Stdio::null())
                .spawn()
                .context("starting jit_spin as nobody")?;
            perf_maps.push(PathBuf::from(format!("/tmp/perf-{}.map", child.id())));
            children.push(child);
        }
        let mut threads = Vec::new();
        let every =
            |period: Duration, running: Arc<AtomicBool>, mut round: Box<dyn FnMut(u64) + Send>| {
                std::thread::spawn(move || {
                    let mut serial = 0;
                    while running.load(Ordering::Relaxed) {
                        round(serial);
                        serial += 1;
                        std::thread::sleep(period);
                    }
                })
            };
        // A binary with debug information, built anew (a new build id)
        // every two seconds, run for a second.
        let churn_dir = dir.join("churn");
        std::fs::create_dir_all(&churn_dir)?;
        let churn = ChurnProgram {
            binary: churn.binary.clone(),
            build_id: churn.build_id.clone(),
        };
        threads.push(every(
            Duration::from_secs(2),
            running.clone(),
            Box::new(move |serial| {
                let path = churn_dir.join(format!("churn{serial}"));
                if churn.copy(&path, serial + 1).is_ok() {
                    let _ = Command::new(&path).arg("1").status();
                    let _ = std::fs::remove_file(&path);
                }
            }),
        ));
        // Interpreters and shells, as cron jobs and scripts run them.
        threads.push(every(
            Duration::from_secs(1),
            running.clone(),
            Box::new(|_| {
                let _ = Command::new("python3")
                    .args(["-c", "sum(i * i for i in range(300000))"])
                    .status();
                let _ = Command::new("sh")
                    .args(["-c", "i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done"])
                    .status();
            }),
        ));
        // A compile every ten seconds.
        let source = workloads.stack_storm.with_extension("c");
        let object = dir.join("compiled.o");
        let storm_source =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/workloads/stack_storm.c");
        let source = if source.exists() {
            source
        } else {
            storm_source
        };
        threads.push(every(
            Duration::from_secs(10),
            running.clone(),
            Box::new(move |_| {
                let _ = Command::new("gcc")
                    .args(["-O2", "-g", "-c"])
                    .arg(&source)
                    .arg("-o")
                    .arg(&object)
                    .status();
            }),
        ));
        Ok(Self {
            children,
            threads,
            running,
            perf_maps,
        })
    }

    fn stop(mut self) {
        self.running.store(false, Ordering::Relaxed);
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for thread in self.threads.drain(..) {
            let _ = thread.join();
        }
        for map in &self.perf_maps {
            let _ = std::fs::remove_file(map);
        }
    }
}

/// Table 10: what each part held, over the soak at the default budget.
fn parts_table(soak: &Soak) -> Table {
    let mut headers = vec!["minute", "RSS", "heap"];
    headers.extend(PARTS);
    let mut table = Table::new(
        format!(
            "10. Soak: memory by part over {} at the default budget ({} MiB), MiB",
            humantime::format_duration(Duration::from_secs(soak.length.as_secs() / 60 * 60)),
            soak.budget_mib
        ),
        &headers,
    );
    let held = |memory: &v1::MemoryStatus, name: &str| {
        memory
            .parts
            .iter()
            .find(|part| part.name == name)
            .map_or(0, |part| part.held_bytes)
    };
    // Six looks spread over the run, and the last.
    let picks = 6.min(soak.looks.len().max(1));
    let mut chosen: Vec<&Look> = (0..picks)
        .map(|index| &soak.looks[index * soak.looks.len() / picks])
        .collect();
    if let Some(last) = soak.looks.last() {
        chosen.push(last);
    }
    for look in chosen {
        let mut row = vec![
            format!("{:.1}", look.at.as_secs_f64() / 60.0),
            format!("{:.1}", mib(look.memory.resident_bytes)),
            format!("{:.1}", mib(look.memory.heap_bytes)),
        ];
        row.extend(
            PARTS
                .iter()
                .map(|name| format!("{:.1}", mib(held(&look.memory, name)))),
        );
        table.row(row);
    }
    let memory = soak.last.memory.clone().unwrap_or_default();
    let most = |name: &str| {
        soak.looks
            .iter()
            .map(|look| held(&look.memory, name))
            .max()
            .unwrap_or(0)
    };
    let mut row = vec![
        "most".to_owned(),
        format!(
            "{:.1}",
            mib(soak
                .looks
                .iter()
                .map(|look| look.memory.resident_bytes)
                .max()
                .unwrap_or(0))
        ),
        format!(
            "{:.1}",
            mib(soak
                .looks
                .iter()
                .map(|look| look.memory.heap_bytes)
                .max()
                .unwrap_or(0))
        ),
    ];
    row.extend(PARTS.iter().map(|name| format!("{:.1}", mib(most(name)))));
    table.row(row);
    // A row of what status says of each part at the end.
    let mut of_each_part = |label: &str, cell: fn(&v1::MemoryPart) -> String| {
        let mut row = vec![label.to_owned(), String::new(), String::new()];
        row.extend(PARTS.iter().map(|name| {
            memory
                .parts
                .iter()
                .find(|part| part.name == *name)
                .map_or(String::new(), cell)
        }));
        table.row(row);
    };
    of_each_part("share", |part| format!("{:.1}", mib(part.share_bytes)));
    of_each_part("let go of", |part| {
        format!("{} {}", part.evicted, part.evicted_unit)
    });
    table.note(format!(
        "Looked at every {} s; RSS and heap as the kernel and the daemon's allocator count \
         them; each part's bytes as it counts them (status). The program (~{:.0} MiB) and the \
         kernel's ring buffers ({:.1} MiB) come off the budget before it is divided.",
        SAMPLE_EVERY.as_secs(),
        mib(memory.program_bytes),
        mib(memory.kernel_buffer_bytes)
    ));
    table
}

/// Table 10b: the soak's targets, at both budgets.
fn targets_table(default: &Soak, small: &Soak) -> Table {
    let mut table = Table::new(
        "10b. Soak: the targets",
        &["measure", "value", "target", ""],
    );
    // A row: what, its value, and its target and whether it was met.
    let mut row = |measure: String, value: String, target: Option<(String, bool)>| {
        let (target, met) = target.map_or((String::new(), String::new()), |(target, met)| {
            (target, verdict(met).to_owned())
        });
        table.row(vec![measure, value, target, met]);
    };
    let peak = |soak: &Soak| format!("{:.1} MiB", mib(soak.peak_rss));
    row(
        format!("peak RSS, memory_budget {} MiB", default.budget_mib),
        peak(default),
        Some((
            format!("≤ {} MiB", default.budget_mib),
            default.peak_rss <= default.budget_mib << 20,
        )),
    );
    row(
        format!("peak RSS, memory_budget {} MiB", small.budget_mib),
        peak(small),
        Some((
            format!("≤ {} + {SMALL_OVERHEAD_MIB} MiB", small.budget_mib),
            small.peak_rss <= (small.budget_mib + SMALL_OVERHEAD_MIB) << 20,
        )),
    );
    for soak in [default, small] {
        let budget = soak.budget_mib;
        let mut sorted = soak.report_ms.clone();
        sorted.sort_by(f64::total_cmp);
        row(
            format!(
                "dashboard report p99 (p50), {} reports, budget {budget} MiB",
                sorted.len()
            ),
            format!(
                "{:.0} ms ({:.0} ms)",
                percentile(&sorted, 99.0),
                percentile(&sorted, 50.0)
            ),
            None,
        );
        row(
            format!("drains per second, budget {budget} MiB"),
            format!("{:.2}", soak.drains as f64 / soak.length.as_secs_f64()),
            None,
        );
        row(
            format!("longest gap between drains, budget {budget} MiB"),
            format!("{:.2} s", soak.longest_gap.as_secs_f64()),
            Some((
                format!("≤ {} s", GAP_TARGET.as_secs()),
                soak.longest_gap <= GAP_TARGET,
            )),
        );
        row(
            format!("whole stacks (unwound to their first frame), budget {budget} MiB"),
            format!("{:.1}%", soak.whole_share * 100.0),
            None,
        );
        let lost = if soak.lost.is_empty() {
            "none".to_owned()
        } else {
            soak.lost
                .iter()
                .map(|(cause, count)| format!("{cause} {count}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        row(format!("lost, by cause, budget {budget} MiB"), lost, None);
    }
    table.note(format!(
        "profilerd at its defaults ({HZ} Hz) beside: a binary with ~3 MiB of DWARF copied with a \
         new build id and run for a second every 2 s; python3 -c and sh -c every second; gcc -O2 \
         -g every 10 s; stack_storm (short-lived processes through {} distinct paths); a process \
         of 2000 threads; four processes of nobody with 64 MiB perf maps. Dashboards ask every \
         {} s for a flame graph and a tree of the last 5 minutes and a pprof per thread of the \
         last minute. Peak RSS is the kernel's VmHWM over the daemon's whole life.",
        crate::workloads::STORM_PATHS,
        DASHBOARD_EVERY.as_secs()
    ));
    table
}
