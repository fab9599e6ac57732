//! From addresses to names: the process table records each process's
//! memory mappings while it lives and normalizes its user addresses to
//! (binary, offset) (`processes`); the symbolizer names those, and kernel
//! addresses, with blazesym (`symbolizer`).
//!
//! This layer owns what it knows of processes and binaries; it must not
//! read kernel maps, store samples or report.

pub mod processes;
pub mod symbolizer;
pub mod unwind;
