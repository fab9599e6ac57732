//! Allocation profiles, checked against what the workloads allocate (their
//! own counts and byte ratios), every frame of their known call chains,
//! `go tool pprof`, and the kernel's own list of the daemon's probes.

use std::time::Duration;

use profilerd_client::v1;

use crate::support::{
    Client, Daemon, Workload, decode_pprof, folded, go_pprof_top, has_chain, options, samples_where,
};

fn bytes(sample_bytes: u64) -> Option<v1::AllocSampling> {
    Some(v1::AllocSampling {
        how: Some(v1::alloc_sampling::How::SampleBytes(sample_bytes)),
    })
}

fn rate(rate: f64) -> Option<v1::AllocSampling> {
    Some(v1::AllocSampling {
        how: Some(v1::alloc_sampling::How::SampleRate(rate)),
    })
}

async fn allocs(
    client: &mut Client,
    pid: u32,
    duration: Duration,
    sampling: Option<v1::AllocSampling>,
    format: v1::Format,
    inuse: bool,
) -> v1::ProfileReply {
    client
        .allocs(v1::AllocsRequest {
            pid,
            duration_ms: duration.as_millis() as u64,
            sampling,
            options: Some(options(format)),
            inuse,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("Allocs failed: {status:?}"))
        .into_inner()
}

/// Bytes per stack whose leaf-most frames hold `site`.
fn bytes_at(stacks: &[(Vec<String>, u64)], site: &str) -> u64 {
    samples_where(stacks, |frames| frames.iter().any(|frame| frame == site))
}

/// Profiles the allocations of the `ratio` workload for 3 s and checks
/// that site_three_quarters has 75% of the bytes (± 5 points); returns the
/// reply, its folded stacks and the bytes of the two sites.
async fn three_to_one(
    daemon: &Daemon,
    workload: &Workload,
) -> (v1::ProfileReply, Vec<(Vec<String>, u64)>, (u64, u64)) {
    let mut client = daemon.client().await;
    // Small sizes are sampled about once per `mean` bytes: at 16 KiB a
    // loaded machine's 3 s (tens of MB) still gives thousands of samples,
    // so the share's error is about 1 point, not 4.
    let TwoSites {
        reply,
        stacks,
        bytes: (three, one),
    } = two_sites(
        &mut client,
        workload.pid(),
        (Duration::from_secs(3), 16 * 1024),
        ("site_three_quarters", "site_one_quarter"),
    )
    .await;
    let share = share_of(three, one);
    assert!(
        (share - 0.75).abs() <= 0.05,
        "site_three_quarters has {:.1}% of the bytes (want 75 ± 5): {three} vs {one}\n{stacks:?}",
        share * 100.0
    );
    (reply, stacks, (three, one))
}

#[tokio::test]
async fn allocated_bytes_split_three_to_one_between_two_named_sites() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["ratio"]);
    let (reply, stacks, (three, one)) = three_to_one(&daemon, &workload).await;
    // Every stack of each site goes through its whole chain from main.
    for (site, want) in [("site_three_quarters", three), ("site_one_quarter", one)] {
        let whole: u64 = samples_where(&stacks, |frames| {
            has_chain(frames, &["main", "churn_round", site])
        });
        assert_eq!(
            whole, want,
            "not every {site} stack is main;churn_round;{site}: {stacks:?}"
        );
    }
    let summary = reply.summary.expect("a summary");
    assert_eq!(summary.allocated_bytes, three + one, "{summary:?}");
    assert!(summary.allocated_objects > 0, "{summary:?}");
    // Everything is freed at once: at most a block in flight at the end
    // (one sample) is still held, however the probes come off.
    assert!(summary.held_bytes <= 2 * 256 * 1024, "{summary:?}");
}

#[tokio::test]
async fn inuse_names_only_the_site_that_keeps_its_bytes() {
    const BLOCKS: u64 = 3000;
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["keep", &BLOCKS.to_string()]);
    let mut client = daemon.client().await;
    let reply = allocs(
        &mut client,
        workload.pid(),
        Duration::from_secs(4),
        bytes(4096),
        v1::Format::Folded,
        true,
    )
    .await;
    let stacks = folded(&reply.report);
    let kept = bytes_at(&stacks, "site_keep");
    let churned = bytes_at(&stacks, "site_churn");
    let truth = BLOCKS * 4096;
    assert!(
        kept.abs_diff(truth) as f64 <= truth as f64 * 0.10,
        "site_keep holds {kept} bytes (want {truth} ± 10%): {stacks:?}"
    );
    assert_eq!(churned, 0, "site_churn frees all it allocates: {stacks:?}");
    let kept_whole: u64 = samples_where(&stacks, |frames| {
        has_chain(frames, &["main", "keep_and_churn", "site_keep"])
    });
    assert_eq!(
        kept_whole, kept,
        "every site_keep stack is whole: {stacks:?}"
    );
    // Besides, only keep_and_churn's own array of pointers (8 B a block).
    let other = stacks.iter().map(|(_, count)| count).sum::<u64>() - kept;
    assert!(other <= BLOCKS * 8 * 2, "{stacks:?}");
    // Allocated, both sites about alike.
    let allocated = folded(&allocs_again(&mut client, &workload).await.report);
    assert!(
        allocated.is_empty(),
        "nothing is allocated once kept: {allocated:?}"
    );
    let summary = reply.summary.expect("a summary");
    assert!(summary.held_bytes <= summary.allocated_bytes, "{summary:?}");
    assert!(
        summary.allocated_bytes.abs_diff(2 * truth) as f64 <= 2.0 * truth as f64 * 0.10,
        "{summary:?}"
    );
}

/// A second profile of a workload that no longer allocates.
async fn allocs_again(client: &mut Client, workload: &Workload) -> v1::ProfileReply {
    allocs(
        client,
        workload.pid(),
        Duration::from_millis(300),
        bytes(4096),
        v1::Format::Folded,
        false,
    )
    .await
}

#[tokio::test]
async fn go_tool_pprof_reads_the_heap_values_and_names_the_top_site() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["ratio"]);
    let mut client = daemon.client().await;
    let reply = allocs(
        &mut client,
        workload.pid(),
        Duration::from_secs(2),
        bytes(64 * 1024),
        v1::Format::Pprof,
        false,
    )
    .await;
    let profile = decode_pprof(&reply.report);
    let types: Vec<(String, String)> = profile
        .sample_type
        .iter()
        .map(|value| {
            (
                profile.string_table[value.r#type as usize].clone(),
                profile.string_table[value.unit as usize].clone(),
            )
        })
        .collect();
    let want = [
        ("alloc_objects", "count"),
        ("alloc_space", "bytes"),
        ("inuse_objects", "count"),
        ("inuse_space", "bytes"),
    ]
    .map(|(kind, unit)| (kind.to_owned(), unit.to_owned()));
    assert_eq!(types, want);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("allocs.pb.gz");
    std::fs::write(&path, &reply.report).unwrap();
    let output = std::process::Command::new("go")
        .args(["tool", "pprof", "-sample_index=alloc_space", "-top"])
        .arg(&path)
        .env("HOME", dir.path())
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("go runs");
    let top = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let first = top
        .lines()
        .skip_while(|line| !line.trim_start().starts_with("flat"))
        .nth(1)
        .unwrap_or_default();
    assert!(first.contains("site_three_quarters"), "{top}");
    // The default sample index is alloc_space.
    assert!(go_pprof_top(&reply.report).contains("site_three_quarters"));
}

#[tokio::test]
async fn sample_rate_one_counts_every_allocation() {
    const ALLOCATIONS: u64 = 2000;
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["count", &ALLOCATIONS.to_string()]);
    // Another process doing the same at the same time is not counted.
    let _other = Workload::start("allocs", &["count", &ALLOCATIONS.to_string()]);
    let mut client = daemon.client().await;
    let reply = allocs(
        &mut client,
        workload.pid(),
        Duration::from_secs(2),
        rate(1.0),
        v1::Format::Folded,
        false,
    )
    .await;
    let summary = reply.summary.expect("a summary");
    assert_eq!(summary.allocated_objects, ALLOCATIONS, "{summary:?}");
    assert_eq!(summary.allocated_bytes, ALLOCATIONS * 100, "{summary:?}");
    assert_eq!(summary.threads, 1, "only the profiled process: {summary:?}");
    let stacks = folded(&reply.report);
    assert!(
        stacks
            .iter()
            .all(|(frames, _)| has_chain(frames, &["main", "site_counted"])),
        "{stacks:?}"
    );
}

/// An allocation profile and the bytes it gives two sites.
struct TwoSites {
    reply: v1::ProfileReply,
    stacks: Vec<(Vec<String>, u64)>,
    bytes: (u64, u64),
}

/// The share of `first` in `first + second`.
fn share_of(first: u64, second: u64) -> f64 {
    first as f64 / (first + second).max(1) as f64
}

/// Profiles the allocations of `pid` for `duration` at one sample per
/// `sample_bytes`, as folded stacks, and counts the bytes of both `sites`.
async fn two_sites(
    client: &mut Client,
    pid: u32,
    (duration, sample_bytes): (Duration, u64),
    sites: (&str, &str),
) -> TwoSites {
    let reply = allocs(
        client,
        pid,
        duration,
        bytes(sample_bytes),
        v1::Format::Folded,
        false,
    )
    .await;
    let stacks = folded(&reply.report);
    let bytes = (bytes_at(&stacks, sites.0), bytes_at(&stacks, sites.1));
    TwoSites {
        reply,
        stacks,
        bytes,
    }
}

#[tokio::test]
async fn cpp_new_and_delete_and_calloc_and_realloc_are_profiled() {
    let daemon = Daemon::start().await;
    let cpp = Workload::start("allocs_cpp", &[]);
    let c = Workload::start("allocs", &["calloc-realloc"]);
    let mut client = daemon.client().await;
    // 16 x 256 B against 4096 B a round: half each.
    let TwoSites { stacks, bytes, .. } = two_sites(
        &mut client,
        cpp.pid(),
        (Duration::from_secs(2), 16 * 1024),
        ("make_widgets", "make_buffer"),
    )
    .await;
    let share = share_of(bytes.0, bytes.1);
    assert!((share - 0.5).abs() <= 0.1, "{share}: {stacks:?}");
    assert!(
        stacks
            .iter()
            .any(|(frames, _)| frames.iter().any(|frame| frame.starts_with("operator new"))),
        "the stacks go through operator new: {stacks:?}"
    );

    // 2 KiB by calloc against 1 + 2 + 4 + 8 KiB by realloc a round.
    let TwoSites { stacks, bytes, .. } = two_sites(
        &mut client,
        c.pid(),
        (Duration::from_secs(3), 32 * 1024),
        ("site_calloc", "site_realloc"),
    )
    .await;
    let share = share_of(bytes.0, bytes.1);
    assert!((share - 2.0 / 17.0).abs() <= 0.05, "{share}: {stacks:?}");
}

/// The daemon's open perf events and BPF links, as the kernel lists its
/// file descriptors.
fn probes_of(daemon: &Daemon) -> (usize, usize) {
    let mut counts = (0, 0);
    for entry in std::fs::read_dir(format!("/proc/{}/fd", daemon.pid())).unwrap() {
        let Ok(target) = std::fs::read_link(entry.unwrap().path()) else {
            continue;
        };
        match target.to_string_lossy().as_ref() {
            "anon_inode:[perf_event]" => counts.0 += 1,
            "anon_inode:bpf_link" => counts.1 += 1,
            _ => {}
        }
    }
    counts
}

#[tokio::test]
async fn a_target_that_exits_returns_what_was_sampled_and_no_probe_remains() {
    let daemon = Daemon::start().await;
    let mut workload = Workload::start("allocs", &["exit", "1"]);
    let client = daemon.client().await;
    let before = probes_of(&daemon);
    let asked = std::time::Instant::now();
    let request = {
        let mut client = client.clone();
        let pid = workload.pid();
        tokio::spawn(async move {
            allocs(
                &mut client,
                pid,
                Duration::from_secs(10),
                bytes(256 * 1024),
                v1::Format::Folded,
                false,
            )
            .await
        })
    };
    // A process this young is profiled from a quarter of a second old.
    crate::support::eventually(
        "the probes' links show while attached",
        crate::support::PATIENCE,
        async || match probes_of(&daemon) {
            during if during.1 > before.1 => Ok(()),
            during => Err(format!("{before:?} then {during:?}")),
        },
    )
    .await;
    let reply = request.await.unwrap();
    workload.wait();
    // It exits 2 s after it started: a profile that ran its 10 s did not
    // end with it.
    assert!(
        asked.elapsed() < Duration::from_secs(10),
        "the profile ends when its process exits (it took {:?})",
        asked.elapsed()
    );
    let stacks = folded(&reply.report);
    assert!(bytes_at(&stacks, "site_three_quarters") > 0, "{stacks:?}");
    let summary = reply.summary.expect("a summary");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.contains("exited")),
        "{summary:?}"
    );
    assert_eq!(probes_of(&daemon), before, "every probe came off");
}

#[tokio::test]
async fn bad_requests_say_what_is_wrong() {
    let daemon = Daemon::start().await;
    let client = daemon.client().await;
    let ask = |pid, duration_ms, sampling| {
        let mut client = client.clone();
        async move {
            client
                .allocs(v1::AllocsRequest {
                    pid,
                    duration_ms,
                    sampling,
                    options: Some(options(v1::Format::Folded)),
                    inuse: false,
                    ..Default::default()
                })
                .await
                .expect_err("the request is refused")
        }
    };
    let gone = ask(u32::MAX - 7, 1000, None).await;
    assert_eq!(gone.code(), tonic::Code::NotFound, "{gone:?}");
    let zero = ask(0, 1000, None).await;
    assert_eq!(zero.code(), tonic::Code::InvalidArgument, "{zero:?}");
    let me = std::process::id();
    let long = ask(me, 10_000_000_000, None).await;
    assert!(long.message().contains("max_profile_duration"), "{long:?}");
    let bad_rate = ask(me, 1000, rate(1.5)).await;
    assert!(bad_rate.message().contains("sample_rate"), "{bad_rate:?}");
}

#[tokio::test]
async fn profilerctl_allocs_reports_allocated_and_held_bytes_in_text() {
    const BLOCKS: u64 = 3000;
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["keep", &BLOCKS.to_string()]);
    let pid = workload.pid().to_string();
    let output = crate::support::profilerctl(
        &daemon.socket,
        &[
            "allocs",
            "--pid",
            &pid,
            "--duration",
            "4s",
            "--sample-bytes",
            "4KiB",
            "--inuse",
            "--format",
            "tree",
        ],
    )
    .await;
    let text = crate::support::stdout_of(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    // The tree counts bytes still held: site_keep's, within 10%.
    let line = text
        .lines()
        .find(|line| line.ends_with("; site_keep"))
        .unwrap_or_else(|| panic!("no site_keep line:\n{text}"));
    // "overhead╎ count share file:line; function"
    let count: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|count| count.parse().ok())
        .unwrap_or_else(|| panic!("no count in {line:?}\n{text}"));
    let truth = BLOCKS * 4096;
    assert!(
        count.abs_diff(truth) as f64 <= truth as f64 * 0.1,
        "{line}\n{text}"
    );
    assert!(!text.contains("site_churn"), "{text}");
    // With its unit and the exact count: "Total: 11.7 MiB (12288000 bytes)
    // still held in 3000 objects (estimated)".
    assert!(
        text.lines().any(|line| line.starts_with("Total: ")
            && line.contains(" MiB (")
            && line.contains(" bytes) still held in ")),
        "{text}"
    );
    assert!(
        stderr.contains("allocated") && stderr.contains("still held at the end"),
        "{stderr}"
    );
    // Bad arguments are refused with the reason, before anything is asked.
    let output = crate::support::profilerctl(
        &daemon.socket,
        &[
            "allocs",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--sample-rate",
            "2",
        ],
    )
    .await;
    assert!(!output.status.success());
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("probability"),
        "{output:?}"
    );
}

#[tokio::test]
async fn a_preloaded_jemalloc_is_the_allocator_profiled() {
    const JEMALLOC: &str = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
    assert!(
        std::path::Path::new(JEMALLOC).exists(),
        "jemalloc is installed (cargo xtask test installs libjemalloc2)"
    );
    let daemon = Daemon::start().await;
    let workload = Workload::from(
        std::process::Command::new(crate::support::build_workload("allocs"))
            .arg("ratio")
            .env("LD_PRELOAD", JEMALLOC)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("the workload starts"),
    );
    let (reply, ..) = three_to_one(&daemon, &workload).await;
    let summary = reply.summary.expect("a summary");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.contains("jemalloc") && warning.contains("libc")),
        "both allocators are named: {summary:?}"
    );
}

#[tokio::test]
async fn a_stripped_static_binary_has_no_allocator_to_profile() {
    let binary = crate::support::build_workload_with(
        "allocs",
        "allocs-static-stripped",
        &["-O1", "-static", "-s"],
    );
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["ratio"]);
    let mut client = daemon.client().await;
    let refused = client
        .allocs(v1::AllocsRequest {
            pid: workload.pid(),
            duration_ms: 1000,
            sampling: None,
            options: Some(options(v1::Format::Folded)),
            inuse: false,
            ..Default::default()
        })
        .await
        .expect_err("there is no malloc to probe");
    assert_eq!(
        refused.code(),
        tonic::Code::FailedPrecondition,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("no known allocator"),
        "{refused:?}"
    );
}

/// A Python program whose buffers (`bytearray`s of 16 KiB, larger than
/// CPython's own small-object allocator takes, so made by `malloc`) are
/// made by `make_buffers`, called by `allocating_caller`.
const PYTHON_ALLOCATING: &str = "import time
held = []
def make_buffers():
    for _ in range(16):
        held.append(bytearray(16384))
        if len(held) > 64:
            held.pop(0)
def allocating_caller():
    while True:
        make_buffers()
        time.sleep(0.002)
allocating_caller()
";

#[tokio::test(flavor = "multi_thread")]
async fn a_python_program_s_allocations_are_named_by_its_python_functions() {
    let daemon = Daemon::start().await;
    for (python, version) in crate::interpreted::readable_cpythons_here() {
        let workload: Workload = std::process::Command::new(&python)
            .args(["-c", PYTHON_ALLOCATING])
            .spawn()
            .expect("python runs")
            .into();
        // Its interpreter is found from its first CPU samples.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let mut client = daemon.client().await;
        let reply = allocs(
            &mut client,
            workload.pid(),
            Duration::from_secs(2),
            bytes(256 * 1024),
            v1::Format::Folded,
            false,
        )
        .await;
        let stacks = folded(&reply.report);
        let sampled = crate::support::total(&stacks);
        let named = samples_where(&stacks, |frames| {
            has_chain(frames, &["<module>", "allocating_caller", "make_buffers"])
        });
        let what = format!("{version} ({})", python.display());
        assert!(
            sampled >= 10 << 20,
            "{what}: too few bytes sampled: {stacks:#?}"
        );
        assert!(
            named as f64 >= 0.95 * sampled as f64,
            "{what}: {named} of {sampled} bytes sampled are under \
             <module>;allocating_caller;make_buffers: {stacks:#?}"
        );
    }
}

/// A program that always holds its 64 most recent 16 KiB buffers (one
/// allocated and the oldest freed every 5 ms): `--inuse` with every
/// allocation sampled shows the 64 it holds at the window's end, twice in
/// a row (its frees while the probes come off, after the window, take
/// none away), and with the default sampling an estimate that says how
/// uncertain it is.
#[tokio::test]
async fn held_buffers_are_counted_as_the_program_holds_them() {
    const HELD: u64 = 64;
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["ring", &HELD.to_string()]);
    let mut client = daemon.client().await;
    for round in 0..2 {
        let reply = allocs(
            &mut client,
            workload.pid(),
            Duration::from_secs(2),
            rate(1.0),
            v1::Format::Folded,
            true,
        )
        .await;
        let summary = reply.summary.expect("a summary");
        let stacks = folded(&reply.report);
        let held = bytes_at(&stacks, "site_ring");
        // The buffer allocated as the window ended may or may not be in.
        assert!(
            summary.warnings.is_empty()
                && held.abs_diff(HELD * 16384) <= 2 * 16384
                && summary.held_objects.abs_diff(HELD) <= 3,
            "round {round}: site_ring holds {held} bytes in {} objects (want {HELD} buffers of \
             16 KiB): {summary:?}",
            summary.held_objects
        );
    }
    // Sampled by bytes (one sample per 512 KiB on average), the 1 MiB held
    // is an estimate, and the report says how uncertain.
    let reply = allocs(
        &mut client,
        workload.pid(),
        Duration::from_secs(2),
        None,
        v1::Format::Folded,
        true,
    )
    .await;
    let summary = reply.summary.expect("a summary");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.starts_with("the byte figures are estimates from ")),
        "{summary:?}"
    );
}
