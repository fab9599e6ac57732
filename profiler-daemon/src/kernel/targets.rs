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

/// Capacities of the target maps (the loaded programs size them so).
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

/// Where the targets go: the kernel's targets maps (or, in tests, memory).
pub trait TargetMaps: Send {
    fn set_mode(&mut self, mode: u32) -> Result<(), TargetsError>;
    fn add_pid(&mut self, pid: u32) -> Result<(), TargetsError>;
    fn remove_pid(&mut self, pid: u32);
    fn add_cgroup(&mut self, id: u64) -> Result<(), TargetsError>;
    fn remove_cgroup(&mut self, id: u64);
}

/// The kernel's targets maps.
pub struct BpfTargetMaps {
    pub mode: Array<MapData, u32>,
    pub pids: HashMap<MapData, u32, u8>,
    pub cgroups: HashMap<MapData, u64, u8>,
}

impl TargetMaps for BpfTargetMaps {
    fn set_mode(&mut self, mode: u32) -> Result<(), TargetsError> {
        Ok(self.mode.set(0, mode, 0)?)
    }

    fn add_pid(&mut self, pid: u32) -> Result<(), TargetsError> {
        Ok(self.pids.insert(pid, 1, 0)?)
    }

    fn remove_pid(&mut self, pid: u32) {
        let _ = self.pids.remove(&pid);
    }

    fn add_cgroup(&mut self, id: u64) -> Result<(), TargetsError> {
        Ok(self.cgroups.insert(id, 1, 0)?)
    }

    fn remove_cgroup(&mut self, id: u64) {
        let _ = self.cgroups.remove(&id);
    }
}

/// What is sampled, and the maps that tell the kernel.
pub struct Targets {
    maps: Box<dyn TargetMaps>,
    current: TargetSet,
    current_cgroup_ids: Vec<u64>,
}

impl Targets {
    /// Every process, to begin with.
    pub fn new(maps: Box<dyn TargetMaps>) -> Self {
        Self {
            maps,
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
            self.maps.add_pid(pid)?;
        }
        for &id in &cgroup_ids {
            self.maps.add_cgroup(id)?;
        }
        let mut mode = 0;
        if !set.pids.is_empty() {
            mode |= targets::PIDS;
        }
        if !cgroup_ids.is_empty() {
            mode |= targets::CGROUPS;
        }
        self.maps.set_mode(mode)?;
        for &pid in &self.current.pids {
            if !set.pids.contains(&pid) {
                self.maps.remove_pid(pid);
            }
        }
        for &id in &self.current_cgroup_ids {
            if !cgroup_ids.contains(&id) {
                self.maps.remove_cgroup(id);
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

/// Targets kept in memory, as the kernel's maps would hold them: for the
/// tests of what uses targets.
#[derive(Clone, Debug, Default)]
pub struct MemoryTargetMaps {
    pub state: std::sync::Arc<std::sync::Mutex<MemoryTargets>>,
}

/// The mode, pids and cgroup ids [`MemoryTargetMaps`] hold.
pub type MemoryTargets = (u32, Vec<u32>, Vec<u64>);

impl TargetMaps for MemoryTargetMaps {
    fn set_mode(&mut self, mode: u32) -> Result<(), TargetsError> {
        crate::lock(&self.state).0 = mode;
        Ok(())
    }

    fn add_pid(&mut self, pid: u32) -> Result<(), TargetsError> {
        crate::lock(&self.state).1.push(pid);
        Ok(())
    }

    fn remove_pid(&mut self, pid: u32) {
        crate::lock(&self.state).1.retain(|&kept| kept != pid);
    }

    fn add_cgroup(&mut self, id: u64) -> Result<(), TargetsError> {
        crate::lock(&self.state).2.push(id);
        Ok(())
    }

    fn remove_cgroup(&mut self, id: u64) {
        crate::lock(&self.state).2.retain(|&kept| kept != id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_go_in_before_the_mode_and_stale_ones_leave() {
        let maps = MemoryTargetMaps::default();
        let mut targets = Targets::new(Box::new(maps.clone()));
        let me = std::process::id();
        targets
            .set(TargetSet {
                pids: vec![me],
                cgroups: vec!["/".to_owned()],
            })
            .unwrap();
        {
            let state = crate::lock(&maps.state);
            assert_eq!(state.0, targets::PIDS | targets::CGROUPS);
            assert_eq!(state.1, [me]);
            assert_eq!(state.2.len(), 1);
        }
        targets.set(TargetSet::default()).unwrap();
        assert_eq!(*crate::lock(&maps.state), (0, vec![], vec![]));
        assert!(targets.current().everything());
        assert!(matches!(
            targets.set(TargetSet {
                pids: vec![u32::MAX / 2],
                cgroups: Vec::new(),
            }),
            Err(TargetsError::NoSuchProcess { .. })
        ));
    }

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
