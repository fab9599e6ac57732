//! What profilerd's eBPF program binaries share: helpers that own no map
//! and no program (the user registers a sample's unwinding starts from,
//! walked stacks stored in the stacks map a program hands in). The programs
//! live in the binaries, one object each, built for `bpfel-unknown-none` by
//! profiler-daemon's build script: `profiler` (src/main.rs), the object the
//! daemon ships, and with the `unwind-tables-prototype` feature
//! `unwind_tables_prototype` (src/bin/), design 2's prototype, which only
//! the benchmark and its own test load.
//!
//! On the host the library is empty: the daemon names this crate as a
//! build dependency only so that cargo rebuilds it when this crate changes.
#![no_std]

#[cfg(target_arch = "bpf")]
pub mod registers;
#[cfg(target_arch = "bpf")]
pub mod stacks;
