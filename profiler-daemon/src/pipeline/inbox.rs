//! Where the sample pipeline leaves the symbolized samples that go to one
//! request rather than to the store (a peek's, an allocation profile's),
//! until the request that asked for them takes them.
//!
//! Owns only those samples, per process. It must not aggregate or report
//! them.

use std::sync::{
    Mutex,
    atomic::{AtomicU64, Ordering},
};

use rustc_hash::FxHashMap as HashMap;

use crate::symbols::symbolizer::SymbolizedSample;

/// The inboxes of the requests that take their samples themselves.
#[derive(Clone, Debug, Default)]
pub struct Inboxes {
    /// Peek samples, by peeked process.
    pub peeks: std::sync::Arc<SampleInbox>,
    /// Sampled allocations, by profiled process.
    pub allocations: std::sync::Arc<SampleInbox>,
}

/// Samples by process, for the processes a request collects them for.
#[derive(Debug, Default)]
pub struct SampleInbox {
    open: Mutex<HashMap<u32, Vec<SymbolizedSample>>>,
    stray: AtomicU64,
}

impl SampleInbox {
    /// Starts collecting the samples of `pid`, dropping any left over.
    pub fn open(&self, pid: u32) {
        self.lock().insert(pid, Vec::new());
    }

    /// Starts collecting the samples of `pid` unless a request already
    /// does; false then.
    pub fn open_new(&self, pid: u32) -> bool {
        match self.lock().entry(pid) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Vec::new());
                true
            }
        }
    }

    /// Stops collecting for `pid` and hands over what it collected.
    pub fn close(&self, pid: u32) -> Vec<SymbolizedSample> {
        self.lock().remove(&pid).unwrap_or_default()
    }

    /// Files samples under their processes, dropping (and counting) those
    /// of processes no request is open for (one that failed or ended early).
    pub fn deliver(&self, samples: impl IntoIterator<Item = SymbolizedSample>) {
        let mut open = self.lock();
        let mut dropped = 0;
        for sample in samples {
            match open.get_mut(&sample.thread.pid) {
                Some(collected) => collected.push(sample),
                None => dropped += sample.count,
            }
        }
        self.stray.fetch_add(dropped, Ordering::Relaxed);
    }

    /// Copies the samples of processes being peeked at (off-CPU time, which
    /// goes to the store too) into their peeks.
    pub fn copy_in<'a>(&self, samples: impl IntoIterator<Item = &'a SymbolizedSample>) {
        let mut open = self.lock();
        if open.is_empty() {
            return;
        }
        for sample in samples {
            if let Some(collected) = open.get_mut(&sample.thread.pid) {
                collected.push(sample.clone());
            }
        }
    }

    /// Samples dropped by [`SampleInbox::deliver`] since start.
    pub fn stray_samples(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Vec<SymbolizedSample>>> {
        crate::lock(&self.open)
    }
}
