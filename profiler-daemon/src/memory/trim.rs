//! The C allocator's tuning for a daemon whose large allocations come and
//! go with each report: one arena, and freed memory given back to the
//! system once reports stop, and at least every half minute (the store's
//! compactions and the symbolizer free memory too).
//!
//! Owns the process-wide allocator settings (glibc's `mallopt` and
//! `malloc_trim`); it must not decide what is allocated.

use std::time::Duration;

use tokio::sync::Notify;

/// How long after the last report freed memory is given back.
const IDLE_BEFORE_TRIM: Duration = Duration::from_secs(5);

/// At most this long between two trims, reports or not: the store's
/// compactions free their old tables too. Without it, a daemon holding the
/// scale run's storm (no reports) kept twice the heap after 5 minutes
/// (50 MiB against 13-28) and 10% more RSS.
const TRIM_INTERVAL: Duration = Duration::from_secs(30);

/// Told after each report.
static REPORTED: Notify = Notify::const_new();

/// Keeps the allocator to one arena. Call before any thread starts.
///
/// glibc gives each busy thread its own (up to eight per CPU), and the
/// daemon's threads (drain, unwinding, symbolizing, serving) each keep freed
/// memory in theirs: resident memory then grows with the number of threads
/// rather than with what is held. With two, a report served from the other
/// arena than the last allocated anew: over a 5-minute storm window
/// (`profilerctl query` of every format, one after another), peak RSS
/// rose from 188 MiB (after a trim) to 281 MiB with two arenas, from 167
/// to 236 MiB with one, at the same latencies (the threads' own caches
/// serve small allocations without the arena's lock).
///
/// Measured and left out: keeping freed memory for the next report (an
/// mmap threshold of 32 MiB and a trim threshold of 256 MiB) spared a large
/// report its page faults, 15-20% of its time, but peak RSS after the scale
/// run's reports grew from 1.9 to 2.5 times its RSS before them; a fixed
/// mmap threshold of 1 MiB (large buffers given back at once) kept RSS
/// within 1.3 times but made reports 2-3 times slower.
pub fn tune() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; no thread has
    // started, so no allocation runs concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 1);
    }
}

/// Call after each report, diff or export has read its window: the memory
/// they free is given back once they stop for a while.
pub fn after_report() {
    REPORTED.notify_one();
}

/// Gives free memory back to the system `IDLE_BEFORE_TRIM` after the
/// last report, and at least every `TRIM_INTERVAL`, for the daemon's
/// life.
pub async fn trim_when_idle() {
    loop {
        let since_trim = tokio::time::Instant::now();
        if tokio::time::timeout(TRIM_INTERVAL, REPORTED.notified())
            .await
            .is_ok()
        {
            // Reports that follow each other keep the memory, for a while.
            while since_trim.elapsed() < TRIM_INTERVAL
                && tokio::time::timeout(IDLE_BEFORE_TRIM, REPORTED.notified())
                    .await
                    .is_ok()
            {}
        }
        let trimmed = tokio::task::spawn_blocking(trim).await;
        if let Err(err) = trimmed {
            tracing::warn!("giving free memory back failed: {err}");
        }
    }
}

fn trim() {
    let started = std::time::Instant::now();
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only returns free memory of the allocator's
    // arenas to the system; it locks each arena while it works.
    unsafe {
        libc::malloc_trim(0);
    }
    // Other threads' allocations wait while an arena is trimmed.
    tracing::debug!(
        ms = started.elapsed().as_secs_f64() * 1e3,
        "gave free memory back"
    );
}
