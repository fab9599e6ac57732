//! From addresses to names: the process table records each process's
//! memory mappings while it lives and normalizes its user addresses to
//! (binary, offset) (`processes`), unwinding the stack copies of its
//! samples with the binaries' unwind information first (`unwind`) and
//! naming JIT code from its perf map (`perf_map`); the symbolizer names
//! the rest, and kernel addresses, with blazesym (`symbolizer`).
//! `allocators` finds the allocator functions a process maps, for the
//! allocation uprobes.
//!
//! This layer owns what it knows of processes and binaries; it must not
//! read kernel maps, store samples or report.

pub mod allocators;
pub mod mappings;
pub mod perf_map;
pub mod processes;
pub mod symbolizer;
pub mod unwind;
pub mod unwind_rows;
