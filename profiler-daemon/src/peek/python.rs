//! The Python stacks of a peeked process at its trigger, when it runs a
//! CPython interpreter whose frames can be read: each thread's, read from
//! the process's memory on a thread of its own, given at most
//! [`READ_TIMEOUT`] (a process can make a read of its memory wait: its
//! peek then says so and goes on).
//!
//! Owns that reading for a peek; it must not sample or report.

use std::{
    collections::HashMap,
    sync::{
        atomic::{AtomicUsize, Ordering},
        mpsc,
    },
    time::Duration,
};

use procfs::process::{MMPermissions, MMapPath, Process};

use crate::symbols::{
    process_files,
    python::{
        Found, PythonProcess,
        code_objects::ProcMem,
        inspect, named_like_python,
        threads::{PythonThread, python_stacks},
    },
};

/// The longest a peek waits for a process's Python stacks.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);

/// Reads of Python stacks under way at most: one that never returns (a
/// process's memory behind `userfaultfd`, or a dead FUSE mount) keeps its
/// thread, and past this many such, peeks read no more Python stacks.
const MAX_READING: usize = 4;

/// Reads under way (their threads not yet returned).
static READING: AtomicUsize = AtomicUsize::new(0);

/// A read under way, until its thread returns.
struct Reading;

impl Reading {
    fn start() -> Option<Self> {
        let under_way = READING.fetch_add(1, Ordering::SeqCst);
        if under_way >= MAX_READING {
            READING.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Self)
    }
}

impl Drop for Reading {
    fn drop(&mut self) {
        READING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What a peek learnt of a process's Python stacks at its trigger.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PythonAtTrigger {
    /// It runs no CPython interpreter (or none whose frames can be read).
    #[default]
    NotPython,
    /// Each thread's Python frames, innermost first (`qualname (file:line)`),
    /// by thread id.
    Stacks(HashMap<u32, Vec<String>>),
    /// It runs one, whose stacks were not read: why.
    NotRead(String),
}

/// The Python stacks of process `pid` now.
pub fn at_trigger(pid: u32) -> PythonAtTrigger {
    let Some(process) = interpreter_of(pid) else {
        return PythonAtTrigger::NotPython;
    };
    let version = process.interpreter.version;
    let Some(reading) = Reading::start() else {
        return PythonAtTrigger::NotRead(format!(
            "CPython {version}: {MAX_READING} earlier reads of Python stacks still wait on \
             their processes' memory"
        ));
    };
    let (sender, receiver) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("profilerd-pystack".into())
        .spawn(move || {
            let stacks = ProcMem::open(pid)
                .map_err(|err| format!("its memory cannot be opened: {err}"))
                .and_then(|memory| python_stacks(&memory, &process).map_err(|err| err.to_string()));
            // Over before its result is handed over: a peek that has it
            // finds the read no longer under way.
            drop(reading);
            let _ = sender.send(stacks);
        });
    if let Err(err) = spawned {
        return PythonAtTrigger::NotRead(format!("no thread to read them: {err}"));
    }
    match receiver.recv_timeout(READ_TIMEOUT) {
        Ok(Ok(threads)) => PythonAtTrigger::Stacks(by_thread(threads)),
        Ok(Err(reason)) => PythonAtTrigger::NotRead(format!("CPython {version}: {reason}")),
        Err(_) => PythonAtTrigger::NotRead(format!(
            "CPython {version}: its memory did not answer within {} ms",
            READ_TIMEOUT.as_millis()
        )),
    }
}

fn by_thread(threads: Vec<PythonThread>) -> HashMap<u32, Vec<String>> {
    threads
        .into_iter()
        .map(|thread| {
            let mut frames: Vec<String> = thread.frames.iter().map(ToString::to_string).collect();
            if thread.cut {
                frames.push("[more Python frames not read]".to_owned());
            }
            (thread.native_id, frames)
        })
        .collect()
}

/// The interpreter process `pid` runs, from the binaries it maps (each
/// opened as the very file mapped, inside the process's root).
fn interpreter_of(pid: u32) -> Option<PythonProcess> {
    let maps = Process::new(pid as i32)
        .and_then(|process| process.maps())
        .ok()?;
    for map in maps {
        let MMapPath::Path(path) = &map.pathname else {
            continue;
        };
        let named = path
            .file_name()
            .is_some_and(|name| named_like_python(&name.to_string_lossy()));
        if !map.perms.contains(MMPermissions::EXECUTE) || !named {
            continue;
        }
        let identity = (crate::symbols::mappings::device_number(map.dev), map.inode);
        let Ok(file) = process_files::open_mapped(pid, map.address, path, identity) else {
            continue;
        };
        if let Found::Interpreter(interpreter) = inspect(&path.to_string_lossy(), &file)
            && let Some(process) = PythonProcess::placed(interpreter, map.address.0, map.offset)
        {
            return Some(process);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_that_never_return_stop_further_reads_past_a_bound() {
        let Some(python) = [
            "/usr/bin/python3.11",
            "/usr/bin/python3.12",
            "/usr/bin/python3.13",
        ]
        .into_iter()
        .find(|path| std::path::Path::new(path).exists()) else {
            eprintln!("no Debian CPython 3.11+ on this machine: nothing to peek at");
            return;
        };
        let mut child = std::process::Command::new(python)
            .args(["-c", "import time; time.sleep(60)"])
            .spawn()
            .expect("python runs");
        let pid = child.id();
        // Once its interpreter is mapped and started.
        let mut stacks = PythonAtTrigger::NotPython;
        for _ in 0..100 {
            stacks = at_trigger(pid);
            if matches!(&stacks, PythonAtTrigger::Stacks(threads) if !threads.is_empty()) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(matches!(stacks, PythonAtTrigger::Stacks(_)), "{stacks:?}");
        // As if as many reads as allowed were stuck.
        let stuck: Vec<Reading> = (0..MAX_READING).map_while(|_| Reading::start()).collect();
        assert_eq!(stuck.len(), MAX_READING);
        let refused = at_trigger(pid);
        assert!(
            matches!(&refused, PythonAtTrigger::NotRead(why) if why.contains("still wait")),
            "{refused:?}"
        );
        drop(stuck);
        assert!(matches!(at_trigger(pid), PythonAtTrigger::Stacks(_)));
        let _ = child.kill();
        let _ = child.wait();
    }
}
