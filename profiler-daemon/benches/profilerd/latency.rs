//! Question 5: how fast profilerd answers what its users and dashboards ask
//! over everything it holds — each request held to its own target — and
//! what a Top stream costs.
//!
//! The targets (issue 41): text reports (tree and flat, per process too),
//! the flame graph the web view draws, callers and Top's updates within
//! 100 ms at p99 for every window the daemon holds; the machine formats
//! whose size grows with the window (folded, pprof, speedscope, the SVG)
//! within 100 ms + 5 ms per MB of output.

use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail};
use profilerd_client::v1;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

use crate::{
    Plan,
    measure::{self, Spread, millis, percentile},
    report::{Table, verdict},
    tools::Profiler,
};

/// What a request's p99 is held to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// 100 ms, whatever the window.
    Fixed,
    /// 100 ms + 5 ms per MB of output.
    PerMegabyte,
    /// Shown for comparison, held to nothing.
    Shown,
}

impl Target {
    /// The p99 allowed a reply of `size` bytes, in ms.
    pub fn millis(self, size: usize) -> Option<f64> {
        match self {
            Target::Fixed => Some(100.0),
            Target::PerMegabyte => Some(100.0 + 5.0 * size as f64 / 1e6),
            Target::Shown => None,
        }
    }
}

/// One request's latencies.
pub struct Row {
    pub name: &'static str,
    /// In ms.
    pub times: Vec<f64>,
    /// The last reply's size in bytes.
    pub size: usize,
    pub target: Target,
}

impl Row {
    fn p99(&self) -> f64 {
        let mut sorted = self.times.clone();
        sorted.sort_by(f64::total_cmp);
        percentile(&sorted, 99.0)
    }

    fn met(&self) -> Option<bool> {
        self.target
            .millis(self.size)
            .map(|target| self.p99() <= target)
    }
}

/// The pause before each request of the rows asked as a dashboard asks.
pub const DASHBOARD_PAUSE: Duration = Duration::from_secs(3);

/// What a request asks.
#[derive(Clone, Copy)]
enum Ask {
    /// A gRPC Query of the whole held window.
    Query {
        format: v1::Format,
        groupby: v1::GroupBy,
        every_section: bool,
    },
    /// What the web view asks for its flame graph (`/api/query?…&drawn=true`,
    /// a section per process) over HTTP.
    Drawn,
    /// A gRPC Callers request of a function in every stack.
    Callers(&'static str),
}

struct Request {
    name: &'static str,
    ask: Ask,
    target: Target,
    dashboard: bool,
}

const fn query(
    name: &'static str,
    format: v1::Format,
    groupby: v1::GroupBy,
    target: Target,
) -> Request {
    Request {
        name,
        ask: Ask::Query {
            format,
            groupby,
            every_section: false,
        },
        target,
        dashboard: false,
    }
}

/// The requests, in the order they are asked.
fn requests() -> Vec<Request> {
    use {Target::*, v1::Format, v1::GroupBy};
    let every_section = |name, format| Request {
        name,
        ask: Ask::Query {
            format,
            groupby: GroupBy::Unspecified,
            every_section: true,
        },
        target: Shown,
        dashboard: false,
    };
    let dashboard = |request: Request| Request {
        dashboard: true,
        ..request
    };
    vec![
        query("tree", Format::Tree, GroupBy::None, Fixed),
        query("flat", Format::Flat, GroupBy::None, Fixed),
        query(
            "tree per process",
            Format::Tree,
            GroupBy::Unspecified,
            Fixed,
        ),
        query(
            "flat per process",
            Format::Flat,
            GroupBy::Unspecified,
            Fixed,
        ),
        // The rows per process of runs before `maxsections` (2026-11-27).
        every_section("tree per process, every section", Format::Tree),
        every_section("flat per process, every section", Format::Flat),
        Request {
            name: "web view's flame graph (HTTP)",
            ask: Ask::Drawn,
            target: Fixed,
            dashboard: false,
        },
        Request {
            name: "callers of main",
            ask: Ask::Callers("main"),
            target: Fixed,
            dashboard: false,
        },
        query("folded", Format::Folded, GroupBy::None, PerMegabyte),
        // pprof's default over the whole machine: a sample per process and
        // stack, labelled.
        query("pprof", Format::Pprof, GroupBy::Unspecified, PerMegabyte),
        query(
            "pprof, groupby none",
            Format::Pprof,
            GroupBy::None,
            PerMegabyte,
        ),
        query(
            "pprof per thread",
            Format::Pprof,
            GroupBy::Thread,
            PerMegabyte,
        ),
        query(
            "flamegraph (SVG)",
            Format::Flamegraph,
            GroupBy::None,
            PerMegabyte,
        ),
        query("speedscope", Format::Speedscope, GroupBy::None, PerMegabyte),
        dashboard(query("tree, every 3 s", Format::Tree, GroupBy::None, Fixed)),
        dashboard(Request {
            name: "web view's flame graph, every 3 s",
            ask: Ask::Drawn,
            target: Fixed,
            dashboard: false,
        }),
    ]
}

/// Asks every request of [`requests`] `plan.query_requests` times (half as
/// many, after a pause each, for a dashboard's), over everything held.
pub async fn ask_all(
    daemon: &mut v1::profiler_client::ProfilerClient<tonic::transport::Channel>,
    http: &str,
    plan: &Plan,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for request in requests() {
        let (count, pause) = match request.dashboard {
            false => (plan.query_requests, Duration::ZERO),
            true => ((plan.query_requests / 2).max(3), DASHBOARD_PAUSE),
        };
        let mut row = Row {
            name: request.name,
            times: Vec::new(),
            size: 0,
            target: request.target,
        };
        for _ in 0..count {
            tokio::time::sleep(pause).await;
            let status = daemon
                .get_status(v1::GetStatusRequest::default())
                .await?
                .into_inner();
            let store = status.store.unwrap_or_default();
            let oldest = store.oldest_unix_nanos;
            let asked = Instant::now();
            row.size = ask(daemon, http, request.ask, oldest)
                .await
                .with_context(|| format!("asking for the held window's {}", request.name))?;
            row.times.push(millis(asked.elapsed()));
        }
        // Which requests raise the daemon's peak RSS, and what they leave.
        let memory = daemon
            .get_status(v1::GetStatusRequest::default())
            .await?
            .into_inner()
            .memory
            .unwrap_or_default();
        println!(
            "{:>40}: p50 {:.1} ms over {} requests, {} KiB; RSS {:.1} MiB, peak {:.1} MiB",
            row.name,
            Spread::of(&row.times).median,
            row.times.len(),
            row.size / 1024,
            measure::mib(memory.resident_bytes),
            measure::mib(memory.resident_peak_bytes)
        );
        rows.push(row);
    }
    Ok(rows)
}

/// Asks `ask` over the window from `oldest` (Unix ns) to now; the reply's
/// size.
async fn ask(
    daemon: &mut v1::profiler_client::ProfilerClient<tonic::transport::Channel>,
    http: &str,
    ask: Ask,
    oldest: i64,
) -> Result<usize> {
    Ok(match ask {
        Ask::Query {
            format,
            groupby,
            every_section,
        } => daemon
            .query(v1::QueryRequest {
                start_unix_nanos: oldest,
                end_unix_nanos: 0,
                selector: None,
                options: Some(v1::ReportOptions {
                    format: format as i32,
                    groupby: groupby as i32,
                    maxsections: every_section.then_some(0),
                    ..Default::default()
                }),
                mode: v1::Mode::Cpu as i32,
            })
            .await?
            .into_inner()
            .report
            .len(),
        Ask::Callers(function) => {
            let reply = daemon
                .callers(v1::CallersRequest {
                    function: function.to_owned(),
                    start_unix_nanos: oldest,
                    end_unix_nanos: 0,
                    selector: None,
                })
                .await?
                .into_inner();
            if reply.total == 0 {
                bail!("no sample has a function named {function}");
            }
            reply.text.len()
        }
        Ask::Drawn => {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)?
                .as_nanos() as i64;
            let since = (now - oldest) / 1_000_000_000 + 1;
            http_get(
                http,
                &format!(
                    "/api/query?since={since}&mode=cpu&format=folded&groupby=process&drawn=true"
                ),
            )
            .await?
        }
    })
}

/// GETs `path` from the plaintext HTTP listener at `address`; the body's
/// size.
async fn http_get(address: &str, path: &str) -> Result<usize> {
    let mut stream = tokio::net::TcpStream::connect(address).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await?;
    let mut reply = Vec::new();
    stream.read_to_end(&mut reply).await?;
    let head_end = reply
        .windows(4)
        .position(|window| window == b"\r\n\r\n")
        .context("no end of the reply's head")?;
    let head = String::from_utf8_lossy(&reply[..head_end]);
    if !head.starts_with("HTTP/1.1 200") {
        bail!(
            "GET {path}: {}",
            String::from_utf8_lossy(&reply[..reply.len().min(2000)])
        );
    }
    Ok(reply.len() - head_end - 4)
}

/// The daemon's CPU (a share of one core) with a Top stream open and
/// without, the storm running, and how late each update came after its
/// interval ended.
pub struct TopCost {
    pub span: Duration,
    pub without: f64,
    pub with: f64,
    pub updates: u64,
    /// Each update's delay after its interval ended, in ms.
    pub lateness: Vec<f64>,
}

/// The daemon's CPU while a Top stream at 1 s over the whole machine is
/// open, against the same span without one just before and after (their
/// mean): the storm runs throughout.
pub async fn top_cost(
    profiler: &Profiler,
    daemon: &mut v1::profiler_client::ProfilerClient<tonic::transport::Channel>,
    plan: &Plan,
) -> Result<TopCost> {
    const INTERVAL: Duration = Duration::from_secs(1);
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
            interval_ms: INTERVAL.as_millis() as u64,
            ..Default::default()
        })
        .await
        .context("opening a Top stream")?
        .into_inner();
    // The stream's intervals start when it is opened (the reply's headers).
    let opened = Instant::now();
    let mut lateness = Vec::new();
    while started.elapsed() < span {
        stream
            .message()
            .await
            .context("reading the Top stream")?
            .context("the Top stream ended early")?;
        let due = INTERVAL * (lateness.len() as u32 + 1);
        lateness.push(millis(opened.elapsed().saturating_sub(due)));
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
        updates: lateness.len() as u64,
        lateness,
    })
}

/// What was measured over the held window, for [`table`].
pub struct Measured<'a> {
    pub held: Duration,
    pub distinct_stacks: u64,
    pub rows: &'a [Row],
    pub top: &'a TopCost,
    pub peak_rss_holding: u64,
    pub peak_rss: u64,
}

/// The latency table; `others` are the other tools' own reports (name, ms).
pub fn table(title: &str, plan: &Plan, ours: &Measured, others: &[(String, f64)]) -> Table {
    let mut table = Table::new(
        title,
        &[
            "request",
            "p50, ms",
            "p99, ms",
            "min–max, ms",
            "reply size",
            "p99 target, ms",
        ],
    );
    let top = Row {
        name: "Top at 1 s, an update after its interval",
        times: ours.top.lateness.clone(),
        size: 0,
        target: Target::Fixed,
    };
    let mut missed = Vec::new();
    for row in ours.rows.iter().chain([&top]) {
        if row.times.is_empty() {
            continue;
        }
        let spread = Spread::of(&row.times);
        if row.met() == Some(false) {
            missed.push(row.name);
        }
        table.row(vec![
            format!("profilerd, {}", row.name),
            format!("{:.1}", spread.median),
            format!("{:.1}", row.p99()),
            format!("{:.1}–{:.1}", spread.min, spread.max),
            match row.size {
                0 => "—".to_owned(),
                size if size < 10 << 10 => format!("{:.1} KiB", size as f64 / 1024.0),
                size => format!("{} KiB", size / 1024),
            },
            match (row.target.millis(row.size), row.met()) {
                (Some(target), Some(met)) => format!("{target:.0}: {}", verdict(met)),
                _ => "shown only".to_owned(),
            },
        ]);
    }
    for (name, millis) in others {
        table.row(vec![
            name.clone(),
            format!("{millis:.1}"),
            "—".to_owned(),
            "one run".to_owned(),
            String::new(),
            String::new(),
        ]);
    }
    table.note(format!(
        "{} requests each (half as many for the rows \"every 3 s\", each after a pause of {} s \
         as a dashboard asks, so each drains what came meanwhile and meets an index a refresh \
         behind; the others one after another at once) over the whole window profilerd held \
         ({:.0} s, {} distinct stacks, every process), the storm still running; each request \
         also drains the kernel maps first. Tree, flat, folded, the SVG and speedscope draw one \
         tree of the whole machine (`groupby none`); the rows per process a section per \
         process within the default `maxlines` (10000) and `maxsections` (20), the rows \
         \"every section\" all of them (for comparison, held to nothing); the web view's flame \
         graph is what its page asks (`/api/query?since=…&format=folded&groupby=process&drawn=true`, \
         over HTTP); pprof is its default over a whole machine (a sample per command and \
         stack, labelled `comm`), then one per stack (`none`) and per thread. Targets (issue 41): text reports, \
         the web view's flame graph, callers and Top's updates p99 ≤ 100 ms; folded, pprof, \
         speedscope and the SVG p99 ≤ 100 ms + 5 ms per MB of reply. {}",
        plan.query_requests,
        DASHBOARD_PAUSE.as_secs(),
        ours.held.as_secs_f64(),
        ours.distinct_stacks,
        match missed.as_slice() {
            [] => "Every target met.".to_owned(),
            missed => format!("MISSED by: {}.", missed.join(", ")),
        }
    ));
    if plan.query_requests < 100 {
        table.note(format!(
            "With {} requests per row, p99 is close to the slowest request.",
            plan.query_requests
        ));
    }
    let growth = ours.peak_rss as f64 / ours.peak_rss_holding.max(1) as f64;
    table.note(format!(
        "The daemon's peak RSS: {:.1} MiB holding the window, {:.1} MiB once these requests were \
         served ({growth:.2}×). Target: at most 2×: {}.",
        measure::mib(ours.peak_rss_holding),
        measure::mib(ours.peak_rss),
        verdict(growth <= 2.0)
    ));
    let top = ours.top;
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
