//! What `/proc` says of a task (a process or one of its threads): its
//! credentials, supplementary groups, pid in its own namespace and cgroups,
//! and the daemon's own capabilities, read with procfs; and a task's command name as the kernel's records
//! carry it. A leaf every layer may use: it uses no other module of the
//! daemon but the shared profile values.
//!
//! Owns only these reads; it must not decide what they allow (the service's
//! `access` does), nor keep them.

use std::os::unix::fs::MetadataExt as _;

use procfs::process::{Process, Status};

use crate::profile::Owner;

/// What procfs says of a task's credentials.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TaskCredentials {
    /// Real, effective and saved user ids.
    pub uids: [u32; 3],
    /// Real, effective and saved group ids.
    pub gids: [u32; 3],
    /// The user id it opens files as.
    pub filesystem_uid: u32,
    /// Whether its owner may trace it (`SUID_DUMP_USER`).
    pub dumpable: bool,
}

impl TaskCredentials {
    /// Reads a process's (`/proc/PID`); `None` when it is gone.
    pub fn read(pid: u32) -> Option<Self> {
        let process = Process::new(i32::try_from(pid).ok()?).ok()?;
        let status = process.status().ok()?;
        // procfs gives a task's files to root when it is not dumpable, and
        // to its effective uid and gid otherwise (task_dump_owner).
        let owner = std::fs::metadata(format!("/proc/{pid}")).ok()?.uid();
        Some(Self::of(&status, owner))
    }

    /// Reads one thread's (`/proc/PID/task/TID`); `None` when it is gone.
    pub fn of_thread(pid: u32, tid: u32) -> Option<Self> {
        let process = Process::new(i32::try_from(pid).ok()?).ok()?;
        let status = process
            .task_from_tid(i32::try_from(tid).ok()?)
            .ok()?
            .status()
            .ok()?;
        let owner = std::fs::metadata(format!("/proc/{pid}/task/{tid}"))
            .ok()?
            .uid();
        Some(Self::of(&status, owner))
    }

    fn of(status: &Status, owner: u32) -> Self {
        let uids = [status.ruid, status.euid, status.suid];
        Self {
            uids,
            gids: [status.rgid, status.egid, status.sgid],
            filesystem_uid: status.fuid,
            dumpable: uids[1] != 0 && owner == uids[1],
        }
    }

    /// Whether its real, effective and saved ids differ (a set-id program,
    /// as the kernel's samples flag it).
    pub fn ids_differ(&self) -> bool {
        self.uids.iter().any(|&id| id != self.uids[0])
            || self.gids.iter().any(|&id| id != self.gids[0])
    }

    /// The task's owner as a sample would record it.
    pub fn owner(&self) -> Owner {
        Owner {
            uid: self.uids[0],
            gid: self.gids[0],
            protected: !self.dumpable || self.ids_differ(),
        }
    }
}

/// The supplementary groups of a process (none when it is gone).
pub fn supplementary_groups(pid: u32) -> Vec<u32> {
    status(pid).map(|status| status.groups).unwrap_or_default()
}

/// The process's pid in its own pid namespace (the last `NSpid` field).
pub fn namespace_pid(pid: u32) -> Option<u32> {
    let pids = status(pid)?.nspid?;
    u32::try_from(*pids.last()?).ok()
}

/// A process's cgroups: every hierarchy's path (`/system.slice/x.service`)
/// and the cgroup v2 one (empty when there is none); none when it is gone.
pub fn cgroups(pid: u32) -> Cgroups {
    let Some(groups) = Process::new(pid as i32)
        .ok()
        .and_then(|process| process.cgroups().ok())
    else {
        return Cgroups::default();
    };
    let v2 = groups
        .0
        .iter()
        .find(|group| group.hierarchy == 0)
        .map(|group| group.pathname.clone())
        .unwrap_or_default();
    Cgroups {
        all: groups.0.into_iter().map(|group| group.pathname).collect(),
        v2,
    }
}

/// What [`cgroups`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cgroups {
    pub all: Vec<String>,
    pub v2: String,
}

/// This process's effective capabilities (`CapEff`: bit `n` for capability
/// `n`); `None` when procfs cannot say.
pub fn own_effective_capabilities() -> Option<u64> {
    Some(Process::myself().ok()?.status().ok()?.capeff)
}

/// A command name as the kernel records it (`comm`: up to 16 bytes, ended
/// by a zero byte when shorter), as text.
pub fn command_name(comm: &[u8]) -> String {
    let end = comm
        .iter()
        .position(|&byte| byte == 0)
        .unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

fn status(pid: u32) -> Option<Status> {
    Process::new(i32::try_from(pid).ok()?).ok()?.status().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_its_own_process() {
        let me = std::process::id();
        let credentials = TaskCredentials::read(me).unwrap();
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(credentials.uids[0], uid);
        assert_eq!(credentials.filesystem_uid, uid);
        assert!(!credentials.ids_differ());
        assert_eq!(TaskCredentials::of_thread(me, me), Some(credentials));
        assert!(namespace_pid(me).is_some());
        assert!(!cgroups(me).all.is_empty());
        assert!(TaskCredentials::read(u32::MAX / 2).is_none());
        assert!(cgroups(u32::MAX / 2).all.is_empty());
        assert!(own_effective_capabilities().is_some());
    }

    #[test]
    fn command_names_end_at_the_first_zero_byte() {
        assert_eq!(command_name(b"bash\0\0\0"), "bash");
        assert_eq!(command_name(b"0123456789abcdef"), "0123456789abcdef");
        assert_eq!(command_name(b"a\xffb\0"), "a\u{fffd}b");
    }
}
