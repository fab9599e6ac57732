//! Where the sample pipeline leaves the symbolized samples of peeks, until
//! the peek that asked for them takes them.
//!
//! Owns only those samples, per peeked process. It must not aggregate or
//! report them.

use std::sync::{
    Mutex,
    atomic::{AtomicU64, Ordering},
};

use rustc_hash::FxHashMap as HashMap;

use crate::symbols::symbolizer::SymbolizedSample;

/// Peek samples by process, for the processes being peeked at.
#[derive(Debug, Default)]
pub struct PeekInbox {
    open: Mutex<HashMap<u32, Vec<SymbolizedSample>>>,
    stray: AtomicU64,
}

impl PeekInbox {
    /// Starts collecting the samples of `pid`, dropping any left over.
    pub fn open(&self, pid: u32) {
        self.lock().insert(pid, Vec::new());
    }

    /// Stops collecting for `pid` and hands over what it collected.
    pub fn close(&self, pid: u32) -> Vec<SymbolizedSample> {
        self.lock().remove(&pid).unwrap_or_default()
    }

    /// Files samples under their processes, dropping (and counting) those
    /// of processes no peek is open for (a peek that failed or ended early).
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

    /// Samples dropped by [`PeekInbox::deliver`] since start.
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

    pub fn stray_samples(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, Vec<SymbolizedSample>>> {
        crate::lock(&self.open)
    }
}
