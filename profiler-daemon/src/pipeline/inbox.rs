//! Where the sample pipeline leaves the symbolized samples that go to one
//! request rather than to the store (a peek's, an allocation profile's),
//! until the request that asked for them takes them.
//!
//! Owns only those samples, per process, within a bound in bytes (the
//! peeks' share of the memory budget): past it, samples are dropped and
//! counted, and the request's report says so. It must not aggregate or
//! report them.

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
    open: Mutex<Open>,
    stray: AtomicU64,
    /// The most bytes held (0: no limit).
    limit: AtomicU64,
}

/// The samples collected, per process, and what they hold.
#[derive(Debug, Default)]
struct Open {
    by_process: HashMap<u32, Collected>,
    bytes: u64,
    /// Samples dropped since start because the inbox was full.
    dropped: u64,
}

/// One process's samples, and those dropped for it (inbox full).
#[derive(Debug, Default)]
struct Collected {
    samples: Vec<SymbolizedSample>,
    bytes: u64,
    dropped: u64,
}

/// What a sample held in an inbox costs, roughly: its thread's identity,
/// its stack's pointers, its ticks' times and the vector's slot.
fn sample_bytes(sample: &SymbolizedSample) -> u64 {
    let pointers = sample.stack.len() + sample.times_ns.capacity();
    (std::mem::size_of::<SymbolizedSample>() + pointers * 8) as u64 + 64
}

/// What a request's inbox gave it.
#[derive(Debug, Default)]
pub struct Delivered {
    pub samples: Vec<SymbolizedSample>,
    /// Samples (by count) dropped because the inbox was full.
    pub dropped: u64,
}

impl Open {
    /// Files `sample` under `pid` if it is collected and fits; says
    /// whether it was collected. Each process collected for has an equal
    /// share of `limit`, so that one request's storm of samples takes no
    /// room from another's.
    fn file(&mut self, sample: SymbolizedSample, limit: u64) -> bool {
        let bytes = sample_bytes(&sample);
        let share = limit / (self.by_process.len() as u64).max(1);
        let Some(collected) = self.by_process.get_mut(&sample.thread.pid) else {
            return false;
        };
        if limit > 0 && (self.bytes + bytes > limit || collected.bytes + bytes > share) {
            collected.dropped += sample.count;
            self.dropped += sample.count;
            return true;
        }
        collected.bytes += bytes;
        self.bytes += bytes;
        collected.samples.push(sample);
        true
    }
}

impl SampleInbox {
    /// Holds at most `bytes` of samples (0: no limit).
    pub fn set_limit(&self, bytes: u64) {
        self.limit.store(bytes, Ordering::Relaxed);
    }

    /// Starts collecting the samples of `pid`, dropping any left over.
    pub fn open(&self, pid: u32) {
        let mut open = self.lock();
        if let Some(left) = open.by_process.insert(pid, Collected::default()) {
            open.bytes -= left.bytes;
        }
    }

    /// Starts collecting the samples of `pid` unless a request already
    /// does; false then.
    pub fn open_new(&self, pid: u32) -> bool {
        match self.lock().by_process.entry(pid) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(entry) => {
                entry.insert(Collected::default());
                true
            }
        }
    }

    /// Stops collecting for `pid` and hands over what it collected.
    pub fn close(&self, pid: u32) -> Vec<SymbolizedSample> {
        self.take(pid).samples
    }

    /// Stops collecting for `pid` and hands over what it collected, and
    /// how many samples did not fit.
    pub fn take(&self, pid: u32) -> Delivered {
        let mut open = self.lock();
        let collected = open.by_process.remove(&pid).unwrap_or_default();
        open.bytes -= collected.bytes;
        Delivered {
            samples: collected.samples,
            dropped: collected.dropped,
        }
    }

    /// Files samples under their processes, dropping (and counting) those
    /// of processes no request is open for (one that failed or ended early).
    pub fn deliver(&self, samples: impl IntoIterator<Item = SymbolizedSample>) {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut open = self.lock();
        let mut stray = 0;
        for sample in samples {
            let count = sample.count;
            if !open.file(sample, limit) {
                stray += count;
            }
        }
        self.stray.fetch_add(stray, Ordering::Relaxed);
    }

    /// Copies the samples of processes being peeked at (off-CPU time, which
    /// goes to the store too) into their peeks.
    pub fn copy_in<'a>(&self, samples: impl IntoIterator<Item = &'a SymbolizedSample>) {
        let limit = self.limit.load(Ordering::Relaxed);
        let mut open = self.lock();
        if open.by_process.is_empty() {
            return;
        }
        for sample in samples {
            if open.by_process.contains_key(&sample.thread.pid) {
                open.file(sample.clone(), limit);
            }
        }
    }

    /// Samples dropped by [`SampleInbox::deliver`] since start.
    pub fn stray_samples(&self) -> u64 {
        self.stray.load(Ordering::Relaxed)
    }

    /// Bytes held now, and samples dropped since start because the inbox
    /// was full.
    pub fn usage(&self) -> (u64, u64) {
        let open = self.lock();
        (open.bytes, open.dropped)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        crate::lock(&self.open)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{profile::ThreadInfo, symbols::symbolizer::SymbolizedSample};

    fn sample(pid: u32) -> SymbolizedSample {
        SymbolizedSample {
            thread: ThreadInfo::of_test(pid),
            kind: profiler_common::SampleKind::Peek,
            stack: Vec::new(),
            count: 1,
            weight: 0,
            allocation_id: 0,
            times_ns: Vec::new(),
        }
    }

    #[test]
    fn a_full_inbox_drops_and_counts_what_does_not_fit() {
        let inbox = SampleInbox::default();
        let one = sample_bytes(&sample(1));
        inbox.set_limit(one * 3);
        inbox.open(1);
        inbox.deliver((0..5).map(|_| sample(1)).chain([sample(2)]));
        assert_eq!(inbox.usage(), (one * 3, 2));
        assert_eq!(inbox.stray_samples(), 1);
        let delivered = inbox.take(1);
        assert_eq!((delivered.samples.len(), delivered.dropped), (3, 2));
        assert_eq!(inbox.usage(), (0, 2));
    }

    #[test]
    fn each_process_collected_for_keeps_its_share_of_the_inbox() {
        let inbox = SampleInbox::default();
        let one = sample_bytes(&sample(1));
        inbox.set_limit(one * 4);
        inbox.open(1);
        inbox.open(2);
        // A storm of process 1's samples first: it fills its half only.
        inbox.deliver((0..10).map(|_| sample(1)).chain((0..2).map(|_| sample(2))));
        let (storm, calm) = (inbox.take(1), inbox.take(2));
        assert_eq!((storm.samples.len(), storm.dropped), (2, 8));
        assert_eq!((calm.samples.len(), calm.dropped), (2, 0));
    }
}
