//! The C allocator's tuning for a daemon whose large allocations come and
//! go with each report: freed memory is kept for the next report while
//! reports follow each other, and given back to the system once they stop.
//!
//! Owns the process-wide allocator settings (glibc's `mallopt` and
//! `malloc_trim`); it must not decide what is allocated.

use std::time::Duration;

use tokio::sync::Notify;

/// How long after the last report freed memory is given back.
pub const IDLE_BEFORE_TRIM: Duration = Duration::from_secs(5);

/// Free memory an arena keeps between reports.
#[cfg(target_env = "gnu")]
const KEPT_FREE_BYTES: i32 = 256 << 20;

/// Blocks up to this size come from the arenas, not mappings of their own.
#[cfg(target_env = "gnu")]
const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;

/// Told after each report.
static REPORTED: Notify = Notify::const_new();

/// Sets the allocator up. Call before any thread starts.
///
/// - Two arenas: glibc gives each busy thread its own (up to eight per
///   CPU), and the daemon's threads (drain, unwinding, symbolizing,
///   serving) each keep freed memory in theirs: resident memory then grows
///   with the number of threads rather than with what is held.
/// - Blocks up to 32 MiB come from the arenas rather than mappings of their
///   own, and an arena keeps up to 256 MiB free rather than giving it back
///   at once: a report of a large window allocates and frees tens of
///   megabytes, and with glibc's defaults every request faulted them in
///   anew (a fifth of a request's time at 200,000 stacks). [`trim_when_idle`]
///   gives the memory back once reports stop.
pub fn tune() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets allocator parameters; no thread has
    // started, so no allocation runs concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES);
        libc::mallopt(libc::M_TRIM_THRESHOLD, KEPT_FREE_BYTES);
    }
}

/// Call after each report, diff or export has read its window: the memory
/// they free is given back once they stop for a while.
pub fn after_report() {
    REPORTED.notify_one();
}

/// Gives free memory back to the system [`IDLE_BEFORE_TRIM`] after the
/// last report, for the daemon's life.
pub async fn trim_when_idle() {
    loop {
        REPORTED.notified().await;
        // Reports that follow each other keep the memory.
        while tokio::time::timeout(IDLE_BEFORE_TRIM, REPORTED.notified())
            .await
            .is_ok()
        {}
        let trimmed = tokio::task::spawn_blocking(trim).await;
        if let Err(err) = trimmed {
            tracing::warn!("giving free memory back failed: {err}");
        }
    }
}

fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's
    // arenas to the system; it locks each arena while it works.
    unsafe {
        libc::malloc_trim(0);
    }
}
