//! Timelines in the Firefox Profiler's format (`--format gecko`): a profile
//! of chosen processes places each sample at its own time, each thread a
//! track, so that a spinning thread shows as running all through the
//! window and a sleeping one as idle.
//!
//! The Firefox Profiler cannot be loaded here (no network), so its loader's
//! assumptions of a processed profile are checked instead: every table's
//! columns as long as its `length`, every index within the table it points
//! into, a stack's prefix before it, times that do not go back.

use serde_json::Value;

use crate::support::{self, Daemon, PEEK_THREADS, Workload};

/// Runs `profilerctl profile ARGS --format gecko -o FILE` and reads the file.
async fn gecko_profile(daemon: &Daemon, args: &[&str]) -> (Value, String) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let file = dir.path().join("profile.json");
    let file_arg = file.to_str().expect("a UTF-8 path");
    let args = [
        &["profile"][..],
        args,
        &["--format", "gecko", "-o", file_arg],
    ]
    .concat();
    let output = support::profilerctl(&daemon.socket, &args).await;
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(output.status.success(), "{args:?}: {stderr}");
    let json = std::fs::read(&file).expect("the profile was written");
    (
        serde_json::from_slice(&json).expect("the profile is JSON"),
        stderr,
    )
}

/// The length a column of `table` must have, checking it has it.
fn column<'a>(table: &'a Value, name: &str, length: usize) -> &'a [Value] {
    let column = table[name]
        .as_array()
        .unwrap_or_else(|| panic!("column {name} missing in {table}"));
    assert_eq!(column.len(), length, "column {name}'s length");
    column
}

fn index(value: &Value) -> Option<usize> {
    value.as_u64().map(|index| index as usize)
}

/// Checks what the Firefox Profiler's loader assumes of a processed
/// profile's tables; returns each thread's name, tid, sample times (ms
/// from the profile's start) and leaf function names.
fn check_processed_profile(profile: &Value) -> Vec<(String, String, Vec<f64>, Vec<String>)> {
    let meta = &profile["meta"];
    assert!(
        meta["preprocessedProfileVersion"]
            .as_u64()
            .is_some_and(|v| v >= 50),
        "{meta}"
    );
    assert!(
        meta["startTime"].as_f64().is_some_and(|t| t > 1.6e12),
        "{meta}"
    );
    assert!(meta["interval"].as_f64().is_some_and(|i| i > 0.0), "{meta}");
    let categories = meta["categories"].as_array().expect("categories").len();
    let mut threads = Vec::new();
    for thread in profile["threads"].as_array().expect("threads") {
        let strings = thread["stringArray"].as_array().expect("stringArray");
        let funcs = &thread["funcTable"];
        let func_count = index(&funcs["length"]).expect("funcTable length");
        for name in column(funcs, "name", func_count) {
            assert!(index(name).is_some_and(|name| name < strings.len()));
        }
        let frames = &thread["frameTable"];
        let frame_count = index(&frames["length"]).expect("frameTable length");
        let frame_funcs = column(frames, "func", frame_count);
        for (func, category) in frame_funcs
            .iter()
            .zip(column(frames, "category", frame_count))
        {
            assert!(index(func).is_some_and(|func| func < func_count));
            assert!(index(category).is_some_and(|category| category < categories));
        }
        let stacks = &thread["stackTable"];
        let stack_count = index(&stacks["length"]).expect("stackTable length");
        let stack_frames = column(stacks, "frame", stack_count);
        for (at, prefix) in column(stacks, "prefix", stack_count).iter().enumerate() {
            assert!(prefix.is_null() || index(prefix).is_some_and(|prefix| prefix < at));
            assert!(index(&stack_frames[at]).is_some_and(|frame| frame < frame_count));
        }
        let samples = &thread["samples"];
        let sample_count = index(&samples["length"]).expect("samples length");
        let mut time = 0.0;
        let mut times = Vec::new();
        for delta in column(samples, "timeDeltas", sample_count) {
            let delta = delta.as_f64().expect("a time delta");
            assert!(delta >= 0.0, "times go back");
            time += delta;
            times.push(time);
        }
        column(samples, "threadCPUDelta", sample_count);
        let leaves = column(samples, "stack", sample_count)
            .iter()
            .map(|stack| {
                let stack = index(stack).expect("a sample's stack");
                let frame = index(&stack_frames[stack]).expect("a frame");
                let func = index(&frame_funcs[frame]).expect("a func");
                let name = index(&funcs["name"][func]).expect("a name");
                strings[name].as_str().expect("a string").to_owned()
            })
            .collect();
        let name = thread["name"].as_str().expect("a thread name").to_owned();
        let tid = thread["tid"].to_string().trim_matches('"').to_owned();
        threads.push((name, tid, times, leaves));
    }
    threads
}

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_of_a_process_is_a_timeline_of_its_threads() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("peek_threads", &[]);
    let pid = workload.pid().to_string();
    support::wait_for_threads(workload.pid(), &PEEK_THREADS).await;
    let (profile, stderr) = gecko_profile(&daemon, &["-p", &pid, "-F", "499", "-d", "2"]).await;
    assert!(stderr.contains("profiler.firefox.com"), "{stderr}");
    let threads = check_processed_profile(&profile);
    // Every thread of the process, the sleeping one too.
    assert_eq!(threads.len(), 4, "{threads:?}\n{stderr}");
    let thread = |name: &str| {
        threads
            .iter()
            .find(|thread| thread.0.starts_with(name))
            .unwrap_or_else(|| panic!("no thread {name} in {threads:?}"))
    };
    for (name, leaf) in [("spin-alpha", "spin_alpha"), ("spin-beta", "spin_beta")] {
        let (_, _, times, leaves) = thread(name);
        // Running all through the window: samples in each of its quarters.
        assert!(
            times.len() > 50,
            "{name}: {} samples\n{stderr}",
            times.len()
        );
        for quarter in 0..4 {
            let (from, to) = (quarter as f64 * 500.0, (quarter + 1) as f64 * 500.0);
            assert!(
                times.iter().any(|&time| (from..to).contains(&time)),
                "{name}: no sample in {from}..{to} ms: {times:?}"
            );
        }
        assert!(
            times.last().is_some_and(|&last| last <= 2_500.0),
            "{times:?}"
        );
        let in_leaf = leaves.iter().filter(|function| *function == leaf).count();
        assert!(in_leaf * 10 >= leaves.len() * 9, "{name}: {leaves:?}");
    }
    // Asleep all through: a track without samples.
    let (_, _, times, _) = thread("sleeper");
    assert!(times.len() <= 1, "the sleeper ran: {times:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeline_is_at_the_daemon_s_rate_unless_asked_and_of_chosen_processes_only() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("peek_threads", &[]);
    let pid = workload.pid().to_string();
    support::wait_for_threads(workload.pid(), &PEEK_THREADS).await;
    let (profile, stderr) = gecko_profile(&daemon, &["-p", &pid, "-d", "1"]).await;
    let interval = profile["meta"]["interval"].as_f64().expect("an interval");
    let asked = 1_000.0 / f64::from(support::TEST_FREQUENCY_HZ);
    assert!((interval - asked).abs() < 0.01, "{interval} ms\n{stderr}");
    let threads = check_processed_profile(&profile);
    let samples: usize = threads.iter().map(|thread| thread.2.len()).sum();
    assert!(samples > 20, "{threads:?}");
    // The whole machine, or off-CPU time: refused with what to ask.
    for (refused, reason) in [
        (&["-d", "1"][..], "-p PID"),
        (&["-p", &pid, "--mode", "wall", "-d", "1"][..], "--mode cpu"),
    ] {
        let args = [&["profile"][..], refused, &["--format", "gecko"]].concat();
        let output = support::profilerctl(&daemon.socket, &args).await;
        let error = support::error_of(&output);
        assert!(
            !output.status.success() && error.contains(reason),
            "{refused:?}: {error}"
        );
    }
}
