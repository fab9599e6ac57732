//! The store's history: past buckets merged at the resolution, windows that
//! are still open kept exact; and Top, the live view of the last interval.

use std::time::Duration;

use profilerd_client::v1;

use crate::support::{Daemon, Workload};

async fn store_status(client: &mut crate::support::Client) -> v1::StoreStatus {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus")
        .into_inner()
        .store
        .expect("a store status")
}

/// The store's status, and the drains so far.
async fn store_and_drains(client: &mut crate::support::Client) -> (v1::StoreStatus, u64) {
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus")
        .into_inner();
    (status.store.expect("a store status"), status.drains)
}

/// With 3 s buckets, a session open for 7 s keeps its buckets as drained
/// (its report covers exactly its window); once it is stopped, the spans
/// behind it are merged into 3 s buckets.
#[tokio::test(flavor = "multi_thread")]
async fn past_buckets_are_merged_but_open_windows_stay_exact() {
    let daemon = Daemon::start_with(&["--resolution", "3s"]).await;
    let mut client = daemon.client().await;
    let workload = Workload::start("split", &[]);
    let selector = Some(v1::Selector {
        pids: vec![workload.pid()],
        ..Default::default()
    });
    let session = client
        .start_profile(v1::StartProfileRequest {
            selector: selector.clone(),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .expect("StartProfile")
        .into_inner();
    // Long enough for spans of 3 s to complete behind the drains: what an
    // open session must keep from being merged.
    tokio::time::sleep(Duration::from_secs(7)).await;

    let (held, drains_held) = store_and_drains(&mut client).await;
    assert_eq!(held.resolution_ms, 3000);
    // Drains are 1 s apart: a merged span would be about 3 s.
    assert!(
        held.coarsest_bucket_ms < 2000,
        "buckets of an open session were merged: {held:?}"
    );

    let report = client
        .stop_profile(v1::StopProfileRequest {
            session_id: session.session_id,
            options: Some(crate::support::options(v1::Format::Folded)),
            ..Default::default()
        })
        .await
        .expect("StopProfile")
        .into_inner();
    let summary = report.summary.expect("a summary");
    assert_eq!(
        summary.start_unix_nanos, session.start_unix_nanos,
        "the report starts where the session did"
    );
    assert!(
        crate::support::samples_containing(&crate::support::folded(&report.report))
            .contains_key("hot")
    );

    // Once the session let go, the spans behind it are merged.
    let (merged, drains_merged) = crate::support::eventually(
        "a span is merged after the session ended",
        crate::support::PATIENCE,
        async || match store_and_drains(&mut client).await {
            (merged, drains) if merged.coarsest_bucket_ms >= 2500 => Ok((merged, drains)),
            (merged, _) => Err(format!("{merged:?}")),
        },
    )
    .await;
    // Fewer buckets than the drains since would have added unmerged (a
    // bucket each).
    let drained = drains_merged - drains_held;
    assert!(
        merged.buckets < held.buckets + drained,
        "{held:?} then {merged:?}, {drained} drains later"
    );
    assert_eq!(merged.buckets_evicted_for_memory, 0);
    assert_eq!(merged.buckets_coarsened_for_memory, 0);
}

/// Top streams, every interval, the selection's functions with the most
/// self samples: for split, spin (which hot and cold call) leads.
#[tokio::test(flavor = "multi_thread")]
async fn top_streams_the_hottest_functions_every_interval() {
    let (daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let mut updates = client
        .top(v1::TopRequest {
            selector: Some(v1::Selector {
                pids: vec![workload.pid()],
                ..Default::default()
            }),
            interval_ms: 500,
            limit: 5,
            user_only: true,
            ..Default::default()
        })
        .await
        .expect("Top")
        .into_inner();
    let mut windows = Vec::new();
    for _ in 0..3 {
        let update = updates
            .message()
            .await
            .expect("an update")
            .expect("the stream goes on");
        let summary = update.summary.expect("a summary");
        assert!(update.functions.len() <= 5);
        assert!(summary.samples > 0, "{summary:?}");
        let first = &update.functions[0];
        assert!(
            first.function.contains("spin") || first.function.starts_with("hot"),
            "{:?}",
            update.functions
        );
        assert!(
            update
                .functions
                .iter()
                .all(|f| f.module != "[kernel]" || f.function == "[kernel]"),
            "user_only: {:?}",
            update.functions
        );
        windows.push((summary.start_unix_nanos, summary.end_unix_nanos));
    }
    // Consecutive windows, end to end, on a 0.5 s cadence: a busy machine
    // delays the drain that ends one, and the next is shorter to keep time.
    for pair in windows.windows(2) {
        assert_eq!(pair[0].1, pair[1].0, "{windows:?}");
    }
    let spanned = Duration::from_nanos((windows[2].1 - windows[0].0) as u64);
    assert!(
        spanned > Duration::from_millis(1200) && spanned < Duration::from_secs(6),
        "{windows:?}"
    );
    for (start, end) in &windows {
        assert!(end - start > 50_000_000, "{windows:?}");
    }
    drop(updates);

    let bad = client
        .top(v1::TopRequest {
            interval_ms: 10,
            ..Default::default()
        })
        .await
        .expect_err("an interval of 10 ms is refused");
    assert_eq!(bad.code(), tonic::Code::InvalidArgument, "{bad:?}");

    // The CLI, not on a terminal: one block per update.
    let pid = workload.pid().to_string();
    let output = crate::support::profilerctl(
        &daemon.socket,
        &["top", "--pid", &pid, "--interval", "300ms", "--count", "2"],
    )
    .await;
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert_eq!(text.matches("profilerd top: ").count(), 2, "{text}");
    assert!(text.contains(" spin"), "{text}");
}

/// A drain flips the kernel's generation of maps while the sampling
/// programs run on every CPU, and reads the old one once no run is still
/// writing into it. Hundreds of drains on request under load must neither
/// lose a sample nor count one twice: once the sampled processes are gone
/// (the kernel samples only them), the whole held window holds exactly the
/// samples the kernel counted.
#[tokio::test(flavor = "multi_thread")]
async fn drains_on_request_under_load_lose_and_double_count_nothing() {
    let daemon = Daemon::start_with(&["--frequency-hz", "999"]).await;
    let mut client = daemon.client().await;
    let mut load = [
        Workload::start_as("many_stacks", "drains_a", &["4"]),
        Workload::start_as("many_stacks", "drains_b", &["4"]),
    ];
    // Only the load from now on: other tests' processes would still be
    // sampled after it ends, and a sample whose stack copy is read at one
    // drain may be counted by the kernel at the next.
    client
        .set_targets(v1::SetTargetsRequest {
            pids: load.iter().map(Workload::pid).collect(),
            ..Default::default()
        })
        .await
        .expect("SetTargets");
    let mut drains = 0;
    while load
        .iter_mut()
        .any(|workload| workload.try_wait().is_none())
    {
        // A query of the last instant: each one drains first.
        client
            .query(v1::QueryRequest {
                start_unix_nanos: crate::support::unix_nanos() - 1_000_000,
                options: Some(crate::support::options(v1::Format::Folded)),
                mode: v1::Mode::Cpu as i32,
                ..Default::default()
            })
            .await
            .expect("Query of the last instant");
        drains += 1;
    }
    assert!(drains >= 100, "only {drains} drains on request in 4 s");

    // Nothing is sampled any more: the window's drain reads the rest.
    let oldest = store_status(&mut client).await.oldest_unix_nanos;
    let held = client
        .query(v1::QueryRequest {
            start_unix_nanos: oldest,
            options: Some(crate::support::options(v1::Format::Folded)),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .expect("Query of the whole window")
        .into_inner();
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus")
        .into_inner();
    let summary = held.summary.expect("a summary");
    // Two loads of 4 s at 999 Hz: up to 8,000 samples on two CPUs, fewer
    // when other tests' workloads share them (3,291 seen in a full run).
    assert!(
        status.samples_taken > 2_000,
        "the load was barely sampled: {status:?}"
    );
    assert_eq!(
        summary.samples, status.samples_taken,
        "the held window's samples against the kernel's count after {drains} drains on request \
         ({summary:?})"
    );
}
