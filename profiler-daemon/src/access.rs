//! Who may ask: the caller's credentials (SO_PEERCRED on the Unix socket)
//! and what they let it see. Root and members of the admin group see
//! everything; any other user only processes that run under its own uid.
//!
//! Owns the access rules; it must not read profiles or serve requests.

use std::fs;

use tracing::warn;

/// A caller of the API, as its credentials make it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Caller {
    /// Root, or a member of the admin group: sees everything.
    Privileged,
    /// Any other user: sees only processes of its own (real) uid.
    User { uid: u32 },
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

/// Marks a request that came over the TCP listener, past mutual TLS (or
/// explicitly allowed loopback plaintext): such callers see everything.
#[derive(Clone, Copy, Debug)]
pub struct TrustedRemote;

/// What the socket told about a caller.
#[derive(Clone, Copy, Debug)]
pub struct Credentials {
    pub uid: u32,
    pub gid: u32,
    pub pid: Option<u32>,
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

    /// The caller behind `credentials`; `None` (no credentials) is refused.
    pub fn caller(&self, credentials: Option<Credentials>) -> Result<Caller, AccessError> {
        let credentials = credentials.ok_or(AccessError::Anonymous)?;
        if credentials.uid == 0 {
            return Ok(Caller::Privileged);
        }
        if let Some(admin) = self.gid {
            let supplementary = credentials
                .pid
                .map(supplementary_groups)
                .unwrap_or_default();
            if credentials.gid == admin || supplementary.contains(&admin) {
                return Ok(Caller::Privileged);
            }
        }
        Ok(Caller::User {
            uid: credentials.uid,
        })
    }

    /// Checks that `caller` may see what a selector of `tasks` (process
    /// and thread ids) and `uids` selects: an unprivileged caller must
    /// select only its own uid, or name tasks that are all its own.
    pub fn check_selection(
        &self,
        caller: Caller,
        tasks: &[u32],
        uids: &[u32],
    ) -> Result<(), AccessError> {
        if let Caller::User { uid } = caller
            && !uids.is_empty()
            && uids.iter().all(|&selected| selected == uid)
        {
            return Ok(());
        }
        self.check_tasks(caller, tasks)
    }

    /// Checks that `caller` may see the processes or threads `tasks`
    /// (an unprivileged caller must name some, all its own).
    pub fn check_tasks(&self, caller: Caller, tasks: &[u32]) -> Result<(), AccessError> {
        let Caller::User { uid } = caller else {
            return Ok(());
        };
        if tasks.is_empty() {
            return Err(AccessError::NeedsOwnSelection {
                uid,
                group: self.group.clone(),
            });
        }
        for &task in tasks {
            let owner = owner(task).ok_or(AccessError::NoSuchProcess(task))?;
            if owner != uid {
                return Err(AccessError::NotYours {
                    pid: task,
                    uid,
                    owner,
                    group: self.group.clone(),
                });
            }
        }
        Ok(())
    }

    /// Whether `caller` may see what belongs to `owner`.
    pub fn may_see(caller: Caller, owner: u32) -> bool {
        match caller {
            Caller::Privileged => true,
            Caller::User { uid } => uid == owner,
        }
    }
}

/// A group's id from the text of /etc/group.
fn group_id(group: &str, etc_group: &str) -> Option<u32> {
    etc_group.lines().find_map(|line| {
        let mut fields = line.split(':');
        (fields.next()? == group).then_some(())?;
        fields.nth(1)?.parse().ok()
    })
}

/// The real uid a process or thread runs as.
fn owner(task: u32) -> Option<u32> {
    status_field(task, "Uid:")?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The supplementary groups of a process.
fn supplementary_groups(pid: u32) -> Vec<u32> {
    status_field(pid, "Groups:")
        .map(|groups| {
            groups
                .split_whitespace()
                .filter_map(|gid| gid.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

fn status_field(pid: u32, field: &str) -> Option<String> {
    fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()?
        .lines()
        .find_map(|line| line.strip_prefix(field).map(str::to_owned))
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

    #[test]
    fn root_and_the_group_see_everything_others_their_own() {
        let policy = AccessPolicy {
            group: "profilerd".to_owned(),
            gid: Some(998),
        };
        assert_eq!(policy.caller(credentials(0, 0)), Ok(Caller::Privileged));
        assert_eq!(
            policy.caller(credentials(1000, 998)),
            Ok(Caller::Privileged)
        );
        let user = policy.caller(credentials(1000, 1000)).unwrap();
        assert_eq!(user, Caller::User { uid: 1000 });
        assert_eq!(policy.caller(None), Err(AccessError::Anonymous));

        // This test runs as some user: its own process is its own.
        let me = owner(std::process::id()).unwrap();
        let me_caller = Caller::User { uid: me };
        policy
            .check_tasks(me_caller, &[std::process::id()])
            .unwrap();
        assert!(matches!(
            policy.check_tasks(me_caller, &[]),
            Err(AccessError::NeedsOwnSelection { .. })
        ));
        let stranger = Caller::User { uid: me + 1 };
        assert!(matches!(
            policy.check_tasks(stranger, &[std::process::id()]),
            Err(AccessError::NotYours { .. })
        ));
        policy.check_selection(me_caller, &[], &[me]).unwrap();
        assert!(
            policy
                .check_selection(me_caller, &[], &[me, me + 1])
                .is_err()
        );
        assert!(AccessPolicy::may_see(Caller::Privileged, 5));
        assert!(!AccessPolicy::may_see(stranger, me));
    }
}
