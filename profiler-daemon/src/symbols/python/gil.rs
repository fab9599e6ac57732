//! Waits for the GIL, told from a wait's symbolized stack: CPython's
//! `take_gil` waits on the GIL's condition variable (`pthread_cond_timedwait`,
//! called straight from the interpreter's own code), where every other wait
//! of the interpreter on Linux takes a semaphore or a system call of its own
//! (`sem_clockwait`, `clock_nanosleep`, `select`…). So a wait whose user
//! stack ends in libc's condition-variable wait, called from the
//! interpreter's binary or library, is a thread waiting for the GIL: after
//! its time slice ran out under another thread, or to take it back after a
//! blocking call. The `[waiting for the GIL]` frame goes between the
//! interpreter's frame and libc's, so that it stays when the interpreter's
//! frames are hidden (`--no-interpreter`).
//!
//! It needs libc's functions named (its exported symbols are enough); an
//! unnamed libc leaves such waits unmarked, never marks another.
//!
//! Owns the rule only; it must not read a process.

use crate::profile::{LocationKind, is_python_interpreter};
use crate::symbols::symbolizer::SymbolizedLocation;

/// The frame a wait for the GIL shows.
pub const GIL_WAIT_MARKER: &str = "[waiting for the GIL]";

/// Whether `module` is a C library (glibc's, its old libpthread, musl's).
fn is_libc(module: &str) -> bool {
    let name = module.rsplit('/').next().unwrap_or(module);
    ["libc.so", "libc-", "libpthread", "ld-musl", "libc.musl"]
        .iter()
        .any(|prefix| name.starts_with(prefix))
}

/// Where a `[waiting for the GIL]` frame goes in the stack of a wait (root
/// first, user frames then kernel frames), if the wait is for the GIL: the
/// place of the outermost libc frame of the innermost run of them.
pub fn gil_wait_place<L: AsRef<SymbolizedLocation>>(stack: &[L]) -> Option<usize> {
    let location = |index: usize| &stack[index].as_ref().location;
    let user_end = (0..stack.len())
        .find(|&index| location(index).kind == LocationKind::Kernel)
        .unwrap_or(stack.len());
    let mut place = user_end;
    let mut on_condition = false;
    while place > 0
        && location(place - 1).kind == LocationKind::User
        && is_libc(&location(place - 1).module)
    {
        place -= 1;
        on_condition |= location(place).frames.iter().any(|frame| {
            frame.function.contains("pthread_cond_") && frame.function.contains("wait")
        });
    }
    let caller = place.checked_sub(1).map(location)?;
    let from_interpreter =
        caller.kind == LocationKind::User && is_python_interpreter(&caller.module);
    (on_condition && from_interpreter).then_some(place)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::profile::{Frame, Location};
    use crate::symbols::symbolizer::LocationKey;

    fn at(kind: LocationKind, module: &str, function: &str) -> Arc<SymbolizedLocation> {
        Arc::new(SymbolizedLocation {
            key: LocationKey::Marker(Arc::from(function)),
            location: Location {
                kind,
                module: Arc::from(module),
                address: 0,
                frames: vec![Frame {
                    function: Arc::from(function),
                    file: None,
                    line: 0,
                    inlined: false,
                }]
                .into(),
            },
        })
    }

    const PYTHON: &str = "/usr/bin/python3.11";
    const LIBC: &str = "/usr/lib/x86_64-linux-gnu/libc.so.6";

    fn wait(leaf_user: &[(&str, &str)]) -> Vec<Arc<SymbolizedLocation>> {
        let mut stack = vec![
            at(LocationKind::User, PYTHON, "_start"),
            at(LocationKind::Python, "/srv/app.py", "spin"),
        ];
        stack.extend(
            leaf_user
                .iter()
                .map(|(module, function)| at(LocationKind::User, module, function)),
        );
        stack.push(at(LocationKind::Kernel, "[kernel]", "futex_wait"));
        stack.push(at(LocationKind::Kernel, "[kernel]", "schedule"));
        stack
    }

    #[test]
    fn the_interpreter_waiting_on_libc_s_condition_variable_waits_for_the_gil() {
        // Debian's python3.11 and glibc 2.36: take_gil unnamed.
        let stack = wait(&[
            (PYTHON, "python3.11+0xf92c0"),
            (LIBC, "___pthread_cond_timedwait64"),
            (LIBC, "__pthread_cond_wait_common"),
            (LIBC, "__futex_abstimed_wait_common"),
        ]);
        assert_eq!(gil_wait_place(&stack), Some(3));
        let shared = wait(&[
            ("/usr/lib/libpython3.12.so.1.0", "take_gil"),
            ("/lib/ld-musl-x86_64.so.1", "pthread_cond_timedwait"),
        ]);
        assert_eq!(gil_wait_place(&shared), Some(3));
    }

    #[test]
    fn other_waits_are_not_the_gil_s() {
        for leaf in [
            // time.sleep.
            vec![
                (PYTHON, "python3.11+0x1d6440"),
                (LIBC, "__GI___clock_nanosleep"),
            ],
            // A lock: a semaphore.
            vec![
                (PYTHON, "PyThread_acquire_lock_timed"),
                (LIBC, "sem_clockwait"),
            ],
            // A C extension's own condition variable.
            vec![
                ("/srv/_ext.cpython-311.so", "queue_pop"),
                (LIBC, "___pthread_cond_timedwait64"),
            ],
            // libc unnamed.
            vec![(PYTHON, "python3.11+0xf92c0"), (LIBC, "libc.so.6+0x8a0f0")],
        ] {
            assert_eq!(gil_wait_place(&wait(&leaf)), None, "{leaf:?}");
        }
        assert_eq!(gil_wait_place::<Arc<SymbolizedLocation>>(&[]), None);
    }
}
