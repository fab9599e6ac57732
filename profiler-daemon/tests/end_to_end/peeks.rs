//! Peeks against a real daemon: `kill -USR1`, `profilerctl peek`, signal
//! storms, WatchPeeks, and the protection of processes without a handler.

use std::time::{Duration, Instant};

use profilerd_client::v1;
use rustix::process::{Pid, Signal, kill_process, test_kill_process};

use crate::support::{Client, Daemon, PATIENCE, PEEK_THREADS, Workload, eventually};

/// Waits until the workload `pid` has started and named its threads (and
/// set its SIGUSR1 handler, unless told not to).
async fn settled(pid: u32) {
    crate::support::wait_for_threads(pid, &PEEK_THREADS).await;
}

fn send_usr1(pid: u32) {
    let pid = Pid::from_raw(pid as i32).expect("a real pid");
    kill_process(pid, Signal::USR1).expect("SIGUSR1 is sent");
}

fn alive(pid: u32) -> bool {
    // A zombie still "exists"; the workloads are our children, so check its
    // state too.
    let Some(pid_ref) = Pid::from_raw(pid as i32) else {
        return false;
    };
    test_kill_process(pid_ref).is_ok()
        && std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .is_ok_and(|stat| !stat.contains(") Z "))
}

fn thread<'a>(report: &'a v1::PeekReport, name: &str) -> &'a v1::PeekThread {
    report
        .threads
        .iter()
        .find(|thread| thread.name == name)
        .unwrap_or_else(|| panic!("no thread {name:?} in the report:\n{}", report.text))
}

/// The seconds a thread spent runnable but waiting for a CPU, from its
/// title line in the report's text ("… 0.12 s in the run queue").
fn run_queue_secs(report: &v1::PeekReport, thread: &v1::PeekThread) -> f64 {
    let title = format!("Thread {} ({}) Total snapshots:", thread.tid, thread.name);
    let line = report
        .text
        .lines()
        .find(|line| line.starts_with(&title))
        .unwrap_or_else(|| {
            panic!(
                "no title line for {}:
{}",
                thread.name, report.text
            )
        });
    line.strip_suffix(" s in the run queue")
        .and_then(|rest| rest.rsplit(' ').next())
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("no run queue time in {line:?}"))
}

/// The lines of one thread's tree in the report's text.
fn tree_of<'a>(report: &'a v1::PeekReport, thread: &v1::PeekThread) -> Vec<&'a str> {
    let title = format!("Thread {} ({}) Total snapshots:", thread.tid, thread.name);
    report
        .text
        .lines()
        .skip_while(|line| !line.starts_with(&title))
        .skip(1)
        .take_while(|line| !line.is_empty())
        .collect()
}

async fn peek_status(client: &mut Client) -> v1::PeekStatus {
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("GetStatus answers")
        .into_inner()
        .peek
        .expect("the status has a peek section")
}

/// The first scenario, with a subscriber connected before the
/// signal: the report of `kill -USR1` reaches it within 2 s and shows each
/// thread's name, utilization, hot function or wait location.
#[tokio::test(flavor = "multi_thread")]
async fn kill_usr1_reports_each_thread_to_a_watcher() {
    // Alone: the busy threads must each get a whole CPU.
    let daemon = Daemon::start_alone(&[]).await;
    let workload = Workload::start_as("peek_threads", "peek-handler", &[]);
    let pid = workload.pid();
    let mut client = daemon.client().await;
    let mut watcher = client
        .watch_peeks(v1::WatchPeeksRequest {})
        .await
        .expect("WatchPeeks answers")
        .into_inner();
    // Past the daemon's first drains, which symbolize everything already
    // running and would take CPU time from the workload during the peek.
    eventually("two drains", PATIENCE, async || {
        match daemon.status().await.drains {
            drains if drains >= 2 => Ok(()),
            drains => Err(format!("{drains} drains")),
        }
    })
    .await;
    settled(pid).await;

    let sent = Instant::now();
    send_usr1(pid);
    // Other processes on the machine may send SIGUSR1 too: wait for ours.
    let report = crate::support::next_peek_of(&mut watcher, pid, Duration::from_secs(2))
        .await
        .unwrap_or_else(|| panic!("no peek report within 2 s of the signal:\n{}", daemon.log()));
    let latency = sent.elapsed();

    assert_eq!(report.pid, pid, "{}", report.text);
    let trigger = report.trigger.clone().expect("a trigger");
    assert_eq!(trigger.source, v1::peek_trigger::Source::Signal as i32);
    assert_eq!(trigger.signal, libc::SIGUSR1 as u32);
    assert_eq!(trigger.sender_pid, std::process::id());
    assert!(
        report
            .text
            .contains(&format!("Peek at process {pid} (peek-handler)")),
        "{}",
        report.text
    );
    for (name, function) in [("spin-alpha", "spin_alpha"), ("spin-beta", "spin_beta")] {
        let busy = thread(&report, name);
        // Runnable all along: on CPU, or waiting for one. On 2 CPUs the
        // daemon's own unwinding of the peek's stacks competes with the two
        // spinners, and the report says how long they waited.
        let runnable = busy.utilization_percent + run_queue_secs(&report, busy) * 100.0;
        assert!(
            (60.0..=100.0).contains(&busy.utilization_percent) && runnable >= 95.0,
            "{name} should be busy, runnable all along (latency {latency:?}):\n{}",
            report.text
        );
        // A snapshot per millisecond on CPU.
        assert!(
            busy.snapshots as f64 >= busy.utilization_percent * 9.0,
            "{}",
            report.text
        );
        let tree = tree_of(&report, busy);
        assert!(
            tree.iter()
                .any(|line| line.ends_with(&format!("; {function}"))),
            "{function} should be in {name}'s tree:\n{}",
            report.text
        );
        assert!(
            busy.at_trigger
                .iter()
                .any(|frame| frame.starts_with(function)),
            "{name} was running {function} at the signal:\n{}",
            report.text
        );
    }
    let sleeper = thread(&report, "sleeper");
    assert!(sleeper.utilization_percent <= 15.0, "{}", report.text);
    assert!(sleeper.state.starts_with('S'), "{}", report.text);
    assert!(
        sleeper.wait_channel.contains("sleep"),
        "the sleeper waits in a sleep call: {:?}\n{}",
        sleeper.wait_channel,
        report.text
    );
    assert!(
        sleeper
            .at_trigger
            .iter()
            .any(|frame| frame.contains("nanosleep")),
        "{}",
        report.text
    );
    assert!(alive(pid), "the workload handles SIGUSR1 and lives on");

    // The report is kept: listed, fetched, and written under the state dir.
    let kept = crate::support::peeks_of(&mut client, pid).await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    let fetched = client
        .get_peek(v1::GetPeekRequest {
            id: kept[0].id.clone(),
        })
        .await
        .expect("GetPeek answers")
        .into_inner();
    assert_eq!(fetched.text, report.text);
    let file = daemon
        .state_dir()
        .join("peeks")
        .join(format!("{}.txt", report.id));
    assert_eq!(
        std::fs::read_to_string(&file).expect("the report file exists"),
        report.text
    );
    assert!(daemon.log().contains(&format!("Peek at process {pid}")));
}

/// `profilerctl peek` needs no signal, so a process without a handler is
/// reported and survives; `profilerctl peeks` lists and prints it.
#[tokio::test(flavor = "multi_thread")]
async fn profilerctl_peek_spares_a_process_without_handler() {
    let daemon = Daemon::start().await;
    let workload = Workload::start_as("peek_threads", "peek-nohandler", &["--no-handler"]);
    let pid = workload.pid();
    settled(pid).await;

    let output = crate::support::profilerctl(&daemon.socket, &["peek", &pid.to_string()]).await;
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    assert!(
        text.contains(&format!("Peek at process {pid} (peek-nohandler)")),
        "{text}"
    );
    assert!(text.contains("by a Peek request"), "{text}");
    for name in ["spin-alpha", "spin-beta", "sleeper"] {
        assert!(
            text.contains(&format!("({name}) Total snapshots: ")),
            "{text}"
        );
    }
    assert!(text.contains("; spin_alpha"), "{text}");
    assert!(
        alive(pid),
        "a peek without a signal leaves the process alone"
    );

    let listed = crate::support::profilerctl(&daemon.socket, &["peeks"]).await;
    let listed = String::from_utf8_lossy(&listed.stdout).into_owned();
    let id = listed
        .lines()
        .find(|line| line.contains(&format!("Peek at process {pid} ")))
        .and_then(|line| line.split_whitespace().next())
        .unwrap_or_else(|| panic!("the peek is listed:\n{listed}"))
        .to_owned();
    let again = crate::support::profilerctl(&daemon.socket, &["peeks", "--id", &id]).await;
    assert_eq!(String::from_utf8_lossy(&again.stdout), text);

    let missing = crate::support::profilerctl(&daemon.socket, &["peeks", "--id", "nope"]).await;
    assert!(!missing.status.success());
    let error = String::from_utf8_lossy(&missing.stderr);
    assert!(error.contains("no peek report \"nope\""), "{error}");
    let gone = crate::support::profilerctl(&daemon.socket, &["peek", "999999999"]).await;
    assert!(!gone.status.success());
    let error = String::from_utf8_lossy(&gone.stderr);
    assert!(
        error.contains("999999999") && error.contains("NotFound"),
        "{error}"
    );
}

/// 50 signals within 100 ms give one report (or a few), the rest folded
/// and counted, and the daemon keeps serving.
#[tokio::test(flavor = "multi_thread")]
async fn a_signal_storm_is_folded_into_one_peek() {
    let mut daemon = Daemon::start().await;
    let workload = Workload::start_as("peek_threads", "peek-storm", &[]);
    let pid = workload.pid();
    let mut client = daemon.client().await;
    settled(pid).await;

    let started = Instant::now();
    for _ in 0..50 {
        send_usr1(pid);
    }
    assert!(started.elapsed() < Duration::from_millis(100));

    // Every signal is in one of the peeks once they are done: its trigger
    // or a folded one (other processes' signals may be counted in the
    // status too).
    let (peeks, reports, status, accounted) = eventually(
        "the peeks account for the 50 signals",
        PATIENCE,
        async || {
            let peeks = crate::support::peeks_of(&mut client, pid).await;
            let mut reports = Vec::new();
            for peek in &peeks {
                reports.push(
                    client
                        .get_peek(v1::GetPeekRequest {
                            id: peek.id.clone(),
                        })
                        .await
                        .expect("GetPeek answers")
                        .into_inner(),
                );
            }
            let status = peek_status(&mut client).await;
            let accounted: u64 = reports
                .iter()
                .map(|report| 1 + u64::from(report.folded_triggers))
                .sum();
            if accounted + status.dropped_in_kernel.min(50) >= 50 {
                Ok((peeks, reports, status, accounted))
            } else {
                Err(format!("{accounted} in {peeks:?}; {status:?}"))
            }
        },
    )
    .await;
    assert!(
        (1..=3).contains(&peeks.len()),
        "50 signals in 100 ms should make one peek (or a few): {peeks:?}\n{}",
        daemon.log()
    );
    assert_eq!(
        accounted + status.dropped_in_kernel.min(50),
        50,
        "{status:?}"
    );
    assert!(
        status.folded >= accounted - reports.len() as u64,
        "{status:?}"
    );
    let report = &reports[0];
    assert!(report.folded_triggers > 0, "{}", report.text);
    assert!(
        report.text.contains("more triggers folded into this peek"),
        "{}",
        report.text
    );
    assert!(alive(pid));
    assert!(daemon.is_running());
}

/// Where the kernel accepts the BPF LSM guard, a process without a handler
/// survives `kill -USR1` and is reported; where it does not, the test says
/// it is skipped, and why.
#[tokio::test(flavor = "multi_thread")]
async fn kill_usr1_spares_a_process_without_handler_where_protected() {
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let status = peek_status(&mut client).await;
    if !status.protection_active {
        eprintln!(
            "skipped: the peek signal cannot be intercepted on this machine: {}",
            status.protection_reason
        );
        assert!(
            daemon
                .log()
                .contains("will terminate that process (the kernel's default action)"),
            "the start-up log warns about unprotected processes:\n{}",
            daemon.log()
        );
        return;
    }
    let workload = Workload::start_as("peek_threads", "peek-guarded", &["--no-handler"]);
    let pid = workload.pid();
    settled(pid).await;
    send_usr1(pid);
    let peeks =
        eventually(
            "the process is peeked",
            PATIENCE,
            async || match crate::support::peeks_of(&mut client, pid).await {
                peeks if !peeks.is_empty() => Ok(peeks),
                _ => Err("no report".to_owned()),
            },
        )
        .await;
    assert!(alive(pid), "the guard keeps the process alive");
    assert_eq!(peeks.len(), 1);
}

/// A signal to a process outside the allowlist is refused and counted; a
/// Peek request (root only, through the socket) is not restricted.
#[tokio::test(flavor = "multi_thread")]
async fn the_allowlist_refuses_signals_from_outside_it() {
    let daemon = Daemon::start_with(&["--peek-allow-commands", "someone-else"]).await;
    let workload = Workload::start_as("peek_threads", "peek-refused", &[]);
    let pid = workload.pid();
    let mut client = daemon.client().await;
    settled(pid).await;

    let before = peek_status(&mut client).await;
    send_usr1(pid);
    eventually(
        "the signal is refused",
        PATIENCE,
        async || match peek_status(&mut client).await {
            status if status.refused > before.refused => Ok(()),
            status => Err(format!("{status:?}")),
        },
    )
    .await;
    assert!(crate::support::peeks_of(&mut client, pid).await.is_empty());

    let report = client
        .peek(v1::PeekRequest { pid })
        .await
        .expect("Peek answers")
        .into_inner();
    assert_eq!(report.pid, pid);
    assert_eq!(crate::support::peeks_of(&mut client, pid).await.len(), 1);
}

/// Beyond max_concurrent_peeks, a trigger is dropped with an error that
/// names the limit, and counted.
#[tokio::test(flavor = "multi_thread")]
async fn peeks_beyond_the_limit_are_dropped_and_counted() {
    let daemon = Daemon::start_with(&["--max-concurrent-peeks", "1"]).await;
    let first = Workload::start_as("peek_threads", "peek-first", &[]);
    let second = Workload::start_as("peek_threads", "peek-second", &[]);
    let mut client = daemon.client().await;
    settled(first.pid()).await;
    settled(second.pid()).await;

    let running = tokio::spawn({
        let mut client = daemon.client().await;
        let pid = first.pid();
        async move { client.peek(v1::PeekRequest { pid }).await }
    });
    // The first peek is under way once the status counts it.
    eventually(
        "the first peek starts",
        PATIENCE,
        async || match peek_status(&mut client).await.running {
            0 => Err("none running"),
            _ => Ok(()),
        },
    )
    .await;
    let refused = client
        .peek(v1::PeekRequest { pid: second.pid() })
        .await
        .expect_err("a second peek is over the limit");
    assert_eq!(refused.code(), tonic::Code::ResourceExhausted);
    assert!(
        refused.message().contains("max_concurrent_peeks"),
        "{}",
        refused.message()
    );
    let report = running
        .await
        .expect("the first peek's task")
        .expect("the first peek succeeds")
        .into_inner();
    assert_eq!(report.pid, first.pid());
    assert_eq!(peek_status(&mut client).await.dropped_limit, 1);
}
