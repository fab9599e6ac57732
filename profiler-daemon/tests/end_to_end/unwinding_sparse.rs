//! Binaries with little or no unwind information: one stripped of its
//! unwind sections (walked by frame pointers where it keeps them, else
//! saying so), and a static musl binary whose libc was built without unwind
//! tables (whole down to the first function without an entry, which says
//! so).

use std::{
    path::{Path, PathBuf},
    process::Command,
};

use profilerd_client::v1;

use crate::{
    support::{Daemon, Workload, build_workload_by, samples_where, total},
    unwinding::{C_ROOT, assert_share, chain_binary, folded_profile_of, whole_chains},
};

/// `built` without its unwind sections, as `name`.
fn without_unwind_sections(built: &Path, name: &str) -> PathBuf {
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let output = Command::new("objcopy")
        .args([
            "--remove-section",
            ".eh_frame",
            "--remove-section",
            ".eh_frame_hdr",
        ])
        .arg(built)
        .arg(&binary)
        .output()
        .expect("objcopy runs");
    assert!(output.status.success(), "{output:?}");
    binary
}

#[tokio::test(flavor = "multi_thread")]
async fn a_binary_without_unwind_sections_is_walked_by_frame_pointers_or_says_so() {
    // Built without frame pointers: nothing to walk it with, said at the
    // end of its stacks.
    let built = chain_binary("chain-o2", &["-O2", "-g", "-fomit-frame-pointer"]);
    let binary = without_unwind_sections(&built, "workload-chain-nounwind");
    // Built with them (a leaf's too): walked by them, and counted so.
    let built = chain_binary(
        "chain-o0-fp",
        // (At -O1, gcc gives hot_leaf no frame of its own whatever the flags.)
        &["-O0", "-g", "-fno-omit-frame-pointer"],
    );
    let with_frame_pointers = without_unwind_sections(&built, "workload-chain-nounwind-fp");
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    drop(workload);
    let samples = total(&stacks);
    let reason = "[unwind stopped: no unwind info in ";
    let with_reason: u64 = samples_where(&stacks, |frames| {
        frames.first().is_some_and(|f| f.starts_with(reason))
    });
    assert!(samples >= 50, "{stacks:#?}");
    assert!(
        with_reason as f64 >= 0.95 * samples as f64,
        "{with_reason} of {samples} stacks end with the reason: {stacks:#?}"
    );
    let mut client = daemon.client().await;
    let unwinding =
        |status: v1::StatusReply| status.unwinding.expect("the status says how stacks unwind");
    let before = unwinding(
        client
            .get_status(v1::GetStatusRequest::default())
            .await
            .expect("Status")
            .into_inner(),
    );
    let counted = before
        .stopped
        .iter()
        .find(|stop| stop.reason == "no_unwind_info")
        .map_or(0, |stop| stop.count);
    assert!(counted > 0, "{before:?}");
    assert_eq!(before.stack_copy_bytes, 16 * 1024);
    assert!(before.binaries > 0 && before.bytes > 0, "{before:?}");

    let workload = Workload::spawn(&with_frame_pointers, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 99.0);
    let after = unwinding(
        client
            .get_status(v1::GetStatusRequest::default())
            .await
            .expect("Status")
            .into_inner(),
    );
    assert!(
        after.without_unwind_info >= before.without_unwind_info + 50,
        "the stacks walked by frame pointers are counted: {before:?} then {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_static_musl_binary_is_whole_to_its_libc_which_says_it_has_no_unwind_info() {
    // Debian's musl is built without unwind tables: its start-up functions
    // (`_start_c`, `__libc_start_main`, `libc_start_main_stage2`) have no
    // FDE and no frame pointer. perf --call-graph dwarf gives the leaf
    // alone; every frame that has an entry is walked here, and the walk
    // says why it stops (not "bad frame").
    let binary = build_workload_by(
        Some("musl-gcc"),
        "chain",
        "chain-musl-static",
        &["-static", "-O2", "-g", "-fomit-frame-pointer"],
    );
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let chain = ["libc_start_main_stage2", "main", "drive", "hot_leaf"];
    let name = binary.display().to_string();
    let said = format!("[unwind stopped: no unwind info in {name}]");
    let through: Vec<(Vec<String>, u64)> = stacks
        .iter()
        .map(|(frames, count)| (frames.iter().skip(1).cloned().collect(), *count))
        .collect();
    let (with_leaf, whole) = whole_chains(&through, "hot_leaf", &chain);
    let saying_why = samples_where(&stacks, |frames| {
        frames.first().is_some_and(|first| *first == said)
            && frames.get(1).is_some_and(|second| second == chain[0])
    });
    assert!(with_leaf >= 50, "{stacks:#?}");
    assert!(
        whole as f64 >= 0.99 * with_leaf as f64 && saying_why >= whole,
        "{whole} of {with_leaf} samples of hot_leaf reach {chain:?}, {saying_why} saying \
         `{said}`: {stacks:#?}"
    );
}
