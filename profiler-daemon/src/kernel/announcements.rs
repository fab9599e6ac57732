//! New processes, as the kernel announces them: the sampling programs put
//! a process's id in a ring buffer at its first sample (and again after
//! an exec), and the fork tracepoint records where each process forked
//! without exec comes from (its parent and the layout of the program they
//! share), so that the process table can give a child its parent's
//! mappings without reading procfs.
//!
//! Owns the ring buffer and the lineage map; it must not read procfs or
//! decide what a lineage means for a process's mappings.

use std::{sync::Arc, time::Duration};

use aya::maps::{HashMap, MapData, RingBuf};
use profiler_common::ForkLineage;

/// What the kernel knows of where a new process comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lineage {
    /// Nothing: the fork tracepoint is off (procfs can tell).
    Unknown,
    /// Not forked without exec since the daemon started (it exec'd, or was
    /// forked before, or its record was pushed out): its own mappings.
    OwnProgram,
    /// Forked by a process, without exec since, with the program laid out
    /// as [`ForkLineage`] says.
    Forked(ForkLineage),
}

/// A process announced by the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announced {
    pub pid: u32,
    pub lineage: Lineage,
}

/// The fork tracepoint's records of where processes come from.
pub struct ForkLineages(HashMap<MapData, u32, ForkLineage>);

impl ForkLineages {
    pub fn new(map: HashMap<MapData, u32, ForkLineage>) -> Self {
        Self(map)
    }

    /// Where process `pid` comes from.
    pub fn of(&self, pid: u32) -> Lineage {
        match self.0.get(&pid, 0) {
            Ok(lineage) => Lineage::Forked(lineage),
            Err(_) => Lineage::OwnProgram,
        }
    }
}

/// The kernel's announcements of new processes.
pub struct ProcessAnnouncements {
    ring: RingBuf<MapData>,
    /// The fork tracepoint's records, when it is attached.
    lineages: Option<Arc<ForkLineages>>,
}

impl ProcessAnnouncements {
    pub fn new(ring: RingBuf<MapData>, lineages: Option<Arc<ForkLineages>>) -> Self {
        Self { ring, lineages }
    }

    /// Waits at most `timeout` (under a second) for an announcement.
    pub fn wait(&self, timeout: Duration) -> rustix::io::Result<()> {
        use rustix::event::{PollFd, PollFlags, Timespec, poll};
        let timeout = Timespec {
            tv_sec: 0,
            tv_nsec: timeout
                .min(Duration::from_millis(999))
                .subsec_nanos()
                .into(),
        };
        let mut fds = [PollFd::new(&self.ring, PollFlags::IN)];
        match poll(&mut fds, Some(&timeout)) {
            Ok(_) | Err(rustix::io::Errno::INTR) => Ok(()),
            Err(err) => Err(err),
        }
    }

    /// Appends the processes announced since the last call to `into`, each
    /// with its lineage as the fork tracepoint recorded it.
    pub fn take(&mut self, into: &mut Vec<Announced>) {
        let start = into.len();
        while let Some(item) = self.ring.next() {
            if let Ok(bytes) = <[u8; 4]>::try_from(&item[..4.min(item.len())]) {
                into.push(Announced {
                    pid: u32::from_ne_bytes(bytes),
                    lineage: Lineage::Unknown,
                });
            }
        }
        if let Some(lineages) = &self.lineages {
            for announced in &mut into[start..] {
                announced.lineage = lineages.of(announced.pid);
            }
        }
    }
}
