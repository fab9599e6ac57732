//! Selection by cgroup and name: SetTargets makes the kernel sample only
//! the processes named (by pid, or by a cgroup the test creates), counting
//! the ticks of the others; selectors by command regex and cgroup pick
//! exactly the right processes out of a profile.

use std::{path::PathBuf, time::Duration};

use profilerd::kernel::cgroups::cgroup2_root;
use profilerd_client::v1;

use crate::support::{Client, Daemon, Workload, options, profile};

use std::collections::BTreeSet;

/// A cgroup of the test's own, removed when dropped (after its processes).
struct TestCgroup {
    path: String,
    directory: PathBuf,
}

impl TestCgroup {
    /// A cgroup of its own for one test: tests run side by side in one process, so the name carries
    /// the test's name as well as the process id.
    fn create(test: &str) -> Self {
        let root = cgroup2_root().expect("cgroup v2 is mounted");
        let path = format!("/profilerd-test-{}-{test}", std::process::id());
        let directory = root.join(path.trim_start_matches('/'));
        std::fs::create_dir_all(&directory).expect("the test cgroup is created");
        Self { path, directory }
    }

    fn adopt(&self, pid: u32) {
        std::fs::write(self.directory.join("cgroup.procs"), pid.to_string())
            .expect("the process moves into the test cgroup");
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.directory);
    }
}

async fn samples_of(client: &mut Client, pid: u32) -> u64 {
    profile(
        client,
        &[pid],
        Duration::from_millis(700),
        options(v1::Format::Flat),
    )
    .await
    .summary
    .expect("a summary")
    .samples
}

async fn set(client: &mut Client, request: v1::SetTargetsRequest) -> v1::Targets {
    client
        .set_targets(request)
        .await
        .unwrap_or_else(|status| panic!("SetTargets failed: {status:?}"))
        .into_inner()
}

async fn outside(client: &mut Client) -> u64 {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus answers")
        .into_inner()
        .samples_outside_targets
}

#[tokio::test(flavor = "multi_thread")]
async fn targets_select_processes_in_the_kernel() {
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let cgroup = TestCgroup::create("targets");
    let inside = Workload::start_as("peek_threads", "target-inside", &[]);
    let other = Workload::start_as("peek_threads", "target-other", &[]);
    cgroup.adopt(inside.pid());

    let targets = set(
        &mut client,
        v1::SetTargetsRequest {
            cgroups: vec![cgroup.path.clone()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(targets.cgroups, std::slice::from_ref(&cgroup.path));
    assert!(!targets.everything);
    let before = outside(&mut client).await;
    assert!(samples_of(&mut client, inside.pid()).await > 0);
    assert_eq!(samples_of(&mut client, other.pid()).await, 0);
    assert!(
        outside(&mut client).await > before,
        "the other's ticks are counted"
    );

    set(
        &mut client,
        v1::SetTargetsRequest {
            pids: vec![other.pid()],
            ..Default::default()
        },
    )
    .await;
    assert!(samples_of(&mut client, other.pid()).await > 0);
    assert_eq!(samples_of(&mut client, inside.pid()).await, 0);

    let everything = set(
        &mut client,
        v1::SetTargetsRequest {
            everything: true,
            ..Default::default()
        },
    )
    .await;
    assert!(everything.everything);
    assert!(samples_of(&mut client, inside.pid()).await > 0);
    assert!(samples_of(&mut client, other.pid()).await > 0);

    for (request, message) in [
        (v1::SetTargetsRequest::default(), "name the pids or cgroups"),
        (
            v1::SetTargetsRequest {
                cgroups: vec!["/no/such/cgroup".into()],
                ..Default::default()
            },
            "does not exist",
        ),
    ] {
        let status = client
            .set_targets(request)
            .await
            .expect_err("a bad SetTargets fails");
        assert_eq!(status.code(), tonic::Code::InvalidArgument);
        assert!(status.message().contains(message), "{status:?}");
    }
    drop((inside, other));
}

/// The processes a one-second flat report grouped by process holds.
async fn processes_selected(client: &mut Client, selector: v1::Selector) -> BTreeSet<u32> {
    let reply = client
        .profile(v1::ProfileRequest {
            duration_ms: 1000,
            selector: Some(selector),
            options: Some(v1::ReportOptions {
                format: v1::Format::Flat as i32,
                groupby: v1::GroupBy::Process as i32,
                ..Default::default()
            }),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("Profile failed: {status:?}"))
        .into_inner();
    String::from_utf8_lossy(&reply.report)
        .lines()
        .filter_map(|line| {
            line.strip_prefix("Process ")?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn selectors_by_command_regex_and_cgroup_pick_exactly() {
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let cgroup = TestCgroup::create("selectors");
    let alpha = Workload::start_as("peek_threads", "select-alpha", &[]);
    let beta = Workload::start_as("peek_threads", "select-beta", &[]);
    let gamma = Workload::start_as("peek_threads", "other-gamma", &[]);
    cgroup.adopt(gamma.pid());

    let by_regex = processes_selected(
        &mut client,
        v1::Selector {
            comm_regex: "^select-(alpha|beta)$".into(),
            ..Default::default()
        },
    )
    .await;
    assert_eq!(by_regex, BTreeSet::from([alpha.pid(), beta.pid()]));

    let by_cgroup = processes_selected(
        &mut client,
        v1::Selector {
            cgroups: vec![cgroup.path.clone()],
            ..Default::default()
        },
    )
    .await;
    assert_eq!(by_cgroup, BTreeSet::from([gamma.pid()]));

    let status = client
        .profile(v1::ProfileRequest {
            duration_ms: 100,
            selector: Some(v1::Selector {
                comm_regex: "select-(".into(),
                ..Default::default()
            }),
            options: None,
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .expect_err("an invalid regex is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    assert!(
        status
            .message()
            .contains("\"select-(\" is not valid: unclosed group"),
        "{status:?}"
    );
    drop((alpha, beta, gamma));
}
