//! Process families followed for `profilerctl record`: a session that asks
//! for a process's children follows that process in the kernel, which adds
//! each process a member forks to the family as it is forked (see the
//! `follow_forks` program) and tells the daemon; the session then selects
//! every member's samples.
//!
//! Owns the kernel's map of followed processes and the members learned so
//! far; it must not read samples.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use aya::maps::{HashMap as BpfHashMap, MapData, RingBuf};
use profiler_common::FamilyJoin;
use tracing::{debug, warn};

use super::programs::OptionalProgramError;
use crate::lock;

#[derive(Debug, Clone, thiserror::Error)]
pub enum FamilyError {
    #[error("the children of processes cannot be followed on this machine: {0}")]
    Unavailable(#[from] OptionalProgramError),
    #[error("process {0} is already followed by another session; stop that one first")]
    AlreadyFollowed(u32),
    #[error("cannot follow process {pid}: {message}")]
    Map { pid: u32, message: String },
}

/// The followed families. Cheap to clone.
#[derive(Clone)]
pub struct Families {
    inner: Arc<Inner>,
}

struct Inner {
    /// The kernel's map of followed processes; why there is none.
    followed: Result<Mutex<BpfHashMap<MapData, u32, u32>>, OptionalProgramError>,
    /// Members learned so far, by root.
    members: Mutex<HashMap<u32, Vec<u32>>>,
}

/// A family followed while it lives: dropping it stops following (its
/// members are forgotten by the kernel and by the daemon).
pub struct Family {
    root: u32,
    families: Families,
}

impl std::fmt::Debug for Family {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Family").field("root", &self.root).finish()
    }
}

impl PartialEq for Family {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root
    }
}

impl Families {
    /// Families over the kernel's map, or none (each request to follow is
    /// then refused with `unavailable`'s reason).
    pub fn new(followed: Result<BpfHashMap<MapData, u32, u32>, OptionalProgramError>) -> Self {
        Self {
            inner: Arc::new(Inner {
                followed: followed.map(Mutex::new),
                members: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Follows `root`'s family from now on.
    pub fn follow(&self, root: u32) -> Result<Family, FamilyError> {
        let followed = match &self.inner.followed {
            Ok(followed) => followed,
            Err(reason) => return Err(FamilyError::Unavailable(reason.clone())),
        };
        let mut members = lock(&self.inner.members);
        if members.contains_key(&root) {
            return Err(FamilyError::AlreadyFollowed(root));
        }
        lock(followed)
            .insert(root, root, 0)
            .map_err(|err| FamilyError::Map {
                pid: root,
                message: err.to_string(),
            })?;
        members.insert(root, Vec::new());
        Ok(Family {
            root,
            families: self.clone(),
        })
    }

    /// Records a member the kernel announced.
    fn join(&self, join: FamilyJoin) {
        match lock(&self.inner.members).get_mut(&join.root) {
            Some(members) => members.push(join.pid),
            None => debug!(
                root = join.root,
                pid = join.pid,
                "a process joined a family no longer followed"
            ),
        }
    }

    /// Reads the kernel's announcements of new members until the daemon
    /// stops.
    pub async fn follow_joins(self, joins: RingBuf<MapData>) {
        let interest = tokio::io::Interest::READABLE;
        // SAFETY: the ring buffer owns its file descriptor and keeps it
        // open, unchanged, until it is dropped, which only the AsyncFd can do.
        let registered =
            unsafe { tokio::io::unix::AsyncFd::register_with_interest(joins, interest) };
        let mut joins = match registered {
            Ok(joins) => joins,
            Err(err) => {
                warn!("cannot wait for processes joining families: {err}");
                return;
            }
        };
        loop {
            let mut ready = match joins.readable_mut().await {
                Ok(ready) => ready,
                Err(err) => {
                    warn!("cannot wait for processes joining families: {err}");
                    return;
                }
            };
            let ring = ready.get_inner_mut();
            while let Some(item) = ring.next() {
                if let Some(join) = super::plain_record::<FamilyJoin>(&item) {
                    self.join(join);
                }
            }
            ready.clear_ready();
        }
    }
}

impl Family {
    /// The root and every member so far.
    pub fn pids(&self) -> Vec<u32> {
        let members = lock(&self.families.inner.members);
        let mut pids = vec![self.root];
        pids.extend(members.get(&self.root).into_iter().flatten());
        pids
    }
}

impl Drop for Family {
    fn drop(&mut self) {
        let inner = &self.families.inner;
        let members = lock(&inner.members).remove(&self.root).unwrap_or_default();
        if let Ok(followed) = &inner.followed {
            let mut followed = lock(followed);
            for pid in std::iter::once(self.root).chain(members) {
                // Members that exited are gone already.
                let _ = followed.remove(&pid);
            }
        }
    }
}
