//! profilerd: an always-on, system-wide sampling profiler.
//!
//! One folder per layer. Samples flow from the kernel up this list and
//! requests come down it; each layer uses only those before it (`cargo
//! xtask lint` fails on an import cycle between these modules):
//!
//! - [`config_format`], [`memory`], [`tasks`]: leaves every layer may use —
//!   how the configuration writes durations; one memory budget for the
//!   whole daemon, divided among the parts that hold memory, and what the
//!   heap and the kernel say is used; what `/proc` says of a task
//!   (credentials, groups, cgroups, namespace pid) and command names.
//! - [`source_files`]: a leaf too: the source files the web view's heatmap
//!   may show, read only under `http_source_dirs` and the rules that keep
//!   a root daemon from reading files for others.
//! - [`proto`]: the API's protobuf types (the client crate's) and the gRPC
//!   server generated on them.
//! - [`kernel`]: the eBPF programs sample every CPU (on CPU, off CPU,
//!   allocations, peeks) into kernel maps and rings; the drain reads them
//!   out, a generation at a time, as raw samples.
//! - [`unwind`]: user stacks unwound from the copies the kernel took, with
//!   each binary's unwind information (framehop).
//! - [`symbols`]: the process table (mappings, unwinders), JIT names from
//!   perf maps and the blazesym symbolizer.
//! - [`store`]: time-stamped buckets per thread and stack, any window of
//!   which becomes a self-contained [`profile::Profile`].
//! - [`pipeline`]: moves each drained batch on, on its own threads: stacks
//!   unwound, addresses normalized and named, then into the store (or, for
//!   a peek's samples and sampled allocations, to the request that waits
//!   for them).
//! - [`allocs`]: allocation profiles of one process (what it allocates and
//!   still holds), from the allocator uprobes attached for their duration.
//! - [`peek`]: the thread-by-thread looks at one process that a signal or
//!   a request starts.
//! - [`service`]: what the daemon offers (profiles, sessions, queries,
//!   diffs, top, peeks, allocations, status), authorized and validated on
//!   domain types.
//! - [`transport`]: the gRPC API and the HTTP routes and web view, thin
//!   shims over the service, and the listeners that serve them.
//! - [`export`]: pushes the windows of the store to fleet profile stores
//!   (Pyroscope, OTLP), in the background, through the service.
//! - [`daemon`]: the process itself: configuration, reloads, logs, systemd.
//!
//! [`profile`] holds the domain values every layer shares. It and
//! [`report`] are the crate `profilerd-report` (`profiler-daemon/report`),
//! re-exported here: pure code, compiled without the daemon's dependencies,
//! so that it cannot reach the store, the symbolizer or the kernel.

// The pure code, a crate of its own (profiler-daemon/report): no store, no
// kernel. Re-exported so that `crate::profile::…` and `crate::report::…`
// name it here as before.
pub use profilerd_report::{profile, report};

pub mod allocs;
pub mod config_format;
pub mod daemon;
pub mod export;
pub mod kernel;
pub mod memory;
pub mod peek;
pub mod pipeline;
pub mod proto;
pub mod service;
pub mod source_files;
pub mod store;
pub mod symbols;
pub mod tasks;
pub mod transport;
pub mod unwind;

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
