//! Perf maps (`/tmp/perf-PID.map`) are files their process's user writes:
//! an unprivileged user may put anything there. These tests run JIT-like
//! workloads as `nobody` with hostile or huge perf maps and check that
//! root's reports still answer, that nothing nobody may not read shows,
//! that the JIT names that fit still appear, and that the daemon keeps to
//! its memory budget.

use std::{
    io::BufRead as _,
    os::unix::fs::PermissionsExt as _,
    path::{Path, PathBuf},
    process::{Child, Stdio},
    time::Duration,
};

use profilerd_client::v1;

use crate::support::{
    BUDGETED, Daemon, User, assert_within_budget, folded, memory_part, options, profile,
};

/// A JIT-like workload running as `nobody`: code in anonymous memory, named
/// (or not) in its perf map; the code's address as it printed it.
struct Jit {
    child: Child,
    code: u64,
}

impl Jit {
    fn start(user: &User, args: &[&str]) -> Self {
        let mut child = user
            .command(user.program("jit_spin"))
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("setpriv starts jit_spin");
        // It prints the code's address once its perf map is written.
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("its output"))
            .read_line(&mut line)
            .expect("jit_spin says where its code is");
        let code = u64::from_str_radix(line.trim(), 16)
            .unwrap_or_else(|_| panic!("jit_spin printed {line:?}"));
        Self { child, code }
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn perf_map(&self) -> PathBuf {
        PathBuf::from(format!("/tmp/perf-{}.map", self.pid()))
    }
}

impl Drop for Jit {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(self.perf_map());
    }
}

/// Gives `path` (not following a link) to `nobody`, as if nobody made it.
fn give_to_nobody(path: &Path) {
    let nobody = rustix::process::Uid::from_raw(65534);
    rustix::fs::chownat(
        rustix::fs::CWD,
        path,
        Some(nobody),
        Some(rustix::process::Gid::from_raw(65534)),
        rustix::fs::AtFlags::SYMLINK_NOFOLLOW,
    )
    .expect("root may give a file away");
}

/// The folded profile of `pid` over the next `seconds`, by root; a report
/// that does not come within a minute fails the test (it froze).
async fn folded_within_a_minute(daemon: &Daemon, pids: Vec<u32>, seconds: u64) -> Vec<String> {
    let mut client = daemon.client().await;
    let asked = profile(
        &mut client,
        &pids,
        Duration::from_secs(seconds),
        options(v1::Format::Folded),
    );
    let reply = tokio::time::timeout(Duration::from_secs(60 + seconds), asked)
        .await
        .unwrap_or_else(|_| panic!("root's report froze:\n{}", daemon.log()));
    folded(&reply.report)
        .into_iter()
        .flat_map(|(frames, _)| frames)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_perf_maps_neither_freeze_reports_nor_show_what_nobody_may_not_read() {
    let daemon = Daemon::start_with(BUDGETED).await;
    let nobody = User::nobody(&daemon);
    let secret_dir = tempfile::tempdir().expect("a temporary directory");
    let secret = secret_dir.path().join("root-only.map");

    // A FIFO: opening it for reading would wait for a writer forever.
    let fifo = Jit::start(&nobody, &["--no-map"]);
    rustix::fs::mkfifoat(
        rustix::fs::CWD,
        fifo.perf_map(),
        rustix::fs::Mode::from_raw_mode(0o644),
    )
    .expect("a FIFO is made");
    give_to_nobody(&fifo.perf_map());
    // A link to a root-only file that names the workload's own code.
    let linked = Jit::start(&nobody, &["--no-map"]);
    std::fs::write(
        &secret,
        format!("{:x} 9 ROOT_ONLY_SECRET_NAME\n", linked.code),
    )
    .expect("the secret is written");
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).expect("root only");
    std::os::unix::fs::symlink(&secret, linked.perf_map()).expect("linked");
    give_to_nobody(&linked.perf_map());
    // A link to a device that never ends.
    let device = Jit::start(&nobody, &["--no-map"]);
    std::os::unix::fs::symlink("/dev/zero", device.perf_map()).expect("linked");
    give_to_nobody(&device.perf_map());
    // A sparse gigabyte of nothing, nobody's own.
    let sparse = Jit::start(&nobody, &["--no-map"]);
    std::fs::File::create(sparse.perf_map())
        .and_then(|file| file.set_len(1 << 30))
        .expect("a sparse file is made");
    give_to_nobody(&sparse.perf_map());

    let pids = [fifo.pid(), linked.pid(), device.pid(), sparse.pid()];
    let frames = folded_within_a_minute(&daemon, pids.to_vec(), 3).await;
    assert!(
        frames.iter().any(|frame| frame.contains("[anon")),
        "the workloads' anonymous code is sampled: {frames:?}"
    );
    assert!(
        !frames
            .iter()
            .any(|frame| frame.contains("ROOT_ONLY_SECRET")),
        "a root-only file's line became a function name: {frames:?}"
    );
    // The whole machine's history answers too, and a second time.
    for _ in 0..2 {
        let mut client = daemon.client().await;
        let end = crate::support::unix_nanos();
        let asked = client.query(v1::QueryRequest {
            start_unix_nanos: end - 10_000_000_000,
            end_unix_nanos: end,
            options: Some(options(v1::Format::Folded)),
            ..Default::default()
        });
        tokio::time::timeout(Duration::from_secs(60), asked)
            .await
            .expect("root's query froze")
            .expect("the query answers");
    }

    let status = daemon.status().await;
    let jit = status
        .jit
        .clone()
        .expect("status says what JIT names it read");
    let refused = |reason: &str| {
        jit.refused
            .iter()
            .find(|refused| refused.cause == reason)
            .map_or(0, |refused| refused.count)
    };
    assert!(refused("not_a_regular_file") >= 1, "the FIFO: {jit:?}");
    assert!(refused("symbolic_link") >= 2, "the two links: {jit:?}");
    assert!(jit.lines_too_long >= 1, "the sparse file's zeros: {jit:?}");
    // At most 64 MiB of each file past it is read: the sparse one here
    // (the daemon sees every process, so a test beside this one with maps
    // as long adds its own).
    assert!(jit.files_cut >= 1, "the sparse file is cut: {jit:?}");
    assert!(
        jit.bytes_read <= (65 << 20) * jit.files_cut,
        "at most 64 MiB of each long file is read: {jit:?}"
    );
    assert_within_budget(&status, &daemon);
}

/// Profiles `jit` in rounds of 5 s until its code is named; fails after
/// 90 s.
async fn named_within_90_s(daemon: &Daemon, jit: &Jit) {
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let frames = folded_within_a_minute(daemon, vec![jit.pid()], 5).await;
        if frames.iter().any(|frame| frame == "JIT:jit_hot_loop") {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "process {}'s JIT code is not named after 90 s: {frames:?}\n{:?}",
            jit.pid(),
            daemon.status().await.jit
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn four_64_mib_perf_maps_stay_within_the_budget_and_their_names_appear() {
    let daemon = Daemon::start_with(BUDGETED).await;
    let nobody = User::nobody(&daemon);
    // The line naming each workload's code lies 32 MiB into its map.
    let jits: Vec<Jit> = (0..4).map(|_| Jit::start(&nobody, &["32", "32"])).collect();
    for jit in &jits {
        let size = std::fs::metadata(jit.perf_map()).expect("a perf map").len();
        assert!(size >= 64 << 20, "{size} bytes");
    }
    // Each map's line is 32 MiB in and the four are read together within
    // the reader's rate: a few seconds on an idle machine, more beside
    // other tests. A name found late names only the samples after it.
    tokio::join!(
        named_within_90_s(&daemon, &jits[0]),
        named_within_90_s(&daemon, &jits[1]),
        named_within_90_s(&daemon, &jits[2]),
        named_within_90_s(&daemon, &jits[3]),
    );
    let status = daemon.status().await;
    let jit_names = memory_part(&status, "jit_names");
    assert!(
        jit_names.held_bytes <= jit_names.share_bytes,
        "{jit_names:?}"
    );
    assert_within_budget(&status, &daemon);
}
