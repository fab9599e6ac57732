//! Design 2 of user-stack unwinding, the prototype the benchmark measures:
//! the kernel's verifier accepts `sample_unwind_tables`, and its in-kernel
//! walk over rows compiled from `.eh_frame` gives whole stacks, every frame
//! of a known chain named, for code without frame pointers and through
//! libc's qsort.

use std::{collections::HashMap, time::Duration};

use blazesym::{
    Pid,
    symbolize::{Input, Symbolized, Symbolizer, source::Process, source::Source},
};
use profiler_common::unwind_table::cfa;
use profilerd::kernel::unwind_tables::{PrototypeSample, UnwindTablePrototype};

use crate::support::{Workload, build_workload_with, require_root};

/// Samples of `pid` walked by the prototype for `seconds`, symbolized:
/// (frames root first, how the walk ended, count).
fn prototype_stacks(pid: u32, seconds: u64) -> Vec<(Vec<String>, u8, u64)> {
    let mut prototype = UnwindTablePrototype::start(499, 1 << 20).expect("the prototype loads");
    prototype.add_process(pid).expect("the workload's tables");
    std::thread::sleep(Duration::from_secs(seconds));
    let samples: Vec<PrototypeSample> = prototype.samples().expect("the prototype's samples");
    let symbolizer = Symbolizer::new();
    let source = Source::Process(Process::new(Pid::from(pid)));
    let mut names = HashMap::new();
    samples
        .into_iter()
        .filter(|sample| sample.pid == pid)
        .map(|sample| {
            let frames = sample
                .user
                .iter()
                .rev()
                .map(|&address| {
                    names
                        .entry(address)
                        .or_insert_with(|| {
                            match symbolizer.symbolize_single(&source, Input::AbsAddr(address)) {
                                Ok(Symbolized::Sym(sym)) => sym.name.to_string(),
                                _ => format!("{address:#x}"),
                            }
                        })
                        .clone()
                })
                .collect();
            (frames, sample.ended, sample.count)
        })
        .collect()
}

fn assert_whole(stacks: &[(Vec<String>, u8, u64)], leaf: &str, chain: &[&str]) {
    let with_leaf: Vec<_> = stacks
        .iter()
        .filter(|(frames, _, _)| frames.last().is_some_and(|f| f == leaf))
        .collect();
    let total: u64 = with_leaf.iter().map(|(_, _, count)| count).sum();
    assert!(
        total >= 50,
        "too few samples of {leaf} ({total}): {stacks:#?}"
    );
    let whole: u64 = with_leaf
        .iter()
        .filter(|(frames, ended, _)| {
            *ended == cfa::END
                && chain
                    .iter()
                    .all(|want| frames.iter().any(|frame| frame == want))
        })
        .map(|(_, _, count)| count)
        .sum();
    assert!(
        whole as f64 >= 0.95 * total as f64,
        "{whole} of {total} samples of {leaf} walked whole through {chain:?}: {with_leaf:#?}"
    );
}

#[test]
fn the_in_kernel_walk_over_compiled_tables_gives_whole_chains() {
    require_root();
    let binary = build_workload_with("chain", "chain-o2", &["-O2", "-g", "-fomit-frame-pointer"]);
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = prototype_stacks(workload.pid(), 2);
    let chain = [
        "_start",
        "__libc_start_call_main",
        "main",
        "drive",
        "hot_leaf",
    ];
    assert_whole(&stacks, "hot_leaf", &chain);
    let sorting = Workload::spawn(&binary, &["20", "qsort"]);
    let stacks = prototype_stacks(sorting.pid(), 2);
    let chain = ["_start", "main", "sort_drive", "compare_slowly"];
    assert_whole(&stacks, "compare_slowly", &chain);
    assert!(
        stacks
            .iter()
            .any(|(frames, _, _)| frames.iter().any(|f| f.contains("qsort"))),
        "no stack passes through qsort: {stacks:#?}"
    );
}
