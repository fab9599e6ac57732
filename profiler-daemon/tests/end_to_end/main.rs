//! End-to-end tests: the real daemon binary loads the real eBPF programs,
//! samples real workloads (small C programs built here) and is asked for
//! profiles through the real gRPC API and the real CLI.
//!
//! They need root (BPF); `cargo xtask test` runs them as root. Run as
//! another user they fail, saying so, rather than pass without testing.

mod access;
mod allocs;
mod allocs_probes;
mod api_errors;
mod cli;
mod cli_habits;
mod cross_user;
mod deployment;
mod faults;
mod foreign_client;
mod history;
mod http;
mod http_guard;
mod http_users;
mod interpreted;
mod lifecycle;
mod memory_budget;
mod metrics;
mod offcpu;
mod peeks;
mod perf_maps;
mod pprof;
mod profiles;
mod push;
mod python_reports;
mod reload;
mod remote;
mod requirements;
mod robustness;
mod sessions;
mod support;
mod targets;
mod timelines;
#[cfg(feature = "unwind-tables-prototype")]
mod unwind_tables;
mod unwinding;
mod unwinding_lives;
mod unwinding_sparse;
mod web_browser;
mod web_python;
mod web_view;
mod web_view_checks;
mod web_view_functions;
mod web_view_heatmap;
