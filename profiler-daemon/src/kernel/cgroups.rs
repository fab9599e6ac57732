//! The cgroup v2 hierarchy: where it is mounted, the id of a cgroup path
//! (the inode of its directory, as the kernel's `bpf_get_current_cgroup_id`
//! reports it), and the path of an id, scanned and cached.
//!
//! Owns the cache of cgroup paths; it must not move processes or change
//! cgroups.

use std::{
    collections::HashMap,
    fs,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    sync::Arc,
    time::{Duration, Instant},
};

/// Rescan the hierarchy for an unknown id at most this often.
const RESCAN_INTERVAL: Duration = Duration::from_secs(1);
/// Deepest directory level scanned.
const MAX_DEPTH: usize = 32;

/// Where the cgroup v2 hierarchy is mounted (`/sys/fs/cgroup`, or
/// `/sys/fs/cgroup/unified` on hybrid systems).
pub fn cgroup2_root() -> Option<PathBuf> {
    let mountinfo = fs::read_to_string("/proc/self/mountinfo").ok()?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        if after.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        before.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// A cgroup's id from its path (as `/proc/PID/cgroup` shows it).
pub fn cgroup_id(root: &Path, path: &str) -> Option<u64> {
    fs::metadata(root.join(path.trim_start_matches('/')))
        .ok()
        .filter(|metadata| metadata.is_dir())
        .map(|metadata| metadata.ino())
}

/// Whether `path` is `ancestor` or below it (`/a` holds `/a/b`, not `/ab`).
pub fn within(path: &str, ancestor: &str) -> bool {
    let ancestor = ancestor.trim_end_matches('/');
    ancestor.is_empty()
        || path == ancestor
        || path
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Paths of cgroup ids, cached.
#[derive(Debug)]
pub struct CgroupPaths {
    root: Option<PathBuf>,
    by_id: HashMap<u64, Arc<str>>,
    last_scan: Option<Instant>,
}

impl Default for CgroupPaths {
    fn default() -> Self {
        Self {
            root: cgroup2_root(),
            by_id: HashMap::new(),
            last_scan: None,
        }
    }
}

impl CgroupPaths {
    /// The path of cgroup `id`; `""` for 0 (none), `[cgroup ID]` for a
    /// cgroup gone before it could be named.
    pub fn path(&mut self, id: u64) -> Arc<str> {
        if id == 0 {
            return Arc::from("");
        }
        if let Some(path) = self.by_id.get(&id) {
            return path.clone();
        }
        if self
            .last_scan
            .is_none_or(|last| last.elapsed() >= RESCAN_INTERVAL)
        {
            self.scan();
            if let Some(path) = self.by_id.get(&id) {
                return path.clone();
            }
        }
        Arc::from(format!("[cgroup {id}]"))
    }

    fn scan(&mut self) {
        self.last_scan = Some(Instant::now());
        let Some(root) = self.root.clone() else {
            return;
        };
        // Bounded: cgroups come and go; forget those gone at each scan.
        self.by_id.clear();
        let mut pending = vec![(root.clone(), 0_usize)];
        while let Some((directory, depth)) = pending.pop() {
            if let Ok(metadata) = fs::metadata(&directory) {
                let relative = directory.strip_prefix(&root).unwrap_or(Path::new(""));
                let path = format!("/{}", relative.display());
                self.by_id.insert(metadata.ino(), Arc::from(path));
            }
            if depth >= MAX_DEPTH {
                continue;
            }
            let Ok(entries) = fs::read_dir(&directory) else {
                continue;
            };
            for entry in entries.flatten() {
                if entry.file_type().is_ok_and(|kind| kind.is_dir()) {
                    pending.push((entry.path(), depth + 1));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_contain_their_descendants_only() {
        assert!(within("/system.slice/nginx.service", "/system.slice"));
        assert!(within("/system.slice", "/system.slice/"));
        assert!(!within("/system.slicer", "/system.slice"));
        assert!(within("/anything", "/"));
    }

    #[test]
    fn the_root_cgroup_is_named_by_its_id() {
        let root = cgroup2_root().expect("cgroup v2 is mounted");
        let id = cgroup_id(&root, "/").expect("the root cgroup has an id");
        let mut paths = CgroupPaths::default();
        assert_eq!(&*paths.path(id), "/");
        assert_eq!(&*paths.path(0), "");
        assert!(paths.path(u64::MAX).starts_with("[cgroup "));
    }
}
