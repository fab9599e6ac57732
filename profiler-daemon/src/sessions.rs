//! Open-ended profiling sessions (StartProfile … StopProfile), like
//! ProfileEndpoints' /profile_start and /profile_stop.
//!
//! A session is a window over the store that is still open: this module
//! owns the open sessions, their ids and the limits on them. It must not
//! hold samples: stopping a session reads its window from the store.

use std::{collections::HashMap, time::SystemTime};

use profiler_common::SampleKind;

use crate::store::{Selector, WindowHold};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error(
        "{open} profiling sessions are already open (the limit is max_sessions = {open}); stop one first"
    )]
    TooMany { open: usize },
    #[error(
        "{open} profiling sessions of this caller are already open (the limit is \
         max_sessions_per_caller = {open}); stop one first"
    )]
    TooManyForCaller { open: usize },
    #[error(
        "no open profiling session has id {0:?}; it was never started, already stopped, or the daemon restarted"
    )]
    Unknown(String),
}

/// An open session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// Who opened it (sessions are bounded per caller too).
    pub owner: crate::api::CallerKey,
    pub start: SystemTime,
    /// Keeps the store's buckets from the start on as drained until the
    /// session is stopped.
    pub hold: WindowHold,
    pub selector: Selector,
    pub kind: SampleKind,
}

#[derive(Debug)]
pub struct Sessions {
    open: HashMap<String, Session>,
    limit: usize,
    per_caller: usize,
}

impl Sessions {
    pub fn new(limit: usize, per_caller: usize) -> Self {
        Self {
            open: HashMap::new(),
            limit,
            per_caller,
        }
    }

    /// Opens a session and returns its id (random, so it cannot be guessed).
    pub fn open(&mut self, session: Session) -> Result<String, SessionError> {
        if self.open.len() >= self.limit {
            return Err(SessionError::TooMany {
                open: self.open.len(),
            });
        }
        let of_owner = self
            .open
            .values()
            .filter(|open| open.owner == session.owner)
            .count();
        if of_owner >= self.per_caller {
            return Err(SessionError::TooManyForCaller { open: of_owner });
        }
        let id = loop {
            let id = new_id();
            if !self.open.contains_key(&id) {
                break id;
            }
        };
        self.open.insert(id.clone(), session);
        Ok(id)
    }

    /// Closes a session, returning it.
    pub fn close(&mut self, id: &str) -> Result<Session, SessionError> {
        self.open
            .remove(id)
            .ok_or_else(|| SessionError::Unknown(id.to_owned()))
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

fn new_id() -> String {
    let mut bytes = [0_u8; 12];
    let mut filled = 0;
    while filled < bytes.len() {
        match rustix::rand::getrandom(&mut bytes[filled..], rustix::rand::GetRandomFlags::empty()) {
            Ok(n) => filled += n,
            Err(_) => {
                // getrandom cannot fail for lack of entropy after boot; fall
                // back on the time rather than fail the request.
                let nanos = SystemTime::now()
                    .duration_since(SystemTime::UNIX_EPOCH)
                    .unwrap_or_default()
                    .as_nanos();
                bytes[..8].copy_from_slice(&(nanos as u64).to_le_bytes());
                break;
            }
        }
    }
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session() -> Session {
        owned_by(crate::api::CallerKey::User(0))
    }

    fn owned_by(owner: crate::api::CallerKey) -> Session {
        let start = SystemTime::now();
        Session {
            owner,
            start,
            hold: crate::store::WindowHolds::default().hold(start),
            selector: Selector::default(),
            kind: SampleKind::CpuClock,
        }
    }

    #[test]
    fn open_close_and_limits() {
        let mut sessions = Sessions::new(2, 2);
        let a = sessions.open(session()).unwrap();
        let b = sessions.open(session()).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        assert_eq!(
            sessions.open(session()),
            Err(SessionError::TooMany { open: 2 })
        );
        sessions.close(&a).unwrap();
        assert_eq!(sessions.close(&a), Err(SessionError::Unknown(a.clone())));
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn each_caller_has_its_own_bound() {
        use crate::api::CallerKey;
        let mut sessions = Sessions::new(10, 1);
        sessions.open(owned_by(CallerKey::User(5))).unwrap();
        assert_eq!(
            sessions.open(owned_by(CallerKey::User(5))),
            Err(SessionError::TooManyForCaller { open: 1 })
        );
        sessions.open(owned_by(CallerKey::Remote)).unwrap();
    }
}
