//! What one user may see of another's: each sample is shown by the uid the
//! kernel recorded with it (not by who owns its pid now), setuid and
//! undumpable processes only to root, kernel addresses only to those the
//! kernel shows them to, and no user can crowd the others out of sessions
//! or peek reports. Each test acts as `nobody` (or another uid) through
//! `setpriv`, against a real daemon.

use std::time::Duration;

use crate::support::{self, Daemon, User, Workload, error_of, spawn_with_pid, stdout_of};

/// Frames of a folded report, all of them.
fn functions(folded: &str) -> Vec<String> {
    support::folded(folded.as_bytes())
        .into_iter()
        .flat_map(|(frames, _)| frames)
        .collect()
}

fn has(folded: &str, function: &str) -> bool {
    functions(folded).iter().any(|frame| frame == function)
}

#[tokio::test(flavor = "multi_thread")]
async fn history_is_shown_by_the_uid_recorded_with_each_sample() {
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let socket = &daemon.socket;

    // A process that spins as root, then becomes nobody (and dumpable).
    let switching = Workload::start("switch_user", &["1.5"]);
    let pid = switching.pid().to_string();
    tokio::time::sleep(Duration::from_millis(3000)).await;
    let query = [
        "query", "--since", "1m", "--pid", &pid, "--format", "folded",
    ];
    let as_root = stdout_of(&support::profilerctl(socket, &query).await);
    assert!(
        has(&as_root, "root_phase") && has(&as_root, "nobody_phase"),
        "root sees both phases:\n{as_root}\n{}",
        daemon.log()
    );
    let as_nobody = stdout_of(&nobody.profilerctl(socket, &query).await);
    assert!(has(&as_nobody, "nobody_phase"), "{as_nobody}");
    assert!(
        !has(&as_nobody, "root_phase"),
        "nobody sees the phase that ran as root:\n{as_nobody}"
    );
    drop(switching);

    // Root's process exits; nobody's gets its pid.
    let mut roots = Workload::start("split", &["1"]);
    let reused = roots.pid();
    roots.wait();
    let program = nobody.program("peek_threads");
    let _nobodys: Workload = spawn_with_pid(reused, || nobody.command(&program)).into();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let pid = reused.to_string();
    let query = [
        "query", "--since", "1m", "--pid", &pid, "--format", "folded",
    ];
    let as_root = stdout_of(&support::profilerctl(socket, &query).await);
    assert!(
        has(&as_root, "hot") && has(&as_root, "spin_alpha"),
        "root sees both processes of pid {pid}:\n{as_root}"
    );
    let as_nobody = stdout_of(&nobody.profilerctl(socket, &query).await);
    assert!(has(&as_nobody, "spin_alpha"), "{as_nobody}");
    assert!(
        !has(&as_nobody, "hot") && !has(&as_nobody, "cold"),
        "nobody sees root's earlier process of pid {pid}:\n{as_nobody}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn sessions_and_top_do_not_follow_a_reused_pid() {
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let socket = daemon.socket.clone();

    let own = nobody.start("peek_threads", &[]);
    let reused = own.pid();
    let pid = reused.to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let session = stdout_of(&nobody.profilerctl(&socket, &["start", "--pid", &pid]).await);
    let session = session.trim().to_owned();
    let top = {
        let mut command = nobody.profilerctl_command(&socket);
        command.args(["top", "--pid", &pid, "--interval", "500ms", "--count", "6"]);
        tokio::task::spawn_blocking(move || command.output().expect("profilerctl runs"))
    };
    tokio::time::sleep(Duration::from_millis(700)).await;

    // Nobody's process exits; root's takes its pid.
    drop(own);
    let split = support::build_workload("split");
    let _roots: Workload = spawn_with_pid(reused, || std::process::Command::new(&split)).into();
    tokio::time::sleep(Duration::from_millis(2500)).await;

    let top = stdout_of(&top.await.expect("top finishes"));
    assert!(
        top.contains("spin_alpha"),
        "top showed nobody's own:\n{top}"
    );
    assert!(
        !top.contains(" hot ") && !top.contains(" cold "),
        "top streamed root's process of pid {pid}:\n{top}"
    );
    let stopped = stdout_of(
        &nobody
            .profilerctl(&socket, &["stop", &session, "--format", "folded"])
            .await,
    );
    assert!(has(&stopped, "spin_alpha"), "{stopped}");
    assert!(
        !has(&stopped, "hot") && !has(&stopped, "cold"),
        "the session's report holds root's process of pid {pid}:\n{stopped}"
    );
    let as_root = stdout_of(
        &support::profilerctl(
            &socket,
            &[
                "query", "--since", "1m", "--pid", &pid, "--format", "folded",
            ],
        )
        .await,
    );
    assert!(has(&as_root, "hot"), "root's process ran:\n{as_root}");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_owner_or_an_admin_by_force_stops_a_session() {
    let daemon =
        Daemon::start_with(&["--max-sessions", "8", "--max-sessions-per-caller", "4"]).await;
    let socket = daemon.socket.clone();
    let first = User::new(60001, &daemon);
    let second = User::new(60002, &daemon);
    let roots = Workload::start("peek_threads", &[]);
    let root_pid = roots.pid().to_string();
    let of_first = first.start("peek_threads", &[]);
    let of_second = second.start("peek_threads", &[]);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Another user's session can be neither stopped nor read.
    let roots_session =
        stdout_of(&support::profilerctl(&socket, &["start", "--pid", &root_pid]).await);
    let roots_session = roots_session.trim();
    let refused = error_of(&first.profilerctl(&socket, &["stop", roots_session]).await);
    assert!(
        refused.contains("belongs to another caller") && refused.contains("PermissionDenied"),
        "{refused}"
    );
    stdout_of(&support::profilerctl(&socket, &["stop", roots_session, "-f", "folded"]).await);

    // Users cannot take the sessions kept for root (a quarter: 2 of 8).
    let mut firsts = Vec::new();
    for _ in 0..4 {
        firsts.push(
            stdout_of(&start_session(&first, &socket, of_first.pid()).await)
                .trim()
                .to_owned(),
        );
    }
    for _ in 0..2 {
        stdout_of(&start_session(&second, &socket, of_second.pid()).await);
    }
    let full = error_of(&start_session(&second, &socket, of_second.pid()).await);
    assert!(
        full.contains("kept for root and the admin group") && full.contains("ResourceExhausted"),
        "{full}"
    );
    for _ in 0..2 {
        stdout_of(&support::profilerctl(&socket, &["start", "--pid", &root_pid]).await);
    }

    // Root lists every session, a user its own.
    let listed = stdout_of(&support::profilerctl(&socket, &["sessions"]).await);
    assert_eq!(listed.lines().count(), 1 + 8, "{listed}");
    assert_eq!(listed.matches("uid 60001").count(), 4, "{listed}");
    let own = stdout_of(&first.profilerctl(&socket, &["sessions"]).await);
    assert_eq!(own.lines().count(), 1 + 4, "{own}");
    assert!(
        !own.contains("uid 60002") && !own.contains("uid 0 "),
        "{own}"
    );

    // Root ends a user's session only by force; the room is free again.
    let unforced = error_of(&support::profilerctl(&socket, &["stop", &firsts[0]]).await);
    assert!(unforced.contains("--force"), "{unforced}");
    stdout_of(
        &support::profilerctl(&socket, &["stop", "--force", &firsts[0], "-f", "folded"]).await,
    );
    stdout_of(&start_session(&second, &socket, of_second.pid()).await);
}

/// `profilerctl start --pid PID` as `user`.
async fn start_session(user: &User, socket: &std::path::Path, pid: u32) -> std::process::Output {
    user.profilerctl(socket, &["start", "--pid", &pid.to_string()])
        .await
}

#[tokio::test(flavor = "multi_thread")]
async fn setuid_processes_are_seen_by_root_only() {
    use std::os::unix::fs::PermissionsExt as _;
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let socket = daemon.socket.clone();
    let mut client = daemon.client().await;
    let mut watcher = client
        .watch_peeks(profilerd_client::v1::WatchPeeksRequest {})
        .await
        .expect("WatchPeeks answers")
        .into_inner();

    // A setuid-root copy of a workload, run by nobody: real uid nobody,
    // effective and saved uid root, not dumpable.
    let setuid = nobody.program("peek_threads");
    std::fs::set_permissions(&setuid, std::fs::Permissions::from_mode(0o4755))
        .expect("the copy is made setuid");
    let running = Workload::from(
        nobody
            .command(&setuid)
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("it starts"),
    );
    // setpriv execs the program: wait for the setuid program to run.
    let status =
        || std::fs::read_to_string(format!("/proc/{}/status", running.pid())).unwrap_or_default();
    for _ in 0..100 {
        if status().contains("Uid:\t65534\t0\t0") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        status().contains("Uid:\t65534\t0\t0"),
        "setuid took effect:\n{}",
        status()
    );
    let own = nobody.start("split", &[]);
    let pid = running.pid().to_string();
    tokio::time::sleep(Duration::from_millis(1500)).await;

    for args in [
        vec!["peek", &pid],
        vec!["profile", "--pid", &pid, "--duration", "1s"],
    ] {
        let refused = error_of(&nobody.profilerctl(&socket, &args).await);
        assert!(
            refused.contains("setuid program") && refused.contains("PermissionDenied"),
            "{args:?}: {refused}"
        );
    }
    // Its history is not among nobody's own, though its real uid is nobody's.
    // By process: other tests run peek_threads as nobody meanwhile, and the
    // daemon sees the whole machine.
    let mine = stdout_of(
        &nobody
            .profilerctl(
                &socket,
                &[
                    "query",
                    "--since",
                    "1m",
                    "--uid",
                    "65534",
                    "--groupby",
                    "process",
                    "-f",
                    "folded",
                ],
            )
            .await,
    );
    let processes: Vec<String> = support::folded(mine.as_bytes())
        .into_iter()
        .filter_map(|(frames, _)| frames.into_iter().next())
        .collect();
    let own_process = format!("split-{}", own.pid());
    assert!(
        processes.contains(&own_process),
        "nobody's own process is there:\n{mine}"
    );
    let setuid_process = format!("-{pid}");
    assert!(
        !processes
            .iter()
            .any(|process| process.ends_with(&setuid_process)),
        "the setuid process is shown to nobody:\n{mine}"
    );
    let roots = stdout_of(
        &support::profilerctl(
            &socket,
            &["query", "--since", "1m", "--pid", &pid, "-f", "folded"],
        )
        .await,
    );
    assert!(has(&roots, "spin_alpha"), "root sees it:\n{roots}");

    // Nobody may signal it (its real uid is nobody's): the peek happens,
    // but its report is root's only.
    let killed = nobody
        .command("kill")
        .args(["-USR1", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let report = support::next_peek_of(&mut watcher, running.pid(), Duration::from_secs(5))
        .await
        .unwrap_or_else(|| panic!("no peek report:\n{}", daemon.log()));
    assert!(
        report.text.contains("root and the admin group only"),
        "{}",
        report.text
    );
    let listed = stdout_of(&nobody.profilerctl(&socket, &["peeks"]).await);
    assert!(
        !listed.contains(&report.id),
        "nobody lists the report:\n{listed}"
    );
    let shown = error_of(
        &nobody
            .profilerctl(&socket, &["peeks", "--id", &report.id])
            .await,
    );
    assert!(shown.contains("NotFound"), "{shown}");
    stdout_of(&support::profilerctl(&socket, &["peeks", "--id", &report.id]).await);
    drop(own);
}

#[tokio::test(flavor = "multi_thread")]
async fn kernel_addresses_are_shown_only_to_who_may_read_them() {
    let daemon = Daemon::start().await;
    let nobody = User::nobody(&daemon);
    let socket = daemon.socket.clone();
    let syscalls = nobody.start("syscalls", &[]);
    let pid = syscalls.pid().to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    // What the kernel shows nobody of its own symbols.
    let kallsyms = stdout_of(
        &nobody
            .command("head")
            .args(["-1", "/proc/kallsyms"])
            .output()
            .expect("head runs"),
    );
    assert!(
        kallsyms.starts_with("0000000000000000 "),
        "this test needs a kernel that hides addresses from users: {kallsyms}"
    );

    let flat = [
        "profile",
        "--pid",
        &pid,
        "-d",
        "1s",
        "-f",
        "flat",
        "--no-combine",
    ];
    let as_root = stdout_of(&support::profilerctl(&socket, &flat).await);
    assert!(
        as_root.contains(" @0xffff"),
        "root sees addresses:\n{as_root}"
    );
    let as_nobody = stdout_of(&nobody.profilerctl(&socket, &flat).await);
    assert!(as_nobody.contains("[kernel]"), "{as_nobody}");
    assert!(
        !as_nobody.contains("0xffff"),
        "nobody sees kernel addresses:\n{as_nobody}"
    );

    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::set_permissions(
        dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .expect("opened");
    let file = dir.path().join("cpu.pb.gz");
    let path = file.display().to_string();
    let pprof = [
        "profile", "--pid", &pid, "-d", "1s", "-f", "pprof", "-o", &path,
    ];
    stdout_of(&nobody.profilerctl(&socket, &pprof).await);
    let profile = support::decode_pprof(&std::fs::read(&file).expect("the profile"));
    assert!(
        profile
            .location
            .iter()
            .all(|location| location.address < 0xffff_0000_0000_0000),
        "a kernel address in nobody's pprof"
    );
    assert!(
        profile
            .string_table
            .iter()
            .any(|name| name.ends_with("read")),
        "its kernel functions are named"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn one_user_cannot_crowd_out_the_others_peeks() {
    let daemon = Daemon::start_with(&[
        "--peeks-kept",
        "10",
        "--peeks-kept-per-user",
        "3",
        "--peeks-per-user-per-minute",
        "4",
    ])
    .await;
    let nobody = User::nobody(&daemon);
    let socket = daemon.socket.clone();
    let mut client = daemon.client().await;

    // Root's own peeks and targets.
    let roots = Workload::start("peek_threads", &[]);
    let root_pid = roots.pid().to_string();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut root_reports = Vec::new();
    for _ in 0..2 {
        let report = client
            .peek(profilerd_client::v1::PeekRequest { pid: roots.pid() })
            .await
            .expect("root peeks")
            .into_inner();
        root_reports.push(report.id);
    }
    let targets = [
        "targets",
        "--pid",
        &root_pid,
        "--pid",
        &std::process::id().to_string(),
    ];
    stdout_of(&support::profilerctl(&socket, &targets).await);

    // Nobody signals six processes of its own, three times over.
    let own: Vec<Workload> = (0..6).map(|_| nobody.start("peek_threads", &[])).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        for workload in &own {
            nobody
                .command("kill")
                .args(["-USR1", &workload.pid().to_string()])
                .status()
                .expect("kill runs");
        }
        tokio::time::sleep(Duration::from_millis(1300)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;

    let listed = stdout_of(&support::profilerctl(&socket, &["peeks"]).await);
    for id in &root_reports {
        assert!(
            listed.contains(id.as_str()),
            "root's report {id} was pushed out:\n{listed}"
        );
    }
    let nobodys = stdout_of(&nobody.profilerctl(&socket, &["peeks"]).await);
    assert!(
        (1..=3).contains(&nobodys.lines().count()),
        "nobody keeps its share, 3:\n{nobodys}"
    );
    let status = stdout_of(&support::profilerctl(&socket, &["status"]).await);
    assert!(
        status.contains("triggers dropped: a user's peeks too many or too often"),
        "{status}"
    );
    // The log holds at most a few of nobody's reports in full.
    let log = daemon.log();
    let in_full = own
        .iter()
        .filter(|workload| log.contains(&format!("Peek at process {} ", workload.pid())))
        .count();
    assert!(
        in_full <= 3,
        "{in_full} of nobody's reports logged in full:\n{log}"
    );

    // Nobody does not see what root chose to sample.
    let seen = stdout_of(&nobody.profilerctl(&socket, &["status"]).await);
    assert!(seen.contains("targets:    not shown"), "{seen}");
    assert!(!seen.contains(&format!("pid {root_pid}")), "{seen}");
    let refused = error_of(&nobody.profilerctl(&socket, &["targets"]).await);
    assert!(
        refused.contains("only root and the admin group"),
        "{refused}"
    );
    stdout_of(&support::profilerctl(&socket, &["targets", "--everything"]).await);
}
