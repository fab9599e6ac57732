//! Window holds: the starts of windows that are still open (a Profile call,
//! a session, a Top stream), below which the store may coarsen its buckets
//! but at and after which it keeps them as drained, so that a window cut at
//! drain boundaries gets exactly its samples however long it stays open.
//!
//! This module owns the set of open holds; it must not know about buckets.

use std::{
    collections::BTreeMap,
    fmt,
    sync::{Arc, Mutex},
    time::SystemTime,
};

/// The open holds, shared by the store (which reads the oldest) and the API
/// (which takes them). Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct WindowHolds {
    open: Arc<Mutex<BTreeMap<SystemTime, usize>>>,
}

impl WindowHolds {
    /// Holds the store's buckets from `at` on until the returned hold drops.
    /// Take it before cutting the window it protects, with `at` no later than
    /// the cut.
    pub fn hold(&self, at: SystemTime) -> WindowHold {
        *crate::lock(&self.open).entry(at).or_default() += 1;
        WindowHold {
            holds: self.clone(),
            at,
        }
    }

    /// The earliest instant held, if any.
    pub fn oldest(&self) -> Option<SystemTime> {
        crate::lock(&self.open).keys().next().copied()
    }

    fn release(&self, at: SystemTime) {
        let mut open = crate::lock(&self.open);
        if let Some(count) = open.get_mut(&at) {
            *count -= 1;
            if *count == 0 {
                open.remove(&at);
            }
        }
    }
}

/// One open window's hold on the store; released when dropped.
pub struct WindowHold {
    holds: WindowHolds,
    at: SystemTime,
}

impl WindowHold {
    pub fn at(&self) -> SystemTime {
        self.at
    }
}

impl Drop for WindowHold {
    fn drop(&mut self) {
        self.holds.release(self.at);
    }
}

impl Clone for WindowHold {
    fn clone(&self) -> Self {
        self.holds.hold(self.at)
    }
}

impl PartialEq for WindowHold {
    fn eq(&self, other: &Self) -> bool {
        self.at == other.at
    }
}

impl fmt::Debug for WindowHold {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WindowHold").field("at", &self.at).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn the_oldest_open_hold_counts() {
        let holds = WindowHolds::default();
        assert_eq!(holds.oldest(), None);
        let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
        let late = holds.hold(at(20));
        let early = holds.hold(at(10));
        let early_again = early.clone();
        assert_eq!(holds.oldest(), Some(at(10)));
        drop(early);
        assert_eq!(holds.oldest(), Some(at(10)), "a clone still holds");
        drop(early_again);
        assert_eq!(holds.oldest(), Some(at(20)));
        assert_eq!(late.at(), at(20));
        drop(late);
        assert_eq!(holds.oldest(), None);
    }
}
