//! Which processes the kernel samples: the runtime-updatable allowlist of
//! `SetTargets` (process ids, cgroups with their descendants; or every
//! process, the default), kept in BPF maps the sampling program checks
//! first on every tick.
//!
//! Owns those maps and the current targets; it must not read samples.

use std::path::Path;

use aya::maps::{Array, HashMap, MapData};
use profiler_common::targets;

use crate::kernel::cgroups::{self, cgroup2_root};

/// Capacities of the target maps (the sampler sizes them so).
pub const MAX_PIDS: u32 = 1 << 12;
pub const MAX_CGROUPS: u32 = 1 << 10;

/// What is sampled; empty lists (both) mean every process.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TargetSet {
    pub pids: Vec<u32>,
    /// Cgroup paths as `/proc/PID/cgroup` shows them (cgroup v2).
    pub cgroups: Vec<String>,
}

impl TargetSet {
    pub fn everything(&self) -> bool {
        self.pids.is_empty() && self.cgroups.is_empty()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum TargetsError {
    #[error(
        "cgroup {path} does not exist under the cgroup v2 hierarchy ({root}); give a path \
         as /proc/PID/cgroup shows it (the line starting with 0::)"
    )]
    NoSuchCgroup { path: String, root: String },
    #[error(
        "no process {pid} is running; targets name running processes (a pid that does not \
         exist yet is not followed), so nothing was changed"
    )]
    NoSuchProcess { pid: u32 },
    #[error("cgroup targets need the cgroup v2 hierarchy, which is not mounted")]
    NoCgroup2,
    #[error("at most {limit} {what} can be targets")]
    TooMany { what: &'static str, limit: u32 },
    #[error("cannot update the kernel's targets maps: {0}")]
    Map(#[from] aya::maps::MapError),
}

/// The kernel's targets maps.
pub struct Targets {
    mode: Array<MapData, u32>,
    pids: HashMap<MapData, u32, u8>,
    cgroups: HashMap<MapData, u64, u8>,
    current: TargetSet,
    current_cgroup_ids: Vec<u64>,
}

impl Targets {
    pub fn new(
        mode: Array<MapData, u32>,
        pids: HashMap<MapData, u32, u8>,
        cgroups: HashMap<MapData, u64, u8>,
    ) -> Self {
        Self {
            mode,
            pids,
            cgroups,
            current: TargetSet::default(),
            current_cgroup_ids: Vec::new(),
        }
    }

    pub fn current(&self) -> &TargetSet {
        &self.current
    }

    /// Replaces the targets. New entries go in before the mode changes and
    /// stale ones go after, so no target is ever missed in between.
    pub fn set(&mut self, set: TargetSet) -> Result<(), TargetsError> {
        if let Some(&pid) = set
            .pids
            .iter()
            .find(|&&pid| !Path::new(&format!("/proc/{pid}")).exists())
        {
            return Err(TargetsError::NoSuchProcess { pid });
        }
        let cgroup_ids = match set.cgroups.is_empty() {
            true => Vec::new(),
            false => {
                let root = cgroup2_root().ok_or(TargetsError::NoCgroup2)?;
                set.cgroups
                    .iter()
                    .map(|path| cgroup_id(&root, path))
                    .collect::<Result<Vec<_>, _>>()?
            }
        };
        for (what, count, limit) in [
            ("process ids", set.pids.len(), MAX_PIDS),
            ("cgroups", cgroup_ids.len(), MAX_CGROUPS),
        ] {
            if count > limit as usize {
                return Err(TargetsError::TooMany { what, limit });
            }
        }
        for &pid in &set.pids {
            self.pids.insert(pid, 1, 0)?;
        }
        for &id in &cgroup_ids {
            self.cgroups.insert(id, 1, 0)?;
        }
        let mut mode = 0;
        if !set.pids.is_empty() {
            mode |= targets::PIDS;
        }
        if !cgroup_ids.is_empty() {
            mode |= targets::CGROUPS;
        }
        self.mode.set(0, mode, 0)?;
        for pid in &self.current.pids {
            if !set.pids.contains(pid) {
                let _ = self.pids.remove(pid);
            }
        }
        for id in &self.current_cgroup_ids {
            if !cgroup_ids.contains(id) {
                let _ = self.cgroups.remove(id);
            }
        }
        self.current = set;
        self.current_cgroup_ids = cgroup_ids;
        Ok(())
    }
}

/// A cgroup's id, or why it has none.
fn cgroup_id(root: &Path, path: &str) -> Result<u64, TargetsError> {
    cgroups::cgroup_id(root, path).ok_or_else(|| TargetsError::NoSuchCgroup {
        path: crate::quote(path),
        root: root.display().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroups_are_found_by_path() {
        let root = cgroup2_root().expect("cgroup v2 is mounted");
        assert!(cgroup_id(&root, "/").unwrap() > 0);
        assert!(matches!(
            cgroup_id(&root, "/no/such/cgroup"),
            Err(TargetsError::NoSuchCgroup { .. })
        ));
    }
}
