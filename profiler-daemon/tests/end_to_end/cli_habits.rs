//! profilerctl's habits, as perf's and a shell's users expect them: Ctrl-C
//! ends a profile early and still reports, `record` runs a command and
//! reports it with its children, binary never goes to a terminal, reports
//! say what their columns mean and whose stacks they are, and a process the
//! peek signal kills is reported as such. Commands that name a function
//! (callers, annotate, diff --function) are `functions`'.

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use profilerd_client::v1;

use crate::support::{self, Daemon, User, Workload, error_of, stdout_of};

mod functions;

/// Whether process `pid` has a handler for SIGINT (`SigCgt` in its
/// status).
fn catches_sigint(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let mask = status
                .lines()
                .find_map(|line| line.strip_prefix("SigCgt:"))?;
            u64::from_str_radix(mask.trim(), 16).ok()
        })
        .is_some_and(|mask| mask & (1 << (libc::SIGINT - 1)) != 0)
}

/// Waits until profilerctl `pid` handles Ctrl-C: it does once it has
/// asked for the profile (until then, SIGINT would end it).
async fn until_it_catches_sigint(pid: u32) {
    support::eventually(
        "profilerctl catches SIGINT",
        support::PATIENCE,
        async || {
            if catches_sigint(pid) {
                Ok(())
            } else {
                Err("SIGINT not caught yet")
            }
        },
    )
    .await;
}

/// profilerctl profiling with `args`, its folded report written to
/// `report`, its errors piped.
fn profile_into(daemon: &Daemon, args: &[&str], report: &std::path::Path) -> std::process::Child {
    Command::new(crate::support::profilerctl_binary())
        .arg("--socket")
        .arg(&daemon.socket)
        .arg("profile")
        .args(args)
        .args(["-f", "folded", "-o"])
        .arg(report)
        .stderr(Stdio::piped())
        .spawn()
        .expect("profilerctl starts")
}

/// Sends Ctrl-C (SIGINT) to `child`.
fn interrupt(child: &std::process::Child) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a pid");
    rustix::process::kill_process(pid, rustix::process::Signal::INT).expect("SIGINT is sent");
}

/// perf's and py-spy's habit: `profile -p PID` without a duration runs
/// until Ctrl-C, then reports.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_without_a_duration_runs_until_ctrl_c() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("split", &[]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let report = dir.path().join("until.folded");
    let profilerctl = profile_into(&daemon, &["-p", &workload.pid().to_string()], &report);
    until_it_catches_sigint(profilerctl.id()).await;
    support::wait_for_drains(&mut daemon.client().await, 2).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    interrupt(&profilerctl);
    let output = tokio::task::spawn_blocking(move || profilerctl.wait_with_output())
        .await
        .expect("finishes")
        .expect("it exits");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stderr}");
    assert!(
        stderr.contains("profiling until Ctrl-C (at most "),
        "{stderr}"
    );
    let stacks = support::folded(&std::fs::read(&report).expect("the report"));
    assert!(
        support::total(&stacks) > 0,
        "nothing sampled until Ctrl-C: {stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn ctrl_c_ends_a_profile_early_and_reports_what_was_sampled() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("split", &[]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let report = dir.path().join("cut.folded");
    let mut profilerctl = profile_into(
        &daemon,
        &["--pid", &workload.pid().to_string(), "-d", "8s"],
        &report,
    );
    until_it_catches_sigint(profilerctl.id()).await;
    let (asked, ran_when_asked) = (Instant::now(), support::cpu_time(workload.pid()));
    support::wait_for_drains(&mut daemon.client().await, 2).await;
    // About 2 s of profile, which the window and its samples are checked
    // against.
    let ran_when_open = support::cpu_time(workload.pid());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ran_when_interrupted = support::cpu_time(workload.pid());
    interrupt(&profilerctl);
    let output = tokio::task::spawn_blocking(move || {
        profilerctl.wait().expect("it exits");
        let mut stderr = String::new();
        std::io::Read::read_to_string(&mut profilerctl.stderr.take().expect("piped"), &mut stderr)
            .expect("its errors");
        (profilerctl.try_wait(), stderr)
    })
    .await
    .expect("finishes");
    let (exited, ran_when_exited) = (asked.elapsed(), support::cpu_time(workload.pid()));
    let (status, stderr) = output;
    assert!(
        status
            .expect("waited")
            .is_some_and(|status| status.success()),
        "{stderr}"
    );
    // Cut short (not profiled for its 8 s): the window was open for the
    // 2 s slept, and closed at the interrupt's drain, before profilerctl
    // exited.
    let cut_after = stderr
        .split_once("the window was cut short after ")
        .and_then(|(_, rest)| rest.split_once("s of the 8s asked for"))
        .and_then(|(seconds, _)| seconds.parse::<f64>().ok());
    assert!(
        cut_after.is_some_and(|seconds| seconds >= 1.5 && seconds <= exited.as_secs_f64() + 0.1),
        "{exited:?} after asking: {stderr}"
    );
    let stacks = support::folded(&std::fs::read(&report).expect("the report"));
    let samples = support::total(&stacks);
    // One busy thread at the tests' frequency, for the CPU time it had
    // (on a busy machine, less than the 2 s): at least that of the 2 s
    // slept, at most that from the request to the report.
    let hz = f64::from(support::TEST_FREQUENCY_HZ);
    let (least, most) = (
        (ran_when_interrupted - ran_when_open).as_secs_f64() * hz,
        (ran_when_exited - ran_when_asked).as_secs_f64() * hz,
    );
    assert!(
        samples as f64 > least / 3.0 && (samples as f64) < most * 2.0,
        "{samples} samples; {least:.0} to {most:.0} expected"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn record_runs_a_command_and_reports_it_with_its_children() {
    let daemon = Daemon::start().await;
    // Something else busy on the machine, which must not be in the report.
    let _other = Workload::start_as("many_stacks", "record-other", &[]);
    let alpha = support::build_workload("peek_threads");
    let split = support::build_workload("split");
    let script = format!("{} 1 & {} 1; wait", alpha.display(), split.display());
    let output = support::profilerctl(
        &daemon.socket,
        &["record", "-f", "folded", "--", "sh", "-c", &script],
    )
    .await;
    let folded = stdout_of(&output);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let functions: Vec<String> = support::folded(folded.as_bytes())
        .into_iter()
        .flat_map(|(frames, _)| frames)
        .collect();
    for wanted in ["spin_alpha", "spin_beta", "hot", "cold"] {
        assert!(
            functions.iter().any(|f| f == wanted),
            "{wanted} of a child is missing:\n{folded}\n{stderr}\n{}",
            daemon.log()
        );
    }
    assert!(
        !functions
            .iter()
            .any(|f| f == "leaf_spin" || f.starts_with("branch_")),
        "another process is in the report:\n{folded}"
    );
    // The command's own CPU time (its children's, by getrusage) against
    // the profile's: the independent truth of what it cost.
    let cpu = |line: &str, before: &str| -> f64 {
        line.split(before)
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|number| number.trim_end_matches(',').parse().ok())
            .unwrap_or_else(|| panic!("no CPU-seconds in {line:?}"))
    };
    let last = stderr
        .lines()
        .find(|line| line.starts_with("sh exit status: 0"))
        .unwrap_or_else(|| panic!("the command's status is said: {stderr}"));
    let (used, held) = (cpu(last, "it used "), cpu(last, "the profile holds "));
    assert!(used > 0.3, "{last}");
    assert!(
        (held - used).abs() < 0.2 * used,
        "the profile holds {held} CPU-seconds, the command used {used}: {last}"
    );

    let failing =
        support::profilerctl(&daemon.socket, &["record", "--", "sh", "-c", "exit 3"]).await;
    assert_eq!(
        failing.status.code(),
        Some(3),
        "the command's status is kept"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn output_goes_where_a_user_expects() {
    let daemon = Daemon::start().await;
    let socket = daemon.socket.display().to_string();
    let workload = Workload::start("split", &[]);
    let pid = workload.pid().to_string();
    let profilerctl = crate::support::profilerctl_binary().display().to_string();

    // Binary to a terminal is refused before anything is waited for.
    let terminal = tokio::task::spawn_blocking({
        let command = format!("{profilerctl} --socket {socket} profile --pid {pid} -d 5s -f pprof");
        move || {
            Command::new("script")
                .args(["-qec", &command, "/dev/null"])
                .output()
                .expect("script (util-linux) runs")
        }
    })
    .await
    .expect("finishes");
    let printed = String::from_utf8_lossy(&terminal.stdout);
    assert!(
        printed.contains("binary") && printed.contains("--output FILE"),
        "{printed}"
    );
    // The daemon was never asked for the profile.
    let metrics = stdout_of(&support::profilerctl(&daemon.socket, &["metrics"]).await);
    assert!(
        !metrics.contains("profilerd_rpcs_total{method=\"Profile\""),
        "it profiled first:\n{metrics}"
    );

    // No colour codes where no person reads them.
    let flat = support::profilerctl(
        &daemon.socket,
        &["profile", "--pid", &pid, "-d", "1s", "-f", "flat"],
    )
    .await;
    assert!(!flat.stdout.contains(&0x1b) && !flat.stderr.contains(&0x1b));
    assert!(
        !daemon.log().contains('\x1b'),
        "colours in the daemon's log file"
    );

    let version = stdout_of(&support::profilerctl(&daemon.socket, &["--version"]).await);
    assert!(version.starts_with("profilerctl "), "{version}");

    let peeked = support::profilerctl(&daemon.socket, &["peek", &pid]).await;
    let said = String::from_utf8_lossy(&peeked.stderr);
    assert!(said.contains("no signal is sent"), "{said}");
    assert!(!said.contains("(SIGUSR1)"), "{said}");

    let nothing = error_of(
        &support::profilerctl(
            &daemon.socket,
            &["callers", "no_such_function_here", "--since", "1m"],
        )
        .await,
    );
    assert!(
        nothing.contains("no sample of that window has a function named"),
        "{nothing}"
    );

    let diff = stdout_of(
        &support::profilerctl(
            &daemon.socket,
            &[
                "diff",
                "--base-since",
                "3s",
                "--base-until",
                "1s",
                "--since",
                "1s",
            ],
        )
        .await,
    );
    let windows: Vec<&str> = diff.lines().take(2).collect();
    assert!(
        windows[0].starts_with("base:   ") && windows[0].ends_with(" samples"),
        "{diff}"
    );
    assert!(
        windows[1].starts_with("target: ") && windows[1].ends_with(" samples"),
        "{diff}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn reports_say_what_they_count_and_whose_stacks_they_are() {
    let daemon = Daemon::start().await;
    let first = Workload::start_as("split", "report-first", &[]);
    let second = Workload::start_as("split", "report-second", &[]);
    let odd_workload = Workload::start("fake_frames", &[]);
    for workload in [&first, &second, &odd_workload] {
        workload.wait_until_running().await;
    }
    let socket = &daemon.socket;
    let pids = |workloads: &[&Workload]| -> Vec<String> {
        workloads
            .iter()
            .flat_map(|workload| ["--pid".to_owned(), workload.pid().to_string()])
            .collect()
    };
    let profile = |format: &str, workloads: &[&Workload]| {
        let mut args: Vec<String> = ["profile", "-d", "1s", "-f", format]
            .map(String::from)
            .to_vec();
        args.extend(pids(workloads));
        args
    };
    let run = |args: Vec<String>| async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        stdout_of(&support::profilerctl(socket, &args).await)
    };

    // Two processes: one section each, by default, naming the process.
    let tree = run(profile("tree", &[&first, &second])).await;
    for workload in [&first, &second] {
        assert!(
            tree.contains(&format!("Process {} \"report-", workload.pid())),
            "{tree}"
        );
    }
    assert!(
        tree.contains("Overhead: samples in the line itself, not in its callees"),
        "{tree}"
    );
    let hot = tree
        .lines()
        .find(|line| line.ends_with("; hot"))
        .unwrap_or_else(|| panic!("{tree}"));
    assert!(hot.contains('%'), "a share beside the count: {hot}");
    let flat = run(profile("flat", &[&first])).await;
    // The header first, after the comments that say what was lost.
    assert!(
        flat.lines()
            .find(|line| !line.starts_with('#'))
            .is_some_and(|header| header.contains("Count      %  Overhead      %")),
        "{flat}"
    );
    assert!(flat.contains("%: a share of all samples"), "{flat}");

    // Status: counters a line each, zeros only when asked. (Other tests'
    // peek signals may have shown up: their counters are not zeros.)
    let status = stdout_of(&support::profilerctl(socket, &["status"]).await);
    assert!(!status.contains("\n                  0 "), "{status}");
    let verbose = stdout_of(&support::profilerctl(socket, &["status", "--verbose"]).await);
    assert!(
        verbose.contains("\n                  0 failed\n"),
        "{verbose}"
    );

    // Frames that are no code say where they point: what walking frame
    // pointers (stack_copy = 0) through fake frames yields.
    let walking = Daemon::start_with(&["--stack-copy", "0"]).await;
    let odd = stdout_of(
        &support::profilerctl(
            &walking.socket,
            &[
                "profile",
                "-d",
                "1s",
                "-f",
                "tree",
                "--pid",
                &odd_workload.pid().to_string(),
            ],
        )
        .await,
    );
    assert!(odd.contains("; spin_on_fake_frames"), "{odd}");
    assert!(
        odd.contains("(not code)+0x"),
        "a data address is named by its mapping:\n{odd}"
    );
    assert!(
        odd.contains("[unmapped] 0x10000"),
        "an unmapped address is shown:\n{odd}"
    );
    assert!(!odd.contains("[unknown]:?"), "{odd}");
    // Unwound with .eh_frame, the same stacks stop where the frames are
    // fake, and say so.
    let unwound = run(profile("tree", &[&odd_workload])).await;
    assert!(unwound.contains("[unwind stopped: bad frame]"), "{unwound}");
    assert!(!unwound.contains("(not code)"), "{unwound}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_killed_by_the_peek_signal_is_reported_once() {
    let daemon = Daemon::start().await;
    let status = daemon
        .client()
        .await
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner();
    if status.peek.unwrap_or_default().protection_active {
        eprintln!("skipped: this kernel's BPF LSM guard keeps the signal from the process");
        return;
    }
    let nobody = User::nobody(&daemon);
    let mut doomed = nobody.start("peek_threads", &["--no-handler"]);
    let pid = doomed.pid();
    support::wait_for_threads(pid, &support::PEEK_THREADS).await;
    let sent = nobody
        .command("kill")
        .args(["-USR1", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    doomed.wait();
    // Past the daemon's 2 s wait for a process without a handler to die of
    // the signal, after which it would be counted as merely gone as well.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let terminated =
        format!("process {pid} (peek_threads) was terminated by SIGUSR1: it has no handler for it");
    let log = support::eventually(
        "the daemon logs the process terminated",
        support::PATIENCE,
        async || match daemon.log() {
            log if log.contains(&terminated) => Ok(log),
            log => Err(log),
        },
    )
    .await;
    assert_eq!(log.matches(&terminated).count(), 1, "{log}");
    assert!(log.contains(&format!("`profilerctl peek {pid}`")), "{log}");
    let status = stdout_of(&support::profilerctl(&daemon.socket, &["status"]).await);
    assert!(
        status.contains("      1 processes terminated by the peek signal"),
        "{status}"
    );
    for other in ["had exited", "failed", "peek requests"] {
        assert!(
            !status.contains(other),
            "also counted as {other}:\n{status}"
        );
    }
}

/// perf's `-F`: `profile -p P -F 997 -d 2` samples the process at 997 Hz
/// of its CPU time for that profile only, twice in a row, while the daemon
/// goes on sampling it (and the rest) at its own rate: as many samples a
/// second of the CPU time the scheduler counted for its thread, however
/// busy the machine; a wall-clock `-F` and one without `-p` are refused
/// with their reason.
#[tokio::test(flavor = "multi_thread")]
async fn a_profile_at_its_own_rate_samples_the_process_at_that_rate() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("split", &[]);
    let pid = workload.pid().to_string();
    let mut client = daemon.client().await;
    support::wait_for_drains(&mut client, 2).await;
    let selector = || v1::Selector {
        pids: vec![workload.pid()],
        ..Default::default()
    };
    for round in 0..2 {
        let reply = client
            .profile(v1::ProfileRequest {
                duration_ms: 2000,
                selector: Some(selector()),
                options: Some(support::options(v1::Format::Folded)),
                frequency_hz: 997,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|status| panic!("round {round}: {status:?}"))
            .into_inner();
        let summary = reply.summary.expect("a summary");
        let stacks = support::folded(&reply.report);
        let samples = support::total(&stacks) as f64;
        assert_eq!(summary.frequency_hz, 997, "round {round}");
        assert!(
            stacks
                .iter()
                .filter(|(frames, _)| frames.iter().any(|frame| frame == "hot"))
                .map(|(_, count)| *count)
                .sum::<u64>() as f64
                > samples * 0.5,
            "round {round}: hot is not most of it: {stacks:?}"
        );
        // The CPU time the threads ran in the window, by the scheduler, is
        // the summary's: at 997 Hz, as many samples a second of it (the
        // daemon's own rate, 499 Hz, would give half).
        let ticks = summary.cpu_nanos as f64 / 1e9 * 997.0;
        assert!(
            ticks >= 200.0 && samples > ticks * 0.8 && samples < ticks * 1.1,
            "round {round}: {samples} samples at 997 Hz for {:.3} CPU-seconds ({ticks:.0} \
             ticks); warnings {:?}",
            summary.cpu_nanos as f64 / 1e9,
            summary.warnings
        );
        // The daemon sampled the same process at its own rate meanwhile.
        let stored = client
            .query(v1::QueryRequest {
                start_unix_nanos: summary.start_unix_nanos,
                end_unix_nanos: summary.end_unix_nanos,
                selector: Some(selector()),
                options: Some(support::options(v1::Format::Folded)),
                mode: v1::Mode::Cpu as i32,
            })
            .await
            .expect("the window is held")
            .into_inner();
        assert!(
            support::total(&support::folded(&stored.report)) > 0,
            "round {round}: none of the daemon's own samples"
        );
    }
    // As typed, and the daemon's own rate unchanged.
    let dir = tempfile::tempdir().expect("a temporary directory");
    let report = dir.path().join("rated.folded");
    let output = profile_into(&daemon, &["-p", &pid, "-F", "997", "-d", "1"], &report)
        .wait_with_output()
        .expect("profilerctl runs");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stderr.contains(" at 997 Hz: "),
        "{stderr}"
    );
    let status = stdout_of(&support::profilerctl(&daemon.socket, &["status", "--json"]).await);
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    assert_eq!(
        status["frequency_hz"].as_u64(),
        Some(u64::from(support::TEST_FREQUENCY_HZ))
    );
    for (refused, reason) in [
        (
            &["-p", &pid, "-F", "99", "--mode", "wall", "-d", "1"][..],
            "CPU time only",
        ),
        (&["-F", "99", "-d", "1"][..], "--pid"),
    ] {
        let output =
            support::profilerctl(&daemon.socket, &[&["profile"][..], refused].concat()).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            !output.status.success() && stderr.contains(reason),
            "{refused:?}: {stderr}"
        );
    }
}

/// A daemon younger than the windows asked of it says so: `diff
/// --base-since 2m` and `query --since 2m` name when what it holds begins;
/// `status --json` gives scripts the status reply.
#[tokio::test(flavor = "multi_thread")]
async fn a_young_daemon_says_its_windows_are_shorter_and_status_speaks_json() {
    let daemon = Daemon::start().await;
    let _workload = Workload::start("split", &[]);
    support::wait_for_drains(&mut daemon.client().await, 2).await;
    // Some seconds held before the target window.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let diff = support::profilerctl(
        &daemon.socket,
        &[
            "diff",
            "--base-since",
            "2m",
            "--base-until",
            "2s",
            "--since",
            "2s",
        ],
    )
    .await;
    let text = stdout_of(&diff);
    assert!(
        text.contains("warning: the base window was asked from ")
            && text.contains("but the daemon holds samples only from ")
            && !text.contains("warning: the target window"),
        "{text}"
    );
    let query =
        support::profilerctl(&daemon.socket, &["query", "--since", "2m", "-f", "folded"]).await;
    let stderr = String::from_utf8_lossy(&query.stderr);
    assert!(
        query.status.success() && stderr.contains("warning: the window was asked from "),
        "{stderr}"
    );
    let status = stdout_of(&support::profilerctl(&daemon.socket, &["status", "--json"]).await);
    let json: serde_json::Value = serde_json::from_str(&status).expect("status --json is JSON");
    assert_eq!(
        json["frequency_hz"].as_u64(),
        Some(u64::from(support::TEST_FREQUENCY_HZ)),
        "{status}"
    );
    assert!(
        json["memory"]["budget_bytes"].as_u64() > Some(0),
        "{status}"
    );
    assert!(json["samples_taken"].as_u64() > Some(0), "{status}");
}
