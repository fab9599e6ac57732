//! From addresses to names: the process table records each process's
//! memory mappings while it lives and normalizes its user addresses to
//! (binary, offset) (`processes`), having the stack copies of its
//! samples unwound first (by `crate::unwind`, with the unwind sections of
//! the binaries it maps); JIT
//! code is named from its perf map on a thread of its own (`jit_names`);
//! the symbolizer names the rest, and kernel addresses, with blazesym
//! (`symbolizer`). Every file read on behalf of a process is opened by
//! `process_files`, which refuses what a hostile user may put there.
//! `allocator_functions` finds the allocator functions a target process
//! maps, where the allocation uprobes go. `vdso` names the vDSO's
//! functions from the daemon's own copy of it.
//!
//! This layer owns what it knows of processes and binaries; it must not
//! read kernel maps, store samples or report.

pub mod allocator_functions;
pub mod jit_names;
pub mod mappings;
pub mod process_files;
pub mod processes;
pub mod python;
pub mod symbolizer;
pub mod vdso;
