//! Bad requests get status codes with messages that say what to fix, and
//! the daemon keeps serving; its loss counters are reported and stay zero.

use std::time::Duration;

use profilerd_client::v1;
use tonic::Code;

use crate::support::{Daemon, Workload, options, profile, selector};

#[tokio::test(flavor = "multi_thread")]
async fn bad_requests_are_refused_with_the_right_status() {
    let mut daemon = Daemon::start_with(&["--max-profile-duration", "1m"]).await;
    let mut client = daemon.client().await;
    let request = |duration_ms, pids: &[u32], format| v1::ProfileRequest {
        duration_ms,
        selector: selector(pids),
        options: Some(v1::ReportOptions {
            format,
            ..Default::default()
        }),
        mode: v1::Mode::Cpu as i32,
        ..Default::default()
    };
    let tree = v1::Format::Tree as i32;
    let cases = [
        (request(0, &[], tree), Code::InvalidArgument, "at least 1"),
        (
            request(61_000, &[], tree),
            Code::InvalidArgument,
            "longer than the longest the daemon allows, 1m",
        ),
        (
            request(100, &[], 77),
            Code::InvalidArgument,
            "unknown format value 77",
        ),
        (
            request(100, &[u32::MAX - 7], tree),
            Code::NotFound,
            "no process with id",
        ),
        (
            request(u64::MAX, &[], tree),
            Code::InvalidArgument,
            "longer than the longest the daemon allows, 1m",
        ),
        (
            v1::ProfileRequest {
                options: Some(v1::ReportOptions {
                    maxdepth: 1_000_000,
                    ..Default::default()
                }),
                ..request(100, &[], tree)
            },
            Code::InvalidArgument,
            "deeper than any stack",
        ),
    ];
    for (request, code, message) in cases {
        let status = client
            .profile(request.clone())
            .await
            .expect_err(&format!("{request:?} must fail"));
        assert_eq!(status.code(), code, "{request:?}: {status:?}");
        assert!(
            status.message().contains(message),
            "{request:?}: {status:?}"
        );
    }
    let status = client
        .stop_profile(v1::StopProfileRequest {
            session_id: "no-such-session".into(),
            options: None,
            ..Default::default()
        })
        .await
        .expect_err("stopping an unknown session fails");
    assert_eq!(status.code(), Code::NotFound, "{status:?}");

    assert!(daemon.is_running(), "the daemon died:\n{}", daemon.log());
    let workload = Workload::start("split", &[]);
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_millis(300),
        options(v1::Format::Folded),
    )
    .await;
    assert!(
        !reply.report.is_empty(),
        "a good request after bad ones works"
    );
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("the daemon still answers")
        .into_inner();
    assert!(status.samples_taken > 0, "{status:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn status_reports_sampling_and_zero_losses() {
    let (daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let _ = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(1),
        options(v1::Format::Folded),
    )
    .await;
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner();
    let online = std::fs::read_to_string("/sys/devices/system/cpu/online").expect("cpu list");
    assert!(!status.cpus.is_empty(), "{online}");
    assert_eq!(status.frequency_hz, crate::support::TEST_FREQUENCY_HZ);
    assert!(status.samples_taken > 300, "{status:?}");
    assert!(status.drains >= 2, "{status:?}");
    assert!(status.processes_seen >= 1, "{status:?}");
    let causes: Vec<&str> = status
        .samples_lost
        .iter()
        .map(|loss| loss.cause.as_str())
        .collect();
    for cause in [
        "counts_map_full",
        "stack_map_full",
        "stack_collision",
        "stack_walk_error",
    ] {
        assert!(
            causes.contains(&cause),
            "{cause} is not reported: {causes:?}"
        );
    }
    let lost: Vec<_> = status
        .samples_lost
        .iter()
        .filter(|loss| loss.count > 0)
        .collect();
    assert!(
        lost.is_empty(),
        "samples lost in an ordinary run: {lost:?}\n{}",
        daemon.log()
    );
    let log = daemon.log();
    assert!(
        !log.contains("entry by entry"),
        "the kernel maps were not drained in batches:\n{log}"
    );
    let symbolizer = status.symbolizer.expect("symbolizer status");
    assert!(symbolizer.user_addresses_cached > 0 && symbolizer.kernel_addresses_cached > 0);
    let store = status.store.expect("store status");
    assert!(store.memory_bytes > 0 && store.memory_bytes <= store.memory_limit_bytes);
    assert!(store.buckets >= 2 && store.distinct_stacks > 0, "{store:?}");
}

/// 100 streams at once from one caller: the first max_streams_per_caller
/// open, the rest are refused with RESOURCE_EXHAUSTED, the daemon answers
/// GetStatus at once, and closing streams frees their slots.
#[tokio::test(flavor = "multi_thread")]
async fn a_hundred_streams_are_bounded_per_caller() {
    let daemon = Daemon::start_with(&["--max-streams-per-caller", "8"]).await;
    let mut streams = Vec::new();
    let mut refused = 0;
    for _ in 0..100 {
        let mut client = daemon.client().await;
        match client.watch_peeks(v1::WatchPeeksRequest {}).await {
            Ok(stream) => streams.push((client, stream.into_inner())),
            Err(status) => {
                assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
                assert!(
                    status.message().contains("max_streams_per_caller"),
                    "{status:?}"
                );
                refused += 1;
            }
        }
    }
    assert_eq!((streams.len(), refused), (8, 92));

    let mut client = daemon.client().await;
    tokio::time::timeout(
        Duration::from_secs(1),
        client.get_status(v1::GetStatusRequest::default()),
    )
    .await
    .expect("GetStatus answers at once")
    .expect("GetStatus succeeds");

    streams.clear();
    // The server notices the closed streams when they reset.
    let deadline = std::time::Instant::now() + crate::support::PATIENCE;
    loop {
        match client.watch_peeks(v1::WatchPeeksRequest {}).await {
            Ok(_) => break,
            Err(status) if std::time::Instant::now() < deadline => {
                assert_eq!(status.code(), Code::ResourceExhausted);
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(status) => panic!("closed streams kept their slots: {status:?}"),
        }
    }
}
