//! SIGHUP reloads the configuration: what can change while running does,
//! what needs a restart is named, and an invalid file changes nothing.

use std::time::Duration;

use profilerd_client::v1;
use rustix::process::Signal;

use crate::support::Daemon;

/// Sends SIGHUP and waits for the daemon to log `expected` (once more than
/// before).
pub async fn reload(daemon: &Daemon, expected: &str) {
    let before = daemon.log().matches(expected).count();
    daemon.signal(Signal::HUP);
    crate::support::eventually(
        &format!("{expected:?} logged after SIGHUP"),
        crate::support::PATIENCE,
        async || match daemon.log() {
            log if log.matches(expected).count() > before => Ok(()),
            log => Err(log),
        },
    )
    .await;
}

async fn status(client: &mut crate::support::Client) -> v1::StatusReply {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn sighup_applies_what_it_can_and_names_the_rest() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("profilerd.toml");
    let path = file.display().to_string();
    std::fs::write(&file, "frequency_hz = 499\nretention = \"1h\"\n").expect("written");
    let daemon = Daemon::start_with(&["--config", &path]).await;
    let mut client = daemon.client().await;
    assert_eq!(status(&mut client).await.frequency_hz, 499);

    std::fs::write(
        &file,
        "frequency_hz = 199\nretention = \"30m\"\nresolution = \"5s\"\nmax_sessions = 3\n\
         log_level = \"debug\"\n",
    )
    .expect("written");
    reload(&daemon, "configuration reloaded").await;
    let reloaded = status(&mut client).await;
    assert_eq!(reloaded.frequency_hz, 199);
    let store = reloaded.store.expect("a store status");
    assert_eq!(store.retention_ms, 30 * 60 * 1000);
    assert_eq!(store.resolution_ms, 5000);
    let log = daemon.log();
    assert!(
        log.lines()
            .any(|line| line.contains("after a restart") && line.contains("max_sessions")),
        "{log}"
    );
    // The kernel samples at the new rate: a spinning workload gets about
    // 199 samples per second of its CPU.
    let workload = crate::support::Workload::start("split", &[]);
    let reply = crate::support::profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(2),
        crate::support::options(v1::Format::Folded),
    )
    .await;
    let summary = reply.summary.expect("a summary");
    let per_cpu_second = summary.samples as f64 / (summary.cpu_nanos as f64 / 1e9);
    assert!(
        (150.0..250.0).contains(&per_cpu_second),
        "{per_cpu_second} samples per CPU-second at 199 Hz: {summary:?}"
    );
    assert_eq!(summary.frequency_hz, 199);

    // An invalid file changes nothing and says which key is wrong.
    std::fs::write(&file, "frequency_hz = 5000\nretention = \"10m\"\n").expect("written");
    reload(&daemon, "was not reloaded").await;
    assert!(daemon.log().contains("frequency_hz"), "{}", daemon.log());
    let unchanged = status(&mut client).await;
    assert_eq!(unchanged.frequency_hz, 199);
    assert_eq!(
        unchanged.store.expect("a store status").retention_ms,
        30 * 60 * 1000
    );
}
