//! Whole stacks across processes' lives and threads' depths: processes
//! that live 200 ms or 2 ms, children sampled before their parent's exec, a process
//! that execs itself over and over, a binary only inside another mount
//! namespace; threads whose stacks are deeper than a copy, main threads
//! deep from their start.

use std::{process::Command, time::Duration};

use profilerd_client::v1;

use crate::{
    support::{
        Daemon, Workload, build_workload_with, folded, options, private_copy, profile,
        samples_where, total,
    },
    unwinding::{
        C_ROOT, assert_share, chain_binary, folded_profile_of, folded_profile_of_comm, plain,
    },
};

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_s_stack_copy_holds_as_many_frames_wherever_its_stack_pointer_is() {
    // The copy starts at the stack pointer: one that started at its page's
    // start held up to 4 KiB less, three 1 KiB frames here. The threads,
    // 100 KiB deep, start after the process was first read: each is found
    // deeper than its 16 KiB copy, its stack is looked for in the
    // process's memory map read again, and it gets 64 KiB copies (once
    // only threads whose stacks that first reading saw got them).
    let daemon = Daemon::start().await;
    let binary = build_workload_with("deep_threads", "deep-threads", &["-O1", "-g"]);
    let workload = Workload::spawn(&binary, &[]);
    let mut by_thread = options(v1::Format::Folded);
    by_thread.groupby = v1::GroupBy::Thread as i32;
    let mut client = daemon.client().await;
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(2),
        by_thread,
    )
    .await;
    let stacks = folded(&reply.report);
    // Per thread: samples in deep_leaf by how many recurse frames they hold.
    let mut depths: std::collections::BTreeMap<String, std::collections::BTreeMap<usize, u64>> =
        Default::default();
    for (frames, count) in &stacks {
        if frames.last().map(String::as_str) != Some("deep_leaf") {
            continue;
        }
        let Some(thread) = frames.get(1).and_then(|frame| frame.rsplit_once('-')) else {
            continue;
        };
        let recursions = frames
            .iter()
            .filter(|frame| plain(frame) == "recurse")
            .count();
        *depths
            .entry(thread.0.to_owned())
            .or_default()
            .entry(recursions)
            .or_default() += count;
    }
    let modal: Vec<(String, usize)> = depths
        .iter()
        .filter(|(_, by_depth)| by_depth.values().sum::<u64>() >= 20)
        .map(|(thread, by_depth)| {
            let (&depth, _) = by_depth.iter().max_by_key(|&(_, count)| count).unwrap();
            (thread.clone(), depth)
        })
        .collect();
    assert_eq!(modal.len(), 4, "every thread sampled: {depths:?}");
    let least = modal.iter().map(|&(_, depth)| depth).min().unwrap();
    let most = modal.iter().map(|&(_, depth)| depth).max().unwrap();
    assert!(
        most - least <= 1 && least >= 56,
        "recurse frames held per thread: {modal:?} ({depths:?})"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_deeper_than_its_copy_gets_larger_copies() {
    // 300 frames of about 224 bytes in a thread of its own: a 16 KiB copy
    // held 65 of them (perf's 16 KiB, 74). Found too deep, the thread's
    // copies take 64 KiB, ending at its stack's top: the whole thread,
    // from `clone3` to the leaf (the daemon walks up to 512 frames; it
    // stopped at 127 before). A stack cut short says why.
    let daemon = Daemon::start().await;
    let binary = build_workload_with("deep_recursion", "deep-recursion", &["-O1", "-g"]);
    let workload = Workload::spawn(&binary, &[]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let mut by_depth: std::collections::BTreeMap<usize, u64> = Default::default();
    let mut cut_without_reason = 0;
    for (frames, count) in &stacks {
        if frames.last().map(String::as_str) != Some("recursion_leaf") {
            continue;
        }
        let depth = frames.iter().filter(|frame| *frame == "descend").count();
        *by_depth.entry(depth).or_default() += count;
        if frames[0] != "clone3" && !frames[0].starts_with("[unwind stopped: ") {
            cut_without_reason += count;
        }
    }
    let samples: u64 = by_depth.values().sum();
    let deep: u64 = by_depth.range(300..).map(|(_, count)| count).sum();
    assert!(samples >= 50, "too few samples: {stacks:#?}");
    assert_eq!(cut_without_reason, 0, "a cut stack says why: {stacks:#?}");
    assert!(
        deep as f64 >= 0.9 * samples as f64,
        "{deep} of {samples} samples hold all 300 descend frames: {by_depth:?}"
    );
    let status = daemon
        .client()
        .await
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let unwinding = status.unwinding.expect("the status says how stacks unwind");
    assert!(
        unwinding.deep_threads >= 1 && unwinding.deep_copy_bytes == 64 * 1024,
        "{unwinding:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stack_deeper_than_the_frames_walked_says_so() {
    // 800 frames of about 48 bytes in a thread of its own: its deep copies
    // hold them all, and the daemon walks 512 of them (the leaf and 511
    // descents), then
    // says where it stopped.
    let daemon = Daemon::start().await;
    let binary = build_workload_with("deep_recursion", "deep-recursion", &["-O1", "-g"]);
    let workload = Workload::spawn(&binary, &["narrow"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let (mut cut, mut samples) = (0, 0);
    for (frames, count) in &stacks {
        if frames.last().map(String::as_str) != Some("recursion_leaf") {
            continue;
        }
        samples += count;
        let descents = frames
            .iter()
            .filter(|frame| *frame == "narrow_descend")
            .count();
        if frames[0] == "[unwind stopped: deeper than 512 frames]" && descents == 511 {
            cut += count;
        }
    }
    assert!(samples >= 50, "too few samples: {stacks:#?}");
    assert!(
        cut as f64 >= 0.9 * samples as f64,
        "{cut} of {samples} samples walk 512 frames and say they stop there: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_program_deep_in_its_main_thread_from_its_start_is_whole_from_its_first_sample() {
    // Programs that live 20 ms, 100 frames of about 224 bytes deep in their
    // main thread from the start: deeper than a 16 KiB copy, as Python is
    // while it imports. A main thread's frames end where the kernel put
    // its arguments, known to the sampler: a copy too short for them takes
    // a deep thread's size at once. Before, each program's first samples
    // ended `[unwind stopped: stack copy too short]` until a pass named
    // the thread deep (20% of a `python3 -c pass` loop's samples).
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let built = build_workload_with("deep_recursion", "deep-recursion", &["-O1", "-g"]);
    let program = private_copy(&built, "deepmain");
    let running = tokio::task::spawn_blocking(move || {
        // The profile below is under way by then.
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..60 {
            let status = Command::new(&program)
                .args(["main", "0.02"])
                .status()
                .expect("it runs");
            assert!(status.success());
        }
    });
    let stacks = folded_profile_of_comm(&mut client, "deepmain", 4_000).await;
    running.await.expect("the runs finish");
    let in_leaf = |frames: &[String]| frames.iter().any(|frame| frame == "recursion_leaf");
    let leaf = samples_where(&stacks, in_leaf);
    let whole = samples_where(&stacks, |frames| {
        in_leaf(frames)
            && frames.iter().any(|frame| frame == "main")
            && frames.iter().filter(|frame| *frame == "descend").count() == 101
    });
    assert!(leaf >= 200, "too few samples: {stacks:#?}");
    assert!(
        whole as f64 >= 0.99 * leaf as f64,
        "{whole} of {leaf} samples reach main through 101 descend frames: {stacks:#?}"
    );
}

/// The folded profile, over `window_ms`, of `runs` runs one after another
/// of the chain workload (as `comm`), each working `seconds`.
async fn chain_runs(
    client: &mut crate::support::Client,
    comm: &str,
    seconds: &'static str,
    runs: usize,
    window_ms: u64,
) -> Vec<(Vec<String>, u64)> {
    let binary = chain_binary("chain-o2", &["-O2", "-g", "-fomit-frame-pointer"]);
    let program = private_copy(&binary, comm);
    let running = tokio::task::spawn_blocking(move || {
        // The profile below is under way by then (nothing shows that it
        // is): the runs start after its window opens.
        std::thread::sleep(Duration::from_millis(300));
        for _ in 0..runs {
            let status = Command::new(&program)
                .arg(seconds)
                .status()
                .expect("it runs");
            assert!(status.success());
        }
    });
    let stacks = folded_profile_of_comm(client, comm, window_ms).await;
    running.await.expect("the runs finish");
    stacks
}

#[tokio::test(flavor = "multi_thread")]
async fn processes_that_live_200_ms_keep_whole_chains() {
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let stacks = chain_runs(&mut client, "shortchain", "0.2", 20, 5_000).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 95.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn programs_that_live_2_ms_keep_whole_chains() {
    // Gone long before any pass could read /proc/PID/maps (83% of their
    // samples were [unmapped] before the kernel's records of memory maps
    // were followed): known from those records.
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let stacks = chain_runs(&mut client, "blinkchain", "0.002", 400, 4_000).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 95.0);
    // Those in exec itself (the old program's stack) are the only ones
    // outside every mapping known.
    let unmapped = samples_where(&stacks, |frames| {
        frames.iter().any(|frame| frame.starts_with("[unmapped]"))
    });
    assert!(
        unmapped * 20 <= total(&stacks),
        "{unmapped} of {} samples unmapped: {stacks:#?}",
        total(&stacks)
    );
    let status = client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let records = status
        .symbolizer
        .and_then(|symbolizer| symbolizer.memory_map_records)
        .expect("the status says the memory-map records are followed");
    assert!(
        records.processes_recalled > 0 && records.mappings <= records.mapping_limit,
        "{records:?}"
    );
}

/// fork_storm built with -O2 and without frame pointers, copied as `name`
/// (the command its samples are found by).
fn fork_storm_named(name: &str) -> std::path::PathBuf {
    let built = build_workload_with(
        "fork_storm",
        "fork_storm-o2",
        &["-O2", "-g", "-fomit-frame-pointer"],
    );
    private_copy(&built, name)
}

/// Runs `command` 300 ms from now, off the async threads: a profile asked
/// for meanwhile is under way by then (nothing shows that it is).
fn run_once_the_window_opens(
    mut command: Command,
) -> tokio::task::JoinHandle<std::process::ExitStatus> {
    tokio::task::spawn_blocking(move || {
        std::thread::sleep(Duration::from_millis(300));
        command.status().expect("the workload runs")
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn children_of_a_process_sampled_before_its_exec_keep_whole_chains() {
    // The storm's parent runs exec_spin first (sampled, and recorded as
    // exec_spin), then execs the storm and sits in wait() while its
    // children, which live 15 ms, do the work: as under `perf record`,
    // whose child waits before it execs the workload. The children must
    // not take the parent's record of before its exec, nor go without.
    let storm = fork_storm_named("execstorm");
    let exec_spin = build_workload_with("exec_spin", "exec_spin", &["-O1", "-g"]);
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let mut command = Command::new(exec_spin);
    command.args(["0.3".as_ref(), storm.as_os_str()]);
    command.args(["300", "2", "15"]);
    let run = run_once_the_window_opens(command);
    let stacks = folded_profile_of_comm(&mut client, "execstorm", 5_000).await;
    let exit = run.await.expect("the storm finishes");
    assert!(exit.success(), "the storm and its children exited cleanly");
    let chain = [&C_ROOT[..], &["child_work"]].concat();
    assert_share(&stacks, "child_work", &chain, 95.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn children_that_work_before_their_exec_keep_whole_chains() {
    // Each child works 4 ms, then execs /bin/true (a shell's child between
    // its fork and its command): most of its samples are unwound after the
    // exec, when its own memory map is another program's, or gone with it.
    // They ran their parent's program, which the kernel's fork records say
    // (before, 85% of the storm's samples were `[unmapped]`, child_work
    // nowhere in them).
    let status =
        storm_children_are_whole("prexecstorm", &["400", "2", "4", "/bin/true"], &[]).await;
    // The status says what the book of fork lineages holds, and the
    // `processes` part of the memory budget counts it.
    let book = status
        .symbolizer
        .and_then(|symbolizer| symbolizer.fork_lineages)
        .expect("the status says what the fork lineages hold");
    assert!(
        book.exec_left >= 100
            && book.exec_left <= book.exec_left_limit
            && book.forked <= book.forked_limit
            && book.forked_limit >= 1024
            && book.bytes > 0,
        "{book:?}"
    );
    let processes = status
        .memory
        .expect("the status has the memory budget")
        .parts
        .into_iter()
        .find(|part| part.name == "processes")
        .expect("a processes part");
    assert!(
        processes.held_bytes >= book.bytes && book.bytes <= processes.share_bytes / 8 + 4096,
        "{processes:?} {book:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn grandchildren_whose_parent_is_gone_keep_whole_chains() {
    // Each child forks a grandchild and exits at once: the grandchild runs
    // the program its grandparent mapped, its own parent gone before any
    // of its samples is unwound (a subshell's child). The fork records
    // lead back to the grandparent (16% whole without).
    storm_children_are_whole("orphanstorm", &["orphans", "300", "4"], &["orphans"]).await;
}

/// Runs fork_storm, named `name`, with `args` while a profile of it is
/// under way: ≥ 95% of its children's samples carry their whole chain
/// (`main`, `callers`, `child_work`), and at most 5% of all its samples
/// stop short. The daemon's status after it.
async fn storm_children_are_whole(name: &str, args: &[&str], callers: &[&str]) -> v1::StatusReply {
    let storm = fork_storm_named(name);
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    let mut command = Command::new(storm);
    command.args(args);
    let run = run_once_the_window_opens(command);
    let stacks = folded_profile_of_comm(&mut client, name, 5_000).await;
    let exit = run.await.expect("the storm finishes");
    assert!(exit.success(), "the storm and its children exited cleanly");
    let chain = [&C_ROOT[..], callers, &["child_work"]].concat();
    assert_share(&stacks, "child_work", &chain, 95.0);
    let stopped = samples_where(&stacks, |frames| frames[0].starts_with("[unwind stopped: "));
    assert!(
        stopped * 20 <= total(&stacks),
        "{stopped} of {} samples stopped short: {stacks:#?}",
        total(&stacks)
    );
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("Status")
        .into_inner()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_process_that_execs_itself_100_times_keeps_its_programs_apart() {
    // Each program runs 50 ms, then execs itself (same process, a new
    // memory map each time): samples of a program are unwound after
    // several more execs, with the memory map they were taken in.
    let binary = build_workload_with("reexec", "reexec", &["-O1", "-g"]);
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["100", "50"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let chain = [&C_ROOT[..], &["exec_busy"]].concat();
    assert_share(&stacks, "exec_busy", &chain, 99.0);
    let unmapped: u64 = samples_where(&stacks, |frames| {
        frames.iter().any(|f| f.contains("unmapped"))
    });
    // A program the daemon could not read from procfs before it exec'd
    // again is known from the kernel's records of its memory maps (without
    // them: none unmapped on a quiet machine, up to a fifth with the other
    // tests running beside it, the drain thread getting less of the CPU;
    // 78-92% without earlier maps kept): only samples inside execve itself,
    // whose user stack is the old program's, may be unmapped.
    assert!(
        unmapped * 20 <= total(&stacks),
        "{unmapped} of {} samples unmapped: {stacks:#?}",
        total(&stacks)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binary_only_inside_another_mount_namespace_is_named() {
    let binary = chain_binary("chain-o1", &["-O1", "-g", "-fno-omit-frame-pointer"]);
    let dir = tempfile::tempdir().expect("a temporary directory");
    let mount = dir.path().display().to_string();
    let daemon = Daemon::start().await;
    // The copy lives on a tmpfs mounted in a new mount namespace only: the
    // host sees an empty directory at that path.
    let script = format!(
        "mount -t tmpfs tmpfs {mount} && cp {binary} {mount}/nschain && exec {mount}/nschain 20",
        binary = binary.display()
    );
    let workload: Workload = Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .spawn()
        .expect("unshare (util-linux) runs")
        .into();
    crate::support::wait_for_exec(workload.pid(), &dir.path().join("nschain")).await;
    assert!(
        !dir.path().join("nschain").exists(),
        "the binary must not be visible on the host"
    );
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 95.0);
}
