//! The daemon as a process: its configuration (`config`) and live reloads
//! (`reload`), its logs (`logging`) and its dialogue with systemd
//! (`systemd`).
//!
//! This layer owns the process-wide settings and their changes; it must not
//! sample, store or serve.

pub mod config;
pub mod logging;
pub mod reload;
pub mod systemd;

/// Keeps the C allocator to two arenas. glibc gives each busy thread its
/// own (up to eight per CPU), and the daemon's threads (drain, unwinding,
/// symbolizing, serving) each keep freed memory in theirs: resident memory
/// then grows with the number of threads rather than with what is held.
/// Call before any thread starts.
pub fn limit_allocator_arenas() {
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only sets an allocator parameter; no thread has
    // started, so no allocation runs concurrently.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}
