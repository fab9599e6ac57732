//! Open-ended profiling sessions (StartProfile … StopProfile), like
//! ProfileEndpoints' /profile_start and /profile_stop.
//!
//! A session is a window over the store that is still open: this module
//! owns the open sessions, their ids, who may stop them and the limits on
//! them (a share of `max_sessions` is kept for root and the admin group,
//! so other users cannot lock them out). It must not hold samples:
//! stopping a session reads its window from the store.

use std::{collections::HashMap, time::SystemTime};

use crate::profile::ProfileMode;

use crate::{
    service::access::{Asker, CallerKey},
    store::{SampleAccess, Selector, WindowHold},
};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SessionError {
    #[error(
        "{open} profiling sessions are already open (the limit is max_sessions = {limit}); stop \
         one first (`profilerctl sessions` lists them)"
    )]
    TooMany { open: usize, limit: usize },
    #[error(
        "{open} profiling sessions of users are open, and the last {reserved} of max_sessions = \
         {limit} are kept for root and the admin group; stop one of yours first"
    )]
    Reserved {
        open: usize,
        limit: usize,
        reserved: usize,
    },
    #[error(
        "{open} profiling sessions of this caller are already open (the limit is \
         max_sessions_per_caller = {limit}); stop one first"
    )]
    TooManyForCaller { open: usize, limit: usize },
    #[error(
        "no open profiling session has id {0:?}; it was never started, already stopped, or the \
         daemon restarted (`profilerctl sessions` lists the open ones)"
    )]
    Unknown(String),
    #[error(
        "permission denied: session {0:?} belongs to another caller; only its owner may stop it, \
         or root and the admin group with `profilerctl stop --force`"
    )]
    NotYours(String),
}

/// An open session.
#[derive(Clone, Debug, PartialEq)]
pub struct Session {
    /// Who opened it (sessions are bounded per caller too).
    pub owner: CallerKey,
    /// Whose samples its report may hold: its owner's rights.
    pub access: SampleAccess,
    /// Opened by root or the admin group (not counted against the room
    /// kept for them).
    pub privileged: bool,
    pub start: SystemTime,
    /// Keeps the store's buckets from the start on as drained until the
    /// session is stopped.
    pub hold: WindowHold,
    pub selector: Selector,
    pub mode: ProfileMode,
    /// The family of the selected process, when the session follows its
    /// children: its pids replace the selector's at the end.
    pub family: Option<std::sync::Arc<crate::kernel::families::Family>>,
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

    /// Sessions kept for root and the admin group: a quarter of the limit,
    /// at least one (unless the limit is one).
    pub fn reserved(&self) -> usize {
        match self.limit {
            0 | 1 => 0,
            limit => (limit / 4).max(1),
        }
    }

    /// Opens a session and returns its id (random, so it cannot be guessed).
    pub fn open(&mut self, session: Session, by: Asker) -> Result<String, SessionError> {
        let (open, limit) = (self.open.len(), self.limit);
        if open >= limit {
            return Err(SessionError::TooMany { open, limit });
        }
        let reserved = self.reserved();
        let of_users = self.open.values().filter(|open| !open.privileged).count();
        if !by.privileged() && of_users + reserved >= limit {
            return Err(SessionError::Reserved {
                open: of_users,
                limit,
                reserved,
            });
        }
        let of_owner = self
            .open
            .values()
            .filter(|open| open.owner == session.owner)
            .count();
        if of_owner >= self.per_caller {
            return Err(SessionError::TooManyForCaller {
                open: of_owner,
                limit: self.per_caller,
            });
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

    /// Closes a session, returning it: its owner may, and root and the
    /// admin group may `force` it.
    pub fn close(&mut self, id: &str, by: Asker, force: bool) -> Result<Session, SessionError> {
        let session = self
            .open
            .get(id)
            .ok_or_else(|| SessionError::Unknown(id.to_owned()))?;
        if session.owner != by.key && !(by.privileged() && force) {
            return Err(SessionError::NotYours(id.to_owned()));
        }
        self.open
            .remove(id)
            .ok_or_else(|| SessionError::Unknown(id.to_owned()))
    }

    /// The open sessions `by` may see (all of them for root and the admin
    /// group), oldest first, with their ids.
    pub fn list(&self, by: Asker) -> Vec<(String, Session)> {
        let mut sessions: Vec<(String, Session)> = self
            .open
            .iter()
            .filter(|(_, session)| by.privileged() || session.owner == by.key)
            .map(|(id, session)| (id.clone(), session.clone()))
            .collect();
        sessions.sort_by_key(|(id, session)| (session.start, id.clone()));
        sessions
    }

    pub fn len(&self) -> usize {
        self.open.len()
    }

    pub fn is_empty(&self) -> bool {
        self.open.is_empty()
    }
}

pub(super) fn new_id() -> String {
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

    use crate::service::access::{
        Caller,
        testing::{ROOT, user},
    };

    fn owned_by(owner: CallerKey) -> Session {
        let start = SystemTime::now();
        Session {
            owner,
            access: SampleAccess::All,
            privileged: owner == CallerKey::User(0),
            start,
            hold: crate::store::WindowHolds::default().hold(start),
            selector: Selector::default(),
            mode: ProfileMode::Cpu,
            family: None,
        }
    }

    #[test]
    fn open_close_and_limits() {
        let mut sessions = Sessions::new(2, 2);
        let a = sessions.open(owned_by(ROOT.key), ROOT).unwrap();
        let b = sessions.open(owned_by(ROOT.key), ROOT).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 24);
        assert_eq!(
            sessions.open(owned_by(ROOT.key), ROOT),
            Err(SessionError::TooMany { open: 2, limit: 2 })
        );
        sessions.close(&a, ROOT, false).unwrap();
        assert_eq!(
            sessions.close(&a, ROOT, false),
            Err(SessionError::Unknown(a.clone()))
        );
        assert_eq!(sessions.len(), 1);
    }

    #[test]
    fn each_caller_has_its_own_bound() {
        let mut sessions = Sessions::new(10, 1);
        sessions
            .open(owned_by(CallerKey::User(5)), user(5))
            .unwrap();
        assert_eq!(
            sessions.open(owned_by(CallerKey::User(5)), user(5)),
            Err(SessionError::TooManyForCaller { open: 1, limit: 1 })
        );
        sessions
            .open(
                owned_by(CallerKey::Remote),
                Asker {
                    caller: Caller::Root,
                    key: CallerKey::Remote,
                },
            )
            .unwrap();
    }

    #[test]
    fn users_cannot_take_the_room_kept_for_root() {
        let mut sessions = Sessions::new(8, 8);
        assert_eq!(sessions.reserved(), 2);
        for uid in 1..=6 {
            sessions
                .open(owned_by(CallerKey::User(uid)), user(uid))
                .unwrap();
        }
        assert!(matches!(
            sessions.open(owned_by(CallerKey::User(7)), user(7)),
            Err(SessionError::Reserved { reserved: 2, .. })
        ));
        sessions.open(owned_by(ROOT.key), ROOT).unwrap();
        sessions.open(owned_by(ROOT.key), ROOT).unwrap();
        assert!(matches!(
            sessions.open(owned_by(ROOT.key), ROOT),
            Err(SessionError::TooMany { .. })
        ));
        // Root's sessions do not shrink the users' room.
        let (id, _) = sessions.list(user(1)).pop().unwrap();
        sessions.close(&id, user(1), false).unwrap();
        sessions
            .open(owned_by(CallerKey::User(7)), user(7))
            .unwrap();
        assert_eq!(Sessions::new(1, 1).reserved(), 0);
    }

    #[test]
    fn only_the_owner_stops_a_session_or_an_admin_by_force() {
        let mut sessions = Sessions::new(10, 10);
        let mine = sessions
            .open(owned_by(CallerKey::User(5)), user(5))
            .unwrap();
        assert_eq!(
            sessions.close(&mine, user(6), true),
            Err(SessionError::NotYours(mine.clone()))
        );
        assert_eq!(
            sessions.close(&mine, ROOT, false),
            Err(SessionError::NotYours(mine.clone()))
        );
        assert_eq!(sessions.list(user(6)).len(), 0);
        assert_eq!(sessions.list(user(5)).len(), 1);
        assert_eq!(sessions.list(ROOT)[0].0, mine);
        sessions.close(&mine, ROOT, true).unwrap();
        let again = sessions
            .open(owned_by(CallerKey::User(5)), user(5))
            .unwrap();
        sessions.close(&again, user(5), false).unwrap();
        assert!(sessions.is_empty());
    }
}
