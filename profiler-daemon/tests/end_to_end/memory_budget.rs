//! The memory budget on a real daemon: status says what each part holds
//! against its share, and a churn of binaries with debug information (each
//! a file the symbolizer has not parsed) keeps the symbolizer within its
//! share while their functions are still named.

use std::path::PathBuf;

use profilerd_client::v1;

use crate::support::{
    BUDGETED, Daemon, Workload, assert_within_budget, build_workload, folded, memory_part, options,
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
            std::fs::copy(&binary, &path).expect("copied");
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
