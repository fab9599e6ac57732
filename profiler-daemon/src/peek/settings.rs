//! What peeks may do, from the configuration: how long and how fast they
//! sample, which processes a signal may peek at, how many run at once,
//! and what the kept reports may hold.
//!
//! Owns the settings; it must not run peeks.

use std::time::Duration;

use super::{archive, snapshot::ProcessSnapshot};

/// How peeks run, from the configuration.
#[derive(Clone, Debug)]
pub struct PeekSettings {
    /// 0: peeks by signal are off.
    pub signal: u32,
    pub duration: Duration,
    pub frequency_hz: u32,
    pub allow: Allowlist,
    pub max_concurrent: usize,
    pub directory: std::path::PathBuf,
    pub max_reports: usize,
    pub max_bytes: u64,
    /// Most reports of one user's processes kept.
    pub max_reports_per_user: usize,
    /// Most peeks of one user's processes started per minute.
    pub per_user_per_minute: u32,
    /// Most bytes the peeks hold in memory (reports of this run, samples
    /// of peeks under way; 0: no limit).
    pub memory_limit: u64,
}

/// Which processes a signal may peek at; an empty list does not restrict.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Allowlist {
    pub commands: Vec<String>,
    pub uids: Vec<u32>,
    /// A cgroup allows itself and its descendants.
    pub cgroups: Vec<String>,
}

impl Allowlist {
    pub(super) fn allows(&self, process: &ProcessSnapshot) -> bool {
        (self.commands.is_empty() || self.commands.contains(&process.command))
            && (self.uids.is_empty() || self.uids.contains(&process.owner.uid))
            && (self.cgroups.is_empty()
                || process.cgroups.iter().any(|cgroup| {
                    self.cgroups
                        .iter()
                        .any(|allowed| crate::kernel::cgroups::within(cgroup, allowed))
                }))
    }
}

/// The archive's bounds from the settings.
pub(super) fn bounds(settings: &PeekSettings) -> archive::Bounds {
    archive::Bounds {
        max_reports: settings.max_reports,
        max_bytes: settings.max_bytes,
        max_reports_per_user: settings.max_reports_per_user,
        // The samples of peeks under way take the rest.
        max_memory_bytes: settings.memory_limit / 2,
    }
}
