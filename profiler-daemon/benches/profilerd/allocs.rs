//! Question 9: what allocation profiling costs, and how right it is. One
//! thread making pairs of malloc and free: with no profiler, with
//! bpftrace counting the same `malloc` uprobe of that process, with
//! profilerd profiling its allocations at the default sampling, and with
//! profilerd profiling another process (this one not selected). Then, on
//! larger allocations, how far the estimated bytes of each site are from
//! what the workload allocated.

use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::Duration,
};

use anyhow::{Context as _, Result, bail};
use profilerd_client::{self as client, v1};

use crate::{
    Plan,
    measure::Spread,
    report::{Table, verdict},
    tools::{Profiler, Tool},
};

/// The target for the estimate of each site's bytes.
const ESTIMATE_TARGET_PERCENT: f64 = 5.0;

pub async fn run(plan: &Plan, workload: &Path, out_dir: &Path) -> Result<Vec<Table>> {
    let rounds = if plan.quick { 2 } else { 3 };
    let pairs: u64 = if plan.quick { 500_000 } else { 2_000_000 };
    println!("\n== allocations: {rounds} rounds of {pairs} malloc/free pairs");
    let dir = out_dir.join("runs/allocs");
    let small = Sizes { a: 32, b: 64 };
    let mut none = Vec::new();
    let mut bpftrace = Vec::new();
    let mut profiled = Vec::new();
    let mut other = Vec::new();
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
    for _ in 0..rounds {
        none.push(Pairs::start(workload, pairs, small)?.go()?.seconds);

        let run = Pairs::start(workload, pairs, small)?;
        let tracer = count_mallocs(run.pid(), &dir)?;
        bpftrace.push(run.go()?.seconds);
        tracer.stop()?;

        let run = Pairs::start(workload, pairs, small)?;
        let profile = allocs_until_exit(daemon.socket.clone(), run.pid(), None);
        let profile = tokio::spawn(profile);
        tokio::time::sleep(Duration::from_millis(300)).await;
        profiled.push(run.go()?.seconds);
        profile.await??;

        // Another process profiled: this one is not selected.
        let mut sleeper = Pairs::start(workload, 1, small)?;
        let profile = tokio::spawn(allocs_until_exit(
            daemon.socket.clone(),
            sleeper.pid(),
            None,
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        other.push(Pairs::start(workload, pairs, small)?.go()?.seconds);
        sleeper.finish()?;
        profile.await??;
    }
    let base = Spread::of(&none).median;
    let per_pair_ns = |seconds: &[f64]| (Spread::of(seconds).median - base) / pairs as f64 * 1e9;
    let mut cost = Table::new(
        "9. Allocation profiling: cost per malloc/free pair",
        &["profiler", "seconds", "slowdown", "added per pair, ns"],
    );
    cost.row(vec![
        "none".into(),
        Spread::of(&none).show(3),
        "—".into(),
        "—".into(),
    ]);
    for (name, seconds) in [
        ("bpftrace counting the malloc uprobe (-p)", &bpftrace),
        ("profilerd allocs, default sampling (512 KiB)", &profiled),
        (
            "profilerd allocs of another process (this one not selected)",
            &other,
        ),
    ] {
        cost.row(vec![
            name.into(),
            Spread::of(seconds).show(3),
            format!("{:+.1}%", (Spread::of(seconds).median / base - 1.0) * 100.0),
            format!("{:.0}", per_pair_ns(seconds)),
        ]);
    }
    cost.note(format!(
        "`malloc_pairs {pairs} {} {}`: one thread, {pairs} pairs of malloc and free \
         alternating between two sites, timed by the workload itself; {rounds} rounds each, \
         median (min–max). bpftrace is `bpftrace -p PID -e 'uprobe:LIBC:malloc {{ @ = count(); }}'` \
         (an entry probe on malloc only); profilerd has entry probes on malloc and free and a \
         return probe on malloc (for the address), and copies the stack of the sampled ones. \
         \"Not selected\": profilerd profiles the allocations of another process meanwhile.",
        small.a, small.b
    ));

    // Accuracy: larger allocations, so that the default sampling takes
    // enough samples of each site for its estimate to mean something.
    let large = Sizes { a: 4096, b: 12288 };
    let mut accuracy = Table::new(
        "9b. Allocation profiling: estimated bytes per site against the truth",
        &["run", "site", "allocated", "estimated", "error", "target"],
    );
    for round in 1..=rounds {
        let run = Pairs::start(workload, pairs, large)?;
        let profile = tokio::spawn(allocs_until_exit(
            daemon.socket.clone(),
            run.pid(),
            Some(v1::Format::Folded),
        ));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done = run.go()?;
        let report = profile.await??;
        let stacks = String::from_utf8_lossy(&report.report).into_owned();
        for (site, truth) in [("site_a", done.site_a), ("site_b", done.site_b)] {
            let estimated: u64 = stacks
                .lines()
                .filter(|line| line.split(' ').next().is_some_and(|s| s.ends_with(site)))
                .filter_map(|line| line.rsplit(' ').next()?.parse::<u64>().ok())
                .sum();
            let error = (estimated as f64 / truth as f64 - 1.0) * 100.0;
            accuracy.row(vec![
                round.to_string(),
                site.into(),
                truth.to_string(),
                estimated.to_string(),
                format!("{error:+.1}%"),
                format!(
                    "within {ESTIMATE_TARGET_PERCENT}%: {}",
                    verdict(error.abs() <= ESTIMATE_TARGET_PERCENT)
                ),
            ]);
        }
    }
    accuracy.note(format!(
        "`malloc_pairs {pairs} {} {}` profiled by profilerd at its default sampling (one sample \
         per 512 KiB allocated on average); \"allocated\" is what the workload counted.",
        large.a, large.b
    ));
    daemon.stop()?;
    Ok(vec![cost, accuracy])
}

#[derive(Clone, Copy)]
struct Sizes {
    a: u64,
    b: u64,
}

/// A malloc_pairs process, waiting for its go.
struct Pairs {
    child: Child,
}

/// What a malloc_pairs process said when it finished.
struct Done {
    seconds: f64,
    site_a: u64,
    site_b: u64,
}

impl Pairs {
    fn start(workload: &Path, pairs: u64, sizes: Sizes) -> Result<Self> {
        let child = Command::new(workload)
            .args([pairs.to_string(), sizes.a.to_string(), sizes.b.to_string()])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .context("starting malloc_pairs")?;
        Ok(Self { child })
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Lets it run, and waits for it to finish.
    fn go(mut self) -> Result<Done> {
        self.child
            .stdin
            .take()
            .context("malloc_pairs has no stdin")?
            .write_all(b"go\n")?;
        let output = self.child.wait_with_output()?;
        let text = String::from_utf8_lossy(&output.stdout);
        let fields: Vec<f64> = text
            .split_whitespace()
            .filter_map(|field| field.parse().ok())
            .collect();
        match fields[..] {
            [seconds, site_a, site_b] if output.status.success() => Ok(Done {
                seconds,
                site_a: site_a as u64,
                site_b: site_b as u64,
            }),
            _ => bail!("malloc_pairs failed ({}): {text:?}", output.status),
        }
    }

    /// Lets a one-pair run end.
    fn finish(&mut self) -> Result<()> {
        if let Some(mut stdin) = self.child.stdin.take() {
            stdin.write_all(b"go\n")?;
        }
        self.child.wait()?;
        Ok(())
    }
}

/// Profiles the allocations of `pid` until it exits (at most ten minutes).
async fn allocs_until_exit(
    socket: PathBuf,
    pid: u32,
    format: Option<v1::Format>,
) -> Result<v1::ProfileReply> {
    let mut daemon = client::connect(&socket).await?;
    Ok(daemon
        .allocs(v1::AllocsRequest {
            pid,
            duration_ms: 600_000,
            sampling: None,
            options: Some(v1::ReportOptions {
                format: format.unwrap_or(v1::Format::Folded) as i32,
                ..Default::default()
            }),
            inuse: false,
            ..Default::default()
        })
        .await
        .context("profilerd's Allocs")?
        .into_inner())
}

/// bpftrace counting the `malloc` uprobe of `pid`'s libc, until stopped.
struct Tracer {
    child: Child,
}

fn count_mallocs(pid: u32, dir: &Path) -> Result<Tracer> {
    // The loader maps libc a moment after exec.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let libc = loop {
        let maps = std::fs::read_to_string(format!("/proc/{pid}/maps"))?;
        if let Some(libc) = maps
            .lines()
            .filter_map(|line| line.split_whitespace().nth(5))
            .find(|path| path.contains("/libc.so"))
        {
            break libc.to_owned();
        }
        if std::time::Instant::now() > deadline {
            bail!("malloc_pairs maps no libc");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    std::fs::create_dir_all(dir)?;
    let log = std::fs::File::create(dir.join("bpftrace.log"))?;
    let child = Command::new("bpftrace")
        .args(["-p", &pid.to_string(), "-e"])
        .arg(format!("uprobe:{libc}:malloc {{ @ = count(); }}"))
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("starting bpftrace")?;
    // bpftrace says "Attaching 1 probe..." once attached.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !std::fs::read_to_string(dir.join("bpftrace.log"))?.contains("Attaching") {
        if std::time::Instant::now() > deadline {
            bail!("bpftrace did not attach within 30 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // Attaching is said before it is done.
    std::thread::sleep(Duration::from_millis(500));
    Ok(Tracer { child })
}

impl Tracer {
    /// Stops it (with -p it also ends by itself when the process does).
    fn stop(mut self) -> Result<()> {
        let _ = crate::measure::signal(&self.child, rustix::process::Signal::INT);
        self.child.wait()?;
        Ok(())
    }
}
