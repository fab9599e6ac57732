//! The memory budget on a real daemon: status says what each part holds
//! against its share, and a churn of binaries with debug information (each
//! a file the symbolizer has not parsed) keeps the symbolizer within its
//! share while their functions are still named.

use std::path::PathBuf;

use profilerd_client::v1;

use crate::support::{
    BUDGETED, Daemon, PATIENCE, Workload, assert_within_budget, build_workload, eventually, folded,
    memory_part, options,
};

#[tokio::test(flavor = "multi_thread")]
async fn a_churn_of_binaries_with_debug_information_keeps_the_symbolizer_within_its_share() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    // A few MiB of DWARF, spinning in churned_hot_leaf.
    let binary = build_workload("debug_churn");
    let daemon = Daemon::start_with(BUDGETED).await;
    let status_before = daemon.status().await;
    let share = memory_part(&status_before, "symbolizer").share_bytes;
    // Every part has a share; together they and what comes off first fit
    // the budget.
    let memory = status_before.memory.clone().expect("memory");
    assert_eq!(memory.budget_bytes, 320 << 20);
    assert_eq!(memory.parts.len(), 9, "{memory:?}");
    let shares: u64 = memory.parts.iter().map(|part| part.share_bytes).sum();
    assert!(
        shares + memory.program_bytes + memory.kernel_buffer_bytes <= memory.budget_bytes,
        "{memory:?}"
    );

    // Distinct files (each parsed anew), three running at a time.
    let copies: Vec<PathBuf> = (0..24)
        .map(|copy| {
            let path = dir.path().join(format!("churn{copy:02}"));
            crate::support::copy_program(&binary, &path);
            path
        })
        .collect();
    let mut most_held = 0;
    for round in copies.chunks(3) {
        let mut running: Vec<Workload> = round
            .iter()
            .map(|copy| Workload::spawn(copy, &["0.5"]))
            .collect();
        for workload in &mut running {
            workload.wait();
        }
        let symbolizer = memory_part(&daemon.status().await, "symbolizer");
        most_held = most_held.max(symbolizer.held_bytes);
        assert!(
            symbolizer.held_bytes <= symbolizer.share_bytes,
            "the symbolizer holds more than its share: {symbolizer:?}"
        );
    }
    let last = daemon.status().await;
    let symbolizer = memory_part(&last, "symbolizer");
    assert!(
        symbolizer.evicted > 0,
        "24 binaries of a few MiB of debug information each do not fit {} MiB together: \
         {symbolizer:?} (held at most {most_held} bytes)",
        share >> 20
    );
    // Still named, with file and line.
    let mut client = daemon.client().await;
    let end = crate::support::unix_nanos();
    let reply = client
        .query(v1::QueryRequest {
            start_unix_nanos: end - 60_000_000_000,
            end_unix_nanos: end,
            selector: Some(v1::Selector {
                comms: vec!["churn23".to_owned()],
                ..Default::default()
            }),
            options: Some(options(v1::Format::Folded)),
            ..Default::default()
        })
        .await
        .expect("the query answers")
        .into_inner();
    let stacks = folded(&reply.report);
    assert!(
        stacks
            .iter()
            .any(|(frames, _)| frames.iter().any(|frame| frame == "churned_hot_leaf")),
        "the last copy's functions are named: {stacks:?}"
    );
    assert_within_budget(&last, &daemon);
}

/// The store at a small ceiling on a real daemon: the oldest samples go
/// (counted in status, and said by a report of their window), the store
/// stays about its ceiling while it drops them (the tables of the buckets
/// dropped are freed by the compaction that follows the insert, off the
/// write lock), and under it once that is done.
#[tokio::test(flavor = "multi_thread")]
async fn a_store_at_its_ceiling_drops_the_oldest_samples_says_so_and_stays_under_it() {
    let started = crate::support::unix_nanos();
    let daemon = Daemon::start_with(&["--frequency-hz", "999", "--memory-limit", "4MiB"]).await;
    let limit = daemon
        .status()
        .await
        .store
        .expect("store status")
        .memory_limit_bytes;
    assert_eq!(limit, 4 << 20);
    // Nearly every sample a stack of its own, on both CPUs, until the
    // store has dropped buckets for memory and gone on a few seconds more.
    let load = [
        Workload::start_as("many_stacks", "ceiling_a", &[]),
        Workload::start_as("many_stacks", "ceiling_b", &[]),
    ];
    let mut most_held = 0;
    let mut at_the_ceiling: Option<std::time::Instant> = None;
    let deadline = std::time::Instant::now() + PATIENCE;
    while at_the_ceiling.is_none_or(|since| since.elapsed() < std::time::Duration::from_secs(3)) {
        let store = daemon.status().await.store.expect("store status");
        most_held = most_held.max(store.memory_bytes);
        if store.buckets_evicted_for_memory > 0 {
            at_the_ceiling.get_or_insert_with(std::time::Instant::now);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no bucket dropped for memory at a 4 MiB ceiling: {store:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    drop(load);
    // While a compaction is still to free the dropped buckets' stacks, the
    // store may hold a drain's worth over its ceiling: never much more.
    assert!(
        most_held <= limit + limit / 4,
        "the store held {most_held} bytes at its {limit}-byte ceiling"
    );
    let store = eventually(
        "the store under its ceiling, having dropped buckets for memory",
        PATIENCE,
        async || {
            let store = daemon.status().await.store.expect("store status");
            match store.buckets_evicted_for_memory > 0 && store.memory_bytes <= limit {
                true => Ok(store),
                false => Err(format!("{store:?}")),
            }
        },
    )
    .await;
    // A report of the whole run says what the ceiling dropped.
    let mut client = daemon.client().await;
    let reply = client
        .query(v1::QueryRequest {
            start_unix_nanos: started,
            end_unix_nanos: crate::support::unix_nanos(),
            selector: Some(v1::Selector {
                comms: vec!["ceiling_a".to_owned(), "ceiling_b".to_owned()],
                ..Default::default()
            }),
            options: Some(options(v1::Format::Folded)),
            ..Default::default()
        })
        .await
        .expect("the query answers")
        .into_inner();
    let summary = reply.summary.clone().expect("a summary");
    let lost = summary.lost.clone();
    let dropped: u64 = (lost.iter())
        .filter(|loss| loss.cause == "memory_ceiling")
        .map(|loss| loss.count)
        .sum();
    assert!(
        dropped > 0,
        "{} buckets dropped for memory, but the report says no samples lost to the ceiling: {:?}",
        store.buckets_evicted_for_memory,
        lost
    );
    assert!(
        !folded(&reply.report).is_empty(),
        "the newest samples are still held: {summary:?}\n{store:?}\n{}",
        daemon.log()
    );
}
