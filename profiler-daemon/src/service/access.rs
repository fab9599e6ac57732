//! Who may ask: the caller's credentials (SO_PEERCRED on the Unix socket)
//! and what they let it see. Root and members of the admin group see every
//! process; any other user sees what the kernel would let it trace
//! (`ptrace_may_access`): tasks whose real, effective and saved user ids
//! are all its uid, whose group ids are all its gid, and that are dumpable.
//! Live processes are checked in procfs when a request names them; every
//! sample is checked again by the credentials the kernel recorded with it
//! ([`SampleAccess`]), so a reused pid or a process that changed users
//! shows nothing that was not the caller's. Kernel addresses go only to
//! callers the kernel shows them to (`kptr_restrict`).
//!
//! Owns the access rules; it must not read profiles or serve requests.

use std::fs;

use tracing::warn;

pub use crate::tasks::TaskCredentials;
use crate::{profile::Owner, store::SampleAccess, tasks::supplementary_groups};

/// A caller of the API, as its credentials make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Root, or a client of the TCP listener past mutual TLS: sees
    /// everything, kernel addresses included.
    Root,
    /// A member of the admin group: sees every process; kernel addresses
    /// only where the kernel shows them to every user.
    Admin { uid: u32 },
    /// Any other user: sees what the kernel would let it trace.
    User { uid: u32, gid: u32 },
}

impl Caller {
    /// Root or the admin group.
    pub fn sees_everything(self) -> bool {
        !matches!(self, Caller::User { .. })
    }

    /// Which samples the caller may see.
    pub fn sample_access(self) -> SampleAccess {
        match self {
            Caller::Root | Caller::Admin { .. } => SampleAccess::All,
            Caller::User { uid, gid } => SampleAccess::Owner { uid, gid },
        }
    }

    /// Whether the caller may see what a task of `owner` did.
    pub fn may_see(self, owner: Owner) -> bool {
        self.sample_access().admits(owner)
    }

    /// Whether the caller may read kernel addresses: root, or anyone when
    /// the kernel shows `/proc/kallsyms` addresses to every user
    /// (`kptr_restrict` 0 and `perf_event_paranoid` at most 1).
    pub fn reads_kernel_addresses(self) -> bool {
        match self {
            Caller::Root => true,
            Caller::Admin { .. } | Caller::User { .. } => kernel_addresses_are_public(),
        }
    }

    /// The caller's uid, for messages; `None` for root and remote clients.
    pub fn uid(self) -> Option<u32> {
        match self {
            Caller::Root => None,
            Caller::Admin { uid } | Caller::User { uid, .. } => Some(uid),
        }
    }
}

/// Who a caller is for the per-caller bounds (sessions, streams): its uid
/// on the socket, or [`CallerKey::Remote`] for the TCP listener's clients.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CallerKey {
    User(u32),
    Remote,
}

/// Who asks: what it may see, and who it is for the per-caller bounds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Asker {
    pub caller: Caller,
    pub key: CallerKey,
}

impl Asker {
    /// Root or the admin group.
    pub fn privileged(self) -> bool {
        self.caller.sees_everything()
    }
}

/// Askers for the tests of the service and its parts.
#[cfg(test)]
pub(crate) mod testing {
    use super::{Asker, Caller, CallerKey};

    pub const ROOT: Asker = Asker {
        caller: Caller::Root,
        key: CallerKey::User(0),
    };

    /// An unprivileged user whose group id is its user id.
    pub fn user(uid: u32) -> Asker {
        Asker {
            caller: Caller::User { uid, gid: uid },
            key: CallerKey::User(uid),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccessError {
    #[error(
        "permission denied: user {uid} may only profile its own processes, and must name \
         them (a pid or tid selector, or a uid selector of {uid}); root and members of the \
         group {group:?} may profile everything"
    )]
    NeedsOwnSelection { uid: u32, group: String },
    #[error(
        "permission denied: process {pid} does not run as user {uid} (it runs as {owner}); \
         root and members of the group {group:?} may profile every process"
    )]
    NotYours {
        pid: u32,
        uid: u32,
        owner: u32,
        group: String,
    },
    #[error(
        "permission denied: process {pid} runs as group {owner_gid}, not as your group \
         {gid}; as for ptrace, only root and members of the group {group:?} may look at it"
    )]
    OtherGroup {
        pid: u32,
        gid: u32,
        owner_gid: u32,
        group: String,
    },
    #[error(
        "permission denied: process {pid} {why}; as for ptrace (and /proc/{pid}/maps), only \
         root and members of the group {group:?} may look at it"
    )]
    Protected {
        pid: u32,
        why: &'static str,
        group: String,
    },
    #[error("no process or thread {0} exists (it may have exited)")]
    NoSuchProcess(u32),
    #[error("permission denied: the caller's credentials are unknown")]
    Anonymous,
}

/// The access rules of this daemon.
#[derive(Clone, Debug)]
pub struct AccessPolicy {
    group: String,
    /// The admin group's id; `None` when no such group exists.
    gid: Option<u32>,
}

/// Marks a request that came over the TCP listener past mutual TLS: such
/// callers see everything.
#[derive(Clone, Copy, Debug)]
pub struct TrustedRemote;

/// What the socket told about a caller.
#[derive(Clone, Copy, Debug)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<u32>,
}

/// Whether a window is still to come (its processes must be alive) or past
/// (they may be gone: every sample is checked by its recorded owner).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Window {
    Live,
    Past,
}

impl AccessPolicy {
    /// The rules for the admin group `group` (looked up in /etc/group).
    pub fn new(group: &str) -> Self {
        let gid = group_id(group, &fs::read_to_string("/etc/group").unwrap_or_default());
        if gid.is_none() {
            warn!(
                group,
                "the admin group does not exist: only root may see every process (create it \
                 with `groupadd {group}`, or set admin_group)"
            );
        }
        Self {
            group: group.to_owned(),
            gid,
        }
    }

    /// The admin group's name, for messages.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The caller behind `credentials`; `None` (no credentials) is refused.
    pub fn caller(&self, credentials: Option<Credentials>) -> Result<Caller, AccessError> {
        let credentials = credentials.ok_or(AccessError::Anonymous)?;
        if credentials.uid == 0 {
            return Ok(Caller::Root);
        }
        if let Some(admin) = self.gid {
            let supplementary = credentials
                .pid
                .map(supplementary_groups)
                .unwrap_or_default();
            if credentials.gid == admin || supplementary.contains(&admin) {
                return Ok(Caller::Admin {
                    uid: credentials.uid,
                });
            }
        }
        Ok(Caller::User {
            uid: credentials.uid,
            gid: credentials.gid,
        })
    }

    /// The asker behind a local client's `credentials` (the Unix socket's
    /// SO_PEERCRED, or the owner of a plaintext loopback HTTP connection):
    /// its caller, and its uid for the per-caller bounds.
    pub fn asker(&self, credentials: Option<Credentials>) -> Result<Asker, AccessError> {
        let caller = self.caller(credentials)?;
        let key = match credentials {
            Some(credentials) => CallerKey::User(credentials.uid),
            None => CallerKey::Remote,
        };
        Ok(Asker { caller, key })
    }

    /// Checks that `caller` may see what a selector of `tasks` (process
    /// and thread ids) and `uids` selects: an unprivileged caller must
    /// select only its own uid, or name tasks it may look at. Named tasks
    /// of a past window that are gone are let through: their samples are
    /// checked one by one.
    pub fn check_selection(
        &self,
        caller: Caller,
        tasks: &[u32],
        uids: &[u32],
        window: Window,
    ) -> Result<(), AccessError> {
        if let Caller::User { uid, .. } = caller
            && !uids.is_empty()
            && uids.iter().all(|&selected| selected == uid)
        {
            return Ok(());
        }
        self.check_tasks(caller, tasks, window)
    }

    /// Checks that `caller` may look at the processes or threads `tasks`
    /// (an unprivileged caller must name some, each one it could trace).
    pub fn check_tasks(
        &self,
        caller: Caller,
        tasks: &[u32],
        window: Window,
    ) -> Result<(), AccessError> {
        let Caller::User { uid, gid } = caller else {
            return Ok(());
        };
        if tasks.is_empty() {
            return Err(AccessError::NeedsOwnSelection {
                uid,
                group: self.group.clone(),
            });
        }
        for &task in tasks {
            match TaskCredentials::read(task) {
                Some(task_credentials) => self.check_task(task, uid, gid, &task_credentials)?,
                None if window == Window::Past => {}
                None => return Err(AccessError::NoSuchProcess(task)),
            }
        }
        Ok(())
    }

    /// The kernel's rule for tracing a task (`ptrace_may_access`), for a
    /// caller of `uid` and `gid` without privileges.
    fn check_task(
        &self,
        pid: u32,
        uid: u32,
        gid: u32,
        task: &TaskCredentials,
    ) -> Result<(), AccessError> {
        let group = || self.group.clone();
        if task.uids[0] != uid {
            return Err(AccessError::NotYours {
                pid,
                uid,
                owner: task.uids[0],
                group: group(),
            });
        }
        if task.uids.iter().any(|&id| id != uid) {
            return Err(AccessError::Protected {
                pid,
                why: "runs with other effective or saved user ids (a setuid program)",
                group: group(),
            });
        }
        if task.gids.iter().any(|&id| id != task.gids[0]) {
            return Err(AccessError::Protected {
                pid,
                why: "runs with other effective or saved group ids (a setgid program)",
                group: group(),
            });
        }
        if task.gids[0] != gid {
            return Err(AccessError::OtherGroup {
                pid,
                gid,
                owner_gid: task.gids[0],
                group: group(),
            });
        }
        if !task.dumpable {
            return Err(AccessError::Protected {
                pid,
                why: "is not dumpable (it changed credentials, or asked not to be traced)",
                group: group(),
            });
        }
        Ok(())
    }
}

/// Whether the kernel shows kernel addresses to every user: the rule of
/// `kallsyms_show_value` for a user without CAP_SYSLOG.
fn kernel_addresses_are_public() -> bool {
    let read = |name: &str| {
        fs::read_to_string(format!("/proc/sys/kernel/{name}"))
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
    };
    read("kptr_restrict") == Some(0) && read("perf_event_paranoid").is_some_and(|level| level <= 1)
}

/// A group's id from the text of /etc/group.
fn group_id(group: &str, etc_group: &str) -> Option<u32> {
    etc_group.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == group).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_found_by_name() {
        let etc_group = "root:x:0:\nprofilerd:x:998:alice,bob\nprofilerd2:x:5:\n";
        assert_eq!(group_id("profilerd", etc_group), Some(998));
        assert_eq!(group_id("nobody", etc_group), None);
        assert_eq!(group_id("profiler", etc_group), None);
    }

    fn credentials(uid: u32, gid: u32) -> Option<Credentials> {
        Some(Credentials {
            uid,
            gid,
            pid: None,
        })
    }

    fn policy() -> AccessPolicy {
        AccessPolicy {
            group: "profilerd".to_owned(),
            gid: Some(998),
        }
    }

    #[test]
    fn root_and_the_group_see_everything_others_their_own() {
        let policy = policy();
        assert_eq!(policy.caller(credentials(0, 0)), Ok(Caller::Root));
        assert_eq!(
            policy.caller(credentials(1000, 998)),
            Ok(Caller::Admin { uid: 1000 })
        );
        let user = policy.caller(credentials(1000, 1000)).unwrap();
        assert_eq!(
            user,
            Caller::User {
                uid: 1000,
                gid: 1000
            }
        );
        assert_eq!(policy.caller(None), Err(AccessError::Anonymous));
        assert!(Caller::Root.sees_everything() && Caller::Admin { uid: 5 }.sees_everything());
        assert!(!user.sees_everything());
        assert!(Caller::Root.reads_kernel_addresses());
    }

    #[test]
    fn samples_are_seen_by_their_owner_unless_protected() {
        let user = Caller::User { uid: 7, gid: 8 };
        let owner = |uid, gid, protected| Owner {
            uid,
            gid,
            protected,
        };
        assert!(user.may_see(owner(7, 8, false)));
        assert!(!user.may_see(owner(7, 8, true)), "protected");
        assert!(!user.may_see(owner(0, 8, false)), "another user");
        assert!(!user.may_see(owner(7, 0, false)), "another group");
        assert!(Caller::Admin { uid: 9 }.may_see(owner(0, 0, true)));
    }

    #[test]
    fn tasks_follow_the_kernels_tracing_rule() {
        let policy = policy();
        let plain = TaskCredentials {
            uids: [7; 3],
            gids: [8; 3],
            filesystem_uid: 7,
            dumpable: true,
        };
        policy.check_task(1, 7, 8, &plain).unwrap();
        assert!(!plain.owner().protected);
        let refused = |task: TaskCredentials| policy.check_task(1, 7, 8, &task).unwrap_err();
        assert!(matches!(
            refused(TaskCredentials {
                uids: [0; 3],
                ..plain
            }),
            AccessError::NotYours { owner: 0, .. }
        ));
        let setuid = TaskCredentials {
            uids: [7, 0, 0],
            ..plain
        };
        assert!(matches!(refused(setuid), AccessError::Protected { .. }));
        assert!(setuid.owner().protected);
        let setgid = TaskCredentials {
            gids: [8, 42, 42],
            ..plain
        };
        assert!(matches!(refused(setgid), AccessError::Protected { .. }));
        assert!(matches!(
            refused(TaskCredentials {
                gids: [9; 3],
                ..plain
            }),
            AccessError::OtherGroup { owner_gid: 9, .. }
        ));
        let undumpable = TaskCredentials {
            dumpable: false,
            ..plain
        };
        assert!(matches!(refused(undumpable), AccessError::Protected { .. }));
        assert!(undumpable.owner().protected);
    }

    #[test]
    fn this_process_is_read_from_procfs() {
        let me = TaskCredentials::read(std::process::id()).unwrap();
        let uid = rustix::process::getuid().as_raw();
        assert_eq!(me.uids[0], uid);
        assert!(TaskCredentials::read(u32::MAX / 2).is_none());
        let policy = policy();
        let stranger = Caller::User {
            uid: uid + 1,
            gid: me.gids[0],
        };
        assert!(matches!(
            policy.check_tasks(stranger, &[std::process::id()], Window::Live),
            Err(AccessError::NotYours { .. })
        ));
        assert!(matches!(
            policy.check_tasks(stranger, &[], Window::Live),
            Err(AccessError::NeedsOwnSelection { .. })
        ));
        assert!(matches!(
            policy.check_tasks(stranger, &[u32::MAX / 2], Window::Live),
            Err(AccessError::NoSuchProcess(_))
        ));
        policy
            .check_tasks(stranger, &[u32::MAX / 2], Window::Past)
            .unwrap();
        policy
            .check_selection(stranger, &[], &[uid + 1], Window::Live)
            .unwrap();
        assert!(
            policy
                .check_selection(stranger, &[], &[uid, uid + 1], Window::Live)
                .is_err()
        );
    }
}
