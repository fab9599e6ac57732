//! The bounds on what one caller may hold open or ask for: streams per
//! caller (a slot released when the stream ends), and the size of a reply.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
};

use super::{ServiceError, access::CallerKey};
use crate::lock;

/// The service's bounds, from the configuration.
#[derive(Clone, Copy, Debug)]
pub struct ServiceLimits {
    pub max_sessions: usize,
    pub max_sessions_per_caller: usize,
    pub max_streams_per_caller: usize,
    pub max_response_bytes: u64,
}

/// Streams open per caller.
#[derive(Clone, Debug, Default)]
pub struct StreamSlots {
    open: Arc<Mutex<HashMap<CallerKey, usize>>>,
}

/// One open stream; dropping it (the stream ended or its client left)
/// frees the slot.
pub struct StreamSlot {
    caller: CallerKey,
    open: Arc<Mutex<HashMap<CallerKey, usize>>>,
}

impl StreamSlots {
    pub fn acquire(&self, caller: CallerKey, limit: usize) -> Result<StreamSlot, ServiceError> {
        let mut open = lock(&self.open);
        let count = open.entry(caller).or_default();
        if *count >= limit {
            return Err(ServiceError::ResourceExhausted(format!(
                "{count} streams are already open for this caller (max_streams_per_caller = \
                 {limit}); close one first"
            )));
        }
        *count += 1;
        Ok(StreamSlot {
            caller,
            open: self.open.clone(),
        })
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = lock(&self.open);
        if let Some(count) = open.get_mut(&self.caller) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                open.remove(&self.caller);
            }
        }
    }
}

/// Refuses a reply larger than the bound, saying how to make it smaller.
pub fn check_reply_size(bytes: usize, limit: u64) -> Result<(), ServiceError> {
    if bytes as u64 <= limit {
        return Ok(());
    }
    Err(ServiceError::ResourceExhausted(format!(
        "the report is {} bytes, over max_response_bytes ({limit}); narrow the selector or the \
         window, raise mincount or lower maxdepth, or ask for pprof (the most compact format)",
        bytes
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_bounded_per_caller_and_freed_on_drop() {
        let slots = StreamSlots::default();
        let alice = CallerKey::User(1000);
        let first = slots.acquire(alice, 2).unwrap();
        let _second = slots.acquire(alice, 2).unwrap();
        assert!(matches!(
            slots.acquire(alice, 2),
            Err(ServiceError::ResourceExhausted(_))
        ));
        let _other = slots.acquire(CallerKey::Remote, 2).unwrap();
        drop(first);
        slots.acquire(alice, 2).unwrap();
    }

    #[test]
    fn replies_over_the_bound_are_refused() {
        assert!(check_reply_size(10, 10).is_ok());
        assert!(matches!(
            check_reply_size(11, 10),
            Err(ServiceError::ResourceExhausted(_))
        ));
    }
}
