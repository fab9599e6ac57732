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
