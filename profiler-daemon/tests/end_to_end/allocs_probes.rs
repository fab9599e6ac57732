//! Allocation probes are owned by what asked for them: they come off when
//! the client of an Allocs request is killed, when the profiled process
//! exits (sessions too), at the longest profile and when the daemon stops,
//! as the kernel's own list of the daemon's BPF links shows; and sampled
//! allocations go through a ring buffer of their own, shared fairly, so
//! that no allocation profile takes CPU samples' stack copies or another
//! profile's room, and each says exactly what it dropped.

use std::{
    collections::BTreeSet,
    future::Future,
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use profilerd_client::v1;

use crate::support::{
    Client, Daemon, User, Workload, folded, options, profilerctl_binary, wait_for_cpu,
};

/// The ids of the BPF links the daemon holds, as the kernel lists its file
/// descriptors (`/proc/PID/fdinfo`, `link_id:`).
fn link_ids(daemon: &Daemon) -> BTreeSet<u32> {
    let mut ids = BTreeSet::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{}/fdinfo", daemon.pid())) else {
        return ids;
    };
    for entry in entries.flatten() {
        let Ok(info) = std::fs::read_to_string(entry.path()) else {
            continue;
        };
        ids.extend(info.lines().find_map(|line| {
            line.strip_prefix("link_id:")
                .and_then(|id| id.trim().parse::<u32>().ok())
        }));
    }
    ids
}

/// Waits until `done` holds, polling; panics with `what` (and the
/// daemon's log) when it has not after a minute, a bound no healthy run
/// comes near: the checks are on what holds then, not on how fast.
async fn wait_for(daemon: &Daemon, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(
            Instant::now() < deadline,
            "{what} (still not after a minute)\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// As [`wait_for`], with a condition to ask the daemon.
async fn wait_for_async<F: Future<Output = bool>>(
    daemon: &Daemon,
    what: &str,
    mut done: impl FnMut() -> F,
) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            Instant::now() < deadline,
            "{what} (still not after a minute)\n{}",
            daemon.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until the status counts no allocation profile running.
async fn wait_until_none_running(daemon: &Daemon, client: &Client) {
    wait_for_async(daemon, "the status counts no allocation profile", || {
        let mut client = client.clone();
        async move { allocation_status(&mut client).await.profiles_running == 0 }
    })
    .await;
}

async fn allocation_status(client: &mut Client) -> v1::AllocationStatus {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus answers")
        .into_inner()
        .allocations
        .expect("the status has an allocations part")
}

/// A count of `counts` by cause (0 when absent).
/// The daemon's status.
async fn status_of(client: &mut Client) -> v1::StatusReply {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus answers")
        .into_inner()
}

/// Stops an allocation session as folded stacks; its reply and summary,
/// after checking that the summary says `said`.
async fn stop_saying(
    client: &mut Client,
    session_id: String,
    said: &str,
) -> (v1::ProfileReply, v1::ProfileSummary) {
    let reply = client
        .stop_allocs(v1::StopAllocsRequest {
            session_id,
            options: Some(options(v1::Format::Folded)),
            inuse: false,
        })
        .await
        .expect("StopAllocs answers")
        .into_inner();
    let summary = reply.summary.clone().expect("a summary");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.contains(said)),
        "{summary:?}"
    );
    (reply, summary)
}

fn count_of(counts: &[v1::LossCount], cause: &str) -> u64 {
    counts
        .iter()
        .filter(|count| count.cause == cause)
        .map(|count| count.count)
        .sum()
}

fn rate(rate: f64) -> Option<v1::AllocSampling> {
    Some(v1::AllocSampling {
        how: Some(v1::alloc_sampling::How::SampleRate(rate)),
    })
}

fn bytes(mean: u64) -> Option<v1::AllocSampling> {
    Some(v1::AllocSampling {
        how: Some(v1::alloc_sampling::How::SampleBytes(mean)),
    })
}

fn allocs_request(
    pid: u32,
    duration: Duration,
    sampling: Option<v1::AllocSampling>,
) -> v1::AllocsRequest {
    v1::AllocsRequest {
        pid,
        duration_ms: duration.as_millis() as u64,
        sampling,
        options: Some(options(v1::Format::Folded)),
        ..Default::default()
    }
}

#[tokio::test]
async fn killed_allocs_clients_leave_no_probe_and_another_user_is_served() {
    const KILLS: usize = 20;
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["ratio"]);
    let mut client = daemon.client().await;
    let before = link_ids(&daemon);
    let pid = workload.pid().to_string();
    for kill in 0..KILLS {
        let mut ctl = Command::new(profilerctl_binary())
            .arg("--socket")
            .arg(&daemon.socket)
            .args(["allocs", "--pid", &pid, "--duration", "10s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("profilerctl starts");
        // Killed mid-profile: once its probes are attached, and the status
        // counts its profile.
        wait_for(&daemon, &format!("kill {kill}: the probes attach"), || {
            link_ids(&daemon).len() > before.len()
        })
        .await;
        wait_for_async(&daemon, &format!("kill {kill}: the profile runs"), || {
            let mut client = client.clone();
            async move { allocation_status(&mut client).await.profiles_running == 1 }
        })
        .await;
        ctl.kill().expect("profilerctl is killed (SIGKILL)");
        ctl.wait().expect("profilerctl is reaped");
        // The next one is refused while this one's probes are on (one
        // profile per process): wait for them to come off, and for the
        // status to count none (a profile counts until its detach is done).
        wait_for(
            &daemon,
            &format!("kill {kill}: the probes of a killed client come off"),
            || link_ids(&daemon) == before,
        )
        .await;
        wait_until_none_running(&daemon, &client).await;
    }
    assert_eq!(link_ids(&daemon), before, "no probe is left");
    eprintln!(
        "BPF links of the daemon: {} before, {} after {KILLS} killed clients",
        before.len(),
        link_ids(&daemon).len()
    );
    let status = allocation_status(&mut client).await;
    assert_eq!(status.profiles_running, 0, "{status:?}");
    assert_eq!(status.abandoned, KILLS as u64, "{status:?}");
    let text =
        crate::support::stdout_of(&crate::support::profilerctl(&daemon.socket, &["status"]).await);
    assert!(
        text.contains("allocs:     0 process(es) profiled now")
            && text.contains(&format!("{KILLS} ended as their client went away")),
        "{text}"
    );

    // Another user, on its own workload, is served.
    let nobody = User::nobody(&daemon);
    let theirs = nobody.start("allocs", &["ratio"]);
    let theirs_pid = theirs.pid().to_string();
    let output = nobody
        .profilerctl(
            &daemon.socket,
            &[
                "allocs",
                "--pid",
                &theirs_pid,
                "--duration",
                "2s",
                "--format",
                "folded",
            ],
        )
        .await;
    let stacks = folded(crate::support::stdout_of(&output).as_bytes());
    assert!(
        stacks
            .iter()
            .any(|(frames, _)| frames.iter().any(|frame| frame == "site_three_quarters")),
        "{stacks:?}"
    );
    wait_for(&daemon, "the other user's probes come off", || {
        link_ids(&daemon) == before
    })
    .await;
}

#[tokio::test]
async fn an_allocation_storm_takes_no_cpu_stack_copies_and_says_what_it_dropped() {
    // A small allocation ring (59 copies) that a storm fills at once; the
    // CPU samples' ring is the tests' 64 MiB (seconds of this machine's
    // samples).
    let daemon = Daemon::start_with(&["--alloc-stack-copy-buffer", "1MiB"]).await;
    let storm = Workload::start("allocs", &["storm"]);
    let mut client = daemon.client().await;
    // Past the workload's first second asleep: it allocates all along.
    wait_for_cpu(storm.pid(), Duration::from_millis(50)).await;
    let before = status_of(&mut client).await;
    let reply = client
        .allocs(allocs_request(
            storm.pid(),
            Duration::from_secs(3),
            rate(1.0),
        ))
        .await
        .expect("Allocs answers")
        .into_inner();
    let after = status_of(&mut client).await;
    let lost = |status: &v1::StatusReply, cause| count_of(&status.samples_lost, cause);
    assert_eq!(
        lost(&after, "stack_copy_buffer_full"),
        lost(&before, "stack_copy_buffer_full"),
        "no CPU sample lost its stack copy to the allocation profile"
    );
    let summary = reply.summary.expect("a summary");
    eprintln!(
        "stack_copy_buffer_full: {} before, {} after; the profile: {} allocations, dropped {:?}",
        lost(&before, "stack_copy_buffer_full"),
        lost(&after, "stack_copy_buffer_full"),
        summary.allocated_objects,
        summary.lost
    );
    let dropped = count_of(&summary.lost, "alloc_share_full")
        + count_of(&summary.lost, "alloc_stack_copy_buffer_full");
    assert!(dropped > 0, "a storm at rate 1 drops samples: {summary:?}");
    assert!(
        summary
            .warnings
            .iter()
            .any(|warning| warning.contains("were dropped")),
        "{summary:?}"
    );
    // The report's figures are this profile's own, exactly: the only one
    // this daemon ran.
    let (allocs_before, allocs_after) = (
        before.allocations.expect("allocations"),
        after.allocations.expect("allocations"),
    );
    for cause in ["alloc_share_full", "alloc_stack_copy_buffer_full"] {
        assert_eq!(
            count_of(&summary.lost, cause),
            count_of(&allocs_after.dropped, cause) - count_of(&allocs_before.dropped, cause),
            "{cause}: {summary:?}\n{allocs_after:?}"
        );
    }
    // Every allocation copied was unwound into the report (at rate 1, one
    // object each), or said dropped: read faster than a storm can fill its
    // share, they may overflow the daemon's room for them.
    assert_eq!(
        summary.allocated_objects + count_of(&summary.lost, "alloc_inbox_full"),
        allocs_after.sampled - allocs_before.sampled,
        "{summary:?}"
    );
    assert!(summary.allocated_objects > 0, "{summary:?}");
    let text =
        crate::support::stdout_of(&crate::support::profilerctl(&daemon.socket, &["status"]).await);
    assert!(text.contains("alloc_share_full="), "{text}");
}

#[tokio::test]
async fn each_allocation_profile_keeps_its_share_of_the_ring() {
    // 239 copies: two profiles may each hold 119 unread.
    let daemon = Daemon::start_with(&["--alloc-stack-copy-buffer", "4MiB"]).await;
    let calm = Workload::start("allocs", &["ratio"]);
    let storm = Workload::start("allocs", &["storm"]);
    let client = daemon.client().await;
    // Both past their first second asleep, allocating.
    wait_for_cpu(calm.pid(), Duration::from_millis(50)).await;
    wait_for_cpu(storm.pid(), Duration::from_millis(50)).await;
    let before = link_ids(&daemon);
    // The calm one first (a few dozen samples a second), then the storm
    // at rate 1.
    let calm_profile = {
        let mut client = client.clone();
        let pid = calm.pid();
        tokio::spawn(async move {
            client
                .allocs(allocs_request(pid, Duration::from_secs(5), bytes(4 << 20)))
                .await
        })
    };
    wait_for(&daemon, "the calm profile's probes attach", || {
        link_ids(&daemon).len() > before.len()
    })
    .await;
    let mut storm_client = client.clone();
    let storm_reply = storm_client
        .allocs(allocs_request(
            storm.pid(),
            Duration::from_secs(3),
            rate(1.0),
        ))
        .await
        .expect("the storm's Allocs answers")
        .into_inner();
    let calm_reply = calm_profile
        .await
        .unwrap()
        .expect("the calm Allocs answers")
        .into_inner();
    let storm_summary = storm_reply.summary.expect("a summary");
    assert!(
        count_of(&storm_summary.lost, "alloc_share_full") > 0,
        "the storm overran its share: {storm_summary:?}"
    );
    let calm_summary = calm_reply.summary.expect("a summary");
    assert!(
        calm_summary.lost.iter().all(|count| count.count == 0),
        "the calm profile lost nothing to the storm: {calm_summary:?}"
    );
    assert!(calm_summary.allocated_objects > 0, "{calm_summary:?}");
}

#[tokio::test]
async fn a_session_s_probes_come_off_when_its_process_exits() {
    let daemon = Daemon::start().await;
    // Allocates for 2 s after its first second, then exits.
    let mut workload = Workload::start("allocs", &["exit", "3"]);
    let mut client = daemon.client().await;
    let before = link_ids(&daemon);
    let started = client
        .start_allocs(v1::StartAllocsRequest {
            pid: workload.pid(),
            sampling: bytes(64 * 1024),
        })
        .await
        .expect("StartAllocs answers")
        .into_inner();
    assert!(link_ids(&daemon).len() > before.len(), "the probes attach");
    // The session stays open (longest profile: the retention, an hour);
    // its probes come off with its process.
    tokio::task::spawn_blocking(move || workload.wait())
        .await
        .unwrap();
    wait_for(&daemon, "the exited process's probes come off", || {
        link_ids(&daemon) == before
    })
    .await;
    wait_until_none_running(&daemon, &client).await;
    let status = allocation_status(&mut client).await;
    assert_eq!(status.process_exited, 1, "{status:?}");
    let (reply, _) = stop_saying(&mut client, started.session_id, "the process exited").await;
    let stacks = folded(&reply.report);
    assert!(
        stacks
            .iter()
            .any(|(frames, _)| frames.iter().any(|frame| frame == "site_three_quarters")),
        "{stacks:?}"
    );
}

#[tokio::test]
async fn a_session_s_probes_come_off_at_the_longest_profile_and_it_is_counted_so() {
    let daemon = Daemon::start_with(&["--max-profile-duration", "6s"]).await;
    let workload = Workload::start("allocs", &["ratio"]);
    let mut client = daemon.client().await;
    let before = link_ids(&daemon);
    let started = client
        .start_allocs(v1::StartAllocsRequest {
            pid: workload.pid(),
            sampling: bytes(64 * 1024),
        })
        .await
        .expect("StartAllocs answers")
        .into_inner();
    assert_eq!(allocation_status(&mut client).await.profiles_running, 1);
    // One profile per process: another is refused, and counted so.
    let refused = client
        .allocs(allocs_request(
            workload.pid(),
            Duration::from_secs(1),
            bytes(64 * 1024),
        ))
        .await
        .expect_err("the process is being profiled");
    assert_eq!(
        refused.code(),
        tonic::Code::ResourceExhausted,
        "{refused:?}"
    );
    assert!(
        refused.message().contains("already being profiled"),
        "{refused:?}"
    );
    let status = allocation_status(&mut client).await;
    assert_eq!(count_of(&status.refused, "busy"), 1, "{status:?}");
    assert_eq!(
        (status.profiles_limit, status.profiles_reserved),
        (16, 4),
        "{status:?}"
    );
    wait_for(
        &daemon,
        "the probes come off at the longest profile",
        || link_ids(&daemon) == before,
    )
    .await;
    // Counted as the probes are: the session, still open, profiles nothing.
    wait_until_none_running(&daemon, &client).await;
    // So the process may be profiled again at once, the session still open.
    let again = client
        .allocs(allocs_request(
            workload.pid(),
            Duration::from_millis(500),
            bytes(64 * 1024),
        ))
        .await
        .expect("a new profile of the process is served");
    assert!(again.into_inner().summary.is_some());
    let (_, summary) = stop_saying(&mut client, started.session_id, "max_profile_duration").await;
    assert!(summary.allocated_bytes > 0, "{summary:?}");
}

#[tokio::test]
async fn the_daemon_s_stop_takes_every_allocation_probe_off() {
    let mut daemon = Daemon::start().await;
    let (first, second) = (
        Workload::start("allocs", &["ratio"]),
        Workload::start("allocs", &["ratio"]),
    );
    let mut client = daemon.client().await;
    let before = link_ids(&daemon);
    let request = {
        let mut client = client.clone();
        let pid = first.pid();
        tokio::spawn(async move {
            client
                .allocs(allocs_request(pid, Duration::from_secs(30), None))
                .await
        })
    };
    client
        .start_allocs(v1::StartAllocsRequest {
            pid: second.pid(),
            sampling: None,
        })
        .await
        .expect("StartAllocs answers");
    wait_for_async(&daemon, "both profiles run", || {
        let mut client = client.clone();
        async move { allocation_status(&mut client).await.profiles_running == 2 }
    })
    .await;
    let probes: BTreeSet<u32> = link_ids(&daemon).difference(&before).copied().collect();
    let in_kernel = || -> BTreeSet<u32> {
        aya::programs::loaded_links()
            .filter_map(Result::ok)
            .map(|link| link.id())
            .collect()
    };
    assert!(
        !probes.is_empty() && probes.is_subset(&in_kernel()),
        "the kernel lists the probes' links: {probes:?}"
    );
    daemon.signal(rustix::process::Signal::TERM);
    let refused = request
        .await
        .unwrap()
        .expect_err("the Allocs request ends with the daemon");
    assert!(refused.message().contains("shutting down"), "{refused:?}");
    let status = daemon.exit_status(Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|status| status.success()),
        "{status:?}\n{}",
        daemon.log()
    );
    let log = daemon.log();
    assert!(
        log.contains("allocation profiles ended (the daemon is stopping); their probes are off")
            && log.contains("profiles=2"),
        "{log}"
    );
    // Ended by the stop, not as if their clients had gone.
    assert!(!log.contains("request went away"), "{log}");
    let left: Vec<u32> = probes.intersection(&in_kernel()).copied().collect();
    assert!(left.is_empty(), "links left in the kernel: {left:?}");
}
