//! Threads already waiting when off-CPU recording of their process begins:
//! the kernel saw them go off CPU before it was asked to record, so their
//! stack is read here instead, from procfs (`/proc/PID/task/TID/syscall`
//! gives the user stack and instruction pointers of a thread blocked in a
//! system call; `/proc/PID/mem` the stack itself), and their wait is
//! charged from the moment recording began.
//!
//! This module owns reading those threads; it must not unwind nor charge.

use std::{fs, os::unix::fs::FileExt as _};

use profiler_common::{
    MAX_STACK_DEPTH, SampleKey, SampleKind, StackCopyHeader, offcpu::WaitingThread, sample_flags,
};

use crate::{
    kernel::cgroups,
    tasks::{self, TaskCredentials},
};

/// A blocked thread as a stack copy would have it.
pub struct BlockedThread {
    pub header: StackCopyHeader,
    pub stack: Vec<u8>,
}

/// The threads of `pid` waiting off CPU now (`S` or `D`), with `pages`
/// pages of their user stack each, their registers and kernel stack from
/// `registers` (the kernel's task iterator) where it has them, else from
/// `/proc/PID/task/TID/syscall` (no frame pointer, no kernel stack).
/// Threads that cannot be read (gone, not in a system call, a kernel
/// thread) are left out.
pub fn blocked_threads(pid: u32, pages: u32, registers: &[WaitingThread]) -> Vec<BlockedThread> {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else {
        return Vec::new();
    };
    let memory = fs::File::open(format!("/proc/{pid}/mem")).ok();
    let cgroup = process_cgroup(pid);
    tasks
        .filter_map(|task| task.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|tid| {
            let dir = format!("/proc/{pid}/task/{tid}");
            let kind = waiting_kind(&dir)?;
            let from_kernel = registers
                .iter()
                .find(|thread| thread.tid == tid && thread.sp != 0);
            let (sp, ip, bp) = match from_kernel {
                Some(thread) => (thread.sp, thread.ip, thread.bp),
                None => {
                    let (sp, ip) = syscall_registers(&dir)?;
                    (sp, ip, 0)
                }
            };
            let mut kernel = [0; MAX_STACK_DEPTH];
            let kernel_len = from_kernel.map_or(0, |thread| {
                let len = (thread.kernel_len as usize).min(MAX_STACK_DEPTH);
                kernel[..len].copy_from_slice(&thread.kernel[..len]);
                len as u32
            });
            let credentials = TaskCredentials::of_thread(pid, tid)?;
            let base = sp & !(profiler_common::STACK_COPY_PAGE as u64 - 1);
            let stack = read_stack(memory.as_ref()?, base, pages);
            let header = StackCopyHeader {
                key: SampleKey {
                    pid,
                    tid,
                    user_stack: 0,
                    kernel_stack: 0,
                    comm: comm(&dir),
                    kind: kind as u32,
                    flags: if credentials.ids_differ() {
                        sample_flags::PROTECTED
                    } else {
                        0
                    },
                    uid: credentials.uids[0],
                    gid: credentials.gids[0],
                    cgroup,
                },
                weight: 0,
                time_ns: 0,
                tag: 0,
                ip,
                sp,
                bp,
                stack_base: base,
                stack_len: stack.len() as u32,
                kernel_len,
                python_slots: 0,
                python_status: profiler_common::python::status::NONE,
                kernel,
            };
            Some(BlockedThread { header, stack })
        })
        .collect()
}

/// `S` or `D` from the thread's `stat`; `None` for any other state.
fn waiting_kind(dir: &str) -> Option<SampleKind> {
    let stat = fs::read_to_string(format!("{dir}/stat")).ok()?;
    // The command name may hold anything, parentheses too: the state
    // follows the last one.
    let state = stat.rsplit_once(") ")?.1.chars().next()?;
    match state {
        'S' => Some(SampleKind::OffCpuSleeping),
        'D' => Some(SampleKind::OffCpuBlocked),
        _ => None,
    }
}

/// The user stack and instruction pointers of a thread blocked in a
/// system call: the last two fields of `syscall` ("nr args… sp pc"; "-1 sp
/// pc" outside one, "running" when it runs).
fn syscall_registers(dir: &str) -> Option<(u64, u64)> {
    let text = fs::read_to_string(format!("{dir}/syscall")).ok()?;
    let fields: Vec<&str> = text.split_whitespace().collect();
    if fields.len() < 3 {
        return None;
    }
    let hex = |field: &str| u64::from_str_radix(field.trim_start_matches("0x"), 16).ok();
    let (sp, pc) = (
        hex(fields[fields.len() - 2])?,
        hex(fields[fields.len() - 1])?,
    );
    (sp != 0 && pc != 0).then_some((sp, pc))
}

fn comm(dir: &str) -> [u8; 16] {
    let mut comm = [0; 16];
    if let Ok(name) = fs::read_to_string(format!("{dir}/comm")) {
        let name = name.trim_end_matches('\n').as_bytes();
        let len = name.len().min(15);
        comm[..len].copy_from_slice(&name[..len]);
    }
    comm
}

/// The process's cgroup (v2) id, as the kernel's samples carry it.
fn process_cgroup(pid: u32) -> u64 {
    let Some(root) = cgroups::cgroup2_root() else {
        return 0;
    };
    let path = tasks::cgroups(pid).v2;
    if path.is_empty() {
        return 0;
    }
    cgroups::cgroup_id(&root, &path).unwrap_or(0)
}

/// Up to `pages` pages of the stack from `base`, stopping at the first page
/// that cannot be read (as the kernel's copies do).
fn read_stack(memory: &fs::File, base: u64, pages: u32) -> Vec<u8> {
    let page = profiler_common::STACK_COPY_PAGE;
    let mut stack = vec![0; pages as usize * page];
    let mut copied = 0;
    for chunk in stack.chunks_mut(page) {
        match memory.read_at(chunk, base + copied as u64) {
            Ok(read) if read == page => copied += page,
            _ => break,
        }
    }
    stack.truncate(copied);
    stack
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_of_this_process_asleep_in_a_system_call_is_read_whole() {
        let (ready, wait) = std::sync::mpsc::channel::<()>();
        let (named, tid) = std::sync::mpsc::channel::<u32>();
        let sleeper = std::thread::spawn(move || {
            named
                .send(rustix::thread::gettid().as_raw_nonzero().get() as u32)
                .unwrap();
            let _ = wait.recv_timeout(std::time::Duration::from_secs(10));
        });
        let tid = tid.recv().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(100));
        let pid = std::process::id();
        let threads = blocked_threads(pid, 2, &[]);
        ready.send(()).unwrap();
        sleeper.join().unwrap();
        if !std::path::Path::new(&format!("/proc/{pid}/mem")).exists() {
            return;
        }
        let asleep = threads
            .iter()
            .find(|thread| thread.header.key.tid == tid)
            .expect("the sleeping thread is read");
        assert!(!asleep.stack.is_empty());
        assert_eq!(asleep.header.key.kind, SampleKind::OffCpuSleeping as u32);
        assert!(asleep.header.stack_base <= asleep.header.sp);
        assert!(asleep.header.sp < asleep.header.stack_base + asleep.stack.len() as u64);
    }
}
