//! The Python stacks of a peeked process at its trigger, when it runs a
//! CPython interpreter whose frames can be read: each thread's, read from
//! the process's memory on a thread of its own, given at most
//! [`READ_TIMEOUT`] (a process can make a read of its memory wait: its
//! peek then says so and goes on).
//!
//! Owns that reading for a peek; it must not sample or report.

use std::{collections::HashMap, sync::mpsc, time::Duration};

use procfs::process::{MMPermissions, MMapPath, Process};

use crate::symbols::{
    process_files,
    python::{
        Found, PythonProcess,
        code_objects::ProcMem,
        inspect,
        threads::{PythonThread, python_stacks},
    },
};

/// The longest a peek waits for a process's Python stacks.
pub const READ_TIMEOUT: Duration = Duration::from_secs(1);

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
    let (sender, receiver) = mpsc::channel();
    let spawned = std::thread::Builder::new()
        .name("profilerd-pystack".into())
        .spawn(move || {
            let stacks = ProcMem::open(pid)
                .map_err(|err| format!("its memory cannot be opened: {err}"))
                .and_then(|memory| python_stacks(&memory, &process).map_err(|err| err.to_string()));
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
        let name = path.file_name()?.to_string_lossy();
        if !map.perms.contains(MMPermissions::EXECUTE) || !name.contains("python3.") {
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
