//! Faults the daemon must survive: programs that exec or are replaced
//! mid-profile, binaries deleted, replaced on disk or stripped, thousands of
//! threads and a storm of short-lived processes, full BPF maps, tracefs
//! missing, a full disk under the state directory, and clients that vanish
//! mid-stream. In each, the daemon keeps answering, the affected report says
//! what happened, and nothing else is lost.

use std::{
    collections::{BTreeSet, HashMap},
    fs,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use profilerd_client::v1;
use rustix::process::{Pid, Signal, kill_process};

use crate::support::{
    Client, Daemon, PATIENCE, PEEK_THREADS, Workload, build_workload, eventually, folded,
    has_chain, options, profile, samples_containing, samples_where, total, wait_for_threads,
};

/// Copies the workload `name` to `dir/comm`, the command name it runs under.
fn copy_workload(name: &str, dir: &Path, comm: &str) -> PathBuf {
    let copy = dir.join(comm);
    crate::support::copy_program(&build_workload(name), &copy);
    copy
}

/// Checks that the daemon still runs and answers GetStatus promptly, and
/// returns the status.
async fn still_serving(daemon: &mut Daemon) -> v1::StatusReply {
    assert!(daemon.is_running(), "the daemon died:\n{}", daemon.log());
    let mut client = daemon.client().await;
    status_within(&mut client, Duration::from_secs(5), daemon).await
}

async fn status_within(client: &mut Client, limit: Duration, daemon: &Daemon) -> v1::StatusReply {
    tokio::time::timeout(limit, client.get_status(v1::GetStatusRequest::default()))
        .await
        .unwrap_or_else(|_| {
            panic!(
                "GetStatus did not answer within {limit:?}:\n{}",
                daemon.log()
            )
        })
        .expect("GetStatus succeeds")
        .into_inner()
}

/// The count of `cause` in a list of losses (0 when absent).
fn lost(losses: &[v1::LossCount], cause: &str) -> u64 {
    losses
        .iter()
        .filter(|loss| loss.cause == cause)
        .map(|loss| loss.count)
        .sum()
}

fn total_lost(losses: &[v1::LossCount]) -> u64 {
    losses.iter().map(|loss| loss.count).sum()
}

/// Folded options with the process and thread frames above each stack.
fn by_thread() -> v1::ReportOptions {
    let mut by_thread = options(v1::Format::Folded);
    by_thread.groupby = v1::GroupBy::Thread as i32;
    by_thread
}

/// Samples of the stacks (grouped by thread) that contain `function`, by
/// their (process, thread) frames.
fn owners_of(stacks: &[(Vec<String>, u64)], function: &str) -> HashMap<(String, String), u64> {
    let mut owners = HashMap::new();
    for (frames, count) in stacks {
        if frames.len() > 2 && frames[2..].iter().any(|frame| frame == function) {
            *owners
                .entry((frames[0].clone(), frames[1].clone()))
                .or_insert(0) += count;
        }
    }
    owners
}

/// Samples with an unsymbolized user frame.
fn unknown_samples(stacks: &[(Vec<String>, u64)]) -> u64 {
    samples_where(stacks, |frames| {
        frames.iter().any(|frame| frame.contains("[unknown]"))
    })
}

fn send_signal(pid: u32, signal: Signal) {
    let pid = Pid::from_raw(pid as i32).expect("a real pid");
    kill_process(pid, signal).expect("the signal is sent");
}

/// 1. A process that execs another program mid-profile: the profile names
/// the functions of both programs, each under its own command name.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_execs_mid_profile_shows_both_programs() {
    let mut daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let first = copy_workload("exec_spin", dir.path(), "fault-exec-a");
    let second = copy_workload("split", dir.path(), "fault-exec-b");
    let second = second.to_str().expect("a UTF-8 path");
    // spin_before_exec for 1 s, then split (hot and cold) for 1 s.
    let workload = Workload::spawn(&first, &["1", second, "1"]);
    let pid = workload.pid();

    let reply = profile(
        &mut client,
        &[pid],
        Duration::from_millis(2300),
        by_thread(),
    )
    .await;
    let stacks = folded(&reply.report);
    let before = owners_of(&stacks, "spin_before_exec");
    let after = owners_of(&stacks, "hot");
    // One thread, the process's main one: process and thread frames alike.
    let (a, b) = (format!("fault-exec-a-{pid}"), format!("fault-exec-b-{pid}"));
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        [&(a.clone(), a)],
        "spin_before_exec belongs to fault-exec-a only: {stacks:?}"
    );
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        [&(b.clone(), b)],
        "hot belongs to fault-exec-b only: {stacks:?}"
    );
    assert!(
        before.values().sum::<u64>() > 30 && after.values().sum::<u64>() > 30,
        "each program ran for a second: {before:?} {after:?}\n{stacks:?}"
    );
    for (frames, count) in &stacks {
        if frames.iter().any(|frame| frame == "spin_before_exec") {
            assert!(
                has_chain(frames, &["main", "spin_before_exec"]),
                "{count} samples: {frames:?}"
            );
        }
        if frames.iter().any(|frame| frame == "hot") {
            assert!(
                has_chain(frames, &["main", "common", "hot"]),
                "{count} samples: {frames:?}"
            );
        }
    }
    let unknown = unknown_samples(&stacks);
    assert!(
        unknown * 50 < total(&stacks),
        "{unknown} of {} samples are unsymbolized: {stacks:?}",
        total(&stacks)
    );
    drop(workload);
    still_serving(&mut daemon).await;
}

/// 1. A process exits and another of the same command name takes over
/// mid-profile: both are in the profile of that name, each symbolized.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_replaced_by_another_of_its_name_mid_profile_shows_both() {
    const COMM: &str = "fault-replaced";
    let mut daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("split", dir.path(), COMM);
    let mut first = Workload::spawn(&binary, &["0.9"]);
    let profiling = tokio::spawn(async move {
        let reply = client
            .profile(v1::ProfileRequest {
                duration_ms: 2200,
                selector: Some(v1::Selector {
                    comms: vec![COMM.to_owned()],
                    ..Default::default()
                }),
                options: Some(by_thread()),
                mode: v1::Mode::Cpu as i32,
                ..Default::default()
            })
            .await
            .unwrap_or_else(|status| panic!("Profile failed: {status:?}"))
            .into_inner();
        (client, reply)
    });
    let first_pid = first.pid();
    tokio::task::spawn_blocking(move || first.wait())
        .await
        .expect("the first process exits");
    let second = Workload::spawn(&binary, &["0.9"]);
    let (_client, reply) = profiling.await.expect("the profile completes");

    let stacks = folded(&reply.report);
    let owners = owners_of(&stacks, "hot");
    for pid in [first_pid, second.pid()] {
        let name = format!("{COMM}-{pid}");
        let samples = owners.get(&(name.clone(), name)).copied().unwrap_or(0);
        assert!(
            samples > 20,
            "process {pid} has {samples} samples of hot: {owners:?}\n{stacks:?}"
        );
    }
    assert_eq!(owners.len(), 2, "{owners:?}");
    let summary = reply.summary.expect("a summary");
    assert_eq!(summary.processes, 2, "{summary:?}");
    assert!(unknown_samples(&stacks) * 50 < total(&stacks), "{stacks:?}");
    still_serving(&mut daemon).await;
}

/// 2. The binary of a running process is deleted before the daemon first
/// sees the process: its frames are still named, from the mapped file.
#[tokio::test(flavor = "multi_thread")]
async fn a_deleted_binary_is_still_symbolized() {
    let mut daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("split", dir.path(), "fault-deleted");
    let workload = Workload::spawn(&binary, &[]);
    // Once the program runs (not the forked test binary), delete it.
    workload.wait_until_running().await;
    fs::remove_file(&binary).expect("the binary is deleted");

    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_millis(1500),
        options(v1::Format::Folded),
    )
    .await;
    check_split_profile(&reply, "the deleted binary");
    still_serving(&mut daemon).await;
}

/// 2. A different binary is renamed over the path of a running one: the
/// frames are named from the file the process runs, not the one now there.
#[tokio::test(flavor = "multi_thread")]
async fn a_binary_replaced_on_disk_is_symbolized_from_what_runs() {
    let mut daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("split", dir.path(), "fault-overwritten");
    let workload = Workload::spawn(&binary, &[]);
    workload.wait_until_running().await;
    let other = copy_workload("peek_threads", dir.path(), "other");
    fs::rename(&other, &binary).expect("another binary is renamed over it");

    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_millis(1500),
        options(v1::Format::Folded),
    )
    .await;
    let stacks = check_split_profile(&reply, "the replaced binary");
    let by_function = samples_containing(&stacks);
    for foreign in ["spin_alpha", "spin_beta", "sleep_long", "alpha_main"] {
        assert!(
            !by_function.contains_key(foreign),
            "frames were named from the new file on disk: {stacks:?}"
        );
    }
    still_serving(&mut daemon).await;
}

/// Checks a profile of `split`: hot and cold named, with their chains.
fn check_split_profile(reply: &v1::ProfileReply, what: &str) -> Vec<(Vec<String>, u64)> {
    let stacks = folded(&reply.report);
    let samples = total(&stacks);
    let by_function = samples_containing(&stacks);
    let hot = by_function.get("hot").copied().unwrap_or(0);
    let cold = by_function.get("cold").copied().unwrap_or(0);
    assert!(
        samples > 50 && hot * 10 > samples * 6 && cold * 10 > samples,
        "the functions of {what} are missing or unnamed (hot {hot}, cold {cold} of {samples}): \
         {stacks:?}"
    );
    for (frames, count) in &stacks {
        if frames.iter().any(|frame| frame == "hot") {
            assert!(
                has_chain(frames, &["main", "common", "hot"]),
                "{count} samples: {frames:?}"
            );
        }
        assert!(
            !frames.iter().any(|frame| frame.contains("(deleted)")),
            "{frames:?}"
        );
    }
    assert!(unknown_samples(&stacks) * 50 < samples, "{stacks:?}");
    stacks
}

/// The symbol table of `binary`: (name, file offset range) of its functions.
fn function_ranges(binary: &Path) -> HashMap<String, std::ops::Range<u64>> {
    let run = |program: &str, args: &[&str]| {
        let output = Command::new(program)
            .args(args)
            .arg(binary)
            .output()
            .unwrap_or_else(|err| panic!("{program} (binutils) runs: {err}"));
        assert!(output.status.success(), "{program} failed: {output:?}");
        String::from_utf8(output.stdout).expect("UTF-8")
    };
    // LOAD segments: virtual address to file offset.
    let segments: Vec<(u64, u64, u64)> = run("readelf", &["-lW"])
        .lines()
        .filter(|line| line.trim_start().starts_with("LOAD"))
        .map(|line| {
            let fields: Vec<u64> = line
                .split_whitespace()
                .skip(1)
                .take(5)
                .map(|field| u64::from_str_radix(field.trim_start_matches("0x"), 16).unwrap())
                .collect();
            // Offset, VirtAddr, PhysAddr, FileSiz, MemSiz.
            (fields[1], fields[0], fields[4])
        })
        .collect();
    run("nm", &["-S", "--defined-only"])
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let address = u64::from_str_radix(fields.next()?, 16).ok()?;
            let size = u64::from_str_radix(fields.next()?, 16).ok()?;
            let kind = fields.next()?;
            let name = fields.next()?;
            if !kind.eq_ignore_ascii_case("t") {
                return None;
            }
            let &(vaddr, offset, _) = segments
                .iter()
                .find(|(vaddr, _, memsz)| (*vaddr..vaddr + memsz).contains(&address))?;
            let start = address - vaddr + offset;
            Some((name.to_owned(), start..start + size))
        })
        .collect()
}

/// 3. A stripped binary: its frames are `binary+0xoffset`, at the offsets
/// where the functions that ran start, and the profile keeps every sample.
#[tokio::test(flavor = "multi_thread")]
async fn a_stripped_binary_shows_module_and_offset() {
    let mut daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("split", dir.path(), "fault-stripped");
    let functions = function_ranges(&binary);
    let status = Command::new("strip")
        .arg(&binary)
        .status()
        .expect("strip (binutils) runs");
    assert!(status.success());
    let workload = Workload::spawn(&binary, &[]);

    let mut without_kernel = options(v1::Format::Folded);
    without_kernel.kernel = Some(false);
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_millis(1500),
        without_kernel,
    )
    .await;
    let stacks = folded(&reply.report);
    let samples = total(&stacks);
    assert_eq!(reply.summary.expect("a summary").samples, samples);
    assert!(samples > 50, "too few samples: {stacks:?}");
    let mut in_hot_or_cold = 0;
    let mut in_binary = 0;
    for (frames, count) in &stacks {
        let leaf = frames.last().expect("a frame");
        assert!(
            !frames
                .iter()
                .any(|frame| ["hot", "cold", "common", "main"].contains(&frame.as_str())),
            "a stripped binary has no names to show: {frames:?}"
        );
        let Some(offset) = leaf.strip_prefix("fault-stripped+0x") else {
            continue;
        };
        let offset = u64::from_str_radix(offset, 16)
            .unwrap_or_else(|_| panic!("not module+0xoffset: {leaf}"));
        in_binary += count;
        if ["hot", "cold"]
            .iter()
            .any(|name| functions[*name].contains(&offset))
        {
            in_hot_or_cold += count;
        }
        // Named by where its function starts (its unwind entry's), not
        // split by address.
        assert!(
            functions.values().any(|function| function.start == offset),
            "{leaf} is no function's start ({functions:?})"
        );
    }
    assert!(
        in_binary * 10 >= samples * 9,
        "{in_binary} of {samples} samples end in fault-stripped+0x…: {stacks:?}"
    );
    assert!(
        in_hot_or_cold * 10 >= in_binary * 9,
        "{in_hot_or_cold} of {in_binary} leaf offsets fall in hot or cold \
         ({functions:?}): {stacks:?}"
    );
    assert!(
        !daemon.log().contains("cannot symbolize"),
        "{}",
        daemon.log()
    );
    still_serving(&mut daemon).await;
}

/// The number of threads of `pid`.
fn threads_of(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |tasks| tasks.count())
}

/// 4. A process with 2000 threads, two of them busy: the daemon answers
/// promptly, profiles the busy ones, and peeks at all of them.
#[tokio::test(flavor = "multi_thread")]
async fn a_process_with_thousands_of_threads_is_profiled_and_peeked() {
    const THREADS: usize = 2000;
    // Alone: every daemon running would sample and record these threads,
    // and the peek samples all of them; other tests' timings would suffer.
    let mut daemon = Daemon::start_alone(&[]).await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("many_threads", dir.path(), "fault-threads");
    let workload = Workload::spawn(&binary, &[&THREADS.to_string(), "2"]);
    let pid = workload.pid();
    eventually(
        "the threads all start",
        PATIENCE,
        async || match threads_of(pid) {
            threads if threads > THREADS => Ok(()),
            threads => Err(format!("{threads} threads")),
        },
    )
    .await;

    let profiling = tokio::spawn({
        let mut client = daemon.client().await;
        async move {
            profile(
                &mut client,
                &[pid],
                Duration::from_millis(1500),
                by_thread(),
            )
            .await
        }
    });
    // The status answers promptly all through the profile: asked every
    // 200 ms until it ends.
    while !profiling.is_finished() {
        status_within(&mut client, Duration::from_secs(1), &daemon).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let reply = profiling.await.expect("the profile completes");
    let stacks = folded(&reply.report);
    let busy = owners_of(&stacks, "spin_thread");
    assert_eq!(busy.len(), 2, "two threads spin: {busy:?}\n{stacks:?}");
    assert!(
        busy.values().all(|&samples| samples > 20),
        "{busy:?}\n{stacks:?}"
    );

    let report = client
        .peek(v1::PeekRequest { pid })
        .await
        .unwrap_or_else(|status| panic!("Peek failed: {status:?}\n{}", daemon.log()))
        .into_inner();
    assert_eq!(
        report.threads.len(),
        THREADS + 1,
        "every thread is in the peek report"
    );
    // The two spinners ran during the peek (on a busy machine, not always
    // for long); the sleepers were found asleep in pause().
    let spinning = report
        .threads
        .iter()
        .filter(|thread| {
            thread
                .at_trigger
                .iter()
                .any(|frame| frame.starts_with("spin_thread"))
        })
        .count();
    let head = &report.text[..report.text.len().min(4000)];
    assert!(spinning >= 1, "{head}");
    let asleep = report
        .threads
        .iter()
        .filter(|thread| thread.state.starts_with('S') && thread.wait_channel.contains("pause"))
        .count();
    assert!(
        asleep >= THREADS - 2,
        "{asleep} threads asleep in pause: {head}"
    );
    still_serving(&mut daemon).await;
}

/// 4. A storm of 2000 short-lived processes, 4 at a time: the daemon answers
/// promptly throughout, reports them, and says what it lost.
#[tokio::test(flavor = "multi_thread")]
async fn a_storm_of_short_lived_processes_is_reported() {
    const CHILDREN: u64 = 2000;
    // Alone: every daemon running would record each of the 2000 processes.
    let mut daemon = Daemon::start_alone(&[]).await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("fork_storm", dir.path(), "fault-storm");
    let before = status_within(&mut client, Duration::from_secs(5), &daemon).await;
    let start = crate::support::unix_nanos();
    let mut storm = Workload::spawn(&binary, &[&CHILDREN.to_string(), "4", "1"]);
    let storm_pid = storm.pid();
    let mut slowest = Duration::ZERO;
    let deadline = Instant::now() + PATIENCE;
    let exit = loop {
        let asked = Instant::now();
        status_within(&mut client, Duration::from_secs(2), &daemon).await;
        slowest = slowest.max(asked.elapsed());
        if let Some(exit) = storm.try_wait() {
            break exit;
        }
        assert!(Instant::now() < deadline, "the storm never ended");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(exit.success(), "every child of the storm exited cleanly");
    assert!(
        slowest < Duration::from_secs(1),
        "GetStatus took {slowest:?} during the storm"
    );

    let reply = client
        .query(v1::QueryRequest {
            start_unix_nanos: start,
            end_unix_nanos: 0,
            selector: Some(v1::Selector {
                comms: vec!["fault-storm".to_owned()],
                ..Default::default()
            }),
            options: Some(by_thread()),
            mode: v1::Mode::Cpu as i32,
        })
        .await
        .unwrap_or_else(|status| panic!("Query failed: {status:?}"))
        .into_inner();
    let stacks = folded(&reply.report);
    let samples = total(&stacks);
    let children: BTreeSet<&str> = stacks
        .iter()
        .map(|(frames, _)| frames[0].as_str())
        .filter(|process| *process != format!("fault-storm-{storm_pid}"))
        .collect();
    let named = samples_containing(&stacks)
        .get("child_work")
        .copied()
        .unwrap_or(0);
    let status = still_serving(&mut daemon).await;
    let seen = status.processes_seen - before.processes_seen;
    let adopted = |status: &v1::StatusReply| {
        let symbolizer = status.symbolizer.clone().expect("symbolizer status");
        (
            symbolizer.processes_adopted,
            symbolizer.processes_adopted_as_announced,
        )
    };
    let (adopted, as_announced) = (
        adopted(&status).0 - adopted(&before).0,
        adopted(&status).1 - adopted(&before).1,
    );
    eprintln!(
        "storm: {} children in the report, {samples} samples, {named} in child_work, \
         {seen} processes seen ({adopted} adopted, {as_announced} as announced), slowest \
         status {slowest:?}, lost {:?}",
        children.len(),
        status.samples_lost
    );
    // Each child sampled takes its parent's memory map, from what the
    // kernel announced of it (its parent and program layout), whether or
    // not it is still alive when the daemon reads the announcement.
    assert!(
        as_announced * 10 >= children.len() as u64 * 9 && as_announced <= adopted,
        "{as_announced} of {} children adopted their parent's map as announced \
         ({adopted} in all)",
        children.len()
    );
    assert!(
        children.len() as u64 > CHILDREN / 10,
        "only {} of {CHILDREN} children are in the report: {stacks:?}",
        children.len()
    );
    // Whatever was lost during the storm is counted, in the report and in
    // the status.
    let summary = reply.summary.expect("a summary");
    assert_eq!(summary.samples, samples);
    assert!(
        total_lost(&summary.lost) <= total_lost(&status.samples_lost),
        "{summary:?} vs {:?}",
        status.samples_lost
    );
    assert!(
        seen >= children.len() as u64,
        "{seen} processes seen, {} reported",
        children.len()
    );
    // Most children exit before the daemon can read their memory map: they
    // are symbolized with their parent's, which they share.
    assert!(
        named * 2 > samples,
        "{named} of {samples} in child_work: {stacks:?}"
    );
    let unknown = unknown_samples(&stacks);
    assert!(
        unknown * 20 <= samples,
        "{unknown} of {samples} samples of the storm are unsymbolized: {stacks:?}"
    );
    // Unwound with their parent's mappings, the children's stacks are
    // whole: every frame of the known chain, main calling child_work.
    let whole: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames
                .windows(2)
                .any(|pair| pair[0] == "main" && pair[1] == "child_work")
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        whole * 100 >= named * 95,
        "{whole} of the {named} samples in child_work have main as its caller: {stacks:?}"
    );
}

/// 5. A kernel stacks map far too small for the load: the losses are
/// counted by cause, in the status and in the profile, and the samples whose
/// stack was lost are still counted; when the load drops, a profile of a
/// simple workload has no losses.
#[tokio::test(flavor = "multi_thread")]
async fn full_maps_are_counted_and_the_daemon_recovers() {
    // Drains 5 s apart, even while asked for (and at the cuts of profiles):
    // on a busy machine the heavy workload may get little CPU time, yet
    // over 256 samples. The
    // counts map has room for them all: had it filled first, samples would
    // be dropped whole (counts_map_full) rather than kept as [lost]. Peeks
    // (which other tests' signals would start) are off: their samples share
    // the maps.
    // The maps of the in-kernel aggregation: frame pointers walked in the
    // kernel, no stack copies.
    let mut daemon = Daemon::start_with(&[
        "--stack-copy",
        "0",
        "--peek-signal",
        "off",
        "--max-stacks",
        "256",
        "--max-sample-keys",
        "4096",
        "--drain-interval",
        "5s",
        "--watched-drain-interval",
        "5s",
    ])
    .await;
    let mut client = daemon.client().await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = copy_workload("many_stacks", dir.path(), "fault-stacks");
    // A process with thousands of distinct stacks, and only it is sampled:
    // other tests' processes neither add to the load nor to the losses.
    let heavy = Workload::spawn(&binary, &[]);
    let pids = [heavy.pid()];
    set_targets(&mut client, &pids).await;

    let reply = profile(
        &mut client,
        &pids,
        Duration::from_millis(3000),
        options(v1::Format::Folded),
    )
    .await;
    let summary = reply.summary.clone().expect("a summary");
    let full = lost(&summary.lost, "stack_map_full");
    assert!(
        full > 0,
        "thousands of stacks in maps of 256 must overflow: {summary:?}"
    );
    let status = still_serving(&mut daemon).await;
    let status_full = lost(&status.samples_lost, "stack_map_full");
    assert!(
        status_full >= full,
        "{:?} vs {summary:?}",
        status.samples_lost
    );
    // Samples whose stack was lost are still counted, under [lost]: each
    // lost its user stack, its kernel stack, or both.
    let stacks = folded(&reply.report);
    let lost_stacks = samples_containing(&stacks)
        .get("[lost]")
        .copied()
        .unwrap_or(0);
    assert!(
        lost_stacks > 0 && lost_stacks <= full && full <= 2 * lost_stacks,
        "{full} stacks lost, {lost_stacks} samples with [lost]: {stacks:?}"
    );
    assert!(
        samples_containing(&stacks)
            .get("leaf_spin")
            .copied()
            .unwrap_or(0)
            > 0,
        "the stacks that fit are kept: {stacks:?}"
    );
    drop(heavy);

    let light = Workload::start_as("split", "fault-light", &[]);
    set_targets(&mut client, &[light.pid()]).await;
    // A query up to now drains the last heavy samples.
    client
        .query(v1::QueryRequest {
            start_unix_nanos: crate::support::unix_nanos() - 1_000_000_000,
            end_unix_nanos: 0,
            selector: crate::support::selector(&[light.pid()]),
            options: Some(options(v1::Format::Flat)),
            mode: v1::Mode::Cpu as i32,
        })
        .await
        .unwrap_or_else(|status| panic!("Query failed: {status:?}"));
    let before = still_serving(&mut daemon).await;
    let reply = profile(
        &mut client,
        &[light.pid()],
        Duration::from_millis(1500),
        options(v1::Format::Folded),
    )
    .await;
    let after = still_serving(&mut daemon).await;
    let summary = reply.summary.expect("a summary");
    assert!(summary.lost.is_empty(), "new losses: {summary:?}");
    assert_eq!(
        total_lost(&after.samples_lost),
        total_lost(&before.samples_lost),
        "{:?} then {:?}",
        before.samples_lost,
        after.samples_lost
    );
    let stacks = folded(&reply.report);
    assert!(
        samples_containing(&stacks).get("hot").copied().unwrap_or(0) > 100,
        "{stacks:?}"
    );
}

async fn set_targets(client: &mut Client, pids: &[u32]) {
    client
        .set_targets(v1::SetTargetsRequest {
            everything: false,
            pids: pids.to_vec(),
            cgroups: Vec::new(),
        })
        .await
        .unwrap_or_else(|status| panic!("SetTargets failed: {status:?}"));
}

/// A wrapper that runs the daemon in a mount namespace of its own in which
/// tracefs is not mounted (nothing is unmounted in the test's namespace).
fn without_tracefs(then: &str) -> Vec<String> {
    let script = format!(
        r#"for dir in /sys/kernel/debug/tracing /sys/kernel/tracing; do
  while mountpoint -q "$dir"; do umount "$dir" || exit 97; done
done
exec {then} "$@""#
    );
    ["unshare", "--mount", "--propagation", "private", "sh", "-c"]
        .into_iter()
        .map(str::to_owned)
        .chain([script, "without-tracefs".to_owned()])
        .collect()
}

fn tracefs_mounted(pid: u32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/mountinfo"))
        .expect("the daemon's mount table")
        .lines()
        .any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.get(4) == Some(&"/sys/kernel/tracing") && line.contains(" - tracefs ")
        })
}

/// 6. tracefs is not mounted where the daemon starts: it mounts it (in its
/// own mount namespace here), and peeks by signal work.
#[tokio::test(flavor = "multi_thread")]
async fn tracefs_missing_at_start_is_mounted_and_peeks_by_signal_work() {
    let wrapper = without_tracefs("");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start_wrapped(&wrapper, &[]).await;
    assert!(
        daemon.log().contains("tracefs was not mounted"),
        "the daemon says it mounted tracefs:\n{}",
        daemon.log()
    );
    assert!(tracefs_mounted(daemon.pid()), "{}", daemon.log());
    let mut client = daemon.client().await;
    let peek = still_serving(&mut daemon)
        .await
        .peek
        .expect("a peek status");
    assert_eq!(peek.signal, libc::SIGUSR1 as u32, "{peek:?}");
    assert!(peek.signal_off_reason.is_empty(), "{peek:?}");

    let workload = Workload::start_as("peek_threads", "fault-tracefs", &[]);
    // Past the first drains, which symbolize everything already running
    // (slow on a busy machine), and with its handler set (its threads
    // started).
    eventually("two drains", PATIENCE, async || {
        match still_serving(&mut daemon).await.drains {
            drains if drains >= 2 => Ok(()),
            drains => Err(format!("{drains} drains")),
        }
    })
    .await;
    wait_for_threads(workload.pid(), &PEEK_THREADS).await;
    send_signal(workload.pid(), Signal::USR1);
    eventually(
        "a peek after the signal",
        PATIENCE,
        async || match crate::support::peeks_of(&mut client, workload.pid()).await {
            peeks if !peeks.is_empty() => Ok(()),
            _ => Err(format!(
                "{:?}\n{}",
                still_serving(&mut daemon).await.peek,
                daemon.log()
            )),
        },
    )
    .await;
    still_serving(&mut daemon).await;
}

/// 6. tracefs is not mounted and cannot be (the daemon lacks CAP_SYS_ADMIN):
/// the daemon still starts and profiles, says why peeks by signal are off,
/// and peeks by request still work.
#[tokio::test(flavor = "multi_thread")]
async fn tracefs_that_cannot_be_mounted_turns_only_signal_peeks_off() {
    let wrapper = without_tracefs("setpriv --bounding-set=-sys_admin --inh-caps=-sys_admin");
    let wrapper: Vec<&str> = wrapper.iter().map(String::as_str).collect();
    let mut daemon = Daemon::start_wrapped(&wrapper, &[]).await;
    assert!(!tracefs_mounted(daemon.pid()), "{}", daemon.log());
    let mut client = daemon.client().await;
    let peek = still_serving(&mut daemon)
        .await
        .peek
        .expect("a peek status");
    assert!(
        peek.signal_off_reason.contains("tracefs"),
        "the status says why peeks by signal are off: {peek:?}"
    );
    assert!(
        daemon.log().contains("peeks by signal are off"),
        "{}",
        daemon.log()
    );

    let workload = Workload::start_as("split", "fault-notracefs", &[]);
    // 3 s: beside the rest of the suite on 2 CPUs, the spinner has been
    // seen to get 5% of a CPU (26 samples in 1 s at 499 Hz).
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(3),
        options(v1::Format::Folded),
    )
    .await;
    let stacks = folded(&reply.report);
    assert!(
        samples_containing(&stacks).get("hot").copied().unwrap_or(0) > 30,
        "{stacks:?}\n{}",
        daemon.log()
    );
    let report = client
        .peek(v1::PeekRequest {
            pid: workload.pid(),
        })
        .await
        .unwrap_or_else(|status| panic!("Peek failed: {status:?}\n{}", daemon.log()))
        .into_inner();
    assert!(report.text.contains("hot"), "{}", report.text);
    still_serving(&mut daemon).await;
}

/// A tmpfs of 256 KiB mounted on a directory; unmounted when dropped.
struct SmallDisk {
    path: PathBuf,
}

impl SmallDisk {
    fn mount(path: &Path) -> Self {
        fs::create_dir_all(path).expect("the mount point exists");
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256k", "fault-small-disk"])
            .arg(path)
            .status()
            .expect("mount runs");
        assert!(status.success(), "a small tmpfs is mounted");
        Self {
            path: path.to_owned(),
        }
    }

    /// Writes a file until the disk is full; returns its path.
    fn fill(&self) -> PathBuf {
        use std::io::Write as _;
        let filler = self.path.join("filler");
        let mut file = fs::File::create(&filler).expect("the filler is created");
        let chunk = [0xa5u8; 4096];
        loop {
            match file.write(&chunk) {
                Ok(0) => break,
                Ok(_) => {}
                Err(err) => {
                    assert_eq!(err.raw_os_error(), Some(libc::ENOSPC), "{err}");
                    break;
                }
            }
        }
        filler
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("--lazy")
            .arg(&self.path)
            .stderr(Stdio::null())
            .status();
    }
}

/// 7. The disk under the state directory is full: the peek report is still
/// returned, the failed write is logged and counted and leaves nothing
/// behind; once there is room again, reports are written.
#[tokio::test(flavor = "multi_thread")]
async fn a_full_disk_keeps_peek_reports_in_memory_and_counts_the_failure() {
    // Peeks by request only: other tests' peek signals would be reports too.
    let mut daemon = Daemon::start_with(&["--peek-signal", "off"]).await;
    let mut client = daemon.client().await;
    let peeks = daemon.state_dir().join("peeks");
    // Mounted over the directory the daemon made (and holds no handle on).
    let disk = SmallDisk::mount(&peeks);
    let filler = disk.fill();
    let workload = Workload::start_as("peek_threads", "fault-disk-full", &[]);
    let pid = workload.pid();
    wait_for_threads(pid, &PEEK_THREADS).await;

    let report = client
        .peek(v1::PeekRequest { pid })
        .await
        .unwrap_or_else(|status| panic!("Peek failed: {status:?}\n{}", daemon.log()))
        .into_inner();
    assert!(report.text.contains("spin_alpha"), "{}", report.text);
    let fetched = client
        .get_peek(v1::GetPeekRequest {
            id: report.id.clone(),
        })
        .await
        .expect("the report is kept in memory")
        .into_inner();
    assert_eq!(fetched.text, report.text);
    let status = still_serving(&mut daemon).await.peek.expect("peek status");
    assert_eq!(status.not_written, 1, "{status:?}");
    assert!(
        daemon.log().contains("cannot write the peek report"),
        "{}",
        daemon.log()
    );
    let left: Vec<_> = fs::read_dir(&peeks)
        .expect("the peeks directory")
        .map(|entry| entry.expect("an entry").file_name())
        .filter(|name| name != "filler")
        .collect();
    assert!(left.is_empty(), "a failed write leaves {left:?}");

    fs::remove_file(&filler).expect("room is made");
    let report = client
        .peek(v1::PeekRequest { pid })
        .await
        .unwrap_or_else(|status| panic!("Peek failed: {status:?}\n{}", daemon.log()))
        .into_inner();
    let written = peeks.join(format!("{}.txt", report.id));
    assert_eq!(
        fs::read_to_string(&written).expect("the report is written"),
        report.text
    );
    let status = still_serving(&mut daemon).await.peek.expect("peek status");
    assert_eq!(status.not_written, 1, "{status:?}");
    drop(disk);
}

/// Starts profilerctl against `socket` with `args`, as a child of its own.
fn profilerctl_child(socket: &Path, args: &[&str]) -> std::process::Child {
    Command::new(crate::support::profilerctl_binary())
        .arg("--socket")
        .arg(socket)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("profilerctl starts")
}

/// The first line `output` gives within [`PATIENCE`] (panics otherwise).
fn first_line(output: impl std::io::Read + Send + 'static, what: &str) -> String {
    use std::io::BufRead as _;
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut reader = std::io::BufReader::new(output);
        let mut line = String::new();
        let _ = reader.read_line(&mut line);
        let _ = sender.send(line);
        // Keep reading, so that the child's later writes do not fail.
        let _ = std::io::copy(&mut reader, &mut std::io::sink());
    });
    receiver
        .recv_timeout(PATIENCE)
        .unwrap_or_else(|_| panic!("{what} printed nothing within {PATIENCE:?}"))
}

/// Starts a streaming profilerctl command (`peeks --follow` or `top`) and
/// returns once its stream is open (and for top, an update arrived); retries
/// while the slot of an earlier stream is still being freed.
fn open_stream(socket: &Path, args: &[&str]) -> std::process::Child {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let mut child = profilerctl_child(socket, args);
        let line = if args[0] == "top" {
            first_line(child.stdout.take().expect("a pipe"), "top")
        } else {
            first_line(child.stderr.take().expect("a pipe"), "peeks --follow")
        };
        if line.starts_with("profilerd top:") || line.starts_with("waiting for peeks") {
            return child;
        }
        let _ = child.kill();
        let _ = child.wait();
        assert!(
            Instant::now() < deadline,
            "profilerctl {args:?} did not open its stream: {line}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// 8. Clients killed in the middle of a stream (WatchPeeks, Top) free their
/// stream's slot: with every slot taken, a new stream is accepted once one
/// of them is gone, and gets the next report.
#[tokio::test(flavor = "multi_thread")]
async fn clients_killed_mid_stream_free_their_slots() {
    let mut daemon =
        Daemon::start_with(&["--max-streams-per-caller", "2", "--peek-signal", "off"]).await;
    let mut client = daemon.client().await;
    let workload = Workload::start_as("split", "fault-streams", &[]);
    let pid = workload.pid().to_string();
    let socket = daemon.socket.clone();

    for (stream, args) in [
        ("WatchPeeks", vec!["peeks", "--follow"]),
        ("Top", vec!["top", "--pid", &pid, "--interval", "200ms"]),
    ] {
        let mut watcher = open_stream(&socket, &["peeks", "--follow"]);
        // Mid-stream: the stream is open, and for Top an update arrived.
        let mut killed = open_stream(&socket, &args);
        let refused = client
            .watch_peeks(v1::WatchPeeksRequest {})
            .await
            .expect_err("both slots are taken");
        assert_eq!(
            refused.code(),
            tonic::Code::ResourceExhausted,
            "{refused:?}"
        );

        killed.kill().expect("the client is killed");
        killed.wait().expect("the client is gone");
        let mut replacement = eventually(
            &format!("the killed {stream} client's slot is free"),
            PATIENCE,
            async || match client.watch_peeks(v1::WatchPeeksRequest {}).await {
                Ok(stream) => Ok(stream.into_inner()),
                Err(status) => {
                    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
                    Err(format!("{status:?}"))
                }
            },
        )
        .await;
        let report = client
            .peek(v1::PeekRequest {
                pid: workload.pid(),
            })
            .await
            .expect("Peek answers")
            .into_inner();
        // Other tests' peek signals reach this daemon too: wait for ours.
        let streamed = tokio::time::timeout(PATIENCE, async {
            loop {
                let streamed = replacement
                    .message()
                    .await
                    .expect("the stream stays open")
                    .expect("a report");
                if streamed.id == report.id {
                    return streamed;
                }
            }
        })
        .await
        .expect("the new stream gets the report");
        assert_eq!(streamed.pid, workload.pid());
        assert!(
            watcher.try_wait().expect("the watcher").is_none(),
            "the other client's stream is untouched"
        );
        watcher.kill().expect("the watcher is stopped");
        watcher.wait().expect("the watcher is gone");
        drop(replacement);
        still_serving(&mut daemon).await;
    }
}

/// A sample counted without its stacks because the stack-copy ring was
/// full says so in its own stack, and the report's summary counts it among
/// its own losses by cause (beside the whole machine's).
#[tokio::test(flavor = "multi_thread")]
async fn a_sample_lost_to_a_full_ring_says_so_in_its_stack() {
    // A ring of a few copies, at 999 Hz: the unwinding passes cannot keep up.
    let daemon =
        Daemon::start_with(&["--stack-copy-buffer", "64KiB", "--frequency-hz", "999"]).await;
    let mut client = daemon.client().await;
    let binary =
        crate::support::build_workload_with("deep_threads", "deep-threads", &["-O1", "-g"]);
    let busy = Workload::spawn(&binary, &[]);
    let pids = [busy.pid()];
    set_targets(&mut client, &pids).await;
    let reply = profile(
        &mut client,
        &pids,
        Duration::from_millis(2000),
        options(v1::Format::Folded),
    )
    .await;
    let summary = reply.summary.clone().expect("a summary");
    let machine_wide = lost(&summary.lost, "stack_copy_buffer_full");
    let stacks = folded(&reply.report);
    let own = samples_containing(&stacks)
        .get("[lost: stack copy ring full]")
        .copied()
        .unwrap_or(0);
    // (The machine's counters are read at each drain, the samples as they
    // are flipped out: one sampled as a drain began may fall in the
    // neighbouring window of the two.)
    assert!(
        own > 0 && own <= machine_wide + machine_wide / 100 + 2,
        "{own} samples say the ring was full, the window lost {machine_wide}: {summary:?} \
         {stacks:?}"
    );
    // The summary counts them, as the report's own losses.
    assert_eq!(
        lost(&summary.own_lost, "stack_copy_ring_full"),
        own,
        "{summary:?}"
    );
    // Said once, not as two [lost] frames.
    assert!(
        !stacks.iter().any(|(frames, _)| {
            frames
                .first()
                .is_some_and(|f| f.starts_with("[lost: stack copy"))
                && frames.len() > 1
        }),
        "{stacks:?}"
    );
}
