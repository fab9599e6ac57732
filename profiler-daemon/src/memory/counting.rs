//! The heap as it really is: a global allocator that counts the bytes
//! allocated and not yet freed (process-wide), and on each thread the net
//! bytes that thread allocated, so that a part working on one thread (the
//! symbolizer's parsing, a report's rendering) can measure what a call
//! cost ([`ThreadMeter`]); and what the threads doing transient work
//! (reports being made, [`TransientWork`]) hold together right now.
//!
//! Owns the counts; it must not decide anything from them. `profilerd`
//! installs [`CountingAllocator`] as its global allocator; where it is not
//! installed (the library's tests) every count reads zero.

use std::{
    alloc::{GlobalAlloc, Layout, System},
    cell::Cell,
    sync::atomic::{AtomicI64, AtomicU64, Ordering},
};

/// Bytes allocated and not freed, process-wide.
static HEAP: AtomicU64 = AtomicU64::new(0);

/// Net bytes the threads now doing transient work allocated since they
/// began it.
static TRANSIENT: AtomicI64 = AtomicI64::new(0);

thread_local! {
    /// Whether this thread does transient work now.
    static IN_TRANSIENT_WORK: Cell<bool> = const { Cell::new(false) };
    /// Net bytes this thread allocated (what it freed subtracted, whoever
    /// allocated it), and the highest that was since the last reset of
    /// the peak.
    static THREAD_NET: Cell<i64> = const { Cell::new(0) };
    static THREAD_PEAK: Cell<i64> = const { Cell::new(0) };
}

/// The system allocator, counting.
pub struct CountingAllocator;

fn charge(bytes: i64) {
    if bytes >= 0 {
        HEAP.fetch_add(bytes as u64, Ordering::Relaxed);
    } else {
        HEAP.fetch_sub(bytes.unsigned_abs(), Ordering::Relaxed);
    }
    if IN_TRANSIENT_WORK.try_with(Cell::get).unwrap_or(false) {
        TRANSIENT.fetch_add(bytes, Ordering::Relaxed);
    }
    // A thread being torn down has no counts left to keep.
    let _ = THREAD_NET.try_with(|net| {
        let now = net.get() + bytes;
        net.set(now);
        let _ = THREAD_PEAK.try_with(|peak| peak.set(peak.get().max(now)));
    });
}

// SAFETY: every method passes its arguments to the system allocator
// unchanged and returns what it returned; counting touches no allocation.
unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let pointer = unsafe { System.alloc(layout) };
        if !pointer.is_null() {
            charge(layout.size() as i64);
        }
        pointer
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let pointer = unsafe { System.alloc_zeroed(layout) };
        if !pointer.is_null() {
            charge(layout.size() as i64);
        }
        pointer
    }

    unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract is the system allocator's.
        unsafe { System.dealloc(pointer, layout) };
        charge(-(layout.size() as i64));
    }

    unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract is the system allocator's.
        let moved = unsafe { System.realloc(pointer, layout, new_size) };
        if !moved.is_null() {
            charge(new_size as i64 - layout.size() as i64);
        }
        moved
    }
}

/// Bytes of heap allocated and not freed (0 where the counting allocator
/// is not installed).
pub fn heap_bytes() -> u64 {
    HEAP.load(Ordering::Relaxed)
}

/// Measures what the current thread allocates between its start and a
/// reading: the net bytes still held, and the most held at any moment.
#[derive(Debug)]
pub struct ThreadMeter {
    start: i64,
}

impl ThreadMeter {
    pub fn start() -> Self {
        let start = THREAD_NET.with(Cell::get);
        THREAD_PEAK.with(|peak| peak.set(start));
        Self { start }
    }

    /// Net bytes allocated on this thread since the start (negative when
    /// more was freed).
    pub fn net(&self) -> i64 {
        THREAD_NET.with(Cell::get) - self.start
    }

    /// The most bytes held above the start at any moment since.
    pub fn peak(&self) -> u64 {
        (THREAD_PEAK.with(Cell::get) - self.start).max(0) as u64
    }
}

/// Bytes the threads doing transient work hold now, above what they held
/// when they began it.
pub fn transient_bytes() -> u64 {
    TRANSIENT.load(Ordering::Relaxed).max(0) as u64
}

/// Transient work on this thread (a report being made): what it allocates
/// counts in [`transient_bytes`] until it ends; what it leaves allocated
/// then (its answer, handed on) no longer does.
pub struct TransientWork {
    meter: ThreadMeter,
}

impl TransientWork {
    pub fn begin() -> Self {
        IN_TRANSIENT_WORK.with(|flag| flag.set(true));
        Self {
            meter: ThreadMeter::start(),
        }
    }

    /// The most it held at any moment so far.
    pub fn peak(&self) -> u64 {
        self.meter.peak()
    }
}

impl Drop for TransientWork {
    fn drop(&mut self) {
        IN_TRANSIENT_WORK.with(|flag| flag.set(false));
        TRANSIENT.fetch_sub(self.meter.net(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_meter_sees_its_threads_allocations() {
        // The tests do not install the allocator: charge by hand, as it
        // would.
        let meter = ThreadMeter::start();
        charge(1000);
        charge(500);
        charge(-1200);
        assert_eq!(meter.net(), 300);
        assert_eq!(meter.peak(), 1500);
        let other = std::thread::spawn(|| {
            let meter = ThreadMeter::start();
            charge(7);
            let net = meter.net();
            charge(-7);
            net
        });
        assert_eq!(other.join().unwrap(), 7);
        assert_eq!(meter.net(), 300, "another thread's are its own");
        charge(-300);
    }

    #[test]
    fn transient_work_counts_while_it_runs() {
        let work = std::thread::spawn(move || {
            let work = TransientWork::begin();
            charge(4096);
            let during = transient_bytes();
            charge(-1000);
            let peak = work.peak();
            drop(work);
            // What it left allocated was handed on: no longer counted.
            charge(-3096);
            (during, peak)
        });
        let (during, peak) = work.join().unwrap();
        assert!(during >= 4096, "{during}");
        assert_eq!(peak, 4096);
    }
}
