use super::super::{Found, PythonProcess, code_objects::ProcMem, inspect};
use super::*;

/// Two threads blocked at known places (one through a method and a
/// generator, one in a function named beyond ASCII), and each thread's
/// chain as the interpreter gives it (`sys._current_frames`, innermost
/// first: qualified name, file, line), keyed by native thread id.
const SCRIPT: &str = r#"
import json, sys, threading, time
stop = threading.Event()
class K:
    def m(self):
        yield from self.inner()
    def inner(self):
        stop.wait()
        yield 1
def a_outer():
    for _ in K().m():
        pass
def größe():
    stop.wait()
def b_outer():
    größe()
workers = [threading.Thread(target=a_outer), threading.Thread(target=b_outer)]
for worker in workers:
    worker.start()
time.sleep(0.3)
frames = sys._current_frames()
chains = {}
for worker in workers:
    frame, chain = frames[worker.ident], []
    while frame is not None:
        chain.append([frame.f_code.co_qualname, frame.f_code.co_filename, frame.f_lineno])
        frame = frame.f_back
    chains[worker.native_id] = chain
print(json.dumps(chains), flush=True)
sys.stdin.read()
stop.set()
"#;

#[test]
fn the_python_stacks_of_a_live_interpreter_are_its_own() {
    let pythons = super::super::tests::runnable_pythons();
    if pythons.is_empty() {
        eprintln!("no CPython 3.11+ on this machine: nothing to read");
        return;
    }
    for python in pythons {
        let (mut child, line) = super::super::tests::run_until_it_prints(&python, SCRIPT);
        let pid = child.id();
        let process = python_process(pid);
        let memory = ProcMem::open(pid).expect("its memory opens");
        let threads = python_stacks(&memory, &process)
            .unwrap_or_else(|err| panic!("{}: {err}", python.display()));
        let expected: serde_json::Value = serde_json::from_str(&line).expect("JSON");
        let expected = expected.as_object().expect("chains by thread");
        // The main thread and the two workers.
        assert_eq!(threads.len(), 3, "{}: {threads:#?}", python.display());
        for (native_id, chain) in expected {
            let thread = threads
                .iter()
                .find(|thread| thread.native_id.to_string() == *native_id)
                .unwrap_or_else(|| panic!("{}: thread {native_id}", python.display()));
            let read: Vec<(String, String, Option<u64>)> = thread
                .frames
                .iter()
                .map(|frame| {
                    (
                        frame.qualname.clone(),
                        frame.filename.clone(),
                        frame.line.map(u64::from),
                    )
                })
                .collect();
            let chain: Vec<(String, String, Option<u64>)> = chain
                .as_array()
                .unwrap()
                .iter()
                .map(|frame| {
                    (
                        frame[0].as_str().unwrap().to_owned(),
                        frame[1].as_str().unwrap().to_owned(),
                        frame[2].as_u64(),
                    )
                })
                .collect();
            assert_eq!(read, chain, "{}", python.display());
            assert!(!thread.cut);
        }
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// The interpreter process `pid` runs, placed in it.
pub(in crate::symbols::python) fn python_process(pid: u32) -> PythonProcess {
    let maps = procfs::process::Process::new(pid as i32)
        .and_then(|process| process.maps())
        .expect("its mappings");
    for map in maps {
        let procfs::process::MMapPath::Path(path) = &map.pathname else {
            continue;
        };
        let Ok(file) = std::fs::File::open(path) else {
            continue;
        };
        if let Found::Interpreter(interpreter) = inspect(&path.to_string_lossy(), &file)
            && let Some(process) = PythonProcess::placed(interpreter, map.address.0, map.offset)
        {
            return process;
        }
    }
    panic!("no interpreter in process {pid}");
}
