//! The memory budget on a real daemon: status says what each part holds
//! against its share, and a churn of freshly built binaries with debug
//! information (each parsed by the symbolizer) keeps the symbolizer within
//! its share while their functions are still named.

use std::{
    fmt::Write as _,
    path::{Path, PathBuf},
    process::Command,
};

use profilerd_client::v1;

use crate::support::{Daemon, Workload, folded, options};

/// A daemon of this budget (room for the debug build's larger program, and
/// a stack-copy ring of a release daemon's size).
const BUDGETED: &[&str] = &["--memory-budget", "320MiB", "--stack-copy-buffer", "16MiB"];

/// A program with a few MiB of DWARF: thousands of functions, each with
/// locals of its own type, one of which (`churned_hot_leaf`) it spins in
/// for the seconds its argument says.
fn program_with_debug_information(dir: &Path) -> PathBuf {
    let mut source = String::from("#include <stdlib.h>\n#include <time.h>\n");
    for function in 0..3000 {
        let _ = writeln!(
            source,
            "struct record_{function} {{ long first_{function}; double second_{function}; \
             char name_{function}[16]; }};\n\
             __attribute__((noinline)) long function_{function}(long n) {{ \
             struct record_{function} r = {{ n, n * 0.5, \"r\" }}; \
             return r.first_{function} + (long)r.second_{function} + r.name_{function}[0]; }}"
        );
    }
    source.push_str(
        "__attribute__((noinline)) long churned_hot_leaf(long n) { long s = 0; \
         for (long i = 0; i < n; i++) s += function_7(i) ^ i; return s; }\n\
         int main(int argc, char **argv) { double seconds = argc > 1 ? atof(argv[1]) : 1; \
         struct timespec start, now; clock_gettime(CLOCK_MONOTONIC, &start); long s = 0; \
         do { s += churned_hot_leaf(100000); clock_gettime(CLOCK_MONOTONIC, &now); } \
         while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds); \
         return (int)(s & 1); }\n",
    );
    let source_path = dir.join("churn.c");
    std::fs::write(&source_path, source).expect("the source is written");
    let binary = dir.join("churn");
    let output = Command::new("gcc")
        .args(["-O0", "-g"])
        .arg(&source_path)
        .arg("-o")
        .arg(&binary)
        .output()
        .expect("gcc runs");
    assert!(
        output.status.success(),
        "gcc: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    binary
}

async fn status(daemon: &Daemon) -> v1::StatusReply {
    daemon
        .client()
        .await
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner()
}

fn part(status: &v1::StatusReply, name: &str) -> v1::MemoryPart {
    let memory = status.memory.as_ref().expect("status says its memory");
    memory
        .parts
        .iter()
        .find(|part| part.name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no part {name} in {memory:?}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_churn_of_binaries_with_debug_information_keeps_the_symbolizer_within_its_share() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = program_with_debug_information(dir.path());
    let daemon = Daemon::start_with(BUDGETED).await;
    let status_before = status(&daemon).await;
    let share = part(&status_before, "symbolizer").share_bytes;
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
        let symbolizer = part(&status(&daemon).await, "symbolizer");
        most_held = most_held.max(symbolizer.held_bytes);
        assert!(
            symbolizer.held_bytes <= symbolizer.share_bytes,
            "the symbolizer holds more than its share: {symbolizer:?}"
        );
    }
    let last = status(&daemon).await;
    let symbolizer = part(&last, "symbolizer");
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
    let memory = last.memory.expect("memory");
    assert!(
        memory.resident_bytes <= memory.budget_bytes,
        "resident {} MiB over the budget {} MiB: {memory:#?}",
        memory.resident_bytes >> 20,
        memory.budget_bytes >> 20
    );
}
