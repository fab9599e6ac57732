//! Which samples a query covers: the selector (threads by id, name, user
//! and cgroup) and the asker's access, checked on every thread's
//! credentials as the kernel recorded them.
//!
//! Owns those checks; it must not read buckets or make profiles (see
//! `query`).

use crate::profile::{Owner, ThreadInfo};

/// Which samples a query covers; empty lists do not restrict, different
/// kinds must all match, values within one list are alternatives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    pub pids: Vec<u32>,
    pub tids: Vec<u32>,
    /// Exact process or thread names.
    pub comms: Vec<String>,
    /// A regular expression a process or thread name must match.
    pub comm_pattern: Option<CommPattern>,
    /// Real user ids.
    pub uids: Vec<u32>,
    /// Cgroup (v2) paths; each selects its descendants too.
    pub cgroups: Vec<String>,
}

/// A compiled regular expression over command names.
#[derive(Clone, Debug)]
pub struct CommPattern(pub regex::Regex);

impl PartialEq for CommPattern {
    fn eq(&self, other: &Self) -> bool {
        self.0.as_str() == other.0.as_str()
    }
}

impl Eq for CommPattern {}

impl Selector {
    pub fn matches(&self, thread: &ThreadInfo) -> bool {
        (self.pids.is_empty() || self.pids.contains(&thread.pid))
            && (self.tids.is_empty() || self.tids.contains(&thread.tid))
            && (self.comms.is_empty()
                || self
                    .comms
                    .iter()
                    .any(|comm| **comm == *thread.process_name || **comm == *thread.thread_name))
            && self.comm_pattern.as_ref().is_none_or(|pattern| {
                pattern.0.is_match(&thread.process_name) || pattern.0.is_match(&thread.thread_name)
            })
            && (self.uids.is_empty() || self.uids.contains(&thread.uid))
            && (self.cgroups.is_empty()
                || self
                    .cgroups
                    .iter()
                    .any(|cgroup| crate::kernel::cgroups::within(&thread.cgroup, cgroup)))
    }
}

/// Whose samples a query may return: the asker's rights, checked on every
/// sample by the credentials the kernel recorded with it (not by who owns
/// its process id now, which may be another process by then).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SampleAccess {
    /// Every sample (root and the admin group).
    All,
    /// Only samples of tasks that ran as this user and group and that the
    /// kernel would have let them trace (not protected).
    Owner { uid: u32, gid: u32 },
}

impl SampleAccess {
    pub fn admits(self, owner: Owner) -> bool {
        match self {
            SampleAccess::All => true,
            SampleAccess::Owner { uid, gid } => {
                owner.uid == uid && owner.gid == gid && !owner.protected
            }
        }
    }
}
