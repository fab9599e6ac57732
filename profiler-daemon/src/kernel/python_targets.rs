//! The processes whose Python frames the sampling programs read: each
//! process whose CPython interpreter the daemon found is named to them
//! with where its interpreter keeps its threads and frames
//! ([`PythonLayout`]); they forget it when it execs or exits.
//!
//! Owns the map of those processes; it must not decide which processes
//! run an interpreter (the symbols layer does).

use std::{collections::HashMap as StdHashMap, time::Instant};

use aya::maps::{HashMap, MapData};
use profiler_common::python::{PYTHON_PROCESSES_ENTRIES, PythonLayout};

/// A process named less than this long ago is not named again (the
/// programs may have forgotten it at an exec since, so it is named again
/// after).
const NAMED_FOR: std::time::Duration = std::time::Duration::from_secs(1);

/// The map of processes whose Python frames the programs read.
pub struct PythonTargets {
    map: HashMap<MapData, u32, PythonLayout>,
    /// When each process was last named.
    named: StdHashMap<u32, Instant>,
    stats: PythonTargetStats,
}

/// What [`PythonTargets`] did since the daemon started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PythonTargetStats {
    /// Times a process was named, and how many the programs know at most.
    pub named: u64,
    pub limit: u64,
    /// Names the kernel refused (the map full, or its update failed).
    pub failed: u64,
}

impl PythonTargets {
    pub fn new(map: HashMap<MapData, u32, PythonLayout>) -> Self {
        Self {
            map,
            named: StdHashMap::new(),
            stats: PythonTargetStats {
                limit: u64::from(PYTHON_PROCESSES_ENTRIES),
                ..PythonTargetStats::default()
            },
        }
    }

    /// Names process `pid`, whose sample carried no Python frames though
    /// its interpreter is laid out as `layout` (not again within
    /// [`NAMED_FOR`]).
    pub fn name(&mut self, pid: u32, layout: PythonLayout) {
        let now = Instant::now();
        if self
            .named
            .get(&pid)
            .is_some_and(|named| now.duration_since(*named) < NAMED_FOR)
        {
            return;
        }
        if self.named.len() >= 4 * PYTHON_PROCESSES_ENTRIES as usize {
            self.named
                .retain(|_, named| now.duration_since(*named) < NAMED_FOR);
        }
        self.named.insert(pid, now);
        let mut layout = layout;
        let (device, inode) = pid_namespace_of(pid).unwrap_or_default();
        (layout.pid_namespace_device, layout.pid_namespace_inode) = (device, inode);
        match self.map.insert(pid, layout, 0) {
            Ok(()) => self.stats.named += 1,
            Err(err) => {
                self.stats.failed += 1;
                // A full map: processes gone without their exit seen (none
                // should be) are let go of at the next start.
                tracing::debug!(pid, %err, "the kernel refused a Python process");
            }
        }
    }

    pub fn stats(&self) -> PythonTargetStats {
        self.stats
    }
}

/// The pid namespace of `pid` (its nsfs device as the kernel numbers it,
/// and its inode) when it is not the daemon's; none when it is, or when it
/// cannot be told (the process gone).
fn pid_namespace_of(pid: u32) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    let namespace = |path: &str| {
        std::fs::metadata(path).ok().map(|meta| {
            let device = meta.dev();
            // The kernel's dev_t: major in the top 12 bits of 32, minor below.
            let (major, minor) = (libc::major(device), libc::minor(device));
            ((u64::from(major) << 20) | u64::from(minor), meta.ino())
        })
    };
    let theirs = namespace(&format!("/proc/{pid}/ns/pid"))?;
    (namespace("/proc/self/ns/pid") != Some(theirs)).then_some(theirs)
}
