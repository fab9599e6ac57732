//! Commands that name a function, as their users type it: `callers` and
//! `diff --function` find the C library's malloc by its public name
//! (Debian's glibc names it `__GI___libc_malloc`), and `annotate` shows a
//! function's source, or without line information objdump's disassembly
//! of it, with the samples beside each line or instruction.

use profilerd_words::FunctionName;

use crate::support::{self, Daemon, Workload};

/// Runs profilerctl with `args` against `daemon` until it succeeds with
/// an output `ready` takes (`what` names that in the failure); that
/// output.
async fn profilerctl_until(
    daemon: &Daemon,
    what: &str,
    args: &[&str],
    ready: impl Fn(&str) -> bool,
) -> String {
    support::eventually(what, support::PATIENCE, async || {
        let output = support::profilerctl(&daemon.socket, args).await;
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        if output.status.success() && ready(&text) {
            Ok(text)
        } else {
            Err(format!("{text}{}", String::from_utf8_lossy(&output.stderr)))
        }
    })
    .await
}

/// The samples annotate's first line counts: `hot in FILE: N samples …`.
fn annotated_samples(text: &str) -> u64 {
    text.split_once(": ")
        .and_then(|(_, rest)| rest.split_once(" samples"))
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or(0)
}

/// `callers malloc` finds the C library's malloc, which Debian's glibc
/// names `__GI___libc_malloc` (the README's own example).
#[tokio::test(flavor = "multi_thread")]
async fn callers_of_malloc_find_the_c_library_s_malloc() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["storm"]);
    let pid = workload.pid().to_string();
    let text = profilerctl_until(
        &daemon,
        "callers of malloc name site_storm",
        &["callers", "malloc", "--pid", &pid, "--since", "1m"],
        |text| text.contains("site_storm"),
    )
    .await;
    assert!(text.starts_with("Callers of malloc ("), "{text}");
}

/// `diff --function malloc` keeps only malloc's rows, found by the C
/// library's own name of it (Debian's glibc: `__GI___libc_malloc`).
#[tokio::test(flavor = "multi_thread")]
async fn a_diff_naming_malloc_finds_the_c_library_s_malloc() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("allocs", &["storm"]);
    let pid = workload.pid().to_string();
    let malloc = FunctionName::new("malloc");
    // The table's rows: `self% → self% (change)   total% … (change)   function`.
    let rows = |text: &str| -> Vec<String> {
        (text.lines())
            .filter(|line| line.matches('→').count() == 2 && !line.contains("function"))
            .filter_map(|line| line.rsplit_once(")      ").map(|(_, f)| f.to_owned()))
            .collect()
    };
    // The base window ends 3 s ago: once the daemon holds that, the two
    // windows compare (one ending before it started is refused).
    let args = [
        "diff",
        "--base-since",
        "1m",
        "--base-until",
        "3s",
        "--since",
        "3s",
        "--pid",
        &pid,
        "--function",
        "malloc",
    ];
    let text = profilerctl_until(
        &daemon,
        "diff --function malloc lists a C library name of malloc",
        &args,
        |text| (rows(text).iter()).any(|function| function != "malloc" && malloc.matches(function)),
    )
    .await;
    let rows = rows(&text);
    assert!(
        rows.iter().all(|function| malloc.matches(function)),
        "a row of another function: {rows:?}\n{text}"
    );
    assert!(text.contains("only the functions named malloc ("), "{text}");
    // Without --function, the other functions are there too.
    let whole = support::profilerctl(&daemon.socket, &args[..args.len() - 2]).await;
    let whole = String::from_utf8_lossy(&whole.stdout).into_owned();
    assert!(whole.contains("site_storm"), "{whole}");
}

/// `annotate hot` prints split.c with each line's samples: the hot loop's
/// lines (spin's, inlined into hot) have the most.
#[tokio::test(flavor = "multi_thread")]
async fn annotate_shows_the_hot_loop_s_line_with_the_most_samples() {
    let daemon = Daemon::start().await;
    let workload = Workload::start("split", &[]);
    let pid = workload.pid().to_string();
    let source = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/split.c"),
    )
    .expect("split.c");
    let loop_lines: Vec<u32> = (1..)
        .zip(source.lines())
        .filter(|(_, line)| line.contains("sink += i * i") || line.contains("for (unsigned long i"))
        .map(|(number, _)| number)
        .collect();
    assert_eq!(loop_lines.len(), 2, "{source}");
    // Enough samples for the hottest line to be plain.
    let text = profilerctl_until(
        &daemon,
        "annotate hot has samples",
        &["annotate", "hot", "-p", &pid, "--since", "1m"],
        |text| annotated_samples(text) >= 100,
    )
    .await;
    // Rows: self, total, line number, source.
    let hottest = text
        .lines()
        .filter_map(|line| {
            let own: u64 = line.get(..6)?.trim().parse().ok()?;
            let number: u32 = line.get(14..19)?.trim().parse().ok()?;
            Some((own, number))
        })
        .max()
        .unwrap_or_else(|| panic!("no line with samples:\n{text}"));
    assert!(
        loop_lines.contains(&hottest.1),
        "hottest {hottest:?}, the loop {loop_lines:?}:\n{text}"
    );
    assert!(
        text.contains("sink += i * i"),
        "the source is shown:\n{text}"
    );
}

/// `annotate hot` of split.c built without -g: objdump's disassembly of
/// hot (a position-independent executable), the loop's instructions with
/// the samples.
#[tokio::test(flavor = "multi_thread")]
async fn annotate_without_line_information_shows_the_instructions_with_their_samples() {
    let daemon = Daemon::start().await;
    let binary = support::build_workload_with("split", "split-without-lines", &NO_LINES);
    let workload = Workload::spawn(&binary, &[]);
    let text = annotated(&daemon, "hot", workload.pid()).await;
    assert_the_loop_is_hottest(&text, "hot", &binary);
}

/// The same of a function in a shared library whose code is linked 2 MiB
/// above its file offsets: the instructions are found at the addresses
/// objdump shows, which are not the offsets the daemon reports.
#[tokio::test(flavor = "multi_thread")]
async fn annotate_disassembles_a_library_s_function_at_its_virtual_addresses() {
    let daemon = Daemon::start().await;
    let library = support::build_workload_with(
        "library_loop",
        "library-loop.so",
        &[
            "-O1",
            "-fno-omit-frame-pointer",
            "-DLIBRARY",
            "-fPIC",
            "-shared",
            "-Wl,-Ttext-segment=0x200000",
        ],
    );
    let program = support::build_workload_with("library_loop", "library-loop", &NO_LINES);
    let library_path = library.display().to_string();
    let workload = Workload::spawn(&program, &[&library_path]);
    let text = annotated(&daemon, "library_hot", workload.pid()).await;
    let (start, end) = assert_the_loop_is_hottest(&text, "library_hot", &library);
    assert!(
        start >= 0x20_0000 && end < 0x30_0000,
        "the loop at {start:#x}..={end:#x}, not at the library's virtual addresses:\n{text}"
    );
}

/// How the workloads without line information are built.
const NO_LINES: [&str; 2] = ["-O1", "-fno-omit-frame-pointer"];

/// `annotate FUNCTION -p PID` once it holds 100 samples or more.
async fn annotated(daemon: &Daemon, function: &str, pid: u32) -> String {
    let pid = pid.to_string();
    profilerctl_until(
        daemon,
        &format!("annotate {function} has samples"),
        &["annotate", function, "-p", &pid, "--since", "1m"],
        |text| annotated_samples(text) >= 100,
    )
    .await
}

/// Asserts that annotate's `text` is objdump's disassembly of `function`
/// in `binary`, and that the instructions of its loop (from its backward
/// jump's target to the jump) hold the hottest and at least 90% of its
/// samples; the loop's addresses.
fn assert_the_loop_is_hottest(text: &str, function: &str, binary: &std::path::Path) -> (u64, u64) {
    assert!(
        text.starts_with(&format!("{function} in {}: ", binary.display())),
        "{text}"
    );
    assert!(
        text.contains(&format!("objdump's disassembly of the symbol {function}, ")),
        "the disassembly of {function}:\n{text}"
    );
    // Rows: self, share, address, instruction (and the hottest's mark).
    let rows: Vec<(u64, u64, &str)> = (text.lines())
        .filter_map(|line| {
            let own = line.get(..6)?.trim();
            let own = if own.is_empty() { 0 } else { own.parse().ok()? };
            let address = u64::from_str_radix(line.get(14..23)?.trim(), 16).ok()?;
            Some((own, address, line.get(25..)?))
        })
        .collect();
    let (start, end) = (rows.iter())
        .find_map(|&(_, address, instruction)| {
            let target = instruction.strip_prefix('j')?.split_whitespace().nth(1)?;
            let target = u64::from_str_radix(target, 16).ok()?;
            (target < address).then_some((target, address))
        })
        .unwrap_or_else(|| panic!("no backward jump in {function}:\n{text}"));
    let in_loop = |address: u64| (start..=end).contains(&address);
    let hottest: Vec<u64> = (rows.iter())
        .filter(|(_, _, instruction)| instruction.ends_with("← hottest"))
        .map(|&(_, address, _)| address)
        .collect();
    assert!(
        hottest.len() == 1 && in_loop(hottest[0]),
        "the hottest {hottest:x?}, the loop {start:#x}..={end:#x}:\n{text}"
    );
    let total: u64 = rows.iter().map(|&(own, _, _)| own).sum();
    let looping: u64 = (rows.iter())
        .filter(|&&(_, address, _)| in_loop(address))
        .map(|&(own, _, _)| own)
        .sum();
    assert!(
        total >= 100 && looping as f64 >= 0.9 * total as f64,
        "{looping} of the {total} samples in {function}'s loop:\n{text}"
    );
    (start, end)
}
