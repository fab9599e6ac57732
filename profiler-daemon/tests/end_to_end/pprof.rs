//! pprof output is read by `go tool pprof`.

use std::time::Duration;

use profilerd_client::v1;

use crate::support::{options, profile};

#[tokio::test(flavor = "multi_thread")]
async fn go_tool_pprof_reads_our_profiles() {
    let (_daemon, workload, mut client) = crate::support::daemon_and_workload("split", &[]).await;
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(2),
        options(v1::Format::Pprof),
    )
    .await;
    assert_eq!(reply.format, v1::Format::Pprof as i32);
    let stdout = crate::support::go_pprof_top(&reply.report);
    let hot = stdout
        .lines()
        .find(|line| line.split_whitespace().last() == Some("hot"))
        .unwrap_or_else(|| panic!("go tool pprof -top does not name hot:\n{stdout}"));
    // The top entry by flat time is hot's callee, spin, or hot itself.
    assert!(stdout.contains("spin"), "{stdout}");
    assert!(hot.contains('%'), "{hot}");
}
