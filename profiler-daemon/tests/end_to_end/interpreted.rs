//! Frames of interpreted and JIT-compiled code: named from the perf maps
//! and jitdump files their runtimes write, with the interpreter's own
//! frames around them and the chain of calls whole: node's JavaScript
//! (`--perf-basic-prof` or `--perf-prof`, with
//! `--interpreted-frames-native-stack`), CPython 3.12's `-X perf`
//! trampolines (call stubs without a frame, in anonymous memory).

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
};

use crate::{
    support::{Daemon, Workload, total},
    unwinding::folded_profile_of,
};

#[tokio::test(flavor = "multi_thread")]
async fn javascript_functions_are_named_from_nodes_perf_map() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("hot.js");
    std::fs::write(
        &script,
        "function hotJavaScriptFunction(n) { let s = 0; \
         for (let i = 0; i < n; i++) { s += Math.sqrt(i) * i; } return s; }\n\
         function callerOfTheHotOne(end) { let t = 0; \
         while (Date.now() < end) { t += hotJavaScriptFunction(1e6); } return t; }\n\
         callerOfTheHotOne(Date.now() + 20000);\n",
    )
    .expect("the script is written");
    let daemon = Daemon::start().await;
    let node = node_running(&script, "--perf-basic-prof");
    let pid = node.pid();
    // Once V8 has compiled the function (and named its code in the perf
    // map).
    let map = perf_map_naming(pid, "hotJavaScriptFunction").await;
    let stacks = folded_profile_of(&daemon, pid, 2).await;
    let _ = std::fs::remove_file(map);
    assert_hot_javascript_named(&stacks);
}

/// node running `script` in its directory (where V8 writes its jitdump
/// file and isolate logs), its names written as `names_flag` asks.
/// Interpreted JavaScript has frames of its own only with
/// `--interpreted-frames-native-stack` (each gets a trampoline, named
/// too); without it the hot function's callers are missing.
fn node_running(script: &Path, names_flag: &str) -> Workload {
    Command::new("node")
        .args([names_flag, "--interpreted-frames-native-stack"])
        .arg(script)
        .current_dir(script.parent().expect("the script's directory"))
        .spawn()
        .expect("node (Debian's nodejs) runs")
        .into()
}

/// At least half the samples of `stacks` name the hot JavaScript function
/// right above its interpreted caller, node's own frames below, down to
/// `_start`.
fn assert_hot_javascript_named(stacks: &[(Vec<String>, u64)]) {
    let named: u64 = stacks
        .iter()
        .filter(|(frames, _)| {
            let js = frames
                .iter()
                .position(|f| f.contains("hotJavaScriptFunction"));
            js.is_some_and(|at| {
                at > 0
                    && frames[at - 1].contains("callerOfTheHotOne")
                    && frames[..at].iter().any(|f| f.starts_with("node::"))
            }) && frames.first().is_some_and(|f| f == "_start")
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        named as f64 >= 0.5 * total(stacks) as f64,
        "{named} of {} samples name the hot JavaScript function above its interpreted caller \
         and node's frames: {stacks:#?}",
        total(stacks)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn javascript_functions_are_named_from_nodes_jitdump_file() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("hot.js");
    // V8 writes its jitdump records through a 2 MiB buffer: a function
    // compiled each round (each interpreted function with its own copy of
    // the trampoline) fills it, so that the hot function's records reach
    // the file while the program runs, as in a real service.
    std::fs::write(
        &script,
        "function hotJavaScriptFunction(n) { let s = 0; \
         for (let i = 0; i < n; i++) { s += Math.sqrt(i) * i; } return s; }\n\
         let compiled = 0;\n\
         function callerOfTheHotOne(end) { let t = 0; \
         while (Date.now() < end) { t += hotJavaScriptFunction(1e6); \
         t += new Function('x', 'return x + ' + compiled++)(t); } return t; }\n\
         callerOfTheHotOne(Date.now() + 60000);\n",
    )
    .expect("the script is written");
    let daemon = Daemon::start().await;
    let node = node_running(&script, "--perf-prof");
    let pid = node.pid();
    let dump = dir.path().join(format!("jit-{pid}.dump"));
    // Once the optimized hot function's record is in the file.
    crate::support::eventually(
        "node's jitdump file names the optimized hot function",
        crate::support::PATIENCE,
        async || match std::fs::read(&dump) {
            Ok(bytes) if contains(&bytes, b"JS:*hotJavaScriptFunction") => Ok(()),
            Ok(bytes) => Err(format!("{} bytes in {}", bytes.len(), dump.display())),
            Err(err) => Err(format!("{}: {err}", dump.display())),
        },
    )
    .await;
    assert!(
        !Path::new(&format!("/tmp/perf-{pid}.map")).exists(),
        "node wrote no perf map: the names come from the jitdump file"
    );
    let stacks = folded_profile_of(&daemon, pid, 2).await;
    assert_hot_javascript_named(&stacks);
    let jit = daemon
        .status()
        .await
        .jit
        .expect("status says what JIT names it read");
    assert!(
        jit.bytes_read > 0
            && jit
                .refused
                .iter()
                .all(|refused| refused.cause != "malformed"),
        "{jit:?}"
    );
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

/// The perf map of process `pid`, once it names `name` (its runtime has
/// compiled that function).
async fn perf_map_naming(pid: u32, name: &str) -> String {
    let map = format!("/tmp/perf-{pid}.map");
    crate::support::eventually(
        &format!("the perf map names {name}"),
        crate::support::PATIENCE,
        async || match std::fs::read_to_string(&map) {
            Ok(names) if names.contains(name) => Ok(()),
            Ok(names) => Err(format!("{} lines in {map}", names.lines().count())),
            Err(err) => Err(format!("{map}: {err}")),
        },
    )
    .await;
    map
}

/// A CPython of 3.12 or later (the first with `-X perf`): Debian's, or
/// installed by pyenv.
fn python_with_perf_trampolines() -> Option<PathBuf> {
    cpythons_here()
        .into_iter()
        .map(|(python, _)| python)
        .find(|python| {
            Command::new(python)
                .args([
                    "-c",
                    "import sys; sys.exit(not hasattr(sys, 'activate_stack_trampoline'))",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|status| status.success())
        })
}

#[tokio::test(flavor = "multi_thread")]
async fn python_functions_under_x_perf_keep_their_whole_chain_of_calls() {
    let Some(python) = python_with_perf_trampolines() else {
        eprintln!(
            "SKIPPED: no CPython 3.12 or later on the PATH or under pyenv (-X perf came with 3.12)"
        );
        return;
    };
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("hot.py");
    std::fs::write(
        &script,
        "import time\n\
         def leaf(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n\
         def middle(n):\n    return leaf(n)\n\
         def top(seconds):\n    end = time.time() + seconds\n    while time.time() < end:\n        middle(100000)\n\
         top(20)\n",
    )
    .expect("the script is written");
    let daemon = Daemon::start().await;
    let workload: Workload = Command::new(&python)
        .args(["-X", "perf"])
        .arg(&script)
        .spawn()
        .expect("python runs")
        .into();
    let pid = workload.pid();
    let map = perf_map_naming(pid, "py::leaf:").await;
    let stacks = folded_profile_of(&daemon, pid, 2).await;
    let _ = std::fs::remove_file(map);
    // Each Python function's trampoline (a call stub without a frame, in
    // anonymous memory) between the interpreter's frames: the script's
    // calls in order, under CPython's own frames down to _start.
    let expected = ["py::<module>:", "py::top:", "py::middle:", "py::leaf:"];
    let in_leaf: Vec<_> = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f.starts_with("py::leaf:")))
        .collect();
    let leaf_samples: u64 = in_leaf.iter().map(|(_, count)| count).sum();
    let whole: u64 = in_leaf
        .iter()
        .filter(|(frames, _)| {
            let python: Vec<&String> = frames.iter().filter(|f| f.starts_with("py::")).collect();
            frames.first().is_some_and(|f| f == "_start")
                && python.len() == expected.len()
                && python.iter().zip(expected).all(|(f, e)| f.starts_with(e))
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        leaf_samples as f64 >= 0.9 * total(&stacks) as f64,
        "{leaf_samples} of {} samples in leaf: {stacks:#?}",
        total(&stacks)
    );
    assert!(
        whole as f64 >= 0.99 * leaf_samples as f64,
        "{whole} of {leaf_samples} samples in leaf carry <module>, top, middle, leaf from _start \
         ({}): {stacks:#?}",
        python.display()
    );
}

/// The CPython binaries on this machine, each with the version it says it
/// is: Debian's `python3.N`, and pyenv's (3.10 and later).
fn cpythons_here() -> Vec<(PathBuf, String)> {
    let pyenv_root = std::env::var_os("PYENV_ROOT")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| Path::new(&home).join(".pyenv")));
    let mut candidates: Vec<PathBuf> = Vec::new();
    for minor in 10..=16 {
        let name = format!("python3.{minor}");
        candidates.push(Path::new("/usr/bin").join(&name));
        if let Some(root) = &pyenv_root
            && let Ok(versions) = std::fs::read_dir(root.join("versions"))
        {
            candidates.extend(versions.flatten().map(|v| v.path().join("bin").join(&name)));
        }
    }
    candidates
        .into_iter()
        .filter(|python| python.is_file())
        .filter_map(|python| {
            let output = Command::new(&python)
                .args(["-c", "import sys; print('%d.%d.%d' % sys.version_info[:3])"])
                .stderr(Stdio::null())
                .output()
                .ok()?;
            let version = String::from_utf8(output.stdout).ok()?.trim().to_owned();
            output.status.success().then_some((python, version))
        })
        .collect()
}

/// The CPythons of the machine whose frames the daemon reads (3.11 to
/// 3.13); Debian's python3.11 at least.
pub(crate) fn readable_cpythons_here() -> Vec<(PathBuf, String)> {
    let pythons: Vec<(PathBuf, String)> = cpythons_here()
        .into_iter()
        .filter(|(_, version)| {
            let minor: u32 = version
                .split('.')
                .nth(1)
                .and_then(|m| m.parse().ok())
                .unwrap_or(0);
            (11..=13).contains(&minor)
        })
        .collect();
    assert!(
        !pythons.is_empty(),
        "no CPython 3.11 to 3.13 on this machine"
    );
    pythons
}

#[tokio::test(flavor = "multi_thread")]
async fn cpython_interpreters_are_found_with_their_versions() {
    // Each CPython of the machine runs a loop: the daemon finds its
    // interpreter (in its binary, or the libpython it links) and its
    // version from the binary, and counts those before 3.11 as refused.
    // (Other tests run CPythons too: the counts are at least these.)
    let pythons = cpythons_here();
    assert!(
        !pythons.is_empty(),
        "no CPython on this machine (Debian's python3 is a test dependency)"
    );
    let daemon = Daemon::start().await;
    let workloads: Vec<Workload> = pythons
        .iter()
        .map(|(python, _)| {
            Command::new(python)
                .args(["-c", "while True: pass"])
                .spawn()
                .expect("python runs")
                .into()
        })
        .collect();
    let pids: Vec<u32> = workloads.iter().map(Workload::pid).collect();
    let mut client = daemon.client().await;
    let options = crate::support::options(profilerd_client::v1::Format::Flat);
    crate::support::profile(
        &mut client,
        &pids,
        std::time::Duration::from_secs(2),
        options,
    )
    .await;
    let status = client
        .get_status(profilerd_client::v1::GetStatusRequest::default())
        .await
        .expect("Status")
        .into_inner();
    let python = status
        .symbolizer
        .and_then(|symbolizer| symbolizer.python)
        .expect("the status says what CPython interpreters were found");
    for (path, version) in &pythons {
        let minor: u32 = version
            .split('.')
            .nth(1)
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        if minor >= 11 {
            assert!(
                python
                    .processes
                    .get(version)
                    .is_some_and(|&count| count >= 1),
                "{} ({version}) found: {python:?}",
                path.display()
            );
        } else {
            assert!(
                python
                    .refused
                    .get("before_3_11")
                    .is_some_and(|&count| count >= 1),
                "{} ({version}) refused: {python:?}",
                path.display()
            );
        }
    }
}

/// Two threads spinning at known places (one through a method and a
/// generator, one in a function named beyond ASCII): each prints its
/// native id and its chain, innermost first (qualified name, file, line;
/// the innermost line is where the chain was taken, not where it spins).
const PEEKED_SCRIPT: &str = r#"
import json, sys, threading
lock = threading.Lock()
def report():
    frame, chain = sys._getframe(1), []
    while frame is not None:
        chain.append([frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    with lock:
        print(json.dumps([threading.get_native_id(), chain]), flush=True)
class K:
    def m(self):
        yield from self.spin()
    def spin(self):
        report()
        while True:
            pass
        yield 1
def a_outer():
    for _ in K().m():
        pass
def größe():
    report()
    while True:
        pass
def b_outer():
    größe()
for target in (a_outer, b_outer):
    threading.Thread(target=target, daemon=True).start()
sys.stdin.read()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_peek_at_a_python_process_shows_each_thread_s_python_stack() {
    // As `py-spy dump` shows them: every frame's qualified name, file and
    // line, read from the interpreter's memory at the trigger.
    let pythons = readable_cpythons_here();
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    for (python, version) in pythons {
        let mut child = Command::new(&python)
            .args(["-c", PEEKED_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("python runs");
        let mut lines = std::io::BufRead::lines(std::io::BufReader::new(
            child.stdout.take().expect("its output"),
        ));
        let chains: Vec<serde_json::Value> = (0..2)
            .map(|_| {
                let line = lines.next().expect("a chain").expect("read");
                serde_json::from_str(&line).expect("JSON")
            })
            .collect();
        let pid = child.id();
        let workload: Workload = child.into();
        let report = client
            .peek(profilerd_client::v1::PeekRequest { pid })
            .await
            .expect("Peek")
            .into_inner();
        for chain in &chains {
            let tid = chain[0].as_u64().expect("a native id") as u32;
            let frames = chain[1].as_array().expect("frames");
            let thread = report
                .threads
                .iter()
                .find(|thread| thread.tid == tid)
                .unwrap_or_else(|| panic!("{version}: thread {tid} in {}", report.text));
            let shown = &thread.python_at_trigger;
            assert_eq!(
                shown.len(),
                frames.len(),
                "{version}: {shown:#?} vs {frames:?}"
            );
            for (at, (shown, frame)) in shown.iter().zip(frames).enumerate() {
                let (name, file, line) = (
                    frame[0].as_str().unwrap(),
                    frame[1].as_str().unwrap(),
                    frame[2].as_u64().unwrap(),
                );
                // The innermost frame spins a line or two below.
                let expected = match at {
                    0 => format!("{name} ({file}:"),
                    _ => format!("{name} ({file}:{line})"),
                };
                assert!(
                    shown.starts_with(&expected),
                    "{version}: {shown} vs {expected}"
                );
            }
        }
        assert!(report.text.contains("in Python:"), "{}", report.text);
        drop(workload);
    }
}

/// A chain of Python calls through a C function: `<module>` → `a` → `b`
/// → (the builtin `map`, in C, calling back into Python) → `c`, which
/// spins.
const CHAIN_SCRIPT: &str = r#"
import time
def c(n):
    s = 0
    for i in range(n):
        s += i * i
    return s
def b(seconds):
    end = time.time() + seconds
    while time.time() < end:
        list(map(c, [20000]))
def a():
    b(30)
a()
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_profile_of_a_python_process_shows_its_python_functions_in_place_of_the_evaluation_loop()
{
    // As py-spy --native shows them: each call of the evaluation loop
    // replaced by the Python functions it ran, the C frames between them
    // kept, for every CPython 3.11 to 3.13 here, with no -X perf.
    let pythons = readable_cpythons_here();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("chain.py");
    std::fs::write(&script, CHAIN_SCRIPT).expect("the script is written");
    let daemon = Daemon::start().await;
    let mut client = daemon.client().await;
    for (python, version) in pythons {
        let workload: Workload = Command::new(&python)
            .arg(&script)
            .spawn()
            .expect("python runs")
            .into();
        let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
        assert_python_chain(&stacks, &format!("{version} ({})", python.display()));
        // Each function at the line it runs (the caller's at its call),
        // in the script's file, as the flat report's rows say.
        let options = crate::support::options(profilerd_client::v1::Format::Flat);
        let reply = crate::support::profile(
            &mut client,
            &[workload.pid()],
            std::time::Duration::from_secs(1),
            options,
        )
        .await;
        let flat = String::from_utf8(reply.report).expect("UTF-8");
        let file = script.display().to_string();
        let row = |line: u32, function: &str| {
            flat.lines().any(|row| {
                let cells: Vec<&str> = row.split_whitespace().collect();
                cells.len() >= 3
                    && cells[cells.len() - 1] == function
                    && cells[cells.len() - 2] == line.to_string()
                    && cells[cells.len() - 3] == file
            })
        };
        for (line, function) in [(14, "<module>"), (13, "a"), (11, "b")] {
            assert!(
                row(line, function),
                "{version}: {function} at line {line}: {flat}"
            );
        }
        assert!(
            row(5, "c") || row(6, "c"),
            "{version}: c at its loop's lines: {flat}"
        );
        drop(workload);
    }
    // What it took, and its bounds, in the status.
    let python = client
        .get_status(profilerd_client::v1::GetStatusRequest::default())
        .await
        .expect("Status")
        .into_inner()
        .symbolizer
        .and_then(|symbolizer| symbolizer.python)
        .expect("the status says what CPython interpreters were found");
    assert!(
        python.processes_named >= 1
            && python.processes_limit > 0
            && python.code_objects_read >= 4
            && python.code_objects_held >= 4
            && python.code_objects_limit >= python.code_objects_held
            && python.code_objects_bytes > 0
            && python.code_objects_bytes <= python.code_objects_bytes_limit,
        "{python:?}"
    );
}

/// At least 50 samples of the chain script, 80% of them in `c`, and 95% of
/// those carrying `<module>`, `a`, `b`, the C functions of `map`, `c`, from
/// `_start`, with no evaluation loop frame left.
fn assert_python_chain(stacks: &[(Vec<String>, u64)], what: &str) {
    let in_c: Vec<_> = stacks
        .iter()
        .filter(|(frames, _)| frames.iter().any(|f| f == "c"))
        .collect();
    let c_samples: u64 = in_c.iter().map(|(_, count)| count).sum();
    let expected = ["<module>", "a", "b", "c"];
    let whole: u64 = in_c
        .iter()
        .filter(|(frames, _)| {
            let python: Vec<&String> = frames
                .iter()
                .filter(|f| expected.contains(&f.as_str()))
                .collect();
            let b = frames.iter().position(|f| f == "b");
            let c = frames.iter().position(|f| f == "c");
            frames.first().is_some_and(|f| f == "_start")
                && python.iter().map(|f| f.as_str()).eq(expected)
                // The C functions between the two loops (`map`'s, and the
                // call back into Python; Debian's are unnamed), kept.
                && b.zip(c).is_some_and(|(b, c)| c > b + 1)
                && !frames.iter().any(|f| f.starts_with("_PyEval_EvalFrameDefault"))
        })
        .map(|(_, count)| count)
        .sum();
    assert!(
        c_samples as f64 >= 0.8 * total(stacks) as f64 && c_samples >= 50,
        "{what}: {c_samples} of {} samples in c: {stacks:#?}",
        total(stacks)
    );
    assert!(
        whole as f64 >= 0.95 * c_samples as f64,
        "{what}: {whole} of {c_samples} samples in c carry <module>, a, b, map, c from _start: \
         {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_python_process_in_a_pid_namespace_of_its_own_shows_its_python_functions() {
    // As in a container: the interpreter knows its threads by their ids in
    // its own pid namespace (its main thread is 1 there).
    let python = Path::new("/usr/bin/python3.11");
    assert!(python.is_file(), "Debian's python3.11 is a test dependency");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("chain.py");
    std::fs::write(&script, CHAIN_SCRIPT).expect("the script is written");
    let daemon = Daemon::start().await;
    let unshare: Workload = Command::new("unshare")
        // The interpreter killed with unshare (a Workload's end), not left
        // to spin beside the other tests.
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .arg(python)
        .arg(&script)
        .spawn()
        .expect("unshare (util-linux) runs")
        .into();
    let children = format!("/proc/{0}/task/{0}/children", unshare.pid());
    let mut pid = None;
    for _ in 0..200 {
        pid = std::fs::read_to_string(&children)
            .ok()
            .and_then(|children| children.split_whitespace().next()?.parse::<u32>().ok());
        if pid.is_some() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    let pid = pid.expect("unshare forks the interpreter");
    let own = std::fs::read_link("/proc/self/ns/pid").expect("our pid namespace");
    let theirs = std::fs::read_link(format!("/proc/{pid}/ns/pid")).expect("its pid namespace");
    assert_ne!(
        own, theirs,
        "the interpreter runs in a pid namespace of its own"
    );
    let stacks = folded_profile_of(&daemon, pid, 2).await;
    // Killed before the assertions, which may fail.
    let _ = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
    drop(unshare);
    assert_python_chain(&stacks, "python3.11 in its own pid namespace");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_wall_clock_profile_of_a_python_process_shows_the_python_function_that_waits() {
    // Off CPU too: a wait's stack, read when the thread is switched out,
    // carries the Python functions that wait.
    let (daemon, workload) = debian_python_running(
        "import time\n\
         def waits():\n    time.sleep(0.05)\n\
         def works():\n    s = 0\n    for i in range(100000):\n        s += i\n\
         def loop():\n    while True:\n        waits()\n        works()\n\
         loop()\n",
    )
    .await;
    let (stacks, _) =
        crate::offcpu::wall_profile(&daemon, workload.pid(), std::time::Duration::from_secs(2))
            .await;
    let chain = |function: &str, stack: &[String]| {
        let python: Vec<&str> = stack
            .iter()
            .map(String::as_str)
            .filter(|f| ["<module>", "loop", "waits", "works"].contains(f))
            .collect();
        python == ["<module>", "loop", function]
    };
    let waiting = crate::support::samples_where(&stacks, |stack| {
        stack.iter().any(|f| f.starts_with("[off-cpu"))
    });
    let in_waits = crate::support::samples_where(&stacks, |stack| {
        chain("waits", stack) && stack.iter().any(|f| f.starts_with("[off-cpu"))
    });
    assert!(
        waiting as f64 >= 0.5 * total(&stacks) as f64,
        "{waiting} of {} samples off CPU: {stacks:#?}",
        total(&stacks)
    );
    assert!(
        in_waits as f64 >= 0.95 * waiting as f64,
        "{in_waits} of {waiting} samples off CPU carry <module>, loop, waits: {stacks:#?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_frames_past_those_read_are_said_cut_short() {
    // 200 frames deep: the programs read the innermost 128 (`spin` and 127
    // of `down`); the stack says why the rest is missing, rootward of them.
    let (daemon, workload) = debian_python_running(
        "def spin():\n    s = 0\n    while True:\n        s += 1\n\
         def down(n):\n    return spin() if n == 0 else down(n - 1)\n\
         down(200)\n",
    )
    .await;
    let stacks = folded_profile_of(&daemon, workload.pid(), 2).await;
    let marker = "[python frames cut: more than 128 read]";
    let in_spin = crate::support::samples_where(&stacks, |stack| stack.iter().any(|f| f == "spin"));
    let said = crate::support::samples_where(&stacks, |stack| {
        let first_down = stack.iter().position(|f| f == "down");
        first_down.is_some_and(|at| at > 0 && stack[at - 1] == marker)
            && stack.iter().filter(|f| *f == "down").count() == 127
            && stack.iter().any(|f| f == "spin")
    });
    assert!(in_spin >= 50, "too few samples: {stacks:#?}");
    assert!(
        said as f64 >= 0.95 * in_spin as f64,
        "{said} of {in_spin} samples say their Python frames were cut: {stacks:#?}"
    );
}

/// A daemon, and Debian's python3.11 running `script` (`-c`) past its
/// start.
pub(crate) async fn debian_python_running(script: &str) -> (Daemon, Workload) {
    let python = Path::new("/usr/bin/python3.11");
    assert!(python.is_file(), "Debian's python3.11 is a test dependency");
    let daemon = Daemon::start().await;
    let workload: Workload = Command::new(python)
        .args(["-c", script])
        .spawn()
        .expect("python runs")
        .into();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    (daemon, workload)
}
