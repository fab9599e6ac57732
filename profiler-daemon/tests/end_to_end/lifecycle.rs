//! The daemon's life: SIGTERM ends what runs with a clear status and leaves
//! nothing behind; after SIGKILL nothing of it stays in the kernel and it
//! starts again over its stale socket; a second instance is refused.

use std::{collections::BTreeSet, time::Duration};

use profilerd_client::v1;
use rustix::process::Signal;

use crate::support::{Daemon, PATIENCE, Workload, eventually};

/// The ids of the BPF programs the process `pid` holds, from its fdinfo.
fn programs_held_by(pid: u32) -> BTreeSet<u32> {
    let fdinfo = std::fs::read_dir(format!("/proc/{pid}/fdinfo")).expect("the daemon's fdinfo");
    fdinfo
        .filter_map(|entry| std::fs::read_to_string(entry.ok()?.path()).ok())
        .filter_map(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("prog_id:"))
                .and_then(|id| id.trim().parse().ok())
        })
        .collect()
}

/// Waits for the kernel to let go of the programs `ids`; panics naming
/// those it still has loaded after [`PATIENCE`].
async fn wait_until_unloaded(ids: &BTreeSet<u32>) {
    eventually("the programs are unloaded", PATIENCE, async || {
        let loaded: BTreeSet<u32> = aya::programs::loaded_programs()
            .filter_map(Result::ok)
            .map(|program| program.id())
            .filter(|id| ids.contains(id))
            .collect();
        if loaded.is_empty() {
            Ok(())
        } else {
            Err(format!("programs left loaded: {loaded:?}"))
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_ends_requests_with_a_status_and_leaves_nothing() {
    let mut daemon = Daemon::start().await;
    let programs = programs_held_by(daemon.pid());
    assert!(
        programs.len() >= 2,
        "the daemon holds its programs: {programs:?}"
    );
    let workload = Workload::start("split", &[]);
    let mut client = daemon.client().await;
    let long_profile = tokio::spawn({
        let mut client = client.clone();
        let pid = workload.pid();
        async move {
            client
                .profile(v1::ProfileRequest {
                    duration_ms: 60_000,
                    selector: Some(v1::Selector {
                        pids: vec![pid],
                        ..Default::default()
                    }),
                    options: None,
                    mode: v1::Mode::Cpu as i32,
                    ..Default::default()
                })
                .await
        }
    });
    let mut top = client
        .top(v1::TopRequest {
            interval_ms: 200,
            ..Default::default()
        })
        .await
        .expect("Top")
        .into_inner();
    top.message()
        .await
        .expect("an update")
        .expect("the stream goes on");
    // The profile, asked before Top, is under way by now; nothing shows
    // that it is, so a moment more for it to be.
    tokio::time::sleep(Duration::from_millis(500)).await;

    daemon.signal(Signal::TERM);
    let status = daemon.exit_status(PATIENCE).await.unwrap_or_else(|| {
        panic!(
            "still running {PATIENCE:?} after SIGTERM:\n{}",
            daemon.log()
        )
    });
    assert!(status.success(), "{status}:\n{}", daemon.log());

    let cut_short = long_profile
        .await
        .expect("the request task")
        .expect_err("a 60 s profile cut short");
    assert_eq!(cut_short.code(), tonic::Code::Unavailable, "{cut_short:?}");
    assert!(
        cut_short.message().contains("shutting down"),
        "{cut_short:?}"
    );
    let ended = loop {
        match top.message().await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the Top stream ended without saying why"),
            Err(status) => break status,
        }
    };
    assert_eq!(ended.code(), tonic::Code::Unavailable, "{ended:?}");
    assert!(!daemon.socket.exists(), "the socket is removed");
    wait_until_unloaded(&programs).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn after_sigkill_nothing_stays_and_a_restart_works() {
    let mut daemon = Daemon::start().await;
    let programs = programs_held_by(daemon.pid());
    assert!(!programs.is_empty());

    // While it serves, a second instance on its socket is refused.
    let second = daemon.run_another().await;
    assert!(!second.status.success());
    let said = String::from_utf8_lossy(&second.stderr);
    assert!(said.contains("already serving"), "{said}");

    daemon.signal(Signal::KILL);
    daemon.exit_status(PATIENCE).await.expect("SIGKILL ends it");
    assert!(daemon.socket.exists(), "a killed daemon leaves its socket");
    wait_until_unloaded(&programs).await;

    daemon.restart().await;
    let mut client = daemon.client().await;
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("the restarted daemon answers")
        .into_inner();
    assert!(status.uptime_ms < 60_000);
    assert!(daemon.log().contains("stale socket"), "{}", daemon.log());
}

/// A daemon started while every CPU is busy, at 1000 Hz with its stack-copy
/// ring sized as in production (automatically: ~0.4 s of every CPU's
/// copies), loses no copy in its first seconds. Sampling used to start
/// before the rest of the kernel side was attached and the first unwinding
/// pass came 150 ms after the pipeline: on two busy CPUs the ring was full
/// at the first pass, and 37 to 116 copies were lost at each start.
#[tokio::test(flavor = "multi_thread")]
async fn a_daemon_started_on_a_busy_machine_loses_no_stack_copy() {
    crate::support::require_root();
    let cpus = std::thread::available_parallelism().map_or(2, usize::from);
    // The load runs before sampling starts, and only while no other test
    // runs: it takes every CPU.
    let args = ["--frequency-hz", "1000", "--stack-copy-buffer", "0"];
    let (daemon, busy) = Daemon::start_alone_after(&args, async || {
        let busy: Vec<Workload> = (0..cpus)
            .map(|_| Workload::start_as("many_stacks", "startbusy", &["30"]))
            .collect();
        for workload in &busy {
            crate::support::wait_for_cpu(workload.pid(), Duration::from_millis(50)).await;
        }
        busy
    })
    .await;
    // Its first seconds (its first three drains, a second apart), which
    // must lose nothing.
    let status = eventually("three drains", PATIENCE, async || {
        match daemon.status().await {
            status if status.drains >= 3 => Ok(status),
            status => Err(format!("{} drains", status.drains)),
        }
    })
    .await;
    let lost: Vec<_> = status
        .samples_lost
        .iter()
        .filter(|loss| loss.count > 0)
        .collect();
    assert!(status.samples_taken > 0, "{status:?}");
    assert!(lost.is_empty(), "lost at start: {lost:?}\n{}", daemon.log());
    drop(busy);
}
