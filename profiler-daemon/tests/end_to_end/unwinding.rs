//! User stacks are whole: unwound with each binary's own unwind
//! information, whatever the build flags, through libc, in Rust release
//! builds, Go programs, Debian's own programs, signal handlers and C++
//! exceptions, for binaries that keep their symbols in a separate debug
//! file; and a stack that cannot be completed says why. (Processes' lives
//! and threads' depths: `unwinding_lives`; binaries with little or no
//! unwind information: `unwinding_sparse`.)

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::Duration,
};

use profilerd_client::v1;

use crate::support::{
    Daemon, Workload, build_workload_with, folded, has_chain, options, private_copy, profile,
    samples_where, total,
};

/// The frames every whole stack of a C program starts with.
pub(crate) const C_ROOT: [&str; 4] = [
    "_start",
    "__libc_start_main_impl",
    "__libc_start_call_main",
    "main",
];

/// The name of a frame without the mark of an inlined function.
pub(crate) fn plain(frame: &str) -> &str {
    frame.strip_suffix("_[i]").unwrap_or(frame)
}

/// Of the samples whose stack holds `leaf`: how many, and how many start
/// with exactly `chain` (root first, every frame named).
pub(crate) fn whole_chains(
    stacks: &[(Vec<String>, u64)],
    leaf: &str,
    chain: &[&str],
) -> (u64, u64) {
    let mut with_leaf = 0;
    let mut whole = 0;
    for (frames, count) in stacks {
        if !frames.iter().any(|frame| plain(frame) == leaf) {
            continue;
        }
        with_leaf += count;
        let starts_with_chain = frames.len() >= chain.len()
            && frames
                .iter()
                .zip(chain)
                .all(|(frame, want)| plain(frame) == *want);
        if starts_with_chain {
            whole += count;
        }
    }
    (with_leaf, whole)
}

/// Runs a build command (`tool`, for the message) and checks it succeeded.
fn build(command: &mut Command, tool: &str) {
    let built = command
        .output()
        .unwrap_or_else(|err| panic!("{tool} runs: {err}"));
    assert!(
        built.status.success(),
        "{tool} failed: {}",
        String::from_utf8_lossy(&built.stderr)
    );
}

/// Samples whose stack holds `leaf` and `chain` (consecutive frames,
/// anywhere) and did not stop short.
fn samples_through(stacks: &[(Vec<String>, u64)], leaf: &str, chain: &[&str]) -> u64 {
    stacks
        .iter()
        .filter(|(frames, _)| {
            let plain_frames: Vec<String> = frames.iter().map(|f| plain(f).to_owned()).collect();
            plain_frames.iter().any(|frame| frame == leaf)
                && has_chain(&plain_frames, chain)
                && !frames
                    .iter()
                    .any(|frame| frame.starts_with("[unwind stopped"))
        })
        .map(|(_, count)| count)
        .sum()
}

pub(crate) fn assert_share(
    stacks: &[(Vec<String>, u64)],
    leaf: &str,
    chain: &[&str],
    percent: f64,
) {
    let (with_leaf, whole) = whole_chains(stacks, leaf, chain);
    assert!(
        with_leaf >= 50,
        "too few samples of {leaf} ({with_leaf}) to judge: {stacks:#?}"
    );
    let share = 100.0 * whole as f64 / with_leaf as f64;
    let broken: Vec<_> = stacks
        .iter()
        .filter(|(frames, _)| {
            frames.iter().any(|frame| plain(frame) == leaf)
                && !frames
                    .iter()
                    .zip(chain)
                    .all(|(frame, want)| plain(frame) == *want)
        })
        .take(5)
        .collect();
    assert!(
        share >= percent,
        "only {share:.1}% of {with_leaf} samples of {leaf} carry the whole chain {chain:?} \
         (wanted {percent}%); some that do not: {broken:#?}"
    );
}

/// The folded profile of `pid`, without the samples whose stacks were
/// lost (counted by cause in the summary: when the machine is too busy
/// for the daemon to keep up, the kernel keeps the count but not the
/// stack), which say nothing about unwinding.
pub(crate) async fn folded_profile_of(
    daemon: &Daemon,
    pid: u32,
    seconds: u64,
) -> Vec<(Vec<String>, u64)> {
    let mut client = daemon.client().await;
    let reply = profile(
        &mut client,
        &[pid],
        Duration::from_secs(seconds),
        options(v1::Format::Folded),
    )
    .await;
    without_lost_stacks(folded(&reply.report))
}

/// The folded profile of the processes named `comm` over the next
/// `duration_ms`, without the samples whose stacks were lost.
pub(crate) async fn folded_profile_of_comm(
    client: &mut crate::support::Client,
    comm: &str,
    duration_ms: u64,
) -> Vec<(Vec<String>, u64)> {
    let reply = client
        .profile(v1::ProfileRequest {
            duration_ms,
            selector: Some(v1::Selector {
                comms: vec![comm.to_owned()],
                ..Default::default()
            }),
            options: Some(options(v1::Format::Folded)),
            mode: v1::Mode::Cpu as i32,
            ..Default::default()
        })
        .await
        .expect("Profile succeeds")
        .into_inner();
    without_lost_stacks(folded(&reply.report))
}

fn without_lost_stacks(stacks: Vec<(Vec<String>, u64)>) -> Vec<(Vec<String>, u64)> {
    stacks
        .into_iter()
        .filter(|(frames, _)| {
            frames
                .first()
                .is_none_or(|frame| !frame.starts_with("[lost"))
        })
        .collect()
}

/// The disassembly of `function` in `binary` (objdump, from binutils).
fn disassembly(binary: &Path, function: &str) -> String {
    let output = Command::new("objdump")
        .arg("-d")
        .arg(format!("--disassemble={function}"))
        .arg(binary)
        .output()
        .expect("objdump (binutils) runs");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub(crate) fn chain_binary(output: &str, flags: &[&str]) -> PathBuf {
    build_workload_with("chain", output, flags)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_leaf_without_its_own_frame_pointer_keeps_its_caller() {
    let binary = chain_binary("chain-o1", &["-O1", "-g", "-fno-omit-frame-pointer"]);
    let leaf = disassembly(&binary, "hot_leaf");
    assert!(
        leaf.contains("<hot_leaf>:") && !leaf.contains("push   %rbp"),
        "the test needs a hot_leaf without a frame pointer of its own:\n{leaf}"
    );
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 99.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn code_built_without_frame_pointers_unwinds_whole() {
    let binary = chain_binary("chain-o2", &["-O2", "-g", "-fomit-frame-pointer"]);
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let chain = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &chain, 95.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_callback_of_libc_qsort_reaches_main_through_qsort() {
    let binary = chain_binary("chain-o1", &["-O1", "-g", "-fno-omit-frame-pointer"]);
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20", "qsort"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let chain = [&C_ROOT[..], &["sort_drive"]].concat();
    assert_share(&stacks, "compare_slowly", &chain, 95.0);
    // Between sort_drive and the callback: qsort's own frames, in libc.
    let through_qsort: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames.iter().any(|f| f == "compare_slowly")
                && frames
                    .iter()
                    .skip_while(|f| *f != "sort_drive")
                    .take_while(|f| *f != "compare_slowly")
                    .any(|f| f.contains("qsort"))
        })
        .map(|(_, count)| count)
        .sum();
    let (with_leaf, _) = whole_chains(&stacks, "compare_slowly", &[]);
    assert!(
        through_qsort as f64 >= 0.95 * with_leaf as f64,
        "{through_qsort} of {with_leaf} samples of the callback show qsort's frames: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_rust_release_build_without_frame_pointers_unwinds_whole() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/rust_chain.rs");
    let binary = Path::new(env!("CARGO_TARGET_TMPDIR")).join("workload-rust-chain");
    build(
        Command::new("rustc")
            .args(["-O", "-C", "debuginfo=1", "--edition", "2021", "-o"])
            .arg(&binary)
            .arg(&source),
        "rustc",
    );
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let (with_leaf, whole) = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| plain(f) == "rust_chain::rust_leaf"))
        .fold((0, 0), |(all, whole), (frames, count)| {
            let plain_frames: Vec<String> = frames.iter().map(|f| plain(f).to_owned()).collect();
            let complete = frames.first().is_some_and(|f| f == "_start")
                && has_chain(
                    &plain_frames,
                    &[
                        "rust_chain::main",
                        "rust_chain::rust_drive",
                        "rust_chain::rust_leaf",
                    ],
                );
            (all + count, whole + if complete { *count } else { 0 })
        });
    assert!(with_leaf >= 50, "too few samples: {stacks:#?}");
    assert!(
        whole as f64 >= 0.95 * with_leaf as f64,
        "{whole} of {with_leaf} samples of rust_leaf are whole: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_go_program_unwinds_through_its_compressed_debug_frame() {
    // Go writes no .eh_frame; its .debug_frame is zlib-compressed (section
    // flag C) unless linked with -compressdwarf=false.
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/workloads/go_chain.go");
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let binary = tmp.join("workload-go-chain");
    build(
        Command::new("go")
            .args(["build", "-o"])
            .arg(&binary)
            .arg(&source)
            .env("GOCACHE", tmp.join("go-cache"))
            .env("GOPATH", tmp.join("go-path"))
            .env("GO111MODULE", "off")
            .env("GOFLAGS", ""),
        "go (xtask's bootstrap installs golang-go)",
    );
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let (with_leaf, _) = whole_chains(&stacks, "main.goLeaf", &[]);
    let through_main = samples_through(
        &stacks,
        "main.goLeaf",
        &["runtime.main", "main.main", "main.goDrive", "main.goLeaf"],
    );
    assert!(with_leaf >= 50, "too few samples: {stacks:#?}");
    assert!(
        through_main as f64 >= 0.95 * with_leaf as f64,
        "{through_main} of {with_leaf} samples of main.goLeaf reach runtime.main: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn vdso_code_and_short_c_names_are_named_as_they_are() {
    let daemon = Daemon::start().await;
    let binary = build_workload_with("vdso_clock", "vdso-clock", &["-O2", "-g"]);
    let workload = Workload::spawn(&binary, &[]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let in_vdso: u64 = samples_where(&stacks, |frames| {
        frames.iter().any(|frame| frame.starts_with("[vdso]"))
    });
    assert_eq!(in_vdso, 0, "vDSO frames left unnamed: {stacks:#?}");
    let (with_leaf, whole) = whole_chains(&stacks, "__vdso_clock_gettime", &C_ROOT);
    assert!(with_leaf >= 30, "too few samples in the vDSO: {stacks:#?}");
    let through_rd = samples_through(&stacks, "__vdso_clock_gettime", &["main", "rd"]);
    assert!(
        whole as f64 >= 0.9 * with_leaf as f64 && through_rd as f64 >= 0.9 * with_leaf as f64,
        "{whole} of {with_leaf} samples in the vDSO start at _start, {through_rd} come \
         through main;rd: {stacks:#?}"
    );
    assert!(
        !stacks
            .iter()
            .any(|(frames, _)| frames.iter().any(|frame| frame.contains("restrict"))),
        "a C name demangled as C++: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_signal_handler_s_stacks_go_on_in_the_code_it_interrupted() {
    let daemon = Daemon::start().await;
    // Without frame pointers, and with them (a frame-pointer walk through
    // the handler's frame must not be taken for the way out).
    for (output, flags) in [
        ("signal-spin-o2", &["-O2", "-g"][..]),
        (
            "signal-spin-fp",
            &["-O0", "-g", "-fno-omit-frame-pointer"][..],
        ),
    ] {
        let binary = build_workload_with("signal_spin", output, flags);
        let workload = Workload::spawn(&binary, &[]);
        let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
        let chain = [
            "main",
            "outer",
            "interrupted_work",
            "[signal handler]",
            "on_alarm",
            "spin_in_handler",
        ];
        let (with_leaf, whole) = whole_chains(&stacks, "spin_in_handler", &C_ROOT);
        let through_the_signal = samples_through(&stacks, "spin_in_handler", &chain);
        assert!(
            with_leaf >= 50,
            "{output}: too few samples in the handler: {stacks:#?}"
        );
        assert!(
            whole as f64 >= 0.95 * with_leaf as f64
                && through_the_signal as f64 >= 0.95 * with_leaf as f64,
            "{output}: of {with_leaf} samples in the handler, {whole} start at _start and \
             {through_the_signal} go through the signal frame: {stacks:#?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn c_plus_plus_exceptions_unwind_whole_or_say_where_they_stop() {
    // Samples land in libgcc's unwinder while it rewrites the thrower's
    // frames to land in the catch: those few cannot be walked, and must say
    // so rather than pass for whole stacks.
    let binary = build_workload_with("exceptions", "exceptions", &["-O2", "-g"]);
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let stacks = folded_profile_of(&daemon, workload.pid(), 3).await;
    let unexplained: Vec<_> = stacks
        .iter()
        .filter(|(frames, _)| {
            frames
                .first()
                .is_some_and(|f| f != "_start" && !f.starts_with("[unwind stopped: "))
        })
        .collect();
    assert!(
        unexplained.is_empty(),
        "stacks neither whole nor saying why they stop: {unexplained:#?}"
    );
    let in_loop: u64 = samples_where(&stacks, |frames| {
        frames.iter().any(|f| f.starts_with("catcher_loop"))
    });
    let whole: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            frames.first().is_some_and(|f| f == "_start")
                && frames.iter().any(|f| f.starts_with("catcher_loop"))
        })
        .map(|(_, count)| count)
        .sum();
    assert!(in_loop >= 50, "too few samples: {stacks:#?}");
    assert!(
        whole as f64 >= 0.95 * in_loop as f64,
        "{whole} of {in_loop} samples in catcher_loop whole: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn debians_xz_reaches_its_main() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let data = dir.path().join("data");
    // Text xz compresses slowly at -9: a few seconds of real work.
    let mut text = String::with_capacity(24 << 20);
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    while text.len() < 24 << 20 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        text.push_str(&format!("{:x} {} ", state, state % 1000));
    }
    std::fs::write(&data, text).expect("the data is written");
    let daemon = Daemon::start().await;
    let xz: Workload = Command::new("xz")
        .args(["-9", "-T1", "-c", "-k"])
        .arg(&data)
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("Debian's xz runs")
        .into();
    let stacks = folded_profile_of(&daemon, xz.pid(), 2).await;
    // xz has no symbol table: main is the frame __libc_start_call_main calls.
    assert!(reaching_main(&stacks) >= 0.9, "xz: {stacks:#?}");
}

/// Removes a file when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_stripped_binary_is_named_from_its_debug_file_by_build_id() {
    let built = chain_binary(
        "chain-split",
        &["-O1", "-g", "-fno-omit-frame-pointer", "-Wl,--build-id"],
    );
    let dir = tempfile::tempdir().expect("a temporary directory");
    let binary = dir.path().join("splitchain");
    let debug = dir.path().join("splitchain.debug");
    let run = |program: &str, args: &[&std::ffi::OsStr]| {
        let output = Command::new(program)
            .args(args)
            .output()
            .expect("binutils runs");
        assert!(
            output.status.success(),
            "{program} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    crate::support::copy_program(&built, &binary);
    run(
        "objcopy",
        &[
            "--only-keep-debug".as_ref(),
            binary.as_ref(),
            debug.as_ref(),
        ],
    );
    run("strip", &["--strip-all".as_ref(), binary.as_ref()]);
    let link = format!("--add-gnu-debuglink={}", debug.display());
    run("objcopy", &[link.as_ref(), binary.as_ref()]);
    let notes = run("readelf", &["-n".as_ref(), binary.as_ref()]);
    let build_id = notes
        .lines()
        .find_map(|line| line.trim().strip_prefix("Build ID: "))
        .expect("the binary has a build id")
        .to_owned();
    let symbols = run("readelf", &["-s".as_ref(), binary.as_ref()]);
    assert!(!symbols.contains("hot_leaf"), "the binary must be stripped");
    let installed = Path::new("/usr/lib/debug/.build-id")
        .join(&build_id[..2])
        .join(format!("{}.debug", &build_id[2..]));
    std::fs::create_dir_all(installed.parent().unwrap()).expect("the debug directory is made");
    std::fs::copy(&debug, &installed).expect("the debug file is installed");
    let _installed = RemoveOnDrop(installed);
    std::fs::remove_file(&debug).expect("the debug file next to it is removed");

    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&binary, &["20"]);
    let mut client = daemon.client().await;
    let reply = profile(
        &mut client,
        &[workload.pid()],
        Duration::from_secs(2),
        v1::ReportOptions {
            format: v1::Format::Tree as i32,
            ..Default::default()
        },
    )
    .await;
    let tree = String::from_utf8_lossy(&reply.report);
    assert!(
        tree.lines()
            .any(|line| line.contains("chain.c:") && line.contains("hot_leaf")),
        "hot_leaf is named with its file and line:\n{tree}"
    );
    assert!(tree.contains("drive"), "{tree}");
}

/// Of `stacks`, the share that reach `__libc_start_call_main` (the frame
/// below main in every whole stack of a program linked with glibc).
fn reaching_main(stacks: &[(Vec<String>, u64)]) -> f64 {
    let samples = total(stacks);
    let reaching: u64 = samples_where(stacks, |frames| {
        frames.iter().any(|f| f == "__libc_start_call_main")
    });
    assert!(samples >= 50, "too few samples: {stacks:#?}");
    reaching as f64 / samples as f64
}

/// Debian's python3 looping, from a copy of its binary that only this test
/// runs: the python clients of other tests, running meanwhile, map
/// /usr/bin/python3 and would keep its unwind information in use.
fn python_loop() -> Workload {
    let private = private_copy(Path::new("/usr/bin/python3"), "python3-let-go-of");
    Command::new(&private)
        .args(["-c", "while True: sum(i * i for i in range(1000))"])
        .spawn()
        .expect("Debian's python3 runs")
        .into()
}

async fn unwinding_status(daemon: &Daemon) -> v1::UnwindStatus {
    let mut client = daemon.client().await;
    client
        .get_status(v1::GetStatusRequest::default())
        .await
        .expect("status")
        .into_inner()
        .unwinding
        .expect("the unwinding status")
}

#[tokio::test(flavor = "multi_thread")]
async fn unwind_information_not_needed_lately_is_let_go_of_and_read_again_when_needed() {
    // python3's unwind information alone (about 490 KiB) is above the limit.
    let limit = 384 << 10;
    let daemon = Daemon::start_with(&["--unwind-info-limit", "384KiB"]).await;
    // Only the workloads are sampled: what other tests run meanwhile would
    // bring unwind information of its own, in use, into the figures.
    let mut client = daemon.client().await;
    let mut sample_only = async |pid: u32| {
        client
            .set_targets(v1::SetTargetsRequest {
                everything: false,
                pids: vec![pid],
                cgroups: Vec::new(),
            })
            .await
            .unwrap_or_else(|status| panic!("SetTargets failed: {status:?}"));
    };
    let python = python_loop();
    sample_only(python.pid()).await;
    let first = folded_profile_of(&daemon, python.pid(), 2).await;
    assert!(reaching_main(&first) >= 0.9, "python3 before: {first:#?}");
    drop(python);
    let held = unwinding_status(&daemon).await;
    assert_eq!(held.limit, limit);
    assert!(
        held.bytes > limit,
        "python3's stacks need more than the limit: {held:?}"
    );

    // Once python3 has not been sampled for a while, its unwind
    // information goes; the chain's stacks stay whole meanwhile.
    let binary = chain_binary("chain-o2", &["-O2", "-g", "-fomit-frame-pointer"]);
    let chain = Workload::spawn(&binary, &["20"]);
    sample_only(chain.pid()).await;
    let stacks = folded_profile_of(&daemon, chain.pid(), 4).await;
    let whole = [&C_ROOT[..], &["drive", "hot_leaf"]].concat();
    assert_share(&stacks, "hot_leaf", &whole, 95.0);
    let after = unwinding_status(&daemon).await;
    assert!(after.binaries_evicted >= 1, "nothing let go of: {after:?}");
    // What is held now is what the chain needs: python3's went.
    assert!(
        after.bytes + (400 << 10) <= held.bytes,
        "python3's unwind information is still held: {} bytes before, {} after",
        held.bytes,
        after.bytes
    );
    drop(chain);

    // python3 again: its unwind information is read again.
    let python = python_loop();
    sample_only(python.pid()).await;
    let again = folded_profile_of(&daemon, python.pid(), 2).await;
    assert!(reaching_main(&again) >= 0.9, "python3 after: {again:#?}");
}
