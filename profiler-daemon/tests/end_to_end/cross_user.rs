//! What one user may see of another's: each sample is shown by the uid the
//! kernel recorded with it (not by who owns its pid now), setuid and
//! undumpable processes only to root, kernel addresses only to those the
//! kernel shows them to, and no user can crowd the others out of sessions
//! or peek reports. Each test acts as `nobody` (or another uid) through
//! `setpriv`, against a real daemon.

use std::time::Duration;

use crate::support::{
    self, Daemon, PATIENCE, PEEK_THREADS, User, Workload, error_of, eventually, spawn_with_pid,
    stdout_of, wait_for_threads,
};

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
    let query = [
        "query", "--since", "1m", "--pid", &pid, "--format", "folded",
    ];
    eventually("root sees both phases", PATIENCE, async || {
        let as_root = stdout_of(&support::profilerctl(socket, &query).await);
        if has(&as_root, "root_phase") && has(&as_root, "nobody_phase") {
            Ok(())
        } else {
            Err(format!("{as_root}\n{}", daemon.log()))
        }
    })
    .await;
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
    let pid = reused.to_string();
    let query = [
        "query", "--since", "1m", "--pid", &pid, "--format", "folded",
    ];
    eventually(
        &format!("root sees both processes of pid {pid}"),
        PATIENCE,
        async || {
            let as_root = stdout_of(&support::profilerctl(socket, &query).await);
            if has(&as_root, "hot") && has(&as_root, "spin_alpha") {
                Ok(())
            } else {
                Err(as_root)
            }
        },
    )
    .await;
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
    wait_for_threads(reused, &PEEK_THREADS).await;
    let mut client = daemon.client().await;
    let opened = support::unix_nanos();
    let session = stdout_of(&nobody.profilerctl(&socket, &["start", "--pid", &pid]).await);
    let session = session.trim().to_owned();
    let top = Streaming::start(nobody.profilerctl_command(&socket).args([
        "top",
        "--pid",
        &pid,
        "--interval",
        "500ms",
        "--count",
        "6",
    ]));
    // Both saw nobody's process: top showed it, and the session's window
    // holds it.
    eventually("top shows nobody's process", PATIENCE, async || {
        match top.so_far() {
            shown if shown.contains("spin_alpha") => Ok(()),
            shown => Err(shown),
        }
    })
    .await;
    support::wait_for_samples(&mut client, &[reused], opened, "spin_alpha", 1).await;

    // Nobody's process exits; root's takes its pid, and runs while the
    // session and top are open.
    drop(own);
    let split = support::build_workload("split");
    let reused_at = support::unix_nanos();
    let _roots: Workload = spawn_with_pid(reused, || std::process::Command::new(&split)).into();
    support::wait_for_samples(&mut client, &[reused], reused_at, "hot", 50).await;

    let top = top.finish().await;
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
    for workload in [&roots, &of_first, &of_second] {
        wait_for_threads(workload.pid(), &PEEK_THREADS).await;
    }

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
    eventually("setuid takes effect", PATIENCE, async || match status() {
        status if status.contains("Uid:\t65534\t0\t0") => Ok(()),
        status => Err(status),
    })
    .await;
    let own = nobody.start("split", &[]);
    let pid = running.pid().to_string();

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
    // Root sees it once it has been sampled.
    let roots_query = ["query", "--since", "1m", "--pid", &pid, "-f", "folded"];
    eventually("root sees the setuid process", PATIENCE, async || {
        let roots = stdout_of(&support::profilerctl(&socket, &roots_query).await);
        if has(&roots, "spin_alpha") {
            Ok(())
        } else {
            Err(roots)
        }
    })
    .await;
    // By process: other tests run peek_threads as nobody meanwhile, and the
    // daemon sees the whole machine.
    let own_process = format!("split-{}", own.pid());
    let mine_query = [
        "query",
        "--since",
        "1m",
        "--uid",
        "65534",
        "--groupby",
        "process",
        "-f",
        "folded",
    ];
    let (mine, processes) = eventually("nobody's own process is there", PATIENCE, async || {
        let mine = stdout_of(&nobody.profilerctl(&socket, &mine_query).await);
        let processes: Vec<String> = support::folded(mine.as_bytes())
            .into_iter()
            .filter_map(|(frames, _)| frames.into_iter().next())
            .collect();
        if processes.contains(&own_process) {
            Ok((mine, processes))
        } else {
            Err(mine)
        }
    })
    .await;
    let setuid_process = format!("-{pid}");
    assert!(
        !processes
            .iter()
            .any(|process| process.ends_with(&setuid_process)),
        "the setuid process is shown to nobody:\n{mine}"
    );

    // Nobody may signal it (its real uid is nobody's): the peek happens,
    // but its report is root's only.
    let killed = nobody
        .command("kill")
        .args(["-USR1", &pid])
        .status()
        .expect("kill runs");
    assert!(killed.success());
    let report = support::next_peek_of(&mut watcher, running.pid(), PATIENCE)
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
    syscalls.wait_until_running().await;
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
    wait_for_threads(roots.pid(), &PEEK_THREADS).await;
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
    // Each handles the signal once its threads are started.
    for workload in &own {
        wait_for_threads(workload.pid(), &PEEK_THREADS).await;
    }
    for _ in 0..3 {
        for workload in &own {
            nobody
                .command("kill")
                .args(["-USR1", &workload.pid().to_string()])
                .status()
                .expect("kill runs");
        }
        // Rounds a peek's length (1 s) and more apart: each round's
        // signals start peeks of their own (or are dropped), rather than
        // fold into the last round's.
        tokio::time::sleep(Duration::from_millis(1300)).await;
    }
    let status = eventually(
        "a user's peeks are dropped as too many or too often",
        PATIENCE,
        async || {
            let status = stdout_of(&support::profilerctl(&socket, &["status"]).await);
            if status.contains("triggers dropped: a user's peeks too many or too often") {
                Ok(status)
            } else {
                Err(status)
            }
        },
    )
    .await;
    // Its peeks kept: the share of a user, or fewer.
    eventually("nobody's peeks are kept", PATIENCE, async || {
        let nobodys = stdout_of(&nobody.profilerctl(&socket, &["peeks"]).await);
        // Under a header line.
        match nobodys.lines().skip(1).count() {
            0 => Err(nobodys),
            _ => Ok(()),
        }
    })
    .await;

    let listed = stdout_of(&support::profilerctl(&socket, &["peeks"]).await);
    for id in &root_reports {
        assert!(
            listed.contains(id.as_str()),
            "root's report {id} was pushed out:\n{listed}"
        );
    }
    let nobodys = stdout_of(&nobody.profilerctl(&socket, &["peeks"]).await);
    assert!(
        nobodys.starts_with("ID ") && (1..=3).contains(&nobodys.lines().skip(1).count()),
        "nobody keeps its share, 3:\n{nobodys}"
    );
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

/// A command whose standard output is read as it comes (a stream such as
/// `profilerctl top`).
struct Streaming {
    child: std::process::Child,
    stdout: std::sync::Arc<std::sync::Mutex<String>>,
    reader: std::thread::JoinHandle<()>,
}

impl Streaming {
    fn start(command: &mut std::process::Command) -> Self {
        let mut child = command
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("the command starts");
        let stdout = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let reader = std::thread::spawn({
            let (mut pipe, stdout) = (child.stdout.take().expect("piped"), stdout.clone());
            move || {
                let mut chunk = [0; 4096];
                while let Ok(read @ 1..) = std::io::Read::read(&mut pipe, &mut chunk) {
                    stdout
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&chunk[..read]));
                }
            }
        });
        Self {
            child,
            stdout,
            reader,
        }
    }

    /// What it has printed so far.
    fn so_far(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// Waits for it to end, and returns all it printed, after checking
    /// that it succeeded.
    async fn finish(self) -> String {
        let Self {
            mut child,
            stdout,
            reader,
        } = self;
        let (status, stderr) = tokio::task::spawn_blocking(move || {
            let mut stderr = String::new();
            std::io::Read::read_to_string(&mut child.stderr.take().expect("piped"), &mut stderr)
                .expect("its errors");
            (child.wait().expect("it ends"), stderr)
        })
        .await
        .expect("finishes");
        tokio::task::spawn_blocking(move || reader.join().expect("its output is read"))
            .await
            .expect("finishes");
        let stdout = stdout.lock().unwrap().clone();
        assert!(status.success(), "{stdout}\n{stderr}");
        stdout
    }
}
