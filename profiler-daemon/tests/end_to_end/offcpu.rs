//! Off-CPU and wall-clock time, checked against the kernel's own account
//! of each thread (`/proc/PID/task/TID/schedstat`: time run, time waited
//! in the run queue) and against what the workloads do.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use profilerd_client::v1;

use crate::support::{
    Daemon, PATIENCE, Workload, eventually, folded, options, samples_where, selector, wait_for_cpu,
    wait_for_drains,
};

/// Seconds of each state in folded stacks counted at `frequency_hz`.
#[derive(Debug, Default)]
struct Time {
    cpu: f64,
    sleeping: f64,
    blocked: f64,
    run_queue: f64,
}

impl Time {
    fn of(stacks: &[(Vec<String>, u64)], frequency_hz: f64) -> Self {
        let mut time = Time::default();
        for (frames, count) in stacks {
            let seconds = *count as f64 / frequency_hz;
            match frames.last().map(String::as_str) {
                Some("[off-cpu: S]") => time.sleeping += seconds,
                Some("[off-cpu: D]") => time.blocked += seconds,
                Some("[runqueue]") => time.run_queue += seconds,
                _ => time.cpu += seconds,
            }
        }
        time
    }

    fn wall(&self) -> f64 {
        self.cpu + self.sleeping + self.blocked + self.run_queue
    }
}

/// Seconds a thread ran and waited in the run queue, as the kernel counts.
fn schedstat(pid: u32, tid: u32) -> (f64, f64) {
    let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/schedstat"))
        .expect("the thread's schedstat is readable");
    let mut fields = text
        .split_whitespace()
        .map(|field| field.parse::<f64>().unwrap());
    let ran = fields.next().unwrap() / 1e9;
    let waited = fields.next().unwrap() / 1e9;
    (ran, waited)
}

/// Waits until thread `tid` of process `pid` waits in the kernel function
/// `function` (its wait channel).
async fn wait_for_wait_in(pid: u32, tid: u32, function: &str) {
    let wchan = format!("/proc/{pid}/task/{tid}/wchan");
    eventually(
        &format!("thread {tid} waits in {function}"),
        PATIENCE,
        async || match std::fs::read_to_string(&wchan) {
            Ok(waits) if waits.contains(function) => Ok(()),
            Ok(waits) => Err(format!("it waits in {waits:?}")),
            Err(err) => Err(err.to_string()),
        },
    )
    .await;
}

/// Waits until the `many` mode of the workload `pid` naps in its 32
/// threads (after its first second asleep).
async fn wait_for_nappers(pid: u32) {
    eventually(
        "the workload's 32 threads nap",
        PATIENCE,
        async || match threads_of(pid).len() {
            33 => Ok(()),
            threads => Err(format!("{threads} threads")),
        },
    )
    .await;
}

/// A daemon, and a workload whose main thread is blocked reading an empty
/// pipe (its read blocks a second in); its pid.
async fn blocked_reader() -> (Daemon, Workload, u32) {
    let daemon = Daemon::start().await;
    let workload = Workload::start("waits", &["pipe"]);
    let pid = workload.pid();
    wait_for_wait_in(pid, pid, "pipe_read").await;
    (daemon, workload, pid)
}

fn threads_of(pid: u32) -> Vec<u32> {
    let mut tids: Vec<u32> = std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the process's threads are listed")
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    tids.sort_unstable();
    tids
}

pub(crate) async fn wall_profile(
    daemon: &Daemon,
    pid: u32,
    duration: Duration,
) -> (Vec<(Vec<String>, u64)>, v1::ProfileSummary) {
    profile_in(daemon, pid, duration, v1::Mode::Wall).await
}

/// The folded profile of `pid` over the next `duration` in `mode`, and its
/// summary.
async fn profile_in(
    daemon: &Daemon,
    pid: u32,
    duration: Duration,
    mode: v1::Mode,
) -> (Vec<(Vec<String>, u64)>, v1::ProfileSummary) {
    let reply = daemon
        .client()
        .await
        .profile(v1::ProfileRequest {
            duration_ms: duration.as_millis() as u64,
            selector: selector(&[pid]),
            options: Some(options(v1::Format::Folded)),
            mode: mode as i32,
            ..Default::default()
        })
        .await
        .unwrap_or_else(|status| panic!("Profile failed: {status:?}"))
        .into_inner();
    (folded(&reply.report), reply.summary.expect("a summary"))
}

async fn wall_query(
    daemon: &Daemon,
    tids: &[u32],
    (start, end): (i64, i64),
) -> Vec<(Vec<String>, u64)> {
    let reply = daemon
        .client()
        .await
        .query(v1::QueryRequest {
            start_unix_nanos: start,
            end_unix_nanos: end,
            selector: Some(v1::Selector {
                tids: tids.to_vec(),
                ..Default::default()
            }),
            options: Some(options(v1::Format::Folded)),
            mode: v1::Mode::Wall as i32,
        })
        .await
        .unwrap_or_else(|status| panic!("Query failed: {status:?}"))
        .into_inner();
    folded(&reply.report)
}

fn within(value: f64, expected: f64, tolerance: f64) -> bool {
    (value - expected).abs() <= tolerance * expected
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_that_spins_and_sleeps_shows_where_its_wall_clock_went() {
    let daemon = Daemon::start_alone(&["--frequency-hz", "999"]).await;
    let workload = Workload::start("waits", &["spin-sleep"]);
    let pid = workload.pid();
    // Past its first second asleep: spinning (20 ms at a time) and
    // sleeping.
    wait_for_cpu(pid, Duration::from_millis(10)).await;
    let before = schedstat(pid, pid);
    let (stacks, summary) = wall_profile(&daemon, pid, Duration::from_secs(10)).await;
    let after = schedstat(pid, pid);
    let elapsed = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let time = Time::of(&stacks, 999.0);
    let context = format!("{time:?} over {elapsed:.3} s; schedstat {before:?} → {after:?}");
    // 2 s of spinning, or what the thread really got when it waited for a
    // CPU on a busy machine (the kernel's own count, around the window).
    let measured_cpu = after.0 - before.0;
    assert!(
        within(time.cpu, 2.0, 0.05) || within(time.cpu, measured_cpu, 0.05),
        "cpu: {context}"
    );
    assert!(within(time.sleeping, 8.0, 0.05), "S: {context}");
    assert!(within(time.wall() / elapsed, 1.0, 0.02), "wall: {context}");
    // Every frame of the sleeping chain, down to the kernel's wait.
    let asleep: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            crate::support::has_chain(frames, &["main", "spin_and_sleep", "sleep_for"])
                && frames.iter().any(|frame| frame.contains("clock_nanosleep"))
                && frames.last().is_some_and(|leaf| leaf == "[off-cpu: S]")
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        within(asleep as f64 / 999.0, time.sleeping, 0.02),
        "the sleeps are in clock_nanosleep under sleep_for: {stacks:#?}"
    );
    // Conservation against the kernel: run time as sampled.
    let ran = after.0 - before.0;
    assert!(
        within(time.cpu, ran, 0.05),
        "cpu against schedstat: {context}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_vfork_parent_waits_uninterruptibly_for_its_child() {
    let daemon = Daemon::start_with(&["--frequency-hz", "999"]).await;
    let workload = Workload::start("waits", &["vfork"]);
    let (stacks, _) = wall_profile(&daemon, workload.pid(), Duration::from_millis(2_500)).await;
    let blocked: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames.iter().any(|frame| frame == "wait_for_child")
                && frames.last().is_some_and(|leaf| leaf == "[off-cpu: D]")
        })
        .map(|(_, count)| count)
        .sum();
    let seconds = blocked as f64 / 999.0;
    assert!(
        within(seconds, 0.3, 0.1),
        "{seconds:.3} s in D under wait_for_child: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn three_spinners_on_one_cpu_wait_in_the_run_queue_as_the_kernel_counts() {
    let daemon = Daemon::start_alone(&["--frequency-hz", "999"]).await;
    let workload = Workload::start("waits", &["runqueue"]);
    let pid = workload.pid();
    // Recorded from within its first second asleep, before its spinners
    // start: the profile holds their 3 s whole.
    workload.wait_until_running().await;
    let (_, summary) = wall_profile(&daemon, pid, Duration::from_millis(4_700)).await;
    let window = (summary.start_unix_nanos, summary.end_unix_nanos);
    let spinners: Vec<u32> = threads_of(pid)
        .into_iter()
        .filter(|&tid| tid != pid)
        .collect();
    assert_eq!(spinners.len(), 3, "three spinner threads");
    for tid in spinners {
        let time = Time::of(&wall_query(&daemon, &[tid], window).await, 999.0);
        let (ran, waited) = schedstat(pid, tid);
        let context =
            format!("thread {tid}: {time:?}; schedstat ran {ran:.3} s, waited {waited:.3} s");
        assert!(within(time.cpu, 1.0, 0.1), "{context}");
        assert!(within(time.run_queue, 2.0, 0.1), "{context}");
        assert!(
            within(time.cpu, ran, 0.05),
            "cpu against schedstat: {context}"
        );
        assert!(
            within(time.run_queue, waited, 0.05),
            "run queue against schedstat: {context}"
        );
    }
}

fn unix_nanos(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH).unwrap().as_nanos() as i64
}

#[tokio::test(flavor = "multi_thread")]
async fn a_read_blocked_for_10_s_shows_in_every_window_once() {
    let daemon = Daemon::start_with(&["--drain-interval", "500ms"]).await;
    let workload = Workload::start("waits", &["pipe"]);
    let pid = workload.pid();
    let mut client = daemon.client().await;
    let session = client
        .start_profile(v1::StartProfileRequest {
            selector: selector(&[pid]),
            mode: v1::Mode::Wall as i32,
            children: false,
        })
        .await
        .expect("StartProfile")
        .into_inner();
    // The read begins a second after the workload starts (seen within
    // 50 ms).
    wait_for_wait_in(pid, pid, "pipe_read").await;
    let blocked_from = SystemTime::now();
    // The windows below, while the read is blocked, must all be past, and
    // drained (a drain interval later).
    let windows_end = blocked_from + Duration::from_millis(9_500 + 500);
    tokio::time::sleep(
        windows_end
            .duration_since(SystemTime::now())
            .unwrap_or_default(),
    )
    .await;
    let reading = |stacks: &[(Vec<String>, u64)]| -> f64 {
        stacks
            .iter()
            .filter(|(frames, _)| {
                frames.iter().any(|frame| frame == "read_empty_pipe")
                    && frames.last().is_some_and(|leaf| leaf == "[off-cpu: S]")
            })
            .map(|(_, count)| *count as f64)
            .sum::<f64>()
            / f64::from(crate::support::TEST_FREQUENCY_HZ)
    };
    // Ten 1-second windows while the read is blocked (the session holds
    // them as drained, in half-second buckets).
    let mut sum = 0.0;
    for second in 0..9 {
        let start = blocked_from + Duration::from_millis(500 + 1_000 * second);
        let window = (
            unix_nanos(start),
            unix_nanos(start + Duration::from_secs(1)),
        );
        let seconds = reading(&wall_query(&daemon, &[pid], window).await);
        assert!(within(seconds, 1.0, 0.1), "window {second}: {seconds:.3} s");
        sum += seconds;
    }
    let report = client
        .stop_profile(v1::StopProfileRequest {
            session_id: session.session_id,
            options: Some(options(v1::Format::Folded)),
            force: false,
        })
        .await
        .expect("StopProfile")
        .into_inner();
    let summary = report.summary.expect("a summary");
    let ended = UNIX_EPOCH + Duration::from_nanos(summary.end_unix_nanos as u64);
    let expected = ended.duration_since(blocked_from).unwrap().as_secs_f64();
    let total = reading(&folded(&report.report));
    assert!(
        within(total, expected, 0.05),
        "{total:.3} s of {expected:.3} s"
    );
    assert!(
        total >= sum,
        "the windows ({sum:.3} s) are parts of the whole ({total:.3} s)"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_blocked_before_recording_is_charged_from_its_start_with_its_stack() {
    // The read blocks a second in, before the profile asks.
    let (daemon, _workload, pid) = blocked_reader().await;
    let (stacks, summary) = wall_profile(&daemon, pid, Duration::from_secs(2)).await;
    let elapsed = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
    let hz = f64::from(crate::support::TEST_FREQUENCY_HZ);
    let reading: f64 = stacks
        .iter()
        .filter(|(frames, _)| {
            crate::support::has_chain(frames, &["main", "read_empty_pipe"])
                && frames.iter().any(|frame| frame.contains("pipe_read"))
                && frames.last().is_some_and(|leaf| leaf == "[off-cpu: S]")
        })
        .map(|(_, count)| *count as f64 / hz)
        .sum();
    assert!(
        within(reading, elapsed, 0.05),
        "{reading:.3} s of {elapsed:.3} s in read_empty_pipe's read: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn profiles_back_to_back_each_see_the_whole_wait() {
    // The recording of one profile ends and the next begins before any
    // drain: the thread, blocked all along, must be found waiting anew
    // each time (the second window once came back empty).
    let (daemon, _workload, pid) = blocked_reader().await;
    let hz = f64::from(crate::support::TEST_FREQUENCY_HZ);
    for (round, mode) in [
        v1::Mode::Wall,
        v1::Mode::Offcpu,
        v1::Mode::Wall,
        v1::Mode::Wall,
    ]
    .into_iter()
    .enumerate()
    {
        let (stacks, summary) = profile_in(&daemon, pid, Duration::from_millis(1500), mode).await;
        let elapsed = (summary.end_unix_nanos - summary.start_unix_nanos) as f64 / 1e9;
        let reading = Time::of(&stacks, hz).sleeping;
        assert!(
            within(reading, elapsed, 0.05),
            "profile {round} ({mode:?}): {reading:.3} s asleep of {elapsed:.3} s: {stacks:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn only_the_selected_process_is_recorded() {
    let daemon = Daemon::start().await;
    let blocked = Workload::start("waits", &["pipe"]);
    let busy = Workload::start("waits", &["many"]);
    let mut client = daemon.client().await;
    let recorded = |status: v1::StatusReply| status.offcpu.expect("off-CPU status").recorded;
    let status = |client: &mut crate::support::Client| {
        let mut client = client.clone();
        async move {
            client
                .get_status(v1::GetStatusRequest { metrics: false })
                .await
                .expect("GetStatus")
                .into_inner()
        }
    };
    // Both past their first second: one blocked, the other napping.
    wait_for_wait_in(blocked.pid(), blocked.pid(), "pipe_read").await;
    wait_for_nappers(busy.pid()).await;
    let before = recorded(status(&mut client).await);
    let (stacks, _) = wall_profile(&daemon, blocked.pid(), Duration::from_secs(1)).await;
    let after = recorded(status(&mut client).await);
    // The blocked process does not switch; the other one's 32 threads
    // switch 200 times a second each, unrecorded.
    assert!(after - before < 10, "{} waits recorded", after - before);
    assert!(!stacks.is_empty());
    assert!(
        stacks.iter().all(|(frames, _)| !frames
            .iter()
            .any(|f| f == "nap_in_many_threads" || f == "napper")),
        "{stacks:#?}"
    );
    // With the busy one selected, its waits are.
    let (stacks, _) = wall_profile(&daemon, busy.pid(), Duration::from_secs(1)).await;
    let napping: u64 = samples_where(&stacks, |frames| frames.iter().any(|f| f == "napper"));
    assert!(napping > 0, "{stacks:#?}");
    assert!(recorded(status(&mut client).await) - after > 1_000);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_small_pending_map_counts_what_it_cannot_hold() {
    let daemon = Daemon::start_with(&["--offcpu-max-pending", "4"]).await;
    let busy = Workload::start("waits", &["many"]);
    wait_for_nappers(busy.pid()).await;
    let reply = daemon
        .client()
        .await
        .profile(v1::ProfileRequest {
            duration_ms: 1_000,
            selector: selector(&[busy.pid()]),
            options: Some(options(v1::Format::Folded)),
            mode: v1::Mode::Offcpu as i32,
            ..Default::default()
        })
        .await
        .expect("Profile")
        .into_inner();
    let summary = reply.summary.expect("a summary");
    let full = summary
        .lost
        .iter()
        .find(|loss| loss.cause == "offcpu_pending_full")
        .map_or(0, |loss| loss.count);
    assert!(full > 0, "{:?}", summary.lost);
    // What it could hold is still charged, and the daemon goes on.
    assert!(!folded(&reply.report).is_empty());
    let (stacks, _) = wall_profile(&daemon, busy.pid(), Duration::from_millis(500)).await;
    assert!(!stacks.is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_peek_shows_where_a_blocked_thread_waits_and_how() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("waits", &["pipe-spin"]);
    let pid = workload.pid();
    wait_for_wait_in(pid, pid, "pipe_read").await;
    let report = daemon
        .client()
        .await
        .peek(v1::PeekRequest { pid })
        .await
        .expect("Peek answers")
        .into_inner();
    // The main thread's section: its time spent asleep, in the read.
    let title = format!("Thread {pid} (");
    let section: Vec<&str> = report
        .text
        .lines()
        .skip_while(|line| !(line.starts_with(&title) && line.contains("Total snapshots")))
        .take_while(|line| !line.is_empty())
        .collect();
    let header = section
        .first()
        .unwrap_or_else(|| panic!("no section {title:?}:\n{}", report.text));
    let asleep: f64 = header
        .split("Off CPU: ")
        .nth(1)
        .and_then(|rest| rest.split(" s asleep").next())
        .and_then(|seconds| seconds.parse().ok())
        .unwrap_or_else(|| panic!("no time asleep in {header:?}"));
    // Asleep all through the peek (a second, longer on a busy machine).
    let peeked = report.duration_ms as f64 / 1e3;
    assert!(within(asleep, peeked, 0.1), "{header} in {peeked} s");
    assert!(
        header.contains("Total snapshots: 0. Utilization: 0%"),
        "{header}"
    );
    for frame in ["read_empty_pipe", "pipe_read", "[off-cpu: S]"] {
        assert!(
            section.iter().any(|line| line.contains(frame)),
            "{frame} in the blocked thread's section:\n{}",
            report.text
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wait_stops_being_counted_when_its_recording_ends() {
    let (daemon, _workload, pid) = blocked_reader().await;
    let (stacks, summary) = wall_profile(&daemon, pid, Duration::from_secs(1)).await;
    assert!(
        !stacks.is_empty(),
        "the blocked read is recorded while asked for"
    );
    // Seconds of the read, still blocked, that nothing must record.
    tokio::time::sleep(Duration::from_secs(3)).await;
    // From a second after the profile to now: nothing recorded any more.
    let after = summary.end_unix_nanos + 1_000_000_000;
    let later = wall_query(&daemon, &[pid], (after, 0)).await;
    assert!(later.is_empty(), "{later:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_idle_tasks_never_wait_off_cpu() {
    let daemon = Daemon::start().await;
    let busy = Workload::start("waits", &["many"]);
    // Its threads start napping after a second.
    wait_for_nappers(busy.pid()).await;
    // The whole machine, off CPU, by process.
    let reply = daemon
        .client()
        .await
        .profile(v1::ProfileRequest {
            duration_ms: 1_000,
            options: Some(v1::ReportOptions {
                format: v1::Format::Tree as i32,
                groupby: v1::GroupBy::Process as i32,
                ..Default::default()
            }),
            mode: v1::Mode::Offcpu as i32,
            ..Default::default()
        })
        .await
        .expect("Profile")
        .into_inner();
    let text = String::from_utf8(reply.report).expect("a text report");
    assert!(text.contains("Process "), "{text}");
    assert!(text.contains("napper"), "{text}");
    assert!(!text.contains("Process 0 "), "{text}");
    assert!(!text.contains("swapper"), "{text}");
}

#[tokio::test(flavor = "multi_thread")]
async fn at_rest_no_context_switch_runs_the_off_cpu_programs() {
    // Peeks by request only: a peek records waits, and other tests' peek
    // signals reach every daemon, so one would switch recording on here.
    let daemon = Daemon::start_with(&["--peek-signal", "off"]).await;
    let busy = Workload::start("waits", &["many"]);
    let switches = || async {
        daemon
            .client()
            .await
            .get_status(v1::GetStatusRequest { metrics: false })
            .await
            .expect("GetStatus")
            .into_inner()
            .offcpu
            .expect("off-CPU status")
            .switches
    };
    // Napping, and drained twice since: a switch counted would show.
    wait_for_nappers(busy.pid()).await;
    let mut client = daemon.client().await;
    wait_for_drains(&mut client, 2).await;
    assert_eq!(switches().await, 0, "attached with nothing recorded");
    let (stacks, _) = wall_profile(&daemon, busy.pid(), Duration::from_secs(1)).await;
    assert!(!stacks.is_empty());
    // The switches up to the detach are drained with the next drain.
    wait_for_drains(&mut client, 2).await;
    let seen = switches().await;
    assert!(seen > 1_000, "{seen} switches seen while recording");
    // Napping on, through two more drains.
    wait_for_drains(&mut client, 2).await;
    assert_eq!(switches().await, seen, "still attached after the recording");
}

#[tokio::test(flavor = "multi_thread")]
async fn every_recorded_wait_is_charged_or_counted() {
    // A stack-copy ring of four copies: most waits lose their stack.
    let daemon = Daemon::start_with(&["--stack-copy-buffer", "64KiB"]).await;
    let busy = Workload::start("waits", &["many"]);
    wait_for_nappers(busy.pid()).await;
    let (stacks, _) = wall_profile(&daemon, busy.pid(), Duration::from_secs(2)).await;
    assert!(!stacks.is_empty());
    // The waits under way at the end are charged with the next drains.
    wait_for_drains(&mut daemon.client().await, 2).await;
    let status = daemon
        .client()
        .await
        .get_status(v1::GetStatusRequest { metrics: false })
        .await
        .expect("GetStatus")
        .into_inner()
        .offcpu
        .expect("off-CPU status");
    assert!(status.recorded > 1_000, "{status:?}");
    assert!(status.stack_lost + status.dropped > 0, "{status:?}");
    assert_eq!(
        status.recorded + status.already_waiting,
        status.charged
            + status.abandoned
            + status.under_way
            + status.stack_lost
            + status.dropped
            + status.lost_whole,
        "{status:?}"
    );
}
