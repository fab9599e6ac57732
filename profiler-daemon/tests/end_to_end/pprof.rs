//! pprof output is read by `go tool pprof`.

use std::{process::Command, time::Duration};

use profilerd::proto::v1;

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
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("profile.pb.gz");
    std::fs::write(&path, &reply.report).expect("the profile is written");

    let output = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .arg(&path)
        .env("HOME", dir.path())
        .env("PPROF_TMPDIR", dir.path())
        .output()
        .expect("`go` runs: install golang-go (cargo xtask test does)");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "go tool pprof failed:\n{stderr}");
    let hot = stdout
        .lines()
        .find(|line| line.split_whitespace().last() == Some("hot"))
        .unwrap_or_else(|| panic!("go tool pprof -top does not name hot:\n{stdout}\n{stderr}"));
    // The top entry by flat time is hot's callee, spin, or hot itself.
    assert!(stdout.contains("spin"), "{stdout}");
    assert!(hot.contains('%'), "{hot}");
}
