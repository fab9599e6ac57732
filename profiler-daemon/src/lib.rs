//! profilerd: an always-on, system-wide sampling profiler.
//!
//! Data flows one way: the eBPF program samples every CPU into kernel maps
//! ([`sampling`]); the [`drain`] reads them into raw samples; the
//! [`processes`] table normalizes user addresses while processes are alive;
//! the [`symbolize`]r names them; the [`store`] aggregates them in
//! time-stamped buckets; reports ([`report`]) are rendered from a
//! [`profile::Profile`] of any window and served over gRPC ([`api`]). The
//! [`collector`] runs that pipeline; [`config`] holds the settings.

pub mod daemon;
pub mod kernel;
pub mod peek;
pub mod pipeline;
pub mod profile;
pub mod proto;
pub mod report;
pub mod service;
pub mod store;
pub mod symbols;

/// Quotes what a request sent, for an error message: at most 64
/// characters of it, and its length when it was longer, so that an error
/// never echoes a huge input back.
pub(crate) fn quote(text: &str) -> String {
    const SHOWN: usize = 64;
    match text.char_indices().nth(SHOWN) {
        None => format!("{text:?}"),
        Some((end, _)) => format!("{:?}… ({} bytes)", &text[..end], text.len()),
    }
}

/// Locks a mutex, taking over the data of a holder that panicked: one
/// failed request or pipeline thread must not take the daemon down with it.
pub(crate) fn lock<T>(mutex: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Read-locks a lock, as [`lock`] locks a mutex.
pub(crate) fn read_lock<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Write-locks a lock, as [`lock`] locks a mutex.
pub(crate) fn write_lock<T>(lock: &std::sync::RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    #[test]
    fn quotes_are_short() {
        assert_eq!(super::quote("abc"), "\"abc\"");
        let long = "é".repeat(100);
        let quoted = super::quote(&long);
        assert!(quoted.ends_with("… (200 bytes)"), "{quoted}");
        assert_eq!(quoted.chars().filter(|&c| c == 'é').count(), 64);
    }
}
