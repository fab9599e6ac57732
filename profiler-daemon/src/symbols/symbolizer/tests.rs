use std::time::UNIX_EPOCH;

use profiler_common::COUNTER_COUNT;

use super::*;
use crate::symbols::processes::{NormalizedSample, ProcessTable};

fn batch(user: Vec<UserAddress>, kernel: &[u64], flags: u32) -> NormalizedBatch {
    let pid = std::process::id();
    NormalizedBatch {
        start: UNIX_EPOCH,
        end: UNIX_EPOCH,
        samples: vec![NormalizedSample {
            thread: ThreadInfo {
                pid,
                tid: pid,
                thread_name: Arc::from("test"),
                process_name: Arc::from("test"),
                uid: 0,
                gid: 0,
                protected: false,
                cgroup: Arc::from(""),
            },
            kind: SampleKind::CpuClock,
            flags,
            user,
            user_stop: None,
            kernel: Arc::from(kernel),
            count: 1,
            weight: 1,
            allocation_id: 0,
            times_ns: Vec::new(),
        }],
        counters: [0; COUNTER_COUNT as usize],
    }
}

/// The function names of a symbolized sample's stack, root first.
fn names(batch: &SymbolizedBatch) -> Vec<String> {
    batch.samples[0]
        .stack
        .iter()
        .flat_map(|location| location.location.frames.iter())
        .map(|frame| frame.function.to_string())
        .collect()
}

/// A drained batch of one sample of this process at `address`.
fn raw_here(address: u64) -> crate::kernel::drain::RawBatch {
    let pid = std::process::id();
    crate::kernel::drain::RawBatch {
        start: UNIX_EPOCH,
        end: UNIX_EPOCH,
        samples: vec![crate::kernel::drain::RawSample {
            pid,
            tid: pid,
            uid: 0,
            gid: 0,
            cgroup: 0,
            thread_name: Arc::from("test"),
            kind: SampleKind::CpuClock,
            flags: 0,
            user: Arc::from([address]),
            user_stop: None,
            kernel: Arc::from([]),
            count: 1,
            weight: 1,
            allocation_id: 0,
            times_ns: Vec::new(),
        }],
        counters: [0; COUNTER_COUNT as usize],
    }
}

#[test]
fn code_of_this_process_is_named_with_its_file_and_line() {
    let mut table = ProcessTable::new();
    table.record(std::process::id()).unwrap();
    let here = code_of_this_process_is_named_with_its_file_and_line as *const () as u64;
    let mut symbolizer = Symbolizer::new();
    let symbolized = symbolizer.symbolize(table.normalize_batch(raw_here(here)));
    let location = &symbolized.samples[0].stack[0].location;
    assert_eq!(location.kind, LocationKind::User);
    let frame = &location.frames[0];
    assert!(
        frame
            .function
            .contains("code_of_this_process_is_named_with_its_file_and_line"),
        "{frame:?}"
    );
    assert!(
        frame
            .file
            .as_deref()
            .is_some_and(|file| file.ends_with("symbolizer/tests.rs")),
        "{frame:?}"
    );
    assert!(frame.line > 0);
    // The same address again comes from the cache.
    let misses = symbolizer.stats().cache_misses;
    symbolizer.symbolize(table.normalize_batch(raw_here(here)));
    assert_eq!(symbolizer.stats().cache_misses, misses);
    assert!(symbolizer.stats().cache_hits >= 1);
}

#[test]
fn an_idle_binary_is_let_go_of_and_parsed_again_when_needed() {
    let mut table = ProcessTable::new();
    table.record(std::process::id()).unwrap();
    let here = an_idle_binary_is_let_go_of_and_parsed_again_when_needed as *const () as u64;
    let elsewhere = names as *const () as u64;
    let mut symbolizer = Symbolizer::new();
    symbolizer.symbolize(table.normalize_batch(raw_here(here)));
    assert_eq!(symbolizer.stats().binaries, 1);
    // Not yet idle: kept.
    symbolizer
        .parsed
        .release_idle(&mut symbolizer.blazesym, Instant::now());
    assert_eq!(symbolizer.stats().binaries, 1);
    symbolizer
        .parsed
        .release_idle(&mut symbolizer.blazesym, Instant::now() + BINARY_IDLE_LIMIT);
    assert_eq!(
        (
            symbolizer.stats().binaries,
            symbolizer.stats().binaries_released
        ),
        (0, 1)
    );
    // Its cached locations stay; a new address parses it again.
    let symbolized = symbolizer.symbolize(table.normalize_batch(raw_here(here)));
    assert!(names(&symbolized)[0].contains("an_idle_binary_is_let_go_of"));
    assert_eq!(symbolizer.stats().binaries, 0);
    let symbolized = symbolizer.symbolize(table.normalize_batch(raw_here(elsewhere)));
    assert!(
        names(&symbolized)[0].contains("names"),
        "{:?}",
        names(&symbolized)
    );
    assert_eq!(symbolizer.stats().binaries, 1);
}

#[test]
fn what_is_held_parsed_stays_within_the_limit() {
    let mut table = ProcessTable::new();
    table.record(std::process::id()).unwrap();
    let here = what_is_held_parsed_stays_within_the_limit as *const () as u64;
    let mut unbounded = Symbolizer::new();
    unbounded.symbolize(table.normalize_batch(raw_here(here)));
    let held = unbounded.stats();
    // The test binary's debug information is mapped: it counts.
    assert!(held.parsed_bytes > 1 << 20, "{held:?}");
    assert!(held.cache_bytes > 0, "{held:?}");

    let mut bounded = Symbolizer::with_limit(held.cache_bytes + 1);
    let symbolized = bounded.symbolize(table.normalize_batch(raw_here(here)));
    assert!(names(&symbolized)[0].contains("what_is_held_parsed_stays_within_the_limit"));
    // Its debug information is far more than the limit allows: it is
    // named from its symbol table, without file and line.
    let location = &symbolized.samples[0].stack[0].location;
    assert_eq!(location.frames[0].file, None, "{location:?}");
    let stats = bounded.stats();
    assert_eq!(
        (
            stats.binaries,
            stats.binaries_evicted,
            stats.parsed_bytes,
            stats.binaries_symbols_only
        ),
        (0, 1, 0, 1),
        "{stats:?}"
    );
    assert!(stats.parsed_bytes + stats.cache_bytes <= stats.limit);
}

#[test]
fn what_cannot_be_named_says_where_it_was() {
    let mut symbolizer = Symbolizer::new();
    // A user address no mapping holds, under a stack the kernel lost.
    let symbolized = symbolizer.symbolize(batch(
        vec![UserAddress::Unmapped { address: 0x10 }],
        &[],
        sample_flags::USER_STACK_LOST,
    ));
    assert_eq!(names(&symbolized), ["[lost]", "[unmapped] 0x10"]);
    // Both stacks lost as the stack-copy ring was full: one frame, saying so.
    let symbolized = symbolizer.symbolize(batch(
        Vec::new(),
        &[],
        sample_flags::USER_STACK_LOST
            | sample_flags::KERNEL_STACK_LOST
            | sample_flags::STACK_COPY_RING_FULL,
    ));
    assert_eq!(names(&symbolized), [RING_FULL_MARKER]);
    // A kernel address kallsyms does not know: the address stays in
    // the location, out of the name.
    let symbolized = symbolizer.symbolize(batch(Vec::new(), &[0x1], 0));
    let location = &symbolized.samples[0].stack[0].location;
    assert_eq!(location.kind, LocationKind::Kernel);
    assert_eq!(location.address, 0x1);
    assert_eq!(&*location.frames[0].function, UNKNOWN_KERNEL_FUNCTION);
    assert_eq!(symbolizer.stats().kernel_addresses_cached, 1);
}

#[test]
fn a_stack_execve_took_away_says_so() {
    // `bprm_execve` as the kernel names it (root reads its addresses).
    let kallsyms = std::fs::read_to_string("/proc/kallsyms").expect("kallsyms");
    let Some(address) = kallsyms.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let address = u64::from_str_radix(fields.next()?, 16).ok()?;
        (fields.nth(1)? == "bprm_execve" && address != 0).then_some(address)
    }) else {
        panic!("bprm_execve is not in /proc/kallsyms (run as root)");
    };
    let mut symbolizer = Symbolizer::new();
    let in_execve = |stop: UnwindStop, kernel: &[u64]| {
        let mut sampled = batch(vec![UserAddress::Unmapped { address: 0x10 }], kernel, 0);
        sampled.samples[0].user_stop = Some(stop);
        sampled
    };
    // The return address into it, from the function below it.
    let symbolized = symbolizer.symbolize(in_execve(UnwindStop::NoStackCopy, &[0x1, address + 16]));
    assert_eq!(
        names(&symbolized)[0],
        "[unwind stopped: in execve, the old program's stack gone]",
        "{:?}",
        names(&symbolized)
    );
    // Elsewhere, a copy that failed says so.
    let symbolized = symbolizer.symbolize(in_execve(UnwindStop::NoStackCopy, &[0x1]));
    assert_eq!(names(&symbolized)[0], "[unwind stopped: no stack copy]");
}

#[test]
fn return_addresses_step_back_into_their_call() {
    assert_eq!(code_address(0x1000, true), 0xfff);
    assert_eq!(code_address(0x1000, false), 0x1000);
    assert_eq!(code_address(0, true), 0);
    assert_eq!(basename("/usr/lib/libc.so.6"), "libc.so.6");
}
