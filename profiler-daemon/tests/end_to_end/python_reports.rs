//! Python's own frames in the formats Python users read: `--format pstats`
//! through `profilerctl`, read by Python's `pstats` module.

use std::{path::Path, process::Command};

use crate::support::{Daemon, Workload};

/// Two threads of known chains: the main thread `outer → middle → spin`,
/// a worker `w_outer → sorted(…, key=kf)` with `kf` spinning (two Python
/// segments around a C builtin). They share the GIL: each runs about half
/// the time.
const TWO_THREADS: &str = "import threading
def spin():
    s = 0
    while True:
        s += 1
def middle():
    spin()
def outer():
    middle()
def kf(x):
    s = 0
    for i in range(200000):
        s += i
    return x
def w_outer():
    while True:
        sorted(range(50), key=kf)
threading.Thread(target=w_outer, daemon=True).start()
outer()
";

/// The report of process `pid` over the next `seconds`, as `options` ask.
async fn profile_report(
    daemon: &Daemon,
    pid: u32,
    seconds: u64,
    options: profilerd_client::v1::ReportOptions,
) -> Vec<u8> {
    let mut client = daemon.client().await;
    let duration = std::time::Duration::from_secs(seconds);
    crate::support::profile(&mut client, &[pid], duration, options)
        .await
        .report
}

/// What Python's `pstats` reads from the file at `path`: per function
/// `file:line(name)`, `[samples, tottime, cumtime, [callers]]`, as JSON.
fn pstats_read_by_python(path: &Path) -> serde_json::Value {
    let script = "import json, pstats, sys
s = pstats.Stats(sys.argv[1])
name = lambda f: '%s:%d(%s)' % f
print(json.dumps({name(f): [nc, tt, ct, sorted(name(c) for c in callers)]
                  for f, (cc, nc, tt, ct, callers) in s.stats.items()}))
";
    let output = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .arg(path)
        .output()
        .expect("Debian's python3 (a test dependency) runs");
    assert!(
        output.status.success(),
        "pstats cannot read {}: {}",
        path.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("JSON")
}

/// A daemon serving HTTP too (its address), and Debian's python3.11
/// running [`TWO_THREADS`] from a file of the temporary directory (kept as
/// long as it is).
async fn two_threads_running() -> (Daemon, String, Workload, tempfile::TempDir) {
    let python = Path::new("/usr/bin/python3.11");
    assert!(python.is_file(), "Debian's python3.11 is a test dependency");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("two_threads.py");
    std::fs::write(&script, TWO_THREADS).expect("the script is written");
    let (daemon, http) = crate::http::daemon_over_http().await;
    let workload: Workload = Command::new(python)
        .arg(&script)
        .spawn()
        .expect("python runs")
        .into();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    (daemon, http, workload, dir)
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pstats_report_of_a_python_process_is_read_by_python_s_pstats() {
    let (daemon, http, workload, dir) = two_threads_running().await;
    let script = dir.path().join("two_threads.py");
    let pid = workload.pid().to_string();
    let file = dir.path().join("py.pstats");
    let output = crate::support::profilerctl(
        &daemon.socket,
        &[
            "profile",
            "--pid",
            &pid,
            "--duration",
            "3s",
            "--format",
            "pstats",
            "--output",
            file.to_str().expect("a UTF-8 path"),
        ],
    )
    .await;
    assert!(
        output.status.success(),
        "profilerctl: {}",
        String::from_utf8_lossy(&output.stderr)
    );

    // `python -m pstats`, sorted by own time: the two spinning functions
    // first, named as cProfile names them (file, definition line, name).
    let path = script.display().to_string();
    let mut browser = Command::new("/usr/bin/python3")
        .args(["-m", "pstats"])
        .arg(&file)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("python3 -m pstats runs");
    std::io::Write::write_all(
        &mut browser.stdin.take().expect("its input"),
        b"sort tottime\nstats 2\nquit\n",
    )
    .expect("commands written");
    let shown = browser.wait_with_output().expect("pstats ends");
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    let rows: Vec<&str> = shown.lines().filter(|line| line.contains(&path)).collect();
    let hot: std::collections::BTreeSet<&str> = rows
        .iter()
        .filter_map(|row| row.split_whitespace().last())
        .collect();
    let expected_hot = [format!("{path}:10(kf)"), format!("{path}:2(spin)")];
    assert!(
        hot.iter()
            .copied()
            .eq(expected_hot.iter().map(String::as_str)),
        "the two rows of most own time are spin and kf: {shown}"
    );

    // Each function's callers are its Python callers (sorted's C frames
    // skipped); a spinning function's time is its own.
    let stats = pstats_read_by_python(&file);
    let function = |line: u32, name: &str| {
        let key = format!("{path}:{line}({name})");
        stats
            .get(&key)
            .unwrap_or_else(|| panic!("no {key} in {stats:#}"))
            .clone()
    };
    let callers = |line: u32, name: &str| -> Vec<String> {
        serde_json::from_value(function(line, name)[3].clone()).expect("callers")
    };
    assert_eq!(callers(2, "spin"), [format!("{path}:6(middle)")]);
    assert_eq!(callers(6, "middle"), [format!("{path}:8(outer)")]);
    assert_eq!(callers(8, "outer"), [format!("{path}:1(<module>)")]);
    assert_eq!(callers(10, "kf"), [format!("{path}:15(w_outer)")]);
    let w_outer_callers = callers(15, "w_outer");
    assert!(
        w_outer_callers
            .iter()
            .all(|caller| caller.contains("threading.py") && caller.ends_with("(Thread.run)")),
        "w_outer is called by Thread.run: {w_outer_callers:?}"
    );
    for (line, name) in [(2, "spin"), (10, "kf")] {
        let stats = function(line, name);
        let samples = stats[0].as_u64().expect("samples");
        let (own, cumulative) = (stats[1].as_f64().unwrap(), stats[2].as_f64().unwrap());
        assert!(samples >= 30, "{name}: too few samples: {stats}");
        assert!(
            own >= 0.9 * cumulative && own <= cumulative,
            "{name}'s time is its own: {stats}"
        );
    }

    // The same over HTTP, for a browser's download.
    let (code, body) = crate::http::curl(
        &format!("{http}/api/query?since=3&format=pstats&pid={pid}"),
        &[],
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let downloaded = dir.path().join("downloaded.pstats");
    std::fs::write(&downloaded, body).expect("written");
    let stats = pstats_read_by_python(&downloaded);
    assert!(stats.get(format!("{path}:2(spin)")).is_some(), "{stats:#}");

    // pprof carries the Python functions with their file and definition
    // line (its function table's start_line), as Pyroscope and OTLP
    // exports, made from the same locations, do.
    let (code, body) = crate::http::curl(
        &format!("{http}/api/query?since=3&format=pprof&pid={pid}"),
        &[],
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let pprof = crate::support::decode_pprof(&body);
    let string = |index: i64| pprof.string_table[index as usize].as_str();
    let functions: Vec<(&str, &str, i64)> = (pprof.function.iter())
        .map(|f| (string(f.name), string(f.filename), f.start_line))
        .collect();
    for (name, line) in [("spin", 2), ("middle", 6), ("kf", 10), ("w_outer", 15)] {
        assert!(
            functions.contains(&(name, path.as_str(), line)),
            "{name} of {path} at line {line}: {functions:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_pstats_report_without_python_frames_is_refused_saying_why() {
    let daemon = Daemon::start().await;
    let workload = Workload::spawn(&crate::support::build_workload("split"), &[]);
    let pid = workload.pid().to_string();
    let output = crate::support::profilerctl(
        &daemon.socket,
        &[
            "profile",
            "--pid",
            &pid,
            "--duration",
            "1s",
            "--format",
            "pstats",
            "--output",
            "/dev/null",
        ],
    )
    .await;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success()
            && stderr.contains("no sample of the profile holds a Python frame"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn python_stacks_without_the_interpreter_s_frames_are_py_spy_s() {
    // As py-spy shows them: each thread's Python functions from its first,
    // the interpreter's C frames (the evaluation loop, sorted's own) and
    // how the thread started left out.
    let (daemon, http, workload, _dir) = two_threads_running().await;
    let mut options = crate::support::options(profilerd_client::v1::Format::Folded);
    options.interpreter = Some(false);
    let report = profile_report(&daemon, workload.pid(), 2, options).await;
    let stacks = crate::support::folded(&report);
    // Kernel frames (a sample taken in the kernel) stay, on top.
    let user = |stack: &[String]| -> Vec<String> {
        let user = stack.iter().filter(|frame| !frame.ends_with("_[k]"));
        user.cloned().collect()
    };
    let main = ["<module>", "outer", "middle", "spin"];
    let worker = [
        "Thread._bootstrap",
        "Thread._bootstrap_inner",
        "Thread.run",
        "w_outer",
        "kf",
    ];
    for (chain, leaf) in [(&main[..], "spin"), (&worker[..], "kf")] {
        let in_leaf =
            crate::support::samples_where(&stacks, |stack| stack.iter().any(|f| f == leaf));
        let exactly = crate::support::samples_where(&stacks, |stack| user(stack) == chain);
        assert!(in_leaf >= 30, "too few samples in {leaf}: {stacks:#?}");
        assert!(
            exactly as f64 >= 0.95 * in_leaf as f64,
            "{exactly} of {in_leaf} samples in {leaf} are exactly {chain:?}: {stacks:#?}"
        );
    }
    // No interpreter frame anywhere, nor how the threads started.
    let with_native = crate::support::samples_where(&stacks, |stack| {
        user(stack).iter().any(|frame| {
            frame.starts_with("_start")
                || frame.starts_with("python3.11")
                || frame.contains("PyEval")
                || frame.starts_with("start_thread")
        })
    });
    assert_eq!(with_native, 0, "{stacks:#?}");

    // The same over HTTP (`interpreter=false`).
    let (code, body) = crate::http::curl(
        &format!(
            "{http}/api/query?since=2&format=folded&pid={}&interpreter=false&python_lines=false",
            workload.pid()
        ),
        &[],
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let stacks = crate::support::folded(&body);
    let exactly = crate::support::samples_where(&stacks, |stack| user(stack) == main);
    // (The window reaches back to the first samples of the threads, before
    // their Python frames were read: those stacks are native, and whole.)
    let python_from_native = crate::support::samples_where(&stacks, |stack| {
        stack.iter().any(|f| f == "spin" || f == "kf")
            && !["<module>", "Thread._bootstrap"].contains(&stack[0].as_str())
    });
    assert!(exactly > 0 && python_from_native == 0, "{stacks:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_waiting_for_the_gil_says_so_in_a_wall_clock_profile() {
    // Two threads spin in Python, so each waits for the GIL while the other
    // holds it; a third sleeps, and takes the GIL back after each sleep.
    let (daemon, workload) = crate::interpreted::debian_python_running(
        "import threading, time\n\
         def spin_a():\n    s = 0\n    while True:\n        s += 1\n\
         def spin_b():\n    s = 0\n    while True:\n        s += 1\n\
         def sleeper():\n    while True:\n        time.sleep(0.01)\n\
         threading.Thread(target=spin_b, daemon=True).start()\n\
         threading.Thread(target=sleeper, daemon=True).start()\n\
         spin_a()\n",
    )
    .await;
    let (stacks, _) =
        crate::offcpu::wall_profile(&daemon, workload.pid(), std::time::Duration::from_secs(2))
            .await;
    let marker = "[waiting for the GIL]";
    // Asleep or woken and waiting for a CPU (still in the GIL's wait).
    let off_cpu =
        |stack: &[String]| (stack.iter()).any(|f| f.starts_with("[off-cpu") || f == "[runqueue]");
    let has = |stack: &[String], frame: &str| stack.iter().any(|f| f == frame);
    for spinner in ["spin_a", "spin_b"] {
        // In the GIL's wait: on its condition variable (not preempted, in
        // the run queue, while running Python code).
        let in_the_wait = |stack: &[String]| {
            has(stack, spinner)
                && off_cpu(stack)
                && (stack.iter()).any(|f| f.contains("pthread_cond") && f.contains("wait"))
        };
        let waiting = crate::support::samples_where(&stacks, in_the_wait);
        // Under the spinner, on libc's wait (the interpreter's frames
        // between).
        let marked = crate::support::samples_where(&stacks, |stack| {
            let at = |frame: &str| stack.iter().position(|f| f == frame);
            at(spinner)
                .zip(at(marker))
                .is_some_and(|(spinner, marker)| {
                    marker > spinner && stack[marker + 1].contains("pthread_cond")
                })
        });
        assert!(waiting >= 20, "{spinner}: too few waits: {stacks:#?}");
        let unmarked: Vec<_> = (stacks.iter())
            .filter(|(stack, _)| in_the_wait(stack) && !has(stack, marker))
            .collect();
        assert!(
            marked as f64 >= 0.99 * waiting as f64,
            "{marked} of {spinner}'s {waiting} waits say they wait for the GIL; not: {unmarked:#?}"
        );
    }
    // Sleeping is not waiting for the GIL; running never is.
    let asleep_marked = crate::support::samples_where(&stacks, |stack| {
        stack.iter().any(|f| f.contains("clock_nanosleep")) && has(stack, marker)
    });
    let running_marked =
        crate::support::samples_where(&stacks, |stack| !off_cpu(stack) && has(stack, marker));
    assert_eq!((asleep_marked, running_marked), (0, 0), "{stacks:#?}");
    let sleeps = crate::support::samples_where(&stacks, |stack| {
        has(stack, "sleeper") && stack.iter().any(|f| f.contains("clock_nanosleep"))
    });
    assert!(sleeps > 0, "the sleeper's sleeps: {stacks:#?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn code_compiled_and_thrown_away_over_and_over_is_never_named_for_another() {
    // Each round compiles a module whose g_N calls f_N, runs it and drops
    // it: its code objects are freed, and the next round's often take their
    // addresses (their names' strings too). A frame named from a cache of a
    // freed code object, or read after another took its place, would put
    // g_N over f_M (it did, before the check held the name's hash).
    let (daemon, workload) = crate::interpreted::debian_python_running(
        "import itertools\n\
         for i in itertools.count():\n\
         \x20   src = ('def f_%d():\\n    s = 0\\n    for j in range(30000):\\n        s += j\\n'\n\
         \x20          'def g_%d():\\n    f_%d()\\n'\n\
         \x20          'g_%d()\\n') % (i, i, i, i)\n\
         \x20   exec(compile(src, 'gen_%d.py' % i, 'exec'), {})\n",
    )
    .await;
    let stacks = crate::unwinding::folded_profile_of(&daemon, workload.pid(), 2).await;
    let number = |stack: &[String], prefix: &str| -> Option<String> {
        (stack.iter()).find_map(|f| f.strip_prefix(prefix).map(str::to_owned))
    };
    let in_f = crate::support::samples_where(&stacks, |stack| number(stack, "f_").is_some());
    let matched = crate::support::samples_where(&stacks, |stack| {
        number(stack, "f_").is_some() && number(stack, "f_") == number(stack, "g_")
    });
    let mismatched: Vec<_> = (stacks.iter())
        .filter(|(stack, _)| {
            let (f, g) = (number(stack, "f_"), number(stack, "g_"));
            f.is_some() && g.is_some() && f != g
        })
        .collect();
    // A code object gone before the daemon read it is shown by address,
    // never by another's name.
    let g_unnamed = crate::support::samples_where(&stacks, |stack| {
        number(stack, "f_").is_some()
            && number(stack, "g_").is_none()
            && stack.iter().any(|f| f.starts_with("[python code 0x"))
    });
    assert!(in_f >= 50, "too few samples in f_N: {stacks:#?}");
    assert!(mismatched.is_empty(), "named for another: {mismatched:#?}");
    assert_eq!(matched + g_unnamed, in_f, "{stacks:#?}");
    assert!(
        matched as f64 >= 0.5 * in_f as f64,
        "{matched} of {in_f} samples in f_N under their g_N: {stacks:#?}"
    );
}

/// The program: three threads, each recording its own native id and
/// its Python chain (`sys._getframe`: qualified name, file, line) once at
/// its leaf, then spinning there. Main: `outer → middle → spin`; a worker:
/// `w_outer → sorted(…, key=kf)` (two Python segments around a C
/// builtin); a third: a method `K.m` iterating a generator `gen` that calls
/// `ñandú` (a non-ASCII name).
const THREE_CHAINS: &str = "import json, os, sys, threading
OUT = sys.argv[1]
recorded = {}
lock = threading.Lock()
def record():
    f = sys._getframe(1)
    chain = []
    while f is not None:
        chain.append([f.f_code.co_qualname, f.f_code.co_filename, f.f_lineno])
        f = f.f_back
    with lock:
        recorded[threading.get_native_id()] = chain[::-1]
        if len(recorded) == 3:
            with open(OUT + '.tmp', 'w') as out:
                json.dump(recorded, out)
            os.rename(OUT + '.tmp', OUT)
def spin():
    record()
    s = 0
    while True:
        s += 1
def middle():
    spin()
def outer():
    middle()
def kf(x):
    if x == 0:
        record()
    s = 0
    for i in range(100000):
        s += i
    return x
def w_outer():
    data = list(range(1000))
    while True:
        sorted(data, key=kf)
first = [True]
def ñandú():
    if first[0]:
        first[0] = False
        record()
    s = 0
    for i in range(100000):
        s += i
    return s
def gen():
    while True:
        yield ñandú()
class K:
    def m(self):
        for _ in gen():
            pass
threading.Thread(target=w_outer, daemon=True).start()
threading.Thread(target=K().m, daemon=True).start()
outer()
";

/// A Python frame: qualified name, file, line.
type PythonFrame = (String, String, i64);

#[tokio::test(flavor = "multi_thread")]
async fn each_thread_s_samples_carry_the_python_chain_it_recorded_itself() {
    let python = Path::new("/usr/bin/python3.11");
    assert!(python.is_file(), "Debian's python3.11 is a test dependency");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let script = dir.path().join("three_chains.py");
    let recorded = dir.path().join("chains.json");
    std::fs::write(&script, THREE_CHAINS).expect("the script is written");
    let daemon = Daemon::start().await;
    let workload: Workload = Command::new(python)
        .arg(&script)
        .arg(&recorded)
        .spawn()
        .expect("python runs")
        .into();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !recorded.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the threads never recorded their chains"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    // Each thread's chain: (qualified name, file, line) root first.
    let chains: std::collections::HashMap<String, Vec<PythonFrame>> =
        serde_json::from_slice(&std::fs::read(&recorded).expect("read")).expect("JSON");
    // Past the process's first second, whose samples the kernel takes
    // before it knows the process runs Python.
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let mut options = crate::support::options(profilerd_client::v1::Format::Pprof);
    options.groupby = profilerd_client::v1::GroupBy::Thread as i32;
    options.interpreter = Some(false);
    let report = profile_report(&daemon, workload.pid(), 3, options).await;
    let pprof = crate::support::decode_pprof(&report);
    let string = |index: i64| pprof.string_table[index as usize].clone();
    let functions: std::collections::HashMap<u64, (String, String)> = (pprof.function.iter())
        .map(|f| (f.id, (string(f.name), string(f.filename))))
        .collect();
    let locations: std::collections::HashMap<u64, PythonFrame> = (pprof.location.iter())
        .map(|location| {
            let line = &location.line[0];
            let (name, file) = functions[&line.function_id].clone();
            (location.id, (name, file, line.line))
        })
        .collect();
    // Per thread: samples, and samples whose Python frames are its chain
    // (names and files; lines too but the leaf's, which runs its loop).
    let mut counts: std::collections::HashMap<String, (i64, i64)> = Default::default();
    let mut unlike: Vec<(String, Vec<PythonFrame>)> = Vec::new();
    for sample in &pprof.sample {
        let tid = (sample.label.iter())
            .find(|label| string(label.key) == "tid")
            .map(|label| label.num.to_string())
            .expect("a tid label");
        let python: Vec<PythonFrame> = (sample.location_id.iter().rev())
            .map(|id| locations[id].clone())
            .filter(|(_, file, _)| file.ends_with(".py"))
            .collect();
        let Some(chain) = chains.get(&tid) else {
            continue;
        };
        let alike = python.len() == chain.len()
            && python
                .iter()
                .zip(chain)
                .enumerate()
                .all(|(depth, (got, want))| {
                    got.0 == want.0
                        && got.1 == want.1
                        && (depth + 1 == chain.len() || got.2 == want.2)
                });
        let count = &mut counts.entry(tid.clone()).or_default();
        count.0 += sample.value[0];
        if alike {
            count.1 += sample.value[0];
        } else {
            unlike.push((tid, python));
        }
    }
    assert_eq!(
        counts.len(),
        3,
        "each thread sampled: {counts:?} {chains:?}"
    );
    for (tid, (samples, alike)) in &counts {
        assert!(*samples >= 30, "thread {tid}: too few samples: {counts:?}");
        assert!(
            *alike as f64 >= 0.99 * *samples as f64,
            "thread {tid}: {alike} of {samples} samples carry its chain {:?}; others: {unlike:#?}",
            chains[tid]
        );
    }
}

/// One thread collects over and over (a heap of 200,000 lists to go
/// through); another spins in Python: it runs only while it holds the GIL,
/// so never while the other collects.
const COLLECTING: &str = "import gc, threading
junk = [[i] for i in range(200000)]
def spin():
    s = 0
    while True:
        s += 1
def collect_often():
    while True:
        gc.collect()
threading.Thread(target=spin, daemon=True).start()
collect_often()
";

#[tokio::test(flavor = "multi_thread")]
async fn the_garbage_collector_s_time_shows_as_gc_under_the_python_function_that_ran_it() {
    let daemon = Daemon::start().await;
    for (python, version) in crate::interpreted::readable_cpythons_here() {
        let workload: Workload = Command::new(&python)
            .args(["-c", COLLECTING])
            .spawn()
            .expect("python runs")
            .into();
        // Past its first samples, taken before the kernel knows it.
        tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
        let stacks = crate::unwinding::folded_profile_of(&daemon, workload.pid(), 2).await;
        let at = |stack: &[String], frame: &str| stack.iter().position(|f| f == frame);
        let collecting =
            crate::support::samples_where(&stacks, |stack| at(stack, "collect_often").is_some());
        // <GC> leafward of collect_often, no Python frame between.
        let under_gc = crate::support::samples_where(&stacks, |stack| {
            at(stack, "collect_often")
                .zip(at(stack, "<GC>"))
                .is_some_and(|(caller, gc)| caller < gc)
        });
        let spinning = crate::support::samples_where(&stacks, |stack| at(stack, "spin").is_some());
        let spinning_under_gc = crate::support::samples_where(&stacks, |stack| {
            at(stack, "spin").is_some() && at(stack, "<GC>").is_some()
        });
        let what = format!("{version} ({})", python.display());
        assert!(
            collecting >= 30 && spinning >= 10,
            "{what}: too few samples: {stacks:#?}"
        );
        assert!(
            under_gc as f64 >= 0.9 * collecting as f64,
            "{what}: {under_gc} of {collecting} samples in collect_often show <GC> under it: \
             {stacks:#?}"
        );
        assert_eq!(spinning_under_gc, 0, "{what}: {stacks:#?}");
    }
}

/// Three threads, each spinning for good at the end of a known chain:
/// main `outer → middle → spin`; `w_outer → sorted(…, key=kf)`; a method
/// `K.m` iterating a generator `gen` that calls `ñandú`.
const STILL_CHAINS: &str = "import threading
def spin():
    while True:
        pass
def middle():
    spin()
def outer():
    middle()
def kf(x):
    while True:
        pass
def w_outer():
    sorted(range(10), key=kf)
def ñandú():
    while True:
        pass
def gen():
    yield ñandú()
class K:
    def m(self):
        for _ in gen():
            pass
threading.Thread(target=w_outer, daemon=True).start()
threading.Thread(target=K().m, daemon=True).start()
outer()
";

#[tokio::test(flavor = "multi_thread")]
async fn a_peek_s_python_stacks_agree_with_py_spy_dump() {
    let python = std::env::var("PROFILERD_TEST_PYTHON").expect(
        "PROFILERD_TEST_PYTHON names the test venv's Python, with py-spy beside it: run \
         the tests with `cargo xtask test`, which sets it up",
    );
    let py_spy = Path::new(&python).with_file_name("py-spy");
    let (daemon, workload) = crate::interpreted::debian_python_running(STILL_CHAINS).await;
    let pid = workload.pid();
    let dumped = Command::new(&py_spy)
        .args(["dump", "--json", "--pid", &pid.to_string()])
        .output()
        .expect("py-spy runs");
    assert!(
        dumped.status.success(),
        "py-spy dump: {}",
        String::from_utf8_lossy(&dumped.stderr)
    );
    let dumped: serde_json::Value = serde_json::from_slice(&dumped.stdout).expect("JSON");
    let mut client = daemon.client().await;
    let peek = client
        .peek(profilerd_client::v1::PeekRequest { pid })
        .await
        .expect("Peek")
        .into_inner();
    let threads = dumped.as_array().expect("py-spy's threads");
    assert_eq!(threads.len(), 3, "{dumped:#}");
    for thread in threads {
        let tid = thread["os_thread_id"].as_u64().expect("a thread id") as u32;
        let frames = thread["frames"].as_array().expect("frames");
        // py-spy's frames as the peek writes them, innermost first (the
        // innermost's line: wherever its loop was at either instant).
        let expected: Vec<String> = frames
            .iter()
            .enumerate()
            .map(|(at, frame)| {
                let (name, file) = (
                    frame["name"].as_str().unwrap(),
                    frame["filename"].as_str().unwrap(),
                );
                match at {
                    0 => format!("{name} ({file}:"),
                    _ => format!("{name} ({file}:{})", frame["line"]),
                }
            })
            .collect();
        let shown = &(peek.threads.iter())
            .find(|shown| shown.tid == tid)
            .unwrap_or_else(|| panic!("thread {tid} in {}", peek.text))
            .python_at_trigger;
        assert!(
            shown.len() == expected.len()
                && shown
                    .iter()
                    .zip(&expected)
                    .all(|(shown, expected)| shown.starts_with(expected)),
            "thread {tid}: the peek shows {shown:#?}, py-spy {expected:#?}"
        );
    }
}
